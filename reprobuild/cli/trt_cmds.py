"""export-cache / doctor: TensorRT-specific commands.

Only light modules are imported at startup; TensorRT is imported inside the commands, and
``doctor`` works without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from reprobuild.cachedir import CACHE_DIR_HELP
from reprobuild.cli.groups import ModelArg, ModelOpt, model_of
from reprobuild.cli.render import print_json
from reprobuild.lock.model import DEFAULT_LOCK

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")


def export_cache(
    model: Path | None = ModelArg,
    output: Path = typer.Option(..., "--output", "-o", help="Timing-cache file to write."),
    lock: Path = typer.Option(DEFAULT_LOCK, "--lock", "-l", help="Lockfile with the tactics."),
    cache_dir: Path | None = typer.Option(None, "--cache-dir", help=CACHE_DIR_HELP),
    model_opt: Path | None = ModelOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write a standard TensorRT timing cache holding the lock's tactics.

    Its keys are made with the editable-cache flag (for a lock with a precision plan: those
    of the converted model, so the model is needed when the lock's model is not at hand).
    TensorRT's Python API with that flag finds the locked tactics under them (reprobuild's
    own locked builds check that the engine follows them); trtexec loads the file but cannot set
    the flag, so it may miss and re-time (--errorOnTimingCacheMiss shows it; `reprobuild
    doctor --probe` checks it); Torch-TensorRT does not pin from it (strict attach, its own
    network, overwrites the file). See docs/export-cache.md. Needs TensorRT and the GPU the
    lock was recorded on (exit 3 otherwise).

    \b
    Example:
      reprobuild export-cache --lock tactics.lock -o pinned.cache
      trtexec --onnx=model.onnx --timingCacheFile=pinned.cache --builderOptimizationLevel=3
    """
    from reprobuild.workflow.export import export_pinned_cache

    result = export_pinned_cache(lock, output, cache_dir, model=model_of(model, model_opt))
    if as_json:
        print_json(result.to_dict())
        return
    for w in result.warnings:
        typer.echo(f"warning: {w}", err=True)
    how = "recorded now" if result.recorded_now else "reused"
    typer.echo(
        f"wrote {result.output}: {result.entries} entries, {result.locked} locked "
        f"({result.changed} changed from the recording), recording cache {how}: "
        f"{result.recording_cache}"
    )


def _reference_environment() -> tuple[Any, str | None]:
    try:
        from reprobuild.backends.reference import ReferenceBackend
    except ImportError as err:
        return None, f"not installed ({err})"
    try:
        return ReferenceBackend().environment(), None
    except Exception as err:  # doctor reports, it does not crash
        return None, f"{type(err).__name__}: {err}"


def doctor(
    lock: Path | None = typer.Option(
        None, "--lock", "-l", help="Check whether this lock's environment matches this machine."
    ),
    probe: bool = typer.Option(
        False,
        "--probe",
        help="Run the whole cycle on the bundled examples with TensorRT and report what this "
        "TensorRT does (exit 0 works, 1 a step failed, 3 no TensorRT/GPU).",
    ),
    bundle: Path | None = typer.Option(
        None,
        "--bundle",
        help="With --probe: the .tar.gz to write [default: a timestamped file under "
        "$XDG_CACHE_HOME/reprobuild/probe/ (~/.cache/...)].",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
    as_json: bool = JsonOpt,
) -> None:
    """Show what is installed (TensorRT, GPUs, CUDA) and whether a lock matches this machine.

    Works without TensorRT or a GPU. With --lock, exits 3 when the lock was recorded for
    another environment. With --probe, builds, records, pins, rebuilds, verifies and exports
    the bundled examples and answers, per open question, what this TensorRT does; the
    evidence goes into one .tar.gz for a bug report.

    \b
    Example:
      reprobuild doctor --lock tactics.lock
      reprobuild doctor --probe --bundle probe.tar.gz
    """
    if probe:
        from reprobuild.cli.probe_cmds import run_probe

        run_probe(bundle, as_json, quiet)
        return
    from reprobuild.backends.tensorrt import backend as tensorrt_backend
    from reprobuild.backends.tensorrt import cuda_probe
    from reprobuild.errors import EnvironmentMismatch

    cuda = cuda_probe.probe_cuda()
    tensorrt_info = tensorrt_backend.probe_tensorrt()
    tensorrt_reason = tensorrt_info.problem or cuda.no_gpu_reason
    if tensorrt_reason is None:
        # Importing TensorRT and seeing a GPU is not enough (a driver too old for this
        # TensorRT fails only when a builder or runtime is created): create both.
        tensorrt_reason = tensorrt_backend.creation_problem()
    ref_env, ref_reason = _reference_environment()
    from reprobuild.backends.tensorrt.device import run_readiness
    from reprobuild.backends.tensorrt.install import driver_problem, tensorrt_cuda_major

    report: dict[str, Any] = {
        "tensorrt": tensorrt_info.to_dict(),
        "cuda": cuda.to_dict(),
        # whether `run` (verify, a recording's expected bits) finds a CUDA runtime
        "run": run_readiness(tensorrt_info.version) if tensorrt_info.installed else None,
        # the driver's CUDA older than the one the TensorRT wheel was built for (else None)
        "driver_problem": driver_problem(cuda, tensorrt_cuda_major())
        if tensorrt_info.installed
        else None,
        "backends": {
            "reference": {"available": ref_reason is None, "problem": ref_reason},
            "tensorrt": {"available": tensorrt_reason is None, "problem": tensorrt_reason},
        },
    }
    tensorrt_here = None
    if tensorrt_reason is None:
        from dataclasses import asdict

        from reprobuild.workflow.probe_store import stored_policy

        tensorrt_here = tensorrt_backend.machine_environment(cuda)
        report["tie_rule_edits"] = asdict(stored_policy(tensorrt_here.identity_dict()))
    diffs: list[str] = []
    if lock is not None:
        from reprobuild.lock.yamlio import load_lock

        recorded = load_lock(lock).environment
        here = (
            (tensorrt_here or tensorrt_backend.machine_environment(cuda))
            if recorded.backend == "tensorrt"
            else ref_env
            if recorded.backend == "reference"
            else None
        )
        diffs = recorded.differences(here)
        report["lock"] = {
            "path": str(lock),
            "backend": recorded.backend,
            "matches": not diffs,
            "differences": diffs,
            "recorded": recorded.to_dict(),
            "here": here.to_dict() if here is not None else None,
        }
    if as_json:
        print_json(report)
    else:
        _print_doctor(report)
    if diffs:
        raise EnvironmentMismatch(
            f"{lock}: recorded for another environment ({'; '.join(diffs)}); build on the "
            "recorded machine, or re-record the lock here"
        )


def _print_doctor(report: dict[str, Any]) -> None:
    installed = report["tensorrt"]
    if installed["version"]:
        editable = "yes" if installed["editable_timing_cache"] else "no (needs >= 10.8)"
        typer.echo(f"TensorRT: {installed['version']} (editable timing cache: {editable})")
    else:
        broken = f"installed but unusable: {installed['problem']}"
        typer.echo(f"TensorRT: {broken if installed['installed'] else 'not installed'}")
    cuda = report["cuda"]
    if cuda["gpus"]:
        for gpu in cuda["gpus"]:
            typer.echo(
                f"GPU {gpu['index']}: {gpu['name']} (compute capability "
                f"{gpu['compute_capability']})"
            )
    else:
        typer.echo(
            "GPUs: none visible" + (f" ({'; '.join(cuda['problems'])})" if cuda["problems"] else "")
        )
    typer.echo(
        f"CUDA: driver {cuda['driver_version'] or 'unknown'}, "
        f"runtime {cuda['cuda_runtime_version'] or 'unknown'}"
    )
    if report["driver_problem"]:
        typer.echo(f"CUDA driver: TOO OLD: {report['driver_problem']}")
    run = report["run"]
    if run is not None:
        typer.echo(
            f"run (verify, expected bits): {run['how']}"
            if run["found"]
            else f"run (verify, expected bits): NO CUDA runtime found; pip install {run['package']}"
        )
    for name, info in report["backends"].items():
        state = "available" if info["available"] else f"unavailable: {info['problem']}"
        typer.echo(f"backend {name}: {state}")
    edits = report.get("tie_rule_edits")
    if edits is not None:  # what a TensorRT recording here does with the tie rule's choices
        state = "written back" if edits["write"] else "kept off (the builder's choices stay)"
        typer.echo(f"tie rule edits on TensorRT: {state}: {edits['why']}")
    lock = report.get("lock")
    if lock:
        if lock["matches"]:
            typer.echo(f"lock {lock['path']} ({lock['backend']}): matches this machine")
        else:
            typer.echo(f"lock {lock['path']} ({lock['backend']}): DIFFERENT environment")
            for line in lock["differences"]:
                typer.echo(f"  {line}")


def register(app: typer.Typer) -> None:
    app.command("export-cache")(export_cache)
    app.command("doctor")(doctor)
