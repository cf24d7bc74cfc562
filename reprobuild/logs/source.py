"""A builder log opened once: a regular file, or standard input when the user gave ``-``.

Why one opening: a log given as ``/dev/stdin`` or a FIFO is a pipe, and sniffing it in one
reader then parsing it in another left the parser nothing (``0 record(s)``, exit 0). A path
must be a regular file (``fileio.open_regular``); only ``-`` reads a pipe, and then the
bytes the sniff read are kept and handed to the parser first. Every read stops at the log
cap, so ``/dev/zero`` behind ``-`` ends too.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from typing import BinaryIO

from reprobuild.errors import LogParseError
from reprobuild.fileio import open_regular
from reprobuild.limits import cap

STDIN = "-"
CHUNK = 1 << 20
PIPE_SNIFF = 64 << 20
"""How much of a pipe is kept while looking for the first log line (a file is re-read)."""

_LOCK = re.compile(rb"\A(?:#[^\n]*\n)*\s*(?:# reprobuild lockfile|schema: \d+\s*\n)")
_LOCK_HEADER = re.compile(rb"\A# reprobuild lockfile")
_MARKDOWN = re.compile(rb"^#{2,6} \S", re.M)


class LogSource:
    """One log, read once; ``head`` is what was read first, ``chunks`` the whole stream."""

    def __init__(self, name: str, fh: BinaryIO, seekable: bool) -> None:
        self.name = name
        self._fh = fh
        self._seekable = seekable
        self._kept: list[bytes] = []  # what a pipe's sniff read, handed out first
        self._read = 0
        self._limit = cap("log")

    def __enter__(self) -> LogSource:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fh is not sys.stdin.buffer:
            self._fh.close()

    def _next(self) -> bytes:
        try:
            block = self._fh.read(CHUNK)
        except OSError as err:
            raise LogParseError(_read_failed(self.name, err)) from None
        self._read += len(block)
        if self._read > self._limit:
            raise LogParseError(_over_limit(self.name, self._limit))
        return block

    def sniff(self, marker: re.Pattern[bytes], overlap: int) -> tuple[bool, bytes, int]:
        """Read until ``marker`` is found: (found, the first chunk, bytes read)."""
        head = self._next()
        found = bool(marker.search(head))
        tail, seen = head[-overlap:], len(head)
        if not self._seekable:
            self._kept.append(head)
        while not found and seen < (PIPE_SNIFF if not self._seekable else self._limit):
            block = self._next()
            if not block:
                break
            found = bool(marker.search(tail + block))
            tail, seen = block[-overlap:], seen + len(block)
            if not self._seekable:
                self._kept.append(block)
        if self._seekable:
            self._fh.seek(0)
            self._read = 0
        return found, head, seen

    def read_all(self, limit: int, what: str) -> bytes:
        """The whole file in memory (a JSON document), refused past ``limit`` bytes."""
        parts, size = [], 0
        for block in self.chunks():
            size += len(block)
            if size > limit:
                raise LogParseError(f"{self.name}: over the {limit:,}-byte limit for {what}")
            parts.append(block)
        return b"".join(parts)

    def chunks(self) -> Iterator[bytes]:
        """Every byte of the log in order, once."""
        kept, self._kept = self._kept, []
        yield from kept
        while block := self._next():
            yield block

    def size(self) -> int | None:
        """The file's size now, or None for a pipe (only a regular file can be read in
        ranges, by ``chunks_at``)."""
        return os.fstat(self._fh.fileno()).st_size if self._seekable else None

    def chunks_at(self, start: int, end: int | None = None) -> Iterator[bytes]:
        """The bytes from offset ``start`` to ``end`` (None: to the end of the file), read
        with ``pread``: the file offset is not moved, so two processes that share the open
        file can read different ranges at once. The log cap holds as in ``chunks``."""
        pos = start
        while end is None or pos < end:
            want = CHUNK if end is None else min(CHUNK, end - pos)
            try:
                block = os.pread(self._fh.fileno(), want, pos)
            except OSError as err:
                raise LogParseError(_read_failed(self.name, err)) from None
            if not block:
                return
            pos += len(block)
            if pos > self._limit:
                raise LogParseError(_over_limit(self.name, self._limit))
            yield block


def _read_failed(name: str, err: OSError) -> str:
    return f"{name}: read failed ({err.strerror or err}); check the file"


def _over_limit(name: str, limit: int) -> str:
    return (
        f"{name}: over the {limit:,}-byte limit for a log file; check that "
        "this is the right file (REPROBUILD_MAX_LOG_BYTES raises it)"
    )


def open_log(path: str | os.PathLike[str]) -> LogSource:
    """The log at ``path`` (``-``: standard input), refused unless a regular file or ``-``."""
    name = os.fspath(path)
    if name == STDIN:
        return LogSource("-", sys.stdin.buffer, seekable=False)
    fh = open_regular(
        name,
        "builder log",
        error=LogParseError,
        missing="cannot read the log (no such file); pass the path of a verbose builder log",
    )
    return LogSource(name, fh, seekable=True)


def foreign(head: bytes) -> str | None:
    """What a file that is not a log is, when it is one of reprobuild's own or Markdown: both
    mention tactics and TensorRT, so the marker search alone would take them for logs."""
    if _LOCK_HEADER.match(head) or _LOCK.match(head):
        return "a reprobuild lockfile"
    if _MARKDOWN.search(head[:65536]):
        return "a Markdown document"
    return None
