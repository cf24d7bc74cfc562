"""Kernel rules and ``--distributive-independence`` on the TensorRT path (the stand-in).

TensorRT times every tactic before reprobuild can act, so a denied builder's choice is
replaced the way pins are applied: the allowed tactic is written with ``update()`` and the
engine built again from that cache (checked like any locked build)."""

from __future__ import annotations

import enum
import shutil
from pathlib import Path

import pytest

import reprobuild
from reprobuild.errors import UsageError
from reprobuild.lock.yamlio import load_lock
from reprobuild.types import BuildSettings, KernelRule
from tests.conftest import EXAMPLES
from tests.test_tiebreak_trt import _record, _spy_updates
from tests.test_trt_variants import install_standin


def _one_key_layer(report: dict) -> dict:
    """A timed layer of one key with several candidates, from a recording's report."""
    recs = [r for r in report["records"] if r["key"] and not r["from_cache"]]
    names = [r["layer"] for r in recs]
    return next(r for r in recs if len(r["candidates"]) > 2 and names.count(r["layer"]) == 1)


def test_a_denied_builders_choice_is_replaced_through_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trt = install_standin(monkeypatch)
    _, first = _record(tmp_path, "a")
    rec = _one_key_layer(first)
    slowest = max(rec["candidates"], key=lambda c: c["cost_ms"])["tactic_hash"]
    deny = tuple(
        KernelRule(c["tactic_hash"], rec["layer"])
        for c in rec["candidates"]
        if c["tactic_hash"] != slowest
    )
    updates = _spy_updates(trt, monkeypatch)
    lock, report = _record(tmp_path, "b", BuildSettings(deny=deny))
    entry = lock.by_key()[rec["key"]]
    assert entry.tactic == int(slowest, 16)  # the only allowed candidate
    builder = next(r for r in report["records"] if r["key"] == rec["key"])["chosen"]
    assert builder != slowest  # the builder chose a denied one: written back, rebuilt
    assert rec["key"] in updates and report["tie_break"]["denied_written_back"] >= 1
    assert report["tie_break"]["rebuilt_from_cache"] is True
    # TensorRT timed them: the lock lists the denied candidates, and show marks them
    assert len(entry.candidates) == len(rec["candidates"])
    lock_path = tmp_path / "b.lock"
    from reprobuild.lock.edit import candidate_rows

    rows = next(r for r in candidate_rows(lock, {}) if r["key"] == rec["key"])
    assert sum("denied" in c for c in rows["candidates"]) == len(deny)
    # a locked build of it follows the lock (cache map and engine kernels checked)
    model = tmp_path / "cnn.onnx"
    reprobuild.build(model, lock=lock_path, out=tmp_path / "c.engine", backend="tensorrt",
                     cache_dir=tmp_path / "caches-b")  # fmt: skip
    assert load_lock(lock_path).by_key()[rec["key"]].tactic == int(slowest, 16)


def test_distributive_independence_sets_the_flag_and_is_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trt = install_standin(monkeypatch)
    seen: list[bool] = []
    original = trt.Builder.build_serialized_network

    def spy(self, network, config):
        seen.append(bool(config.get_flag(trt.BuilderFlag.DISTRIBUTIVE_INDEPENDENCE)))
        return original(self, network, config)

    monkeypatch.setattr(trt.Builder, "build_serialized_network", spy)
    lock, report = _record(tmp_path, "d", BuildSettings(distributive_independence=True))
    assert seen and all(seen)
    assert lock.settings.distributive_independence
    assert "  distributive_independence: true\n" in (tmp_path / "d.lock").read_text()
    # the flag changes the candidates (the stand-in drops its batch-dependent tiles)
    kernels = {c.kernel for e in lock.layers for c in e.candidates}
    assert kernels and not any("_stage5" in (k or "") for k in kernels)
    # a locked build takes the flag from the lock
    seen.clear()
    reprobuild.build(tmp_path / "cnn.onnx", lock=tmp_path / "d.lock", out=tmp_path / "e.engine",
                     backend="tensorrt", cache_dir=tmp_path / "caches-d")  # fmt: skip
    assert seen and all(seen)
    # without the flag the lock keeps its bytes as before: no field written
    plain, _ = _record(tmp_path, "p")
    assert "distributive_independence" not in (tmp_path / "p.lock").read_text()
    assert any("_stage5" in (c.kernel or "") for e in plain.layers for c in e.candidates)


def test_distributive_independence_is_refused_where_the_bindings_lack_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trt = install_standin(monkeypatch)
    members = {k: int(v) for k, v in trt.BuilderFlag.__members__.items()}
    del members["DISTRIBUTIVE_INDEPENDENCE"]  # bindings of a version without the flag
    monkeypatch.setattr(trt, "BuilderFlag", enum.IntEnum("BuilderFlag", members))
    model = tmp_path / "cnn.onnx"
    shutil.copy(EXAMPLES / "cnn.onnx", model)
    with pytest.raises(
        UsageError,
        match=r"TensorRT 10\.13\.3\.9 has no BuilderFlag\.DISTRIBUTIVE_INDEPENDENCE; drop",
    ):
        reprobuild.build(
            model, lock=tmp_path / "x.lock", backend="tensorrt", cache_dir=tmp_path / "c",
            settings=BuildSettings(distributive_independence=True),
        )  # fmt: skip
    assert not (tmp_path / "x.lock").exists()
