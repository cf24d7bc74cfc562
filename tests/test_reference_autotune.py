"""The reference builder's autotuning policy: warm-up counted, clearly slower candidates
dropped early, a Conv's im2col shared by its candidates, all of it in the build report.

Timings are injected two ways: :func:`tune` takes the per-run costs from a fake ``measure``
(unit tests), and builds take the timing knob, which perturbs costs before they are
compared (``prefer:X`` makes X a million times faster than anything else).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprobuild.backends.base import BuildSettings
from reprobuild.backends.reference import ReferenceBackend, kernels
from reprobuild.backends.reference.autotune import AutotunePolicy, tune
from reprobuild.lock.yamlio import load_lock
from reprobuild.tiebreak import partial_sums, robust_cost, varies
from reprobuild.workflow.build import build as workflow_build

from .conftest import EXAMPLES
from .test_reference_build import build, cnn_model, parse_blocks


def scripted(times: Sequence[Sequence[float]]):
    """A ``measure`` whose run ``r`` of candidate ``i`` costs ``times[i][r]`` ms; it records
    the order of the runs and returns ``("out", i)`` as the output."""
    order: list[int] = []

    def measure(i: int) -> tuple[float, object]:
        run = sum(1 for j in order if j == i)
        order.append(i)
        return times[i][run], ("out", i)

    return measure, order


def test_clearly_slower_candidates_are_dropped_after_the_first_run() -> None:
    measure, order = scripted([[1.0, 0.9, 0.95], [1.1, 1.0, 0.8], [5.0], [2.5]])
    t = tune(4, measure, AutotunePolicy(reps=3, drop_after=1, drop_factor=2.0))
    assert t.dropped == [2, 3]  # 5.0 and 2.5 > 2 x 1.0 after round 1; 1.1 is not
    assert t.runs == [3, 3, 1, 1] and t.kernel_runs == 8
    assert order == [0, 1, 2, 3, 0, 1, 0, 1]  # rounds: every remaining candidate once each
    assert t.costs == [0.9, 0.8, 5.0, 2.5]  # the min over each candidate's runs
    assert t.best == 1 and t.output == ("out", 1)


def test_the_warm_up_run_is_counted_and_a_cold_first_run_does_not_drop_the_fastest() -> None:
    # candidate 0's first (cold) run is 1.9x the other's: not "clearly slower", it stays,
    # and its warm runs make it the fastest
    measure, _ = scripted([[1.9, 0.5, 0.6], [1.0, 1.0, 1.0]])
    t = tune(2, measure, AutotunePolicy(reps=3))
    assert t.dropped == [] and t.runs == [3, 3] and t.best == 0 and t.costs[0] == 0.5
    # one run per candidate: the warm-up is the timed run, nothing else runs, nothing drops
    measure, order = scripted([[3.0], [1.0], [9.0]])
    t = tune(3, measure, AutotunePolicy(reps=1))
    assert order == [0, 1, 2] and t.dropped == [] and t.best == 1


def test_a_later_drop_after_more_runs() -> None:
    # drop_after 2: nothing is dropped after round 1, candidate 1 is after round 2
    measure, _ = scripted([[1.0, 1.0, 1.0, 1.0], [9.0, 3.0], [1.5, 1.2, 1.1, 1.1]])
    t = tune(3, measure, AutotunePolicy(reps=4, drop_after=2, drop_factor=2.0))
    assert t.dropped == [1] and t.runs == [4, 2, 4] and t.costs[1] == 3.0


def test_perceived_costs_decide_drops_and_a_dropped_winner_is_run_again() -> None:
    measure, order = scripted([[1.0, 1.0, 1.0], [4.0, 4.0, 4.0]])

    def reverse(raw: list[float]) -> list[float]:  # the knob's "reverse": the slowest wins
        return [max(raw) + min(raw) - c for c in raw]

    t = tune(2, measure, AutotunePolicy(reps=3), reverse)
    assert t.dropped == [0] and t.best == 1 and t.runs == [1, 3]
    # a plain perception in which the dropped one wins at the end: its output is recomputed
    measure, order = scripted([[1.0, 1.0], [5.0, 1.0]])
    flips = iter([[1.0, 5.0], [3.0, 1.0]])  # round 1 says 1 is slow; the end says 0 is
    t = tune(2, measure, AutotunePolicy(reps=2), lambda raw: next(flips))
    assert t.dropped == [1] and t.best == 1 and t.extra_runs == 1 and t.output == ("out", 1)
    assert order == [0, 1, 0, 1]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.floats(0.01, 100.0), min_size=5, max_size=5), min_size=1, max_size=6),
    st.integers(1, 5),
    st.integers(1, 3),
    st.floats(1.0, 4.0),
)
def test_the_fastest_is_never_dropped(times, reps, drop_after, factor) -> None:
    measure, _ = scripted(times)
    t = tune(len(times), measure, AutotunePolicy(reps, drop_after, factor))
    assert t.costs[t.best] == min(t.costs)
    # a dropped candidate wins only where an impossible reading of the best was left out
    # after the drop (its cost rose); its output is then computed once more
    assert t.extra_runs == (1 if t.best in t.dropped else 0)
    for i, runs in enumerate(t.runs):
        assert 1 <= runs <= reps and (i in t.dropped or runs == reps)
        assert t.costs[i] == robust_cost(times[i][:runs])
    assert t.output == ("out", t.best)


def test_shared_conv_operands_give_every_kernel_its_own_bits() -> None:
    """One ConvOperands for all candidates, in any order, gives exactly the bits each kernel
    gives from fresh operands (nothing a kernel does writes into the shared im2col)."""
    rng = np.random.default_rng(5)
    for dtype in (np.float32, np.float16):
        x = rng.standard_normal((2, 8, 9, 7)).astype(dtype)
        w = rng.standard_normal((12, 4, 3, 3)).astype(dtype)
        b = rng.standard_normal(12).astype(dtype)
        attrs = {"pads": [1, 0, 1, 2], "strides": [2, 1], "group": 2}
        specs = kernels.candidates(kernels.geometry("Conv", [x, w, b], attrs))
        assert any(s.scheme == "direct" for s in specs) and len(specs) == 5
        fresh = {s.name: kernels.execute(s, [x, w, b], attrs).tobytes() for s in specs}
        assert len(set(fresh.values())) > 1  # the kernels really differ in their bits
        ops = kernels.conv_operands([x, w, b], attrs)
        for s in [*reversed(specs), *specs]:
            assert kernels.run_conv(s, ops).tobytes() == fresh[s.name], s.name


def test_a_forced_choice_drops_the_others_and_keeps_them_in_table_and_report(tmp_path) -> None:
    path = cnn_model(tmp_path)
    backend = ReferenceBackend(timing="prefer:splitk4")
    # band 0: the builder's own policy (a tie band drops after two runs: the test below)
    out, lines, cache = build(backend, path, settings=BuildSettings(tie_band=0.0))
    report = out.extra["autotune"]
    assert report["policy"]["drop_factor"] == 2.0 and report["policy"]["drop_after_runs"] == 1
    # one entry per key: the Convs' im2col (linear) and direct (hwc) keys, the Gemm's one
    assert sorted(e["layer"] for e in report["layers"]) == [
        "conv1",
        "conv1",
        "conv2",
        "conv2",
        "fc",
    ]
    blocks = parse_blocks(lines)
    for entry in report["layers"]:
        runs = {c["kernel"]: c["runs"] for c in entry["candidates"]}
        dropped = [c["kernel"] for c in entry["candidates"] if c["dropped"]]
        rows = blocks[entry["key"]]["rows"]
        if list(runs) == ["ref_conv_direct_f32"]:  # the hwc key: nothing to drop
            assert runs == {"ref_conv_direct_f32": 3} and not dropped and len(rows) == 1
            continue
        chosen = next(k for k in runs if "splitk4" in k)
        assert runs[chosen] == 3  # the fastest runs every round, never dropped
        assert sorted(dropped) == sorted(k for k in runs if k != chosen)
        assert all(runs[k] == 1 for k in dropped)
        # dropped candidates keep their place (and cost) in the timing table
        assert sorted(r[3] for r in rows) == sorted(runs)
        assert rows[0][3] == chosen
    # the preferred kernel's key is the one every layer runs
    assert all("splitk4" in c["kernel"] for c in out.extra["layers"])
    every = [c for e in report["layers"] for c in e["candidates"]]
    assert report["dropped_candidates"] == sum(c["dropped"] for c in every) > 0
    assert report["kernel_runs"] == report["timed_runs"] == sum(c["runs"] for c in every)
    # a build from the cache runs each layer's kernel once and times nothing
    again, _, _ = build(backend, path, cache)
    assert again.extra["autotune"]["kernel_runs"] == 3
    assert again.extra["autotune"]["timed_runs"] == 0 and again.extra["autotune"]["layers"] == []


def test_avg_timing_iterations_bounds_the_runs(tmp_path) -> None:
    path = cnn_model(tmp_path)
    # band 0: no settling rounds, whose runs depend on the measured costs
    settings = BuildSettings(avg_timing_iterations=1, tie_band=0.0)
    out, _, _ = build(ReferenceBackend(), path, settings=settings)
    report = out.extra["autotune"]
    assert report["policy"]["max_runs_per_candidate"] == 1
    assert report["dropped_candidates"] == 0
    assert report["kernel_runs"] == report["timed_candidates"] == 5 + 5 + 6  # 2 Conv, 1 Gemm


def test_the_build_report_records_the_policy_and_the_lock_keeps_every_candidate(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    monkeypatch.chdir(tmp_path)
    be = ReferenceBackend(timing="prefer:tree8")
    r = workflow_build("cnn.onnx", lock="t.lock", out="cnn.engine", backend=be)
    report = json.loads(Path(r.report_path).read_text())
    auto = report["autotune"]
    assert "2x the best cost" in auto["policy"]["drop_rule"]
    assert auto["dropped_candidates"] > 0
    lock = load_lock("t.lock")
    assert sorted(e["key"] for e in auto["layers"]) == sorted(e.key for e in lock.layers)
    for entry in auto["layers"]:
        (locked,) = [e for e in lock.layers if e.key == entry["key"]]
        if locked.kernel == "ref_conv_direct_f32":  # a Conv's hwc key: its only candidate
            assert [c.kernel for c in locked.candidates] == [locked.kernel]
            continue
        assert "tree8" in locked.kernel
        timed = sorted(c["kernel"] for c in entry["candidates"])
        assert sorted(c.kernel for c in locked.candidates) == timed  # dropped ones included
        dropped = [c["kernel"] for c in entry["candidates"] if c["dropped"]]
        assert dropped and locked.kernel not in dropped


def test_settling_rounds_run_the_unsure_candidates_together_until_none_is_left() -> None:
    # after 2 rounds candidate 0 (1.3) and the best (1.0) are in doubt; each settling
    # round runs both, once each, in candidate order, until ``settle`` names none
    measure, order = scripted([[1.3, 1.3, 1.2, 1.05], [1.0, 1.0, 1.0, 1.0], [1.5, 1.5]])
    asked: list[list[float]] = []

    def settle(costs: list[float]) -> list[int]:
        asked.append(list(costs))
        return [0, 1] if costs[0] > 1.1 else []

    t = tune(3, measure, AutotunePolicy(reps=2, settle_rounds=5), settle=settle)
    assert order == [0, 1, 2, 0, 1, 2, 0, 1, 0, 1]
    assert t.runs == [4, 4, 2] and t.settle_runs == 4 and t.costs == [1.05, 1.0, 1.5]
    assert [c[0] for c in asked] == [1.3, 1.2, 1.05]  # asked after every round, as compared


def test_a_guarded_candidate_survives_a_cold_first_run() -> None:
    # candidate 0's first run is cold (10x); candidate 1 is steady at 1.0
    times = [[10.0, 0.9, 0.9], [1.0, 1.0, 1.0], [5.0, 5.0, 5.0]]
    measure, _ = scripted(times)
    t = tune(3, measure, AutotunePolicy(reps=3))
    assert t.dropped == [0, 2] and t.best == 1  # unguarded: dropped on its cold run
    measure, _ = scripted(times)
    t = tune(3, measure, AutotunePolicy(reps=3), ahead=lambda costs: [0, 2])
    assert t.dropped == [2] and t.runs == [3, 3, 2] and t.best == 0 and t.costs[0] == 0.9


def test_settling_stops_at_its_cap_and_never_runs_a_dropped_candidate() -> None:
    measure, order = scripted([[1.0] * 9, [3.0], [1.2] * 9])
    t = tune(3, measure, AutotunePolicy(reps=2, settle_rounds=3), settle=lambda c: [1, 2])
    assert t.dropped == [1]  # 3x the best after round 1
    assert order == [0, 1, 2, 0, 2, 2, 2, 2] and t.settle_runs == 3 and t.runs == [2, 1, 5]
    # no settle callback (band 0): the rounds alone, as before settling existed
    measure, order = scripted([[1.0] * 9, [1.2] * 9])
    t = tune(2, measure, AutotunePolicy(reps=2, settle_rounds=3))
    assert order == [0, 1, 0, 1] and t.settle_runs == 0


@pytest.mark.parametrize(("band", "clock", "settle"), [(0.0, "wall", 0), (0.3, "cpu", 6)])
def test_a_tie_band_times_on_the_cpu_clock_and_settles(tmp_path, band, clock, settle) -> None:
    path = cnn_model(tmp_path)
    # injected costs: prefer:splitk4 puts every other kernel 1000x behind, nothing is unsure
    be = ReferenceBackend(timing="prefer:splitk4")
    out, _, _ = build(be, path, settings=BuildSettings(tie_band=band))
    report = out.extra["autotune"]
    assert report["policy"]["clock"] == clock and report["policy"]["settle_rounds"] == settle
    assert report["policy"]["guard_ahead"] is (band > 0)
    assert report["settle_runs"] == 0
    for entry in report["layers"]:
        for c in entry["candidates"]:
            if not c["dropped"]:
                continue
            # with a band, blas and splitk2 come before splitk4 (the rule's choice) in the
            # rule's order: dropped after two runs; tree8, atomic4 and rowsplit come after
            # it: after one
            guarded = band > 0 and partial_sums(c["kernel"]) < 4 and not varies(c["kernel"])
            assert c["runs"] == (2 if guarded else 1), c


def test_an_impossible_reading_does_not_make_a_candidate_the_best() -> None:
    measure, _order = scripted([[1.081, 0.591, 0.038], [0.41, 0.43, 0.42]])
    t = tune(2, measure, AutotunePolicy(reps=3, drop_factor=100.0))
    assert t.best == 1 and t.costs == [0.591, 0.41]
    assert t.samples[0] == [1.081, 0.591, 0.038]  # the report keeps every run


def test_a_conv_operand_is_charged_its_faster_making(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first im2col in a process also loads the compiled copy loop: that one-time cost
    (seconds, no engine run pays it) must not be charged to the im2col kernels."""
    import numpy as np

    from reprobuild.backends.reference import kernels, layertune

    now = [0.0]
    real = kernels.columns
    made = []

    def columns(xp: np.ndarray, params: dict) -> np.ndarray:
        made.append(1)
        now[0] += 5.0 if len(made) == 1 else 0.002  # the first making loads compiled code
        return real(xp, params)

    monkeypatch.setattr(kernels, "columns", columns)
    x = np.ones((1, 2, 5, 5), np.float32)
    w = np.ones((3, 2, 3, 3), np.float32)
    ops = layertune._ConvOperands([x, w], {"kernel_shape": [3, 3]}, lambda: now[0])
    spec = kernels.KERNELS["ref_conv_im2col_blas_f32"]
    extra = ops.extra_ms(spec)
    assert len(made) == 2 and extra == pytest.approx(2.0)  # ms: the second making
    np.testing.assert_array_equal(ops.get().cols, real(ops.get().padded, ops.get().params))
