"""A command's outputs as one transaction: all of them are written, or none.

A build writes a lock, an engine and a report. If the engine cannot be written after the
lock was, the lock describes an engine that does not exist, and the next build trusts it.
So every writing command first checks that each output path can be written (before any
slow work: an hour-long build should not fail at its last step on a typo), then stages each
output as a fsynced temporary file beside its target, and only when every one is staged
moves them into place. Staging is where disks fill and permissions bite; the moves are
renames within a directory. Should one of those fail anyway, the files already moved are
put back from hard-linked backups, so the old outputs are left as they were.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TextIO

from reprobuild.errors import UsageError
from reprobuild.fileio import make_folders, remove_folders, write_target


def _reason(err: OSError) -> str:
    return err.strerror or type(err).__name__


def check_output_path(path: str | os.PathLike[str], what: str) -> Path:
    """Refuse, before any work, a path ``what`` cannot be written to; return it as a Path.

    Catches a path that is a directory, a parent that is a file, and a folder where files
    cannot be created (permissions, read-only or virtual file systems: probed by creating
    and removing a temporary file, since ``os.access`` says yes to root everywhere).
    """
    target = Path(path)
    too_long = [p for p in target.parts if len(os.fsencode(p)) > 255]
    if too_long or len(os.fsencode(target)) > 4095:
        raise UsageError(
            f"{str(target)[:60]}...: cannot write the {what}: the name is too long (a file "
            "name holds at most 255 bytes, a path 4095); choose a shorter path"
        )
    if target.is_dir():
        raise UsageError(f"{target}: cannot write the {what}: it is a directory; give a file path")
    _refuse_special(target, what)
    parent = target.parent if str(target.parent) else Path(".")
    existing = parent
    while not existing.exists():
        if existing.is_symlink():  # a dangling link: mkdir would fail on it
            break
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(
            f"{target}: cannot write the {what}: {existing} is not a directory; choose another path"
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=".reprobuild-probe-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise UsageError(
            f"{target}: cannot write the {what}: cannot create files in {existing} "
            f"({_reason(err)}); choose another path"
        ) from None
    return target


def _refuse_special(target: Path, what: str) -> None:
    """Refuse an output that is (or links to) a device, FIFO or socket.

    Why: outputs are staged beside the target and renamed over it, so ``--report /dev/null``
    run as root would replace the device node with a regular file for every later process;
    writing into the node instead would feed a FIFO or a terminal a file it never asked for.
    An output is only ever a regular file (or a path where one will be created).
    """
    import stat

    try:
        mode = os.stat(target).st_mode
    except OSError:
        return  # absent (or a dangling link): a file will be created there
    kinds = {stat.S_ISCHR: "character device", stat.S_ISBLK: "block device",
             stat.S_ISFIFO: "FIFO", stat.S_ISSOCK: "socket"}  # fmt: skip
    for test, kind in kinds.items():
        if test(mode):
            link = " (through a link)" if target.is_symlink() else ""
            raise UsageError(
                f"{target}: cannot write the {what}: it is a {kind}{link}, not a regular "
                "file; give the path of a regular file"
            )


def lock_target(path: str | os.PathLike[str], what: str = "lock") -> Path:
    """The file a lock write replaces, for every command that writes a lock (``build``,
    ``pin``, ``unpin``, ``verify --record-digests``, ``fleet merge``).

    A symlinked lock is written through (its target changes, the link stays: see
    ``write_target``). A read-only lock is refused rather than replaced: the atomic rename
    needs only the folder to be writable, so without this check a lock someone protected
    with ``chmod a-w`` would change anyway, without a word.
    """
    import shlex
    import stat

    target = write_target(path)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError as err:
        raise UsageError(f"{path}: cannot write the {what} ({_reason(err)})") from None
    if stat.S_ISREG(mode) and (not mode & 0o222 or not os.access(target, os.W_OK)):
        shown = f" ({target})" if target != Path(path) else ""
        raise UsageError(
            f"{path}: the {what}{shown} is read-only, so it is left as it is; make it "
            f"writable (chmod u+w {shlex.quote(str(target))}) to change it"
        )
    return target


Named = tuple[str | os.PathLike[str] | None, str]


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """One file under two names: the same inode when both exist (hard links, symlinks,
    ``./x`` and ``x``), else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_distinct(
    outputs: list[Named], inputs: list[Named], cache_dir: str | os.PathLike[str] | None = None
) -> None:
    """Refuse, before any work, an output that is an input, another output, or a file in
    the timing-cache folder ``cache_dir``.

    Why: writing ``--report`` over the lock or ``--out`` over the model replaces the very
    file the command read, and the user's lock or model is gone with exit 0; an output in
    the cache folder replaces (or later collides with) a recording cache. ``None`` entries
    (options not given) are skipped.
    """
    outs = [(p, w) for p, w in outputs if p is not None]
    ins = [(p, w) for p, w in inputs if p is not None]
    if cache_dir is not None:
        folder = os.path.realpath(cache_dir)
        for path, what in outs:
            if os.path.dirname(os.path.realpath(path)) == folder:
                raise UsageError(
                    f"{path}: the {what} would be written into the timing-cache folder "
                    f"({cache_dir}); give it a path outside that folder"
                )
    for i, (path, what) in enumerate(outs):
        for other, other_what in ins + outs[i + 1 :]:
            if same_file(path, other):
                raise UsageError(
                    f"{path}: the {what} would overwrite the {other_what} ({other}); "
                    "give the outputs paths of their own"
                )


class StagedLines:
    """A staged output written line by line while work runs (a verbose builder log can be
    larger than memory). Write errors are held until commit, because the writer is a
    builder's log callback and an exception there would abort the build obscurely."""

    def __init__(self, fh: TextIO, target: Path, what: str) -> None:
        self._fh: TextIO | None = fh
        self.target, self.what = target, what
        self._error: OSError | None = None

    def __call__(self, line: str) -> None:
        if self._fh is None or self._error is not None:
            return
        try:
            self._fh.write(line + "\n")
        except OSError as err:
            self._error = err

    def restart(self) -> None:
        """Start the file over (the next build's lines replace the last one's)."""
        if self._fh is None or self._error is not None:
            return
        try:
            self._fh.seek(0)
            self._fh.truncate()
        except OSError as err:
            self._error = err

    def close(self) -> None:
        """Flush and fsync; raise the held write error as one line."""
        fh, self._fh = self._fh, None
        if fh is None:
            return
        try:
            if self._error is None:
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as err:
            self._error = err
        finally:
            with contextlib.suppress(OSError):
                fh.close()
        if self._error is not None:
            raise UsageError(
                f"{self.target}: cannot write the {self.what} ({_reason(self._error)}); "
                "nothing was written"
            )


class Outputs:
    """Stage outputs, then ``commit`` them together; leaving the ``with`` unstaged cleans up.

    >>> with Outputs() as out:                    # doctest: +SKIP
    ...     out.stage_bytes("model.engine", engine, "engine")
    ...     out.stage_text("tactics.lock", text, "lock")
    ...     out.commit()
    """

    def __init__(self) -> None:
        self._staged: list[tuple[Path, str]] = []  # (target, temporary file beside it)
        self._streams: list[StagedLines] = []
        self._made: list[Path] = []  # folders this transaction created, outermost first

    def __enter__(self) -> Outputs:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.abort()

    def _temporary(self, target: Path, what: str) -> int:
        """A temporary file beside ``target``, registered as staged; its descriptor."""
        directory = target.parent if str(target.parent) else Path(".")
        try:
            self._made += make_folders(directory)
            sweep(target)
            fd, tmp = tempfile.mkstemp(
                prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=directory
            )
        except OSError as err:
            raise UsageError(
                f"{target}: cannot write the {what} ({_reason(err)}); nothing was written"
            ) from None
        self._staged.append((target, tmp))
        _copy_mode(target, tmp)
        return fd

    def stage_lines(self, path: str | os.PathLike[str], what: str) -> StagedLines:
        """A staged text file to write line by line as work runs; moved with the others."""
        target = Path(path)
        fd = self._temporary(target, what)
        fh = os.fdopen(fd, "w", encoding="utf-8", errors="replace", newline="\n")
        stream = StagedLines(fh, target, what)
        self._streams.append(stream)
        return stream

    def stage_bytes(self, path: str | os.PathLike[str], data: bytes, what: str) -> None:
        """Write ``data`` to a fsynced temporary file beside ``path`` (not yet in place)."""
        target = Path(path)
        fd = self._temporary(target, what)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as err:
            self.abort()
            raise UsageError(
                f"{target}: cannot write the {what} ({_reason(err)}); nothing was written"
            ) from None

    def stage_text(self, path: str | os.PathLike[str], text: str, what: str) -> None:
        self.stage_bytes(path, text.encode("utf-8"), what)

    def stage_lock(self, path: str | os.PathLike[str], text: str, what: str = "lock") -> None:
        """Stage a lock: through a symlink to its file, refused when read-only
        (``lock_target``); the one way every command writes a lock."""
        self.stage_text(lock_target(path, what), text, what)

    def commit(self) -> None:
        """Move every staged file into place; on a failure put back what was already moved.

        Ctrl-C, SIGTERM and SIGHUP are held while the files move: Python runs a signal's
        handler between any two bytecodes, so one landing just after a rename but before
        the rename was noted would escape the roll-back and leave a new lock beside an old
        engine. Held, the signal is handled right after the move, with every output in
        place and ``COMMITTED`` saying so."""
        try:
            for stream in self._streams:
                stream.close()
        except UsageError:
            self.abort()
            raise
        self._streams = []
        done = list(self._staged)
        with _signals_held():
            self._move(done)

    def _move(self, done: list[tuple[Path, str]]) -> None:
        """The renames, all or none (see ``commit``); records ``COMMITTED`` when done."""
        moved: list[tuple[Path, str | None, bool]] = []  # (target, backup, existed before)
        try:
            for target, tmp in done:
                existed, backup = target.exists(), _backup(target)
                try:
                    os.replace(tmp, target)
                except BaseException:
                    if backup is not None:
                        with contextlib.suppress(OSError):
                            os.unlink(backup)
                    raise
                moved.append((target, backup, existed))
        except BaseException as err:  # a full disk, or Ctrl-C between two renames
            for target, backup, existed in reversed(moved):
                with contextlib.suppress(OSError):
                    if backup is not None:
                        os.replace(backup, target)
                    elif not existed:
                        os.unlink(target)
            self.abort()
            if not isinstance(err, OSError):
                raise
            raise UsageError(
                f"cannot move the outputs into place ({_reason(err)}); the old files are kept"
            ) from None
        finally:
            for _, backup, _ in moved:
                if backup is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(backup)
        self._staged, self._made = [], []  # in place: nothing for abort() to undo
        COMMITTED.extend(target for target, _ in done)

    def abort(self) -> None:
        """Remove every staged temporary file (targets are untouched), and the folders this
        transaction created for them, innermost first; a folder something else has put a
        file in since is not empty and stays."""
        for stream in self._streams:
            with contextlib.suppress(UsageError):
                stream.close()
        self._streams = []
        for _, tmp in self._staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self._staged = []
        remove_folders(self._made)
        self._made = []


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP for the block's length: each one's Python handler is
    swapped for one that notes the signal, and the first noted is handed to the real handler
    when the block ends. (Blocking with ``pthread_sigmask`` is not enough: it is per thread,
    and a signal sent to the process is then delivered through a BLAS or ONNX Runtime
    thread, whose flag the main thread acts on at once.) Only the main thread can set
    handlers; elsewhere nothing is held."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    old = {}
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None:
            old[signum] = signal.signal(signum, lambda n, _f: noted.append(n))
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        if noted:
            handler = old[noted[0]]
            if callable(handler):
                handler(noted[0], None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), noted[0])


COMMITTED: list[Path] = []
"""Every output moved into place by this process, in order: a signal arriving after a
command's commit point has nothing left to roll back, and the CLI says these were written
(the CLI clears the list when a command starts)."""


@contextlib.contextmanager
def working_files() -> Iterator[None]:
    """What the block commits is a command's own working files (``stability``'s recordings,
    ``probe``'s builds, in a temporary folder), not its outputs: left out of ``COMMITTED``,
    so a late signal never names files that are gone."""
    mark = len(COMMITTED)
    try:
        yield
    finally:
        del COMMITTED[mark:]


def sweep(target: Path) -> None:
    """Remove what a killed run left beside ``target``: its temporary and backup files carry
    the writer's process id, and one whose process is gone is nobody's any more."""
    directory = target.parent if str(target.parent) else Path(".")
    prefix = f".{target.name}."
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        rest = name[len(prefix) :]
        pid, _, tail = rest.partition(".")
        if not pid.isascii() or not pid.isdigit() or not tail.endswith(("tmp", "bak")):
            continue
        if int(pid) == os.getpid() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(directory / name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def _backup(target: Path) -> str | None:
    """A hard link to the current ``target`` (None when there is none), to roll back to."""
    if not target.is_file():
        return None
    backup = f"{target.parent / ('.' + target.name)}.{os.getpid()}.bak"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(backup)
    try:
        os.link(target, backup)
    except OSError as err:
        if err.errno in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP):
            return None  # no hard links here: the rename is still atomic per file
        raise
    return backup


def _copy_mode(target: Path, tmp: str) -> None:
    """The new file keeps the old one's permissions, or gets the umask's defaults."""
    with contextlib.suppress(OSError):
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
