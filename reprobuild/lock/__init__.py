"""The lock concept: what ``tactics.lock`` holds, how it is read, written, edited, compared.

Modules, lowest first: ``schema`` (validation with file:line:column errors), ``plan`` (the
precision section), ``model`` (the dataclasses), ``validate`` (data -> Lock), ``emit``
(the canonical YAML form), ``eventread`` (a lock in the writer's shape from PyYAML's parse
events), ``yamlparse`` (PyYAML: reading, errors, writing), ``yamlio`` (load/save), ``edit``
(pin/unpin/show), ``plandiff`` (two precision plans compared), ``diff``.
Importing this package loads only the dataclasses; YAML and the rest load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from reprobuild.lock.model import (
    DEFAULT_LOCK,
    SCHEMA_VERSION,
    ExternalFile,
    LayerEntry,
    Lock,
    LockCandidate,
    ModelInfo,
)
from reprobuild.lock.plan import NodePrecision, PrecisionPlan, PrecisionSettings

_LAZY = {
    "dumps_lock": "yamlio",
    "loads_lock": "yamlio",
    "load_lock": "yamlio",
    "save_lock": "yamlio",
    "edit_lock": "edit",
    "diff_locks": "diff",
    "LockDiff": "diff",
}

__all__ = [
    "DEFAULT_LOCK",
    "SCHEMA_VERSION",
    "ExternalFile",
    "LayerEntry",
    "Lock",
    "LockCandidate",
    "ModelInfo",
    "NodePrecision",
    "PrecisionPlan",
    "PrecisionSettings",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"reprobuild.lock.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'reprobuild.lock' has no attribute {name!r}")
