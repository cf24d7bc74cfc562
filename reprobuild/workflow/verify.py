"""``verify``: proving that a lock reproduces, and that the proof could have failed.

Reproducibility is judged on bits (sha256 of every output, every rebuild) and on the tactic
map; a positive control (:mod:`.control`) says whether a tactic change would have shown in
those bits at all. Accuracy against ONNX Runtime is reported beside it, never confused with
it.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from reprobuild.accuracy import Tolerance, json_safe
from reprobuild.backends.base import Backend
from reprobuild.errors import UsageError
from reprobuild.events import Progress, Step, quiet
from reprobuild.fileio import sha256_file
from reprobuild.lock.model import DEFAULT_LOCK, NO_IDENTITY, OutputDigest
from reprobuild.lock.rules import check_lock
from reprobuild.workflow.context import announce_backend, open_lock, resolve_backend
from reprobuild.workflow.control import (
    Control,
    ProbeContext,
    TacticProbe,
    positive_control,
    sensitivity,
)
from reprobuild.workflow.determinism import (
    BatchCheck,
    RunCheck,
    batch_inputs,
    check_batch,
    find_culprits,
    repeat_runs,
)
from reprobuild.workflow.outputs import (
    inputs_accuracy,
    inputs_label,
    load_inputs,
    output_hashes,
    outputs_digest,
    select_outputs,
    tactic_map_digest,
)
from reprobuild.workflow.pinned import pinned_build
from reprobuild.workflow.plancheck import check_engine
from reprobuild.workflow.prepare import prepare_model
from reprobuild.workflow.sampleacc import compare_sets, load_sets, run_sets


@dataclass
class BuildCheck:
    index: int
    output_sha256: dict[str, str]
    drift: list[dict[str, Any]]  # per layer: layer, key, locked, built
    problems: list[str]
    duration_s: float
    plan_differs: list[str] = field(default_factory=list)  # layers off the precision plan
    # the strict build failed and was built again without ERROR_ON_TIMING_CACHE_MISS
    retry: str | None = None


@dataclass
class VerifyResult:
    reproducible: bool
    lock_path: str
    model_path: str
    backend: str
    rebuilds: int
    inputs: str
    builds: list[BuildCheck]
    differing_outputs: list[str]
    accuracy: dict[str, Any]
    report_path: str | None = None
    layers: int = 0
    control: Control | None = None  # None: skipped (--no-control, or the rebuilds differ)
    sensitivity: list[TacticProbe] | None = None
    plan_check: dict[str, Any] | None = None  # the engine against the lock's precision plan
    # the first engine vs the FP32 model on the calibration / held-apart samples, by set
    sample_accuracy: dict[str, Any] | None = None
    target: str = ""  # the lock's target this machine verified
    inputs_label: str = ""  # what the lock calls these inputs (seeded:N or sha256:...)
    machine: dict[str, Any] = field(default_factory=dict)  # host and advisory fields
    tactic_map_sha256: str = ""
    outputs_sha256: str = ""  # the first rebuild's outputs, all in one digest
    recorded_sha256: str | None = None  # what the lock records for these inputs (None: none)
    digests_recorded: bool = False  # --record-digests wrote outputs_sha256 into the lock
    outputs_chosen: list[str] | None = None  # --outputs: only these compared (None: all)
    tolerance: dict[str, float] | None = None  # --atol/--rtol: accuracy gates too
    run_check: RunCheck | None = None  # --runs N above 1: each engine run N times
    batch_invariance: BatchCheck | None = None  # --batch-invariance

    @property
    def deterministic(self) -> bool:
        """False when an engine gave other bits on a later run, or a sample alone other
        bits than inside its batch (True where neither was checked)."""
        batch = self.batch_invariance
        runs = self.run_check is None or self.run_check.deterministic
        return runs and (batch is None or batch.invariant is not False)

    @property
    def within_tolerance(self) -> bool | None:
        """Whether every element is within --atol/--rtol of ONNX Runtime's (None: no
        tolerance given; False too when the accuracy could not be measured)."""
        if self.tolerance is None:
            return None
        return bool(self.accuracy.get("tolerance", {}).get("within"))

    @property
    def matches_recorded(self) -> bool | None:
        """Whether the bits equal the ones the lock records for this target and these
        inputs (the proof across machines); None when the lock records none."""
        if self.recorded_sha256 is None:
            return None
        return self.outputs_sha256 == self.recorded_sha256

    @property
    def follows_plan(self) -> bool:
        """False when a rebuilt engine ran a layer in another precision than planned."""
        return not any(b.plan_differs for b in self.builds)

    @property
    def nothing_locked(self) -> bool:
        """The lock has no layers: the rebuilds agree, but no tactic was there to hold."""
        return self.layers == 0

    @property
    def retries(self) -> list[str]:
        """Every pinned build (rebuilds, control, sensitivity) that was retried without
        ERROR_ON_TIMING_CACHE_MISS, as ``rebuild N: ...`` / ``control LAYER -> 0x..: ...``."""
        out = [f"rebuild {b.index + 1}: {b.retry}" for b in self.builds if b.retry]
        probes = [*(self.control.probes if self.control else []), *(self.sensitivity or [])]
        seen = set()
        for p in probes:
            if p.retry and (p.key, p.tried) not in seen:
                seen.add((p.key, p.tried))
                out.append(f"control {p.layer} -> 0x{p.tried:x}: {p.retry}")
        return out

    @property
    def power(self) -> bool | None:
        """Whether a single-tactic change reached the outputs; None when not checked."""
        return None if self.control is None else self.control.power

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["builds"] = [b.__dict__ for b in self.builds]
        d["accuracy"] = json_safe(self.accuracy)
        d["power"] = self.power
        d["nothing_locked"] = self.nothing_locked
        d["follows_plan"] = self.follows_plan
        d["matches_recorded"] = self.matches_recorded
        d["within_tolerance"] = self.within_tolerance
        d["strict_retries"] = self.retries
        d["deterministic"] = self.deterministic
        d["run_check"] = None if self.run_check is None else self.run_check.to_json()
        d["batch_invariance"] = (
            None if self.batch_invariance is None else self.batch_invariance.to_json()
        )
        d["control"] = None if self.control is None else json_safe(self.control.to_json())
        d["sensitivity"] = (
            None if self.sensitivity is None else [json_safe(p.to_json()) for p in self.sensitivity]
        )
        return d


def verify(
    model: str | os.PathLike[str] | None = None,
    *,
    lock: str | os.PathLike[str] = DEFAULT_LOCK,
    rebuilds: int = 3,
    inputs: str | os.PathLike[str] | None = None,
    report: str | os.PathLike[str] | None = None,
    backend: str | Backend = "auto",
    cache_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    control: bool = True,
    control_limit: int | None = None,
    with_sensitivity: bool = False,
    calibration: str | os.PathLike[str] | None = None,
    held_out: str | os.PathLike[str] | None = None,
    target: str | None = None,
    record_digests: bool = False,
    outputs: list[str] | None = None,
    tolerance: Tolerance | None = None,
    runs: int = 1,
    batch_invariance: bool = False,
    progress: Progress = quiet,
) -> VerifyResult:
    """Rebuild ``rebuilds`` times from the lock and prove the outputs bit-identical.

    ``control`` adds the positive control (at most ``control_limit`` probe builds, default
    two per layer with another candidate) when the rebuilds agree; ``with_sensitivity``
    switches every layer in turn, reusing the control's builds. ``calibration`` (the
    INT8 lock's data: its first ``samples`` are used) and ``held_out`` sample sets add the
    first engine's error against FP32 on them. The first rebuild's bits are compared with
    the ones the lock records for this machine's target (or ``target``) and these inputs:
    other bits are not reproducible. ``record_digests`` adds them where the lock has none
    for these inputs (the only time verify writes the lock). ``inputs`` may hold any number
    of samples along the first axis (every one is run); ``outputs`` names the outputs that
    are compared (default: all), and then no digest is compared with or recorded in the
    lock, whose digests cover every output. ``tolerance`` makes the accuracy against ONNX
    Runtime decisive: an element beyond it is :attr:`VerifyResult.within_tolerance` False.
    ``runs`` runs each rebuilt engine that many times on the same inputs and
    ``batch_invariance`` the first one's samples alone against inside their batch
    (:mod:`.determinism`, which also names the layers when either fails).
    """
    from reprobuild.cachedir import cache_folder, cache_path

    cache_dir = cache_folder(cache_dir, lock)
    if rebuilds < 1:
        raise UsageError(f"--rebuilds must be at least 1, got {rebuilds}")
    if runs < 1:
        raise UsageError(f"--runs must be at least 1, got {runs}")
    if control_limit is not None and control_limit < 1:
        raise UsageError(f"--control-limit must be at least 1, got {control_limit}")
    if report is not None:  # before any build: an hour of rebuilds must not end in a typo
        from reprobuild.transaction import check_output_path

        check_output_path(report, "verify report")
    be = resolve_backend(backend)
    announce_backend(backend, be, progress)
    notes: list[str] = []
    if report is not None:
        from reprobuild.transaction import check_distinct

        check_distinct(
            [(report, "verify report")],
            [
                (lock, "lock"),
                (model, "model"),
                (inputs, "inputs"),
                (calibration, "calibration data"),
                (held_out, "held-apart samples"),
            ],
            cache_dir,
        )
    data, lock_path, model_path = open_lock(lock, model, be, notes, target=target)
    check_lock(data, lock_path)  # its rebuilds are locked builds: no tactic a rule denies
    be = be.for_target(data.environment)  # the keys this target was recorded with
    if report is not None:
        check_distinct([(report, "verify report")], [(model_path, "model")])
    for note in notes:
        progress(Step(f"warning: {note}"))
    chosen = select_outputs(model_path, outputs)
    if chosen is not None and record_digests:
        raise UsageError(
            "--record-digests records the digest of every output: drop --outputs to record it"
        )
    samples = load_inputs(inputs, model_path, seed)
    feeds, inputs_desc = samples.feeds, samples.description
    label = inputs_label(inputs, seed)
    recorded = None
    if chosen is None:  # the lock's digests cover every output
        recorded = next((o.sha256 for o in data.outputs if o.inputs == label), None)

    def select(got: dict[str, Any]) -> dict[str, Any]:
        return got if chosen is None else {n: got[n] for n in chosen}

    def run_engine(engine: Any) -> dict[str, Any]:
        return select(samples.run(partial(be.run, engine)))

    quant = None if data.precision is None else data.precision.quantization
    sets = load_sets(
        model_path,
        None if calibration is None else str(calibration),
        None if quant is None else quant.samples,
        None if held_out is None else str(held_out),
    )
    set_outputs: list[dict[str, Any]] = []
    expected = data.tactic_map()
    names = {e.key: e.layer for e in data.layers}
    checks: list[BuildCheck] = []
    run_check = RunCheck(runs, rebuilds) if runs > 1 else None
    batch: BatchCheck | None = None  # set by the first rebuild, or now if none can be run
    batch_feeds = None
    if batch_invariance:
        import onnx

        proto = onnx.load(str(model_path), load_external_data=False)
        batch_feeds, why = batch_inputs(
            feeds, samples.count, samples.batch, proto, data.settings, seed
        )
        batch = BatchCheck(None, why) if batch_feeds is None else None

    def batch_of(engine: Any) -> BatchCheck:
        assert batch_feeds is not None
        return check_batch(lambda f: select(be.run(engine, f)), batch_feeds)

    first_outputs: dict[str, Any] | None = None
    first_layer_info: str | None = None
    plan_check: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="reprobuild-verify-") as tmp:
        built_model, _, _ = prepare_model(model_path, data, None, True, Path(tmp), lock_path)
        built_sha = sha256_file(built_model)
        cfile = cache_path(cache_dir, be.environment(), data.settings, built_sha)
        for i in range(rebuilds):
            progress(Step(f"rebuild {i + 1}/{rebuilds}"))
            t0 = time.perf_counter()
            warnings: list[str] = []
            pb = pinned_build(
                be,
                built_model,
                data.settings,
                expected,
                cfile,
                progress,
                warnings,
                entries=data.layers,
                strict=False,
            )
            drift = [
                {
                    "layer": names.get(k, "?"),
                    "key": k,
                    "locked": None if k not in expected else f"0x{expected[k]:x}",
                    "built": None if k not in pb.after else f"0x{pb.after[k]:x}",
                }
                for k in sorted(set(expected) | set(pb.after))
                if expected.get(k) != pb.after.get(k)
            ]
            plan = check_engine(pb.output.layer_info, data.precision, built_model)
            if plan is not None and (plan_check is None or not plan.follows):
                plan_check = plan.to_json()
            progress(Step(f"running engine {i + 1}/{rebuilds}"))
            got = run_engine(pb.output.engine)
            if run_check is not None:
                run_check.moved += repeat_runs(run_engine, pb.output.engine, got, runs, i + 1)
            if batch_feeds is not None and batch is None:
                progress(Step("batch invariance: each sample alone and in the batch"))
                batch = batch_of(pb.output.engine)
            if first_outputs is None:
                first_outputs, first_layer_info = got, pb.output.layer_info
                set_outputs = run_sets(
                    partial(be.run, pb.output.engine), sets, model_path, data.settings
                )
            checks.append(
                BuildCheck(
                    i,
                    output_hashes(got),
                    drift,
                    pb.problems,
                    round(time.perf_counter() - t0, 3),
                    # only a change from the recording's own verdict (see build._plan_check)
                    []
                    if plan is None
                    else [
                        v.message()
                        for v in plan.by_status("differs")
                        if v.layer not in data.precision.engine_differs
                    ],
                    pb.retry,
                )
            )
            del pb, got  # this rebuild's engine must not be alive while the next builds
        ref = checks[0].output_sha256
        differing = sorted(
            {n for c in checks for n, h in c.output_sha256.items() if ref.get(n) != h}
        )
        digest = outputs_digest(ref)  # the first rebuild's own hashes, not hashed again
        ok = not differing and not any(c.drift or c.problems for c in checks)
        ok = ok and recorded in (None, digest)
        ctx = ProbeContext(
            be,
            built_model,
            data,
            cfile,
            feeds,
            first_outputs or {},
            progress,
            first_layer_info,
            run=run_engine,
        )
        if run_check is not None and run_check.moved:
            run_check.culprits = find_culprits(
                ctx,
                lambda e: bool(repeat_runs(run_engine, e, run_engine(e), runs, 1)),
                lock_path,
                "run-to-run culprits",
            )
        if batch is not None and batch.invariant is False:
            batch.culprits = find_culprits(
                ctx, lambda e: batch_of(e).invariant is False, lock_path, "batch culprits"
            )
        ctl = positive_control(ctx, control_limit) if control and ok else None
        sens = sensitivity(ctx) if with_sensitivity else None
        getattr(be, "release", lambda: None)()  # its engine and ONNX Runtime's: not both
        progress(Step("comparing with ONNX Runtime"))
        accuracy = inputs_accuracy(model_path, samples, first_outputs or {}, tolerance)
        sample_acc = compare_sets(model_path, sets, set_outputs, data.settings) if sets else None
    result = VerifyResult(
        ok,
        str(lock_path),
        str(model_path),
        be.name,
        rebuilds,
        inputs_desc,
        checks,
        differing,
        accuracy,
        layers=len(data.layers),
        control=ctl,
        sensitivity=sens,
        plan_check=plan_check,
        sample_accuracy=sample_acc,
        target=data.target_name,
        inputs_label=label,
        machine={"host": platform.node(), **be.environment().advisory_dict()},
        tactic_map_sha256=tactic_map_digest(expected),
        outputs_sha256=digest,
        recorded_sha256=recorded,
        outputs_chosen=chosen,
        tolerance=None if tolerance is None else asdict(tolerance),
        run_check=run_check,
        batch_invariance=batch,
    )
    if record_digests and recorded is None and ok and not data.environment.identity:
        progress(Step(f"warning: {NO_IDENTITY}"))
    elif record_digests and recorded is None and ok:
        from reprobuild.lock.edit import record_digest

        if record_digest(lock_path, data.target_name, OutputDigest(label, digest), expected):
            result.digests_recorded = True
        else:
            moved = f"{lock_path} changed its tactics while verify ran (a pin?)"
            progress(Step(f"warning: {moved}, so the digest was not recorded; run again"))
    if report is not None:
        from reprobuild.transaction import Outputs

        result.report_path = str(report)
        with Outputs() as out:
            out.stage_text(report, json.dumps(result.to_json(), indent=2) + "\n", "verify report")
            out.commit()
    return result


__all__ = ["VerifyResult", "verify"]
