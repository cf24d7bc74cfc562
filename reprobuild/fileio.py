"""Crash-safe file writing and cross-process locking.

A lockfile is reviewed and committed: a half-written one is worse than none. Every write
goes to a temporary file in the same directory, is fsynced, then ``os.replace``d over the
target, so readers see the old bytes or the new bytes, never a mix.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


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


@contextlib.contextmanager
def exclusive(path: str | os.PathLike[str], timeout: float = 60.0) -> Iterator[None]:
    """Hold an inter-process lock for read-modify-write of ``path``.

    The lock lives in a sidecar ``<path>.lck`` file so the real file can still be replaced
    atomically while it is held.
    """
    from filelock import FileLock, Timeout

    from reprobuild.errors import UsageError

    lock_path = f"{os.fspath(path)}.lck"
    try:
        with FileLock(lock_path, timeout=timeout):
            yield
    except Timeout as err:
        raise UsageError(
            f"{path}: another reprobuild process holds {lock_path} for over {timeout:.0f}s; "
            "wait for it, or delete the .lck file if no process is running"
        ) from err


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (models and caches can be gigabytes)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_regular(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, opened once and checked
    with ``fstat`` before any read: a device, a FIFO or a link to either would pass a size
    check (``st_size`` is 0) and then never end."""
    import stat

    from reprobuild.errors import UsageError

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {what}; check the path") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read the {what} ({err.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a folder
        os.close(fd)
        raise UsageError(f"{path}: not a regular file; give the {what} file itself")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UsageError(f"{path}: larger than {limit >> 20} MiB; is this the {what}?")
    return data
