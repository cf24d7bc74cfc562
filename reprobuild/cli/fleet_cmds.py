"""merge / fleet: joining what the runners of a fleet left behind (locks, verify reports)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from reprobuild.cli.render import echo, print_json
from reprobuild.words import count

if TYPE_CHECKING:
    from reprobuild.workflow.fleet import TargetCheck


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
    echo(f"{out}: {count(len(names), 'target')} ({', '.join(names)})")


def fleet(
    reports: list[Path] = typer.Argument(..., help="`reprobuild verify --json` outputs."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Check that every machine gives its target's recorded bits and agrees with the
    other machines of its target (exit 1 if not).

    Give one `verify --json` report per machine, card or rank: reports are grouped by
    target and inputs. A machine is odd when its bits are not the ones the lock records
    (even if others give the same), when its own verify failed, or when it differs from
    the others of its group. One report with no recorded bits to compare is not a check
    (exit 1). A machine whose verify was refused for lack of a target is listed (exit 1).

    \b
    Example:
      reprobuild fleet verify.gpu0.json verify.gpu1.json verify.gpu2.json verify.gpu3.json
    """
    from reprobuild.workflow.fleet import check_fleet

    result = check_fleet(list(reports))
    if as_json:
        print_json(result.to_json())
    else:
        for c in result.targets:
            echo(_group_line(c))
        for u in result.untargeted:
            echo(f"no target: {u.host} ({u.source}): {u.message}")
        echo("fleet agrees" if result.agree else "FLEET DIFFERS")
    if not result.agree:
        raise typer.Exit(1)


def _group_line(c: TargetCheck) -> str:
    """One target and inputs: what its machines were compared with, and the odd ones."""
    n = len(c.machines)
    head = f"{c.target} ({c.inputs})"
    if c.odd:
        odd = "; ".join(f"{m.host} ({m.source}): {m.why}" for m in c.odd)
        return f"{head}: {len(c.odd)} of {count(n, 'machine')} odd: {odd}"
    if c.compared_with == "lock":
        gives = "gives" if n == 1 else "give"
        return f"{head}: {count(n, 'machine')} {gives} the bits the lock records"
    if c.compared_with == "machines":
        return (
            f"{head}: {n} machines agree with each other (the lock records no bits for "
            "these inputs: verify --record-digests adds them)"
        )
    return (
        f"{head}: 1 machine, nothing compared: the lock records no bits for these inputs and "
        "no other machine of this target reported (verify --record-digests adds them)"
    )


def register(app: typer.Typer) -> None:
    app.command()(merge)
    app.command()(fleet)
