"""``reprobuild stability``: N independent recordings, per-layer figures, JSON and the plot.

Timings are injected (the ``tie:N`` knob: every candidate a near-tie), never measured; the
per-key figures are also held on hand-made recordings, where a flip is known in advance.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from reprobuild.backends.reference.knob import key_factor
from reprobuild.lock.diff import engine_of
from reprobuild.lock.model import OutputDigest
from reprobuild.types import DEFAULT_TIE_BAND, BuildSettings
from reprobuild.workflow.stability import StabilityReport, _per_key, digests_of

from .conftest import EXAMPLES, sample_lock


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(EXAMPLES / "mlp.onnx", tmp_path / "mlp.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_json_per_layer_figures_from_injected_near_ties(work: Path, cli) -> None:
    r = cli(
        "stability", "mlp.onnx", "--records", "2", "--backend", "reference",
        "--ref-timing", "tie:5", "--json",
    )  # fmt: skip
    assert r.code == 0, r
    data = json.loads(r.out)
    assert (
        data["records"] == 2 and data["tie_band"] == DEFAULT_TIE_BAND and data["agreement"] == 1.0
    )
    assert len(data["recording_s"]) == 2
    # what ships: the injected timings leave one engine and one set of bits
    assert (data["distinct_engines"], data["distinct_output_digests"]) == (1, 1)
    assert data["recording_engine"] == [0, 0] and data["engine_layers_differ"] == []
    for row in data["layers"]:
        assert row["held"] and row["flip_rate"] == 0.0
        # the knob's costs: the best is the key's factor, the next 0.4 % above it
        f = key_factor(row["key"])
        assert row["best_ms"] == pytest.approx(f) and row["second_ms"] == pytest.approx(f * 1.004)
        assert row["band_ms"] >= DEFAULT_TIE_BAND * row["best_ms"] - 1e-12
    assert not list(work.glob("caches*"))  # each recording's folders were temporary


def test_flip_rate_held_and_at_risk_on_hand_made_recordings() -> None:
    """At risk: a candidate the rule prefers (here ``blas``, fewest partial sums) sits near
    the band's edge in some recording, so a noisier machine could move it into the band."""

    def recording(tactic: int, fastest: int, blas_ms: float):
        lock = sample_lock(1)
        lock.layers[0].tactic = tactic
        key = lock.layers[0].key
        row = {
            "key": key, "fastest": f"0x{fastest:x}", "best_ms": 1.0,
            "second_ms": 1.01, "band_ms": 0.05, "band_rel": 0.05, "outside_ms": None,
        }  # fmt: skip
        cands = [
            {"tactic_hash": "0x1001", "cost_ms": 1.0, "kernel": "ref_gemm_splitk4_f32"},
            {"tactic_hash": "0x1003", "cost_ms": blas_ms, "kernel": "ref_gemm_blas_f32"},
        ]
        rec = {"key": key, "from_cache": False, "candidates": cands}
        return {"tie_break": {"layers": [row]}, "records": [rec]}, lock

    steady = [recording(0x1001, 0x1001, 2.0) for _ in range(4)]  # blas far outside
    (k,) = _per_key(steady, BuildSettings())
    assert k.held and k.flip_rate == 0.0 and not k.at_risk and k.fastest_flip_rate == 0.0
    flipped = steady[:3] + [recording(0x1002, 0x1002, 2.0)]
    (k,) = _per_key(flipped, BuildSettings())
    assert not k.held and k.flip_rate == 0.25 and k.at_risk
    edge = steady[:3] + [recording(0x1001, 0x1001, 1.08)]  # blas 3 % past the band's edge
    (k,) = _per_key(edge, BuildSettings())
    assert k.held and k.at_risk
    inside = steady[:3] + [recording(0x1001, 0x1001, 1.0)]  # blas well inside: no doubt
    (k,) = _per_key(inside, BuildSettings())
    assert k.held and not k.at_risk


def _two_key_recording(first_runs: bool, digest: str):
    """One recording of a model whose layer ``conv`` has two keys (two format combinations)
    and whose other layers, ``n10`` and ``n2``, were built after it, ``n2`` first."""
    lock = sample_lock(4)
    names = ["conv", "conv", "n2", "n10"]
    for e, name in zip(lock.layers, names, strict=True):
        e.layer, e.time_ms = name, 1.0
    lock.layers[0].time_ms = 1.0 if first_runs else 1.2
    lock.layers[1].time_ms = 1.1
    lock.layers[3].candidates = lock.layers[3].candidates[:1]  # one candidate: still a row
    lock.outputs = [OutputDigest("seeded:0", digest)]
    records = [
        {"key": e.key, "from_cache": False,
         "candidates": [{"tactic_hash": f"0x{c.tactic:x}", "cost_ms": 1.0 + 0.01 * i,
                         "kernel": c.kernel} for i, c in enumerate(e.candidates)]}
        for e in lock.layers
    ]  # fmt: skip
    return {"tie_break": {"layers": []}, "records": records}, lock


def test_network_order_every_key_and_which_key_ran() -> None:
    runs = [_two_key_recording(True, "aa" * 32), _two_key_recording(False, "bb" * 32)]
    keys = _per_key(runs, BuildSettings())
    assert [k.layer for k in keys] == ["conv", "conv", "n2", "n10"]  # not n10 before n2
    assert [k.ran for k in keys] == [[True, False], [False, True], [True, True], [True, True]]
    assert all(k.held for k in keys)  # every key kept its tactic: the key choice moved
    assert keys[3].above_best == {keys[3].chosen[0]: [0.0, 0.0]}
    assert keys[2].above_best[keys[2].chosen[0]] == [0.0, 0.0]
    report = StabilityReport(
        "m.onnx", 2, "reference", BuildSettings(), keys, [1.0, 1.0], 2.0,
        [engine_of(lock.layers) for _, lock in runs], [digests_of(lock) for _, lock in runs],
    )  # fmt: skip
    assert report.agreement == 1.0
    assert (report.distinct_engines, report.distinct_digests) == (2, 2)
    assert report.engine_layers == ["conv"]
    data = report.to_json()
    assert data["recording_engine"] == [0, 1] and data["recording_output_digest"] == [0, 1]
    same = StabilityReport(
        "m.onnx", 2, "reference", BuildSettings(), keys, [1.0, 1.0], 2.0,
        [engine_of(runs[0][1].layers)] * 2, [digests_of(runs[0][1])] * 2,
    )  # fmt: skip
    assert (same.distinct_engines, same.distinct_digests, same.engine_layers) == (1, 1, [])


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="plot extra")
def test_plot_has_every_key_a_legend_and_marks_clipped_bars(tmp_path: Path) -> None:
    from reprobuild.cli.stability_plot import write_plot

    runs = [_two_key_recording(True, "aa" * 32), _two_key_recording(False, "bb" * 32)]
    keys = _per_key(runs, BuildSettings())
    keys[2].above_best[0xBAD] = [0.1, 9.0]  # 900 % above: past the axis
    report = StabilityReport(
        "m.onnx", 2, "reference", BuildSettings(), keys, [1.0, 1.0], 2.0,
        [engine_of(lock.layers) for _, lock in runs], [digests_of(lock) for _, lock in runs],
    )  # fmt: skip
    write_plot(report, tmp_path / "s.svg")
    text = (tmp_path / "s.svg").read_text()
    for k in keys:
        assert f"{k.layer} {k.key[:8]}" in text
    assert "ran 1/2" in text and "ran 2/2" in text and "up to 900%" in text
    assert "kept candidate (named)" in text and "kern_0" in text
    assert "cost above the key's best in the same recording" in text


def test_plot_without_matplotlib_is_one_line_and_exit_2(
    work: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name)
    )
    r = cli("stability", "mlp.onnx", "--backend", "reference", "--plot", "s.png")
    assert r.code == 2 and "matplotlib is not installed" in r.err
    assert "reprobuild[plot]" in r.err and not (work / "s.png").exists()


def test_plot_of_another_type_is_refused(work: Path, cli) -> None:
    r = cli("stability", "mlp.onnx", "--backend", "reference", "--plot", "s.pdf")
    assert r.code == 2 and ".png or .svg" in r.err


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="plot extra")
def test_plot_is_written(work: Path, cli) -> None:
    r = cli(
        "stability", "mlp.onnx", "--records", "2", "--backend", "reference",
        "--ref-timing", "tie:1", "--plot", "s.svg", "-q",
    )  # fmt: skip
    assert r.code == 0, r
    text = (work / "s.svg").read_text()
    assert text.startswith("<?xml") and f"tie band {DEFAULT_TIE_BAND:g}" in text
