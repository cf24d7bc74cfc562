"""``fleet`` counts machines, so one report given twice (under any name) is refused rather
than counted as two machines, and a report without digests (``null``: a verify that
compared chosen outputs only) is refused rather than agreeing with another such report."""

from __future__ import annotations

import json
import os
from pathlib import Path

REPORT = {
    "target": "reference-x-abc123",
    "inputs_label": "seeded:0",
    "tactic_map_sha256": "a" * 64,
    "outputs_sha256": "b" * 64,
}


def _write(path: Path, **edit) -> str:
    path.write_text(json.dumps({**REPORT, **edit}))
    return str(path)


def test_one_report_twice_is_refused(tmp_path: Path, cli) -> None:
    a = _write(tmp_path / "a.json")
    os.link(a, tmp_path / "b.json")
    for second in (a, str(tmp_path / "b.json"), str(tmp_path / "." / "a.json")):
        r = cli("fleet", a, second)
        assert r.code == 2 and "given twice" in r.err, r


def test_reports_without_digests_are_refused(tmp_path: Path, cli) -> None:
    a = _write(tmp_path / "a.json", outputs_sha256=None)
    b = _write(tmp_path / "b.json", outputs_sha256=None)
    r = cli("fleet", a, b)
    assert r.code == 2 and "with target digests" in r.err, r


def test_two_machines_agree(tmp_path: Path, cli) -> None:
    r = cli("fleet", _write(tmp_path / "a.json"), _write(tmp_path / "b.json"))
    assert r.code == 0, r


def test_merge_rebases_the_model_path(proj: Path, cli) -> None:
    from reprobuild.lock.yamlio import load_lock

    (proj / "sub").mkdir()
    r = cli("merge", "t.lock", "--out", "sub/m.lock")
    assert r.code == 0, r
    assert load_lock(proj / "sub" / "m.lock").model.path == "../mlp.onnx"
    r = cli("merge", "t.lock", "--out", "m2.lock")
    assert load_lock(proj / "m2.lock").model.path == "mlp.onnx"
