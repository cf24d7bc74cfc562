"""Reading whole logs: files and byte streams in chunks, by the C scanner or in Python.

``LogParser.feed`` takes lines one at a time (a build's logger callback). Files and pipes
arrive as bytes cut anywhere, and that is where the speed matters (``reprobuild log`` on a
multi-GB trtexec log), so ``iter_chunks`` hands them to the optional C scanner
(``_logscan.c``, built by ``pip install`` where a C compiler exists) and otherwise splits
and decodes them for the Python parser. Memory stays flat: one read buffer, reused.
"""

from __future__ import annotations

import codecs
import dataclasses
import gc
import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from reprobuild.errors import LogParseError
from reprobuild.logs import lines as line_readers
from reprobuild.logs.layerinfo import EngineLayer
from reprobuild.logs.parser import LogParser
from reprobuild.logs.records import Candidate, LogWarning, ParseResult, TacticRecord
from reprobuild.logs.values import split_onnx_layers, tactic_to_int

__all__ = [
    "iter_chunks",
    "iter_file",
    "native_available",
    "native_json",
    "parse_file",
    "parse_lines",
]

_CHUNK = 1 << 17  # bytes per read: small enough that the scanner finds them still in cache
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
    # One buffer, refilled: consumers (the scanner, the incremental decoder) copy what
    # they keep, and fresh 1 MiB objects per read cost page faults on multi-GB logs.
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


def native_available() -> bool:
    """Whether the C scanner (``reprobuild.logs._logscan``) was built for this interpreter."""
    return _native_module() is not None


def _native_module() -> Any:
    try:
        from reprobuild.logs import _logscan  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _logscan


def _recipe(cls: type, given: int) -> tuple[tuple[str, ...], tuple[Any, ...]] | None:
    """How the scanner may make ``cls`` from ``given`` positional values without calling it:
    (field names, defaults of the fields after those given), for a frozen slotted dataclass
    whose generated ``__init__`` only sets its fields; None (call the class) otherwise.
    Warnings and engine layers are made by the hundred thousand, and the frame of a frozen
    dataclass's ``__init__`` cost more than reading their lines."""
    params = getattr(cls, "__dataclass_params__", None)
    if (
        params is None
        or not (params.frozen and params.init)
        or "__slots__" not in cls.__dict__
        or hasattr(cls, "__post_init__")
    ):
        return None
    fields = dataclasses.fields(cls)
    rest = fields[given:]
    if (
        len(fields) < given
        or any(not f.init for f in fields)
        or any(f.default is dataclasses.MISSING for f in rest)
    ):
        return None
    return tuple(f.name for f in fields), tuple(f.default for f in rest)


def _native_scanner(parser: LogParser, *json_mode: Any) -> Any:
    """The C scanner over ``parser``, or None; ``json_mode`` = (write, record_text) makes it
    write ``log --json`` record text instead of returning records."""
    mod = _native_module()
    if mod is None:
        return None
    # What the scanner calls, in the order of _logscan.c's H_* enum: the classes it makes,
    # and the Python readers of lines it leaves to Python.
    hooks = (
        Candidate,
        TacticRecord,
        LogWarning,
        EngineLayer,
        split_onnx_layers,
        tactic_to_int,
        line_readers.cost_of,
        line_readers.writing_parts,
        line_readers.cached_line,
        _recipe(LogWarning, 3),
        _recipe(EngineLayer, 5),
    )
    return mod.Scanner(parser, hooks, parser._max_warnings, *json_mode)


def native_json(
    path: str | os.PathLike[str],
    parser: LogParser,
    write: Callable[[memoryview], Any],
    record_text: Callable[[TacticRecord], str],
) -> bool:
    """Run the C scanner over a log file in JSON mode: each record's ``log --json`` text
    (the ``json.dumps(rec.to_json(), ensure_ascii=False)`` of it, after ``"\\n  "`` or
    ``",\\n  "``) goes to ``write`` as UTF-8 in pieces of about 1 MiB, and no record object
    is made. Each piece is a memoryview of the scanner's buffer, released when ``write``
    returns: a file's ``write`` takes it as it is, anything that keeps it must copy it.
    ``record_text`` prints the rare record whose fields the C code does not know.
    Returns False, having read nothing, when the scanner was not built or ``parser`` was
    already fed."""
    scanner = _native_scanner(parser, write, record_text) if _fresh(parser) else None
    if scanner is None:
        return False
    # Nothing made here forms a cycle, and the scanner already pauses the collector inside
    # each chunk; between chunks it would walk the kept warnings and layers again and again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for chunk in _read_raw(path):
            scanner.feed(chunk)
        scanner.finish()
    finally:
        if collecting:
            gc.enable()
    return True


def iter_chunks(
    chunks: Iterable[bytes], parser: LogParser | None = None, *, native: bool | None = None
) -> Iterator[TacticRecord]:
    """Stream the records of a log given as byte chunks cut anywhere (a file, a pipe).

    ``native`` picks the implementation: True requires the C scanner, False forces the
    pure-Python parser (for tests and for telling a parser bug from a scanner bug), None
    (default) uses the C scanner when it was built. Both give the same records, warnings
    and engine layers (tests/logs/test_logscan.py holds them to that).
    """
    p = parser if parser is not None else LogParser()
    scanner = None
    fresh = _fresh(p)
    if native is not False and fresh:
        scanner = _native_scanner(p)
    if native and scanner is None:
        if not fresh:
            raise LogParseError(
                "native=True needs a fresh LogParser: this one was already fed lines, and "
                "its state lives in Python; pass a new LogParser or native=None"
            )
        raise LogParseError(
            "the native log scanner is not available: reinstall reprobuild where a C "
            "compiler is present, or pass native=None to fall back to the Python parser"
        )
    if scanner is not None:
        # Records flow from the scanner's lists through C-level iterators: no Python frame
        # is resumed per record.
        return itertools.chain(
            itertools.chain.from_iterable(map(scanner.feed, chunks)), _finish(scanner)
        )
    return _iter_python(chunks, p)


def _fresh(p: LogParser) -> bool:
    """Whether ``p`` was never fed: the C scanner keeps its state in C, so it cannot take
    over a parser halfway."""
    return not (p.lineno or p._out or p._blk is not None or p._op is not None)


def _finish(scanner: Any) -> Iterator[TacticRecord]:
    yield from scanner.finish()


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
    path: str | os.PathLike[str], parser: LogParser | None = None, *, native: bool | None = None
) -> Iterator[TacticRecord]:
    """Stream the records of a log file; pass ``parser`` to read its warnings afterwards.

    An unreadable file raises ``LogParseError``; unreadable lines are skipped.
    """
    p = parser if parser is not None else LogParser(source=str(path))
    return iter_chunks(_read_raw(path), p, native=native)


def parse_file(path: str | os.PathLike[str], *, native: bool | None = None) -> ParseResult:
    """All records of a log file in a list (use ``iter_file`` for multi-GB logs)."""
    parser = LogParser(source=str(path))
    records = list(iter_file(path, parser, native=native))
    return ParseResult(
        records=records,
        warnings=parser.warnings,
        engine_layers=parser.engine_layers,
        source=str(Path(path)),
        lines=parser.lineno,
        warnings_dropped=parser.warnings_dropped,
    )
