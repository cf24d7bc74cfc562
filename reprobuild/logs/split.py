"""A large log file read by two processes at once, with the output one process gives.

Why: the parser reads about 35 MB/s in CPython and a verbose build log can hold gigabytes;
its state machine is sequential, but a log's state is short-lived (a block of candidate
lines, the last layer name), so the second half can be read from a fresh parser in a forked
process while this one reads the first half. The two readings are then joined where they
agree: this process goes on reading the second half from the true state, block by block,
and compares its parser's ``fingerprint`` with the one the other process took at the end of
the same block. From the first block where they are equal, both parsers meet every later
line in the same state, so the other process's output from there on is exactly what this
one would have made. Where they never meet (a state set in the first half that the second
never resets), or the other process fails, this process reads the rest itself: the output
is the same, only slower.

The caller passes ``render`` (records to text) and receives the text in order, so the
other process renders its records too and hands over text, not objects: nothing crosses
between the processes but bytes in two unlinked temporary files, the text and a JSON index
(a line per block: fingerprint, text offset, counts; then the final warnings, engine
layers and line count). Only regular files of at least ``MIN_BYTES``, on Linux (where
``fork`` is safe) with two or more usable CPUs, are split; anything else is read here
alone, as is everything when ``REPROBUILD_LOG_PROCESSES=1``.
"""

from __future__ import annotations

import codecs
import json
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO

from reprobuild.limits import cap, log_processes
from reprobuild.logs.layermodel import EngineLayer
from reprobuild.logs.parser import LogParser
from reprobuild.logs.reader import iter_blocks
from reprobuild.logs.records import LogWarning, TacticRecord
from reprobuild.logs.source import LogSource

__all__ = ["MIN_BYTES", "Piece", "iter_pieces"]

MIN_BYTES = 64 << 20
"""Smaller logs are read by one process: a second costs a fork and a join, and below this
size the whole read takes about two seconds (``scripts/bench_parse.py`` measures both)."""

WAIT = False
"""Whether this process waits for the other at the split (``iter_pieces``'s ``wait``
default). Tests set it: the join is then tried whatever the machine's load."""

_COPY = 1 << 20  # bytes of the other process's text decoded and handed on at once

Render = Callable[[list[TacticRecord]], str]


@dataclass(frozen=True, slots=True)
class Piece:
    """Text for the records of one or more blocks, with how many records and how many of
    them came from the timing cache (the summary line counts both)."""

    text: str
    records: int
    cached: int


@dataclass(frozen=True, slots=True)
class _Block:
    fingerprint: str
    end: int  # offset in the text file after this block's text
    records: int
    cached: int
    warnings: int  # len(parser.warnings) after this block
    dropped: int


@dataclass(frozen=True, slots=True)
class _Final:
    end: int
    records: int
    cached: int
    lineno: int
    warnings: list[LogWarning]
    dropped: int
    engine_layers: list[EngineLayer]


@dataclass
class Report:
    """How the last ``iter_pieces`` read went (tests read it: which way the join went)."""

    split_at: int | None = None  # the byte offset the second process started at
    pid: int | None = None  # the second process
    joined_after: int | None = None  # the block of the second half after which it was joined
    fallback: str | None = None  # why this process read the second half itself


REPORT = Report()


def _piece(records: list[TacticRecord], render: Render) -> Piece:
    return Piece(render(records), len(records), sum(r.from_cache for r in records))


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def iter_pieces(
    src: LogSource,
    parser: LogParser,
    render: Render,
    *,
    min_bytes: int | None = None,
    at: float = 0.5,
    wait: bool | None = None,
) -> Iterator[Piece]:
    """The rendered records of ``src`` in order; ``parser`` holds the warnings, engine
    layers and line count afterwards, as after reading the log alone. ``at`` is where the
    second process starts, as a fraction of the file; ``wait`` (default ``WAIT``) makes
    this process wait for it there (tests: the join is then always tried, whatever the
    machine's load)."""
    global REPORT
    REPORT = Report()
    size = src.size()
    threshold = MIN_BYTES if min_bytes is None else min_bytes
    processes = log_processes()
    if (
        size is None
        or size < max(threshold, 1)
        or not sys.platform.startswith("linux")  # fork is safe there; elsewhere one process
        or _cpus() < 2
        or size > cap("log")  # read alone, to stop at the cap where one reading stops
        or processes == 1
    ):
        with src:
            yield from _alone(src.chunks(), parser, render)
        return
    with src:
        yield from _split(
            src, parser, render, _split_point(src, size, at), WAIT if wait is None else wait
        )


def _alone(chunks: Iterable[bytes], parser: LogParser, render: Render) -> Iterator[Piece]:
    for records in iter_blocks(chunks, parser):
        if records:
            yield _piece(records, render)
    yield _piece(parser.finish(), render)


def _split_point(src: LogSource, size: int, at: float) -> int:
    """The start of the first line at or after ``at`` of the file (0 when none)."""
    start = int(size * min(max(at, 0.0), 1.0))
    pos = start
    for block in src.chunks_at(start):
        nl = block.find(b"\n")
        if nl >= 0:
            return pos + nl + 1
        pos += len(block)
    return 0


def _split(
    src: LogSource, parser: LogParser, render: Render, split: int, wait: bool
) -> Iterator[Piece]:
    """Read ``src`` from the start here and from ``split`` in a forked process; join the
    two where the states meet. This process does not wait for the other at ``split``
    (unless ``wait``): it reads on into the second half, checking after each block whether
    the other has finished, and joins at the first block after that where the states
    agree. So whichever process is slower (another program on one core, a half with more
    records) the two share the work, and the text copied over is only what this process
    did not read itself."""
    if split == 0:  # one line, or none: nothing to share
        yield from _alone(src.chunks_at(0), parser, render)
        return
    text = index = None
    parent = os.getpid()
    try:
        text = tempfile.TemporaryFile()
        index = tempfile.TemporaryFile()
        pid = os.fork()
    except OSError:  # no temporary directory, no process to spare: read it here alone
        for f in (text, index):
            if f is not None:
                f.close()
        REPORT.fallback = "no second process"
        yield from _alone(src.chunks_at(0), parser, render)
        return
    REPORT.split_at, REPORT.pid = split, pid
    if pid == 0:  # the second process: never returns
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _die_with(parent)
            _second_half(src, parser, render, split, text, index)
            code = 0
        finally:
            os._exit(code)
    try:
        for records in iter_blocks(src.chunks_at(0, split), parser):
            if records:
                yield _piece(records, render)
        blocks: list[_Block] = []
        final = None
        done, status = os.waitpid(pid, 0 if wait else os.WNOHANG)
        if done:
            pid = 0
            blocks, final = _collect(status, index)
        j = 0
        for records in iter_blocks(src.chunks_at(split), parser):
            if records:
                yield _piece(records, render)
            if pid:  # still reading: this process read on meanwhile
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    pid = 0
                    blocks, final = _collect(status, index)
            if final is not None and j < len(blocks) and _join(parser, blocks[j], final):
                REPORT.joined_after = j
                yield from _copy(text, blocks, j, final)
                return
            j += 1
        if REPORT.fallback is None:
            REPORT.fallback = (
                "the two readings never met" if final is not None else "read here first"
            )
        yield _piece(parser.finish(), render)
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        text.close()
        index.close()


def _die_with(parent: int) -> None:
    """Make the second process end with this one: a ``reprobuild log`` killed outright
    (SIGKILL, no ``finally``) must not leave it reading to the end of the file. Linux's
    parent-death signal does it (``prctl(PR_SET_PDEATHSIG, SIGKILL)``); a parent that died
    before it was set is seen as a changed parent id."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no libc to ask: the parent's finally still kills it
        pass
    if os.getppid() != parent:
        os._exit(1)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _second_half(
    src: LogSource,
    template: LogParser,
    render: Render,
    split: int,
    text: IO[bytes],
    index: IO[bytes],
) -> None:
    """Read from ``split`` to the end with a fresh parser; write the text and the index."""
    parser = LogParser(source=template.source, max_warnings=template.max_warnings)
    parser.lineno = sum(block.count(b"\n") for block in src.chunks_at(0, split))
    end = 0
    for records in iter_blocks(src.chunks_at(split), parser):
        piece = _piece(records, render)
        end += text.write(piece.text.encode("utf-8", "surrogatepass"))
        row = [parser.fingerprint().hex(), end, piece.records, piece.cached]
        row += [len(parser.warnings), parser.warnings_dropped]
        index.write(json.dumps(row).encode() + b"\n")
    piece = _piece(parser.finish(), render)
    end += text.write(piece.text.encode("utf-8", "surrogatepass"))
    final = {
        "end": end,
        "records": piece.records,
        "cached": piece.cached,
        "lineno": parser.lineno,
        "warnings": [[w.line, w.kind, w.message] for w in parser.warnings],
        "dropped": parser.warnings_dropped,
        "engine_layers": [
            [e.name, e.layer_type, e.tactic_name, e.tactic_value, list(e.metadata)]
            for e in parser.engine_layers
        ],
    }
    index.write(json.dumps(final, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n")
    text.flush()
    index.flush()


def _collect(status: int, index: IO[bytes]) -> tuple[list[_Block], _Final | None]:
    """What the second process left, given its exit status; nothing if it failed."""
    if os.waitstatus_to_exitcode(status) == 0:
        return _read_index(index)
    REPORT.fallback = "the second process failed"
    return [], None


def _read_index(index: IO[bytes]) -> tuple[list[_Block], _Final | None]:
    """The blocks and the final state the second process wrote (its own file, read back
    line by line: its size is a line per block plus the warnings a parser keeps)."""
    index.seek(0)
    blocks: list[_Block] = []
    final = None
    for line in index:
        row = json.loads(line)
        if isinstance(row, list):
            blocks.append(_Block(*row))
        else:
            final = _Final(
                row["end"],
                row["records"],
                row["cached"],
                row["lineno"],
                [LogWarning(*w) for w in row["warnings"]],
                row["dropped"],
                [EngineLayer(n, t, k, v, tuple(m)) for n, t, k, v, m in row["engine_layers"]],
            )
    return blocks, final


def _join(parser: LogParser, block: _Block, final: _Final) -> bool:
    """Whether ``parser`` (read from the start) meets the second reading at the end of
    ``block``; if so, take the second reading's warnings, engine layers and line count.

    The warnings after the meeting point are those the second process kept after that
    block, up to the cap the one reading would have kept; if the second process dropped
    some that the one reading would keep, the two cannot be joined here."""
    if parser.fingerprint().hex() != block.fingerprint:
        return False
    after = final.warnings[block.warnings :]
    total_after = len(final.warnings) + final.dropped - block.warnings - block.dropped
    take = min(max(parser.max_warnings - len(parser.warnings), 0), total_after)
    if take > len(after):
        return False
    parser.warnings.extend(after[:take])
    parser.warnings_dropped += total_after - take
    parser.engine_layers = final.engine_layers
    parser.lineno = final.lineno
    return True


def _copy(text: IO[bytes], blocks: list[_Block], j: int, final: _Final) -> Iterator[Piece]:
    """The second process's text after block ``j``: first the counts of its records, then
    the text in pieces (decoded incrementally, so a piece never ends inside a character)."""
    records = final.records + sum(b.records for b in blocks[j + 1 :])
    cached = final.cached + sum(b.cached for b in blocks[j + 1 :])
    yield Piece("", records, cached)
    decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
    text.seek(blocks[j].end)
    left = final.end - blocks[j].end
    while left > 0:
        data = text.read(min(_COPY, left))
        if not data:
            break
        left -= len(data)
        yield Piece(decoder.decode(data), 0, 0)
    yield Piece(decoder.decode(b"", final=True), 0, 0)
