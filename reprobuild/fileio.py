"""Crash-safe file writing and cross-process locking.

A lockfile is reviewed and committed: a half-written one is worse than none. Every write
goes to a temporary file in the same directory, is fsynced, then ``os.replace``d over the
target, so readers see the old bytes or the new bytes, never a mix.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def user_cache() -> Path:
    """``$XDG_CACHE_HOME/reprobuild`` (``~/.cache/reprobuild``): where reprobuild keeps what
    outlives a command (probe answers and bundles, saved tracebacks), never the current
    folder."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "reprobuild"


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically; on any failure the old file is untouched."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if target.exists():
            with contextlib.suppress(OSError):
                os.chmod(tmp, target.stat().st_mode & 0o777)
        else:
            with contextlib.suppress(OSError):
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


_LOCAL = threading.local()
"""Per thread, the sidecar paths held, with a count: a nested ``exclusive`` on the same lock
re-enters instead of waiting for itself (``flock`` is per open file, not per process)."""


def make_folders(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing parents; the ones created, outermost first.

    Why: a failed or interrupted command must leave no trace, and ``mkdir(parents=True)``
    does not say which levels it made; only those are removed on abort, never a folder
    that was there before."""
    missing: list[Path] = []
    here = directory
    while not here.exists() and not here.is_symlink() and here.parent != here:
        missing.append(here)
        here = here.parent
    made: list[Path] = []
    try:
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:  # made meanwhile by another process: not ours to remove
                continue
            made.append(folder)
    except BaseException:
        remove_folders(made)
        raise
    return made


def remove_folders(folders: list[Path]) -> None:
    """Remove the folders :func:`make_folders` made (outermost first), innermost first;
    one that holds something stays (``rmdir`` removes only empty folders)."""
    for folder in reversed(folders):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


@contextlib.contextmanager
def exclusive(path: str | os.PathLike[str], timeout: float = 60.0) -> Iterator[None]:
    """Hold an inter-process lock for read-modify-write of ``path``.

    The lock lives in a sidecar ``<path>.lck`` file so the real file can still be replaced
    atomically while it is held. The sidecar is removed when the lock is let go, so no
    ``.lck`` stays beside a lock: it is unlinked while still held, and a process that got
    the lock on a file that was meanwhile unlinked tries again (its inode no longer matches
    the path), so two writers never both hold it.
    """
    import fcntl
    import time

    from reprobuild.errors import UsageError

    lock_path = f"{os.fspath(write_target(path))}.lck"  # one sidecar per file, not per link
    key = os.path.abspath(lock_path)
    held: dict[str, int] = _LOCAL.__dict__.setdefault("held", {})
    if key in held:
        held[key] += 1
        try:
            yield
        finally:
            held[key] -= 1
        return
    deadline = time.monotonic() + timeout
    made: list[Path] = []  # a lock's new folder, made as outputs' are; removed if left empty
    while True:
        try:
            made += make_folders(Path(lock_path).parent)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as err:
            remove_folders(made)
            raise UsageError(
                f"{lock_path}: cannot create the lock's .lck file ({err.strerror or err}); "
                "remove whatever is at that path, or choose another lock path"
            ) from None
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise UsageError(
                            f"{path}: another reprobuild process holds {lock_path} for over "
                            f"{timeout:.0f}s; wait for it, or delete the .lck file if no "
                            "process is running"
                        ) from None
                    time.sleep(0.05)
            try:
                current = os.lstat(lock_path).st_ino
            except FileNotFoundError:
                current = None
            if current == os.fstat(fd).st_ino:
                break
        except BaseException:
            os.close(fd)
            remove_folders(made)
            raise
        os.close(fd)  # the file was removed by its last holder: lock the new one
    held[key] = 1
    try:
        yield
    finally:
        del held[key]
        with contextlib.suppress(OSError):
            os.unlink(lock_path)
        os.close(fd)
        remove_folders(made)


def write_target(path: str | os.PathLike[str]) -> Path:
    """The file that writing ``path`` changes: a symlink's final target, else ``path``.

    Why: a lock kept as a link (one lock shared by several folders of a repository) must
    stay a link, with its file updated, as uv and Cargo write through a linked lockfile;
    replacing the link with a file would silently fork the shared lock. A dangling link
    names the file to create; a loop of links is refused in one line.
    """
    from reprobuild.errors import UsageError

    p = Path(path)
    if not p.is_symlink():
        return p
    try:
        return Path(os.path.realpath(p, strict=True))
    except FileNotFoundError:
        return Path(os.path.realpath(p))
    except OSError as err:
        raise UsageError(
            f"{path}: is a symlink that cannot be followed ({err.strerror or err}); point it "
            "at the real file, or replace it with the file"
        ) from None


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (models and caches can be gigabytes)."""
    import hashlib

    digest = hashlib.sha256()
    with open_regular(path, "file") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def open_regular(
    path: str | os.PathLike[str],
    what: str,
    *,
    error: type[Exception] | None = None,
    missing: str | None = None,
) -> BinaryIO:
    """``path`` opened for reading, refused (``UsageError``) unless it is a regular file.

    Why: caps read ``st_size``, which is 0 for a device, a FIFO or a link to either, so
    ``/dev/zero`` would be read without end and a FIFO would block in ``open``. The file is
    opened without blocking, checked with ``fstat`` on that same descriptor (no race with a
    rename), and only then switched back to blocking reads. This is the one way reprobuild
    opens an input file; ``-`` (standard input) is handled by the commands that document it.
    ``error`` is the ``ReprobuildError`` class to raise, ``missing`` the words (after the
    path) for a file that does not exist.
    """
    import stat

    from reprobuild.errors import UsageError

    fail = error or UsageError
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise fail(f"{path}: {missing or f'no such {what}; check the path'}") from None
    except OSError as err:
        raise fail(f"{path}: cannot read the {what} ({err.strerror or err})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            if stat.S_ISDIR(mode):
                raise fail(f"{path}: is a directory, not a regular file; give the {what} itself")
            fifo = stat.S_ISFIFO(mode)
            hint = " (- reads standard input where a command accepts it)" if fifo else ""
            raise fail(
                f"{path}: is not a regular file (a device, pipe or socket); "
                f"give the {what} itself{hint}"
            )
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


READ_CHUNK = 1 << 20


def read_upto(fh: BinaryIO, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``fh``, read in chunks of ``READ_CHUNK``.

    Why chunks: ``fh.read(limit + 1)`` allocates the whole cap up front (gigabytes for a
    model or an inputs file), so under an address-space limit a 24 KB file failed with
    MemoryError; memory now follows the file's real size.
    """
    parts: list[bytes] = []
    left = limit + 1
    while left > 0:
        part = fh.read(min(READ_CHUNK, left))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def read_capped(fh: BinaryIO, limit: int, path: str | os.PathLike[str], kind: str) -> bytes:
    """At most ``limit`` bytes of ``fh``; one byte more is refused with the cap's override,
    so nothing is read past the cap whatever ``st_size`` said."""
    from reprobuild.errors import UsageError

    data = read_upto(fh, limit)
    if len(data) > limit:
        raise UsageError(
            f"{path}: over the {limit:,}-byte limit for a {kind} file; check that this is the "
            f"right file (REPROBUILD_MAX_{kind.upper()}_BYTES raises it)"
        )
    return data


def read_input(
    path: str | os.PathLike[str],
    kind: str,
    what: str,
    *,
    error: type[Exception] | None = None,
    missing: str | None = None,
) -> bytes:
    """The bytes of the regular file ``path``, a ``kind`` input (see ``limits.CAPS``)."""
    from reprobuild.limits import cap, check_size

    with open_regular(path, what, error=error, missing=missing) as fh:
        check_size(path, os.fstat(fh.fileno()).st_size, kind)
        return read_capped(fh, cap(kind), path, kind)


def check_regular(path: str | os.PathLike[str], what: str, **kwargs: object) -> int:
    """Refuse ``path`` unless it is a regular file, for inputs a library opens by name;
    returns its size."""
    with open_regular(path, what, **kwargs) as fh:  # type: ignore[arg-type]
        return os.fstat(fh.fileno()).st_size


def read_regular(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (see ``open_regular``)."""
    from reprobuild.errors import UsageError

    with open_regular(path, what) as fh:
        data = read_upto(fh, limit)
    if len(data) > limit:
        raise UsageError(f"{path}: larger than {limit >> 20} MiB; is this the {what}?")
    return data
