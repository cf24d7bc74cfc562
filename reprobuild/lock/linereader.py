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


QUOTED = '"(?:[' + RAW + r']|\\["\\bfnrt]|\\u[0-9a-f]{4})*"'
"""A double-quoted scalar with only the escapes the writer makes (quotes included)."""
PLAIN = r"[A-Za-z_][A-Za-z0-9_./\-]*"
"""The writer's plain words (a string, or a word YAML reads otherwise: see ``scalar_text``)."""


def _scalar(group: str) -> str:
    """A quoted (quotes included) or a plain scalar; ``group`` opens it: "(" or "(?:"."""
    return f"{group}{QUOTED}|{PLAIN})"


# One entry's six head lines, and one candidate line; each match runs from the newline
# before its first line to just before the newline ending its last (see ``_read``).
_HEAD = re.compile(
    rf"\n  - layer: {_scalar('(')}\n"
    r'    key: "(0x[0-9a-f]{32})"\n'
    r'    tactic: "0x([0-9a-f]{1,16})"\n'
    rf"    kernel: {_scalar('(')}\n"
    r"    pinned: (true|false)\n"
    r"    candidates:( \[\])?(?=\n)"
)
_HEAD_LINES = 6
_CANDIDATE = re.compile(
    r'\n      - \{tactic: "0x([0-9a-f]{1,16})", kernel: ' + _scalar("(") + r"\}(?=\n)"
)
# Plain words YAML 1.1 may read as something other than a string (emit._YAML_WORDS).
_WORDS = frozenset(("true", "false", "yes", "no", "on", "off", "null", "y", "n", "none"))
_ESCAPES = {'"': '"', "\\": "\\", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_ESCAPE_RE = re.compile(r"\\(u[0-9a-f]{4}|.)")
LAYERS_LINE = re.compile(r"^layers:( \[\])?\n", re.M)


class Decline(Exception):
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
    except Decline:
        return None


def _read(text: str, pos: int) -> list[LayerEntry]:
    """Two scans in C, each over the whole section: the entries' head lines, the candidate
    lines. Every match is whole lines (it starts at a newline and stops before one), heads
    and candidates never share a line (their indents differ), so when their lines add up
    to all the section's lines they tile it, and the lines between two heads are exactly
    the first one's candidates. Anything else declines."""
    end = len(text)
    if pos >= end or text[pos - 1] != "\n" or text[-1] != "\n":
        raise Decline  # "layers:" then nothing is YAML's null, not an empty list
    heads = list(_HEAD.finditer(text, pos - 1))
    cands = _CANDIDATE.findall(text, pos - 1)
    if not heads or heads[0].start() != pos - 1:
        raise Decline
    if _HEAD_LINES * len(heads) + len(cands) != text.count("\n", pos):
        raise Decline
    strings: dict[str, str | None] = {}
    kernels = {token: scalar_text(token, strings) for token in {k for _, k in cands}}
    candidates = [LockCandidate(int(t, 16), kernels[k]) for t, k in cands]  # in one go
    entries: list[LayerEntry] = []
    seen: set[str] = set()
    count = text.count
    nexts = [m.start() for m in heads]
    nexts.append(end - 1)
    first = 0
    for m, nxt in zip(heads, nexts[1:], strict=True):
        layer, key, tactic, kernel, pinned, none = m.groups()
        n = count("\n", m.end(), nxt)
        if key in seen or (n == 0) != (none is not None):
            raise Decline  # a repeated key; "candidates:" with nothing under it
        seen.add(key)
        name = scalar_text(layer, strings)
        if name is None:
            raise Decline
        last = first + n
        entries.append(
            LayerEntry(
                key,
                name,
                int(tactic, 16),
                scalar_text(kernel, strings),
                pinned == "true",
                candidates[first:last],
            )
        )
        first = last
    return entries


def scalar_text(token: str, memo: dict[str, str | None] | None = None) -> str | None:
    """A scalar's value: None for ``null``; a plain word YAML might read otherwise declines."""
    if memo is None:
        memo = {}
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
        raise Decline
    memo[token] = value
    return value


def _unescape(m: re.Match[str]) -> str:
    body = m.group(1)
    # YAML reads \uXXXX as one code point each, a surrogate pair as two (unlike JSON).
    return chr(int(body[1:], 16)) if body[0] == "u" else _ESCAPES[body]
