"""verify, bisect and export-cache take the model the same way: ``MODEL`` or ``--model``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .conftest import EXAMPLES

BASE = ("--backend", "reference", "-q")


@pytest.fixture
def cnn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    shutil.copy(EXAMPLES / "mlp.onnx", tmp_path / "mlp.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_verify_and_bisect_take_model_both_ways(cli, cnn: Path) -> None:
    assert cli("build", "cnn.onnx", "--lock", "t.lock", *BASE).code == 0
    shutil.copy("t.lock", "u.lock")
    verify = ("verify", "--lock", "t.lock", "-n", "1", "--no-control", *BASE)
    assert cli(*verify, "cnn.onnx").code == 0
    assert cli(*verify, "--model", "cnn.onnx").code == 0
    assert cli(*verify, "cnn.onnx", "--model", "cnn.onnx").code == 0  # the same, twice
    r = cli(*verify, "cnn.onnx", "--model", "mlp.onnx")
    assert r.code == 2 and "two models given: cnn.onnx and --model mlp.onnx" in r.err, r
    r = cli(*verify, "--model", "mlp.onnx")  # another model than the lock's: refused as before
    assert r.code == 2, r
    bisect = ("bisect", "--lock", "t.lock", "--against", "u.lock", *BASE)
    assert cli(*bisect, "--model", "cnn.onnx").code == 0
    assert cli(*bisect, "cnn.onnx").code == 0


def test_export_cache_takes_the_model_as_an_argument_too(cli) -> None:
    for command in ("verify", "bisect", "export-cache"):
        r = cli(command, "--help")
        assert r.code == 0 and "--model" in r.out and "MODEL" in r.out, (command, r)
