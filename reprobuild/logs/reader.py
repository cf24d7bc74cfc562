"""Reading whole logs: files and byte streams in chunks.

``LogParser.feed`` takes lines one at a time (a build's logger callback). Files and pipes
arrive as bytes cut anywhere, and that is where the speed matters (``reprobuild log`` on a
multi-GB trtexec log), so ``iter_chunks`` splits and decodes them for the parser. Memory
stays flat: one read buffer, reused.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from reprobuild.errors import LogParseError
from reprobuild.logs.parser import LogParser
from reprobuild.logs.records import ParseResult, TacticRecord

__all__ = ["iter_chunks", "iter_file", "parse_file", "parse_lines"]

_CHUNK = 1 << 17  # bytes per read
_MAX_LINE = 1 << 20  # longer lines are truncated (binary noise without newlines)


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


def _read_raw(path: str | os.PathLike[str]) -> Iterator[memoryview]:
    """A log file in fixed-size chunks (valid until the next one); unreadable files raise
    ``LogParseError``."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; generator owns it
    except OSError as err:
        raise LogParseError(
            f"{path}: cannot read the log ({err.strerror or err}); "
            "pass the path of a verbose builder log"
        ) from None
    # One buffer, refilled: the incremental decoder copies what it keeps, and fresh
    # objects per read cost page faults on multi-GB logs.
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with fh:
        while True:
            try:
                n = fh.readinto(buf)
            except OSError as err:
                raise LogParseError(
                    f"{path}: read failed ({err.strerror or err}); check the file"
                ) from None
            if not n:
                return
            yield view[:n]


def _split_chunks(chunks: Iterable[bytes]) -> Iterator[list[str]]:
    """Lists of lines, decoded as UTF-8 (errors replaced), from chunks cut anywhere.

    Splits on ``\\n`` only: ``str.splitlines`` would also split on ``\\x1e``/``\\x1f``,
    which TensorRT uses *inside* lines to separate ONNX layer names.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    carry = ""
    for chunk in chunks:
        parts = (carry + decoder.decode(chunk)).split("\n")
        carry = parts.pop()
        if len(carry) > _MAX_LINE:
            carry = carry[:_MAX_LINE]
        yield parts
    carry += decoder.decode(b"", final=True)
    if carry:
        yield [carry]


def iter_chunks(chunks: Iterable[bytes], parser: LogParser | None = None) -> Iterator[TacticRecord]:
    """Stream the records of a log given as byte chunks cut anywhere (a file, a pipe)."""
    return _iter_python(chunks, parser if parser is not None else LogParser())


def _iter_python(chunks: Iterable[bytes], p: LogParser) -> Iterator[TacticRecord]:
    line_fn = p._line
    for lines in _split_chunks(chunks):
        for line in lines:
            line_fn(line)
            if p._out:
                out, p._out = p._out, []
                yield from out
    yield from p.finish()


def iter_file(
    path: str | os.PathLike[str], parser: LogParser | None = None
) -> Iterator[TacticRecord]:
    """Stream the records of a log file; pass ``parser`` to read its warnings afterwards.

    An unreadable file raises ``LogParseError``; unreadable lines are skipped.
    """
    p = parser if parser is not None else LogParser(source=str(path))
    return iter_chunks(_read_raw(path), p)


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
