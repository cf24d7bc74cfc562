"""A model input with a dynamic dimension and no shapes is refused before any build, on
every backend, naming the dimensions and the flags; no pin is blamed (none is involved)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reprobuild.errors import EXIT_USAGE
from tests.test_tensorrt_backend import twin_matmul_model
from tests.test_trt_variants import install_standin


@pytest.mark.parametrize("backend", ["reference", "tensorrt"])
def test_a_dynamic_model_without_shapes_is_refused_before_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli, backend: str
) -> None:
    trt = install_standin(monkeypatch)
    model = twin_matmul_model(tmp_path / "dyn.onnx", batch="batch")
    lock, engine = tmp_path / "t.lock", tmp_path / "t.engine"
    args = ("build", str(model), "--backend", backend, "--lock", str(lock), "-o", str(engine),
            "--cache-dir", str(tmp_path / "caches"))  # fmt: skip
    res = cli(*args)
    assert res.code == EXIT_USAGE, res
    line = res.err.strip().splitlines()[-1]
    assert str(model) in line and "input 'x' has a dynamic shape (batchx16; dynamic: batch)" in line
    assert "give it with --shapes x:1x16" in line
    assert "--min-shapes, --opt-shapes and --max-shapes" in line
    assert "pin" not in line
    assert trt._standin.builds == 0  # refused before any work
    assert not lock.exists() and not engine.exists() and not (tmp_path / "caches").exists()
    # with the shapes given it builds
    assert cli(*args, "--shapes", "x:2x16").code == 0
