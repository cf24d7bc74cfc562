"""Reading whole logs: files and byte streams in chunks.

``LogParser.feed`` takes lines one at a time (a build's logger callback). Files and pipes
arrive as bytes cut anywhere, and that is where the speed matters (``reprobuild log`` on a
multi-GB trtexec log), so ``iter_chunks`` reads them 256 KiB at a time, decodes and splits
each run of whole lines with one call each, and hands the parser the run's lines in one
list: no Python call per line on the way in. Memory stays flat: one chunk, its lines and
the records they completed.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from reprobuild.logs.parser import LogParser
from reprobuild.logs.records import ParseResult, TacticRecord
from reprobuild.logs.source import LogSource, open_log

__all__ = ["iter_blocks", "iter_chunks", "iter_file", "iter_source", "parse_file", "parse_lines"]

_CHUNK = 1 << 18  # bytes per read: a thousand lines at once, still in the CPU's caches
_MAX_LINE = 1 << 20  # a longer line keeps its first 1 MiB (binary noise without newlines)


def parse_lines(lines: Iterable[str], parser: LogParser | None = None) -> Iterator[TacticRecord]:
    """Records from lines captured in memory or a pipe, yielded as their blocks complete."""
    p = parser if parser is not None else LogParser()
    for line in lines:
        if isinstance(line, bytes | bytearray):
            line = bytes(line).decode("utf-8", errors="replace")
        out = p.feed(line)
        if out:
            yield from out
    yield from p.finish()


def _blocks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Runs of whole lines, each run ending with a newline, from chunks cut anywhere.

    A line longer than ``_MAX_LINE`` keeps its first ``_MAX_LINE`` bytes however the chunks
    fell, so memory stays bounded on binary noise. Chunks longer than that are taken in
    pieces of ``_MAX_LINE``, so only the line carried into a piece can be too long.
    """
    carry = b""
    for chunk in chunks:
        if not isinstance(chunk, bytes):
            chunk = bytes(chunk)
        for start in range(0, len(chunk), _MAX_LINE):
            piece = chunk if len(chunk) <= _MAX_LINE else chunk[start : start + _MAX_LINE]
            end = piece.rfind(b"\n")
            if end < 0:
                if len(carry) < _MAX_LINE:
                    carry = (carry + piece)[:_MAX_LINE]
                continue
            if carry:
                first = piece.find(b"\n")
                if len(carry) + first > _MAX_LINE:
                    carry = (carry + piece[:first])[:_MAX_LINE]
                    piece, end = piece[first:], end - first
                block = carry + piece[: end + 1]
            else:
                block = piece[: end + 1]
            carry = piece[end + 1 :]
            yield block
    if carry:
        yield carry + b"\n"


def _lines(block: bytes) -> list[str]:
    """The lines of a run from ``_blocks``, decoded as UTF-8 (errors replaced), each
    without its newline and the ``\\r`` before it.

    Decoding a run of whole lines at once gives what decoding the stream would: no UTF-8
    sequence, valid or not, swallows a ``\\n``. Splits on ``\\n`` only: ``str.splitlines``
    would also split on ``\\x1e``/``\\x1f``, which TensorRT uses *inside* lines to separate
    ONNX layer names.
    """
    text = block.decode("utf-8", errors="replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    lines.pop()  # what follows the run's last newline: nothing
    return lines


def iter_chunks(chunks: Iterable[bytes], parser: LogParser | None = None) -> Iterator[TacticRecord]:
    """Stream the records of a log given as byte chunks cut anywhere (a file, a pipe).

    Records come out as soon as the chunk holding the end of the line that completes them
    has been read, before the next chunk is asked for.
    """
    p = parser if parser is not None else LogParser()
    for out in iter_blocks(chunks, p):
        if out:
            yield from out
    yield from p.finish()


def iter_blocks(chunks: Iterable[bytes], parser: LogParser) -> Iterator[list[TacticRecord]]:
    """The records each run of whole lines completed, one list per run (often empty), in
    the order the runs were read; ``parser.finish`` is left to the caller.

    The runs fall where ``chunks`` put them, so two readers of the same bytes in the same
    chunks see the same runs (``logs.split`` compares parser states at their ends).
    """
    feed_lines = parser.feed_lines
    for block in _blocks(chunks):
        # What the parser makes holds no reference cycles, and a collection pass in the
        # middle of a chunk would walk every candidate still held: pause the collector
        # while a chunk is parsed (never across a yield, where other code runs).
        collecting = gc.isenabled()
        gc.disable()
        try:
            out = feed_lines(_lines(block))
        finally:
            if collecting:
                gc.enable()
        yield out


def iter_file(
    path: str | os.PathLike[str], parser: LogParser | None = None
) -> Iterator[TacticRecord]:
    """Stream the records of a log file; pass ``parser`` to read its warnings afterwards.

    An unreadable file raises ``LogParseError``; unreadable lines are skipped.
    """
    p = parser if parser is not None else LogParser(source=str(path))
    return iter_source(open_log(path), p)


def iter_source(src: LogSource, parser: LogParser) -> Iterator[TacticRecord]:
    """The records of a log opened once (``logs.source``); closes it when done."""
    with src:
        yield from iter_chunks(src.chunks(), parser)


def parse_file(path: str | os.PathLike[str]) -> ParseResult:
    """All records of a log file in a list (use ``iter_file`` for multi-GB logs)."""
    parser = LogParser(source=str(path))
    records = list(iter_file(path, parser))
    return ParseResult(
        records=records,
        warnings=parser.warnings,
        engine_layers=parser.engine_layers,
        source=str(Path(path)),
        lines=parser.lineno,
        warnings_dropped=parser.warnings_dropped,
    )
