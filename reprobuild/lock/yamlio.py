"""Reading and writing ``tactics.lock`` through PyYAML (libyaml when it is built in).

Reading parses the text once, into a node tree (libyaml's composer): the tree gives
``file:line:column`` errors and reveals duplicate keys, and the lock is built from it,
the layers straight from the nodes when they are in the writer's shape (``nodes``),
anything else through plain data and ``validate``. Only safe tags are ever constructed.
Writing goes through PyYAML's emitter (see ``emit``); every write is atomic.
"""

from __future__ import annotations

import contextlib
import copy
import gc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from yaml import MappingNode, ScalarNode, SequenceNode

from reprobuild.errors import LockError
from reprobuild.limits import check_size
from reprobuild.lock.emit import WIDTH, lock_events, restyle
from reprobuild.lock.linereader import read_layers, split_layers
from reprobuild.lock.linewriter import layer_lines
from reprobuild.lock.model import DEFAULT_LOCK, Lock
from reprobuild.lock.nodes import MAP, SEQ, STR, layers_from_nodes
from reprobuild.lock.schema import Doc, find_duplicate_key
from reprobuild.lock.validate import FIX, lock_from_data
from reprobuild.transaction import Outputs

_Dumper: type = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_MERGE = "tag:yaml.org,2002:merge"
_MAX_DEPTH = 1000
_NO_LAYERS = "\nlayers: []\n"


class _QuickResolve:
    """Tag resolution and the composer's per-node hooks, made cheap: they cost more than
    libyaml's parsing. Tags are memoized (a lock repeats the same plain words thousands of
    times; safe loaders have no path resolvers, so a tag depends on the text alone).

    The hooks also bound the nesting depth: libyaml's composer recurses in C without
    Python's recursion limit, and ``[[[[...`` 100,000 deep would crash it. ``_open`` holds
    one entry per open level. Without explicit tags (no ``!`` anywhere) every collection
    passes through ``resolve``, which checks the depth, so the hooks can be C built-ins.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)  # type: ignore[call-arg]
        self._tags: dict[str, str] = {}
        self._open: dict[Any, Any] = {}
        if "!" not in stream:
            self.descend_resolver = self._open.__setitem__  # type: ignore[method-assign]
            self.ascend_resolver = self._open.popitem  # type: ignore[method-assign]

    def resolve(self, kind: Any, value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is not ScalarNode:
            self._check_depth()
            return MAP if kind is MappingNode else SEQ
        if not implicit[0]:
            return STR
        tag = self._tags.get(value)
        if tag is None:
            tag = self._tags[value] = super().resolve(kind, value, implicit)  # type: ignore[misc]
        return tag

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        self._open[current_node] = current_index
        self._check_depth()

    def ascend_resolver(self) -> None:
        self._open.popitem()

    def _check_depth(self) -> None:
        if len(self._open) > _MAX_DEPTH:
            raise RecursionError(f"nested more than {_MAX_DEPTH} levels deep")


class _PyLoader(_QuickResolve, yaml.SafeLoader):
    pass


class _CLoader(_QuickResolve, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


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
    lines = layer_lines(lock.layers) if lock.layers else None
    if lines is None:
        return _emit(lock)
    head = _emit(replace(lock, layers=[]))
    assert head.endswith(_NO_LAYERS), "the layers are the lock's last section"
    return head[: 1 - len(_NO_LAYERS)] + "layers:\n" + lines


def _emit(lock: Lock) -> str:
    events = lock_events(lock)
    options: dict[str, Any] = {"width": WIDTH, "allow_unicode": True}
    try:
        text = yaml.emit(events, Dumper=_Dumper, **options)
    except UnicodeEncodeError:  # a lone surrogate: libyaml takes only valid UTF-8
        text = yaml.emit(events, Dumper=yaml.SafeDumper, **options)
    return restyle(text)


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
    loader, root = _compose(text, filename)
    try:
        if root is None:
            raise LockError(f"{filename}: empty lockfile; {FIX}")
        return _canonical_lock(loader, root, filename) or _any_lock(loader, root, filename)
    finally:
        loader.dispose()


def _line_lock(text: str, filename: str) -> Lock | None:
    """The happy path for a canonical lock: YAML reads only the small head (up to the
    top-level ``layers:`` line, given ``layers: []`` in its place), ``linereader`` the
    layers. None, and the whole text goes the strict way, unless the head is accepted by
    ``_canonical_lock`` and ends exactly where that line starts (then the head's YAML
    structure is closed there, and the layer lines mean what they mean alone)."""
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
    head = text[:start] + "layers: []\n"
    try:
        loader, root = _compose(head, filename)
    except LockError:
        return None
    try:
        if root.__class__ is not MappingNode or not root.value:
            return None
        key, value = root.value[-1]
        line = text.count("\n", 0, start)
        if key.value != "layers" or (key.start_mark.line, key.start_mark.column) != (line, 0):
            return None
        if value.__class__ is not SequenceNode or value.value or value.start_mark.line != line:
            return None
        lock = _canonical_lock(loader, root, filename)
    finally:
        loader.dispose()
    if lock is not None:
        lock.layers = layers
    return lock


def _compose(text: str, filename: str) -> tuple[Any, Any]:
    """The one parse: (loader, node tree). What libyaml refuses goes to the pure-Python
    parser before it is called an error: that one reads escapes libyaml does not (a lone
    surrogate, ``\\ud800``, which locks have always been able to hold), and its message
    is the one this error has always had."""
    for loader_class in (_CLoader, _PyLoader):
        loader = None
        try:
            loader = loader_class(text)
            root = loader.get_single_node()
            if "&" in text:  # no anchor, no alias: the common case costs one scan
                _refuse_aliases(root, filename)
            return loader, root
        except LockError:
            if loader is not None:
                loader.dispose()
            raise
        except (yaml.YAMLError, ValueError, TypeError, RecursionError) as err:
            if loader is not None:
                loader.dispose()
            if loader_class is _PyLoader:
                raise _yaml_error(err, filename) from None
    raise AssertionError("unreachable")


def _refuse_aliases(root: Any, filename: str) -> None:
    """A lock never needs YAML anchors and aliases; refuse any node reached twice.

    Aliases make a DAG of the node tree: a few hundred bytes of nested ones expand to
    billions of values for anything that walks it (validation, duplicate-key search). The
    walk here visits each distinct node once, so it is linear in the text.
    """
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            m = node.start_mark
            raise LockError(
                f"{filename}:{m.line + 1}:{m.column + 1}: YAML anchors and aliases (&name, "
                "*name) are not allowed in a lockfile; write the values out, or re-record it"
            )
        seen.add(id(node))
        if node.__class__ is ScalarNode:
            continue
        if node.__class__ is MappingNode:
            for k, v in node.value:
                stack.append(k)
                stack.append(v)
        else:
            stack.extend(node.value)


def _yaml_error(err: Exception, filename: str) -> LockError:
    if not isinstance(err, yaml.YAMLError):  # e.g. NUL bytes in the stream
        return LockError(f"{filename}: unreadable YAML ({err}); {FIX}")
    mark = getattr(err, "problem_mark", None)
    where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return LockError(f"{where}: invalid YAML ({problem}); fix the syntax there")


def _canonical_lock(loader: Any, root: Any, filename: str) -> Lock | None:
    """The fast path for a lock in the shape the writer produces: the small head goes
    through the general validation, the layers through ``layers_from_nodes``. None when
    anything is off, so that every error comes from ``_any_lock``."""
    if root.__class__ is not MappingNode or root.tag != MAP:
        return None
    head: dict[str, Any] = {}
    layers = None
    builder = _Builder(loader)
    try:
        for k, v in root.value:
            if k.__class__ is not ScalarNode or k.tag != STR or k.value in head:
                return None
            if k.value == "layers":
                layers = layers_from_nodes(v)
                head["layers"] = []
            elif find_duplicate_key(v) is None:
                head[k.value] = builder.build(v)
            else:
                return None
        if layers is None:
            return None
        lock = lock_from_data(Doc(filename, root, FIX), head)
    except (_Unusual, LockError, yaml.YAMLError, ValueError, TypeError, RecursionError):
        return None
    lock.layers = layers
    return lock


def _any_lock(loader: Any, root: Any, filename: str) -> Lock:
    """Any YAML: plain data exactly as ``yaml.safe_load`` makes it (same constructor, same
    messages), then validation. Errors in this order: tags that cannot be constructed,
    duplicate keys, empty, the schema."""
    dup = find_duplicate_key(root)
    # Resolving merge keys rewrites the tree in place; positions come from the text as written.
    positions = copy.deepcopy(root) if _has_merge_key(root) else root
    # What the fast path constructed (or failed to) must not change what this one reports.
    loader.constructed_objects, loader.recursive_objects = {}, {}
    loader.state_generators, loader.deep_construct = [], False
    try:
        raw = loader.construct_document(root)
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as err:
        raise _yaml_error(err, filename) from None
    if dup is not None:
        node, name = dup
        m = node.start_mark
        raise LockError(
            f"{filename}:{m.line + 1}:{m.column + 1}: duplicate key {name!r}; keep only one"
        )
    if raw is None:
        raise LockError(f"{filename}: empty lockfile; {FIX}")
    return lock_from_data(Doc(filename, positions, FIX), raw)


def _has_merge_key(root: Any) -> bool:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.__class__ is MappingNode:
            for k, v in node.value:
                if k.tag == _MERGE:
                    return True
                stack.append(v)
        elif node.__class__ is SequenceNode:
            stack.extend(node.value)
    return False


class _Unusual(Exception):
    """A collection only PyYAML's constructor can build: not the writer's shape."""


class _Builder:
    """Plain data for the fast path, as ``yaml.safe_load`` would make it.

    Strings, lists and mappings are built here directly, other scalars by PyYAML's safe
    constructor. A collection with an explicit tag or a merge key is not the writer's
    shape: it ends the fast path (PyYAML's constructor would rewrite merge keys in place
    in the tree the general path reads next).
    """

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.done: dict[int, Any] = {}  # aliases share nodes: build each collection once

    def build(self, node: Any) -> Any:
        if node.__class__ is ScalarNode:
            return node.value if node.tag == STR else self.loader.construct_object(node, True)
        got = self.done.get(id(node))
        if got is not None:
            return got
        if node.__class__ is SequenceNode and node.tag == SEQ:
            items: list[Any] = []
            self.done[id(node)] = items
            items.extend(self.build(v) for v in node.value)
            return items
        if node.__class__ is MappingNode and node.tag == MAP:
            if not any(k.tag == _MERGE for k, _ in node.value):
                return self._mapping(node)
        raise _Unusual

    def _mapping(self, node: Any) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        self.done[id(node)] = out
        for key_node, value_node in node.value:
            key = self.build(key_node)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    "found unhashable key",
                    key_node.start_mark,
                ) from None
            out[key] = self.build(value_node)
        return out
