"""The CLI's one guard: every failure becomes one line and a documented exit code.

Known failures are ``ReprobuildError``s and carry their own code. Click's usage errors are
exit 2, shortened to one line. Anything else is a bug in reprobuild: the user gets exit 4
and one line naming the file that holds the traceback, never the traceback itself (it would
bury the one line that says what to do, and CI greps for it). The file goes to
``$REPROBUILD_CRASH_DIR``, else ``$XDG_CACHE_HOME/reprobuild/crashes`` (``~/.cache/...``),
else the system temporary directory when that cannot be written.

Under ``--json`` a failure is also JSON, ``{"error": {"code": N, "message": "..."}}``, one
line on stdout (for the program reading it) and the same line on stderr (for the person).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from reprobuild.cli.render import echo, shown
from reprobuild.errors import EXIT_ENV, EXIT_INTERNAL, EXIT_USAGE

_MAX_MESSAGE = 2000
"""A message longer than this is cut: one line a person can read, not a dump."""


def one_line(message: str) -> str:
    """Collapse a message to a single line (CI logs and ``grep`` see it whole)."""
    text = shown(" ".join(str(message).split()))
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def environment_failure(err: Exception, committed: list[Path]) -> tuple[int, str] | None:
    """(exit code, line) for a failure of the machine rather than of reprobuild, else None.

    A full or failing device under stdout (outputs written first, a pin say, and then the
    summary could not be printed) exits 2 naming what was written; numpy refusing its own
    environment variables at import (``NPY_DISABLE_CPU_FEATURES``) is an environment
    mismatch, exit 3."""
    import errno

    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
        written = ", ".join(dict.fromkeys(str(p) for p in committed))
        done = f" after the outputs were written: {written} (complete)" if written else ""
        return EXIT_USAGE, (
            f"cannot write to the output stream ({err.strerror}){done}; free space on the "
            "device that stdout or stderr goes to, or redirect them"
        )
    text = str(err)
    if isinstance(err, RuntimeError) and "NPY_" in text and "environment variable" in text:
        return EXIT_ENV, (
            f"numpy refuses this environment: {' '.join(text.split())[:200]}; fix or unset "
            "the NPY_ variable it names"
        )
    return None


def wants_json(argv: list[str]) -> bool:
    """``--json`` among the options (not after ``--``, where it would be an argument)."""
    for arg in argv:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


def report(code: int, message: str, as_json: bool, stdout_used: bool = False) -> None:
    """Print the failure: ``error: ...`` on stderr, or the JSON line on stdout and stderr
    (stderr only when the command already printed its JSON result to stdout)."""
    text = one_line(message)
    if as_json:
        line = json.dumps({"error": {"code": code, "message": text}}, ensure_ascii=False)
        if not stdout_used:
            _quietly(line, err=False)
        _quietly(line, err=True)
    else:
        _quietly(f"error: {text}", err=True)


def _quietly(line: str, err: bool) -> None:
    """Print ``line``; a closed, full or broken stream loses it without a traceback (the
    exit code still tells what happened), and stdout is pointed at ``/dev/null`` so the
    interpreter's last flush cannot fail either."""
    try:
        echo(line, err=err)
        (sys.stderr if err else sys.stdout).flush()
    except (OSError, ValueError, AttributeError):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, (sys.stderr if err else sys.stdout).fileno())
            os.close(devnull)


def crash_dirs() -> Iterator[Path]:
    """Where a traceback may be saved, in order of preference; the shared temporary
    directory's folder is made (privately) only when the others could not be written."""
    import tempfile

    from reprobuild.fileio import user_cache

    if os.environ.get("REPROBUILD_CRASH_DIR"):
        yield Path(os.environ["REPROBUILD_CRASH_DIR"])
    yield user_cache() / "crashes"
    shared = _private_dir(Path(tempfile.gettempdir()) / f"reprobuild-crashes-{os.geteuid()}")
    if shared is not None:
        yield shared


def _private_dir(path: Path) -> Path | None:
    """``path`` as a folder only this user can enter, or a fresh private one beside it.

    Why: the temporary directory is shared, so another user can plant a symlink or a
    folder of their own at the name first; a traceback (command line, working directory)
    written through it would land where they can read or redirect it. The folder is created
    with mode 0700 and then checked with ``lstat``: a link, another owner, or group or world
    access make it unusable, and ``mkdtemp`` gives a new private folder instead.
    """
    import stat
    import tempfile

    with contextlib.suppress(FileExistsError, OSError):
        path.mkdir(mode=0o700)
    try:
        st = os.lstat(path)
        if (
            stat.S_ISDIR(st.st_mode)
            and st.st_uid == os.geteuid()
            and not st.st_mode & (stat.S_IRWXG | stat.S_IRWXO)
        ):
            return path
        return Path(tempfile.mkdtemp(prefix=f"{path.name}-", dir=path.parent))
    except OSError:
        return None


def save_traceback(err: BaseException, argv: list[str]) -> Path | None:
    """Write the traceback and the command line to a new file; None if nowhere is writable."""
    import tempfile  # here, not at the top: every command imports this module
    import time
    import traceback

    from reprobuild import __version__

    stamp = time.strftime("%Y%m%d-%H%M%S")
    text = (
        f"reprobuild {__version__}, python {sys.version.split()[0]}\n"
        f"command: reprobuild {' '.join(argv)}\ncwd: {os.getcwd()}\n\n"
        + "".join(traceback.format_exception(type(err), err, err.__traceback__))
    )
    for directory in crash_dirs():
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f"crash-{stamp}-", suffix=".log", dir=directory)
            with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
                fh.write(text)
            return Path(name)
        except OSError:
            continue
    return None


def internal_error(err: BaseException, argv: list[str]) -> tuple[int, str]:
    """Exit 4 and the line that says where the traceback went."""
    saved = save_traceback(err, argv)
    where = f"traceback saved to {saved}" if saved else "the traceback could not be saved"
    what = f"{type(err).__name__}: {err}"
    if len(what) > 300:
        what = what[:297] + "..."
    return (
        EXIT_INTERNAL,
        f"internal error ({what}); this is a bug in reprobuild, please report it; {where}",
    )


# trtexec's spelling of a build option -> (our option, the words to suggest); None: the model.
TRTEXEC_FLAGS = {
    "--fp16": ("--precision", "--precision fp16"),
    "--bf16": ("--precision", "--precision bf16"),
    "--int8": ("--precision", "--precision int8 --calibration DATA"),
    "--onnx": (None, "the model as the first argument: reprobuild build MODEL.onnx"),
    "--saveEngine": ("--out", "--out ENGINE"),
    "--verbose": ("--log", "--log FILE (saves the verbose builder log)"),
    "--minShapes": ("--min-shapes", "--min-shapes"),
    "--optShapes": ("--opt-shapes", "--opt-shapes"),
    "--maxShapes": ("--max-shapes", "--max-shapes"),
    "--tacticSources": ("--tactic-sources", "--tactic-sources"),
    "--builderOptimizationLevel": ("--opt-level", "--opt-level"),
    "--memPoolSize": ("--workspace", "--workspace"),
    "--noTF32": ("--no-tf32", "--no-tf32"),
    "--avgTiming": ("--avg-timing", "--avg-timing"),
}


def usage_error(err: Exception) -> tuple[int, str]:
    """Click's parse errors (a ``ClickException``) as one line with the help hint: exit 2.

    An unknown option that is trtexec's spelling of one of a model-building command's
    options names ours (click's own guess is dropped then: it guesses by spelling)."""
    ctx = getattr(err, "ctx", None)
    hint = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
    known = TRTEXEC_FLAGS.get(getattr(err, "option_name", None) or "")
    params = ctx.command.params if ctx is not None else []
    if known is not None and any(p.name == "model" for p in params):
        if known[0] is None or any(known[0] in p.opts for p in params):
            err.possibilities = []  # type: ignore[attr-defined]
            hint = f"; here it is {known[1]}{hint}"
    return EXIT_USAGE, f"{err.format_message()}{hint}"  # type: ignore[attr-defined]
