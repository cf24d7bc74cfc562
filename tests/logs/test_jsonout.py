"""The streamed ``log --json`` writer against the per-record dict path it replaced.

The old path (``json.dumps(rec.to_json())`` per record) is kept here as the oracle: on every
log fixture, a log read in many chunks, the parser's edge inputs and hypothesis-made logs,
the streamed document must be the same text and parse to the same value.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

from reprobuild.cli.main import app
from reprobuild.logs.jsonout import RecordWriter, write_log_json_file
from reprobuild.logs.parser import LogParser
from reprobuild.logs.reader import iter_file
from reprobuild.logs.records import Candidate, TacticRecord
from tests.logs.test_parser_streams import EDGES, mutated_logs

FIX = Path(__file__).resolve().parent.parent / "fixtures"
LOG_FIXTURES = sorted((FIX / "trt-logs").glob("*.log")) + sorted((FIX / "logparse").glob("*.log"))


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def old_document(path: Path) -> str:
    """What ``reprobuild log FILE --json`` wrote before streaming (the per-record dicts)."""
    parser = LogParser(source=str(path))
    out = io.StringIO()
    out.write('{"file": ' + _dump(str(path)) + ', "records": [')
    first = True
    for rec in iter_file(path, parser):
        out.write(("\n  " if first else ",\n  ") + _dump(rec.to_json()))
        first = False
    out.write("\n], ")
    out.write('"warnings": ' + _dump([w.to_json() for w in parser.warnings]) + ", ")
    out.write('"warnings_dropped": ' + str(parser.warnings_dropped) + ", ")
    layers = [
        {
            "name": e.name,
            "layer_type": e.layer_type,
            "tactic_name": e.tactic_name,
            "tactic_value": None if e.tactic_value is None else f"0x{e.tactic_value:x}",
            "metadata": list(e.metadata),
        }
        for e in parser.engine_layers
    ]
    out.write('"engine_layers": ' + _dump(layers) + "}\n")
    return out.getvalue()


def new_document(path: Path) -> str:
    """What ``reprobuild log FILE --json`` writes now."""
    out = io.StringIO()
    write_log_json_file(out, path, LogParser(source=str(path)))
    return out.getvalue()


def _same(path: Path) -> str:
    old, new = old_document(path), new_document(path)
    if new != old:
        i = next((k for k, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), None)
        i = min(len(old), len(new)) if i is None else i
        raise AssertionError(
            f"{path.name}: the streamed document differs from the per-record one at {i}:\n"
            f"  per-record: {old[max(0, i - 120) : i + 80]!r}\n"
            f"  streamed:   {new[max(0, i - 120) : i + 80]!r}"
        )
    return new


def test_fixtures_are_there() -> None:
    assert len(LOG_FIXTURES) >= 10


@pytest.mark.parametrize("path", LOG_FIXTURES, ids=lambda p: p.name)
def test_streamed_equals_per_record_path(path: Path) -> None:
    new = _same(path)  # the same text, not only the same value
    assert json.loads(new) == json.loads(old_document(path))


def test_a_log_of_many_chunks(tmp_path: Path) -> None:
    unit = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in LOG_FIXTURES)
    big = tmp_path / "big.log"
    big.write_bytes(unit * 12)  # ~3.5 MB: several reads, chunks cut mid-line
    one = tmp_path / "one.log"
    one.write_bytes(unit)
    doc = json.loads(_same(big))
    assert len(doc["records"]) == 12 * len(json.loads(_same(one))["records"]) > 0


@pytest.mark.parametrize("data", EDGES, ids=range(len(EDGES)))
def test_edge_inputs(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "edge.log"
    path.write_bytes(data)
    _same(path)


@pytest.mark.parametrize(
    "row",
    [
        b"   99999999999999999999, 0.5, 1, 1, k, 0x1,\n",  # an id past 64 bits
        b'   -0, 0.5, 1, 1, k\x01"\\ \xc3\xa9, 0x1,\n',  # escapes, non-ASCII
    ],
)
def test_table_rows_with_big_ids_and_escapes(row: bytes, tmp_path: Path) -> None:
    path = tmp_path / "row.log"
    path.write_bytes(b"Autotuning op a(key: 0x" + b"A" * 32 + b"):\n" + row)
    doc = json.loads(_same(path))
    ((cand,),) = [r["candidates"] for r in doc["records"]]
    assert cand["tactic_hash"] == "0x1"
    assert cand["tactic_id"] == (99999999999999999999 if b"9999" in row else 0)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(data=mutated_logs())
def test_mutated_logs(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "mutated.log"
    path.write_bytes(data)
    _same(path)


def test_a_write_error_reaches_the_caller_as_it_was() -> None:
    """A closed pipe (``reprobuild log BIG --json | head``) raises BrokenPipeError out of
    the writer, which the CLI turns into a quiet exit as for any other command."""
    path = next(p for p in LOG_FIXTURES if "python_logger_verbose" in p.name)

    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        write_log_json_file(ClosedPipe(), path, LogParser())


def test_cli_output_is_the_streamed_document() -> None:
    path = next(p for p in LOG_FIXTURES if json.loads(old_document(p))["records"])
    result = CliRunner().invoke(app, ["log", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(old_document(path))


def _record(**over: Any) -> TacticRecord:
    fields: dict[str, Any] = dict(
        layer="conv1",
        key="k",
        onnx_layers=("a",),
        candidates=[],
        chosen=None,
        chosen_kernel=None,
        chosen_cost_ms=None,
        from_cache=False,
        runner=None,
        line=1,
        format="editable",
    )
    fields.update(over)
    return TacticRecord(**fields)


@pytest.mark.parametrize(
    "rec",
    [
        _record(),
        _record(
            layer='quote " back\\slash \x01 tab\t ünïcode \u2028 😀',
            key=None,
            onnx_layers=(),
            formats="Float(1,2) -> Half",
            chosen=(1 << 64) - 1,
            chosen_kernel="sm80_xmma\n",
            chosen_cost_ms=float("nan"),
            from_cache=True,
            runner="CaskConvolution",
            candidates=[
                Candidate(None, 0, None, None),
                Candidate(3, 0xABC, "k\u00e9 %s 100%", float("inf"), "R%d"),
                Candidate(0, 5, "k", 1e-300, None),
                Candidate(7, 6, "k", 12.5, None),
            ],
        ),
    ],
)
def test_record_text_is_json_dumps_of_to_json(rec: TacticRecord) -> None:
    text = RecordWriter().record(rec)
    assert text == _dump(rec.to_json())
    parsed = json.loads(text)
    assert parsed["num_candidates"] == len(rec.candidates)
    costs = [c["cost_ms"] for c in parsed["candidates"]]
    assert all(c is None or math.isfinite(c) for c in costs)
