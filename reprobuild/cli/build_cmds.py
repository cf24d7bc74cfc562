"""build: an ONNX model to an engine, recording the lock or applying it (``verify`` and
``bisect``, in ``verify_cmds``, share its backend and sample-accuracy helpers).

Option names follow trtexec where one exists (``--shapes``, ``--minShapes`` style becomes
``--min-shapes``; ``--builder-optimization-level``, ``--tactic-sources``) so users can move
flags across. Only typer and light modules are imported here: the workflow (and with it
numpy and onnx) is imported when a build runs, not for ``build --help``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from reprobuild.cachedir import CACHE_DIR_HELP
from reprobuild.cli.render import echo, print_json, with_progress
from reprobuild.lock.model import DEFAULT_LOCK
from reprobuild.types import DEFAULT_TIE_BAND
from reprobuild.words import count

BACKEND_HELP = (
    "auto (TensorRT if importable and a GPU is visible, else reference), tensorrt, reference."
)
# Hidden: the reference backend's timing knob, for demos of drift and bisect.
RefTimingOpt = typer.Option("", "--ref-timing", hidden=True)
ThreadsOpt = typer.Option(
    None,
    "--threads",
    help="reference backend: BLAS threads for timing and runs [default: 1; 0 = one per core]. "
    "Keep it the same between builds you compare: it can change the last bits.",
)
# TensorRT: accept a pinned build retried without ERROR_ON_TIMING_CACHE_MISS (build, verify)
MissRetryOpt = typer.Option(
    False,
    "--allow-cache-miss-retry",
    help="TensorRT: accept a pinned build that failed with ERROR_ON_TIMING_CACHE_MISS and, "
    "built again without it, kept every locked key (a warning; by default exit 1).",
)


HELD_OUT_HELP = (
    "Held-apart samples (any --calibration INT8 form): report the engine's error against "
    "FP32 on them (INT8: also on the calibration set)."
)
CALIBRATION_HELP = (
    "Calibration samples (fp16/bf16: for the magnitude rules, every sample read, in the "
    "model's batch size; INT8: calibrated on): a .npz (one array per input, first axis = "
    "samples), a folder of .npy/.npz files (name order; one sample or a batch each), Polygraphy "
    "--save-inputs JSON (feeds concatenated), or a dataset FILE.py:NAME / MODULE:NAME "
    "(torch2trt's int8_calib_dataset: len(ds), ds[i] -> list of input tensors)."
)


def build(
    model: Path = typer.Argument(..., help="ONNX model to build."),
    lock: Path = typer.Option(DEFAULT_LOCK, "--lock", "-l", help="Lockfile to record or apply."),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Engine file [default: MODEL.engine]."
    ),
    backend: str = typer.Option("auto", "--backend", help=BACKEND_HELP),
    frozen: bool = typer.Option(
        False, "--frozen", help="CI mode: never write the lock; fail if it would change."
    ),
    cache_dir: Path | None = typer.Option(None, "--cache-dir", help=CACHE_DIR_HELP),
    allow_env_change: bool = typer.Option(
        False,
        "--allow-env-change",
        hidden=True,
        help="No longer needed: a machine without a target in the lock records one.",
    ),
    re_record: bool = typer.Option(
        False,
        "--re-record",
        help="Record this machine's target again (after a model change), keeping the pins "
        "that still apply.",
    ),
    report: Path | None = typer.Option(
        None, "--report", help="Build report JSON [default: ENGINE.report.json]."
    ),
    opt_level: int | None = typer.Option(
        None,
        "--opt-level",
        "--builder-optimization-level",
        help="1-5 (0 ignores the timing cache).",
    ),
    workspace: str | None = typer.Option(
        None, "--workspace", help="Workspace pool limit: MiB, or 512M / 2G."
    ),
    shapes: list[str] = typer.Option([], "--shapes", help="Static input shapes: name:1x3x224x224."),
    min_shapes: list[str] = typer.Option([], "--min-shapes", help="Profile minimum shapes."),
    opt_shapes: list[str] = typer.Option([], "--opt-shapes", help="Profile optimum shapes."),
    max_shapes: list[str] = typer.Option([], "--max-shapes", help="Profile maximum shapes."),
    tactic_sources: str | None = typer.Option(
        None, "--tactic-sources", help="TensorRT TacticSource names, comma-separated."
    ),
    no_tf32: bool = typer.Option(False, "--no-tf32", help="Disable TF32 (TensorRT)."),
    max_tactics: int | None = typer.Option(
        None, "--max-tactics", help="Max tactics timed per layer."
    ),
    avg_timing: int | None = typer.Option(
        None, "--avg-timing", help="Timing iterations per tactic."
    ),
    tie_band: float | None = typer.Option(
        None,
        "--tie-band",
        help="Recording: candidates within this fraction of a key's best time are near-ties, "
        "decided by a fixed rule (docs/stability.md) [default: "
        f"{DEFAULT_TIE_BAND:g}; 0 = the fastest as "
        "measured].",
    ),
    records: int | None = typer.Option(
        None,
        "--records",
        help="Recording: time every candidate in N recording builds (each from an empty "
        "cache) and let the tie rule pool their times [default: 1].",
    ),
    deny: list[str] = typer.Option(
        [],
        "--deny",
        metavar="kernel=PATTERN[,layer=PATTERN]",
        help="Recording: a kernel rule (repeatable) written to the lock's settings; no "
        "matching candidate is chosen (shell-style globs; `reprobuild deny` adds one later).",
    ),
    distributive_independence: bool = typer.Option(
        False,
        "--distributive-independence",
        help="TensorRT: only kernels whose result for a sample does not depend on the rest "
        "of the batch (BuilderFlag.DISTRIBUTIVE_INDEPENDENCE); recorded in the lock.",
    ),
    apply_tie_rule: bool = typer.Option(
        False,
        "--apply-tie-rule",
        help="Recording on TensorRT: write the tie rule's choices back with update() and "
        "rebuild (by default only where `doctor --probe` showed edited tactics honoured on "
        "this TensorRT version and GPU; docs/tensorrt.md).",
    ),
    precision: str | None = typer.Option(
        None,
        "--precision",
        "--low-precision-type",
        help="Convert to mixed precision: fp16, bf16, or int8 (Q/DQ by calibration). "
        "Torch-TensorRT: enable_autocast + autocast_low_precision_type.",
    ),
    keep_fp32: list[str] = typer.Option(
        [],
        "--keep-fp32",
        "--nodes-to-exclude",
        help="Regex searched in node names; matches stay FP32 (repeatable). "
        "Torch-TensorRT: autocast_excluded_nodes.",
    ),
    keep_fp32_op: list[str] = typer.Option(
        [],
        "--keep-fp32-op",
        "--op-types-to-exclude",
        help="Op type kept in FP32 (repeatable). Torch-TensorRT: autocast_excluded_ops.",
    ),
    nodes_to_include: list[str] = typer.Option(
        [],
        "--nodes-to-include",
        help="Regex searched in node names; matches run in low precision even where a rule "
        "would keep them FP32, never over an overflow (repeatable).",
    ),
    op_types_to_include: list[str] = typer.Option(
        [],
        "--op-types-to-include",
        help="Op type run in low precision even where a rule would keep it FP32 (repeatable).",
    ),
    max_output: float | None = typer.Option(
        None,
        "--max-output",
        "--data-max",
        help="Keep nodes whose outputs exceed this in FP32 [default: 512]. "
        "Torch-TensorRT: autocast_max_output_threshold.",
    ),
    magnitude_io: bool = typer.Option(
        False,
        "--magnitude-io",
        help="The --max-output rule reads every input and output of a node, of any type, "
        "as ModelOpt's data_max does [default: float outputs].",
    ),
    init_max: float | None = typer.Option(
        None,
        "--init-max",
        help="Keep nodes with a weight beyond this magnitude in FP32 "
        "[default: the type's largest value, FP16 65504].",
    ),
    max_reduction_depth: int | None = typer.Option(
        None,
        "--max-reduction-depth",
        "--max-depth-of-reduction",
        help="Keep reductions deeper than this in FP32. "
        "Torch-TensorRT: autocast_max_depth_of_reduction.",
    ),
    fp32_accumulate: bool = typer.Option(
        False, "--fp32-accumulate", help="FP32 accumulation for MatMul/Gemm/Conv."
    ),
    keep_io_types: bool | None = typer.Option(
        None,
        "--keep-io-types/--no-keep-io-types",
        help="Graph inputs and outputs keep FP32 [default: keep].",
    ),
    init_conversion_max_bytes: int | None = typer.Option(
        None,
        "--init-conversion-max-bytes",
        help="Weights larger than this (bytes, as FP32) are cast at run time, not stored "
        "converted.",
    ),
    opset: int | None = typer.Option(
        None,
        "--opset",
        help="fp16/bf16: convert the model to this ONNX opset first [default: only when the "
        "precision needs it, e.g. BF16 Conv needs 22; the model's own opset turns that off].",
    ),
    calibration: Path | None = typer.Option(
        None, "--calibration", "--calibration-data", help=CALIBRATION_HELP
    ),
    calibration_seed: int | None = typer.Option(
        None,
        "--calibration-seed",
        min=0,
        help="Without --calibration: seed of the random reference inputs (fp16/bf16) or "
        "calibration samples (int8, for trying only) [default: 0]; the lock records it.",
    ),
    calib_method: str | None = typer.Option(
        None, "--calib-method", help="INT8: entropy (default), minmax or percentile."
    ),
    calib_batch_size: int | None = typer.Option(
        None, "--calib-batch-size", help="INT8: samples per calibration batch [default: 1]."
    ),
    calib_samples: int | None = typer.Option(
        None, "--calib-samples", help="INT8: calibrate on the first N samples [default: all]."
    ),
    float_precision: str | None = typer.Option(
        None,
        "--float",
        help="INT8: what stays float runs in fp32 (default), fp16 or bf16 by the fp16 rules.",
    ),
    held_out: Path | None = typer.Option(None, "--held-out", help=HELD_OUT_HELP),
    log: Path | None = typer.Option(
        None,
        "--log",
        help="Save the verbose builder log of the build that made the engine (TensorRT's "
        "through the backend's logger) to FILE, for `reprobuild log FILE`.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
    ref_timing: str = RefTimingOpt,
    threads: int | None = ThreadsOpt,
    miss_retry: bool = MissRetryOpt,
) -> None:
    """Build an engine; record the lock, or apply it and check that nothing drifted.

    Without a lock this is a recording build: every tactic is timed and the choices are
    written to the lock. With a lock, every recorded tactic and time of this machine's
    target is applied through the timing cache and the build fails (exit 1) if any layer
    drifted. A machine of no recorded target records its own beside the others (with
    --frozen: exit 3, naming the lock's targets). A lock for another model or settings is
    exit 2 (--re-record starts over, keeping the pins that still apply).

    \b
    Example:
      reprobuild build model.onnx --lock tactics.lock --backend reference
      reprobuild build model.onnx --lock tactics.lock --frozen          # in CI
    """
    from reprobuild.cli.precision_args import precision_request
    from reprobuild.cli.settings_args import build_settings
    from reprobuild.workflow.build import build as build_engine

    settings = build_settings(
        opt_level, workspace, shapes, min_shapes, opt_shapes, max_shapes, tactic_sources,
        no_tf32, max_tactics, avg_timing, tie_band, records, deny, distributive_independence,
    )  # fmt: skip
    request = precision_request(
        precision,
        None if calibration is None else str(calibration),
        calibration_seed,
        {"method": calib_method, "batch_size": calib_batch_size, "samples": calib_samples},
        float_precision,
        keep_fp32=keep_fp32,
        keep_fp32_ops=keep_fp32_op,
        max_output=max_output,
        max_reduction_depth=max_reduction_depth,
        fp32_accumulate=fp32_accumulate,
        keep_io_types=keep_io_types,
        nodes_to_include=nodes_to_include,
        op_types_to_include=op_types_to_include,
        init_max=init_max,
        init_conversion_max_bytes=init_conversion_max_bytes,
        magnitude_io=magnitude_io,
        opset=opset,
    )
    result = with_progress(
        build_engine,
        quiet or as_json,
        model,
        lock=lock,
        out=out,
        backend=backend_arg(backend, ref_timing, threads, miss_retry),
        settings=settings,
        frozen=frozen,
        cache_dir=cache_dir,
        allow_env_change=allow_env_change,
        re_record=re_record,
        report=report,
        precision=request,
        held_out=held_out,
        log=log,
        apply_tie_rule=apply_tie_rule,
    )
    if as_json:
        print_json(result.to_json())
        return
    for w in result.warnings:
        echo(f"warning: {w}", err=True)
    kind = "recording build" if result.recorded else "locked build"
    echo(
        f"{kind} with backend {result.backend}: {count(result.layers, 'layer')}, "
        f"{result.pinned} pinned, {result.cache_hits} cache hits, {result.timed} timed, "
        f"{result.duration_s:.1f}s"
    )
    lock_note = (
        "written"
        if result.lock_written
        else "unchanged"
        if not result.lock_changes
        else "not written (--frozen)"
    )
    echo(
        f"engine: {result.engine_path}\nlock: {result.lock_path} ({lock_note}"
        + (
            f": {'; '.join(result.lock_changes)}"
            if result.lock_changes and result.lock_written
            else ""
        )
        + f")\nreport: {result.report_path}"
    )
    if result.log_path:
        echo(f"builder log: {result.log_path} (`reprobuild log {result.log_path}` reads it)")
    summary = result.engine_layers or {}
    if result.layers_path and "by_precision" in summary:
        from reprobuild.logs.layertable import LayerSummary

        line = LayerSummary.from_json(summary).line()
        echo(f"layers: {result.layers_path} ({line}; `reprobuild layers` shows them)")
    print_sample_accuracy(result.accuracy)


def backend_arg(
    name: str, ref_timing: str, threads: int | None = None, miss_retry: bool = False
) -> Any:
    """The backend name, or a configured backend when its options are given."""
    if not ref_timing and threads is None and not miss_retry:
        return name
    from reprobuild.backends import get_backend

    return get_backend(name, ref_timing=ref_timing, threads=threads, allow_miss_retry=miss_retry)


def print_sample_accuracy(accuracy: dict[str, Any] | None) -> None:
    """One line per sample set (calibration, held-out): the engine's error against FP32."""
    if not accuracy:
        return
    from reprobuild.workflow.sampleacc import describe

    for label, acc in accuracy.items():
        echo(describe(label, acc))


def register(app: typer.Typer) -> None:
    app.command("build")(build)
