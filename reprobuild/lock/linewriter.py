"""The layers section of a canonical lock, written as lines without PyYAML's emitter.

``reprobuild pin`` rewrites the whole lock on every call, and PyYAML's emitter spends
most of that on the layers (hundreds of thousands of events for 10,000 entries). Their
canonical lines are fixed (see ``linereader``), so they are formatted here directly, for
the layers whose every string the emitter would write unchanged: a plain word, or
printable text without quotes or backslashes inside double quotes. Any other string
(one the emitter escapes) makes this return None, and the whole lock is written by the
emitter as before. The golden and hypothesis tests in tests/lock/ hold the two to the
same bytes.
"""

from __future__ import annotations

import re

from reprobuild.lock.emit import is_plain
from reprobuild.lock.linereader import RAW
from reprobuild.lock.model import LayerEntry

_VERBATIM = re.compile(f"[{RAW}]*")


def layer_lines(layers: list[LayerEntry]) -> str | None:
    """The text after ``layers:`` (non-empty ``layers``), or None if a string needs
    escaping."""
    texts: dict[str | None, str] = {None: "null"}
    out: list[str] = []
    add = out.append
    for e in layers:
        kernel = texts.get(e.kernel) or texts.setdefault(e.kernel, _text(e.kernel))
        layer = _text(e.layer)
        if not layer or not _VERBATIM.fullmatch(e.key):
            return None
        add(
            f"  - layer: {layer}\n"
            f'    key: "{e.key}"\n'
            f'    tactic: "0x{e.tactic:x}"\n'
            f"    kernel: {kernel}\n"
            f"    pinned: {'true' if e.pinned else 'false'}\n"
        )
        if not e.candidates:
            add("    candidates: []\n")
            continue
        add("    candidates:\n")
        for c in e.candidates:
            ck = texts.get(c.kernel) or texts.setdefault(c.kernel, _text(c.kernel))
            add(f'      - {{tactic: "0x{c.tactic:x}", kernel: {ck}}}\n')
    if "" in texts.values():
        return None
    return "".join(out)


def _text(value: str) -> str:
    """As ``emit.text_event`` writes it, or "" when the emitter would escape something."""
    if is_plain(value):
        return value
    return f'"{value}"' if _VERBATIM.fullmatch(value) else ""
