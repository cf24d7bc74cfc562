"""What ``build`` does, apart from how typer declares it (``build_cmds``).

A locked rebuild of a small model should not spend its first half importing typer and
pydantic (typer converts every parameter through it) and every command module, so the
command's body lives here, free of typer: ``build_cmds`` declares the options for typer and
calls ``run``, and ``fastargs`` calls ``run`` straight from a plain argument list. Either
way the same code prints the same bytes. ``run``'s defaults are typer's defaults
(tests/test_fastargs.py holds them together).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reprobuild.cli.render import echo, print_json, with_progress
from reprobuild.errors import UsageError
from reprobuild.lock.model import DEFAULT_LOCK


def backend_arg(name: str, ref_timing: str, threads: int | None = None) -> Any:
    """The backend name, or a configured reference backend when its options are given."""
    if not ref_timing and threads is None:
        return name
    from reprobuild.backends import get_backend

    return get_backend(name, ref_timing=ref_timing, threads=threads)


def _size(text: str) -> int:
    """trtexec-style sizes: plain numbers are MiB; K/M/G suffixes allowed."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = units.get(t[-1:], None)
    num = t[:-1] if mult else t
    try:
        value = float(num)
    except ValueError:
        raise UsageError(
            f"--workspace {text!r}: expected a size like 1024 (MiB), 512M or 2G"
        ) from None
    if value < 0:
        raise UsageError(f"--workspace {text!r}: must not be negative")
    return int(value * (mult or (1 << 20)))


def _shapes(option: str, specs: list[str]) -> dict[str, tuple[int, ...]]:
    """``name:1x3x224x224`` (several separated by commas or repeated), as trtexec takes them."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        for part in filter(None, spec.split(",")):
            name, sep, dims = part.rpartition(":")
            try:
                shape = tuple(int(d) for d in dims.lower().split("x"))
            except ValueError:
                shape = ()
            if not sep or not name or not shape or min(shape) < 0:
                raise UsageError(f"{option} {part!r}: expected NAME:DxDxD, e.g. input:1x3x224x224")
            out[name.strip("'\"")] = shape
    return out


def _settings(
    opt_level,
    workspace,
    shapes,
    min_shapes,
    opt_shapes,
    max_shapes,
    tactic_sources,
    no_tf32,
    max_tactics,
    avg_timing,
):
    from reprobuild.backends.base import BuildSettings

    given = [opt_level, workspace, tactic_sources, max_tactics, avg_timing]
    if all(v is None for v in given) and not (
        shapes or min_shapes or opt_shapes or max_shapes or no_tf32
    ):
        return None  # use the lock's settings (or the defaults when recording)
    if opt_level is not None and not 0 <= opt_level <= 5:
        raise UsageError(f"--opt-level {opt_level}: must be 0 to 5 (TensorRT's range; default 3)")
    static = _shapes("--shapes", shapes)
    mins, opts, maxs = (
        _shapes(o, v)
        for o, v in (
            ("--min-shapes", min_shapes),
            ("--opt-shapes", opt_shapes),
            ("--max-shapes", max_shapes),
        )
    )
    names = set(static) | set(mins) | set(opts) | set(maxs)
    profiles = []
    for name in sorted(names):
        if name in static:
            profiles.append((name, static[name], static[name], static[name]))
            continue
        if not (name in mins and name in opts and name in maxs):
            raise UsageError(
                f"input {name!r}: give all of --min-shapes, --opt-shapes and --max-shapes"
            )
        profiles.append((name, mins[name], opts[name], maxs[name]))
    sources = None
    if tactic_sources is not None:
        sources = tuple(sorted(s.strip().upper() for s in tactic_sources.split(",") if s.strip()))
    return BuildSettings(
        optimization_level=3 if opt_level is None else opt_level,
        workspace=None if workspace is None else _size(workspace),
        tactic_sources=sources,
        tf32=not no_tf32,
        max_num_tactics=max_tactics,
        avg_timing_iterations=avg_timing,
        input_shapes=tuple(profiles),
    )


def run(
    model: Path,
    *,
    lock: Path = Path(DEFAULT_LOCK),
    out: Path | None = None,
    backend: str = "auto",
    frozen: bool = False,
    cache_dir: Path = Path("caches"),
    allow_env_change: bool = False,
    report: Path | None = None,
    opt_level: int | None = None,
    workspace: str | None = None,
    shapes: list[str] | None = None,
    min_shapes: list[str] | None = None,
    opt_shapes: list[str] | None = None,
    max_shapes: list[str] | None = None,
    tactic_sources: str | None = None,
    no_tf32: bool = False,
    max_tactics: int | None = None,
    avg_timing: int | None = None,
    precision: str | None = None,
    keep_fp32: list[str] | None = None,
    keep_fp32_op: list[str] | None = None,
    max_output: float | None = None,
    max_reduction_depth: int | None = None,
    fp32_accumulate: bool = False,
    calibration: Path | None = None,
    calib_method: str | None = None,
    calib_batch_size: int | None = None,
    calib_samples: int | None = None,
    float_precision: str | None = None,
    held_out: Path | None = None,
    as_json: bool = False,
    quiet: bool = False,
    ref_timing: str = "",
    threads: int | None = None,
) -> None:
    """Build an engine (see ``build_cmds.build`` for what the user is told); a list option
    not given is None or empty, as typer leaves it."""
    shapes, min_shapes, opt_shapes, max_shapes = (
        list(v or ()) for v in (shapes, min_shapes, opt_shapes, max_shapes)
    )
    keep_fp32, keep_fp32_op = list(keep_fp32 or ()), list(keep_fp32_op or ())
    from reprobuild.workflow.build import build as run
    from reprobuild.workflow.prepare import PrecisionRequest

    settings = _settings(
        opt_level,
        workspace,
        shapes,
        min_shapes,
        opt_shapes,
        max_shapes,
        tactic_sources,
        no_tf32,
        max_tactics,
        avg_timing,
    )
    request = None
    if precision is not None:
        from reprobuild.precision.options import validate_options

        request = PrecisionRequest(
            precision,
            validate_options(
                precision,
                keep_fp32,
                keep_fp32_op,
                512.0 if max_output is None else max_output,
                max_reduction_depth,
                fp32_accumulate,
            ),
            None if calibration is None else str(calibration),
            **calib_options(
                precision, calib_method, calib_batch_size, calib_samples, float_precision
            ),
        )
    elif float_precision is not None:
        raise UsageError(
            f"--float {float_precision} is an INT8 option (the precision of what INT8 leaves "
            "in float); use it with --precision int8"
        )
    elif (
        keep_fp32
        or keep_fp32_op
        or fp32_accumulate
        or calibration is not None
        or max_reduction_depth is not None
        or max_output is not None
        or calib_method is not None
        or calib_batch_size is not None
        or calib_samples is not None
    ):
        raise UsageError("precision options need --precision fp16, bf16 or int8")
    result = with_progress(
        run,
        quiet or as_json,
        model,
        lock=lock,
        out=out,
        backend=backend_arg(backend, ref_timing, threads),
        settings=settings,
        frozen=frozen,
        cache_dir=cache_dir,
        allow_env_change=allow_env_change,
        report=report,
        precision=request,
        held_out=held_out,
    )
    if as_json:
        print_json(result.to_json())
        return
    for w in result.warnings:
        echo(f"warning: {w}", err=True)
    kind = "recording build" if result.recorded else "locked build"
    echo(
        f"{kind} with backend {result.backend}: {result.layers} layers, "
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
    summary = result.engine_layers or {}
    if result.layers_path and "by_precision" in summary:
        counts = ", ".join(f"{p} {n}" for p, n in summary["by_precision"].items()) or "none"
        echo(
            f"layers: {result.layers_path} ({summary['layers']} layers: {counts}; "
            f"{summary['reformat_layers']} reformat layers; `reprobuild layers` shows them)"
        )
    print_sample_accuracy(result.accuracy)


def print_sample_accuracy(accuracy: dict[str, Any] | None) -> None:
    """One line per sample set (calibration, held-out): the engine's error against FP32."""
    if not accuracy:
        return
    from reprobuild.workflow.sampleacc import describe

    for label, acc in accuracy.items():
        echo(describe(label, acc))


def calib_options(
    mode: str,
    method: str | None,
    batch_size: int | None,
    samples: int | None,
    float_precision: str | None = None,
) -> dict[str, Any]:
    """The INT8 calibration options as PrecisionRequest fields; refused for other modes."""
    if mode != "int8" and float_precision is not None:
        raise UsageError(
            f"--float {float_precision} is an INT8 option (the precision of what INT8 leaves "
            f"in float); with --precision {mode} every converted node is already {mode}"
        )
    given = [
        n
        for n, v in (
            ("--calib-method", method),
            ("--calib-batch-size", batch_size),
            ("--calib-samples", samples),
        )
        if v is not None
    ]
    if mode != "int8":
        if given:
            raise UsageError(
                f"{given[0]} is an INT8 calibration option; use it with --precision int8"
            )
        return {}
    from reprobuild.lock.qplan import CALIB_METHODS, FLOAT_PRECISIONS

    if method is not None and method not in CALIB_METHODS:
        raise UsageError(
            f"--calib-method {method!r}: unknown method; use {', '.join(CALIB_METHODS)}"
        )
    if float_precision is not None and float_precision not in FLOAT_PRECISIONS:
        raise UsageError(
            f"--float {float_precision!r}: unknown precision; use {', '.join(FLOAT_PRECISIONS)}"
        )
    for name, value in (("--calib-batch-size", batch_size), ("--calib-samples", samples)):
        if value is not None and value < 1:
            raise UsageError(f"{name} {value}: must be a positive integer")
    out: dict[str, Any] = {
        "calib_method": method or "entropy",
        "calib_samples": samples,
        "float_precision": float_precision,
    }
    if batch_size is not None:
        out["calib_batch_size"] = batch_size
    return out
