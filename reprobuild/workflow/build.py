"""``build``: record a lock, or build from one and prove nothing drifted.

Without a lock every candidate is timed and the choices are written down. With one, the
recording cache gets every locked tactic through ``update()``, the pinned build runs, and
the cache map and engine kernels must equal the lock (see :mod:`.pinned`). A build writes
all of its outputs (lock, engine, report) only after every check passed.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.accuracy import json_safe
from reprobuild.backends.base import Backend, BuildOutput
from reprobuild.errors import DriftError, ReprobuildError, UsageError
from reprobuild.events import Progress, Step, quiet
from reprobuild.fileio import sha256_file
from reprobuild.lock.model import DEFAULT_LOCK, LayerEntry, Lock
from reprobuild.lock.yamlio import dumps_lock, load_lock
from reprobuild.transaction import Outputs, check_output_path
from reprobuild.types import BuildSettings
from reprobuild.workflow.context import (
    announce_backend,
    check_model_file,
    check_profiles,
    model_info,
    resolve_backend,
)
from reprobuild.workflow.existing import carry_pins, check_existing, expected_bits, start_over
from reprobuild.workflow.pinned import (
    Recording,
    entries_from_records,
    pinned_build,
    recording_cache,
    run_build,
    with_recorded_times,
)
from reprobuild.workflow.prepare import prepare_model
from reprobuild.workflow.request import PrecisionRequest

__all__ = ["BuildResult", "PrecisionRequest", "build"]

_WORRYING = {"cache-not-used", "cache-invalid", "cache-error", "cache-miss"}
"""Log-message kinds that deserve a warning; the rest stay in the report's log_messages."""


@dataclass
class BuildResult:
    """What ``reprobuild build`` did, as plain data (the CLI only prints it).

    ``warnings`` are the workflow's own; ``log_warnings`` are worrying builder log lines. JSON
    lists both under ``warnings``, as it always has.
    """

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
    log_warnings: list[str] = field(default_factory=list)
    layers_path: str | None = None  # ENGINE.layers.json: the engine's layer information
    engine_layers: dict[str, Any] | None = None  # its summary (layers per precision, reformats)
    # the engine vs the FP32 model on the calibration / held-apart samples, by set
    accuracy: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["tactic_map"] = {k: f"0x{v:x}" for k, v in sorted(self.tactic_map.items())}
        d["warnings"] = self.warnings + d.pop("log_warnings")
        return d


@dataclass
class _Built:
    """One build's product before anything is written."""

    lock: Lock
    output: BuildOutput
    records: list[Any]
    log_warnings: list[Any]
    cache_hits: int
    timed: int
    recorded: bool
    changes: list[str]
    cache_bytes: bytes | None = None  # a recording build's cache, written with the outputs


def build(
    model: str | os.PathLike[str],
    *,
    lock: str | os.PathLike[str] = DEFAULT_LOCK,
    out: str | os.PathLike[str] | None = None,
    backend: str | Backend = "auto",
    settings: BuildSettings | None = None,
    frozen: bool = False,
    cache_dir: str | os.PathLike[str] = "caches",
    allow_env_change: bool = False,  # accepted, no longer needed: see check_existing
    re_record: bool = False,
    report: str | os.PathLike[str] | None = None,
    precision: PrecisionRequest | None = None,
    held_out: str | os.PathLike[str] | None = None,
    progress: Progress = quiet,
) -> BuildResult:
    """Build ``model`` reproducibly. See the module docstring for the locked flow.

    ``held_out``: samples (``.npz``, first axis = sample) not calibrated on; the engine's
    error against FP32 on them (and, for INT8, on the calibration set) is reported.
    """
    from reprobuild.cachedir import cache_path

    t0 = time.perf_counter()
    model_path = check_model_file(model)
    lock_path = Path(lock)
    # Every output path is checked before any work, and all are written together at the end.
    engine_path = Path(out) if out is not None else Path(f"{model_path.stem}.engine")
    report_path = Path(report) if report is not None else Path(f"{engine_path}.report.json")
    if not frozen:
        check_output_path(lock_path, "lock")
    check_output_path(engine_path, "engine")
    from reprobuild.workflow.layers import layers_path

    check_output_path(layers_path(engine_path), "engine layer information")
    check_output_path(report_path, "build report")
    check_output_path(Path(cache_dir) / "x", "recording timing cache")
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
    pins: list[LayerEntry] = []
    if existing is not None and re_record:
        if frozen:
            raise UsageError("--re-record rewrites the lock and --frozen never does; drop one")
        existing, pins = start_over(existing, info, settings, be, lock_path, warnings)
        settings = settings or existing.settings
        rerecord = True
    elif existing is not None:
        settings = settings or existing.settings
        existing, rerecord = check_existing(
            existing, lock_path, info, settings, be, frozen, warnings
        )
    settings = settings or BuildSettings()
    check_profiles(settings)
    be.check_settings(settings)

    with tempfile.TemporaryDirectory(prefix="reprobuild-") as tmp:
        built_model, plan, notes = prepare_model(
            model_path, None if re_record else existing, precision, frozen, Path(tmp), lock_path
        )
        warnings += notes
        precision_error = None
        if built_model != model_path:
            progress(Step("measuring the precision plan's error against FP32 (ONNX Runtime)"))
            precision_error = _plan_error(model_path, built_model)
        built_sha = info.sha256 if built_model == model_path else sha256_file(built_model)
        cfile = cache_path(cache_dir, env, settings, built_sha)
        if existing is None or rerecord:
            others = [] if existing is None else existing.targets()
            others = [t for t in others if t.name != env.name and t.layers]
            fresh = Lock(info, env, settings, [], plan, others=others)
            done = _record(be, built_model, fresh, cfile, progress, warnings)
            if others:
                done.changes.append(f"added target {env.name} beside {len(others)}")
            if pins:
                done = _repin(done, pins, be, built_model, settings, cfile, progress, warnings)
        else:
            done = _locked(
                existing, be, built_model, settings, cfile, progress, warnings, frozen, lock_path
            )
            if existing.precision is None and plan is not None:
                if frozen:
                    raise DriftError(
                        f"{lock_path}: the lock would gain the model's observed precision plan; "
                        "--frozen refuses (run without --frozen)"
                    )
                done.lock.precision = plan
                done.changes.append("recorded the model's observed precision")
        plan_check = _plan_check(done, built_model, warnings)
        seeded = any(o.inputs == "seeded:0" for o in done.lock.outputs)
        if done.recorded or (not seeded and not frozen):
            progress(Step("running the engine on seeded inputs (the target's expected bits)"))
            try:
                bits = expected_bits(be, done.output.engine, model_path)
            except ReprobuildError as err:  # e.g. an engine whose inputs are FP16
                warnings.append(f"no expected bits recorded for this target: {err}")
            else:
                done.lock.outputs = [o for o in done.lock.outputs if o.inputs != bits.inputs]
                done.lock.outputs.append(bits)
                if not done.recorded:
                    done.changes.append("recorded the target's expected bits")
        accuracy = _sample_accuracy(be, done, model_path, precision, held_out, settings, progress)
        progress(Step("checks passed; writing outputs"))
        result = _result(done, be, env.to_dict(), engine_path, lock_path, warnings, frozen, t0)
        result.accuracy = accuracy
        # Engine layer information (issue 14): written with the engine, summarised below.
        from reprobuild.workflow.layers import layers_path, summary_of

        layers_file = layers_path(engine_path)
        result.layers_path = str(layers_file)
        result.engine_layers = summary_of(done.output.layer_info)
        rep = result.to_json()
        rep["report_path"] = str(report_path)
        rep["settings"] = settings.to_dict()
        # How the backend ran, where it says (the reference backend's BLAS threads change
        # the last bits of some kernels, so a report must show them); never part of keys.
        rep["blas_threads"] = done.output.extra.get("blas_threads")
        # How the tactics were timed (the reference backend's policy, kernel runs, candidates
        # dropped early: reprobuild/backends/reference/autotune.py); None for TensorRT.
        rep["autotune"] = done.output.extra.get("autotune")
        rep["precision_error"] = precision_error
        rep["log_messages"] = [w.to_json() for w in done.log_warnings]
        rep["records"] = [r.to_json() for r in done.records]
        rep["plan_check"] = None if plan_check is None else plan_check.to_json()
        layer_text = done.output.layer_info
        with Outputs() as outputs:  # all of them, or none
            if result.lock_written:
                outputs.stage_text(lock_path, dumps_lock(done.lock), "lock")
            outputs.stage_bytes(engine_path, done.output.engine, "engine")
            outputs.stage_text(
                layers_file,
                layer_text if layer_text.endswith("\n") else layer_text + "\n",
                "engine layer information",
            )
            outputs.stage_text(report_path, json.dumps(rep, indent=2) + "\n", "build report")
            if done.cache_bytes is not None:
                outputs.stage_bytes(cfile, done.cache_bytes, "recording timing cache")
            outputs.commit()
        result.report_path = str(report_path)
    return result


def _sample_accuracy(
    be: Backend,
    done: _Built,
    model_path: Path,
    request: PrecisionRequest | None,
    held_out: str | os.PathLike[str] | None,
    settings: BuildSettings,
    progress: Progress,
) -> dict[str, Any] | None:
    """The engine against FP32 on the calibration samples (INT8: the first ``samples`` the
    lock's plan was calibrated on) and on ``held_out``; None when neither is given (then
    the model is not read again, nor the sample modules imported)."""
    plan = done.lock.precision
    quant = None if plan is None or plan.mode != "int8" else plan.quantization
    calib = None if quant is None or request is None else request.calibration
    if calib is None and held_out is None:
        return None
    from reprobuild.workflow.sampleacc import compare_sets, load_sets, run_sets

    sets = load_sets(
        model_path,
        calib,
        None if quant is None else quant.samples,
        None if held_out is None else str(held_out),
    )
    if not sets:
        return None
    progress(Step("measuring the engine's error against FP32 on the sample sets"))
    outputs = run_sets(lambda f: be.run(done.output.engine, f), sets, model_path, settings)
    return compare_sets(model_path, sets, outputs, settings)


def _plan_check(done: _Built, built_model: Path, warnings: list[str]) -> Any:
    """The engine against the lock's precision plan (``plancheck.judge`` decides: a
    recording keeps its own verdict, a locked build fails only on a change from it)."""
    from reprobuild.workflow.plancheck import check_engine, judge

    plan = done.lock.precision
    check = check_engine(done.output.layer_info, plan, built_model)
    return judge(check, plan, done.recorded, warnings)


def _record(
    be: Backend,
    built_model: Path,
    new_lock: Lock,
    cfile: Path,
    progress: Progress,
    warnings: list[str],
) -> _Built:
    """A recording build: every candidate timed, every choice becomes a lock entry. Its
    timing cache is written with the other outputs, so a failed build leaves the old one."""
    progress(Step("recording build (timing every candidate)"))
    cache = be.create_timing_cache(b"")
    output, log = run_build(be, built_model, new_lock.settings, cache, progress, "recording")
    entries, w = entries_from_records(log.records, cache.tactic_map(), output.layer_info)
    warnings += w
    new_lock.layers = with_recorded_times(entries, cache)
    timed = sum(1 for r in log.records if r.key is not None and not r.from_cache)
    return _Built(
        new_lock,
        output,
        log.records,
        list(log.parser.warnings),
        0,
        timed,
        True,
        [f"recorded {len(entries)} layers"],
        bytes(cache.serialize()),
    )


def _repin(
    done: _Built,
    pins: list[LayerEntry],
    be: Backend,
    built_model: Path,
    settings: BuildSettings,
    cfile: Path,
    progress: Progress,
    warnings: list[str],
) -> _Built:
    """``--re-record``: the old pins that still apply, built from the new recording's cache
    (so the engine runs the pinned tactics); the others are listed as dropped."""
    kept, dropped = carry_pins(pins, done.lock.layers)
    if dropped:
        warnings.append(f"pins dropped by the re-recording: {', '.join(dropped)}")
    if not kept:
        return done
    assert done.cache_bytes is not None  # a recording build keeps its cache
    recording = Recording(be.create_timing_cache(done.cache_bytes))
    pb = pinned_build(
        be, built_model, settings, done.lock.tactic_map(), cfile, progress, warnings,
        entries=done.lock.layers, recording=recording,
    )  # fmt: skip
    done.output, done.records, done.log_warnings = pb.output, pb.records, pb.log_warnings
    done.changes.append(f"kept {len(kept)} pins: {', '.join(kept)}")
    return done


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
) -> _Built:
    """Apply the lock; reconcile keys the lock lacks or has extra (a stale lock)."""
    new_lock = copy.deepcopy(existing)
    expected = existing.tactic_map()
    changes: list[str] = []
    # Keys of this build that the lock does not list (or lists but this build lacks): the
    # lock is stale. Find them from the recording cache before pinning.
    rec = recording_cache(
        be,
        built_model,
        settings,
        cfile,
        progress,
        warnings,
        reject=lambda c: None if set(c.tactic_map()) == set(expected) else "",
    )
    recorded = rec.cache.tactic_map()
    extra = sorted(set(recorded) - set(expected))
    gone = sorted(set(expected) - set(recorded))
    if extra or gone:
        msg = (
            f"{lock_path}: stale: {len(extra)} layers missing from the lock, "
            f"{len(gone)} no longer built"
        )
        if frozen:
            raise DriftError(f"{msg}; --frozen refuses to change it (run without --frozen)")
        assert rec.log is not None  # a key-set mismatch always re-records above
        fresh, w = entries_from_records(
            rec.log.records, {k: recorded[k] for k in extra}, rec.log.layer_info
        )
        fresh = with_recorded_times(fresh, rec.cache)
        warnings += w
        if existing.schema == 1 and gone:  # keys of an older reprobuild: keep its pins
            kept, dropped = carry_pins([e for e in new_lock.layers if e.key in gone], fresh)
            if kept:
                changes.append(f"carried {len(kept)} pins to the new keys: {', '.join(kept)}")
            if dropped:
                warnings.append(f"pins not carried to the new keys: {', '.join(dropped)}")
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
        recording=rec,
    )
    return _Built(
        new_lock, pb.output, pb.records, pb.log_warnings, pb.cache_hits, pb.timed, False, changes
    )


def _result(
    done: _Built,
    be: Backend,
    env: dict[str, Any],
    engine_path: Path,
    lock_path: Path,
    warnings: list[str],
    frozen: bool,
    t0: float,
) -> BuildResult:
    plan = done.lock.precision
    return BuildResult(
        engine_path=str(engine_path),
        lock_path=str(lock_path),
        report_path=None,
        backend=be.name,
        environment=env,
        recorded=done.recorded,
        lock_written=not frozen and (done.recorded or bool(done.changes)),
        lock_changes=done.changes,
        layers=len(done.lock.layers),
        pinned=sum(1 for e in done.lock.layers if e.pinned),
        cache_hits=done.cache_hits,
        timed=done.timed,
        duration_s=round(time.perf_counter() - t0, 3),
        tactic_map=done.lock.tactic_map(),
        warnings=warnings,
        log_warnings=[
            f"log line {w.line}: {w.message}" for w in done.log_warnings if w.kind in _WORRYING
        ],
        precision=None
        if plan is None
        else {
            "mode": plan.mode,
            "nodes": len(plan.nodes),
            "low_precision": sum(1 for n in plan.nodes if n.precision in ("fp16", "bf16")),
        },
    )


def _plan_error(original: Path, converted: Path) -> dict[str, Any]:
    """Output error of the converted model against the FP32 one, on seeded inputs."""
    import onnx

    from reprobuild.precision.calibration import load_calibration
    from reprobuild.precision.measure import plan_error

    fp32 = onnx.load(str(original))
    feeds, desc = load_calibration(None, fp32)
    try:
        err = plan_error(fp32, onnx.load(str(converted)), feeds)
    except ReprobuildError as exc:  # e.g. ONNX Runtime lacks a BF16 kernel
        return {"error": str(exc), "inputs": desc}
    keep = ("max_abs", "max_rel", "cosine", "top1_agreement", "runtime")
    clean = {k: v for k, v in err.items() if k in keep}
    return {**json_safe(clean), "inputs": desc}
