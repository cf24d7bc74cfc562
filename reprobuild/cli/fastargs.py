"""The lock commands' arguments read without typer, when they are plain enough.

``show``, ``pin``, ``unpin`` and ``diff`` on a big lock should take a fraction of a
second, and importing typer, pydantic (typer converts every parameter through it) and
every command module takes about half of that before any work starts. So ``main`` asks
here first: an argument list made only of the options a command documents, each written
out whole (``--lock PATH``, ``-l PATH``, ``--lock=PATH``, flags at most once), is read
here and the command (``lock_run``) runs at once. Anything else (``--help``, a root
option, an unknown or repeated option, a missing or dash-leading value, ``--``, a wrong
number of arguments, an empty one) returns None and typer reads the arguments as always, so help,
usage errors and their exit codes stay typer's own.
"""

from __future__ import annotations

import errno
import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reprobuild.lock.model import DEFAULT_LOCK


@dataclass(frozen=True)
class _Spec:
    """A command's options: flags (boolean) and whether it takes ``--lock``/``-l``, and
    how many positional arguments it takes (None: one or more)."""

    flags: tuple[str, ...]
    lock: bool
    positionals: int | None


_SPECS = {
    "show": _Spec(("--json", "--precision"), True, 0),
    "pin": _Spec(("--json", "--force"), True, None),
    "unpin": _Spec(("--json",), True, None),
    "diff": _Spec(("--json",), False, 2),
}


def parse(args: list[str]) -> Callable[[], int | None] | None:
    """The command to run for ``args`` (its exit code, None for 0), or None: typer's turn."""
    if not args or args[0] not in _SPECS:
        return None
    name, spec = args[0], _SPECS[args[0]]
    flags: set[str] = set()
    lock: str | None = None
    positionals: list[str] = []
    rest = iter(args[1:])
    for arg in rest:
        if arg in ("", "-"):
            return None
        if not arg.startswith("-"):
            positionals.append(arg)
        elif arg in spec.flags and arg not in flags:
            flags.add(arg)
        elif spec.lock and lock is None and arg in ("--lock", "-l"):
            lock = next(rest, "")
        elif spec.lock and lock is None and arg.startswith("--lock="):
            lock = arg[len("--lock=") :]
        else:
            return None
        if lock is not None and (not lock or lock.startswith("-")):
            return None
    wanted = spec.positionals
    if (wanted is None and not positionals) or (wanted is not None and len(positionals) != wanted):
        return None
    path = Path(DEFAULT_LOCK if lock is None else lock)
    as_json = "--json" in flags
    return lambda: _run(name, positionals, path, flags, as_json)


def _run(name: str, positionals: list[str], lock: Path, flags: set[str], as_json: bool) -> int:
    """Without the cyclic garbage collector: everything a lock command makes (a lock is
    ~150,000 objects for 10,000 layers, then table rows) is acyclic and freed by reference
    counting, so the collector's passes over it would only cost time (~20 ms for ``diff``)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return _command(name, positionals, lock, flags, as_json)
    except EOFError:  # as typer has it: a blank line, then it is an interruption
        from reprobuild.cli.render import echo

        echo(err=True)
        raise KeyboardInterrupt from None
    except OSError as err:  # the reader went away (`reprobuild show | head`): as typer does
        if err.errno != errno.EPIPE:
            raise
        from typer._click.utils import PacifyFlushWrapper

        sys.stdout = PacifyFlushWrapper(sys.stdout)  # type: ignore[assignment]
        sys.stderr = PacifyFlushWrapper(sys.stderr)  # type: ignore[assignment]
        sys.exit(1)
    finally:
        if was:
            gc.enable()


def _command(name: str, positionals: list[str], lock: Path, flags: set[str], as_json: bool) -> int:
    from reprobuild.cli import lock_run

    if name == "show":
        lock_run.show(lock, as_json, "--precision" in flags)
    elif name == "pin":
        lock_run.pin(positionals, lock, "--force" in flags, as_json)
    elif name == "unpin":
        lock_run.unpin(positionals, lock, as_json)
    else:
        return lock_run.diff(Path(positionals[0]), Path(positionals[1]), as_json)
    return 0
