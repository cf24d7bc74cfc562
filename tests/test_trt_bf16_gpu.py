"""bfloat16 on a GPU without bfloat16 kernels is refused before TensorRT builds anything.

TensorRT has bfloat16 kernels only from compute capability 8.0 (Ampere); a strongly typed
network cannot fall back to another type, so the build would fail after the recording's
work. The same model builds on an Ampere GPU, and fp16 builds on the older one.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from reprobuild.backends.tensorrt import cuda_probe
from tests.conftest import EXAMPLES
from tests.test_trt_variants import A100, install_standin

T4 = dataclasses.replace(A100, gpus=(cuda_probe.GpuInfo(0, "Tesla T4", "7.5"),))


def _build(cli, tmp_path: Path, precision: str) -> object:
    model = tmp_path / "mlp.onnx"
    shutil.copy(EXAMPLES / "mlp.onnx", model)
    lock = tmp_path / f"{precision}.lock"
    return cli(
        "build", str(model), "--backend", "tensorrt", "--lock", str(lock),
        "--precision", precision, "-o", str(tmp_path / f"{precision}.engine"),
    )  # fmt: skip


def test_bf16_is_refused_before_ampere_and_fp16_builds(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    install_standin(monkeypatch, cuda=T4)
    monkeypatch.chdir(tmp_path)
    res = _build(cli, tmp_path, "bf16")
    assert res.code == 2, res
    assert "Tesla T4 (compute capability 7.5) has no bfloat16 kernels" in res.err
    assert "--precision fp16" in res.err and "Traceback" not in res.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.onnx"]  # nothing written
    assert _build(cli, tmp_path, "fp16").code == 0


def test_bf16_builds_on_ampere(monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path) -> None:
    install_standin(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert _build(cli, tmp_path, "bf16").code == 0
