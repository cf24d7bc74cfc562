"""The tie band and the tie-break rule, on fixed injected timings only (never measured ones).

The rule itself (:mod:`reprobuild.tiebreak`) is held with hand-made runs; recordings are held
with the reference backend's ``tie:N`` knob, which makes every candidate of a key a near-tie
(within 0.4 % per rank) and orders them by sha256(N, key, kernel): another N is another
"fastest as measured", as another recording on a noisy machine would be.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path

import pytest

from reprobuild.backends.reference import ReferenceBackend
from reprobuild.backends.reference.knob import TimingKnob, seeded_ranks
from reprobuild.lock.yamlio import dumps_lock, load_lock, loads_lock
from reprobuild.tiebreak import (
    PER_TAP_SUMS,
    TieCandidate,
    ahead,
    decide,
    measured_noise,
    partial_sums,
    robust_cost,
    rule_key,
    unsure,
)
from reprobuild.types import DEFAULT_TIE_BAND, DEFAULT_TIE_RULE, BuildSettings
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
    # wide accumulation first, then the fewest partial sums: blas (one) before splitk2
    # (two, though its hash is lower), then the k16 kernel
    assert d.ties == (WIDE_B.tactic, WIDE_A.tactic, LOW.tactic)
    assert d.chosen == WIDE_B.tactic and d.chosen_ms == 1.02
    assert d.best_ms == 0.99 and d.second_ms == 1.00
    # the other rule skips the partial sums: the lowest hash among the wide kernels
    h = decide(order, 0.05, "steady-then-hash")
    assert h is not None and h.ties == (WIDE_A.tactic, WIDE_B.tactic, LOW.tactic)


@pytest.mark.parametrize(
    ("name", "sums"),
    [
        ("ref_conv_im2col_blas_f32", 1),
        ("ref_conv_direct_f16_f32acc", PER_TAP_SUMS),
        ("ref_gemm_splitk2_f32", 2),
        ("ref_matmul_splitk4_bf16_bf16acc", 4),
        ("ref_conv_im2col_tree8_f32", 8),
        ("ref_gemm_k16_f16_f16acc", 1 << 30),
        ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs", 1),
        (None, 1),
    ],
)
def test_partial_sums_read_from_the_kernel_name(name, sums) -> None:
    assert partial_sums(name) == sums


def test_the_rule_order_reads_no_time() -> None:
    fast = TieCandidate(0x9, "ref_gemm_splitk2_f32", (0.5,))
    slow = TieCandidate(0x9, "ref_gemm_splitk2_f32", (5.0,))
    assert rule_key(fast) == rule_key(slow)
    with pytest.raises(ValueError, match="unknown tie rule"):
        rule_key(fast, "fastest")


def test_band_zero_is_the_fastest_as_measured() -> None:
    d = decide([WIDE_A, WIDE_B, LOW, SLOW], 0.0)
    assert d is not None and d.chosen == LOW.tactic and d.band_ms == 0.0


def test_a_candidate_outside_the_band_is_never_chosen_by_the_rule() -> None:
    # SLOW has the lowest hash and wide accumulation, but is 21 % slower than the best
    d = decide([SLOW, LOW], 0.05)
    assert d is not None and d.chosen == LOW.tactic and not d.near_tie


def test_measured_noise_is_reported_but_never_moves_the_band() -> None:
    # a band widened by each recording's own noise would move its edge between recordings
    noisy = [
        TieCandidate(0x2, "a", (1.00, 1.08)),
        TieCandidate(0x1, "b", (1.07, 1.15)),  # 7 % behind: outside a 5 % band
    ]
    assert measured_noise(noisy) == pytest.approx(0.0767, abs=1e-3)
    d = decide(noisy, 0.05)
    assert d is not None and d.noise_rel == pytest.approx(0.0767, abs=1e-3)
    assert d.band_rel == 0.05 and d.chosen == 0x2


def _cands(*costs: float) -> list[TieCandidate]:
    """blas, splitk2, splitk4, tree8 (the rule's order) at the given costs."""
    names = ("blas", "splitk2", "splitk4", "tree8")
    return [
        TieCandidate(0x100 - i, f"ref_gemm_{n}_f32", (c,))
        for i, (n, c) in enumerate(zip(names, costs, strict=False))
    ]


def test_ahead_names_the_candidates_the_rule_would_rather_keep() -> None:
    # blas 3x the best (splitk4): out of the band; the choice is splitk2 (1.1x, inside),
    # so blas alone is ahead of it in the rule's order
    assert ahead(_cands(3.00, 1.10, 1.00, 1.50), 0.3) == [0]
    assert ahead(_cands(1.00, 1.10, 1.20, 1.50), 0.3) == []  # blas is the choice
    assert ahead(_cands(3.00, 1.10, 1.00, 1.50), 0.0) == []  # band 0: no rule


def test_unsure_names_the_candidates_near_the_band_edge_up_to_the_choice() -> None:
    # band 0.3: unsure between 1.3 / 1.15 = 1.130 and 1.3 * 1.3 = 1.69
    assert unsure(_cands(1.00, 1.02, 1.20, 1.40), 0.3) == []  # blas is the best: certain
    assert unsure(_cands(1.05, 1.00, 1.20, 1.40), 0.3) == []  # blas 5 % behind: inside
    # blas 1.25x the best (splitk2): near the edge, timed again with the best
    assert unsure(_cands(1.25, 1.00, 1.60, 1.80), 0.3) == [0, 1]
    # blas far out (2x): certain; splitk2 is then the best and the choice: nothing unsure
    assert unsure(_cands(1.75, 1.00, 1.40, 1.80), 0.3) == []
    # blas 1.6x: outside, but a minimum only falls: unsure (half a band below would not be)
    assert unsure(_cands(1.60, 1.00, 1.40, 1.80), 0.3) == [0, 1]
    assert unsure(_cands(1.10, 1.00, 1.40, 1.80), 0.3) == []
    assert unsure(_cands(2.00, 1.00, 1.40, 1.80), 0.3) == []
    # blas far out: splitk2 (the best) is next in the rule's order and chosen, so splitk4
    # and tree8 never matter, however near the edge
    assert unsure(_cands(2.00, 1.00, 1.29, 1.31), 0.3) == []
    # blas far out, splitk2 and splitk4 near the edge (1.35x, 1.6x the best, tree8): all
    # three timed again
    assert unsure(_cands(2.00, 1.35, 1.60, 1.00), 0.3) == [1, 2, 3]
    assert unsure(_cands(1.25, 1.00), 0.0) == []  # band 0: the fastest, nothing to settle
    # any order of the same candidates names the same ones
    c = _cands(1.25, 1.00, 1.60, 1.80)
    back = c[::-1]
    assert {back[i].tactic for i in unsure(back, 0.3)} == {c[0].tactic, c[1].tactic}


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
        # every candidate is a near-tie: the rule's pick is the fewest partial sums, then
        # the lowest hash (all FP32 here)
        first = min(e.candidates, key=lambda c: rule_key(TieCandidate(c.tactic, c.kernel, ())))
        assert e.tactic == first.tactic
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


def test_the_reference_builder_applies_the_rule_itself_and_nothing_is_rebuilt(
    work: Path,
) -> None:
    # the written-back path (update() and a second build) is TensorRT's: test_tiebreak_trt
    lock, report, result = _record(work, "tie:2", "w")
    ties = report["tie_break"]
    assert ties["tie_band"] == DEFAULT_TIE_BAND and ties["rule"] == DEFAULT_TIE_RULE
    assert ties["changed_from_fastest"] > 0 and ties["written_back"] == 0
    assert ties["rebuilt_from_cache"] is False
    assert "rounds" in ties["measured"]
    assert report["autotune"]["timed_runs"] > 0
    by_key = {row["key"]: row for row in ties["layers"]}
    for e in lock.layers:
        assert by_key[e.key]["chosen"] == f"0x{e.tactic:x}"
    # every autotuned engine layer runs the rule's choice of one of its keys
    chosen: dict[str, set[int]] = {}
    for e in lock.layers:
        chosen.setdefault(e.layer, set()).add(e.tactic)
    layers = json.loads(Path("w.engine.layers.json").read_text())["Layers"]
    ran = [(x["Name"], int(x["TacticValue"], 16)) for x in layers if x["Name"] in chosen]
    assert ran and all(tactic in chosen[name] for name, tactic in ran)
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


def test_one_impossible_reading_cannot_decide_within_a_key() -> None:
    # a splitk2 kernel timed [1.081, 0.591, 0.038] ms: the 0.038 reading is 13x below its
    # other runs; the plain minimum made it the best and pushed blas (0.41 ms) out
    splitk = TieCandidate(0x10, "ref_gemm_splitk2_f32", (1.081, 0.591, 0.038))
    blas = TieCandidate(0x20, "ref_gemm_blas_f32", (0.41, 0.43, 0.42))
    assert robust_cost(splitk.runs) == 0.591
    d = decide([splitk, blas], DEFAULT_TIE_BAND)
    assert d is not None and d.fastest == blas.tactic and d.chosen == blas.tactic


@pytest.mark.parametrize(
    ("runs", "cost"),
    [((), math.inf), ((0.5,), 0.5), ((41.0, 0.14), 0.14), ((0.14, 0.35, 0.40), 0.14)],
)
def test_the_cost_is_the_fastest_sane_run(runs, cost) -> None:
    # a cold first run (41 ms) never stands, two runs cannot name an outlier, a loaded
    # machine's slower runs leave the fastest standing
    assert robust_cost(runs) == cost


@pytest.mark.parametrize("rule", ["steady-then-splits", "steady-then-hash"])
def test_run_to_run_and_batch_dependent_kernels_come_last_in_the_band(rule) -> None:
    """The atomic and row-split kernels lose to every other kernel within the band, even
    to a low-accumulation one with a higher hash; outside the band they still win."""
    atomic = TieCandidate(0x1, "ref_gemm_atomic4_f32", (1.00,))
    rows = TieCandidate(0x2, "ref_gemm_rowsplit_f32", (1.00,))
    low = TieCandidate(0x9, "ref_gemm_k16_f16_f16acc", (1.10,))
    d = decide([atomic, rows, low], 0.4, rule)
    assert d is not None and d.chosen == low.tactic and d.ties[-2:] == (0x1, 0x2)
    d = decide([atomic, low], 0.05, rule)
    assert d is not None and d.chosen == atomic.tactic  # the only one in the band
