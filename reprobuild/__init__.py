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
    "build": "reprobuild.workflow",
    "verify": "reprobuild.verification",
    "bisect": "reprobuild.verification",
    "BuildResult": "reprobuild.workflow",
    "VerifyResult": "reprobuild.verification",
    "BisectResult": "reprobuild.verification",
    "BuildSettings": "reprobuild.backends.base",
    "Environment": "reprobuild.backends.base",
    "get_backend": "reprobuild.backends",
    "Lock": "reprobuild.lockfile",
    "LayerEntry": "reprobuild.lockfile",
    "load_lock": "reprobuild.lockfile",
    "save_lock": "reprobuild.lockfile",
    "edit_lock": "reprobuild.lockedit",
    "diff_locks": "reprobuild.lockedit",
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
