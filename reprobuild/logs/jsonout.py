"""``reprobuild log FILE --json`` written as a stream, without a dict per record.

Why: a 1 GB log holds millions of records and candidates; building ``to_json()`` dicts and
handing them to ``json.dumps`` cost more than parsing the log. Here each record is written
as text straight from its fields, strings are escaped once (kernel, runner and format names
repeat across a log, so their escaped forms are memoised), and records go out in batches as
they are parsed. The text is the one ``json.dumps(rec.to_json(), ensure_ascii=False)``
gives, byte for byte, so the document and its values are unchanged (tests/logs/test_jsonout.py
holds the two together).
"""

from __future__ import annotations

import json
import math
import os
from functools import partial
from json.encoder import encode_basestring  # the C escaper json.dumps uses (ensure_ascii=False)
from typing import Any, TextIO

from reprobuild.logs.parser import LogParser
from reprobuild.logs.records import Candidate, LogWarning, TacticRecord
from reprobuild.logs.source import LogSource, open_log
from reprobuild.logs.split import iter_pieces

__all__ = ["RecordWriter", "render_records", "write_log_json_file"]

_MEMO_MAX = 65536  # distinct names kept escaped; a log has a few thousand kernels


class RecordWriter:
    """Turns records into the JSON text of their ``to_json()``, reusing escaped names."""

    def __init__(self) -> None:
        self._memo: dict[str, str] = {}

    def string(self, text: str | None) -> str:
        """A JSON string (or ``null``), escaped as ``json.dumps(..., ensure_ascii=False)``."""
        if text is None:
            return "null"
        memo = self._memo
        out = memo.get(text)
        if out is None:
            out = encode_basestring(text)
            if len(memo) < _MEMO_MAX:
                memo[text] = out
        return out

    @staticmethod
    def number(value: float | None) -> str:
        """A finite number as json.dumps writes it; inf, nan and None as ``null``."""
        if value is None:
            return "null"
        if isinstance(value, float):
            return float.__repr__(value) if math.isfinite(value) else "null"
        return int.__repr__(value)

    def candidates(self, cands: list[Candidate]) -> str:
        """The ``candidates`` array's items; the hot loop of a big log, so kept inline: an
        f-string per candidate (compiled, where a ``%`` template is parsed on every use)
        with its escaped kernel and runner looked up in the memo."""
        memo = self._memo
        string = self.string
        parts = []
        for tid, thash, kernel, cost, runner in cands:
            k = memo.get(kernel) or string(kernel)  # type: ignore[arg-type]  # None: "null"
            r = memo.get(runner) or string(runner)  # type: ignore[arg-type]
            i = "null" if tid is None else int.__repr__(tid)
            # cost - cost is 0.0 only for finite numbers: inf and nan become null
            c = "null" if cost is None or cost - cost != 0 else repr(cost)
            parts.append(
                f'{{"tactic_id": {i}, "tactic_hash": "0x{thash:x}", "kernel": {k}, '
                f'"cost_ms": {c}, "runner": {r}}}'
            )
        return ", ".join(parts)

    def record(self, rec: TacticRecord) -> str:
        """``json.dumps(rec.to_json(), ensure_ascii=False)`` without the dict."""
        s = self.string
        onnx = ", ".join([s(n) for n in rec.onnx_layers])
        cands = self.candidates(rec.candidates)
        chosen = "null" if rec.chosen is None else f'"0x{rec.chosen:x}"'
        return (
            f'{{"layer": {s(rec.layer)}, "key": {s(rec.key)}, "onnx_layers": [{onnx}], '
            f'"format": {s(rec.format)}, "formats": {s(rec.formats)}, '
            f'"line": {int.__repr__(rec.line)}, "runner": {s(rec.runner)}, '
            f'"from_cache": {"true" if rec.from_cache else "false"}, "chosen": {chosen}, '
            f'"chosen_kernel": {s(rec.chosen_kernel)}, '
            f'"chosen_cost_ms": {self.number(rec.chosen_cost_ms)}, '
            f'"num_candidates": {len(rec.candidates)}, "candidates": [{cands}]}}'
        )


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _head(source: str) -> str:
    return '{"file": ' + _dump(source) + ', "records": ['


def _tail(parser: Any) -> str:
    """What follows the records: the warnings and engine layers the parser collected."""
    warnings: list[LogWarning] = parser.warnings
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
    return (
        "\n], "
        + ('"warnings": ' + _dump([w.to_json() for w in warnings]) + ", ")
        + ('"warnings_dropped": ' + str(parser.warnings_dropped) + ", ")
        + ('"engine_layers": ' + _dump(layers) + "}\n")
    )


def render_records(writer: RecordWriter, records: list[TacticRecord]) -> str:
    """The records' text, each after the separator ``,\n  `` (the writer drops the first
    comma): one string per batch of records, so the text can be made in another process."""
    record = writer.record
    return "".join([",\n  " + record(rec) for rec in records])


def write_log_json_file(
    out: TextIO, src: LogSource | str | os.PathLike[str], parser: LogParser
) -> None:
    """``reprobuild log FILE --json``: the records as they are parsed, then the warnings and
    engine layers the parser collected (known only once the records are exhausted); the
    log is opened once (or given as a path) and read in chunks, a large file by two
    processes (``logs.split``). ``parser`` holds the warnings and engine layers afterwards."""
    if not isinstance(src, LogSource):
        src = open_log(src)
    writer = RecordWriter()
    out.write(_head(src.name))
    first = True
    for piece in iter_pieces(src, parser, partial(render_records, writer)):
        text = piece.text
        if first and text:
            text, first = text[1:], False  # no comma before the first record
        out.write(text)
    out.write(_tail(parser))
