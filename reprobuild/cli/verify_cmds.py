"""verify / bisect: checking a lock on the command line.

``verify`` exits 1 when the rebuilds differ, and (with ``--require-power``) when its check
could not have seen a tactic change; ``bisect`` exits 1 when it finds layers that change the
outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from reprobuild.cachedir import CACHE_DIR_HELP
from reprobuild.cli.build_cmds import (
    BACKEND_HELP,
    HELD_OUT_HELP,
    MissRetryOpt,
    RefTimingOpt,
    ThreadsOpt,
    backend_arg,
    print_sample_accuracy,
)
from reprobuild.cli.determinism_text import print_determinism
from reprobuild.cli.groups import ModelArg, ModelOpt, model_of
from reprobuild.cli.render import format_table, print_json, with_progress
from reprobuild.errors import UsageError
from reprobuild.limits import SEED_MAX
from reprobuild.lock.model import DEFAULT_LOCK
from reprobuild.words import count


def verify(
    model: Path | None = ModelArg,
    model_opt: Path | None = ModelOpt,
    lock: Path = typer.Option(DEFAULT_LOCK, "--lock", "-l", help="Lockfile to verify."),
    rebuilds: int = typer.Option(3, "--rebuilds", "-n", help="How many times to rebuild."),
    runs: int = typer.Option(
        1,
        "--runs",
        help="Run each rebuilt engine this many times on the same inputs: other bits on a "
        "later run are exit 1 (NOT DETERMINISTIC RUN TO RUN), naming the layers.",
    ),
    batch_invariance: bool = typer.Option(
        False,
        "--batch-invariance",
        help="Run each sample of a batch alone: other bits than inside the batch are exit 1 "
        "(NOT BATCH INVARIANT), naming the samples, outputs and layers.",
    ),
    inputs: Path | None = typer.Option(
        None,
        "--inputs",
        help=".npz or Polygraphy saved-inputs JSON; every sample along the first axis is run, "
        "in batches of the model's fixed batch [default: seeded random].",
    ),
    outputs: list[str] | None = typer.Option(
        None,
        "--outputs",
        help="Compare only these outputs (repeatable, or comma-separated) [default: all]; "
        "no digest is then compared with or recorded in the lock.",
    ),
    report: Path | None = typer.Option(None, "--report", help="Write a JSON report here."),
    backend: str = typer.Option("auto", "--backend", help=BACKEND_HELP),
    cache_dir: Path | None = typer.Option(None, "--cache-dir", help=CACHE_DIR_HELP),
    seed: int = typer.Option(
        0, "--seed", min=0, max=SEED_MAX, help="Seed of the random inputs (at most 18 digits)."
    ),
    no_control: bool = typer.Option(
        False, "--no-control", help="Skip the positive control (one build with one layer switched)."
    ),
    require_power: bool = typer.Option(
        False,
        "--require-power",
        help="Exit 1 when no single-tactic change reaches the outputs (for CI gates).",
    ),
    control_limit: int | None = typer.Option(
        None,
        "--control-limit",
        help="At most this many control builds [default: two per layer with another "
        "recorded candidate].",
    ),
    with_sensitivity: bool = typer.Option(
        False,
        "--sensitivity",
        help="Switch each layer's tactic in turn: which layers reach the outputs, by how much.",
    ),
    calibration: Path | None = typer.Option(
        None,
        "--calibration",
        help="The INT8 lock's calibration data (any build --calibration INT8 form): report "
        "the engine's error against FP32 on it.",
    ),
    held_out: Path | None = typer.Option(None, "--held-out", help=HELD_OUT_HELP),
    target: str | None = typer.Option(
        None, "--target", help="The lock's target to verify [default: this machine's]."
    ),
    record_digests: bool = typer.Option(
        False,
        "--record-digests",
        help="Add the outputs' digest for these --inputs to the lock's target (else read-only).",
    ),
    atol: float | None = typer.Option(
        None,
        "--atol",
        help="Absolute tolerance against ONNX Runtime: exit 1 when an element has "
        "|engine - onnxruntime| > atol + rtol * |onnxruntime| (Polygraphy's check) [default: "
        "accuracy reported, not decisive].",
    ),
    rtol: float | None = typer.Option(
        None, "--rtol", help="Relative tolerance against ONNX Runtime (with --atol, or alone)."
    ),
    require_digest: bool = typer.Option(
        False,
        "--require-digest",
        help="Exit 1 when the lock records no expected bits for this target and these "
        "inputs (for CI gates: the check across machines must run).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
    ref_timing: str = RefTimingOpt,
    threads: int | None = ThreadsOpt,
    miss_retry: bool = MissRetryOpt,
) -> None:
    """Rebuild from the lock N times and prove the outputs bit-identical (exit 1 if not).

    The bits must also equal the ones the lock records for this machine's target (what the
    recording machine's engine gave): other bits are exit 1, naming the target and both
    digests; a machine of no recorded target is exit 3. With --require-digest, a lock
    that records no bits for this target and these inputs is exit 1 too.

    --runs N runs each rebuilt engine N times on the same inputs, and --batch-invariance
    runs each sample of a batch alone (a model with a dynamic batch: 4 seeded samples); a
    bit that moves is exit 1, and the layers responsible are named by switching their
    tactics (as bisect does), each with the `reprobuild deny` line that fixes it.

    A positive control then switches one layer at a time to another recorded candidate (the
    ones most likely to show first: another accumulation precision, another algorithm
    family; then every other candidate), within --control-limit builds, and reports whether
    the outputs change: if none of the changes tried reaches them, identical outputs prove
    nothing about the tactics (a saturated or argmax output, constant inputs), and the
    verdict says how many of the possible changes were tried. A lock with no layers says
    that nothing is locked (exit 0; 1 with --require-power). Accuracy against ONNX Runtime
    in float32 is reported, and decisive only with --atol/--rtol (exit 1 beyond them).

    \b
    Example:
      reprobuild verify --lock tactics.lock --rebuilds 3 --report verify.json
      reprobuild verify --lock tactics.lock --require-power --require-digest   # in CI
      reprobuild verify --lock tactics.lock --sensitivity        # which layers matter
      reprobuild verify --lock tactics.lock --inputs batch.npz --outputs logits
      reprobuild verify --lock tactics.lock --runs 3 --batch-invariance
    """
    from reprobuild.workflow.verify import verify as run

    if no_control and require_power:
        raise UsageError("--require-power needs the control: drop --no-control")
    tolerance = _tolerance(atol, rtol)
    if require_digest and (outputs or record_digests):
        other = "--outputs" if outputs else "--record-digests"
        raise UsageError(
            f"--require-digest compares every output with the lock's recorded digest: drop {other}"
        )
    result = with_progress(
        run,
        quiet or as_json,
        model_of(model, model_opt),
        lock=lock,
        rebuilds=rebuilds,
        inputs=inputs,
        report=report,
        backend=backend_arg(backend, ref_timing, threads, miss_retry),
        cache_dir=cache_dir,
        seed=seed,
        control=not no_control,
        control_limit=control_limit,
        with_sensitivity=with_sensitivity,
        calibration=calibration,
        held_out=held_out,
        target=target,
        record_digests=record_digests,
        outputs=[n for o in outputs or () for n in o.split(",") if n] or None,
        tolerance=tolerance,
        runs=runs,
        batch_invariance=batch_invariance,
    )
    if as_json:
        print_json(result.to_json())
    else:
        _print_verify(result)
        print_determinism(result)
        if result.report_path:  # as build does: the file a reader opens next
            typer.echo(f"report: {result.report_path}")
    if not (result.reproducible and result.follows_plan and result.deterministic):
        raise typer.Exit(1)
    if result.within_tolerance is False:
        raise typer.Exit(1)
    if require_power and not result.power:
        if not as_json:
            why = (
                "nothing is locked (the lock has 0 layers)"
                if result.nothing_locked
                else result.control.message()
                if result.control is not None and result.control.untestable
                else "the check has no power on these inputs"
            )
            typer.echo(f"error: --require-power: {why}", err=True)
        raise typer.Exit(1)
    if require_digest and result.matches_recorded is None:
        if not as_json:
            typer.echo(
                f"error: --require-digest: {result.lock_path} records no expected bits for "
                f"target {result.target} and inputs {result.inputs_label}; record them on a "
                f"machine of this target (reprobuild verify --lock {result.lock_path} "
                "--record-digests, with the same --inputs)",
                err=True,
            )
        raise typer.Exit(1)


def _tolerance(atol: float | None, rtol: float | None) -> Any:
    """``--atol``/``--rtol`` as a :class:`~reprobuild.accuracy.Tolerance` (None: neither
    given); an unset one of the two is 0, as in Polygraphy's check."""
    import math

    if atol is None and rtol is None:
        return None
    for flag, value in (("--atol", atol), ("--rtol", rtol)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(f"{flag} must be a finite number >= 0, got {value}")
    from reprobuild.accuracy import Tolerance

    return Tolerance(atol or 0.0, rtol or 0.0)


def _tolerance_line(result: Any) -> str | None:
    """The accuracy verdict under --atol/--rtol (None without them)."""
    if result.tolerance is None:
        return None
    t = result.tolerance
    rule = f"|engine - onnxruntime| <= {t['atol']:g} + {t['rtol']:g} * |onnxruntime|"
    measured = result.accuracy.get("tolerance")
    if measured is None:
        return f"ACCURACY NOT CHECKED: {rule} could not be measured (see the accuracy line)"
    if measured["within"]:
        return f"accuracy: every element within {rule}"
    n = measured["elements_beyond"]
    return f"ACCURACY BEYOND TOLERANCE: {count(n, 'element')} not within {rule}"


def _print_verify(result: Any) -> None:
    for b in result.builds:
        hashes = ", ".join(f"{n}={h[:16]}" for n, h in b.output_sha256.items())
        typer.echo(f"build {b.index + 1}: sha256 per output {hashes}  ({b.duration_s:.1f}s)")
    rows = [
        [d["layer"], d["key"], str(d["locked"]), str(d["built"]), str(b.index + 1)]
        for b in result.builds
        for d in b.drift
    ]
    if rows:
        typer.echo(format_table(["layer", "key", "locked", "built", "build"], rows))
    for b in result.builds:
        for p in b.problems:
            typer.echo(f"build {b.index + 1}: {p}")
    for line in result.retries:  # every strict build retried, accepted or not
        typer.echo(f"retried without ERROR_ON_TIMING_CACHE_MISS: {line}")
    for b in result.builds:
        for p in b.plan_differs:
            typer.echo(f"build {b.index + 1}: {p}")
    if not result.follows_plan:
        typer.echo("PRECISION PLAN NOT FOLLOWED: the engine runs the layers above off the plan")
    if result.sensitivity is not None:
        _print_sensitivity(result.sensitivity)
    acc = result.accuracy
    if "max_abs" in acc:
        typer.echo(
            f"accuracy vs onnxruntime (float32): max abs {acc['max_abs']:.3g}, "
            f"max rel {acc['max_rel']:.3g}" + _cosine_top1(acc)
        )
    else:
        typer.echo(f"accuracy vs onnxruntime: not measured ({acc.get('error')})")
    tol = _tolerance_line(result)
    if tol:
        typer.echo(tol)
    print_sample_accuracy(result.sample_accuracy)
    if result.control is not None:
        typer.echo(f"control: {result.control.message()}")
    typer.echo(_recorded_line(result))
    diff = (
        f"; differing outputs: {', '.join(result.differing_outputs)}"
        if result.differing_outputs
        else ""
    )
    summary = (
        f"{count(result.rebuilds, 'rebuild')} of {count(result.layers, 'layer')} of target "
        f"{result.target}, "
        f"inputs {result.inputs}{diff}"
    )
    if not result.reproducible:
        typer.echo(f"NOT REPRODUCIBLE: {summary}")
    elif result.nothing_locked:
        typer.echo(
            f"NOTHING LOCKED: {summary}; the lock holds no layer, so the rebuilds agree "
            "without any tactic to check (the backend timed none of the model's layers)"
        )
    elif result.power is None:
        typer.echo(f"REPRODUCIBLE: {summary} (control skipped: the check's power is unknown)")
    elif result.power:
        typer.echo(f"REPRODUCIBLE: {summary}; the check has power")
    elif result.control.untestable:
        typer.echo(f"REPRODUCIBLE BUT UNPROVEN: {summary}; {result.control.message()}")
    else:
        typer.echo(
            f"REPRODUCIBLE BUT UNPROVEN: {summary}; the check has no power on these inputs "
            f"(none of the {result.control.tried()} reached the outputs)"
        )


def _recorded_line(result: Any) -> str:
    """What the bits were compared with across machines: the target's recorded digest (one
    hash over every output, not any one output's sha256 the build lines show)."""
    new = result.outputs_sha256[:16]
    if result.outputs_chosen is not None:
        return (
            f"bits: digest {new} of {', '.join(result.outputs_chosen)} only (--outputs), not "
            "compared with the lock's digests, which cover every output"
        )
    if result.matches_recorded is None:
        tail = (
            "recorded in the lock now (--record-digests)"
            if result.digests_recorded
            else "the lock records none for these inputs, so only rebuilds on this machine "
            "were compared (--record-digests adds it)"
        )
        return f"bits: digest of all outputs {new}; {tail}"
    if result.matches_recorded:
        return (
            f"bits: digest of all outputs {new} equals the one recorded for target {result.target}"
        )
    return (
        f"bits: OTHER BITS than recorded for target {result.target}: digest of all outputs "
        f"recorded {result.recorded_sha256[:16]}, here {new}"
    )


def _cosine_top1(acc: dict[str, Any]) -> str:
    """``, cosine C, top-1 agreement T`` where measured (non-finite values arrive as text)."""
    cos, top1 = acc.get("cosine"), acc.get("top1_agreement")
    text = f", cosine {cos:.6f}" if isinstance(cos, float) else f", cosine {cos}" if cos else ""
    return text + ("" if top1 is None else f", top-1 agreement {top1:.4f}")


def _print_sensitivity(probes: list[Any]) -> None:
    rows = [
        [
            p.layer,
            p.kernel or f"0x{p.tried:x}",
            "error" if p.error else ("yes" if p.changed else "no"),
            f"{p.bits_flipped}/{p.bits_total}",
            f"{p.max_abs:.3g}",
        ]
        for p in probes
    ]
    typer.echo(format_table(["layer", "switched to", "outputs change", "bits", "max abs"], rows))
    for p in probes:
        if p.error:
            typer.echo(f"layer {p.layer!r}: {p.error}")
    reach = sum(1 for p in probes if p.changed)
    typer.echo(f"sensitivity: {reach} of {len(probes)} layers reach the outputs on these inputs")


def bisect(
    model: Path | None = ModelArg,
    model_opt: Path | None = ModelOpt,
    lock: Path = typer.Option(DEFAULT_LOCK, "--lock", "-l", help="Lock A (the baseline)."),
    against: Path = typer.Option(..., "--against", help="Lock B, whose outputs differ."),
    backend: str = typer.Option("auto", "--backend", help=BACKEND_HELP),
    cache_dir: Path | None = typer.Option(None, "--cache-dir", help=CACHE_DIR_HELP),
    inputs: Path | None = typer.Option(None, "--inputs", help=".npz or Polygraphy JSON inputs."),
    first: bool = typer.Option(
        False, "--first", help="Stop at the first culprit found [default: find every culprit]."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
    ref_timing: str = RefTimingOpt,
    threads: int | None = ThreadsOpt,
) -> None:
    """Find every layer whose tactic makes two locks' outputs differ (or, with --first, the
    first one found), by group testing: groups of B's tactics are swapped into A and a group
    that changes the outputs is split until single layers remain. Layers that change the
    outputs only together are reported as one group. The verdict says which search ran.

    Exit 1 when culprits are found (the locks' outputs differ), 0 when they agree.

    \b
    Example:
      reprobuild bisect --lock good.lock --against bad.lock
    """
    from reprobuild.workflow.bisect import bisect as run

    result = with_progress(
        run,
        quiet or as_json,
        model_of(model, model_opt),
        lock=lock,
        against=against,
        backend=backend_arg(backend, ref_timing, threads),
        cache_dir=cache_dir,
        inputs=inputs,
        first=first,
    )
    if as_json:
        print_json(result.to_json())
    else:
        for s in result.steps:
            typer.echo(s)
        if result.culprits:
            rows = [
                [c["layer"], c["key"], c["tactic_a"], c["tactic_b"]]
                + ([] if c["alone"] else [f"group {c['group'] + 1}: only together"])
                for c in result.culprits
            ]
            grouped = any(not c["alone"] for c in result.culprits)
            head = ["layer", "key", "tactic A", "tactic B"] + (
                ["changes outputs"] if grouped else []
            )
            typer.echo(format_table(head, [r + [""] * (len(head) - len(r)) for r in rows]))
        typer.echo(
            f"{result.message} ({count(result.differing_layers, 'layer')} "
            f"{'differs' if result.differing_layers == 1 else 'differ'}, "
            f"{count(result.builds, 'build')})"
        )
    if result.outputs_differ:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
    app.command("bisect")(bisect)
