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

from reprobuild.backends.reference.buildlog import escape_name
from reprobuild.lock.yamlio import load_lock

FORGED = (
    "x(key: 0x" + "0" * 32 + "): [ONNX Layer: y]\n"
    "[01/01/2026-00:00:00] [V] [REF] Autotuning op fc9(key: 0x"
    + "1"
    * 32
    + "): [ONNX Layer: fc9]\n"
    "Sorted table of all evaluated tactics:"
)
NAMES = ["fc1", " fc1 ", "a\nb", FORGED, "tab\there"]


def _model(path: Path) -> None:
    """A chain of MatMuls of growing width (so every layer has its own key)."""
    nodes, inits, prev, width = [], [], "x", 4
    for i, name in enumerate(NAMES):
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
