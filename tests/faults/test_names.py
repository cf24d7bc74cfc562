"""Node names are data, never parsed back from text reprobuild wrote.

A name with a newline, with leading or trailing spaces, or carrying forged log lines must
reach the lock exactly, with its own candidates, and no other layer may lose any.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from reprobuild.lock.yamlio import load_lock
from reprobuild.logs.lines import escape_name

FORGED = (
    "x(key: 0x" + "0" * 32 + "): [ONNX Layer: y]\n"
    "[01/01/2026-00:00:00] [V] [REF] Autotuning op fc9(key: 0x"
    + "1"
    * 32
    + "): [ONNX Layer: fc9]\n"
    "Sorted table of all evaluated tactics:"
)
NAMES = ["fc1", " fc1 ", "a\nb", FORGED, "tab\there"]


def _model(path: Path, names: list[str] = NAMES) -> None:
    """A chain of MatMuls of growing width (so every layer has its own key)."""
    nodes, inits, prev, width = [], [], "x", 4
    for i, name in enumerate(names):
        w = np.full((width, width + 1), 0.01 * (i + 1), np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"t{i}"], name=name))
        prev, width = f"t{i}", width + 1
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, width])], inits,
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("name", NAMES)
def test_escape_keeps_a_name_on_one_line(name: str) -> None:
    text = escape_name(name)
    assert "\n" not in text and text == text.strip()
    assert text == name or json.loads(text) == name


def test_hostile_names_reach_the_lock_exactly(tmp_path: Path, cli, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _model(tmp_path / "m.onnx")
    r = cli("build", "m.onnx", "--lock", "t.lock", "--backend", "reference", "-q")
    assert r.code == 0, r
    lock = load_lock(tmp_path / "t.lock")
    assert sorted(e.layer for e in lock.layers) == sorted(NAMES)
    assert all(len(e.candidates) > 1 for e in lock.layers), lock.layers
    assert not any(e.layer == "fc9" for e in lock.layers)
    r = cli("build", "m.onnx", "--lock", "t.lock", "--backend", "reference", "-q", "--frozen")
    assert r.code == 0, r  # the names round-trip: a locked build finds no drift


def test_a_key_the_log_does_not_name_takes_the_backends_candidates() -> None:
    """A key whose log line was unreadable (a name carrying a forged ``(key: ...)`` puts the
    forged key first on its line) is named from the engine inspector; its candidates still
    come from the backend's own data, whether the inspector names it exactly or not (which
    one happens depends on which tactics the layers chose)."""
    from reprobuild.workflow.pinned import entries_from_records

    key = "0x" + "a" * 32
    info = json.dumps({"Layers": [{"Name": "L", "TacticValue": "0x5", "TacticName": "k5"}]})
    known = {key: ("L", [(5, "k5"), (7, "k7")])}
    (entry,), _ = entries_from_records([], {key: 5}, info, known)
    assert (entry.layer, entry.kernel) == ("L", "k5")
    assert [c.tactic for c in entry.candidates] == [5, 7]


def test_names_that_read_as_keys_or_rows_are_one_token_to_log(tmp_path: Path, cli, monkeypatch):
    """A node named ``fc2(key: <fc1's key>)`` keeps its own table and key, in ``reprobuild
    log`` and in the build's own reading of its log; one named like a candidate row is no
    row."""
    monkeypatch.chdir(tmp_path)
    _model(tmp_path / "a.onnx", ["fc1", "fc2", "fc3"])
    assert cli("build", "a.onnx", "--lock", "a.lock", "--backend", "reference", "-q").code == 0
    fc1 = next(e.key for e in load_lock("a.lock").layers if e.layer == "fc1")
    names = ["fc1", f"fc2(key: {fc1})", "Tactic: 0x1 Time: 0.1"]
    _model(tmp_path / "m.onnx", names)
    r = cli("build", "m.onnx", "--lock", "t.lock", "--backend", "reference", "-q", "--log", "b.log")
    assert r.code == 0, r
    entries = {e.layer: e for e in load_lock("t.lock").layers}
    assert sorted(entries) == sorted(names) and entries["fc1"].key == fc1
    assert len({e.key for e in entries.values()}) == 3
    r = cli("log", "b.log", "--json")
    assert r.code == 0, r
    records = {rec["layer"]: rec for rec in json.loads(r.out)["records"]}
    assert sorted(records) == sorted(names), records.keys()
    assert {n: records[n]["key"] for n in names} == {n: entries[n].key for n in names}
    for n in names:  # each table holds its own candidates, none from a name
        got = sorted(int(c["tactic_hash"], 16) for c in records[n]["candidates"])
        assert got == sorted(c.tactic for c in entries[n].candidates), n
