"""``export-cache``: a standard TensorRT timing-cache file that holds a lock's choices.

The file is the environment's recording cache (from ``caches/`` beside the lock or
``--cache-dir``, or a recording build when there is none) with ``update()`` applied for
every lock entry, then serialized. A builder that sets ``EDITABLE_TIMING_CACHE`` on the same
network and settings (TensorRT's Python API, as reprobuild does) finds the same keys holding
the locked tactics; reprobuild's own locked builds check that the engine followed them (the
cache map before and after, the engine inspector), a build elsewhere is not checked. trtexec
loads the file but cannot set the editable flag, so its keys may differ
(``--errorOnTimingCacheMiss`` makes that a failure); Torch-TensorRT never sets the flag,
attaches strictly, builds its own network and overwrites the file, so the file does not pin
its tactics (docs/export-cache.md).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.backends.base import Backend, TimingCache
from reprobuild.cachedir import cache_folder, cache_path, get_or_record
from reprobuild.errors import BuildError, UsageError
from reprobuild.fileio import sha256_file
from reprobuild.lock.model import Lock
from reprobuild.lock.targets import select
from reprobuild.lock.yamlio import load_lock
from reprobuild.pinning import update_tactics
from reprobuild.transaction import Outputs, check_distinct, check_output_path


@dataclass
class ExportResult:
    output: str
    recording_cache: str
    recorded_now: bool
    entries: int
    locked: int
    changed: int
    unlocked_entries: int
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _model_candidates(lock_path: Path, recorded: str, override: Path | None) -> list[Path]:
    if override is not None:
        return [override]
    p = Path(recorded)
    return [p] if p.is_absolute() else [p, lock_path.parent / p]


def export_pinned_cache(
    lock_path: str | Path,
    output: str | Path,
    cache_dir: str | Path | None,
    *,
    model: str | Path | None = None,
    backend: Backend | None = None,
) -> ExportResult:
    """Write ``output`` atomically; ``backend`` defaults to a new ``TensorRTBackend``."""
    check_output_path(output, "timing cache")
    cache_dir = cache_folder(cache_dir, lock_path)
    check_distinct([(output, "timing cache")], [(lock_path, "lock"), (model, "model")], cache_dir)
    lock_path = Path(lock_path)
    lock = load_lock(lock_path)
    if lock.environment.backend != "tensorrt":
        raise UsageError(
            f"{lock_path}: recorded with the {lock.environment.backend!r} backend; export-cache "
            "writes TensorRT timing caches, so record the lock with --backend tensorrt"
        )
    if backend is None:
        from reprobuild.backends import get_backend

        backend = get_backend("tensorrt")
    here = backend.environment()
    # this machine's target, whichever of the lock's it is (exit 3 naming them all if none)
    chosen = select(lock, here, lock_path)
    lock = chosen.lock
    warnings: list[str] = list(chosen.warnings)
    with tempfile.TemporaryDirectory(prefix="reprobuild-export-") as tmp:
        built = _built_model(lock, lock_path, model, Path(tmp))
        # The recording cache is named by the model the builds built: the converted one
        # for a lock with a precision plan (what `build` names it by), else the lock's.
        built_sha = lock.model.sha256 if built is None else sha256_file(built)
        rec_path = cache_path(cache_dir, here, lock.settings, built_sha)

        def record(cache: TimingCache) -> None:
            model_path = built or _recordable_model(lock, lock_path, rec_path, model)
            backend.build(str(model_path), lock.settings, cache, lambda line: None)

        cache, recorded_now = get_or_record(backend, rec_path, record, warnings)
    pins = update_tactics(cache, lock.layers)
    tactics = cache.tactic_map()
    wrong = [e for e in lock.layers if tactics.get(e.key) != e.tactic]
    if wrong:
        e = wrong[0]
        raise BuildError(
            f"layer {e.layer!r} (key {e.key}): the timing cache holds "
            f"{tactics.get(e.key)!r} after update(), not 0x{e.tactic:x}; re-record the lock"
        )
    with Outputs() as out:
        out.stage_bytes(output, cache.serialize(), "timing cache")
        out.commit()
    locked_keys = {e.key for e in lock.layers}
    return ExportResult(
        output=str(output),
        recording_cache=str(rec_path),
        recorded_now=recorded_now,
        entries=len(tactics),
        locked=len(pins),
        changed=sum(1 for p in pins if p.previous != p.tactic),
        unlocked_entries=len(set(tactics) - locked_keys),
        warnings=warnings,
    )


def _built_model(
    lock: Lock, lock_path: Path, model: str | Path | None, workdir: Path
) -> Path | None:
    """The converted model a lock with a precision plan builds (made in ``workdir`` from
    the lock's model, as ``build --frozen`` makes it); None for a lock without a plan."""
    if lock.precision is None:
        return None
    from reprobuild.workflow.prepare import prepare_model

    model_path = _lock_model(
        lock, lock_path, model,
        f"{lock_path}: the lock has a {lock.precision.mode} precision plan, so the recording "
        "cache is named by the converted model, and the model {model} is not there to "
        "convert; pass --model MODEL.onnx",
    )  # fmt: skip
    built, _, _ = prepare_model(model_path, lock, None, True, workdir, lock_path)
    return built


def _recordable_model(
    lock: Lock, lock_path: Path, rec_path: Path, model: str | Path | None
) -> Path:
    """The lock's model, found and checked, for a recording build."""
    return _lock_model(
        lock, lock_path, model,
        f"{rec_path}: no recording timing cache for this environment, and the model {{model}} "
        "is not there to record one; pass --model MODEL.onnx or run `reprobuild build` on "
        "this machine first",
    )  # fmt: skip


def _lock_model(lock: Lock, lock_path: Path, model: str | Path | None, missing: str) -> Path:
    """The lock's model (``model``, else where the lock says), checked against the lock's
    hash; ``missing`` (with ``{model}``) is the refusal when it is not there."""
    candidates = _model_candidates(lock_path, lock.model.path, Path(model) if model else None)
    model_path = next((p for p in candidates if p.is_file()), None)
    if model_path is None:
        raise UsageError(missing.replace("{model}", str(candidates[0])))
    if sha256_file(model_path) != lock.model.sha256.lower():
        raise UsageError(
            f"{model_path}: sha256 differs from the lock's model.sha256; the model changed "
            "since the lock was recorded: re-record the lock"
        )
    return model_path
