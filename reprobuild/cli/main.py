"""Entry point. Each command group lives in its own module with a ``register(app)``.

Command modules import only typer and light project modules at import time, so
``reprobuild --help`` and ``reprobuild pin`` never import numpy, onnx or tensorrt.
"""

from __future__ import annotations

import sys

import typer

from reprobuild.errors import ReprobuildError

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


def fail(err: ReprobuildError, as_json: bool = False) -> None:
    """Print the one-line message and exit with its documented code."""
    from reprobuild.cli.crash import report

    report(err.exit_code, str(err), as_json)
    raise SystemExit(err.exit_code)


def main(argv: list[str] | None = None) -> None:
    """Run one command. The only place exceptions are caught for the user: see ``crash``."""
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
    from typer.exceptions import Abort

    from reprobuild.cli import crash, render

    render.json_printed = False
    for stream in (sys.stdout, sys.stderr):  # a lone surrogate in a lock must still print
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    args = sys.argv[1:] if argv is None else list(argv)
    as_json = crash.wants_json(args)
    try:
        rv = app(args=args, prog_name="reprobuild", standalone_mode=False)
    except ReprobuildError as err:
        code, message = err.exit_code, str(err)
    except NoArgsIsHelpError as err:  # bare `reprobuild`: the help is the answer
        err.show()
        sys.exit(err.exit_code)
    except ClickException as err:
        code, message = crash.usage_error(err)
    except (KeyboardInterrupt, Abort):
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as err:  # a bug: one line for the user, the traceback to a file
        code, message = crash.internal_error(err, args)
    else:
        if rv == 130:  # typer turns Ctrl-C into exit 130
            typer.echo("interrupted", err=True)
        if isinstance(rv, int) and rv != 0:
            sys.exit(rv)
        return
    crash.report(code, message, as_json, stdout_used=render.json_printed)
    sys.exit(code)


if __name__ == "__main__":
    main()
