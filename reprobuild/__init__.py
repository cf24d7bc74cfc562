"""reprobuild: reproducible TensorRT engine builds.

The Python API mirrors the CLI. Names resolve lazily so ``import reprobuild`` stays cheap
(no numpy/onnx until a build actually runs)::

    import reprobuild
    result = reprobuild.build("model.onnx", lock="tactics.lock")
    report = reprobuild.verify("model.onnx", lock="tactics.lock", rebuilds=3)
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "build": "reprobuild.workflow.build",
    "verify": "reprobuild.workflow.verify",
    "bisect": "reprobuild.workflow.bisect",
    "export_pinned_cache": "reprobuild.workflow.export",
    "BuildResult": "reprobuild.workflow.build",
    "PrecisionRequest": "reprobuild.workflow.request",
    "VerifyResult": "reprobuild.workflow.verify",
    "BisectResult": "reprobuild.workflow.bisect",
    "BuildSettings": "reprobuild.types",
    "Environment": "reprobuild.types",
    "get_backend": "reprobuild.backends",
    "Lock": "reprobuild.lock.model",
    "LayerEntry": "reprobuild.lock.model",
    "load_lock": "reprobuild.lock.yamlio",
    "save_lock": "reprobuild.lock.yamlio",
    "edit_lock": "reprobuild.lock.edit",
    "diff_locks": "reprobuild.lock.diff",
    "ReprobuildError": "reprobuild.errors",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'reprobuild' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
