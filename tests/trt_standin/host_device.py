"""A host-memory stand-in for CUDA device memory (tests only).

"Device pointers" are the addresses of numpy buffers kept alive here, so the stand-in's
``execute_async_v3`` reads and writes them with ctypes exactly as a GPU kernel would use
device addresses. It counts allocations, so a test can prove every buffer was freed.
"""

from __future__ import annotations

import ctypes
from typing import Any

from reprobuild.backends.tensorrt.device import Device


def host_device() -> Device:
    buffers: dict[int, Any] = {}
    streams: set[int] = set()

    def malloc(nbytes: int) -> int:
        import numpy as np

        buf = np.zeros(max(1, nbytes), np.uint8)
        buffers[int(buf.ctypes.data)] = buf
        return int(buf.ctypes.data)

    def free(ptr: int) -> None:
        del buffers[ptr]  # a double free or a foreign pointer fails the test

    def memcpy(dst: int, src: int, nbytes: int, kind: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def stream_create() -> int:
        streams.add(len(streams) + 1)
        return len(streams)

    device = Device(
        how="host memory (test stand-in)",
        malloc=malloc,
        free=free,
        memcpy=memcpy,
        stream_create=stream_create,
        stream_synchronize=lambda s: None,
        stream_destroy=streams.discard,
    )
    device.live = buffers  # type: ignore[attr-defined]
    return device
