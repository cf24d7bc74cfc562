"""The layers section of a canonical lock, read line by line without YAML.

The layers are nearly all of a big lock (10,000 entries, 130,000 lines), and even libyaml
spends most of a load making node objects for them. The writer is ours, and in the
canonical form every scalar sits alone on its line with a fixed indentation and a fixed
field order, so a section made only of such lines has exactly one reading, which the
patterns below give directly.

This reader never decides what is an error: any line that is not exactly canonical (a
comment, another order, an unquoted hash, a word YAML might read as a boolean, an escape
the writer never makes, a repeated key) makes it decline with None, and the strict path
(``yamlio``, with its ``file:line:column`` errors) reads the whole text instead. The
differential tests in tests/lock/ hold the two to equal results.
"""

from __future__ import annotations

import re

from reprobuild.lock.model import LayerEntry, LockCandidate

# Characters a double-quoted canonical scalar holds unescaped: printable for every YAML
# reader, and none of YAML's line breaks (U+0085, U+2028, U+2029) nor a BOM, which the
# writer always escapes; nor a quote or a backslash. (A negated class: it compiles fast.)
# The escapes are the ones ``emit.restyle`` leaves.
RAW = '^\\x00-\\x1f"\\\\\\x7f-\\x9f\\u2028\\u2029\\ud800-\\udfff\\ufeff\\ufffe\\uffff'


def _scalar(group: str) -> str:
    """A quoted (quotes included) or a plain scalar; ``group`` opens it: "(" or "(?:"."""
    quoted = '"(?:[' + RAW + r']|\\["\\bfnrt]|\\u[0-9a-f]{4})*"'
    plain = r"[A-Za-z_][A-Za-z0-9_./\-]*"  # the writer's plain words
    return f"{group}{quoted}|{plain})"


def _candidate(group: str) -> str:
    return (
        r'      - \{tactic: "0x' + group + r'[0-9a-f]{1,16})", kernel: ' + _scalar(group) + r"\}\n"
    )


_ENTRY = re.compile(
    rf"  - layer: {_scalar('(')}\n"
    r'    key: "(0x[0-9a-f]{32})"\n'
    r'    tactic: "0x([0-9a-f]{1,16})"\n'
    rf"    kernel: {_scalar('(')}\n"
    r"    pinned: (true|false)\n"
    # all candidate lines as one group, split by _CANDIDATES (a group does not repeat)
    rf"    candidates:(?: \[\]\n|\n((?:{_candidate('(?:')})+))"
)
_CANDIDATES = re.compile(_candidate("("))
# Plain words YAML 1.1 may read as something other than a string (emit._YAML_WORDS).
_WORDS = frozenset(("true", "false", "yes", "no", "on", "off", "null", "y", "n", "none"))
_ESCAPES = {'"': '"', "\\": "\\", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_ESCAPE_RE = re.compile(r"\\(u[0-9a-f]{4}|.)")
LAYERS_LINE = re.compile(r"^layers:( \[\])?\n", re.M)


class _Decline(Exception):
    """Not exactly canonical: the strict path decides."""


def split_layers(text: str) -> tuple[int, int, bool] | None:
    """Where the top-level ``layers:`` line starts and ends, and whether it is ``[]``.

    The first such line at column 0; the caller checks with YAML that the text before it
    is a complete head whose next key is exactly there."""
    m = LAYERS_LINE.search(text)
    if m is None:
        return None
    return m.start(), m.end(), m.group(1) is not None


def read_layers(text: str, start: int) -> list[LayerEntry] | None:
    """The entries of the block sequence from ``start`` to the end of ``text``, or None
    unless every line of it is canonical (the text must end right after the last one)."""
    try:
        return _read(text, start)
    except _Decline:
        return None


def _read(text: str, pos: int) -> list[LayerEntry]:
    entries: list[LayerEntry] = []
    seen: set[str] = set()
    strings: dict[str, str | None] = {}
    end = len(text)
    match = _ENTRY.match
    for_candidates = _CANDIDATES.findall
    while pos < end:
        m = match(text, pos)
        if m is None:
            raise _Decline
        pos = m.end()
        layer, key, tactic, kernel, pinned, block = m.groups()
        if key in seen:
            raise _Decline
        seen.add(key)
        cands = []
        if block is not None:
            for ctactic, ckernel in for_candidates(block):
                cands.append(LockCandidate(int(ctactic, 16), _text(ckernel, strings)))
        name = _text(layer, strings)
        if name is None:
            raise _Decline
        entries.append(
            LayerEntry(key, name, int(tactic, 16), _text(kernel, strings), pinned == "true", cands)
        )
    return entries


def _text(token: str, memo: dict[str, str | None]) -> str | None:
    """A scalar's value: None for ``null``; a plain word YAML might read otherwise declines."""
    got = memo.get(token, memo)
    if got is not memo:
        return got
    value: str | None
    if token[0] == '"':
        value = _ESCAPE_RE.sub(_unescape, token[1:-1]) if "\\" in token else token[1:-1]
    elif token == "null":
        value = None
    elif token.lower() not in _WORDS:
        value = token
    else:
        raise _Decline
    memo[token] = value
    return value


def _unescape(m: re.Match[str]) -> str:
    body = m.group(1)
    # YAML reads \uXXXX as one code point each, a surrogate pair as two (unlike JSON).
    return chr(int(body[1:], 16)) if body[0] == "u" else _ESCAPES[body]
