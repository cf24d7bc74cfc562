"""``log --json`` written by the C scanner (JSON mode) against the Python writer, byte for byte.

``write_log_json_file`` has two implementations: the C scanner printing each record's JSON
itself (no record objects), and the Python parser feeding ``RecordWriter``, which
tests/logs/test_jsonout.py already holds to ``json.dumps(rec.to_json())``. Here the two must
give the same bytes on the real TensorRT logs, on generated multi-MiB logs (several 1 MiB
pieces handed to the output), on hand-picked edge inputs and on hypothesis-made logs.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from reprobuild.errors import LogParseError
from reprobuild.logs import reader
from reprobuild.logs.jsonout import RecordWriter, write_log_json_file
from reprobuild.logs.parser import LogParser
from reprobuild.logs.reader import native_available, native_json
from tests.logs.test_jsonout import LOG_FIXTURES, old_document
from tests.logs.test_logscan import _EDGES, _log

needs_native = pytest.mark.skipif(not native_available(), reason="C log scanner not built")


def _document(path: Path, native: bool | None, out: io.TextIOBase | None = None) -> bytes:
    """The ``log --json`` document of ``path`` as bytes, written into a text stream."""
    sink = out if out is not None else io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    write_log_json_file(sink, path, LogParser(source=str(path)), native=native)
    sink.flush()
    if isinstance(sink, io.StringIO):
        return sink.getvalue().encode("utf-8")
    return sink.buffer.getvalue()  # type: ignore[attr-defined]


def _same(path: Path) -> bytes:
    py, nat = _document(path, False), _document(path, True)
    if py != nat:
        i = next((k for k, (a, b) in enumerate(zip(py, nat, strict=False)) if a != b), None)
        i = min(len(py), len(nat)) if i is None else i
        raise AssertionError(
            f"{path.name}: C and Python JSON differ at byte {i}:\n"
            f"  python: {py[max(0, i - 120) : i + 80]!r}\n"
            f"  native: {nat[max(0, i - 120) : i + 80]!r}"
        )
    return nat


@needs_native
@pytest.mark.parametrize("path", LOG_FIXTURES, ids=lambda p: p.name)
def test_fixture_json_identical(path: Path) -> None:
    nat = _same(path)
    assert nat.decode("utf-8") == old_document(path, False)  # and the json.dumps oracle


@needs_native
def test_big_generated_log_identical_and_written_in_bounded_pieces(tmp_path: Path) -> None:
    unit = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in LOG_FIXTURES)
    big = tmp_path / "big.log"
    big.write_bytes(unit * 40)  # ~12 MB: several 1 MiB pieces, chunks cut mid-line
    doc = _same(big)
    parsed = json.loads(doc)
    assert len(parsed["records"]) == 40 * len(json.loads(_same_unit(tmp_path, unit))["records"])
    pieces: list[bytes] = []
    parser = LogParser(source=str(big))
    assert native_json(big, parser, lambda view: pieces.append(bytes(view)), RecordWriter().record)
    kept: list[memoryview] = []
    assert native_json(big, LogParser(), kept.append, RecordWriter().record)
    with pytest.raises(ValueError, match="released"):
        bytes(kept[0])  # a kept view fails loudly instead of showing later text
    head = b'{"file": ' + json.dumps(str(big)).encode() + b', "records": ['
    assert b"".join(pieces) == doc[len(head) : doc.rindex(b'\n], "warnings": ')]
    assert len(pieces) >= 4
    assert all(len(p) >= 1 << 20 for p in pieces[:-1])  # large pieces, not one per record
    assert max(map(len, pieces)) <= (1 << 20) + (1 << 16)  # bounded: 1 MiB plus one record


def _same_unit(tmp_path: Path, unit: bytes) -> bytes:
    one = tmp_path / "one.log"
    one.write_bytes(unit)
    return _same(one)


@needs_native
@pytest.mark.parametrize("data", _EDGES, ids=range(len(_EDGES)))
def test_edge_inputs_json_identical(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "edge.log"
    path.write_bytes(data)
    _same(path)


@needs_native
@pytest.mark.parametrize(
    "row",
    [
        b"   99999999999999999999, 0.5, 1, 1, k, 0x1,\n",  # id past 64 bits: Python prints it
        b'   -0, 0.5, 1, 1, k\x01"\\ \xc3\xa9, 0x1,\n',  # escapes, non-ASCII
    ],
)
def test_rows_the_c_writer_hands_to_python_or_escapes(row: bytes, tmp_path: Path) -> None:
    path = tmp_path / "row.log"
    path.write_bytes(b"Autotuning op a(key: 0x" + b"A" * 32 + b"):\n" + row)
    doc = json.loads(_same(path))
    assert len(doc["records"]) == 1
    assert doc["records"][0]["candidates"][0]["tactic_hash"] == "0x1"
    handed: list[int] = []

    def record_text(rec: object) -> str:
        handed.append(rec.line)  # type: ignore[attr-defined]
        return RecordWriter().record(rec)  # type: ignore[arg-type]

    assert native_json(path, LogParser(), lambda b: None, record_text)
    assert handed == ([1] if row.startswith(b"   9999") else [])


@needs_native
def test_text_stream_without_utf8_bytes_gets_text(tmp_path: Path) -> None:
    path = next(p for p in LOG_FIXTURES if "python_logger_verbose" in p.name)
    latin = io.TextIOWrapper(io.BytesIO(), encoding="latin-1", errors="replace")
    assert _document(path, True, io.StringIO()) == _document(path, False)
    assert _document(path, True, latin) == _document(
        path, False, io.TextIOWrapper(io.BytesIO(), encoding="latin-1", errors="replace")
    )


def test_native_true_without_the_scanner_raises(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(reader, "_native_module", lambda: None)
    path = LOG_FIXTURES[0]
    with pytest.raises(LogParseError, match="native log scanner is not available"):
        _document(path, True)
    assert _document(path, None) == _document(path, False)  # falls back to Python


@needs_native
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(data=_log())
def test_mutated_logs_json_identical(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "mutated.log"
    path.write_bytes(data)
    _same(path)


@needs_native
def test_an_error_of_write_reaches_the_caller_as_it_was(tmp_path: Path) -> None:
    """A closed pipe (``reprobuild log BIG --json | head``) raises BrokenPipeError out of
    the scanner, which click turns into a quiet exit 1 as before."""
    path = next(p for p in LOG_FIXTURES if "python_logger_verbose" in p.name)

    def write(view: memoryview) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        native_json(path, LogParser(), write, RecordWriter().record)
