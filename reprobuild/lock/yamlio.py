"""Reading and writing ``tactics.lock``: the public entry points.

A lock in the writer's canonical shape is read line by line (``headreader`` for the
head, ``linereader`` for the layers) without PyYAML; anything else, and every error with
its ``file:line:column``, goes through PyYAML (``yamlparse``). Writing goes through
PyYAML's emitter (see ``emit``) with the layers formatted by ``linewriter``; every write is
atomic.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from reprobuild.errors import LockError
from reprobuild.limits import check_size
from reprobuild.lock.headreader import read_head
from reprobuild.lock.linereader import read_layers, split_layers
from reprobuild.lock.model import DEFAULT_LOCK, Lock
from reprobuild.lock.schema import Doc
from reprobuild.lock.validate import FIX, lock_from_data
from reprobuild.transaction import Outputs

_NO_LAYERS = "\nlayers: []\n"


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """A lock is hundreds of thousands of small acyclic objects; the cyclic collector
    rescanning them as they are made costs more than the parse itself. Whatever is
    still alive when it is enabled again gets walked once, so callers free the bulk
    (node trees, event lists) inside."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ---------------------------------------------------------------------------- writing


def dumps_lock(lock: Lock) -> str:
    """Serialize canonically (sorts ``lock`` in place first)."""
    lock.canonicalize()
    with _gc_paused():
        return _dumps(lock)


def _dumps(lock: Lock) -> str:
    """Apart from ``dumps_lock`` so the events are freed before the collector runs again.

    The layers are formatted by ``linewriter`` when it can (the emitter then writes only
    the head, ending in ``layers: []``), otherwise the emitter writes everything."""
    from reprobuild.lock.linewriter import layer_lines
    from reprobuild.lock.yamlparse import emit_lock

    lines = layer_lines(lock.layers) if lock.layers else None
    if lines is None:
        return emit_lock(lock)
    head = emit_lock(replace(lock, layers=[]))
    assert head.endswith(_NO_LAYERS), "the layers are the lock's last section"
    return head[: 1 - len(_NO_LAYERS)] + "layers:\n" + lines


def save_lock(lock: Lock, path: str | Path) -> None:
    """Write atomically: a failure leaves the previous lock byte-for-byte intact (and is a
    one-line ``UsageError``, e.g. a full disk)."""
    with Outputs() as out:
        out.stage_text(path, dumps_lock(lock), "lock")
        out.commit()


# ---------------------------------------------------------------------------- reading


def load_lock(path: str | Path) -> Lock:
    p = Path(path)
    try:
        check_size(p, p.stat().st_size, "lock")
        data = p.read_bytes()
    except FileNotFoundError:
        raise LockError(
            f"{p}: no such lockfile; record one with `reprobuild build MODEL --lock {p}`"
        ) from None
    except IsADirectoryError:
        raise LockError(f"{p}: is a directory, not a lockfile; give the lock's file path") from None
    except OSError as err:
        raise LockError(f"{p}: cannot read the lockfile ({err.strerror}); check the path") from None
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
    with _gc_paused():
        return _loads(text, filename)


def _loads(text: str, filename: str) -> Lock:
    """Apart from ``loads_lock`` so the node tree is freed before the collector runs again
    (otherwise its first pass walks all of it)."""
    lock = _line_lock(text, filename)
    if lock is not None:
        return lock
    from reprobuild.lock.yamlparse import strict_lock

    return strict_lock(text, filename)


def _line_lock(text: str, filename: str) -> Lock | None:
    """The happy path for a canonical lock: ``linereader`` reads the layers, and the small
    head (up to the top-level ``layers:`` line) is read by ``headreader`` or, when it
    declines, by YAML given ``layers: []`` in that line's place. None, and the whole text
    goes the strict way, unless the head is accepted and ends exactly where that line
    starts (then the head's structure is closed there, and the layer lines mean what they
    mean alone)."""
    split = split_layers(text)
    if split is None:
        return None
    start, end, empty = split
    if empty:
        layers = [] if end == len(text) else None
    else:
        layers = read_layers(text, end)
    if layers is None:
        return None
    lock = _head_lock(text[:start], filename)
    if lock is None:
        from reprobuild.lock.yamlparse import head_lock

        lock = head_lock(text[:start] + "layers: []\n", text.count("\n", 0, start), filename)
    if lock is not None:
        lock.layers = layers
    return lock


def _head_lock(head: str, filename: str) -> Lock | None:
    """The head read without YAML; None when ``headreader`` declines it or validation
    refuses it (the strict path then says where)."""
    data = read_head(head)
    if data is None or "layers" in data:
        return None
    data["layers"] = []
    try:
        return lock_from_data(Doc(filename, None, FIX), data)
    except (LockError, ValueError, TypeError, RecursionError):
        return None
