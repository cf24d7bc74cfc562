"""The typer application. ``COMMANDS`` names each command's module; the module is imported,
and its parameters turned into click's, only when that command runs.

A command does not pay for the others: ``reprobuild show`` imports neither ``build_cmds``
nor ``verify_cmds``, nor converts build's thirty-odd options. ``--version`` and a mistyped
command import no command module (the names for "did you mean" are ``COMMANDS``' keys).
``reprobuild --help`` imports them all: its listing shows each command's own first help
line, which lives with the command. Command modules import only typer and light project
modules at import time, so none of this imports numpy, onnx or tensorrt.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

import typer
from typer.core import TyperGroup
from typer.main import get_group

COMMANDS: dict[str, str] = {
    "build": "build_cmds",
    "verify": "verify_cmds",
    "bisect": "verify_cmds",
    "pin": "lock_cmds",
    "unpin": "lock_cmds",
    "show": "lock_cmds",
    "diff": "lock_cmds",
    "deny": "rule_cmds",
    "undeny": "rule_cmds",
    "merge": "fleet_cmds",
    "fleet": "fleet_cmds",
    "export-cache": "trt_cmds",
    "doctor": "trt_cmds",
    "log": "log_cmds",
    "layers": "layers_cmds",
    "stability": "stability_cmds",
}
"""Command name -> its module under ``reprobuild.cli`` (which has ``register(app)``), in the
order ``--help`` lists them."""

_SETTINGS: dict[str, Any] = {
    "add_completion": False,
    "pretty_exceptions_enable": False,
    "rich_markup_mode": None,
}
"""typer settings shared by the application and the per-module apps its commands come from,
so a command is converted exactly as it would be registered on the application itself."""


class _LazyCommands(Mapping[str, Any]):
    """The command table as click's group reads it: every name at once, each command built
    on first look-up (its module imported and ``register``-ed on an app of its own)."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            module = importlib.import_module(f"reprobuild.cli.{COMMANDS[name]}")
            module_app = typer.Typer(**_SETTINGS)
            module.register(module_app)
            self._built.update(get_group(module_app).commands)
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


class LazyGroup(TyperGroup):
    """The root group, with ``_LazyCommands`` for its commands."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _LazyCommands()  # type: ignore[assignment]


app = typer.Typer(
    cls=LazyGroup,
    name="reprobuild",
    help=(
        "Reproducible TensorRT engine builds: record every tactic in a lockfile, "
        "pin them, and verify bit-identical outputs.\n\n"
        "Exit codes: 0 success, 1 a difference or failed verification, "
        "2 bad usage or bad input, 3 environment mismatch, 4 internal error (a bug; the "
        "traceback is saved to a file)."
    ),
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    **_SETTINGS,
)


def _version(value: bool) -> None:
    if value:
        from reprobuild import __version__

        typer.echo(f"reprobuild {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Reproducible TensorRT engine builds."""
