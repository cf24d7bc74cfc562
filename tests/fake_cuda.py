"""CUDA libraries answered in Python, for tests that must decide what CUDA a machine has.

``ctypes.CDLL`` is replaced (in the one module under test) by :func:`loader`, which hands out
a :class:`FakeLibrary` for the paths a test names and fails to load anything else, so a test
means the same on a machine with a real GPU and on one without. Every call is recorded.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Callable
from typing import Any

POISON = 0x8
"""A device pointer no process may read: dereferenced as host memory, it kills the process
(what the stand-in did with real device pointers before it kept to its own memory)."""


def out(ref: Any, value: Any) -> None:
    """Write through a ``ctypes.byref`` argument or into a ``create_string_buffer``."""
    target = getattr(ref, "_obj", ref)
    if isinstance(target, ctypes.Array):
        ctypes.memmove(target, value, len(value))
    else:
        target.value = value


class FakeLibrary:
    """A shared library as ``ctypes.CDLL`` gives it: ``functions`` by name, each returning
    a CUDA status; a missing name raises ``AttributeError`` as ctypes does."""

    def __init__(self, functions: dict[str, Callable[..., int]]) -> None:
        self.functions = functions
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., int]:
        if name not in self.__dict__.get("functions", {}):
            raise AttributeError(name)

        def call(*args: Any) -> int:
            self.calls.append(name)
            return self.functions[name](*args)

        return call


def cudart() -> FakeLibrary:
    """A CUDA 13 runtime whose allocations are :data:`POISON` pointers."""
    return FakeLibrary(
        {
            "cudaMalloc": lambda ref, n: out(ref, POISON) or 0,
            "cudaFree": lambda ptr: 0,
            "cudaMemcpy": lambda dst, src, n, kind: 0,  # device memory: never touched here
            "cudaStreamCreate": lambda ref: out(ref, 0x10) or 0,
            "cudaStreamSynchronize": lambda s: 0,
            "cudaStreamDestroy": lambda s: 0,
            "cudaRuntimeGetVersion": lambda ref: out(ref, 13000) or 0,
        }
    )


def driver(*gpus: tuple[str, int, int, int], init: int = 0) -> FakeLibrary:
    """A CUDA 13.0 driver (``libcuda``) with ``gpus`` as (name, major, minor, SM count);
    ``init`` is what ``cuInit`` returns (100: ``CUDA_ERROR_NO_DEVICE``)."""
    attrs = {75: 1, 76: 2, 16: 3}  # compute capability major, minor; multiprocessor count

    def attribute(ref: Any, attr: int, device: Any) -> int:
        out(ref, gpus[device.value][attrs[attr]])
        return 0

    return FakeLibrary(
        {
            "cuDriverGetVersion": lambda ref: out(ref, 13000) or 0,
            "cuInit": lambda flags: init,
            "cuGetErrorName": lambda code, ref: out(ref, b"CUDA_ERROR_NO_DEVICE") or 0,
            "cuDeviceGetCount": lambda ref: out(ref, len(gpus)) or 0,
            "cuDeviceGet": lambda ref, ordinal: out(ref, ordinal) or 0,
            "cuDeviceGetName": lambda buf, n, device: out(buf, gpus[device.value][0].encode()) or 0,
            "cuDeviceGetAttribute": attribute,
            "cuDeviceGetUuid_v2": lambda buf, device: out(buf, bytes(range(16))) or 0,
        }
    )


def loader(libraries: dict[str, FakeLibrary]) -> types.ModuleType:
    """A ``ctypes`` module whose ``CDLL`` loads only ``libraries`` (by path or name)."""
    fake = types.ModuleType("ctypes")
    fake.__dict__.update(vars(ctypes))

    def cdll(name: str, *args: Any, **kwargs: Any) -> FakeLibrary:
        if name not in libraries:
            raise OSError(f"{name}: cannot open shared object file (test: not installed)")
        return libraries[name]

    fake.CDLL = cdll  # type: ignore[attr-defined]
    return fake
