"""A target's layers read back from the text the writer wrote, without YAML parse events.

Why: a 10,000-layer lock is half a million parse events, and making them (libyaml's C
parser hands each one to Python as an object) is three quarters of reading the lock;
``diff`` reads two. The writer writes the layers as text (:func:`.emit.layers_text`), so
the bulk of a lock it wrote can be read as lines.

Correct by construction, not by a second grammar: a block's lines are read loosely into
entries, and the block is taken only when :func:`.emit.layers_text` of those entries is
the very same text. The writer's text reads, as YAML, to the entries it was written from
(``tests/lock/test_yamlio.py`` holds the writer to that), so such a block is what the
event reader would have read; the value checks the event reader makes (keys, tactics and
times in range, no repeated key) are made here too. Anything else (hand edits, another
writer's style, an escaped string) declines, and the parse events read the whole text.
"""

from __future__ import annotations

import re

from reprobuild.lock.emit import layers_marker, layers_text
from reprobuild.lock.model import LayerEntry, LockCandidate
from reprobuild.lock.schema import HEX_RE, KEY_RE

_BLOCK_RE = re.compile(r"^    layers:\n((?:      [^\n]*\n)+)", re.M)
_ENTRY_RE = re.compile(
    r"      - layer: (?P<layer>[^\n]*)\n"
    r"        key: (?P<key>[^\n]*)\n"
    r'        tactic: "(?P<tactic>[^\n"]*)"\n'
    r"(?:        time: (?P<time>[^\n]*)\n)?"
    r"(?:        runs: (?P<runs>true|false)\n)?"
    r"(?:        band: (?P<band>[^\n]*)\n        ties: \[(?P<ties>[^\n]*)\]\n)?"
    r"        kernel: (?P<kernel>[^\n]*)\n"
    r"        pinned: (?P<pinned>true|false)\n"
    r"        candidates:(?: \[\]|(?P<candidates>(?:\n          - [^\n]*)+))(?:\n|\Z)"
)
"""One entry as :func:`.emit.layers_text` writes it (read loosely: the round trip decides)."""
_CANDIDATE_RE = re.compile(r'\n          - \{tactic: "0x([0-9a-fA-F]{1,16})", kernel: ([^\n]*)\}')
"""One candidate line (at most 16 hex digits: a tactic hash below 2**64)."""


class _Decline(Exception):
    """Not exactly the writer's text: the parse events read the lock."""


def split_layers(text: str) -> tuple[str, list[list[LayerEntry]]] | None:
    """``text`` with each target's layers block replaced by the writer's marker word
    (:func:`.emit.layers_marker`), and each block's entries, in order; None when any block
    is not exactly what the writer writes."""
    blocks: list[list[LayerEntry]] = []

    def marker(match: re.Match[str]) -> str:
        block = match.group(1)[:-1]
        entries = _entries(block)
        if layers_text(entries) != block:
            raise _Decline
        blocks.append(entries)
        return f"    layers: {layers_marker(len(blocks) - 1)}\n"

    try:
        head = _BLOCK_RE.sub(marker, text)
    except (_Decline, ValueError, OverflowError):
        return None
    return (head, blocks) if blocks else None


def _entries(block: str) -> list[LayerEntry]:
    """The entries the block says, one match per entry, back to back."""
    entries: list[LayerEntry] = []
    seen: set[str] = set()
    kernels: dict[str, str | None] = {}  # a kernel's text -> its value
    pos, end, match = 0, len(block), _ENTRY_RE.match
    while pos < end:
        m = match(block, pos)
        if m is None:
            raise _Decline
        pos = m.end()
        f = m.groupdict()
        key, layer = _value(f["key"]), _value(f["layer"])
        if key is None or layer is None or KEY_RE.fullmatch(key) is None:
            raise _Decline
        key = "0x" + key[2:].lower()  # as the event reader takes it: the round trip decides
        if key in seen:
            raise _Decline
        seen.add(key)
        text = f["candidates"] or ""
        cands = [
            LockCandidate(
                int(t, 16), kernels[k] if k in kernels else kernels.setdefault(k, _value(k))
            )
            for t, k in _CANDIDATE_RE.findall(text)
        ]
        if len(cands) != text.count("\n"):
            raise _Decline
        ties = f["ties"]
        entries.append(
            LayerEntry(
                key,
                layer,
                _tactic(f["tactic"]),
                _value(f["kernel"]),
                f["pinned"] == "true",
                cands,
                None if f["time"] is None else _time(_value(f["time"])),
                None if f["band"] is None else _time(_value(f["band"])),
                [_tactic(t.strip()[1:-1]) for t in ties.split(",")] if ties else [],
                None if f["runs"] is None else f["runs"] == "true",
            )
        )
    return entries


def _value(text: str) -> str | None:
    """A string as the writer writes it: ``null``, double-quoted, or plain."""
    if text == "null":
        return None
    if text.startswith('"'):
        return text[1:-1]
    return text


def tactic_value(text: str) -> int | None:
    """A tactic hash as a lock holds it (``0x`` hex below 2**64), or None: the one check of
    both readers."""
    if HEX_RE.fullmatch(text) is None:
        return None
    value = int(text, 16)
    return value if value < 2**64 else None


def time_value(text: str | None) -> float | None:
    """A recorded time as a lock holds it (``float.hex`` text >= 0, or ``inf``), or None:
    the one check of both readers."""
    if text == "inf":
        return float("inf")
    if text is None or not text.startswith("0x"):
        return None
    try:
        value = float.fromhex(text)
    except (ValueError, OverflowError):
        return None
    return value if value >= 0 else None


def _tactic(text: str) -> int:
    value = tactic_value(text)
    if value is None:
        raise _Decline
    return value


def _time(text: str | None) -> float:
    value = time_value(text)
    if value is None:
        raise _Decline
    return value
