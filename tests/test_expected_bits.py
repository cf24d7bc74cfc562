"""A pin clears its target's expected bits and says so; ``verify --require-digest`` makes
the check across machines mandatory (exit 1 while the lock records no bits)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reprobuild.lock.model import OutputDigest
from reprobuild.lock.yamlio import load_lock, save_lock

from .conftest import EXAMPLES, sample_lock

BASE = ("--backend", "reference", "-q")


def test_pin_names_the_target_and_the_cleared_bits(cli, tmp_path: Path) -> None:
    lock = sample_lock()
    lock.outputs = [OutputDigest("seeded:0", "ab" * 32)]
    path = tmp_path / "t.lock"
    save_lock(lock, path)
    r = cli("pin", "layer=layer0", "tactic=0x1001", "--lock", str(path))
    assert r.code == 0, r
    assert f"target {lock.target_name}: cleared its expected bits for seeded:0" in r.out
    assert "--record-digests" in r.out and "without --frozen" in r.out
    assert load_lock(path).outputs == []
    r = cli("unpin", "layer=layer0", "--lock", str(path), "--json")
    doc = json.loads(r.out)
    assert (doc["target"], doc["cleared_digests"]) == (lock.target_name, [])


def test_pin_json_lists_the_cleared_inputs(cli, tmp_path: Path) -> None:
    lock = sample_lock()
    lock.outputs = [OutputDigest("seeded:0", "ab" * 32), OutputDigest("seeded:1", "cd" * 32)]
    path = tmp_path / "t.lock"
    save_lock(lock, path)
    r = cli("pin", "layer=layer0", "tactic=0x1000", "--lock", str(path), "--json")
    assert json.loads(r.out)["cleared_digests"] == []  # the same tactic: nothing cleared
    r = cli("pin", "layer=layer0", "tactic=0x1002", "--lock", str(path), "--json")
    doc = json.loads(r.out)
    assert doc["cleared_digests"] == ["seeded:0", "seeded:1"]
    assert doc["target"] == lock.target_name


@pytest.fixture
def cnn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _other_candidate(cli, lock: str) -> tuple[str, str]:
    """A layer and a recorded candidate of it that the lock did not choose."""
    doc = json.loads(cli("show", "--lock", lock, "--candidates", "--json").out)
    for layer in doc["layers"]:
        for c in layer["candidates"]:
            if c["tactic"] != layer["tactic"]:
                return layer["key"], c["tactic"]
    raise AssertionError("no layer has a second candidate")


def test_require_digest_fails_until_the_bits_are_recorded(cli, cnn: Path) -> None:
    assert cli("build", "cnn.onnx", "--lock", "t.lock", *BASE).code == 0
    verify = ("verify", "--lock", "t.lock", "-n", "1", "--no-control", "--require-digest")
    r = cli(*verify, *BASE)
    assert r.code == 0, r
    key, tactic = _other_candidate(cli, "t.lock")
    assert cli("pin", f"key={key}", f"tactic={tactic}", "--lock", "t.lock").code == 0
    assert cli("build", "cnn.onnx", "--lock", "t.lock", "--frozen", *BASE).code == 0
    r = cli(*verify, *BASE)
    assert r.code == 1, r
    assert r.err.count("\n") == 1 and "--require-digest: t.lock records no expected bits" in r.err
    assert "inputs seeded:0" in r.err
    r = cli(*verify, "--json", *BASE)
    assert r.code == 1 and json.loads(r.out)["matches_recorded"] is None
    assert cli("verify", "--lock", "t.lock", "-n", "1", "--no-control", *BASE).code == 0
    r = cli(*verify, "--outputs", "output", *BASE)
    assert r.code == 2 and "drop --outputs" in r.err
    assert cli("build", "cnn.onnx", "--lock", "t.lock", *BASE).code == 0  # records them
    assert cli(*verify, *BASE).code == 0


def test_atol_rtol_gate_accuracy_against_onnxruntime(cli, cnn: Path) -> None:
    assert cli("build", "cnn.onnx", "--lock", "t.lock", *BASE).code == 0
    verify = ("verify", "--lock", "t.lock", "-n", "1", "--no-control", *BASE)
    r = cli(*verify, "--json")
    assert r.code == 0 and json.loads(r.out)["within_tolerance"] is None  # reported only
    r = cli(*verify, "--atol", "1e-3", "--rtol", "1e-3", "--json")
    doc = json.loads(r.out)
    assert r.code == 0 and doc["within_tolerance"] is True, r
    assert doc["accuracy"]["tolerance"] == {
        "atol": 1e-3, "rtol": 1e-3, "elements_beyond": 0, "within": True,
    }  # fmt: skip
    # --atol 0: exit 1 exactly where some element differs from ONNX Runtime's at all
    r = cli(*verify, "--atol", "0", "--json")
    doc = json.loads(r.out)
    beyond = doc["accuracy"]["tolerance"]["elements_beyond"]
    assert (beyond > 0) == (doc["accuracy"]["max_abs"] > 0)
    assert r.code == (1 if beyond else 0) and doc["within_tolerance"] is (beyond == 0), r
    r = cli(*verify, "--rtol", "-1")
    assert r.code == 2 and "--rtol must be a finite number >= 0" in r.err, r


def test_tolerance_is_polygraphys_check() -> None:
    import numpy as np

    from reprobuild.accuracy import Tolerance

    want = np.array([1.0, 100.0, 0.0, np.nan, np.inf])
    got = np.array([1.04, 101.0, 0.0, np.nan, np.inf])
    assert Tolerance(atol=0.1, rtol=0.0).beyond(got, want) == 1  # 100 -> 101
    assert Tolerance(atol=0.0, rtol=0.05).beyond(got, want) == 0  # 0.04 <= 0.05 * 1
    assert Tolerance(atol=0.0, rtol=0.0).beyond(got, want) == 2
    assert Tolerance(1.0, 1.0).beyond(np.array([np.nan]), np.array([0.0])) == 1
