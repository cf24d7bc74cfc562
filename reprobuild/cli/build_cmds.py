"""build / verify / bisect: the reproducible-build workflow on the command line.

Option names follow trtexec where one exists (``--shapes``, ``--minShapes`` style becomes
``--min-shapes``; ``--builder-optimization-level``, ``--tactic-sources``) so users can move
flags across. What ``build`` does is in ``build_run`` (typer-free, shared with ``fastargs``);
this module declares its options and help for typer.
"""

from __future__ import annotations

from pathlib import Path

import typer

from reprobuild.cli import build_run
from reprobuild.lock.model import DEFAULT_LOCK

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


HELD_OUT_HELP = (
    "Held-apart samples (any --calibration INT8 form): report the engine's error against "
    "FP32 on them (INT8: also on the calibration set)."
)
CALIBRATION_HELP = (
    "fp16/bf16: inputs for the magnitude rule (.npz or Polygraphy JSON, first feed). "
    "INT8: the calibration samples: a .npz (one array per input, first axis = samples), a "
    "folder of .npy/.npz files (name order; one sample or a batch each), Polygraphy "
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
    cache_dir: Path = typer.Option(
        Path("caches"), "--cache-dir", help="Recording timing caches, per environment."
    ),
    allow_env_change: bool = typer.Option(
        False, "--allow-env-change", help="Re-record a lock made on another GPU/TensorRT."
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
    precision: str | None = typer.Option(
        None,
        "--precision",
        help="Convert to mixed precision: fp16, bf16, or int8 (Q/DQ by calibration).",
    ),
    keep_fp32: list[str] = typer.Option(
        [], "--keep-fp32", help="Regex of node names kept in FP32 (repeatable)."
    ),
    keep_fp32_op: list[str] = typer.Option(
        [], "--keep-fp32-op", help="Op type kept in FP32 (repeatable)."
    ),
    max_output: float | None = typer.Option(
        None, "--max-output", help="Keep nodes whose outputs exceed this in FP32 [default: 512]."
    ),
    max_reduction_depth: int | None = typer.Option(
        None, "--max-reduction-depth", help="Keep reductions deeper than this in FP32."
    ),
    fp32_accumulate: bool = typer.Option(
        False, "--fp32-accumulate", help="FP32 accumulation for MatMul/Gemm/Conv."
    ),
    calibration: Path | None = typer.Option(None, "--calibration", help=CALIBRATION_HELP),
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
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
    ref_timing: str = RefTimingOpt,
    threads: int | None = ThreadsOpt,
) -> None:
    """Build an engine; record the lock, or apply it and check that nothing drifted.

    Without a lock this is a recording build: every tactic is timed and the choices are
    written to the lock. With a lock, every recorded tactic is applied through the timing
    cache and the build fails (exit 1) if any layer drifted. A lock for another model or
    settings is exit 2; for another GPU/TensorRT version exit 3.

    \b
    Example:
      reprobuild build model.onnx --lock tactics.lock --backend reference
      reprobuild build model.onnx --lock tactics.lock --frozen          # in CI
    """
    build_run.run(
        model,
        lock=lock,
        out=out,
        backend=backend,
        frozen=frozen,
        cache_dir=cache_dir,
        allow_env_change=allow_env_change,
        report=report,
        opt_level=opt_level,
        workspace=workspace,
        shapes=shapes,
        min_shapes=min_shapes,
        opt_shapes=opt_shapes,
        max_shapes=max_shapes,
        tactic_sources=tactic_sources,
        no_tf32=no_tf32,
        max_tactics=max_tactics,
        avg_timing=avg_timing,
        precision=precision,
        keep_fp32=keep_fp32,
        keep_fp32_op=keep_fp32_op,
        max_output=max_output,
        max_reduction_depth=max_reduction_depth,
        fp32_accumulate=fp32_accumulate,
        calibration=calibration,
        calib_method=calib_method,
        calib_batch_size=calib_batch_size,
        calib_samples=calib_samples,
        float_precision=float_precision,
        held_out=held_out,
        as_json=as_json,
        quiet=quiet,
        ref_timing=ref_timing,
        threads=threads,
    )


def register(app: typer.Typer) -> None:
    app.command("build")(build)
