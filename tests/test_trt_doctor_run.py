"""``doctor`` says, before anything is recorded, whether ``run`` finds a CUDA runtime and,
when it does not, which pip package gives one for the installed TensorRT."""

from __future__ import annotations

import json
import sys

import pytest

from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.backends.tensorrt import device as device_mod
from tests.test_tensorrt_backend import NO_GPU
from tests.test_trt_variants import install_standin


def test_doctor_names_the_runtime_run_will_use(monkeypatch: pytest.MonkeyPatch, cli) -> None:
    install_standin(monkeypatch)
    res = cli("doctor", "--json")
    run = json.loads(res.out)["run"]
    assert run["found"] is True and run["package"] is None and run["how"]
    assert "run (verify, expected bits): " in cli("doctor").out


@pytest.mark.parametrize(
    ("version", "package"),
    [("10.13.3.9", "nvidia-cuda-runtime-cu12"), ("11.4.0.106", "nvidia-cuda-runtime")],
)
def test_doctor_names_the_package_when_no_runtime_is_found(
    monkeypatch: pytest.MonkeyPatch, cli, version: str, package: str
) -> None:
    install_standin(monkeypatch, version=version)
    monkeypatch.setattr(device_mod, "find_device", lambda: (None, "no CUDA runtime found"))
    run = json.loads(cli("doctor", "--json").out)["run"]
    assert run == {"found": False, "how": "no CUDA runtime found", "package": package}
    out = cli("doctor").out
    assert f"run (verify, expected bits): NO CUDA runtime found; pip install {package}\n" in out


def test_doctor_without_tensorrt_says_nothing_about_run(
    monkeypatch: pytest.MonkeyPatch, cli
) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setattr(cuda_probe, "probe_cuda", lambda: NO_GPU)
    assert json.loads(cli("doctor", "--json").out)["run"] is None
