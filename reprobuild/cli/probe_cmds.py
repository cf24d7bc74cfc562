"""``doctor --probe``: rendering the probe's answers (the work is in workflow/probe.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from reprobuild.cli.render import print_json


def default_bundle() -> Path:
    """``$XDG_CACHE_HOME/reprobuild/probe/`` (``~/.cache/...``), timestamped: never the
    current folder, which the probe leaves as it was (docs/tensorrt.md)."""
    import time

    from reprobuild.workflow.probe_store import probe_dir

    return probe_dir() / f"reprobuild-probe-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz"


def run_probe(bundle: Path | None, as_json: bool, quiet: bool) -> None:
    """Run the probe; exit 0 when the whole cycle worked, 1 when a step failed, 3 without
    TensorRT or a GPU (one line, before any work)."""
    from reprobuild.backends import get_backend
    from reprobuild.errors import BackendUnavailable, DriftError
    from reprobuild.workflow.probe import probe

    try:
        backend = get_backend("tensorrt")
    except BackendUnavailable as err:
        raise BackendUnavailable(f"doctor --probe needs TensorRT and a GPU: {err}") from None
    from reprobuild.cli.render import Progress

    progress = Progress(quiet or as_json)
    try:
        report = probe(bundle or default_bundle(), backend=backend, progress=progress)
    finally:
        progress.done()
    if as_json:
        print_json(report.to_json())
    else:
        _print(report)
    if not report.ok:
        failed = next(s for s in report.steps if s.ok is False)
        raise DriftError(
            f"doctor --probe: step '{failed.name}' failed for {failed.model}: {failed.detail}; "
            f"attach {report.bundle} to a bug report"
        )


def _print(report: Any) -> None:
    typer.echo(header(report.environment))
    rows = [("question", "answer", "what reprobuild does with it")]
    for a in report.answers:
        seen = "" if a.observed == ["default"] else f" [observed: {', '.join(a.observed)}]"
        rows.append((a.text, f"{a.result}: {a.detail}{seen}", a.action))
    typer.echo(_table(rows))
    for s in report.steps:
        state = "ok" if s.ok else "skipped" if s.ok is None else "FAILED"
        typer.echo(f"step {s.model}: {s.name}: {state} ({s.seconds:.2f} s) {s.detail}".rstrip())
    for note in report.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"bundle: {report.bundle}")
    typer.echo("cycle: " + ("works" if report.ok else "FAILED"))


def header(env: dict[str, Any]) -> str:
    """The probe's first line: TensorRT version and GPU, each unknown value named as such
    (``environment.json`` holds everything)."""
    seen = {**(env.get("advisory") or {}), **(env.get("identity") or {})}

    def value(key: str, what: str) -> str:
        v = seen.get(key)
        return f"unknown {what}" if v in (None, "") else str(v)

    return (
        f"TensorRT {value('tensorrt_version', 'version')} on {value('gpu', 'GPU')} "
        f"(compute capability {value('compute_capability', 'compute capability')}, built for "
        f"CUDA {value('cuda_major', 'major')}, CUDA runtime {value('cuda_runtime', 'version')}, "
        f"driver {value('driver_version', 'version')})"
    )


def _table(rows: list[tuple[str, str, str]]) -> str:
    """One plain-text table (a rich table wraps unpredictably in logs and bug reports)."""
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = []
    for n, row in enumerate(rows):
        lines.append(
            " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        )
        if n == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)
