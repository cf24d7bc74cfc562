"""PyYAML's side of a lock: the one reader and the emitter.

Reading parses the text once, into a node tree (libyaml's parser and composer where
PyYAML is built with it, the pure-Python ones otherwise): the tree gives
``file:line:column`` errors and reveals duplicate keys, and the lock is built from it,
the layers straight from the nodes when they are in the writer's shape (``nodes``),
anything else through plain data and ``validate``. Only safe tags are ever constructed.
Writing sends the lock's events (``emit``) to libyaml's emitter where it is built.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from yaml import MappingNode, ScalarNode, SequenceNode

from reprobuild.errors import LockError
from reprobuild.lock.emit import WIDTH, lock_events, restyle
from reprobuild.lock.model import LayerEntry, Lock
from reprobuild.lock.nodes import MAP, SEQ, STR, layers_from_nodes
from reprobuild.lock.schema import Doc, find_duplicate_key
from reprobuild.lock.validate import FIX, lock_from_data

_Dumper: type = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_MERGE = "tag:yaml.org,2002:merge"
_MAX_DEPTH = 1000


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


class PyLoader(_QuickResolve, yaml.SafeLoader):
    pass


class CLoader(_QuickResolve, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


def emit_lock(lock: Lock) -> str:
    events = lock_events(lock)
    options: dict[str, Any] = {"width": WIDTH, "allow_unicode": True}
    try:
        text = yaml.emit(events, Dumper=_Dumper, **options)
    except UnicodeEncodeError:  # a lone surrogate: libyaml takes only valid UTF-8
        text = yaml.emit(events, Dumper=yaml.SafeDumper, **options)
    return restyle(text)


def strict_lock(text: str, filename: str) -> Lock:
    """Any text: the canonical shape fast, anything else as ``yaml.safe_load`` reads it."""
    loader, root = compose(text, filename)
    try:
        if root is None:
            raise LockError(f"{filename}: empty lockfile; {FIX}")
        return canonical_lock(loader, root, filename) or any_lock(loader, root, filename)
    finally:
        loader.dispose()


def compose(text: str, filename: str) -> tuple[Any, Any]:
    """The one parse: (loader, node tree). What libyaml refuses goes to the pure-Python
    parser before it is called an error: that one reads escapes libyaml does not (a lone
    surrogate, ``\\ud800``, which locks have always been able to hold), and its message
    is the one this error has always had."""
    for loader_class in (CLoader, PyLoader):
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
            if loader_class is PyLoader:
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


def canonical_lock(loader: Any, root: Any, filename: str) -> Lock | None:
    """The fast path for a lock in the shape the writer produces: the small head goes
    through the general validation, the layers through ``layers_from_nodes``. None when
    anything is off, so that every error comes from ``any_lock``."""
    if root.__class__ is not MappingNode or root.tag != MAP:
        return None
    head: dict[str, Any] = {}
    layers: list[list[LayerEntry] | None] = []
    builder = _Builder(loader)
    try:
        for k, v in root.value:
            if k.__class__ is not ScalarNode or k.tag != STR or k.value in head:
                return None
            if k.value == "layers":  # schema 1
                layers.append(layers_from_nodes(v))
                head["layers"] = []
            elif k.value == "targets" and v.__class__ is SequenceNode and v.tag == SEQ:
                head["targets"] = [_target_head(builder, t, layers) for t in v.value]
            elif find_duplicate_key(v) is None:
                head[k.value] = builder.build(v)
            else:
                return None
        if not layers or any(lay is None for lay in layers):
            return None
        lock = lock_from_data(Doc(filename, root, FIX), head)
    except (_Unusual, LockError, yaml.YAMLError, ValueError, TypeError, RecursionError):
        return None
    sections = [lock.active(), *lock.others]
    if len(sections) != len(layers):
        return None
    for section, entries in zip(sections, layers, strict=True):
        section.layers[:] = entries  # the view's list is the active section's list
    return lock


def _target_head(builder: Any, node: Any, layers: list[list[LayerEntry] | None]) -> Any:
    """One target's mapping with its layers read by the fast walk (collected in order)."""
    if node.__class__ is not MappingNode or node.tag != MAP:
        raise _Unusual
    out: dict[str, Any] = {}
    for k, v in node.value:
        if k.__class__ is not ScalarNode or k.tag != STR or k.value in out:
            raise _Unusual
        if k.value == "layers":
            layers.append(layers_from_nodes(v))
            out["layers"] = []
        elif find_duplicate_key(v) is None:
            out[k.value] = builder.build(v)
        else:
            raise _Unusual
    return out


def any_lock(loader: Any, root: Any, filename: str) -> Lock:
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
