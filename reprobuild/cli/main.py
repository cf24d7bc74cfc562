"""Entry point: the one place exceptions are caught for the user (see ``crash``).

typer reads every command's arguments; the application is in ``app``, which imports only
the module of the command being run (all of them for ``--help``'s listing).
"""

from __future__ import annotations

import sys
from typing import Any

from reprobuild.errors import ReprobuildError, UsageError


def __getattr__(name: str) -> Any:
    if name == "app":  # ``from reprobuild.cli.main import app`` as before
        from reprobuild.cli.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fail(err: ReprobuildError, as_json: bool = False) -> None:
    """Print the one-line message and exit with its documented code."""
    from reprobuild.cli.crash import report

    report(err.exit_code, str(err), as_json)
    raise SystemExit(err.exit_code)


def main(argv: list[str] | None = None) -> None:
    """Run one command. The only place exceptions are caught for the user: see ``crash``."""
    from reprobuild.cli import crash, render

    render.json_printed = False
    for stream in (sys.stdout, sys.stderr):  # a lone surrogate in a lock must still print
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    args = sys.argv[1:] if argv is None else list(argv)
    as_json = crash.wants_json(args)
    try:
        rv = _typer(args)
    except ReprobuildError as err:
        code, message = err.exit_code, str(err)
    except KeyboardInterrupt:
        render.echo("interrupted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as err:  # a bug: one line for the user, the traceback to a file
        code, message = crash.internal_error(err, args)
    else:
        if rv == 130:  # typer turns Ctrl-C into exit 130
            render.echo("interrupted", err=True)
        if isinstance(rv, int) and rv != 0:
            sys.exit(rv)
        return
    crash.report(code, message, as_json, stdout_used=render.json_printed)
    sys.exit(code)


def _typer(args: list[str]) -> Any:
    """typer reads the arguments; its usage errors become ``UsageError`` (exit 2, one line)."""
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
    from typer.exceptions import Abort

    from reprobuild.cli import crash
    from reprobuild.cli.app import app

    try:
        return app(args=args, prog_name="reprobuild", standalone_mode=False)
    except NoArgsIsHelpError as err:  # bare `reprobuild`: the help is the answer
        err.show()
        sys.exit(err.exit_code)
    except ClickException as err:
        raise UsageError(crash.usage_error(err)[1]) from None
    except Abort:
        raise KeyboardInterrupt from None


if __name__ == "__main__":
    main()
