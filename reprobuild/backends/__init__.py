"""Backends behind one interface: ``reference`` (CPU, always available) and ``tensorrt``.

Imports stay lazy: choosing a backend must not import numpy, onnx or tensorrt until it
builds something.
"""

from __future__ import annotations

import sys

from reprobuild.backends.base import (
    Backend,
    BuildOutput,
    BuildSettings,
    Environment,
    TimingCache,
    TimingValue,
)
from reprobuild.errors import BackendUnavailable, UsageError

BACKEND_NAMES = ("reference", "tensorrt")

__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "BuildOutput",
    "BuildSettings",
    "Environment",
    "TimingCache",
    "TimingValue",
    "engine_layer_info",
    "get_backend",
]


def get_backend(
    name: str, *, ref_timing: str = "", threads: int | None = None, allow_miss_retry: bool = False
) -> Backend:
    """Return a backend instance by name; ``auto`` prefers TensorRT when it can really run.

    ``ref_timing`` is the reference backend's timing knob (tests and demos); asking for it
    picks the reference backend under ``auto`` and is refused with ``tensorrt``. ``threads``
    is the reference backend's BLAS thread count (TensorRT ignores it). ``allow_miss_retry``
    is TensorRT's: accept a pinned build retried without ERROR_ON_TIMING_CACHE_MISS.
    """
    if name == "auto" and not ref_timing and _tensorrt_findable():
        from reprobuild.backends.tensorrt import backend as tensorrt_backend

        if tensorrt_backend.is_usable():
            return tensorrt_backend.TensorRTBackend(allow_miss_retry=allow_miss_retry)
    if name in ("auto", "reference"):
        from reprobuild.backends.reference import ReferenceBackend

        return ReferenceBackend(timing=ref_timing, threads=threads)
    if ref_timing and name == "tensorrt":
        raise UsageError("--ref-timing injects the reference backend's timings only; drop it")
    if name == "tensorrt":
        from reprobuild.backends.tensorrt import backend as tensorrt_backend

        reason = tensorrt_backend.unusable_reason()
        if reason:
            raise BackendUnavailable(f"backend 'tensorrt' cannot run here: {reason}")
        return tensorrt_backend.TensorRTBackend(allow_miss_retry=allow_miss_retry)
    raise UsageError(f"unknown backend {name!r}: choose one of auto, {', '.join(BACKEND_NAMES)}")


def _tensorrt_findable() -> bool:
    """Whether ``import tensorrt`` could succeed, without importing it or the backend (whose
    import, CUDA probe included, is a tenth of a small locked rebuild): ``auto`` on a machine
    without TensorRT goes straight to the reference backend."""
    if "tensorrt" in sys.modules:
        return sys.modules["tensorrt"] is not None
    import importlib.util

    try:
        return importlib.util.find_spec("tensorrt") is not None
    except (ImportError, ValueError):  # a broken install: let the backend say what is wrong
        return True


def engine_layer_info(data: bytes) -> str | None:
    """The inspector JSON an engine file carries itself (reference engines do), or None:
    a TensorRT engine can only be inspected on its GPU, so its builds write it beside."""
    import json

    from reprobuild.backends.reference.engine import ENGINE_MAGIC, read_engine

    if not data.startswith(ENGINE_MAGIC):
        return None
    meta, _ = read_engine(data)
    info = meta.get("layer_info")
    return None if info is None else json.dumps(info)
