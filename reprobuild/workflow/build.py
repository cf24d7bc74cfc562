"""``build``: record a lock, or build from one and prove nothing drifted.

Without a lock every candidate is timed and the choices are written down. With one, the
recording cache gets every locked tactic through ``update()``, the pinned build runs, and
the cache map and engine kernels must equal the lock (see :mod:`.pinned`). A build writes
all of its outputs (lock, engine, report) only after every check passed.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.backends.base import Backend
from reprobuild.cachedir import cache_folder
from reprobuild.errors import DriftError, ReprobuildError, UsageError
from reprobuild.events import Progress, Step, quiet
from reprobuild.fileio import exclusive, sha256_file
from reprobuild.lock.model import DEFAULT_LOCK, LayerEntry, Lock
from reprobuild.lock.rules import check_lock
from reprobuild.lock.yamlio import dumps_lock, load_lock
from reprobuild.transaction import Outputs
from reprobuild.types import BuildSettings
from reprobuild.words import count
from reprobuild.workflow.buildpaths import build_paths
from reprobuild.workflow.context import (
    announce_backend,
    check_dynamic_inputs,
    check_profiles,
    model_info,
    resolve_backend,
)
from reprobuild.workflow.existing import (
    carry_pins,
    check_existing,
    expected_bits,
    lock_keys_differ,
    start_over,
)
from reprobuild.workflow.pinned import (
    SavedLog,
    entries_from_records,
    key_set_message,
    log_layer_names,
    mark_running,
    pinned_build,
    recording_cache,
    with_recorded_times,
)
from reprobuild.workflow.prepare import plan_error_report, prepare_model
from reprobuild.workflow.probe_store import edit_policy
from reprobuild.workflow.record import Built, record, repin
from reprobuild.workflow.request import PrecisionRequest
from reprobuild.workflow.ties import apply_to_entries, decide_recording

__all__ = ["BuildResult", "PrecisionRequest", "build"]

_WORRYING = {"cache-not-used", "cache-invalid", "cache-error", "cache-miss", "parser-error"}
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
    log_path: str | None = None  # build --log: the verbose log of the engine's build

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["tactic_map"] = {k: f"0x{v:x}" for k, v in sorted(self.tactic_map.items())}
        d["warnings"] = self.warnings + d.pop("log_warnings")
        return d


def build(
    model: str | os.PathLike[str],
    *,
    lock: str | os.PathLike[str] = DEFAULT_LOCK,
    out: str | os.PathLike[str] | None = None,
    backend: str | Backend = "auto",
    settings: BuildSettings | None = None,
    frozen: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    allow_env_change: bool = False,  # accepted, no longer needed: see check_existing
    re_record: bool = False,
    report: str | os.PathLike[str] | None = None,
    precision: PrecisionRequest | None = None,
    held_out: str | os.PathLike[str] | None = None,
    log: str | os.PathLike[str] | None = None,
    apply_tie_rule: bool = False,
    progress: Progress = quiet,
) -> BuildResult:
    """Build ``model`` reproducibly. See the module docstring for the locked flow.

    ``held_out``: samples (``.npz``, first axis = sample) not calibrated on; the engine's
    error against FP32 on them (and, for INT8, on the calibration set) is reported.
    ``log``: where to save the verbose log of the build that made the engine (the text
    ``reprobuild log`` reads), written with the other outputs.
    ``apply_tie_rule``: a recording writes the tie rule's choices back even where the
    backend has not been shown to honour an edited tactic (TensorRT: see record.py).
    """
    t0 = time.perf_counter()
    cache_dir = cache_folder(cache_dir, lock)
    model_path, lock_path, engine_path, report_path, log_path = build_paths(
        model, lock, out, report, cache_dir, frozen, precision, held_out, log
    )
    # One lock writer: the file lock is held from reading the lock to committing it, so a
    # `pin` made meanwhile waits and is applied to the new lock instead of being lost.
    with contextlib.nullcontext() if frozen else exclusive(lock_path):
        return _build(
            model_path, lock_path, engine_path, report_path, log_path, t0,
            backend=backend, settings=settings, frozen=frozen, cache_dir=cache_dir,
            re_record=re_record, precision=precision, held_out=held_out, progress=progress,
            apply_tie_rule=apply_tie_rule,
        )  # fmt: skip


def _build(
    model_path: Path,
    lock_path: Path,
    engine_path: Path,
    report_path: Path,
    log_path: Path | None,
    t0: float,
    *,
    backend: str | Backend,
    settings: BuildSettings | None,
    frozen: bool,
    cache_dir: str | os.PathLike[str],
    re_record: bool,
    precision: PrecisionRequest | None,
    held_out: str | os.PathLike[str] | None,
    progress: Progress,
    apply_tie_rule: bool = False,
) -> BuildResult:
    """``build`` once its paths are checked (and the lock's file lock is held)."""
    from reprobuild.cachedir import cache_path
    from reprobuild.workflow.layers import layers_path

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
        if rerecord and not existing.environment.identity:  # recorded in its place
            existing, pins = start_over(existing, info, settings, be, lock_path, warnings)
        elif not rerecord:  # the keys this target was recorded with
            check_lock(existing, lock_path)  # no locked tactic that a kernel rule denies
            be = be.for_target(existing.environment)
    if existing is None or rerecord:  # what a recording needs beyond building (TensorRT:
        # a CUDA runtime for the lock's expected bits), asked before any work
        getattr(be, "check_recording", lambda: None)()
    settings = settings or BuildSettings()
    check_profiles(settings)
    check_dynamic_inputs(model_path, settings)
    be.check_settings(settings)

    # All of the outputs, or none: the log is staged as it is written, the rest at the end.
    with tempfile.TemporaryDirectory(prefix="reprobuild-") as tmp, Outputs() as outputs:
        save = None if log_path is None else outputs.stage_lines(log_path, "builder log")
        built_model, plan, notes = prepare_model(
            model_path, None if re_record else existing, precision, frozen, Path(tmp), lock_path,
            progress,
        )  # fmt: skip
        warnings += notes
        precision_error = None
        if built_model != model_path:
            progress(Step("measuring the precision plan's error against FP32 (ONNX Runtime)"))
            precision_error = plan_error_report(model_path, built_model)
            if "error" in precision_error:  # the report says why; so does the build
                warnings.append(f"precision error not measured: {precision_error['error']}")
        built_sha = info.sha256 if built_model == model_path else sha256_file(built_model)
        cfile = cache_path(cache_dir, env, settings, built_sha)
        if existing is None or rerecord:
            others = [] if existing is None else existing.targets()
            others = [t for t in others if t.name != env.name and t.layers]
            fresh = Lock(info, env, settings, [], plan, others=others)
            done = record(be, built_model, fresh, cfile, progress, warnings, save, apply_tie_rule)
            if others:
                done.changes.append(f"added target {env.name} beside {len(others)}")
            if pins:
                done = repin(done, pins, be, built_model, settings, cfile, progress, warnings, save)
        else:
            done = _locked(
                existing, be, built_model, settings, cfile, progress, warnings, frozen, lock_path,
                save, apply_tie_rule,
            )  # fmt: skip
            if existing.precision is None and plan is not None:
                if frozen:
                    raise DriftError(
                        f"{lock_path}: the lock would gain the model's observed precision plan; "
                        "--frozen refuses (run without --frozen)"
                    )
                done.lock.precision = plan
                done.changes.append("recorded the model's observed precision")
        plan_check = _plan_check(done, built_model, warnings)
        if not done.lock.layers:
            from reprobuild.workflow.untimed import empty_lock_warning

            warnings.append(empty_lock_warning(be, built_model))
        seeded = any(o.inputs == "seeded:0" for o in done.lock.outputs)
        replay_check = None
        if done.recorded or (not seeded and not frozen):
            progress(Step("running the engine on seeded inputs (the target's expected bits)"))
            try:
                bits = expected_bits(be, done.output.engine, model_path)
            except ReprobuildError as err:  # e.g. an engine whose inputs are FP16
                warnings.append(f"no expected bits recorded for this target: {err}")
            else:
                replay_check = _recording_vs_replay(be, done, model_path, bits.sha256, warnings)
                done.lock.outputs = [o for o in done.lock.outputs if o.inputs != bits.inputs]
                done.lock.outputs.append(bits)
                if not done.recorded:
                    done.changes.append("recorded the target's expected bits")
        from reprobuild.workflow.sampleacc import engine_accuracy  # numpy, only when built

        accuracy = engine_accuracy(
            lambda f: be.run(done.output.engine, f),
            done.lock.precision,
            model_path,
            precision,
            held_out,
            settings,
            progress,
        )
        progress(Step("checks passed; writing outputs"))
        result = _result(done, be, env.to_dict(), engine_path, lock_path, warnings, frozen, t0)
        result.accuracy = accuracy
        # Engine layer information: written with the engine, summarised below.
        from reprobuild.workflow.layers import summary_of

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
        # The tie band per key, how it was measured, and what the rule changed (recordings).
        rep["tie_break"] = None if done.ties is None else done.ties.to_json()
        # a recording: whether its own engine gave the bits of the replay the lock records
        rep["recording_vs_replay"] = replay_check
        # a recording: keys its replay timed that it had not made, locked from the replay
        rep["replay_added_keys"] = done.replay_added
        rep["precision_error"] = precision_error
        rep["log_messages"] = [w.to_json() for w in done.log_warnings]
        rep["records"] = [r.to_json() for r in done.records]
        rep["plan_check"] = None if plan_check is None else plan_check.to_json()
        rep["log_path"] = result.log_path = None if log_path is None else str(log_path)
        layer_text = done.output.layer_info
        if result.lock_written:
            outputs.stage_lock(lock_path, dumps_lock(done.lock))
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


def _recording_vs_replay(
    be: Backend, done: Built, model_path: Path, replay: str, warnings: list[str]
) -> dict[str, Any] | None:
    """A recording's own engine run on the same seeded inputs as the replay whose bits the
    lock records; a difference is reported (the lock keeps the replay's: every later locked
    build is a replay)."""
    if done.recording_engine is None:
        return None
    try:  # the lock's bits are the replay's: this run only compares, it never decides
        own = expected_bits(be, done.recording_engine, model_path).sha256
    except ReprobuildError as err:
        warnings.append(f"the recording engine could not be run to compare with the replay: {err}")
        return {"same": None, "recording_sha256": None, "replay_sha256": replay}
    if own != replay:
        warnings.append(
            f"the recording engine gives other bits ({own[:16]}) than a build from its timing "
            f"cache ({replay[:16]}); the lock records the replay's, which every locked build "
            "makes"
        )
    return {"same": own == replay, "recording_sha256": own, "replay_sha256": replay}


def _plan_check(done: Built, built_model: Path, warnings: list[str]) -> Any:
    """The engine against the lock's precision plan (``plancheck.judge`` decides: a
    recording keeps its own verdict, a locked build fails only on a change from it)."""
    from reprobuild.workflow.plancheck import check_engine, judge

    plan = done.lock.precision
    check = check_engine(done.output.layer_info, plan, built_model)
    return judge(check, plan, done.recorded, warnings)


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
    save: SavedLog | None = None,
    apply_tie_rule: bool = False,
) -> Built:
    """Apply the lock; reconcile keys the lock lacks or has extra (a stale lock): the new
    keys' near-ties follow the same edit policy as a recording's."""
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
        reject=lambda c: lock_keys_differ(set(c.tactic_map()), set(expected)),
        store=False,  # written with the outputs: a failed or --frozen build writes no cache
    )
    recorded = rec.cache.tactic_map()
    extra = sorted(set(recorded) - set(expected))
    gone = sorted(set(expected) - set(recorded))
    if gone and existing.schema != 1:  # schema 1: keys of an older reprobuild, carried below
        names = {**log_layer_names(rec.log), **{e.key: e.layer for e in existing.layers}}
        raise DriftError(key_set_message(lock_path, extra, gone, names, cfile))
    if extra or gone:
        msg = (
            f"{lock_path}: stale: {count(len(extra), 'layer')} missing from the lock, "
            f"{len(gone)} no longer built"
        )
        if frozen:
            raise DriftError(f"{msg}; --frozen refuses to change it (run without --frozen)")
        assert rec.log is not None  # a key-set mismatch always re-records above
        fresh, w = entries_from_records(
            rec.log.records, {k: recorded[k] for k in extra}, rec.log.layer_info, rec.log.known
        )
        fresh = with_recorded_times(fresh, rec.cache)
        # the new layers' near-ties are decided by the rule too (from the log's costs)
        # (written back only where edits are proven honoured, as in a recording: record.py)
        ties = decide_recording(rec.log.records, None, settings)
        apply_to_entries(fresh, ties, edit_policy(be, apply_tie_rule))
        warnings += w
        if existing.schema == 1 and gone:  # keys of an older reprobuild: keep its pins
            kept, dropped = carry_pins([e for e in new_lock.layers if e.key in gone], fresh)
            if kept:
                changes.append(f"carried {len(kept)} pins to the new keys: {', '.join(kept)}")
            if dropped:
                warnings.append(f"pins not carried to the new keys: {', '.join(dropped)}")
        new_lock.layers = [e for e in new_lock.layers if e.key not in gone] + fresh
        changes.append(f"added {count(len(fresh), 'layer')}, removed {len(gone)}")
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
        save=save,
    )
    if extra or gone:  # the new layers' key choice, as this build made it
        mark_running(new_lock.layers, pb.output.layer_info)
    built = Built(
        new_lock, pb.output, pb.records, pb.log_warnings, pb.cache_hits, pb.timed, False, changes
    )
    built.cache_bytes = None if frozen else rec.fresh
    return built


def _result(
    done: Built,
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
