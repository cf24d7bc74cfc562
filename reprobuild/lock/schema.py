"""Strict validation of YAML documents with errors that point at the line and column.

Validation runs on plain Python data (fast to check), but plain data has no positions:
the loader keeps the node tree it composed the data from (one parse), and a failing check
looks up where its value sits only then. The same node tree reveals duplicate mapping
keys, which building a dict silently collapses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from reprobuild.errors import LockError

Path_ = tuple[Any, ...]

HEX_RE = re.compile(r"0[xX][0-9a-fA-F]+")
KEY_RE = re.compile(r"0[xX][0-9a-fA-F]{32}")


class Doc:
    """Validation context for one file: its name and its composed node tree."""

    def __init__(self, filename: str, root: Any, fix: str) -> None:
        self.filename = filename
        self.root = root
        self.fix = fix

    def where(self, path: Path_) -> str:
        node = find_node(self.root, path)
        if node is None:
            return self.filename
        mark = node.start_mark
        return f"{self.filename}:{mark.line + 1}:{mark.column + 1}"

    def fail(self, path: Path_, problem: str, fix: str | None = None) -> NoReturn:
        dotted = format_path(path)
        prefix = f"{self.where(path)}: {dotted}: " if dotted else f"{self.where(path)}: "
        raise LockError(f"{prefix}{problem}; {fix or self.fix}")

    # ---- typed getters -------------------------------------------------------------
    def mapping(
        self,
        value: Any,
        path: Path_,
        required: tuple[str, ...],
        optional: tuple[str, ...] = (),
    ) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {type_name(value)}")
        allowed = set(required) | set(optional)
        for k in value:
            if k not in allowed:
                self.fail(
                    path + (k,),
                    f"unknown field {k!r} (allowed: {', '.join(sorted(allowed))})",
                    "remove it or check its spelling",
                )
        for k in required:
            if k not in value:
                self.fail(path, f"missing field {k!r}", "add it or re-record the lock")
        return value

    def typed(self, value: Any, path: Path_, kinds: tuple[type, ...], what: str) -> Any:
        # bool is an int subclass in Python; a YAML `true` is never a valid number here.
        if isinstance(value, bool) and bool not in kinds:
            self.fail(path, f"expected {what}, got {value!r}")
        if not isinstance(value, kinds):
            self.fail(path, f"expected {what}, got {type_name(value)} {short(value)}")
        return value

    def string(self, value: Any, path: Path_, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        return self.typed(value, path, (str,), "a string")

    def integer(
        self, value: Any, path: Path_, optional: bool = False, minimum: int | None = None
    ) -> int | None:
        if value is None and optional:
            return None
        v = self.typed(value, path, (int,), "an integer")
        if minimum is not None and v < minimum:
            self.fail(path, f"expected an integer >= {minimum}, got {v}")
        return v

    def number(self, value: Any, path: Path_, optional: bool = False) -> float | None:
        if value is None and optional:
            return None
        return float(self.typed(value, path, (int, float), "a number"))

    def boolean(self, value: Any, path: Path_) -> bool:
        return self.typed(value, path, (bool,), "true or false")

    def seq(self, value: Any, path: Path_) -> list[Any]:
        return self.typed(value, path, (list,), "a list")

    def str_list(self, value: Any, path: Path_, optional: bool = False) -> list[str] | None:
        if value is None and optional:
            return None
        return [self.string(v, path + (i,)) for i, v in enumerate(self.seq(value, path))]

    def tactic(self, value: Any, path: Path_) -> int:
        """A 64-bit tactic hash: ``"0x..."`` text (or the int YAML made of unquoted hex).

        A decimal integer is refused: hashes are written in hex, and ``tactic: 12345`` is
        far more likely a hand edit gone wrong than a hash someone converted.
        """
        if isinstance(value, bool):
            self.fail(path, f"expected a tactic hash like '0x665ded9abbf88', got {value!r}")
        if isinstance(value, int):
            node = find_node(self.root, path)
            text = getattr(node, "value", None)
            if not (isinstance(text, str) and HEX_RE.fullmatch(text.replace("_", ""))):
                self.fail(
                    path,
                    f"expected a tactic hash as hex text like '0x665ded9abbf88', got the "
                    f"integer {short(value)}",
                    f'write it as "0x{value:x}" if that is the hash'
                    if 0 <= value < 2**64
                    else None,
                )
            n = value
        elif isinstance(value, str) and HEX_RE.fullmatch(value):
            n = int(value, 16)
        else:
            self.fail(
                path, f"malformed tactic hash {short(value)}: expected hex like '0x665ded9abbf88'"
            )
        if not 0 <= n < 2**64:
            self.fail(path, f"tactic hash {short(value)} does not fit in 64 bits")
        return n

    def key(self, value: Any, path: Path_) -> str:
        """A timing-cache key, normalised to ``0x`` + 32 lowercase hex digits."""
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**128:
            return f"0x{value:032x}"
        if isinstance(value, str) and KEY_RE.fullmatch(value):
            return "0x" + value[2:].lower()
        self.fail(path, f"malformed timing-cache key {short(value)}: expected '0x' + 32 hex digits")

    def choice(self, value: Any, path: Path_, choices: tuple[str, ...]) -> str:
        v = self.string(value, path)
        if v not in choices:
            self.fail(path, f"expected one of {', '.join(choices)}, got {v!r}")
        return v


def format_path(path: Path_) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def find_node(root: Any, path: Path_) -> Any:
    """Walk a composed YAML node tree along ``path``; the deepest node found is returned."""
    import yaml

    node = root
    for part in path:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == part:
                    nxt = v
            if nxt is None:
                return node
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node
            node = node.value[part]
        else:
            return node
    return node


def find_duplicate_key(root: Any) -> tuple[Any, str] | None:
    """Return (node, key) of the first mapping key that appears twice, if any."""
    import yaml

    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    if k.value in seen:
                        return k, k.value
                    seen.add(k.value)
                stack.append(v)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return None


Validator = Callable[[Doc, Any, Path_], Any]
