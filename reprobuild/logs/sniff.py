"""Is this file a builder log at all? Refuse, with what it looked like, when it is not.

A random binary, a JSON file or the wrong text file parses to "0 record(s)", exit 0,
which reads as "this build had no autotuned layers". Every TensorRT (and reference
backend) log line carries a marker: a ``[TRT]``/``[REF]`` tag, a ``[V]``/``[I]``/``[W]``/
``[E]``/``[F]`` severity, or the word TensorRT or tactic. The file is read until the first
one, so a real log costs one chunk and a foreign file one read: linear either way.
"""

from __future__ import annotations

import os
import re

from reprobuild.errors import LogParseError
from reprobuild.logs.source import LogSource, foreign, open_log

_MARKER = re.compile(rb"\[(?:TRT|REF|TensorRT)\]|\[[VIWEF]\] |TensorRT|[Tt]actic")
_OVERLAP = 16  # a marker cut between two reads is still found


def check_log_file(path: str | os.PathLike[str]) -> None:
    """Raise ``LogParseError`` unless ``path`` is a readable, capped file with a log line."""
    with open_log(path) as src:
        check_log_source(src)


def check_log_source(src: LogSource) -> bytes:
    """Raise ``LogParseError`` unless ``src`` holds a log line; returns its first chunk.
    The source can still be read from its start afterwards (a pipe's bytes are kept)."""
    found, head, size = src.sniff(_MARKER, _OVERLAP)
    what = foreign(head)
    if what:
        raise LogParseError(
            f"{src.name}: is {what}, not a builder log; "
            "pass a verbose builder log (trtexec --verbose or a VERBOSE logger)"
        )
    if found:
        return head
    raise LogParseError(
        f"{src.name}: not a builder log: no TensorRT log line in {size:,} bytes "
        f"({describe(head)}); pass a verbose builder log (trtexec --verbose or a VERBOSE logger)"
    )


def describe(head: bytes) -> str:
    """A few words on what a file's first bytes look like."""
    if not head:
        return "the file is empty"
    if head.startswith((b"{", b"[")) and head.lstrip()[:1] in (b"{", b"["):
        return "it looks like JSON"
    text = sum(1 for b in head[:4096] if b in b"\t\n\r" or 32 <= b < 127)
    sample = head[:4096]
    if b"\0" in sample or text < 0.9 * len(sample):
        return f"binary data, {100 - 100 * text // len(sample)}% non-text bytes"
    first = head.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    if len(first) > 60:
        first = first[:57] + "..."
    return f"text whose first line is {first!r}"
