"""``diff`` labels a deliberate pin ``pinned`` ahead of the tie band's verdict; ``show
--candidates`` prints each candidate's recorded time where the lock or report has it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from reprobuild.lock.yamlio import load_lock, save_lock

from .conftest import EXAMPLES, sample_lock


def test_a_pinned_change_is_labelled_pinned(cli, tmp_path: Path) -> None:
    a = sample_lock()
    for e in a.layers:  # every layer recorded a near-tie with its second candidate
        e.band_ms, e.ties = 0.1, [e.tactic, e.candidates[1].tactic]
    save_lock(a, tmp_path / "a.lock")
    shutil.copy(tmp_path / "a.lock", tmp_path / "b.lock")
    b = str(tmp_path / "b.lock")
    assert cli("pin", "layer=layer0", "tactic=kern_1", "--lock", b).code == 0
    assert cli("pin", "layer=layer1", "tactic=kern_2", "--lock", b).code == 0
    r = cli("diff", str(tmp_path / "a.lock"), b)
    assert r.code == 1, r
    rows = {line.split()[1]: line for line in r.out.splitlines() if line.startswith("~")}
    assert rows["layer0"].endswith("pinned") and rows["layer1"].endswith("pinned")
    assert "noise" not in r.out and "(2 pinned)" in r.out
    doc = json.loads(cli("diff", str(tmp_path / "a.lock"), b, "--json").out)
    assert [c["change"] for c in doc["changed"]] == ["pinned", "pinned"]
    assert doc["changed"][0]["in_band"] is True  # the band's own verdict is still there
    # unpinned, the in-band change is noise again
    assert cli("unpin", "layer=layer0", "--lock", b).code == 0
    r = cli("diff", str(tmp_path / "a.lock"), b)
    rows = {line.split()[1]: line for line in r.out.splitlines() if line.startswith("~")}
    assert rows["layer0"].endswith("noise (in band)") and rows["layer1"].endswith("pinned")


def test_pinned_column_without_any_band(cli, tmp_path: Path) -> None:
    save_lock(sample_lock(), tmp_path / "a.lock")
    shutil.copy(tmp_path / "a.lock", tmp_path / "b.lock")
    assert cli("pin", "layer=layer2", "tactic=kern_1", "--lock", str(tmp_path / "b.lock")).code == 0
    r = cli("diff", str(tmp_path / "a.lock"), str(tmp_path / "b.lock"))
    assert r.code == 1 and "change" in r.out.splitlines()[0] and "pinned" in r.out, r


def test_show_candidates_prints_recorded_times(cli, tmp_path: Path, monkeypatch) -> None:
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    monkeypatch.chdir(tmp_path)
    r = cli("build", "cnn.onnx", "--lock", "t.lock", "--out", "m.engine", "--backend", "reference")
    assert r.code == 0, r
    lock = load_lock("t.lock")
    doc = json.loads(cli("show", "--lock", "t.lock", "--candidates", "--json").out)
    for layer, e in zip(doc["layers"], lock.layers, strict=True):
        times = {c["tactic"]: c["time_ms"] for c in layer["candidates"]}
        assert times.pop(layer["tactic"]) == e.time_ms  # the locked one's, from the lock
        assert set(times.values()) <= {None}
    r = cli("show", "--lock", "t.lock", "--candidates", "--report", "m.engine.report.json")
    assert r.code == 0 and "time (ms)" in r.out.splitlines()[0], r
    doc = json.loads(
        cli(
            "show", "-l", "t.lock", "--candidates", "--report", "m.engine.report.json", "--json"
        ).out
    )
    assert all(c["time_ms"] is not None for e in doc["layers"] for c in e["candidates"])
    assert cli("show", "-l", "t.lock", "--report", "m.engine.report.json").code == 2
    Path("bad.json").write_text("{}")
    r = cli("show", "-l", "t.lock", "--candidates", "--report", "bad.json")
    assert r.code == 2 and "not a `reprobuild build` report" in r.err, r


def test_a_pinned_kernel_is_not_shown_beside_the_time_of_the_kernel_it_replaced(
    cli, tmp_path: Path, monkeypatch
) -> None:
    """A pin keeps the key's recorded time (the builder's choice's): diff says it is the
    key's, not the pinned kernel's."""
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    monkeypatch.chdir(tmp_path)
    assert cli("build", "cnn.onnx", "--lock", "a.lock", "--backend", "reference").code == 0
    shutil.copy("a.lock", "b.lock")
    e = next(e for e in load_lock("a.lock").layers if e.runs is not False and e.time_ms)
    other = next(c for c in e.candidates if c.tactic != e.tactic)
    assert cli("pin", f"layer={e.layer}", f"tactic={other.kernel}", "--lock", "b.lock").code == 0
    row = next(line for line in cli("diff", "a.lock", "b.lock").out.splitlines() if "~" in line)
    assert f"{other.kernel} pinned (the key keeps {e.time_ms:.4g} ms)" in row
    assert f"{other.kernel} {e.time_ms:.4g} ms" not in row
