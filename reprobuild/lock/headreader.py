"""The head of a canonical lock (everything above ``layers:``) read without YAML.

Why: a locked rebuild reads its lock once, and importing PyYAML (its reader compiles a
regular expression over all of Unicode) cost more than reading the whole lock. With
``linereader`` taking the layers, the head was all YAML still did on that path.

Like ``linereader``, this reader never decides what is an error and only ever gives what
``yaml.safe_load`` gives for the same text. It takes the writer's block mappings, two
spaces per level, whose values are single-line scalars (double-quoted, a plain word, a
decimal integer, ``null``/``true``/``false``), ``[]``, ``{}`` or a one-line flow sequence
of such scalars; whole-line comments at column 0 are skipped. Anything else (a block
sequence such as a precision plan's nodes, a float, a comment after a value, a blank line,
a repeated key, a flow sequence the emitter wrapped) declines with None, and the strict
path reads the text. ``tests/lock/test_headreader.py`` holds the two to equal results on
the goldens and on random mutations.
"""

from __future__ import annotations

import re
from typing import Any

from reprobuild.lock.linereader import PLAIN, QUOTED, Decline, scalar_text

_INT = r"-?(?:0|[1-9][0-9]*)"  # YAML 1.1 reads these as the decimal integer, and only them
_ITEM = rf"(?:{QUOTED}|{PLAIN}|{_INT})"
_SCALAR = re.compile(_ITEM)
_LINE = re.compile(rf"((?:  )*)({QUOTED}|[A-Za-z_][A-Za-z0-9_]*):(?: (.*))?")
_FLOW_ITEMS = re.compile(rf"\[({_ITEM}(?:, {_ITEM})*)\]")
# A whole-line comment: YAML's printable characters, none of its line breaks but "\n".
_COMMENT = re.compile(
    "#[^\\x00-\\x08\\x0a-\\x1f\\x7f-\\x9f\\u2028\\u2029\\ud800-\\udfff\\ufeff\\ufffe\\uffff]*"
)
_WORDS: dict[str, Any] = {"null": None, "true": True, "false": False}


def read_head(text: str) -> dict[str, Any] | None:
    """The head as plain data, or None unless every line is in the canonical subset."""
    try:
        return _read(text)
    except Decline:
        return None


def _read(text: str) -> dict[str, Any]:
    if not text.endswith("\n"):
        raise Decline
    root: dict[str, Any] = {}
    stack: list[dict[str, Any]] = [root]  # the open mappings, one per indent level
    opened = False  # the previous line was "key:" (its mapping must get a line)
    for line in text[:-1].split("\n"):
        if line.startswith("#"):
            if _COMMENT.fullmatch(line) is None:
                raise Decline
            continue
        m = _LINE.fullmatch(line)
        if m is None:
            raise Decline
        indent, key, value = m.groups()
        level = len(indent) // 2
        if level >= len(stack) or (opened and level != len(stack) - 1):
            raise Decline  # deeper than an open mapping, or "key:" with nothing under it
        del stack[level + 1 :]
        name = scalar_text(key)
        if name is None or name in stack[-1]:
            raise Decline  # a null key; a repeated one
        if value is None:
            stack[-1][name] = child = {}
            stack.append(child)
            opened = True
        else:
            stack[-1][name] = _value(value)
            opened = False
    if opened or not root:
        raise Decline
    return root


def _value(token: str) -> Any:
    if not token:
        raise Decline  # "key: " is YAML's null: the writer never leaves the space
    if token == "[]":
        return []
    if token == "{}":
        return {}
    if token[0] == "[":
        m = _FLOW_ITEMS.fullmatch(token)
        if m is None:
            raise Decline
        items = _SCALAR.findall(m.group(1))
        if ", ".join(items) != m.group(1):
            raise Decline  # not the one reading: the strict path decides
        return [_scalar(t) for t in items]
    return _scalar(token)


def _scalar(token: str) -> Any:
    if _SCALAR.fullmatch(token) is None:
        raise Decline
    if token in _WORDS:
        return _WORDS[token]
    if token[0] == "-" or token[0].isdigit():
        return int(token)
    return scalar_text(token)
