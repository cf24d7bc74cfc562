"""merge / fleet: joining what the runners of a fleet left behind (locks, verify reports)."""

from __future__ import annotations

from pathlib import Path

import typer

from reprobuild.cli.render import echo, print_json


def merge(
    locks: list[Path] = typer.Argument(..., help="Locks recorded on different runners."),
    out: Path = typer.Option(
        ..., "--out", "-o", help="The merged lock (may be one of the inputs)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Merge locks recorded on different machines into one lock with every target.

    The locks must share the model, builder settings and precision plan (else exit 2); a
    target recorded differently in two locks is exit 2 (keep one of them).

    \b
    Example:
      reprobuild merge tactics.h100.lock tactics.a100.lock --out tactics.lock
    """
    from reprobuild.workflow.fleet import merge_locks

    merged = merge_locks(list(locks), out)
    names = merged.target_names()
    if as_json:
        print_json({"lock": str(out), "targets": names})
        return
    echo(f"{out}: {len(names)} target{'s' if len(names) != 1 else ''} ({', '.join(names)})")


def fleet(
    reports: list[Path] = typer.Argument(..., help="`reprobuild verify --json` outputs."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Check that every machine of one target reports the same digests (exit 1 if not).

    Give one `verify --json` report per machine, card or rank: reports are grouped by
    target and inputs, and within a group the tactic-map and output digests must agree.
    The machines that differ from the others are named.

    \b
    Example:
      reprobuild fleet verify.gpu0.json verify.gpu1.json verify.gpu2.json verify.gpu3.json
    """
    from reprobuild.workflow.fleet import check_fleet

    checks = check_fleet(list(reports))
    agree = all(c.agree for c in checks)
    if as_json:
        print_json({"agree": agree, "targets": [c.to_json() for c in checks]})
    else:
        for c in checks:
            n = len(c.machines)
            if c.agree:
                echo(f"{c.target}: {n} machine{'s' if n != 1 else ''} agree")
                continue
            odd = ", ".join(f"{m.host} ({m.source})" for m in c.odd)
            echo(f"{c.target}: {len(c.odd)} of {n} machines differ: {odd}")
        echo("fleet agrees" if agree else "FLEET DIFFERS")
    if not agree:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(merge)
    app.command()(fleet)
