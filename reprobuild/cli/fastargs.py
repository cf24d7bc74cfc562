"""The lock commands' and ``build``'s arguments read without typer, when they are plain.

``show``, ``pin``, ``unpin`` and ``diff`` on a big lock should take a fraction of a
second, and a locked rebuild of a small model about as long as its numpy and onnx imports;
importing typer, pydantic (typer converts every parameter through it) and every command
module takes about half of that before any work starts. So ``main`` asks here first: an
argument list made only of the options a command documents, each written out whole
(``--lock PATH``, ``-l PATH``, ``--lock=PATH``, flags and single-valued options at most
once, numbers as plain digits), is read here and the command (``lock_run``, ``build_run``)
runs at once. Anything else (``--help``, a root
option, an unknown or repeated option, a missing or dash-leading value, ``--``, a wrong
number of arguments, an empty one) returns None and typer reads the arguments as always, so help,
usage errors and their exit codes stay typer's own.
"""

from __future__ import annotations

import errno
import gc
import re
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


# build's options (``build_cmds.build`` declares them for typer; tests/test_fastargs.py holds
# the two together): option -> (``build_run.run``'s parameter, how its value is read).
_BUILD: dict[str, tuple[str, str]] = {
    "--lock": ("lock", "path"),
    "-l": ("lock", "path"),
    "--out": ("out", "path"),
    "-o": ("out", "path"),
    "--backend": ("backend", "str"),
    "--frozen": ("frozen", "flag"),
    "--cache-dir": ("cache_dir", "path"),
    "--allow-env-change": ("allow_env_change", "flag"),
    "--report": ("report", "path"),
    "--opt-level": ("opt_level", "int"),
    "--builder-optimization-level": ("opt_level", "int"),
    "--workspace": ("workspace", "str"),
    "--shapes": ("shapes", "list"),
    "--min-shapes": ("min_shapes", "list"),
    "--opt-shapes": ("opt_shapes", "list"),
    "--max-shapes": ("max_shapes", "list"),
    "--tactic-sources": ("tactic_sources", "str"),
    "--no-tf32": ("no_tf32", "flag"),
    "--max-tactics": ("max_tactics", "int"),
    "--avg-timing": ("avg_timing", "int"),
    "--precision": ("precision", "str"),
    "--keep-fp32": ("keep_fp32", "list"),
    "--keep-fp32-op": ("keep_fp32_op", "list"),
    "--max-output": ("max_output", "float"),
    "--max-reduction-depth": ("max_reduction_depth", "int"),
    "--fp32-accumulate": ("fp32_accumulate", "flag"),
    "--calibration": ("calibration", "path"),
    "--calib-method": ("calib_method", "str"),
    "--calib-batch-size": ("calib_batch_size", "int"),
    "--calib-samples": ("calib_samples", "int"),
    "--float": ("float_precision", "str"),
    "--held-out": ("held_out", "path"),
    "--json": ("as_json", "flag"),
    "--quiet": ("quiet", "flag"),
    "-q": ("quiet", "flag"),
    "--ref-timing": ("ref_timing", "str"),
    "--threads": ("threads", "int"),
}
# Numbers as plain digits only (typer's own reading of anything else, "007", "1_000",
# "1e3", " 5", is left to typer); each read here gives what typer gives.
_NUMBER = {
    "int": re.compile(r"(0|[1-9][0-9]{0,17})"),
    "float": re.compile(r"[0-9]{1,18}(\.[0-9]{1,18})?"),
}

_SPECS = {
    "show": _Spec(("--json", "--precision"), True, 0),
    "pin": _Spec(("--json", "--force"), True, None),
    "unpin": _Spec(("--json",), True, None),
    "diff": _Spec(("--json",), False, 2),
}


def parse(args: list[str]) -> Callable[[], int | None] | None:
    """The command to run for ``args`` (its exit code, None for 0), or None: typer's turn."""
    if args and args[0] == "build":
        return _parse_build(args[1:])
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


def _parse_build(args: list[str]) -> Callable[[], int | None] | None:
    """``build MODEL [OPTIONS]`` as ``build_run.run``'s arguments, or None: typer's turn."""
    values: dict[str, object] = {}
    positionals: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg in ("", "-", "--"):
            return None
        if not arg.startswith("-"):
            positionals.append(arg)
            continue
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        dest, kind = _BUILD.get(name, ("", ""))
        if not dest or (kind == "flag" and eq) or (kind != "list" and dest in values):
            return None
        if kind == "flag":
            values[dest] = True
            continue
        text = inline if eq else next(rest, "")
        if not text or text.startswith("-"):
            return None
        value = _build_value(kind, text)
        if value is None:
            return None
        if kind == "list":
            values.setdefault(dest, []).append(value)  # type: ignore[union-attr]
        else:
            values[dest] = value
    if len(positionals) != 1:
        return None
    model = Path(positionals[0])
    return lambda: _guarded(lambda: _build(model, values))


def _build_value(kind: str, text: str) -> object:
    """``text`` as typer reads it for ``kind``, or None: not plain enough to read here."""
    if kind in ("str", "list"):
        return text
    if kind == "path":
        return Path(text)
    if not _NUMBER[kind].fullmatch(text):
        return None
    return int(text) if kind == "int" else float(text)


def _build(model: Path, values: dict[str, object]) -> None:
    from reprobuild.cli import build_run

    build_run.run(model, **values)  # type: ignore[arg-type]


def _run(name: str, positionals: list[str], lock: Path, flags: set[str], as_json: bool) -> int:
    """Without the cyclic garbage collector: everything a lock command makes (a lock is
    ~150,000 objects for 10,000 layers, then table rows) is acyclic and freed by reference
    counting, so the collector's passes over it would only cost time (~20 ms for ``diff``)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return _guarded(lambda: _command(name, positionals, lock, flags, as_json))
    finally:
        if was:
            gc.enable()


def _guarded(command: Callable[[], int | None]) -> int | None:
    """Run ``command`` as typer runs one: end of input and a closed pipe end the same way."""
    try:
        return command()
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
