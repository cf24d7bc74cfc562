"""The reproducible-build workflow: build, verify, bisect, export-cache.

One module per command (``build``, ``verify``, ``bisect``, ``export``) over shared steps:
``context`` (backend, lock and model checks), ``prepare`` (the precision plan applied),
``pinned`` (recording and pinned builds with the drift check), ``outputs`` (bits and
accuracy). Names resolve lazily so importing the package costs nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "build": "reprobuild.workflow.build",
    "BuildResult": "reprobuild.workflow.build",
    "PrecisionRequest": "reprobuild.workflow.request",
    "verify": "reprobuild.workflow.verify",
    "VerifyResult": "reprobuild.workflow.verify",
    "bisect": "reprobuild.workflow.bisect",
    "BisectResult": "reprobuild.workflow.bisect",
    "export_pinned_cache": "reprobuild.workflow.export",
    "ExportResult": "reprobuild.workflow.export",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'reprobuild.workflow' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
