"""The tie rule on the TensorRT path: the builder has already chosen the fastest as measured,
so reprobuild writes the rule's choice with ``update()`` and builds again from the cache.

The stand-in times every candidate with run-to-run noise and prints the editable-cache
table (``tests/trt_standin/_impl.py`` says where TensorRT prints it), one averaged time per
candidate, as TensorRT does with ``avg_timing_iterations``: so the band is the setting alone.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import reprobuild
from reprobuild.lock.yamlio import load_lock
from reprobuild.types import LOG_TIE_BAND, BuildSettings
from reprobuild.workflow.ties import MEASURED_LOG
from tests.conftest import EXAMPLES
from tests.test_trt_variants import install_standin


def _record(
    tmp_path: Path, name: str, settings: BuildSettings | None = None, **kw: object
) -> tuple:
    model = tmp_path / "cnn.onnx"
    if not model.exists():
        shutil.copy(EXAMPLES / "cnn.onnx", model)
    lock = tmp_path / f"{name}.lock"
    engine = tmp_path / f"{name}.engine"
    reprobuild.build(
        model,
        lock=lock,
        out=engine,
        backend="tensorrt",
        cache_dir=tmp_path / f"caches-{name}",
        settings=settings,
        **kw,
    )
    report = json.loads(Path(f"{engine}.report.json").read_text())
    return load_lock(lock), report


def _spy_updates(trt: object, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys ``ITimingCache.update()`` calls edit (give a value other than the one the
    cache holds), in order: a key written back with its own value is no edit."""
    updates: list[str] = []
    original = trt.ITimingCache.update

    def spy(self, key, value):
        held = self.query(key)
        if (held.tacticHash, held.timingMSec) != (value.tacticHash, value.timingMSec):
            updates.append(str(key))
        return original(self, key, value)

    monkeypatch.setattr(trt.ITimingCache, "update", spy)
    return updates


def test_the_rules_choice_is_written_with_update_and_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trt = install_standin(monkeypatch)
    updates = _spy_updates(trt, monkeypatch)
    lock, report = _record(tmp_path, "a", apply_tie_rule=True)
    ties = report["tie_break"]
    assert ties["measured"] == MEASURED_LOG and ties["tie_band"] == LOG_TIE_BAND
    # what the log's table says, decided by hand: the lowest hash within LOG_TIE_BAND (5 %)
    # (the stand-in's kernels all accumulate in FP32)
    moved = 0
    for rec in report["records"]:
        if rec["key"] is None or rec["from_cache"] or not rec["candidates"]:
            continue
        costs = {int(c["tactic_hash"], 16): c["cost_ms"] for c in rec["candidates"]}
        best = min(costs.values())
        expected = min(t for t, c in costs.items() if c <= best * (1 + LOG_TIE_BAND))
        entry = lock.by_key()[rec["key"]]
        assert entry.tactic == expected, rec["layer"]
        moved += expected != int(rec["chosen"], 16)
    assert moved > 0 and ties["changed_from_fastest"] == ties["written_back"] == moved
    assert ties["rebuilt_from_cache"] is True
    assert ties["second_build_timed"] == 0  # the second build times nothing
    # every key the rule moved went through update() (pins write only what they change)
    moved_keys = {r["key"] for r in ties["layers"] if r["chosen"] != r["fastest"]}
    assert len(moved_keys) == moved and moved_keys <= set(updates)


def test_band_zero_keeps_the_builders_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_standin(monkeypatch)
    lock, report = _record(tmp_path, "z", BuildSettings(tie_band=0.0))
    assert report["tie_break"]["rebuilt_from_cache"] is False
    for rec in report["records"]:
        if rec["key"] is not None and not rec["from_cache"] and rec["chosen"]:
            assert lock.by_key()[rec["key"]].tactic == int(rec["chosen"], 16)


def _builders_choices(report: dict) -> dict[str, int]:
    return {
        r["key"]: int(r["chosen"], 16)
        for r in report["records"]
        if r["key"] is not None and not r["from_cache"] and r["chosen"]
    }


def test_a_default_recording_makes_no_update_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edited tactic is not proven honoured on TensorRT: by default the rule's choices
    are reported (held back), the builder's are locked, and nothing is rebuilt."""
    trt = install_standin(monkeypatch)
    updates = _spy_updates(trt, monkeypatch)
    lock, report = _record(tmp_path, "d")
    ties = report["tie_break"]
    assert updates == []
    assert ties["written_back"] == 0 and ties["rebuilt_from_cache"] is False
    assert ties["held_back"] == ties["changed_from_fastest"] > 0
    for key, chosen in _builders_choices(report).items():
        assert lock.by_key()[key].tactic == chosen
    assert any("--apply-tie-rule" in w for w in report["warnings"])


def test_a_failing_edit_rebuild_falls_back_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule's rebuild fails: the recording stands with the builder's choices (its engine
    a replay of the recording cache) and the report says why, instead of a failed recording."""
    trt = install_standin(monkeypatch)
    original = trt.Builder.build_serialized_network

    def rebuild_fails(self, network, config):  # the rule's rebuild and its retry
        if 1 <= self._state.builds <= 2:
            self._state.builds += 1
            return None
        return original(self, network, config)

    monkeypatch.setattr(trt.Builder, "build_serialized_network", rebuild_fails)
    lock, report = _record(tmp_path, "f", apply_tie_rule=True)
    ties = report["tie_break"]
    assert ties["fallback"] and ties["written_back"] == 0 and ties["held_back"] > 0
    assert not ties["rebuilt_from_cache"]
    for key, chosen in _builders_choices(report).items():
        assert lock.by_key()[key].tactic == chosen
    assert any("the tie rule's rebuild failed" in w for w in report["warnings"])
