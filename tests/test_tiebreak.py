"""The tie band and the tie-break rule, on fixed injected timings only (never measured ones).

The rule itself (:mod:`reprobuild.tiebreak`) is held with hand-made runs; recordings are held
with the reference backend's ``tie:N`` knob, which makes every candidate of a key a near-tie
(within 0.4 % per rank) and orders them by sha256(N, key, kernel): another N is another
"fastest as measured", as another recording on a noisy machine would be.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from reprobuild.backends.reference import ReferenceBackend
from reprobuild.backends.reference.knob import TimingKnob, seeded_ranks
from reprobuild.lock.yamlio import dumps_lock, load_lock, loads_lock
from reprobuild.tiebreak import NOISE_CAP, TieCandidate, decide, measured_noise
from reprobuild.types import DEFAULT_TIE_BAND, BuildSettings
from reprobuild.workflow.build import build

from .conftest import EXAMPLES, sample_lock

WIDE_A = TieCandidate(0x30, "gemm_splitk2_f16_f32acc", (1.00, 1.01, 1.02))
WIDE_B = TieCandidate(0x50, "gemm_blas_f16_f32acc", (1.02, 1.03))
LOW = TieCandidate(0x10, "gemm_k16_f16_f16acc", (0.99, 1.00, 1.00))  # fastest, lowest hash
SLOW = TieCandidate(0x01, "gemm_tree8_f32", (1.20, 1.21, 1.22))  # lowest hash, outside


@pytest.mark.parametrize("order", list(itertools.permutations([WIDE_A, WIDE_B, LOW, SLOW])))
def test_the_rule_ignores_the_order_candidates_are_timed_in(order) -> None:
    d = decide(order, 0.05)
    assert d is not None
    # within 5 % of 0.99: LOW (fastest, but FP16 accumulation), WIDE_A, WIDE_B; SLOW is not.
    assert d.fastest == LOW.tactic
    assert set(d.ties) == {LOW.tactic, WIDE_A.tactic, WIDE_B.tactic}
    # wide accumulation first, then the lowest hash: 0x30 before 0x50 before the k16 kernel
    assert d.ties == (WIDE_A.tactic, WIDE_B.tactic, LOW.tactic)
    assert d.chosen == WIDE_A.tactic and d.chosen_ms == 1.00
    assert d.best_ms == 0.99 and d.second_ms == 1.00


def test_band_zero_is_the_fastest_as_measured() -> None:
    d = decide([WIDE_A, WIDE_B, LOW, SLOW], 0.0)
    assert d is not None and d.chosen == LOW.tactic and d.band_ms == 0.0


def test_a_candidate_outside_the_band_is_never_chosen_by_the_rule() -> None:
    # SLOW has the lowest hash and wide accumulation, but is 21 % slower than the best
    d = decide([SLOW, LOW], 0.05)
    assert d is not None and d.chosen == LOW.tactic and not d.near_tie


def test_measured_noise_widens_the_band_up_to_the_cap() -> None:
    noisy = [
        TieCandidate(0x2, "a", (1.00, 1.08)),
        TieCandidate(0x1, "b", (1.07, 1.15)),  # 7 % behind: inside only when widened
    ]
    assert measured_noise(noisy) == pytest.approx(0.0767, abs=1e-3)
    d = decide(noisy, 0.05)
    assert d is not None and d.band_rel == pytest.approx(0.0767, abs=1e-3)
    assert d.chosen == 0x1
    very = [TieCandidate(0x2, "a", (1.0, 3.0)), TieCandidate(0x1, "b", (1.3, 3.0))]
    d = decide(very, 0.05)
    assert d is not None and d.band_rel == NOISE_CAP * 0.05 and d.chosen == 0x2


def test_one_time_per_candidate_gives_the_setting_alone() -> None:
    d = decide([TieCandidate(0x9, "a", (1.0,)), TieCandidate(0x8, "b", (1.04,))], 0.05)
    assert d is not None and d.noise_rel is None and d.band_rel == 0.05 and d.chosen == 0x8


# ----------------------------------------------------------------------- recordings


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _record(work: Path, timing: str, name: str, band: float | None = None):
    settings = None if band is None else BuildSettings(tie_band=band)
    result = build(
        "cnn.onnx",
        lock=f"{name}.lock",
        out=f"{name}.engine",
        backend=ReferenceBackend(timing=timing),
        cache_dir=f"caches-{name}",
        settings=settings,
    )
    report = json.loads(Path(f"{name}.engine.report.json").read_text())
    return load_lock(f"{name}.lock"), report, result


def test_recordings_in_any_timing_order_agree_with_the_default_band(work: Path) -> None:
    locks = [_record(work, f"tie:{seed}", f"r{seed}")[0] for seed in (1, 2, 3)]
    maps = [lk.tactic_map() for lk in locks]
    assert maps[0] == maps[1] == maps[2]
    for e in locks[0].layers:
        # every candidate is a near-tie: the rule's pick is the lowest hash (all FP32 here)
        assert e.tactic == min(c.tactic for c in e.candidates)
        if len(e.candidates) > 1:
            assert e.near_tie and set(e.ties) == {c.tactic for c in e.candidates}
            assert e.band_ms is not None and e.band_ms > 0
        else:  # a key with one candidate (the direct Conv) has nothing to tie with
            assert not e.near_tie and e.band_ms is None


def test_band_zero_keeps_the_fastest_as_measured(work: Path) -> None:
    for seed in (1, 2):
        lock, report, _ = _record(work, f"tie:{seed}", f"z{seed}", band=0.0)
        assert lock.settings.tie_band == 0.0
        assert report["tie_break"]["rebuilt_from_cache"] is False
        for e in lock.layers:
            names = [c.kernel for c in e.candidates]
            ranks = seeded_ranks(seed, e.key, [n or "" for n in names])
            fastest = e.candidates[ranks.index(0)]
            # candidates are listed by tactic; the knob ranks them by name for this key
            assert e.tactic == fastest.tactic
    a, b = (load_lock(f"z{s}.lock").tactic_map() for s in (1, 2))
    assert a != b  # the measure can fail: without the band, two recordings disagree


def test_the_rule_is_written_back_and_the_second_build_times_nothing(work: Path) -> None:
    lock, report, result = _record(work, "tie:2", "w")
    ties = report["tie_break"]
    assert ties["tie_band"] == DEFAULT_TIE_BAND and ties["rule"] == "steady-then-hash"
    assert ties["changed_from_fastest"] > 0
    assert ties["rebuilt_from_cache"] is True and ties["second_build_timed"] == 0
    assert "rounds" in ties["measured"]
    # the engine runs what the lock says (the pinned build's kernel check passed), and
    # the recording's timing is what the report keeps
    assert report["autotune"]["timed_runs"] > 0
    by_key = {row["key"]: row for row in ties["layers"]}
    for e in lock.layers:
        assert by_key[e.key]["chosen"] == f"0x{e.tactic:x}"
    assert result.recorded


def test_a_lock_without_tie_settings_reads_as_the_default_policy() -> None:
    lock = sample_lock()
    text = dumps_lock(lock)
    assert "tie_band" not in text and "tie_rule" not in text
    again = loads_lock(text)
    assert again.settings.tie_band == DEFAULT_TIE_BAND
    zero = sample_lock()
    zero.settings = BuildSettings(tie_band=0.0)
    assert loads_lock(dumps_lock(zero)).settings.tie_band == 0.0
    # not part of the fingerprint: keys and cache names stay those of the defaults
    assert zero.settings.fingerprint() == BuildSettings().fingerprint()


def test_band_and_ties_round_trip_through_both_readers() -> None:
    lock = sample_lock()
    e = lock.layers[0]
    e.time_ms, e.band_ms, e.ties = 1.5, 0.075, [c.tactic for c in e.candidates[:2]]
    text = dumps_lock(lock)
    assert "ties: [" in text
    fast = loads_lock(text)
    slow = loads_lock(text.replace("ties: [", "ties:  ["))  # same data, still fast path
    for got in (fast, slow):
        g = got.by_key()[e.key]
        assert g.band_ms == 0.075 and g.ties == e.ties and g.near_tie


@pytest.mark.parametrize("bad", ["tie_band: 2.0", "tie_band: nope", "tie_rule: fastest"])
def test_bad_tie_settings_name_the_field(bad: str) -> None:
    from reprobuild.errors import LockError

    text = dumps_lock(sample_lock()).replace("  input_shapes: {}", f"  input_shapes: {{}}\n  {bad}")
    with pytest.raises(LockError, match=bad.split(":")[0]):
        loads_lock(text)


def test_the_tie_knob_injects_repeated_runs() -> None:
    knob = TimingKnob("tie", seed=4)
    runs = knob.runs("0x" + "1" * 32, ["a", "b"], [[9.0, 9.0, 9.0], [9.0, 9.0]])
    assert [len(r) for r in runs] == [3, 2]
    assert all(r[0] == min(r) for r in runs) and runs[0][1] != runs[0][0]
