"""Reading and writing ``tactics.lock``: the public entry points.

Every lock is read by PyYAML (libyaml's parser where it is built, see ``yamlparse``), which
gives every error its ``file:line:column``; writing goes through PyYAML's emitter (see
``emit``); every write is atomic.
"""

from __future__ import annotations

from pathlib import Path

from reprobuild.errors import LockError
from reprobuild.fileio import read_input
from reprobuild.gcpause import paused_gc
from reprobuild.lock.model import DEFAULT_LOCK, Lock
from reprobuild.lock.yamlparse import emit_lock, strict_lock
from reprobuild.transaction import Outputs

# ---------------------------------------------------------------------------- writing


def dumps_lock(lock: Lock) -> str:
    """Serialize canonically (sorts ``lock`` in place first)."""
    lock.canonicalize()
    with paused_gc():
        return emit_lock(lock)


def save_lock(lock: Lock, path: str | Path) -> None:
    """Write atomically: a failure leaves the previous lock byte-for-byte intact (and is a
    one-line ``UsageError``, e.g. a full disk)."""
    with Outputs() as out:
        out.stage_lock(path, dumps_lock(lock))
        out.commit()


# ---------------------------------------------------------------------------- reading


def load_lock(path: str | Path) -> Lock:
    p = Path(path)
    data = read_input(
        p,
        "lock",
        "lockfile",
        error=LockError,
        missing=f"no such lockfile; record one with `reprobuild build MODEL --lock {p}`",
    )
    return loads_lock(data, str(p))


def loads_lock(data: bytes | str, filename: str = DEFAULT_LOCK) -> Lock:
    """Parse and validate; raises ``LockError`` (never anything else) on bad input."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise LockError(
                f"{filename}: not UTF-8 text (byte {err.start}); restore it from version "
                "control or re-record it with `reprobuild build`"
            ) from None
    else:
        text = data
    with paused_gc():
        return strict_lock(text, filename)
