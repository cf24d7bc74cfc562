"""A host-memory stand-in for CUDA device memory (tests only).

"Device pointers" are the addresses of numpy buffers kept alive here. The stand-in's
``execute_async_v3`` reads and writes only buffers it finds with :func:`buffer`, never an
address it was merely given: on a machine with a real CUDA runtime a test that forgot to
point the backend at this device would hand it real device pointers, and reading those as
host memory kills the process (TensorRT itself fails such a run with an error:
``cudaErrorIllegalAddress``, code 700 in the CUDA runtime API's ``cudaError_t``). Tests
choose this device explicitly (``install_standin`` in tests/test_trt_variants.py); it
counts allocations, so a test can prove every buffer was freed.
"""

from __future__ import annotations

import ctypes
from typing import Any

from reprobuild.backends.tensorrt.device import Device

_H2D, _D2H = 1, 2  # cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost
_LIVE: dict[int, Any] = {}  # every stand-in device buffer of this process, by address


def buffer(ptr: int, nbytes: int) -> Any | None:
    """The stand-in device buffer at ``ptr`` (a uint8 array) if it holds ``nbytes``, else
    None: an address no stand-in device allocated is never dereferenced."""
    buf = _LIVE.get(int(ptr))
    return buf if buf is not None and buf.nbytes >= nbytes else None


def host_device() -> Device:
    buffers: dict[int, Any] = {}
    streams: set[int] = set()

    def malloc(nbytes: int) -> int:
        import numpy as np

        buf = np.zeros(max(1, nbytes), np.uint8)
        buffers[int(buf.ctypes.data)] = _LIVE[int(buf.ctypes.data)] = buf
        return int(buf.ctypes.data)

    def free(ptr: int) -> None:
        del buffers[ptr]  # a double free or a foreign pointer fails the test
        del _LIVE[ptr]

    def memcpy(dst: int, src: int, nbytes: int, kind: int) -> None:
        ptr = dst if kind == _H2D else src
        if kind not in (_H2D, _D2H) or ptr not in buffers or buffers[ptr].nbytes < nbytes:
            raise AssertionError(f"stand-in memcpy kind {kind} to/from a foreign pointer")
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
