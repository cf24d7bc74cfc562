"""A lock built straight from PyYAML's parse events, when it is in the writer's shape.

Why: a 10,000-layer lock is half a million events. Composing them into a node tree (an
object and a tag resolution per scalar) and then walking the tree cost about twice what
reading the events as they come does; and the generic constructor, making plain data of
it all before validation, costs several times more. So the layers' entries are built here
from the events directly, and the small head (everything else) becomes plain data for
``validate``, each scalar resolved and constructed as ``yaml.safe_load`` does it.

This reader never decides what is an error: anything outside the writer's shape (an
anchor, an alias, an explicit tag, a merge key, a repeated key, a layer field of another
type or name, a second document, nesting deeper than a lock's) makes it decline with
None, and ``yamlparse`` composes the text and reports with ``file:line:column``. The order
of fields and the style of scalars and collections are free: a lock written by
``yaml.safe_dump`` reads here too. Errors of the parser itself propagate (the caller
decides). ``tests/lock/test_yamlio.py`` holds this reader to the composing path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from yaml import (
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    ScalarNode,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
    YAMLError,
)
from yaml.constructor import SafeConstructor

from reprobuild.errors import LockError
from reprobuild.lock.emit import layers_marker
from reprobuild.lock.model import LayerEntry, Lock, LockCandidate
from reprobuild.lock.schema import KEY_RE, Doc
from reprobuild.lock.textread import tactic_value, time_value
from reprobuild.lock.validate import FIX, lock_from_data

STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_MERGE = "tag:yaml.org,2002:merge"
# Every layer field name is one no YAML 1.1 resolver matches: plain or quoted, it is a str.
_ENTRY_FIELDS = frozenset(
    ("layer", "key", "tactic", "time", "runs", "kernel", "pinned", "candidates", "band", "ties")
)
_TIMED_ONLY = frozenset(("time", "runs", "band", "ties"))  # schema 2 fields
_MAX_DEPTH = 32  # a lock's head nests four levels; deeper is for the composing path
_MISSING: Any = object()


class _Decline(Exception):
    """Not in the writer's shape: the composing path reads the text."""


def read_lock(
    loader: Any, filename: str, blocks: list[list[LayerEntry]] | None = None
) -> Lock | None:
    """The lock of the text ``loader`` (a PyYAML safe loader, C or pure) parses, or None;
    the loader's parse errors propagate. ``blocks``: the targets' layers already read from
    the writer's text (:mod:`.textread`), each standing in the text as the writer's marker
    word (:func:`.emit.layers_marker`)."""
    try:
        return _Reader(loader, blocks or []).document(filename)
    except _Decline:
        return None


class _Reader:
    def __init__(self, loader: Any, blocks: list[list[LayerEntry]]) -> None:
        self.loader = loader
        self.next: Callable[[], Any] = loader.get_event  # None once the stream has ended
        self.plain: dict[str, Any] = {}  # a plain scalar's text -> its value
        self.blocks = blocks
        self.used = 0  # blocks taken at their target's layers: all of them, or decline

    def document(self, filename: str) -> Lock:
        nxt = self.next
        if nxt().__class__ is not StreamStartEvent or nxt().__class__ is not DocumentStartEvent:
            raise _Decline  # an empty stream
        _collection(nxt(), MappingStartEvent)
        head: dict[str, Any] = {}
        layers: list[list[LayerEntry]] = []  # per target, in the order they are written
        while (key := nxt()).__class__ is not MappingEndEvent:
            name = self.scalar(key)
            if name.__class__ is not str or name in head:
                raise _Decline
            if name == "layers":  # schema 1: one target, no recorded times
                layers.append(self.layers(timed=False))
                head[name] = []
            elif name == "targets":
                head[name] = self.targets(layers)
            else:
                head[name] = self.value(nxt(), 1)
        if not layers or self.used != len(self.blocks):
            raise _Decline
        if nxt().__class__ is not DocumentEndEvent or nxt().__class__ is not StreamEndEvent:
            raise _Decline  # a second document: the composer's error
        try:
            lock = lock_from_data(Doc(filename, None, FIX), head)
        except (LockError, ValueError, TypeError, RecursionError):
            raise _Decline from None
        sections = [lock.active(), *lock.others]
        if len(sections) != len(layers):
            raise _Decline
        for section, entries in zip(sections, layers, strict=True):
            section.layers[:] = entries  # the active view shares its section's list
        return lock

    def targets(self, layers: list[list[LayerEntry]]) -> list[dict[str, Any]]:
        """The targets' heads as plain data; each one's layers read entry by entry."""
        nxt = self.next
        _collection(nxt(), SequenceStartEvent)
        out: list[dict[str, Any]] = []
        while (ev := nxt()).__class__ is not SequenceEndEvent:
            _collection(ev, MappingStartEvent)
            target: dict[str, Any] = {}
            while (key := nxt()).__class__ is not MappingEndEvent:
                name = self.scalar(key)
                if name.__class__ is not str or name in target:
                    raise _Decline
                if name == "layers":
                    layers.append(self.layers(timed=True, index=len(layers)))
                    target[name] = []
                else:
                    target[name] = self.value(nxt(), 3)
            if "layers" not in target:
                raise _Decline
            out.append(target)
        return out

    # ------------------------------------------------------------------ any data (the head)

    def scalar(self, ev: Any) -> Any:
        """As ``yaml.safe_load`` constructs it: quoted is a string, plain is resolved."""
        if ev.__class__ is not ScalarEvent or ev.anchor is not None or ev.tag is not None:
            raise _Decline
        if not ev.implicit[0]:
            return ev.value
        value = self.plain.get(ev.value, _MISSING)
        if value is _MISSING:
            value = self.plain[ev.value] = self._construct(ev.value)
        return value

    def _construct(self, text: str) -> Any:
        tag = self.loader.resolve(ScalarNode, text, (True, False))
        if tag == STR:
            return text
        if tag == _NULL:
            return None
        if tag == _BOOL:
            return SafeConstructor.bool_values[text.lower()]
        if tag == _MERGE:
            raise _Decline
        try:  # ints, floats, timestamps: PyYAML's own constructors
            return self.loader.construct_object(ScalarNode(tag, text), True)
        except (YAMLError, ValueError, TypeError, OverflowError):
            raise _Decline from None

    def value(self, ev: Any, depth: int) -> Any:
        nxt = self.next
        if ev.__class__ is ScalarEvent:
            return self.scalar(ev)
        if depth > _MAX_DEPTH:
            raise _Decline
        if ev.__class__ is SequenceStartEvent:
            _collection(ev, SequenceStartEvent)
            items = []
            while (item := nxt()).__class__ is not SequenceEndEvent:
                items.append(self.value(item, depth + 1))
            return items
        _collection(ev, MappingStartEvent)
        out: dict[Any, Any] = {}
        texts: set[str] = set()  # a repeated key is one by its text (schema.find_duplicate_key)
        while (key := nxt()).__class__ is not MappingEndEvent:
            k = self.scalar(key)  # a collection as a key declines here
            if key.value in texts:
                raise _Decline
            texts.add(key.value)
            out[k] = self.value(nxt(), depth + 1)
        return out

    # ------------------------------------------------------------- the layers, entry by entry

    def layers(self, *, timed: bool, index: int | None = None) -> list[LayerEntry]:
        """The entries; the same checks and results as ``validate`` gives the same data.
        Target ``index``'s marker word stands for its block already read from the text."""
        nxt = self.next
        ev = nxt()
        if index is not None and index < len(self.blocks) and ev.__class__ is ScalarEvent:
            if ev.value != layers_marker(index) or not ev.implicit[0] or ev.tag is not None:
                raise _Decline
            self.used += 1
            return self.blocks[index]
        _collection(ev, SequenceStartEvent)
        entries: list[LayerEntry] = []
        seen: set[str] = set()
        while (ev := nxt()).__class__ is not SequenceEndEvent:
            _collection(ev, MappingStartEvent)
            f: dict[str, Any] = {}
            while (k := nxt()).__class__ is not MappingEndEvent:
                if k.__class__ is not ScalarEvent or k.anchor is not None or k.tag is not None:
                    raise _Decline
                name = k.value
                if name not in _ENTRY_FIELDS or name in f or (name in _TIMED_ONLY and not timed):
                    raise _Decline
                v = nxt()
                if name == "candidates":
                    f[name] = self.candidates(v)
                elif name == "ties":
                    f[name] = self.ties(v)
                elif v.__class__ is ScalarEvent:
                    f[name] = v  # read below, in the order of LayerEntry's fields
                else:
                    raise _Decline
            if "layer" not in f or "key" not in f or "tactic" not in f:
                raise _Decline
            key = self.text(f["key"])
            if KEY_RE.fullmatch(key) is None:
                raise _Decline
            key = "0x" + key[2:].lower()
            if key in seen:
                raise _Decline
            seen.add(key)
            pinned = f.get("pinned")
            time = f.get("time")
            entries.append(
                LayerEntry(
                    key,
                    self.text(f["layer"]),
                    self.tactic(f["tactic"]),
                    self.opt_text(f.get("kernel")),
                    False if pinned is None else self.boolean(pinned),
                    f.get("candidates") or [],
                    None if time is None else self.time(time),
                    None if f.get("band") is None else self.time(f["band"]),
                    f.get("ties") or [],
                    None if f.get("runs") is None else self.boolean(f["runs"]),
                )
            )
        return entries

    def ties(self, ev: Any) -> list[int]:
        """A near-tie's tactics: a sequence of hex scalars."""
        _collection(ev, SequenceStartEvent)
        out: list[int] = []
        while (t := self.next()).__class__ is not SequenceEndEvent:
            if t.__class__ is not ScalarEvent:
                raise _Decline
            out.append(self.tactic(t))
        return out

    def time(self, ev: Any) -> float:
        """A recorded time as the writer writes it: ``float.hex`` text, or ``inf``."""
        value = time_value(self.text(ev))
        if value is None:
            raise _Decline
        return value

    def candidates(self, ev: Any) -> list[LockCandidate]:
        if ev.__class__ is ScalarEvent:
            if self.scalar(ev) is None:
                return []  # "candidates: null" (or nothing) is no candidates
            raise _Decline
        nxt = self.next
        _collection(ev, SequenceStartEvent)
        out: list[LockCandidate] = []
        while (c := nxt()).__class__ is not SequenceEndEvent:
            _collection(c, MappingStartEvent)
            tactic = kernel = _MISSING
            while (k := nxt()).__class__ is not MappingEndEvent:
                if k.__class__ is not ScalarEvent or k.anchor is not None or k.tag is not None:
                    raise _Decline
                if k.value == "tactic" and tactic is _MISSING:
                    tactic = self.tactic(nxt())
                elif k.value == "kernel" and kernel is _MISSING:
                    kernel = self.opt_text(nxt())
                else:
                    raise _Decline
            if tactic is _MISSING:
                raise _Decline
            out.append(LockCandidate(tactic, None if kernel is _MISSING else kernel))
        return out

    def text(self, ev: Any) -> str:
        value = self.scalar(ev)
        if value.__class__ is not str:
            raise _Decline
        return value

    def opt_text(self, ev: Any) -> str | None:
        if ev is None:
            return None
        value = self.scalar(ev)
        if value is not None and value.__class__ is not str:
            raise _Decline
        return value

    def tactic(self, ev: Any) -> int:
        value = tactic_value(self.text(ev))
        if value is None:
            raise _Decline
        return value

    def boolean(self, ev: Any) -> bool:
        value = self.scalar(ev)
        if value.__class__ is not bool:
            raise _Decline
        return value


def _collection(ev: Any, kind: type) -> None:
    """``ev`` opens a collection of ``kind`` with no anchor and no explicit tag."""
    if ev.__class__ is not kind or ev.anchor is not None or ev.tag is not None:
        raise _Decline
