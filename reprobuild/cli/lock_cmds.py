"""pin / unpin / show / diff: commands that read and edit lockfiles.

Only light modules are imported here: these commands must start fast (no numpy/onnx).
What they do is in ``lock_run`` (typer-free, shared with ``fastargs``); this module
declares their arguments and help for typer.
"""

from __future__ import annotations

from pathlib import Path

import typer

from reprobuild.cli import lock_run
from reprobuild.lock.model import DEFAULT_LOCK

LockOpt = typer.Option(DEFAULT_LOCK, "--lock", "-l", help="Lockfile to read/edit.")
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")


def pin(
    selections: list[str] = typer.Argument(
        ..., metavar="layer=NAME tactic=TACTIC ...", help="Pairs of layer=/key= and tactic=."
    ),
    lock: Path = LockOpt,
    force: bool = typer.Option(False, "--force", help="Allow a tactic that is not a candidate."),
    as_json: bool = JsonOpt,
) -> None:
    """Pin layers to tactics in the lock.

    TACTIC is a tactic hash (0x..., compared as an integer) or a kernel name, and must be
    one of the layer's recorded candidates unless --force. A layer name that appears
    more than once is selected with key=0x... instead.

    \b
    Example:
      reprobuild pin layer=conv1 tactic=0x665ded9abbf88 layer=fc tactic=ref_gemm_blas
    """
    lock_run.pin(selections, lock, force, as_json)


def unpin(
    selections: list[str] = typer.Argument(..., metavar="layer=NAME ...", help="layer= or key="),
    lock: Path = LockOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Clear the 'pinned' mark, so a re-recording build may choose the tactic again.

    The recorded tactic stays in the lock until the next recording.

    \b
    Example:
      reprobuild unpin layer=conv1 key=0x1814870c44ff0f8574df6e3dda04cbd7
    """
    lock_run.unpin(selections, lock, as_json)


def show(
    lock: Path = LockOpt,
    as_json: bool = JsonOpt,
    precision: bool = typer.Option(False, "--precision", help="Show the precision plan."),
) -> None:
    """Show the locked layers: layer, key, tactic, kernel, pinned.

    \b
    Example:
      reprobuild show --lock tactics.lock --json
    """
    lock_run.show(lock, as_json, precision)


def diff(
    a: Path = typer.Argument(..., help="Old lock."),
    b: Path = typer.Argument(..., help="New lock."),
    as_json: bool = JsonOpt,
) -> None:
    """Compare two locks: layers added, removed, or with a changed tactic. Exit 1 if they differ.

    \b
    Example:
      reprobuild diff main.lock tactics.lock --json
    """
    code = lock_run.diff(a, b, as_json)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    for fn in (pin, unpin, show, diff):
        app.command(fn.__name__)(fn)
