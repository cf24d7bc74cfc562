"""Pins as NVIDIA applies them: exactly the locked keys, finite times; cache file names that
change only with what makes caches differ."""

from __future__ import annotations

import json
import math
from pathlib import Path

from reprobuild.backends.base import TimingValue
from reprobuild.cachedir import cache_path
from reprobuild.lock.model import LayerEntry, LockCandidate
from reprobuild.pinning import FAILED_TIME_MS, cross_check_kernels, finite_time, update_tactics
from reprobuild.types import BuildSettings
from tests.conftest import trt_env


class _RecordingCache:
    """A cache double that refuses non-finite times like TensorRT and logs each update."""

    def __init__(self, entries: dict[str, TimingValue]) -> None:
        self.entries = dict(entries)
        self.updates: list[tuple[str, int, float]] = []

    def query(self, key: str) -> TimingValue | None:
        return self.entries.get(key)

    def update(self, key: str, tactic: int, time_ms: float) -> bool:
        self.updates.append((key, tactic, time_ms))
        if key not in self.entries or not math.isfinite(time_ms):
            return False
        self.entries[key] = TimingValue(tactic, time_ms)
        return True


def test_update_tactics_writes_exactly_the_locked_keys_with_finite_times() -> None:
    k = ["0x" + c * 32 for c in "abc"]
    cache = _RecordingCache(
        {
            k[0]: TimingValue(1, float("inf")),
            k[1]: TimingValue(2, float("nan")),
            k[2]: TimingValue(3, 0.25),  # not in the lock: never touched
        }
    )
    update_tactics(cache, [LayerEntry(k[0], "a", 7), LayerEntry(k[1], "b", 8)])
    assert [(key, t) for key, t, _ in cache.updates] == [(k[0], 7), (k[1], 8)]
    assert all(math.isfinite(ms) and ms > 0 for _, _, ms in cache.updates)
    assert cache.entries[k[2]] == TimingValue(3, 0.25)


def test_update_tactics_writes_every_key_back_as_nvidias_replays_do() -> None:
    """TensorRT-Model-Connect writes ``update(key, query(key))`` for every key before its
    strict build; a key the lock does not change gets exactly its own value."""
    k = ["0x" + c * 32 for c in "abcd"]
    cache = _RecordingCache(
        {
            k[0]: TimingValue(1, 0.5),  # the lock says the same tactic and time: its own value
            k[1]: TimingValue(2, 0.5),  # same tactic, no time in the lock: its own value
            k[2]: TimingValue(3, 0.5),  # same tactic, another recorded time: the lock's
            k[3]: TimingValue(4, float("inf")),  # same tactic, failed: left as it is (inf)
        }
    )
    results = update_tactics(
        cache,
        [
            LayerEntry(k[0], "a", 1, time_ms=0.5),
            LayerEntry(k[1], "b", 2),
            LayerEntry(k[2], "c", 3, time_ms=0.75),
            LayerEntry(k[3], "d", 4),
        ],
    )
    assert cache.updates == [(k[0], 1, 0.5), (k[1], 2, 0.5), (k[2], 3, 0.75)]
    assert [r.updated for r in results] == [False, False, True, False]
    assert math.isinf(cache.entries[k[3]].time_ms)


def test_a_failed_entry_never_becomes_cheap() -> None:
    k = ["0x" + c * 32 for c in "ab"]
    real = TimingValue(5, 0.02)
    cache = _RecordingCache({k[0]: TimingValue(1, float("inf")), k[1]: real})
    update_tactics(cache, [LayerEntry(k[0], "a", 9, time_ms=float("inf"))])
    assert cache.updates == [(k[0], 9, FAILED_TIME_MS)]
    assert cache.entries[k[0]].time_ms > real.time_ms  # cannot win a choice of keys


def test_finite_time() -> None:
    assert finite_time(0.5) == 0.5 and finite_time(0.0) == 0.0
    for bad in (None, float("inf"), float("-inf"), float("nan"), -1.0):
        assert finite_time(bad) == FAILED_TIME_MS


def test_cache_file_name_changes_only_with_what_makes_caches_differ(tmp_path: Path) -> None:
    base = trt_env(cuda_major="12", driver="550.54", runtime="12.4")
    name = cache_path(tmp_path, base, BuildSettings(), "ab" * 32)
    # advisory fields (the driver, the first libcudart found) never change the cache
    for same in (
        trt_env(cuda_major="12", driver="575", runtime="12.4"),
        trt_env(cuda_major="12", driver="550.54", runtime="13.0"),
    ):
        assert cache_path(tmp_path, same, BuildSettings(), "ab" * 32) == name
    for changed in (
        trt_env("10.13.3.10", cuda_major="12", driver="550.54", runtime="12.4"),
        trt_env(gpu="NVIDIA H100 80GB HBM3", cc="9.0", cuda_major="12", driver="550.54"),
        trt_env(cuda_major="13", driver="550.54", runtime="12.4"),
    ):
        assert cache_path(tmp_path, changed, BuildSettings(), "ab" * 32) != name


def test_the_kernel_check_compares_hashes_when_candidates_share_a_kernel_name() -> None:
    """Real tables list one kernel name under several tactic hashes (e.g. the ``tactic_id``
    column of sampleEditableTimingCache's table, and the repeated ``sm80_xmma_gemm`` names
    in tests/fixtures/trt-logs): the engine's TacticValue decides, not TacticName."""
    shared = "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16"
    cands = [LockCandidate(0x11, shared), LockCandidate(0x22, shared)]
    entries = [LayerEntry("0x" + "a" * 32, "fc", 0x11, shared, False, cands)]

    def info(tactic: int | None) -> str:
        layer: dict = {"Name": "fc", "TacticName": shared}
        if tactic is not None:
            layer["TacticValue"] = f"0x{tactic:016x}"
        return json.dumps({"Layers": [layer], "Bindings": []})

    assert cross_check_kernels(info(0x11), entries).problems == []
    drift = cross_check_kernels(info(0x22), entries)
    assert len(drift.problems) == 1 and "0x22" in drift.problems[0]
    # without a TacticValue the shared name proves nothing either way: no drift claimed
    assert cross_check_kernels(info(None), entries).problems == []


def test_a_layer_running_an_unnamed_keys_tactic_is_not_drift() -> None:
    """A layer's second format combination can be a key no log line names (locked as
    ``<cache-only ...>``); when the builder runs that key, the engine shows its tactic, which
    may be another candidate of the layer's named key: locked, not drift."""
    cands = [LockCandidate(0x11, "k1"), LockCandidate(0x22, "k2")]
    entries = [
        LayerEntry("0x" + "a" * 32, "conv", 0x11, "k1", False, cands),
        LayerEntry("0x" + "b" * 32, "<cache-only 0xbbbb>", 0x22, None, False, []),
    ]
    layer = {"Name": "conv", "TacticName": "k2", "TacticValue": f"0x{0x22:016x}"}
    info = json.dumps({"Layers": [layer], "Bindings": []})
    assert cross_check_kernels(info, entries).problems == []
    # the negative control: without the unnamed key, the same engine is drift
    assert len(cross_check_kernels(info, entries[:1]).problems) == 1


def test_a_key_whose_table_prints_twice_keeps_the_timed_candidates() -> None:
    """A second, one-row table for a key (a cache hit announced again, like the ``got cached
    result`` lines of tests/fixtures/trt-logs/INDEX.md's 8.x logs) must not replace the
    candidates the timed table listed."""
    from types import SimpleNamespace as NS

    from reprobuild.workflow.pinned import entries_from_records

    key = "0x" + "c" * 32
    cands = [NS(tactic_hash=0x1, kernel="k1"), NS(tactic_hash=0x2, kernel="k2")]
    timed = NS(
        key=key, layer="fc", chosen=0x1, candidates=cands, chosen_kernel="k1", from_cache=False
    )
    echo = NS(
        key=key, layer="fc", chosen=0x1, candidates=cands[:1], chosen_kernel="k1", from_cache=True
    )
    for records in ([timed, echo], [echo, timed]):
        entries, _ = entries_from_records(records, {key: 0x1})
        assert [c.tactic for c in entries[0].candidates] == [0x1, 0x2]
