"""One hash per output line says what it covers; counts read right for 1; a huge schema
number is a refusal, not an internal error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reprobuild.lock.yamlio import save_lock

from .conftest import EXAMPLES, sample_lock

BASE = ("--backend", "reference", "-q")


@pytest.fixture
def cnn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_verify_lines_name_what_each_hash_covers(cli, cnn: Path) -> None:
    assert cli("build", "cnn.onnx", "--lock", "t.lock", *BASE).code == 0
    r = cli("verify", "--lock", "t.lock", "-n", "1", "--no-control", *BASE)
    assert r.code == 0, r
    assert "build 1: sha256 per output output=" in r.out
    assert "bits: digest of all outputs " in r.out and "equals the one recorded" in r.out
    assert "REPRODUCIBLE: 1 rebuild of 5 layers" in r.out


def test_bisect_counts_one_layer(cli, cnn: Path) -> None:
    assert cli("build", "cnn.onnx", "--lock", "a.lock", *BASE).code == 0
    shutil.copy("a.lock", "b.lock")
    assert cli("pin", "layer=fc", "tactic=ref_gemm_tree8_f32", "--lock", "b.lock").code == 0
    r = cli("bisect", "--lock", "a.lock", "--against", "b.lock", *BASE)
    assert r.code == 1 and "(1 layer differs, " in r.out, r


@pytest.mark.parametrize("schema", ["0x" + "f" * 4000, "-0x" + "f" * 4000, "9" * 4000])
def test_a_huge_schema_number_is_a_refusal(cli, tmp_path: Path, schema: str) -> None:
    path = tmp_path / "t.lock"
    save_lock(sample_lock(), path)
    path.write_text(path.read_text().replace("schema: 2", f"schema: {schema}", 1))
    r = cli("show", "--lock", str(path))
    assert r.code == 2 and r.err.count("\n") == 1 and "internal error" not in r.err, r
    assert "schema" in r.err and "t.lock" in r.err
