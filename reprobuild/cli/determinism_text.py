"""What ``verify --runs`` and ``verify --batch-invariance`` print: the verdicts, the bits
that moved, and the layers responsible with the ``deny`` line that fixes each."""

from __future__ import annotations

from typing import Any

import typer

from reprobuild.cli.render import format_table
from reprobuild.words import count


def print_determinism(result: Any) -> None:
    """The run-to-run and batch-invariance verdicts, and the culprits of a failed one."""
    runs, batch = result.run_check, result.batch_invariance
    if runs is not None and runs.deterministic:
        typer.echo(
            f"run to run: each of {count(runs.engines, 'engine')} ran {runs.runs} times on the "
            "same inputs: the same bits every run"
        )
    elif runs is not None:
        _print_moved(runs.moved, "against the engine's first run")
        _print_culprits(runs.culprits)
        typer.echo(
            f"NOT DETERMINISTIC RUN TO RUN: run {runs.runs} times on the same inputs, an "
            f"engine gave other bits on a later run "
            f"({', '.join(sorted({m.output for m in runs.moved}))} moved)"
        )
    if batch is None:
        return
    if batch.invariant is None:
        typer.echo(f"batch invariance: NOT CHECKED: {batch.reason}")
        return
    skipped = (
        f" ({', '.join(batch.not_compared)} not compared: no batch axis)"
        if batch.not_compared
        else ""
    )
    if batch.invariant:
        typer.echo(
            f"batch invariance: each of {batch.batch} samples alone (batch 1) gives the same "
            f"bits as inside the batch of {batch.batch}{skipped}"
        )
        return
    if batch.unsteady:
        _print_moved(batch.unsteady, f"against the first run of the batch of {batch.batch}")
        _print_culprits(batch.culprits)
        typer.echo(
            f"NOT DETERMINISTIC RUN TO RUN: the batch of {batch.batch} gave other bits on its "
            "second run, so batch invariance could not be decided"
        )
        return
    _print_moved(batch.moved, f"alone (batch 1) against inside the batch of {batch.batch}")
    _print_culprits(batch.culprits)
    samples = sorted({m.sample for m in batch.moved})
    typer.echo(
        f"NOT BATCH INVARIANT: {count(len(samples), 'sample')} of {batch.batch} "
        f"({', '.join(map(str, samples))}) gave other bits alone than inside the batch"
        f"{skipped}"
    )


def _print_moved(moved: list[Any], against: str) -> None:
    rows = [[m.where(), m.output, f"{m.bits_flipped}/{m.bits_total}"] for m in moved]
    typer.echo(f"bits that moved, {against}:")
    typer.echo(format_table(["where", "output", "bits"], rows))


def _print_culprits(culprits: Any) -> None:
    if culprits is None:
        return
    typer.echo(f"culprits ({count(culprits.builds, 'build')}): {culprits.message}")
    if culprits.layers:
        rows = [
            [c["layer"], c["kernel"] or c["tactic"], c["switched_to"]]
            + ([] if c["alone"] else [f"group {c['group'] + 1}: only together"])
            for c in culprits.layers
        ]
        grouped = any(not c["alone"] for c in culprits.layers)
        head = ["layer", "kernel", "fixed by"] + (["note"] if grouped else [])
        typer.echo(format_table(head, [r + [""] * (len(head) - len(r)) for r in rows]))
    for line in culprits.fixes():
        typer.echo(f"fix: {line}")
