"""``build --records N``: the tie rule pools the candidates' times of N recording builds.

Held on injected timings only. On the reference backend, the first recording's costs put
one candidate per key far ahead (the ``seed`` knob: each rank 1000x the previous) and the
later recordings' costs make every candidate a near-tie (the ``tie`` knob): pooled, every
candidate's fastest run lies within the band, so the rule's order alone decides, and where
that differs from the first recording's choice the tactic is written back and the engine
rebuilt from the first recording's cache. On the TensorRT stand-in every build draws new
per-candidate noise (``tests/trt_standin/_impl.py``), as two builds on a GPU do.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import reprobuild
from reprobuild.backends.reference import ReferenceBackend
from reprobuild.backends.reference.knob import parse_timing_knob, seeded_ranks
from reprobuild.errors import LockError, UsageError
from reprobuild.lock.yamlio import dumps_lock, load_lock, loads_lock
from reprobuild.tiebreak import TieCandidate, decide, rule_key
from reprobuild.types import LOG_TIE_BAND, BuildSettings
from reprobuild.workflow.ties import noise_warning
from tests.conftest import EXAMPLES, sample_lock
from tests.test_trt_variants import install_standin


class _PerRecording(ReferenceBackend):
    """The reference backend with one timing knob per build, in order (the last repeats)."""

    def __init__(self, knobs: list[str]) -> None:
        super().__init__(timing=knobs[0])
        self.knobs, self.builds = knobs, 0

    def build(self, *args, **kwargs):
        self.timing = parse_timing_knob(self.knobs[min(self.builds, len(self.knobs) - 1)])
        self.builds += 1
        return super().build(*args, **kwargs)


@pytest.fixture()
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _rule_first(entry) -> int:
    return min(
        entry.candidates, key=lambda c: rule_key(TieCandidate(c.tactic, c.kernel, ()))
    ).tactic


def test_pooled_recordings_decide_and_the_rule_is_written_back(work: Path) -> None:
    be = _PerRecording(["seed:5", "tie:1", "tie:2"])
    reprobuild.build(
        "cnn.onnx", lock="p.lock", out="p.engine", backend=be, cache_dir="caches",
        settings=BuildSettings(tie_records=3),
    )  # fmt: skip
    assert be.builds == 4  # three recordings and the rebuild from the first one's cache
    lock = load_lock("p.lock")
    ties = json.loads(Path("p.engine.report.json").read_text())["tie_break"]
    assert ties["recordings"] == 3 and "3 recording builds" in ties["measured"]
    rows = {r["key"]: r for r in ties["layers"]}
    moved = 0
    for e in lock.layers:
        runs = rows[e.key]["runs_ms"]
        if len(e.candidates) > 1:
            # pooled: every candidate has runs from the near-tie recordings, so every one
            # lies within the band and the rule's order alone decides
            assert all(len(r) > 1 for r in runs.values())
            assert e.near_tie and e.tactic == _rule_first(e)
        # recording 1 alone ("seed:5": 1000x per rank) kept its seeded fastest
        ranks = seeded_ranks(5, e.key, [c.kernel or "" for c in e.candidates])
        moved += e.candidates[ranks.index(0)].tactic != e.tactic
    assert moved > 0 and ties["written_back"] == moved
    assert ties["rebuilt_from_cache"] is True and ties["second_build_timed"] == 0
    # every autotuned engine layer runs the pooled choice of one of its keys
    chosen: dict[str, set[int]] = {}
    for e in lock.layers:
        chosen.setdefault(e.layer, set()).add(e.tactic)
    layers = json.loads(Path("p.engine.layers.json").read_text())["Layers"]
    ran = [(x["Name"], int(x["TacticValue"], 16)) for x in layers if x["Name"] in chosen]
    assert ran and all(tactic in chosen[name] for name, tactic in ran)
    # a locked, frozen rebuild needs no recording and keeps every tactic
    again = reprobuild.build(
        "cnn.onnx", lock="p.lock", out="q.engine", backend=ReferenceBackend(timing="seed:9"),
        cache_dir="caches2", frozen=True,
    )  # fmt: skip
    assert again.tactic_map == lock.tactic_map()


def test_one_recording_alone_keeps_its_own_choice(work: Path) -> None:
    be = _PerRecording(["seed:5", "tie:1"])
    reprobuild.build("cnn.onnx", lock="o.lock", out="o.engine", backend=be, cache_dir="c")
    assert be.builds == 2  # the recording, and the replay of its cache (the engine left)
    ties = json.loads(Path("o.engine.report.json").read_text())["tie_break"]
    assert ties["recordings"] == 1 and ties["written_back"] == 0
    assert all("runs_ms" not in r for r in ties["layers"])
    for row in ties["layers"]:  # 1000x apart: nothing ties, the fastest is kept
        assert row["chosen"] == row["fastest"] and len(row["ties"]) == 1


def test_records_go_in_the_lock_settings_only_when_set() -> None:
    lock = sample_lock()
    assert "tie_records" not in dumps_lock(lock)
    lock.settings = BuildSettings(tie_records=4)
    text = dumps_lock(lock)
    assert "tie_records: 4" in text
    assert loads_lock(text).settings.tie_records == 4
    # it decides between timed candidates: keys and cache names are those of the defaults
    assert lock.settings.fingerprint() == BuildSettings().fingerprint()
    for bad in ("0", "51", "two"):
        with pytest.raises(LockError, match="tie_records"):
            loads_lock(text.replace("tie_records: 4", f"tie_records: {bad}"))


def test_records_out_of_range_is_a_usage_error(cli, tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "mlp.onnx", tmp_path / "mlp.onnx")
    for n in ("0", "51"):
        r = cli("build", str(tmp_path / "mlp.onnx"), "--lock", str(tmp_path / "t.lock"),
                "--records", n)  # fmt: skip
        assert r.code == UsageError.exit_code and "--records" in r.err and "1 to 50" in r.err
        assert not (tmp_path / "t.lock").exists()


def test_trt_pooled_costs_are_the_fastest_of_each_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_standin(monkeypatch)
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    engine = tmp_path / "t.engine"
    reprobuild.build(
        tmp_path / "cnn.onnx", lock=tmp_path / "t.lock", out=engine, backend="tensorrt",
        cache_dir=tmp_path / "caches", settings=BuildSettings(tie_records=3),
        apply_tie_rule=True,  # written back, to check the rule's choice in the lock
    )  # fmt: skip
    lock = load_lock(tmp_path / "t.lock")
    report = json.loads(Path(f"{engine}.report.json").read_text())
    ties = report["tie_break"]
    assert ties["recordings"] == 3 and ties["tie_band"] == LOG_TIE_BAND
    # every candidate of the first recording's table, with one logged time per recording
    logged = {
        r["key"]: {int(c["tactic_hash"], 16): c["cost_ms"] for c in r["candidates"]}
        for r in report["records"]
        if r["key"] is not None and not r["from_cache"] and r["candidates"]
    }
    assert logged and set(logged) == {r["key"] for r in ties["layers"]}
    spread = 0
    for row in ties["layers"]:
        runs = {int(t, 16): v for t, v in row["runs_ms"].items()}
        assert set(runs) == set(logged[row["key"]])
        for tactic, r in runs.items():
            assert len(r) == 3 and r[0] == logged[row["key"]][tactic]  # the first recording's
            spread += max(r) > min(r)  # the stand-in draws new noise per build
        # decided by hand from the pooled runs: the lowest hash within 5 % of the best
        best = min(min(r) for r in runs.values())
        expected = min(t for t, r in runs.items() if min(r) <= best * (1 + LOG_TIE_BAND))
        assert lock.by_key()[row["key"]].tactic == expected
    assert spread > 0
    assert ties["rebuilt_from_cache"] is (ties["written_back"] > 0)
    if ties["rebuilt_from_cache"]:
        assert ties["second_build_timed"] == 0


def test_noise_wider_than_the_band_is_warned() -> None:
    from reprobuild.workflow.ties import TieOutcome

    wide = [TieCandidate(1, "a", (1.0, 1.3)), TieCandidate(2, "b", (1.1, 1.4))]
    d = decide(wide, LOG_TIE_BAND)
    assert d is not None and d.noise_rel is not None and d.noise_rel > LOG_TIE_BAND
    outcome = TieOutcome(BuildSettings(), {"k": d}, {"k": "l"}, "m", LOG_TIE_BAND, 3)
    w = noise_warning(outcome)
    assert w is not None and "3 recordings" in w and "--tie-band" in w
    assert noise_warning(TieOutcome(BuildSettings(), {"k": d}, {}, "m", 0.5, 3)) is None
    assert noise_warning(TieOutcome(BuildSettings(), {"k": d}, {}, "m", LOG_TIE_BAND, 1)) is None
