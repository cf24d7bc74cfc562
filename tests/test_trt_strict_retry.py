"""A failed strict build is a failure: a pinned build that fails with
ERROR_ON_TIMING_CACHE_MISS is built again without the flag only to name what missed, and the
build (or verify) exits 1 unless ``--allow-cache-miss-retry`` accepts a retried build whose
cache map matches the lock. ``verify`` lists every retry in its text and JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from reprobuild.errors import EXIT_DIFFERENT
from tests.conftest import EXAMPLES
from tests.test_trt_variants import install_standin
from tests.trt_standin._impl import _say


def _strict_builds_fail(trt: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every build with ERROR_ON_TIMING_CACHE_MISS fails, although the cache holds every
    key (the retried build then times nothing and keeps the locked map): the one case the
    map check alone cannot call drift."""
    original = trt.Builder.build_serialized_network

    def strict_fails(self, network, config):
        if config.get_flag(trt.BuilderFlag.ERROR_ON_TIMING_CACHE_MISS):
            _say(self._logger, "ERROR", "Timing cache miss for an internal node")
            return None
        return original(self, network, config)

    monkeypatch.setattr(trt.Builder, "build_serialized_network", strict_fails)


def _recorded(tmp_path: Path, cli) -> tuple[str, ...]:
    shutil.copy(EXAMPLES / "mlp.onnx", tmp_path / "mlp.onnx")
    args = ("build", str(tmp_path / "mlp.onnx"), "--backend", "tensorrt", "--lock",
            str(tmp_path / "t.lock"), "--cache-dir", str(tmp_path / "caches"))  # fmt: skip
    assert cli(*args, "-o", str(tmp_path / "rec.engine")).code == 0
    return args


def test_a_failed_strict_build_exits_1_unless_the_retry_is_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli
) -> None:
    trt = install_standin(monkeypatch)
    args = _recorded(tmp_path, cli)
    _strict_builds_fail(trt, monkeypatch)
    lock_before = (tmp_path / "t.lock").read_bytes()
    res = cli(*args, "-o", str(tmp_path / "a.engine"))
    assert res.code == EXIT_DIFFERENT, res
    assert "failed with ERROR_ON_TIMING_CACHE_MISS (Timing cache miss for an internal" in res.err
    assert "--allow-cache-miss-retry" in res.err
    # every locked key held and the retry matches: said so, never called drift
    assert "no tactic drifted" in res.err and "drift: the build does not match" not in res.err
    assert not (tmp_path / "a.engine").exists()
    assert (tmp_path / "t.lock").read_bytes() == lock_before
    res = cli(*args, "-o", str(tmp_path / "b.engine"), "--allow-cache-miss-retry")
    assert res.code == 0, res
    assert "warning: the pinned build failed with ERROR_ON_TIMING_CACHE_MISS" in res.err


def test_a_miss_is_named_by_key_and_fails_even_when_retries_are_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli
) -> None:
    trt = install_standin(monkeypatch)
    args = _recorded(tmp_path, cli)
    trt._standin.rekey_ops.add("fc2")  # fc2 gets a new key: a real miss
    res = cli(*args, "-o", str(tmp_path / "a.engine"), "--allow-cache-miss-retry")
    assert res.code == EXIT_DIFFERENT, res
    assert "was added by the build" in res.err and "missed keys 0x" in res.err


def test_verify_lists_every_retry_in_text_and_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli
) -> None:
    trt = install_standin(monkeypatch)
    _recorded(tmp_path, cli)
    _strict_builds_fail(trt, monkeypatch)
    base = ("verify", "--lock", str(tmp_path / "t.lock"), "--backend", "tensorrt",
            "--cache-dir", str(tmp_path / "caches"), "--rebuilds", "2")  # fmt: skip
    res = cli(*base, "--json")
    assert res.code == EXIT_DIFFERENT, res
    data = json.loads(res.out)
    assert data["reproducible"] is False
    assert [r.split(":")[0] for r in data["strict_retries"]] == ["rebuild 1", "rebuild 2"]
    assert all(b["retry"] for b in data["builds"])
    res = cli(*base, "--json", "--allow-cache-miss-retry")
    assert res.code == 0, res
    data = json.loads(res.out)
    assert data["reproducible"] is True
    retries = data["strict_retries"]
    assert retries[:2] == [r for r in retries if r.startswith("rebuild")] and len(retries) > 2
    assert all(p["retry"] for p in data["control"]["probes"])  # the control's builds too
    res = cli(*base, "--allow-cache-miss-retry")
    assert res.code == 0, res
    assert res.out.count("retried without ERROR_ON_TIMING_CACHE_MISS: ") == len(retries)
