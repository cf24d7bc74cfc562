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
from pathlib import Path

from reprobuild.errors import LogParseError
from reprobuild.limits import check_size

_MARKER = re.compile(rb"\[(?:TRT|REF|TensorRT)\]|\[[VIWEF]\] |TensorRT|[Tt]actic")
# A lock's first line that is neither a comment nor blank is ``schema: N`` (lock/emit.py).
_LOCK = re.compile(rb"\A(?:[ \t]*(?:#[^\n]*)?\r?\n)*schema: *\d+[ \t]*\r?$", re.M)
_MARKDOWN = (".md", ".markdown", ".mdx")
_CHUNK = 1 << 20
_OVERLAP = 16  # a marker cut between two reads is still found


def check_log_file(path: str | os.PathLike[str]) -> None:
    """Raise ``LogParseError`` unless ``path`` is a readable, capped file with a log line."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if p.is_dir():
            raise LogParseError(f"{p}: is a directory; pass the path of a verbose builder log")
        check_size(p, size, "log")
        with open(p, "rb") as fh:
            head = fh.read(_CHUNK)
            _refuse_look_alike(p, head)
            if _MARKER.search(head):
                return
            tail = head[-_OVERLAP:]
            while block := fh.read(_CHUNK):
                if _MARKER.search(tail + block):
                    return
                tail = block[-_OVERLAP:]
    except OSError as err:
        raise LogParseError(
            f"{p}: cannot read the log ({err.strerror or err}); "
            "pass the path of a verbose builder log (trtexec --verbose or a VERBOSE logger)"
        ) from None
    raise LogParseError(
        f"{p}: not a builder log: no TensorRT log line in {size:,} bytes ({describe(head)}); "
        "pass a verbose builder log (trtexec --verbose or a VERBOSE logger)"
    )


def _refuse_look_alike(p: Path, head: bytes) -> None:
    """A lockfile or a Markdown page names tactics and TensorRT too, so the marker search
    would take it for a log and print stray records; name what it is instead."""
    if p.suffix.lower() in _MARKDOWN:
        raise LogParseError(
            f"{p}: is a Markdown document, not a builder log; pass a verbose builder log "
            "(trtexec --verbose, a VERBOSE logger or `reprobuild build --log FILE`)"
        )
    if _LOCK.search(head):
        raise LogParseError(
            f"{p}: is a reprobuild lockfile, not a builder log; read it with "
            f"`reprobuild show --lock {p}`, or save a build's log with `reprobuild build --log`"
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
