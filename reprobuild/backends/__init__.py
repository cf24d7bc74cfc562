"""Backends behind one interface: ``reference`` (CPU, always available) and ``tensorrt``.

Imports stay lazy: choosing a backend must not import numpy, onnx or tensorrt until it
builds something.
"""

from __future__ import annotations

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
    "get_backend",
]


def get_backend(name: str) -> Backend:
    """Return a backend instance by name; ``auto`` prefers TensorRT when it can really run."""
    if name == "auto":
        from reprobuild.backends import tensorrt_backend

        if tensorrt_backend.is_usable():
            return tensorrt_backend.TensorRTBackend()
        from reprobuild.backends.reference import ReferenceBackend

        return ReferenceBackend()
    if name == "reference":
        from reprobuild.backends.reference import ReferenceBackend

        return ReferenceBackend()
    if name == "tensorrt":
        from reprobuild.backends import tensorrt_backend

        reason = tensorrt_backend.unusable_reason()
        if reason:
            raise BackendUnavailable(f"backend 'tensorrt' cannot run here: {reason}")
        return tensorrt_backend.TensorRTBackend()
    raise UsageError(f"unknown backend {name!r}: choose one of auto, {', '.join(BACKEND_NAMES)}")
