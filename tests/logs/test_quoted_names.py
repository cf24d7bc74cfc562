"""A quoted node name is one token of its log line.

The reference backend writes a name that could be read as something else as a JSON string
(``escape_name``); the parser must read it back whole: a name carrying another layer's
``(key: ...)`` never lends its table that key, and a name that looks like a candidate row
(``Tactic: 0x1 Time: 0.1``) is never one.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reprobuild.logs.lines import escape_name, mask_quoted
from reprobuild.logs.reader import parse_lines

PREFIX = "[11/21/2026-10:00:00] [V] [REF] "
FC1 = "0x" + "1" * 32
FC2 = "0x" + "2" * 32


def _table(name: str, key: str, tactics: tuple[int, ...]) -> list[str]:
    shown = escape_name(name)
    lines = [
        f"Autotuning op {shown}(key: {key}): [ONNX Layer: {shown}]",
        "Sorted table of all evaluated tactics:",
        "tactic_id, cost(in ms), cost/fastest_cost, prediction_correlation, kernel_name, "
        "tactic_hash, tunable_parameter",
    ]
    lines += [
        f"{i:4d}, 0.{i + 1}000000, 1.00000, 1.00000, k{t:x}, 0x{t:x},"
        for i, t in enumerate(tactics)
    ]
    lines += [
        f"The selected tactic is (tactic hash, cost(in ms)):0x{tactics[0]:x}, 0.100000",
        f"Writing the best tactic (0x{tactics[0]:x}) to cache",
    ]
    return [PREFIX + line for line in lines]


def test_a_name_carrying_another_layers_key_keeps_its_own_table() -> None:
    name = f"fc2(key: {FC1})"
    lines = _table("fc1", FC1, (0xA1, 0xA2)) + _table(name, FC2, (0xB1, 0xB2))
    records = list(parse_lines(lines))
    assert [(r.layer, r.key) for r in records] == [("fc1", FC1), (name, FC2)]
    assert [c.tactic_hash for c in records[1].candidates] == [0xB1, 0xB2]
    assert records[1].onnx_layers == (name,)


def test_a_name_that_reads_as_a_candidate_row_is_not_one() -> None:
    name = "Tactic: 0x1 Time: 0.1"
    assert escape_name(name) != name
    lines = _table(name, FC2, (0xB1,))
    cached = (
        f"{escape_name(name)} [Float(4,1) -> Float(5,1)] got cached result: k, tactic 0xb1, 0.1 ms"
    )
    records = list(parse_lines([*lines, PREFIX + cached]))
    assert [(r.layer, r.key, r.from_cache) for r in records] == [
        (name, FC2, False), (name, None, True),
    ]  # fmt: skip
    assert [c.tactic_hash for c in records[0].candidates] == [0xB1]
    assert records[1].formats == "Float(4,1) -> Float(5,1)"


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_name_round_trips_through_its_table(name: str) -> None:
    (record,) = parse_lines(_table(name, FC2, (0xC1, 0xC2)))
    assert (record.layer, record.key, record.onnx_layers) == (name, FC2, (name,))
    assert [c.tactic_hash for c in record.candidates] == [0xC1, 0xC2]


def test_masking_keeps_places_and_plain_lines() -> None:
    line = 'a "b(key: x)" c "d\\"e" f'
    masked = mask_quoted(line)
    assert len(masked) == len(line) and "(key" not in masked and masked.startswith('a "')
    assert mask_quoted("no quotes") == "no quotes" and mask_quoted('lone " quote') == 'lone " quote'
