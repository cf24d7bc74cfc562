"""What every workflow command settles first: which backend, which lock, which model.

Checks that make a command refuse before any build runs live here, so ``build``, ``verify``,
``bisect`` and ``export-cache`` refuse the same inputs with the same words.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reprobuild.backends.base import Backend
from reprobuild.errors import EnvironmentMismatch, UsageError
from reprobuild.events import Progress, Step
from reprobuild.fileio import sha256_file
from reprobuild.lock.model import ExternalFile, Lock, ModelInfo
from reprobuild.lock.yamlio import load_lock
from reprobuild.types import BuildSettings


def resolve_backend(backend: str | Backend) -> Backend:
    if isinstance(backend, str):
        from reprobuild.backends import get_backend

        return get_backend(backend)
    return backend


def announce_backend(requested: str | Backend, be: Backend, progress: Progress) -> None:
    """``--backend auto`` says which backend it took, and why not TensorRT."""
    if requested == "auto":
        why = "" if be.name == "tensorrt" else " (TensorRT with a visible GPU not found)"
        progress(Step(f"backend auto -> {be.name}{why}"))


def model_info(model_path: Path, lock_dir: Path) -> ModelInfo:
    """Hash the ONNX file and every external-data file it references."""
    import onnx

    try:
        proto = onnx.load(str(model_path), load_external_data=False)
    except Exception as err:  # onnx raises DecodeError, OSError, ...
        raise UsageError(
            f"{model_path}: not a readable ONNX model ({type(err).__name__}); "
            "check the path or re-export the model"
        ) from None
    ext: set[str] = set()
    for tensor in _all_tensors(proto.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    ext.add(entry.value)
    files = []
    for loc in sorted(ext):
        p = model_path.parent / loc
        if not p.is_file():
            raise UsageError(
                f"{model_path}: external data file {p} is missing; put it beside the model"
            )
        files.append(ExternalFile(loc, sha256_file(p)))
    return ModelInfo(
        path=_rel(model_path, lock_dir), sha256=sha256_file(model_path), external_data=files
    )


def _all_tensors(graph: Any):
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for g in attr.graphs:
                yield from _all_tensors(g)


def _rel(path: Path, base: Path) -> str:
    """Model path as stored in the lock: relative to the lock's folder, '/'-separated."""
    try:
        return Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()
    except ValueError:  # another drive on Windows
        return path.resolve().as_posix()


def check_lock_matches(
    lock: Lock, lock_path: Path, info: ModelInfo, settings: BuildSettings, backend: Backend
) -> list[str]:
    """Model and settings mismatches are errors (exit 2); environment ones are returned."""
    if lock.model.sha256 != info.sha256:
        raise UsageError(
            f"{lock_path}: recorded for model {lock.model.path} (sha256 {lock.model.sha256[:12]}), "
            f"not this one (sha256 {info.sha256[:12]}); use that model, or delete the lock to "
            "re-record"
        )
    if [(f.path, f.sha256) for f in lock.model.external_data] != [
        (f.path, f.sha256) for f in info.external_data
    ]:
        raise UsageError(
            f"{lock_path}: the model's external data changed; delete the lock to re-record"
        )
    if lock.settings != settings:
        a, b = lock.settings.to_dict(), settings.to_dict()
        diff = ", ".join(f"{k}: {a[k]!r} -> {b[k]!r}" for k in a if a[k] != b[k])
        raise UsageError(
            f"{lock_path}: builder settings differ from the lock ({diff}); drop the options "
            "to use the lock's, or delete the lock to re-record"
        )
    return lock.environment.differences(backend.environment())


def check_backend(lock: Lock, lock_path: Path, be: Backend) -> None:
    """A lock is tied to the backend that recorded it (exit 3 otherwise)."""
    if lock.environment.backend != be.name:
        raise EnvironmentMismatch(
            f"{lock_path}: recorded with backend {lock.environment.backend!r}, this build "
            f"uses {be.name!r}; pass --backend {lock.environment.backend}"
        )


def open_lock(
    lock: str | os.PathLike[str], model: str | os.PathLike[str] | None, be: Backend
) -> tuple[Lock, Path, Path]:
    """The lock, its path and its model, checked against this backend and machine."""
    lock_path = Path(lock)
    data = load_lock(lock_path)
    model_path = Path(model) if model is not None else lock_path.parent / data.model.path
    if not model_path.is_file():
        raise UsageError(f"{model_path}: model file not found (from {lock_path}); pass MODEL")
    check_backend(data, lock_path, be)
    env_diff = check_lock_matches(
        data, lock_path, model_info(model_path, lock_path.parent), data.settings, be
    )
    if env_diff:
        raise EnvironmentMismatch(
            f"{lock_path}: recorded on another environment ({'; '.join(env_diff)}); verify on "
            "the recorded target"
        )
    return data, lock_path, model_path
