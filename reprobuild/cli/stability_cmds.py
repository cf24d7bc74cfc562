"""stability: N independent recordings of a model, and which of its layers hold still.

The recordings and the per-layer figures are the workflow's (``workflow/stability.py``);
this module prints them, as a table, JSON, or a plot (``stability_plot``, matplotlib: an
optional extra, ``pip install 'reprobuild[plot]'``)."""

from __future__ import annotations

from pathlib import Path

import typer

from reprobuild.cli.build_cmds import BACKEND_HELP, RefTimingOpt, ThreadsOpt, backend_arg
from reprobuild.cli.render import echo, echo_lines, print_json, table_lines, with_progress
from reprobuild.errors import UsageError
from reprobuild.types import DEFAULT_TIE_BAND
from reprobuild.words import count


def stability(
    model: Path = typer.Argument(..., help="ONNX model to record."),
    records: int = typer.Option(5, "--records", "-n", help="Independent recordings (>= 2)."),
    backend: str = typer.Option("auto", "--backend", help=BACKEND_HELP),
    tie_band: float | None = typer.Option(
        None,
        "--tie-band",
        help=f"The recordings' tie band [default: {DEFAULT_TIE_BAND:g}; 0 = fastest].",
    ),
    plot: Path | None = typer.Option(
        None, "--plot", help="Write a plot (.png or .svg): one row per layer (needs matplotlib)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
    ref_timing: str = RefTimingOpt,
    threads: int | None = ThreadsOpt,
) -> None:
    """Record MODEL N times, each with its own cache folder; per key: flip rate, best and
    second-best times, the tie band, whether the rule's choice held, whether its layer ran
    it, and keys at risk; over the recordings: distinct engines and output digests.

    Exit 0 whatever the agreement (it is a measurement); 2 for bad input, or --plot without
    matplotlib installed.

    \b
    Example:
      reprobuild stability model.onnx --records 5 --plot stability.svg
    """
    from reprobuild.types import BuildSettings

    if tie_band is not None and not 0.0 <= tie_band <= 1.0:
        raise UsageError(
            f"--tie-band {tie_band}: must be a fraction from 0 to 1 (default {DEFAULT_TIE_BAND:g})"
        )
    if plot is not None:
        from reprobuild.cli.stability_plot import check_plot_path

        check_plot_path(plot, model)
    from reprobuild.workflow.stability import stability as run

    settings = None if tie_band is None else BuildSettings(tie_band=tie_band)
    report = with_progress(
        run,
        quiet or as_json,
        model,
        records=records,
        backend=backend_arg(backend, ref_timing, threads),
        settings=settings,
    )
    if plot is not None:
        from reprobuild.cli.stability_plot import write_plot

        write_plot(report, plot)
    if as_json:
        print_json({**report.to_json(), "plot": None if plot is None else str(plot)})
        return
    rows = [
        [
            k.layer,
            k.key,
            _ran(k.ran),
            "yes" if k.held else "no",
            f"{k.flip_rate:.0%}",
            _ms(k.best_ms),
            _ms(k.second_ms),
            _ms(k.band_ms),
            "AT RISK" if k.at_risk else "",
        ]
        for k in report.keys
    ]
    head = ["layer", "key", "ran", "held", "flips", "best ms", "2nd ms", "band ms", ""]
    echo_lines(table_lines(head, rows))
    s = report.settings
    echo(
        f"{report.records} recordings ({report.backend}, tie band {s.tie_band:g}, rule "
        f"{s.tie_rule}): {sum(k.held for k in report.keys)} of {len(report.keys)} keys held "
        f"({report.agreement:.1%}), {len(report.at_risk)} at risk; {report.total_s:.1f} s"
    )
    engines, digests = report.distinct_engines, report.distinct_digests
    echo(
        f"what ships: {count(engines, 'distinct engine')} and "
        f"{count(digests, 'distinct output digest')} over the {report.records} recordings"
        + (f" (layers that differ: {', '.join(report.engine_layers)})" if engines > 1 else "")
    )
    if plot is not None:
        echo(f"plot: {plot}")


def _ran(ran: list[bool | None]) -> str:
    """How many recordings ran this key, of those that recorded it."""
    known = [r for r in ran if r is not None]
    return f"{sum(known)}/{len(known)}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def register(app: typer.Typer) -> None:
    app.command("stability")(stability)
