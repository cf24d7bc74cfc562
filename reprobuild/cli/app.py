"""The typer application: every command group registers itself here (``register(app)``).

Command modules import only typer and light project modules at import time, so
``reprobuild --help`` and ``reprobuild pin`` never import numpy, onnx or tensorrt. The
lock commands usually do not come here at all (``fastargs``).
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="reprobuild",
    help=(
        "Reproducible TensorRT engine builds: record every tactic in a lockfile, "
        "pin them, and verify bit-identical outputs.\n\n"
        "Exit codes: 0 success, 1 a difference or failed verification, "
        "2 bad usage or bad input, 3 environment mismatch, 4 internal error (a bug; the "
        "traceback is saved to a file)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
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


def _register_all() -> None:
    from reprobuild.cli import build_cmds, layers_cmds, lock_cmds, log_cmds, trt_cmds, verify_cmds

    for module in (build_cmds, verify_cmds, lock_cmds, log_cmds, layers_cmds, trt_cmds):
        module.register(app)


_register_all()
