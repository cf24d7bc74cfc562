"""Device memory for running engines through TensorRT's own Python API.

The TensorRT wheels install no CUDA memory API for Python, and Polygraphy's ``TrtRunner``
looks for ``libcudart`` only on the system loader path, while pip puts it under
``site-packages/nvidia/...``. So ``run`` needs just five CUDA runtime calls (malloc,
memcpy, free, stream create/synchronize/destroy) and takes them from the first of:

1. ``libcudart`` through ctypes, searched where the pip wheels put it first
   (:func:`cuda_probe.cudart_candidates`), then on the loader path;
2. ``cuda-python`` (``cuda.bindings.runtime`` or the older ``cuda.cudart``);
3. ``cupy`` (``cupy.cuda.runtime``).

:func:`find_device` says which one was found (``Device.how``) or why none was.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reprobuild.backends.tensorrt import cuda_probe

_H2D, _D2H = 1, 2  # cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost


@dataclass
class Device:
    """Five CUDA runtime calls, whichever library provides them; pointers are ints."""

    how: str
    malloc: Callable[[int], int]
    free: Callable[[int], None]
    memcpy: Callable[[int, int, int, int], None]  # dst, src, nbytes, kind
    stream_create: Callable[[], int]
    stream_synchronize: Callable[[int], None]
    stream_destroy: Callable[[int], None]

    def to_device(self, ptr: int, array: Any) -> None:
        if array.nbytes:
            self.memcpy(ptr, int(array.ctypes.data), int(array.nbytes), _H2D)

    def to_host(self, array: Any, ptr: int) -> None:
        if array.nbytes:
            self.memcpy(int(array.ctypes.data), ptr, int(array.nbytes), _D2H)


# cudaError_t values (CUDA runtime API, driver_types.h) a user can act on.
CUDA_ERRORS = {
    2: "cudaErrorMemoryAllocation: out of GPU memory",
    3: "cudaErrorInitializationError: CUDA could not initialise",
    34: "cudaErrorStubLibrary: a stub libcuda was loaded instead of the driver's",
    35: "cudaErrorInsufficientDriver: the driver is older than this CUDA runtime",
    46: "cudaErrorDevicesUnavailable: the GPU is busy or in exclusive mode",
    100: "cudaErrorNoDevice: no GPU is visible",
    209: "cudaErrorNoKernelImageForDevice: built for another GPU",
    700: "cudaErrorIllegalAddress: the engine accessed invalid memory",
    999: "cudaErrorUnknown",
}


def _check(code: Any, what: str) -> None:
    """A CUDA runtime status: non-zero is an environment error (exit 3) naming the call,
    the code and, where known, what it means; never a bare RuntimeError (exit 4)."""
    code = int(code[0] if isinstance(code, tuple) else code)
    if code != 0:
        from reprobuild.errors import BackendUnavailable

        meaning = CUDA_ERRORS.get(code, "see cudaError_t in the CUDA runtime API")
        raise BackendUnavailable(
            f"{what} failed with CUDA error {code} ({meaning}); check the GPU and driver "
            "with `reprobuild doctor` and nvidia-smi"
        )


def _ctypes_device(lib: ctypes.CDLL, path: str) -> Device:
    lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.cudaFree.argtypes = [ctypes.c_void_p]
    lib.cudaStreamCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
    lib.cudaStreamDestroy.argtypes = [ctypes.c_void_p]

    def malloc(nbytes: int) -> int:
        ptr = ctypes.c_void_p()
        _check(lib.cudaMalloc(ctypes.byref(ptr), max(1, nbytes)), "cudaMalloc")
        return int(ptr.value or 0)

    def stream_create() -> int:
        stream = ctypes.c_void_p()
        _check(lib.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
        return int(stream.value or 0)

    return Device(
        how=f"libcudart via ctypes ({path})",
        malloc=malloc,
        free=lambda ptr: _check(lib.cudaFree(ptr), "cudaFree"),
        memcpy=lambda d, s, n, k: _check(lib.cudaMemcpy(d, s, n, k), "cudaMemcpy"),
        stream_create=stream_create,
        stream_synchronize=lambda s: _check(lib.cudaStreamSynchronize(s), "cudaStreamSync"),
        stream_destroy=lambda s: _check(lib.cudaStreamDestroy(s), "cudaStreamDestroy"),
    )


def _cuda_python_device() -> Device | None:
    try:
        from cuda.bindings import runtime as rt  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart as rt  # older cuda-python
        except ImportError:
            return None

    def malloc(nbytes: int) -> int:
        err, ptr = rt.cudaMalloc(max(1, nbytes))
        _check(err, "cudaMalloc")
        return int(ptr)

    def stream_create() -> int:
        err, stream = rt.cudaStreamCreate()
        _check(err, "cudaStreamCreate")
        return int(stream)

    kinds = {_H2D: rt.cudaMemcpyKind.cudaMemcpyHostToDevice}
    kinds[_D2H] = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
    return Device(
        how="cuda-python",
        malloc=malloc,
        free=lambda ptr: _check(rt.cudaFree(ptr), "cudaFree"),
        memcpy=lambda d, s, n, k: _check(rt.cudaMemcpy(d, s, n, kinds[k]), "cudaMemcpy"),
        stream_create=stream_create,
        stream_synchronize=lambda s: _check(rt.cudaStreamSynchronize(s), "cudaStreamSync"),
        stream_destroy=lambda s: _check(rt.cudaStreamDestroy(s), "cudaStreamDestroy"),
    )


def _cupy_device() -> Device | None:
    try:
        from cupy.cuda import runtime as rt
    except ImportError:
        return None
    return Device(
        how="cupy",
        malloc=lambda n: int(rt.malloc(max(1, n))),
        free=rt.free,
        memcpy=rt.memcpy,
        stream_create=lambda: int(rt.streamCreate()),
        stream_synchronize=rt.streamSynchronize,
        stream_destroy=rt.streamDestroy,
    )


def find_device() -> tuple[Device | None, str]:
    """The first usable CUDA memory API, and a one-line account of the search."""
    for path in cuda_probe.cudart_candidates():
        try:
            lib = ctypes.CDLL(path)
            lib.cudaMalloc  # noqa: B018 - an old or fake library lacks the symbol
        except (OSError, AttributeError):
            continue
        return _ctypes_device(lib, path), f"libcudart via ctypes ({path})"
    for make in (_cuda_python_device, _cupy_device):
        device = make()
        if device is not None:
            return device, device.how
    return None, (
        "no CUDA runtime found: no libcudart under site-packages/nvidia/* or on the loader "
        "path, and neither cuda-python nor cupy is installed; install "
        "nvidia-cuda-runtime-cu12 (CUDA 12) or nvidia-cuda-runtime (CUDA 13), cuda-python "
        "or cupy"
    )


def run_readiness(tensorrt_version: str | None) -> dict[str, Any]:
    """What ``doctor`` says before a recording: whether ``run`` (verify, the lock's expected
    bits) finds a CUDA runtime, and else which pip package gives one for this TensorRT (the
    10.x wheels are built for CUDA 12; the 11.x wheels for CUDA 13 no longer bring one)."""
    device, how = find_device()
    major = (tensorrt_version or "").split(".")[0]
    package = {"10": "nvidia-cuda-runtime-cu12", "11": "nvidia-cuda-runtime"}.get(major)
    if package is None:
        package = "nvidia-cuda-runtime-cu12 (CUDA 12) or nvidia-cuda-runtime (CUDA 13)"
    return {"found": device is not None, "how": how, "package": None if device else package}


def check_recording(tensorrt_version: str | None) -> None:
    """Refuse a recording, before any work, that could not record the lock's expected bits:
    those come from running the engine, and ``run`` needs a CUDA runtime (TensorRT 11's
    wheels no longer bring one). Without this check the recording only warned at its end
    and ``verify`` later exited 3."""
    ready = run_readiness(tensorrt_version)
    if not ready["found"]:
        from reprobuild.errors import UsageError

        raise UsageError(
            f"NO CUDA runtime found; pip install {ready['package']}: a TensorRT recording runs "
            "its engine for the lock's expected bits (what verify checks), and that needs a "
            "CUDA runtime (`reprobuild doctor` shows what run finds)"
        )
