"""PyYAML's side of a lock: the one reader and the emitter.

Reading uses libyaml's parser where PyYAML is built with it, the pure-Python one
otherwise. A lock in the writer's shape is built straight from the parse events
(``eventread``); anything else is composed into a node tree, which gives
``file:line:column`` errors and reveals duplicate keys, and read through plain data (as
``yaml.safe_load`` makes it) and ``validate``. Only safe tags are ever constructed.
Writing sends the lock's events (``emit``) to libyaml's emitter where it is built.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from yaml import MappingNode, ScalarNode, SequenceNode

from reprobuild.errors import LockError
from reprobuild.limits import memory_limit
from reprobuild.lock.emit import emit_events, layers_marker, layers_text, lock_events, restyle
from reprobuild.lock.eventread import STR, read_lock
from reprobuild.lock.model import Lock
from reprobuild.lock.schema import Doc, find_duplicate_key
from reprobuild.lock.textread import split_layers
from reprobuild.lock.validate import FIX, lock_from_data

MAP = "tag:yaml.org,2002:map"
SEQ = "tag:yaml.org,2002:seq"
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
    """The lock's canonical text: the head emitted, each target's layers as text."""
    text = restyle(emit_events(lock_events(lock)))
    for i, target in enumerate(lock.targets()):
        block = layers_text(target.layers)
        layers = f"    layers:\n{block}\n" if block else "    layers: []\n"
        text = text.replace(f"    layers: {layers_marker(i)}\n", layers, 1)
    return text


def strict_lock(text: str, filename: str) -> Lock:
    """Any text: a lock in the writer's shape straight from the parse events
    (``eventread``), anything else composed and read as ``yaml.safe_load`` reads it."""
    lock = _events_lock(text, filename)
    if lock is not None:
        return lock
    _check_compose_memory(text, filename)
    loader, root = compose(text, filename)
    try:
        if root is None:
            raise LockError(f"{filename}: empty lockfile; {FIX}")
        return any_lock(loader, root, filename)
    finally:
        loader.dispose()


COMPOSE_BYTES_PER_CHAR = 48
"""Memory a composed lock takes per character of text: a node with two marks per scalar,
then the plain data, then the lock (measured: a 10.6 MB lock in flow style, keys sorted,
with one explicit tag, peaked at 512 MB, about 45x). The writer's form never gets here:
``eventread`` reads it from the parse events, at a few times its size."""


def _check_compose_memory(text: str, filename: str) -> None:
    """Refuse, before composing, a lock not in the writer's form whose node tree would not
    fit the memory a command may use."""
    limit, why = memory_limit()
    need = COMPOSE_BYTES_PER_CHAR * len(text)
    if limit is not None and need > limit:
        raise LockError(
            f"{filename}: this lock is not in the form reprobuild writes, and reading it that "
            f"way needs about {need / (1 << 30):,.2f} GiB, over the {limit / (1 << 30):,.2f} "
            f"GiB limit ({why}); re-record it with `reprobuild build` (which writes the "
            "compact form), or raise the limit with REPROBUILD_MAX_MEMORY_BYTES"
        )


def _events_lock(text: str, filename: str) -> Lock | None:
    """``eventread``'s lock, or None when it declines. As in ``compose``, what libyaml
    refuses goes to the pure-Python parser, and what that one refuses too is the error:
    composing would stop at the same event with the same error (the composer's own errors,
    at aliases and deep nesting, come after events at which the reader has declined)."""
    split = split_layers(text)
    if split is not None:  # the layers read from the writer's text, the head from events
        head, blocks = split
        loader = CLoader(head)
        try:
            lock = read_lock(loader, filename, blocks)
        except (yaml.YAMLError, ValueError, TypeError, RecursionError):
            lock = None  # the whole text, below, says what is wrong
        finally:
            loader.dispose()
        if lock is not None:
            return lock
    for loader_class in (CLoader, PyLoader):
        loader = None
        try:
            loader = loader_class(text)
            return read_lock(loader, filename)
        except (yaml.YAMLError, ValueError, TypeError, RecursionError) as err:
            if loader_class is PyLoader:
                raise _yaml_error(err, filename) from None
        finally:
            if loader is not None:
                loader.dispose()
    raise AssertionError("unreachable")


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


def any_lock(loader: Any, root: Any, filename: str) -> Lock:
    """Any YAML: plain data exactly as ``yaml.safe_load`` makes it (same constructor, same
    messages), then validation. Errors in this order: tags that cannot be constructed,
    duplicate keys, empty, the schema."""
    dup = find_duplicate_key(root)
    # Resolving merge keys rewrites the tree in place; positions come from the text as written.
    positions = copy.deepcopy(root) if _has_merge_key(root) else root
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
