"""The streamed ``log --json`` writer against the per-record dict path it replaced.

The old path (``json.dumps(rec.to_json())`` per record) is kept here as the oracle: on every
log fixture, with either parser, the streamed document must be the same text and parse to
the same value.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from reprobuild.cli.main import app
from reprobuild.logs.jsonout import RecordWriter, write_log_json
from reprobuild.logs.parser import LogParser
from reprobuild.logs.reader import iter_file, native_available
from reprobuild.logs.records import Candidate, TacticRecord

FIX = Path(__file__).resolve().parent.parent / "fixtures"
LOG_FIXTURES = sorted((FIX / "trt-logs").glob("*.log")) + sorted((FIX / "logparse").glob("*.log"))
NATIVE = [False, True] if native_available() else [False]


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def old_document(path: Path, native: bool) -> str:
    """What ``reprobuild log FILE --json`` wrote before streaming (the per-record dicts)."""
    parser = LogParser(source=str(path))
    out = io.StringIO()
    out.write('{"file": ' + _dump(str(path)) + ', "records": [')
    first = True
    for rec in iter_file(path, parser, native=native):
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


def new_document(path: Path, native: bool) -> str:
    parser = LogParser(source=str(path))
    out = io.StringIO()
    write_log_json(out, str(path), iter_file(path, parser, native=native), parser)
    return out.getvalue()


def test_fixtures_are_there() -> None:
    assert len(LOG_FIXTURES) >= 10


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("path", LOG_FIXTURES, ids=lambda p: p.name)
def test_streamed_equals_per_record_path(path: Path, native: bool) -> None:
    old, new = old_document(path, native), new_document(path, native)
    assert json.loads(new) == json.loads(old)
    assert new == old  # the same text, not only the same value


def test_cli_output_is_the_streamed_document() -> None:
    path = next(p for p in LOG_FIXTURES if json.loads(old_document(p, False))["records"])
    result = CliRunner().invoke(app, ["log", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(old_document(path, native_available()))


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
