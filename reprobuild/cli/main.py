"""Entry point: the one place exceptions are caught for the user (see ``crash``).

typer reads every command's arguments; the application is in ``app``, which imports only
the module of the command being run (all of them for ``--help``'s listing).
"""

from __future__ import annotations

import sys
from typing import Any

from reprobuild.cli.numwarn import numeric_warnings
from reprobuild.errors import ReprobuildError, UsageError
from reprobuild.transaction import COMMITTED


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


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (what ``timeout``, CI cancellation and ``docker stop`` send),
    raised where the program is, like Ctrl-C: every transaction rolls back the same way."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_received: list[int] = []
"""The terminating signal, if one came: typer answers any ``KeyboardInterrupt`` with 130."""


def _terminate(signum: int, _frame: Any) -> None:
    _received.append(signum)
    raise Terminated(signum)


def _handle_signals() -> dict[int, Any]:
    """Turn SIGTERM and SIGHUP into ``Terminated``; returns the handlers to put back."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    old = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None:
            old[signum] = signal.signal(signum, _terminate)
    return old


def main(argv: list[str] | None = None) -> None:
    """Run one command. The only place exceptions are caught for the user: see ``crash``."""
    import signal

    _received.clear()
    old = _handle_signals()
    try:
        _main(argv)
    finally:
        if argv is None:  # the process itself, which ends here: see _late_signals
            _late_signals()
        else:
            for signum, handler in old.items():
                signal.signal(signum, handler)


def _late_signals() -> None:
    """A signal after the command ended, while the interpreter shuts down, still says what
    was written: without this it would kill the process silently (SIGTERM's default) or
    print a traceback (Ctrl-C), right after the outputs were moved into place."""
    import contextlib
    import os
    import signal
    import threading

    def late(signum: int, _frame: Any) -> None:
        with contextlib.suppress(Exception):
            sys.stdout.flush()  # what the command printed, whole
            sys.stderr.write(_signal_line(signum) + "\n")
            sys.stderr.flush()
        os._exit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):
            signum = getattr(signal, name, None)
            if signum is not None:
                signal.signal(signum, late)


def _main(argv: list[str] | None) -> None:
    from reprobuild.cli import crash, render

    render.json_printed = False
    for stream in (sys.stdout, sys.stderr):  # a lone surrogate in a lock must still print
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    args = sys.argv[1:] if argv is None else list(argv)
    as_json = crash.wants_json(args)
    COMMITTED.clear()
    try:
        with numeric_warnings(render.echo):
            _check_kernel_family(args)
            rv = _typer(args)
    except ReprobuildError as err:
        code, message = err.exit_code, str(err)
    except KeyboardInterrupt as err:
        _interrupted(getattr(err, "signum", 2))
    except BrokenPipeError:  # the reader went away (`| head`): 128 + SIGPIPE, like a shell
        _quiet_stdout()
        sys.exit(141)
    except SystemExit:
        raise
    except Exception as err:  # a bug: one line for the user, the traceback to a file
        known = crash.environment_failure(err, COMMITTED)
        code, message = known if known is not None else crash.internal_error(err, args)
    else:
        if rv == 130:  # typer turns Ctrl-C (and SIGTERM / SIGHUP) into exit 130
            _interrupted(_received[-1] if _received else 2)
        if isinstance(rv, int) and rv != 0:
            sys.exit(rv)
        return
    crash.report(code, message, as_json, stdout_used=render.json_printed)
    sys.exit(code)


def _check_kernel_family(args: list[str]) -> None:
    """Before anything loads numpy: a forced OpenBLAS kernel family this CPU cannot run is
    exit 3 (OpenBLAS would kill the process with SIGILL, saying nothing); help needs none."""
    import os

    if (
        not os.environ.get("OPENBLAS_CORETYPE")
        or not args
        or {"-h", "--help", "--version"} & set(args)
    ):
        return
    from reprobuild.backends.reference.coretype import check_coretype
    from reprobuild.cli import render

    note = check_coretype(os.environ)
    if note:
        render.echo(f"warning: {note}", err=True)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush into a broken pipe is
    silent (no "Exception ignored" lines)."""
    import contextlib
    import os

    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _interrupted(signum: int) -> None:
    """One line, and 128 + the signal: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP.

    A signal after the command's commit point (its outputs already moved into place, e.g.
    while ``pin`` lets go of the file lock or prints) has nothing left to roll back: the
    line then says which files were written, so nobody redoes or reverts a finished pin."""
    from reprobuild.cli import render

    render.echo(_signal_line(signum), err=True)
    sys.exit(128 + signum)


def _signal_line(signum: int) -> str:
    """The one line for a signal: what it did, and the outputs already written, if any."""
    from reprobuild.cli.render import shown

    what = "interrupted" if signum == 2 else f"terminated (signal {signum})"
    if COMMITTED:
        names = ", ".join(dict.fromkeys(shown(p) for p in COMMITTED))
        what += f" after the outputs were written: {names} (complete; nothing to roll back)"
    return what


def _typer(args: list[str]) -> Any:
    """typer reads the arguments; its usage errors become ``UsageError`` (exit 2, one line)."""
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
    from typer.exceptions import Abort

    from reprobuild.cli import crash
    from reprobuild.cli.app import app

    try:
        return app(args=args, prog_name="reprobuild", standalone_mode=False)
    except SystemExit as err:
        from typer._click.utils import PacifyFlushWrapper

        if err.code == 1 and isinstance(sys.stdout, PacifyFlushWrapper):
            raise BrokenPipeError from None  # typer's EPIPE exit: 1 would mean "different"
        raise
    except NoArgsIsHelpError as err:  # bare `reprobuild`: the help is the answer
        err.show()
        sys.exit(err.exit_code)
    except ClickException as err:
        raise UsageError(crash.usage_error(err)[1]) from None
    except Abort as err:  # click turns Ctrl-C (and our SIGTERM / SIGHUP) into Abort
        cause = err.__context__
        raise (cause if isinstance(cause, KeyboardInterrupt) else KeyboardInterrupt()) from None


if __name__ == "__main__":
    main()
