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
from reprobuild.fileio import check_regular, sha256_file
from reprobuild.limits import check_size
from reprobuild.lock.model import ExternalFile, Lock, ModelInfo
from reprobuild.lock.yamlio import load_lock
from reprobuild.types import TIE_FIELDS, BuildSettings


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


def check_model_file(model: str | os.PathLike[str]) -> Path:
    """Refuse what cannot be a model before anything is hashed or built."""
    path = Path(model)
    if path.is_dir():
        raise UsageError(f"{path}: is a directory, not an ONNX model file; give the .onnx file")
    size = check_regular(path, "ONNX model file", missing="no such model file; check the path")
    if size == 0:
        raise UsageError(f"{path}: empty file (0 bytes), not an ONNX model; re-export the model")
    check_size(path, size, "model")
    return path


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
    check_graph(proto, model_path)
    ext: set[str] = set()
    for tensor in _all_tensors(proto.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    ext.add(entry.value)
    files = []
    total = 0
    folder = model_path.parent.resolve()
    for loc in sorted(ext):
        p = model_path.parent / loc
        if not p.resolve().is_relative_to(folder):
            raise UsageError(
                f"{model_path}: external data file {loc!r} is outside the model's folder; "
                "keep external data beside the model"
            )
        if not p.is_file() and not p.is_symlink():
            raise UsageError(
                f"{model_path}: external data file {p} is missing; put it beside the model"
            )
        total += check_regular(p, "external data file")
        check_size(model_path, total, "external")
        files.append(ExternalFile(loc, sha256_file(p)))
    return ModelInfo(
        path=_rel(model_path, lock_dir), sha256=sha256_file(model_path), external_data=files
    )


def check_graph(proto: Any, model_path: Path) -> None:
    """A model that builds nothing, or that the builders cannot feed, is refused here.

    An empty graph would record a 0-layer lock and "verify" it; a sequence, map or optional
    input or output has no shape a builder can bind (TensorRT takes tensors only).
    """
    graph = proto.graph
    if len(graph.node) == 0:
        raise UsageError(
            f"{model_path}: the ONNX graph has no nodes, so there is nothing to build; "
            "check that this is the exported model"
        )
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for v in values:
            which = v.type.WhichOneof("value")
            if which not in ("tensor_type", None):
                raise UsageError(
                    f"{model_path}: {kind} {v.name!r} is a {which.removesuffix('_type')}, not "
                    "a tensor; reprobuild builds models whose inputs and outputs are tensors"
                )
    if len(graph.output) == 0:
        raise UsageError(f"{model_path}: the ONNX graph has no outputs; nothing to build")
    known = {""} | {v.name for v in graph.input} | {t.name for t in graph.initializer}
    names = [v.name for v in (*graph.input, *graph.output, *graph.initializer)]
    for node in graph.node:
        names += [node.name, node.op_type, *node.input, *node.output]
    if not all(isinstance(n, str) for n in names):  # protobuf hands invalid UTF-8 as bytes
        raise UsageError(
            f"{model_path}: names in the graph are not valid UTF-8 text; the file is damaged "
            "or not an ONNX model"
        )
    for node in graph.node:  # in order: ONNX graphs are topologically sorted
        if not (node.op_type.isascii() and node.op_type.isidentifier()):
            raise UsageError(
                f"{model_path}: node {node.name!r} has the invalid op type {node.op_type!r}; "
                "the file is damaged or not an ONNX model"
            )
        missing = next((name for name in node.input if name not in known), None)
        if missing is not None:
            raise UsageError(
                f"{model_path}: node {node.name or node.op_type!r} reads {missing!r}, which no "
                "input, initializer or earlier node provides; re-export the model"
            )
        known.update(node.output)
    dangling = next((v.name for v in graph.output if v.name not in known - {""}), None)
    if dangling is not None:
        raise UsageError(
            f"{model_path}: graph output {dangling!r} is produced by no node, input or "
            "initializer, so no engine can return it; re-export the model (or remove that "
            "output)"
        )
    _check_input_dims(graph, model_path)


def _check_input_dims(graph: Any, model_path: Path) -> None:
    """A fixed input dimension of 0 (or below) is refused: a 0-sized tensor carries no data,
    so the build would time and lock kernels that never run on anything, and TensorRT
    refuses empty input shapes at inference anyway. An output's negative dimension is no
    size at all. Dynamic dimensions are not checked here: the shape profile's own check
    (1 <= min) covers them."""
    weights = {t.name for t in graph.initializer}
    sides = [("input", v, 0) for v in graph.input if v.name not in weights]
    sides += [("output", v, -1) for v in graph.output]
    for kind, v, lowest_bad in sides:
        if not v.type.tensor_type.HasField("shape"):
            continue
        dims = v.type.tensor_type.shape.dim
        if any(d.HasField("dim_value") and d.dim_value <= lowest_bad for d in dims):
            shown = "x".join(
                str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims
            )
            what = (
                "with a dimension of 0 or less, so it holds no data"
                if kind == "input"
                else "with a dimension below 0"
            )
            raise UsageError(
                f"{model_path}: {kind} {v.name!r} has the shape {shown}, {what}; re-export the "
                "model with the real size (or a named dynamic dimension)"
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


def check_profiles(settings: BuildSettings) -> None:
    """Refuse shape profiles no builder can take: each dimension needs 1 <= min <= opt <= max.

    Backend-neutral (TensorRT refuses these too, but only deep inside the build).
    """
    for name, lo, opt, hi in settings.input_shapes:
        shown = " / ".join("x".join(map(str, s)) or "scalar" for s in (lo, opt, hi))
        why = None
        if not len(lo) == len(opt) == len(hi):
            why = "min, opt and max have different numbers of dimensions"
        elif any(d < 1 for d in (*lo, *opt, *hi)):
            why = "a dimension is 0 or negative"
        elif any(not a <= b <= c for a, b, c in zip(lo, opt, hi, strict=True)):
            why = "a dimension's min > opt or opt > max"
        if why:
            raise UsageError(
                f"input {name!r}: shape profile (min / opt / max) {shown} is invalid: {why}; "
                "every dimension needs 1 <= min <= opt <= max"
            )


def check_dynamic_inputs(model_path: Path, settings: BuildSettings) -> None:
    """Refuse, before any build, a model input with a dynamic dimension that no
    ``--shapes`` / ``--min-shapes --opt-shapes --max-shapes`` covers: every backend needs its
    shape to time kernels (TensorRT fails only deep in the build, "no optimization profile
    has been defined"), and the refusal must name the dimensions and the flags, not a pin."""
    import onnx

    given = {name for name, *_ in settings.input_shapes}
    graph = onnx.load(str(model_path), load_external_data=False).graph
    weights = {t.name for t in graph.initializer}
    for v in graph.input:
        if v.name in weights or v.name in given:
            continue
        dims = v.type.tensor_type.shape.dim
        dynamic = [d.dim_param or f"dimension {i}" for i, d in enumerate(dims)]
        dynamic = [n for n, d in zip(dynamic, dims, strict=True) if not d.HasField("dim_value")]
        if not dynamic:
            continue
        shown = "x".join(
            str(d.dim_value) if d.HasField("dim_value") else d.dim_param or "?" for d in dims
        )
        example = "x".join(str(d.dim_value) if d.HasField("dim_value") else "1" for d in dims)
        raise UsageError(
            f"{model_path}: input {v.name!r} has a dynamic shape ({shown}; dynamic: "
            f"{', '.join(dynamic)}): give it with --shapes {v.name}:{example}, or a profile "
            "with --min-shapes, --opt-shapes and --max-shapes"
        )


def check_lock_matches(
    lock: Lock,
    lock_path: Path,
    info: ModelInfo,
    settings: BuildSettings,
    model_path: Path | None = None,
) -> None:
    """Model and settings mismatches are errors (exit 2); which target a machine uses is
    :func:`reprobuild.lock.targets.select`'s question.

    A model mismatch names the file that was actually hashed, with its hash, beside what the
    lock recorded: after a hand edit of ``model.path`` those are different files.
    """
    if lock.model.sha256 != info.sha256:
        actual = model_path if model_path is not None else info.path
        raise UsageError(
            f"{lock_path}: recorded for model {lock.model.path} with sha256 "
            f"{lock.model.sha256[:12]}, but {actual} has sha256 {info.sha256[:12]}; use the "
            "recorded model, or delete the lock to re-record"
        )
    if [(f.path, f.sha256) for f in lock.model.external_data] != [
        (f.path, f.sha256) for f in info.external_data
    ]:
        raise UsageError(
            f"{lock_path}: the model's external data changed; delete the lock to re-record"
        )
    if lock.settings != settings:
        a, b = (
            {**s.to_dict(), **{f: getattr(s, f) for f in TIE_FIELDS}}
            for s in (lock.settings, settings)
        )
        diff = ", ".join(
            f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in {**a, **b} if a.get(k) != b.get(k)
        )
        raise UsageError(
            f"{lock_path}: builder settings differ from the lock ({diff}); drop the options "
            "to use the lock's, or delete the lock to re-record"
        )


def check_backend(lock: Lock, lock_path: Path, be: Backend) -> None:
    """A lock is tied to the backend that recorded it (exit 3 otherwise)."""
    if lock.environment.backend != be.name:
        raise EnvironmentMismatch(
            f"{lock_path}: recorded with backend {lock.environment.backend!r}, this build "
            f"uses {be.name!r}; pass --backend {lock.environment.backend}"
        )


def open_lock(
    lock: str | os.PathLike[str],
    model: str | os.PathLike[str] | None,
    be: Backend,
    warnings: list[str] | None = None,
    target: str | None = None,
) -> tuple[Lock, Path, Path]:
    """The lock's view for this machine's target, its path and its model, checked against
    this backend and machine (no target for this machine, or ``target`` names another
    machine's: exit 3, naming the lock's targets). Advisory differences are appended to
    ``warnings``."""
    from reprobuild.lock.targets import select

    lock_path = Path(lock)
    data = load_lock(lock_path)
    model_path = Path(model) if model is not None else lock_path.parent / data.model.path
    if not model_path.exists() and model is None:
        raise UsageError(f"{model_path}: model file not found (from {lock_path}); pass MODEL")
    check_model_file(model_path)
    if not any(t.environment.backend == be.name for t in data.targets()):
        check_backend(data, lock_path, be)
    check_lock_matches(
        data, lock_path, model_info(model_path, lock_path.parent), data.settings, model_path
    )
    here = be.environment()
    chosen = select(data, here, lock_path, name=target)
    if target is not None and not chosen.lock.environment.matches(here):
        raise EnvironmentMismatch(
            f"{lock_path}: target {chosen.lock.target_name} is not this machine's "
            f"({'; '.join(chosen.lock.environment.differences(here))}); run on a machine of "
            "that target"
        )
    if warnings is not None:
        warnings += chosen.warnings
    return chosen.lock, lock_path, model_path
