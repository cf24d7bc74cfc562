"""The reference backend's BLAS threads and the memory it keeps between builds and runs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from reprobuild.backends.base import BuildSettings
from reprobuild.backends.reference import ReferenceBackend, engine, modelcache, threads
from reprobuild.errors import CacheError, UsageError
from tests.test_reference_build import cnn_model


def _blas_threads() -> int:
    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


def _build(backend: ReferenceBackend, model: str, cache=None):
    cache = cache if cache is not None else backend.create_timing_cache()
    return backend.build(model, BuildSettings(), cache, lambda line: None), cache


def _feeds(out) -> dict[str, np.ndarray]:
    meta = ReferenceBackend().engine_metadata(out.engine)
    rng = np.random.default_rng(0)
    return {i["name"]: rng.random(i["shape"], dtype=np.float32) for i in meta["inputs"]}


# -- threads ----------------------------------------------------------------------------------
def test_thread_count_resolves_from_argument_and_default(cli, tmp_path) -> None:
    assert threads.resolve(None) == threads.DEFAULT_THREADS == 1
    assert threads.resolve(3) == 3 and threads.resolve(0) == 0
    assert ReferenceBackend().threads == 1 and ReferenceBackend(threads=2).threads == 2
    for bad in (-1, True, 1.5):
        with pytest.raises(UsageError, match="--threads must be a whole number"):
            ReferenceBackend(threads=bad)
    # The CLI option reaches the backend: the build output records the count used.
    from reprobuild.backends import get_backend

    assert get_backend("reference", threads=2).threads == 2
    r = cli("build", str(tmp_path / "none.onnx"), "--backend", "reference", "--threads", "-1")
    assert r.code == 2 and "--threads must be a whole number" in r.err, r


def test_limit_holds_inside_and_is_undone_after() -> None:
    before = _blas_threads()
    with threads.limited(1) as used:
        assert used == 1 and _blas_threads() == 1
    assert _blas_threads() == before
    with threads.limited(0) as used:
        assert used == before  # 0 leaves BLAS alone and reports what it uses


def test_threads_are_part_of_the_target(tmp_path: Path) -> None:
    """The BLAS thread count changes bits (OpenBLAS splits a GEMM among its threads), so
    it is identity: another count is another target, with its own keys and cache."""
    model = cnn_model(tmp_path)
    # Two threads, not the BLAS default (threads=0): the default is the machine's core count,
    # which may be one; two threads are two on any machine.
    one, many = ReferenceBackend(threads=1), ReferenceBackend(threads=2)
    default = ReferenceBackend(threads=0).environment().identity_dict()["blas_threads"]
    assert default == str(_blas_threads())
    out1, cache1 = _build(one, model)
    assert out1.extra["blas_threads"] == 1
    assert one.environment().identity_dict()["blas_threads"] == "1"
    assert many.environment().identity_dict()["blas_threads"] == "2"
    assert one.environment().fingerprint() != many.environment().fingerprint()
    with pytest.raises(CacheError, match="another environment"):
        many.create_timing_cache(cache1.serialize())
    out2, cache2 = _build(many, model)
    assert out2.extra["blas_threads"] == 2
    assert set(cache2.tactic_map()).isdisjoint(cache1.tactic_map())  # other keys


# -- memory -----------------------------------------------------------------------------------
def test_engine_run_reuses_the_builds_folded_model(tmp_path: Path) -> None:
    model = cnn_model(tmp_path)
    modelcache.clear()
    backend = ReferenceBackend()
    out, cache = _build(backend, model)
    sha = hashlib.sha256(Path(model).read_bytes()).hexdigest()
    folded = modelcache.get(sha)
    assert folded is not None
    loaded = engine.load_engine(out.engine, backend.environment())
    assert loaded.prepared is folded  # folded once, by the build
    again, _ = _build(backend, model, backend.create_timing_cache(cache.serialize()))
    assert again.engine == out.engine and again.layer_info == out.layer_info
    backend.release()
    assert modelcache.get(sha) is None and not engine._LOADED


def test_one_engine_loaded_at_a_time_and_outputs_unchanged(tmp_path: Path) -> None:
    model = cnn_model(tmp_path)
    backend = ReferenceBackend()
    out, cache = _build(backend, model)
    feeds = _feeds(out)
    warm = backend.run(out.engine, feeds)
    backend.release()  # cold: parse and fold the engine's own model
    cold = backend.run(out.engine, feeds)
    assert len(engine._LOADED) == 1
    for name in warm:
        assert warm[name].tobytes() == cold[name].tobytes()
    other, _ = _build(ReferenceBackend(timing="reverse"), model)
    assert other.engine != out.engine
    backend.run(other.engine, feeds)
    assert len(engine._LOADED) == 1  # the first engine was dropped


def test_engine_bytes_round_trip_without_copies(tmp_path: Path) -> None:
    data = engine.write_engine({"environment": {}}, b"model-bytes")
    meta, view, digest = engine.split_engine(data)
    assert bytes(view) == b"model-bytes" and digest == data[-32:]
    assert engine.read_engine(bytearray(data))[1] == b"model-bytes"


def test_build_report_says_how_many_blas_threads_ran(cli, tmp_path: Path) -> None:
    import json

    model = cnn_model(tmp_path)
    for count, want in (("1", 1), ("2", 2)):
        lock, report = tmp_path / f"t{count}.lock", tmp_path / f"r{count}.json"
        r = cli(
            "build", str(model), "--lock", str(lock), "--out", str(tmp_path / f"e{count}"),
            "--report", str(report), "--cache-dir", str(tmp_path / "caches"),
            "--backend", "reference", "--threads", count, "-q",
        )  # fmt: skip
        assert r.code == 0, r
        assert json.loads(report.read_text())["blas_threads"] == want
