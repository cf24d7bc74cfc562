"""The choice between a layer's timing-cache keys: the tie rule, recorded, honoured, checked.

A float Conv of the reference backend has two keys (``linear``: im2col kernels, ``hwc``:
direct). Which one runs is decided by the tie band and rule (never by the order the keys
were timed in), written into the lock (``runs``), written back by every locked build, and
checked after it. Timings are injected only: hand-made times, the suite's seeded costs, or
a timing knob.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
from pathlib import Path

import pytest

from reprobuild.backends.reference import ReferenceBackend
from reprobuild.errors import DriftError
from reprobuild.lock.yamlio import dumps_lock, load_lock, loads_lock, save_lock
from reprobuild.tiebreak import KeyOption, TieCandidate, choose_key, decide, forcing_times
from reprobuild.types import DEFAULT_TIE_BAND
from reprobuild.workflow.build import build
from reprobuild.workflow.verify import verify

from .conftest import EXAMPLES

BLAS = KeyOption("0x" + "c" * 32, 1.00, "ref_conv_im2col_blas_f32")
DIRECT = KeyOption("0x" + "a" * 32, 1.20, "ref_conv_direct_f32")  # lowest key hash
K16 = KeyOption("0x" + "1" * 32, 0.95, "ref_conv_im2col_k16_f32")  # fastest, chunked sums
SLOW = KeyOption("0x" + "0" * 32, 2.00, "ref_conv_direct_f32")  # lowest hash, outside


@pytest.mark.parametrize("order", list(itertools.permutations([BLAS, DIRECT, K16, SLOW])))
def test_the_key_choice_is_the_rule_in_any_timing_order(order) -> None:
    # within 40 % of 0.95: K16, BLAS and DIRECT; the steadiest kernel (one partial sum, not
    # one per tap or per chunk) first: BLAS, though K16 is faster and DIRECT's hash lower
    assert order[choose_key(order, DEFAULT_TIE_BAND)] is BLAS
    # no band: the fastest as measured
    assert order[choose_key(order, 0.0)] is K16
    # a band too narrow for BLAS: K16 alone
    assert order[choose_key(order, 0.04)] is K16


def test_equal_times_go_to_the_lowest_key_hash_not_the_first_timed() -> None:
    a = KeyOption("0x" + "2" * 32, 1.0, "k")
    b = KeyOption("0x" + "1" * 32, 1.0, "k")
    assert choose_key([a, b], 0.0) == choose_key([a, b], 0.4) == 1
    assert choose_key([b, a], 0.0) == 0


def test_an_outlier_reading_cannot_decide_between_keys() -> None:
    # the linear key's kernel was once timed 0.05 ms, 20x below its other runs
    linear = [TieCandidate(0x1, "ref_conv_im2col_blas_f32", (1.20, 1.10, 0.05))]
    hwc = [TieCandidate(0x2, "ref_conv_direct_f32", (0.70, 0.71, 0.72))]
    times = [decide(c, DEFAULT_TIE_BAND).chosen_ms for c in (linear, hwc)]
    assert times == [1.10, 0.70]
    options = [KeyOption("0x" + "1" * 32, times[0], "blas"), KeyOption("0x" + "f" * 32, times[1])]
    assert choose_key(options, DEFAULT_TIE_BAND) == 1  # 1.10 is outside 0.70's band


def test_forcing_times_keep_the_running_key_and_raise_the_others_just_enough() -> None:
    options = [BLAS, DIRECT, K16]
    assert forcing_times(options, 0, DEFAULT_TIE_BAND) == [1.00, 1.20, 0.95]  # already chosen
    for runs in range(3):
        times = forcing_times(options, runs, DEFAULT_TIE_BAND)
        assert times[runs] == options[runs].time_ms
        forced = [dataclasses.replace(o, time_ms=t) for o, t in zip(options, times, strict=True)]
        assert choose_key(forced, DEFAULT_TIE_BAND) == runs


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """cnn.onnx recorded in ``a/`` (with its ``caches/``), the folder returned."""
    a = tmp_path / "a"
    a.mkdir()
    shutil.copy(EXAMPLES / "cnn.onnx", a / "cnn.onnx")
    monkeypatch.chdir(a)
    build("cnn.onnx", lock="t.lock", out="t.engine", backend=ReferenceBackend())
    return a


def _running(engine: str) -> dict[str, str]:
    meta = ReferenceBackend().engine_metadata(Path(engine).read_bytes())
    return {m["name"]: m["key"] for m in meta["layers"] if "key" in m}


def test_the_lock_records_which_key_each_layer_runs(recorded: Path) -> None:
    lock = load_lock("t.lock")
    by_layer: dict[str, list] = {}
    for e in lock.layers:
        by_layer.setdefault(e.layer, []).append(e)
    running = _running("t.engine")
    for name, entries in by_layer.items():
        if len(entries) == 1:
            assert entries[0].runs is None  # one key: nothing to choose, nothing written
            continue
        assert [e.key for e in entries if e.runs] == [running[name]]
        assert all(e.runs is False for e in entries if e.key != running[name])
    text = Path("t.lock").read_text()
    assert text.count("runs: true") == 2 and text.count("runs: false") == 2  # conv1, conv2
    assert dumps_lock(loads_lock(text)) == text


def _cheapen_idle_keys(lock_path: str) -> None:
    """Edit the stored recording cache so every layer's other key is far the cheapest."""
    (cache_file,) = Path("caches").rglob("*.cache")
    be = ReferenceBackend()
    cache = be.create_timing_cache(cache_file.read_bytes())
    for e in load_lock(lock_path).layers:
        if e.runs is False:
            assert cache.update(e.key, e.tactic, 1e-6)
    cache_file.write_bytes(bytes(cache.serialize()))


def test_a_locked_build_runs_the_recorded_key_whatever_the_cache_says(recorded: Path) -> None:
    before = _running("t.engine")
    _cheapen_idle_keys("t.lock")
    locked = build("cnn.onnx", lock="t.lock", out="u.engine", backend=ReferenceBackend())
    assert not locked.recorded and locked.timed == 0
    assert _running("u.engine") == before
    assert Path("u.engine").read_bytes() == Path("t.engine").read_bytes()


class _TimesOnly(ReferenceBackend):
    """A builder whose key choice the lock cannot steer (as TensorRT's, not yet shown to
    honour cached-time edits): the recorded times are written back, nothing more."""

    key_rule = False


def test_a_build_that_runs_another_key_than_the_recorded_one_is_drift(recorded: Path) -> None:
    lock = load_lock("t.lock")
    conv1 = [e for e in lock.layers if e.layer == "conv1"]
    for e in conv1:
        e.runs = not e.runs  # the lock now says the other key runs
    save_lock(lock, Path("t.lock"))
    with pytest.raises(DriftError) as err:
        build("cnn.onnx", lock="t.lock", out="v.engine", backend=_TimesOnly())
    assert err.value.exit_code == 1
    message = str(err.value)
    assert "conv1" in message and all(e.key in message for e in conv1)
    # the reference builder honours the lock's choice: it runs the key the lock names
    build("cnn.onnx", lock="t.lock", out="w.engine", backend=ReferenceBackend())
    assert _running("w.engine")["conv1"] == next(e.key for e in conv1 if e.runs)


def _probes(doc: dict) -> list[tuple]:
    rows = [*doc["control"]["probes"], *doc["sensitivity"]]
    return [(p["key"], p["tried"], p["bits_flipped"], p["changed"], p["error"]) for p in rows]


def test_the_control_and_sensitivity_are_the_same_with_and_without_caches(
    recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a/: the stored recording cache says the other keys are far cheaper; b/: no caches/
    # at all, and its recording build is timed by another knob
    _cheapen_idle_keys("t.lock")
    b = recorded.parent / "b"
    b.mkdir()
    for name in ("cnn.onnx", "t.lock"):
        shutil.copy(recorded / name, b / name)
    assert not (b / "caches").exists()
    docs = []
    retimed = ReferenceBackend(timing="reverse")
    for folder, backend in ((recorded, ReferenceBackend()), (b, retimed)):
        monkeypatch.chdir(folder)
        report = verify(lock="t.lock", backend=backend, rebuilds=1, with_sensitivity=True)
        assert report.reproducible and report.power is True
        docs.append(report.to_json())
    assert _probes(docs[0]) == _probes(docs[1])
    assert any(p[3] for p in _probes(docs[0]))
