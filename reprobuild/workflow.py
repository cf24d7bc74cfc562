"""The reproducible-build workflow: record, lock, apply pins, check for drift.

Flow of a locked build (the contract of TensorRT's editable timing cache):
  recording cache (from ``caches/`` or a fresh recording build) -> ``update()`` every locked
  key -> pinned build -> the cache's ``{key: tactic}`` and the engine's kernels must equal
  the lock. Everything here talks to the backend interface only, so the reference backend
  runs exactly the code path a TensorRT build takes.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.backends.base import Backend, BuildOutput, BuildSettings, TimingCache
from reprobuild.errors import (
    CacheError,
    DriftError,
    EnvironmentMismatch,
    ReprobuildError,
    UsageError,
)
from reprobuild.lockfile import (
    DEFAULT_LOCK,
    ExternalFile,
    LayerEntry,
    Lock,
    LockCandidate,
    ModelInfo,
    load_lock,
    save_lock,
)
from reprobuild.precision_plan import PrecisionPlan, PrecisionSettings

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# --------------------------------------------------------------------------- results


@dataclass
class PrecisionRequest:
    """What the user asked for with ``--precision`` and its rule options."""

    mode: str
    settings: PrecisionSettings
    calibration: str | None = None  # .npz / Polygraphy JSON path; None = seeded inputs


@dataclass
class BuildResult:
    """What ``reprobuild build`` did, as plain data (the CLI only prints it)."""

    engine_path: str | None
    lock_path: str
    report_path: str | None
    backend: str
    environment: dict[str, Any]
    recorded: bool  # a recording build chose the tactics (no lock, or re-recorded)
    lock_written: bool
    lock_changes: list[str]
    layers: int
    pinned: int
    cache_hits: int
    timed: int
    duration_s: float
    tactic_map: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    precision: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["tactic_map"] = {k: f"0x{v:x}" for k, v in sorted(self.tactic_map.items())}
        return d


@dataclass
class PinnedBuild:
    """One build from a tactic map, with what the drift check saw."""

    output: BuildOutput
    after: dict[str, int]
    records: list[Any]
    log_warnings: list[Any]
    cache_hits: int
    timed: int
    recorded_now: bool
    problems: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------- helpers


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


def announce_backend(requested: str | Backend, be: Backend, progress: Progress) -> None:
    """``--backend auto`` says which backend it took, and why not TensorRT."""
    if requested == "auto":
        why = "" if be.name == "tensorrt" else " (TensorRT with a visible GPU not found)"
        progress(f"backend auto -> {be.name}{why}")


def resolve_backend(backend: str | Backend) -> Backend:
    if isinstance(backend, str):
        from reprobuild.backends import get_backend

        return get_backend(backend)
    return backend


def entries_from_records(
    records: list[Any], cache_map: dict[str, int]
) -> tuple[list[LayerEntry], list[str]]:
    """Lock entries for every key the recording build put in the cache.

    The log gives names and candidates; the cache is the authority on keys and choices.
    """
    warnings: list[str] = []
    by_key: dict[str, Any] = {}
    for rec in records:
        if rec.key is not None:
            by_key[rec.key] = rec
    entries = []
    for key, tactic in sorted(cache_map.items()):
        rec = by_key.get(key)
        if rec is None:
            warnings.append(f"key {key} is in the timing cache but not in the build log")
            entries.append(LayerEntry(key, f"<unlogged {key[:10]}>", tactic, None, False, []))
            continue
        if rec.chosen is not None and rec.chosen != tactic:
            warnings.append(
                f"layer {rec.layer!r}: log says 0x{rec.chosen:x} but the cache holds 0x{tactic:x}"
            )
        cands = sorted(
            {LockCandidate(c.tactic_hash, c.kernel) for c in rec.candidates}, key=lambda c: c.tactic
        )
        kernel = next((c.kernel for c in cands if c.tactic == tactic), rec.chosen_kernel)
        entries.append(LayerEntry(key, rec.layer, tactic, kernel, False, cands))
    return entries, warnings


class _LogCollector:
    """Feeds builder log lines to the parser as they come, counting progress."""

    def __init__(self, progress: Progress, what: str) -> None:
        from reprobuild.logparse import LogParser

        self.parser = LogParser(source=what)
        self.records: list[Any] = []
        self.progress = progress
        self.what = what
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        done = self.parser.feed(line)
        if done:
            self.records.extend(done)
            self.progress(f"{self.what}: {len(self.records)} layers")

    def finish(self) -> list[Any]:
        self.records.extend(self.parser.finish())
        return self.records


def run_build(
    backend: Backend,
    model_path: Path,
    settings: BuildSettings,
    cache: TimingCache,
    progress: Progress,
    what: str,
) -> tuple[BuildOutput, _LogCollector]:
    log = _LogCollector(progress, what)
    output = backend.build(str(model_path), settings, cache, log)
    log.finish()
    return output, log


def load_recording_cache(backend: Backend, path: Path, warnings: list[str]) -> TimingCache | None:
    """The stored recording cache, or None; a corrupted file is reported, never trusted."""
    from reprobuild.cachedir import load_cache_bytes

    try:
        data = load_cache_bytes(path)
        if data is None:
            return None
        return backend.create_timing_cache(data)
    except CacheError as err:
        warnings.append(f"ignored timing cache {path}: {err}; re-recording")
        return None


def pinned_build(
    backend: Backend,
    model_path: Path,
    settings: BuildSettings,
    expected: dict[str, int],
    cache_file: Path | None,
    progress: Progress,
    warnings: list[str],
    *,
    entries: list[LayerEntry] | None = None,
    strict: bool = True,
    cache: TimingCache | None = None,
) -> PinnedBuild:
    """Build with every key of ``expected`` pinned; raise ``DriftError`` on any drift.

    With ``strict=False`` the drift problems are returned instead (``verify`` reports them
    per layer next to the outputs). ``cache`` is a recording cache the caller already
    loaded; by default it is read from ``cache_file``.
    """
    from reprobuild.backends.trt.pins import apply_pins, cross_check_kernels, tactic_map_drift
    from reprobuild.cachedir import save_cache_bytes

    if cache is None and cache_file is not None:
        cache = load_recording_cache(backend, cache_file, warnings)
    recorded_now = False
    if cache is not None and not set(expected) <= set(cache.tactic_map()):
        warnings.append(f"timing cache {cache_file} lacks keys of the lock; re-recording")
        cache = None
    if cache is None:
        progress("recording build (creates the timing-cache keys)")
        cache = backend.create_timing_cache(b"")
        run_build(backend, model_path, settings, cache, progress, "recording")
        recorded_now = True
        if cache_file is not None:
            save_cache_bytes(cache_file, cache.serialize())
    progress("applying pins")
    recorded = cache.tactic_map()
    names = {e.key: e.layer for e in entries or []}
    missing = sorted(set(expected) - set(recorded))
    if missing:
        raise DriftError(
            f"{len(missing)} locked keys do not exist in this build "
            f"(first: {missing[0]} {names.get(missing[0], '')!s}); the lock does not match "
            "this model/settings: re-record it"
        )
    apply_pins(cache, [LayerEntry(k, names.get(k, "?"), t) for k, t in sorted(expected.items())])
    before = {**recorded, **expected}
    progress("pinned build")
    output, log = run_build(backend, model_path, settings, cache, progress, "pinned build")
    after = cache.tactic_map()
    problems = tactic_map_drift(before, after)
    timed = [r for r in log.records if r.key is not None and not r.from_cache]
    for rec in timed:
        if rec.key in expected:
            problems.append(
                f"layer {rec.layer!r} ({rec.key}) was re-timed instead of using the pin"
            )
    if entries:
        problems += cross_check_kernels(output.layer_info, entries)
    if problems and strict:
        raise DriftError(_drift_message(problems, names))
    hits = sum(1 for r in log.records if r.from_cache)
    return PinnedBuild(
        output,
        after,
        log.records,
        list(log.parser.warnings),
        hits,
        len(timed),
        recorded_now,
        problems,
    )


def _drift_message(problems: list[str], names: dict[str, str]) -> str:
    from reprobuild.backends.trt.pins import name_keys

    shown = [name_keys(p, names) for p in problems[:5]]
    more = f"; ... {len(problems) - 5} more" if len(problems) > 5 else ""
    return f"drift: the build does not match the lock: {'; '.join(shown)}{more}"


# ------------------------------------------------------------------------- precision


def _prepare_model(
    model_path: Path,
    lock: Lock | None,
    request: PrecisionRequest | None,
    frozen: bool,
    workdir: Path,
    lock_path: Path,
) -> tuple[Path, PrecisionPlan | None, list[str]]:
    """The model the backend builds: the lock's plan applied verbatim, or a new plan.

    A lock's plan is never re-derived: new calibration data or new defaults cannot change a
    locked build.
    """
    import onnx

    from reprobuild import precision

    notes: list[str] = []
    proto = onnx.load(str(model_path))
    locked = lock.precision if lock is not None else None
    if locked is not None:
        if request is not None and (
            request.mode != locked.mode or request.settings != locked.settings
        ):
            was = {"mode": locked.mode, **locked.settings.to_dict()}
            now = {"mode": request.mode, **request.settings.to_dict()}
            changed = ", ".join(f"{k}: {was[k]!r} -> {now[k]!r}" for k in was if was[k] != now[k])
            msg = f"{lock_path}: the precision options differ from the lock's plan ({changed})"
            if frozen:
                raise DriftError(msg + "; --frozen refuses to change the plan")
            raise UsageError(msg + "; drop the options, or delete the lock to re-plan")
        plan = locked
        if request is not None and request.calibration is not None:
            notes.append(
                f"--calibration {request.calibration} ignored: the lock's plan (calibrated on "
                f"{locked.calibration}) is applied as recorded"
            )
    elif request is not None:
        if lock is not None and frozen:
            raise DriftError(f"{lock_path}: has no precision plan; --frozen refuses to add one")
        if lock is not None:
            raise UsageError(
                f"{lock_path}: was recorded without a precision plan; delete it to re-record "
                f"with --precision {request.mode}"
            )
        feeds, desc = precision.load_calibration(request.calibration, proto)
        plan = precision.derive_plan(proto, request.mode, request.settings, feeds, desc)
    else:
        plan = precision.observe_plan(proto)
        if lock is not None and lock.precision is None and plan is not None:
            notes.append("the model is mixed precision but the lock has no plan")
    if plan is None or plan.mode == "observed":
        if plan is not None:
            precision.apply_plan(proto, plan)  # validates node names against the model
        return model_path, plan, notes
    converted = precision.apply_plan(proto, plan)
    out = workdir / f"{model_path.stem}.{plan.mode}.onnx"
    onnx.save(converted, str(out))
    return out, plan, notes


# ------------------------------------------------------------------------- build


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
    env = backend.environment().to_dict()
    locked = lock.environment.to_dict()
    return [
        f"{k}: {locked[k]!r} (lock) vs {env[k]!r} (here)" for k in locked if locked[k] != env[k]
    ]


def build(
    model: str | os.PathLike[str],
    *,
    lock: str | os.PathLike[str] = DEFAULT_LOCK,
    out: str | os.PathLike[str] | None = None,
    backend: str | Backend = "auto",
    settings: BuildSettings | None = None,
    frozen: bool = False,
    cache_dir: str | os.PathLike[str] = "caches",
    allow_env_change: bool = False,
    report: str | os.PathLike[str] | None = None,
    precision: PrecisionRequest | None = None,
    progress: Progress = _quiet,
) -> BuildResult:
    """Build ``model`` reproducibly. See the module docstring for the locked flow."""
    from reprobuild.cachedir import cache_path

    t0 = time.perf_counter()
    model_path = Path(model)
    if not model_path.is_file():
        raise UsageError(f"{model_path}: no such model file; check the path")
    lock_path = Path(lock)
    be = resolve_backend(backend)
    env = be.environment()
    warnings: list[str] = []
    announce_backend(backend, be, progress)

    info = model_info(model_path, lock_path.parent)
    existing = load_lock(lock_path) if lock_path.exists() else None
    if existing is None and frozen:
        raise UsageError(
            f"{lock_path}: no lock to build from; --frozen never creates one "
            "(run once without --frozen)"
        )
    rerecord = False
    if existing is not None:
        if settings is None:
            settings = existing.settings
        if existing.environment.backend != be.name:
            raise EnvironmentMismatch(
                f"{lock_path}: recorded with backend {existing.environment.backend!r}, this build "
                f"uses {be.name!r}; pass --backend {existing.environment.backend}"
            )
        env_diff = check_lock_matches(existing, lock_path, info, settings, be)
        if env_diff:
            if not allow_env_change or frozen:
                raise EnvironmentMismatch(
                    f"{lock_path}: recorded on another environment ({'; '.join(env_diff)}); its "
                    "tactics do not exist here: build on the recorded target, or pass "
                    "--allow-env-change to re-record for this one"
                )
            warnings.append(
                "environment changed: re-recording every layer (" + "; ".join(env_diff) + ")"
            )
            rerecord = True
    settings = settings or BuildSettings()
    if settings.optimization_level < 1 and be.name == "tensorrt":
        raise UsageError("optimization level 0 ignores the timing cache; use --opt-level 1 or more")

    with tempfile.TemporaryDirectory(prefix="reprobuild-") as tmp:
        built_model, plan, notes = _prepare_model(
            model_path, existing, precision, frozen, Path(tmp), lock_path
        )
        warnings += notes
        precision_error = None
        if built_model != model_path:
            progress("measuring the precision plan's error against FP32 (ONNX Runtime)")
            precision_error = _plan_error(model_path, built_model)
        built_sha = info.sha256 if built_model == model_path else sha256_file(built_model)
        cfile = cache_path(cache_dir, env, settings, built_sha)
        lock_changes: list[str] = []
        if existing is None or rerecord:
            progress("recording build (timing every candidate)")
            cache = be.create_timing_cache(b"")
            output, log = run_build(be, built_model, settings, cache, progress, "recording")
            from reprobuild.cachedir import save_cache_bytes

            save_cache_bytes(cfile, cache.serialize())
            entries, w = entries_from_records(log.records, cache.tactic_map())
            warnings += w
            if rerecord and existing is not None:
                lost = [e.layer for e in existing.layers if e.pinned]
                if lost:
                    warnings.append(f"pins not carried to the new environment: {', '.join(lost)}")
            new_lock = Lock(info, env, settings, entries, plan)
            records, log_warnings = log.records, list(log.parser.warnings)
            hits = 0
            timed = sum(1 for r in records if r.key is not None and not r.from_cache)
            recorded = True
            lock_changes = [f"recorded {len(entries)} layers"]
        else:
            new_lock, lock_changes, pb = _locked(
                existing, be, built_model, settings, cfile, progress, warnings, frozen, lock_path
            )
            output, records, log_warnings = pb.output, pb.records, pb.log_warnings
            hits, timed, recorded = pb.cache_hits, pb.timed, False
            if existing.precision is None and plan is not None:
                if frozen:
                    raise DriftError(
                        f"{lock_path}: the lock would gain the model's observed precision plan; "
                        "--frozen refuses (run without --frozen)"
                    )
                new_lock.precision = plan
                lock_changes.append("recorded the model's observed precision")
        progress("checks passed; writing outputs")
        engine_path = Path(out) if out is not None else Path(f"{model_path.stem}.engine")
        lock_written = False
        if not frozen and (recorded or lock_changes):
            save_lock(new_lock, lock_path)
            lock_written = True
        from reprobuild.fileio import atomic_write_bytes, atomic_write_text

        atomic_write_bytes(engine_path, output.engine)
        duration = time.perf_counter() - t0
        result = BuildResult(
            engine_path=str(engine_path),
            lock_path=str(lock_path),
            report_path=None,
            backend=be.name,
            environment=env.to_dict(),
            recorded=recorded,
            lock_written=lock_written,
            lock_changes=lock_changes,
            layers=len(new_lock.layers),
            pinned=sum(1 for e in new_lock.layers if e.pinned),
            cache_hits=hits,
            timed=timed,
            duration_s=round(duration, 3),
            tactic_map=new_lock.tactic_map(),
            warnings=warnings
            + [f"log line {w.line}: {w.message}" for w in log_warnings if w.kind in _WORRYING],
            precision=None
            if new_lock.precision is None
            else {
                "mode": new_lock.precision.mode,
                "nodes": len(new_lock.precision.nodes),
                "low_precision": sum(
                    1 for n in new_lock.precision.nodes if n.precision in ("fp16", "bf16")
                ),
            },
        )
        report_path = Path(report) if report is not None else Path(f"{engine_path}.report.json")
        rep = result.to_json()
        rep["report_path"] = str(report_path)
        rep["settings"] = settings.to_dict()
        rep["precision_error"] = precision_error
        rep["log_messages"] = [w.to_json() for w in log_warnings]
        rep["records"] = [r.to_json() for r in records]
        atomic_write_text(report_path, json.dumps(rep, indent=2) + "\n")
        result.report_path = str(report_path)
    return result


_WORRYING = {"cache-not-used", "cache-invalid", "cache-error", "cache-miss"}
"""Log-message kinds that deserve a warning; the rest stay in the report's log_messages."""


def _plan_error(original: Path, converted: Path) -> dict[str, Any]:
    """Output error of the converted model against the FP32 one, on seeded inputs."""
    import onnx

    from reprobuild import precision

    fp32 = onnx.load(str(original))
    feeds, desc = precision.load_calibration(None, fp32)
    try:
        err = precision.plan_error(fp32, onnx.load(str(converted)), feeds)
    except ReprobuildError as exc:  # e.g. ONNX Runtime lacks a BF16 kernel
        return {"error": str(exc), "inputs": desc}
    clean = {k: v for k, v in err.items() if k in ("max_abs", "max_rel", "runtime")}
    return {**{k: (v if v != float("inf") else "inf") for k, v in clean.items()}, "inputs": desc}


def _locked(
    existing: Lock,
    be: Backend,
    built_model: Path,
    settings: BuildSettings,
    cfile: Path,
    progress: Progress,
    warnings: list[str],
    frozen: bool,
    lock_path: Path,
) -> tuple[Lock, list[str], PinnedBuild]:
    """Apply the lock; reconcile keys the lock lacks or has extra (a stale lock)."""
    import copy

    new_lock = copy.deepcopy(existing)
    expected = existing.tactic_map()
    changes: list[str] = []
    # Keys of this build that the lock does not list (or lists but this build lacks): the
    # lock is stale. Find them from the recording cache before pinning.
    from reprobuild.cachedir import save_cache_bytes

    cache = load_recording_cache(be, cfile, warnings)
    rec_log = None
    if cache is None or set(cache.tactic_map()) != set(expected):
        progress("recording build (creates the timing-cache keys)")
        cache = be.create_timing_cache(b"")
        _, rec_log = run_build(be, built_model, settings, cache, progress, "recording")
        save_cache_bytes(cfile, cache.serialize())
    recorded = cache.tactic_map()
    extra = sorted(set(recorded) - set(expected))
    gone = sorted(set(expected) - set(recorded))
    if extra or gone:
        msg = (
            f"{lock_path}: stale: {len(extra)} layers missing from the lock, "
            f"{len(gone)} no longer built"
        )
        if frozen:
            raise DriftError(f"{msg}; --frozen refuses to change it (run without --frozen)")
        assert rec_log is not None  # a key-set mismatch always re-records above
        fresh, w = entries_from_records(rec_log.records, {k: recorded[k] for k in extra})
        warnings += w
        new_lock.layers = [e for e in new_lock.layers if e.key not in gone] + fresh
        changes.append(f"added {len(fresh)} layers, removed {len(gone)}")
        expected = new_lock.tactic_map()
    pb = pinned_build(
        be,
        built_model,
        settings,
        expected,
        cfile,
        progress,
        warnings,
        entries=new_lock.layers,
        cache=cache,
    )
    return new_lock, changes, pb
