"""``doctor`` says, before anything is recorded, whether ``run`` finds a CUDA runtime and,
when it does not, which pip package gives one for the installed TensorRT."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.backends.tensorrt import device as device_mod
from reprobuild.errors import EXIT_USAGE
from tests.test_tensorrt_backend import MLP, NO_GPU
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


@pytest.mark.parametrize(
    ("version", "package"),
    [("10.13.3.9", "nvidia-cuda-runtime-cu12"), ("11.4.0.106", "nvidia-cuda-runtime")],
)
def test_a_recording_without_a_cuda_runtime_is_refused_before_any_work(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path, version: str, package: str
) -> None:
    """The lock's expected bits come from running the engine: a TensorRT recording that
    could not run it is refused up front (exit 2, doctor's words), never a warning at its
    end and a verify that exits 3 later. A locked build needs no runtime."""
    install_standin(monkeypatch, version=version)
    lock, out, caches = tmp_path / "t.lock", tmp_path / "m.engine", tmp_path / "c"
    args = ("build", str(MLP), "--backend", "tensorrt", "--lock", str(lock), "-o", str(out),
            "--cache-dir", str(caches))  # fmt: skip
    found = device_mod.find_device
    monkeypatch.setattr(device_mod, "find_device", lambda: (None, "no CUDA runtime found"))
    res = cli(*args)
    assert res.code == EXIT_USAGE, res
    assert res.err == (
        f"error: NO CUDA runtime found; pip install {package}: a TensorRT recording runs its "
        "engine for the lock's expected bits (what verify checks), and that needs a CUDA "
        "runtime (`reprobuild doctor` shows what run finds)\n"
    )
    assert sorted(tmp_path.iterdir()) == []  # nothing built, nothing written
    monkeypatch.setattr(device_mod, "find_device", found)
    assert cli(*args).code == 0
    monkeypatch.setattr(device_mod, "find_device", lambda: (None, "no CUDA runtime found"))
    assert cli(*args).code == 0  # a locked build
    assert cli(*args, "--re-record").code == EXIT_USAGE


def test_the_reference_backend_records_without_a_cuda_runtime(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    monkeypatch.setattr(device_mod, "find_device", lambda: (None, "no CUDA runtime found"))
    res = cli("build", str(MLP), "--backend", "reference", "--lock", str(tmp_path / "t.lock"),
              "-o", str(tmp_path / "m.engine"), "--cache-dir", str(tmp_path / "c"))  # fmt: skip
    assert res.code == 0, res


@pytest.mark.parametrize(
    ("driver", "built_for", "problem"),
    [
        ("12.4", "13", "the driver supports CUDA 12.4, older than the CUDA 13 the installed "
         "TensorRT wheel (tensorrt-cu13) was built for: update the driver (580 or later for "
         "CUDA 13), or pip install tensorrt-cu12 (TensorRT for this driver's CUDA 12)"),
        ("11.8", "12", "the driver supports CUDA 11.8, older than the CUDA 12 the installed "
         "TensorRT wheel (tensorrt-cu12) was built for: update the driver (525 or later for "
         "CUDA 12)"),
        ("13.0", "13", None),
        ("12.4", None, None),  # the wheel's CUDA major unknown: nothing claimed
    ],
)  # fmt: skip
def test_doctor_says_when_the_driver_is_older_than_the_tensorrt_wheel(
    monkeypatch: pytest.MonkeyPatch, cli, driver: str, built_for: str | None, problem: str | None
) -> None:
    from reprobuild.backends.tensorrt import install

    gpu = cuda_probe.GpuInfo(0, "NVIDIA H100 80GB HBM3", "9.0")
    cuda = cuda_probe.CudaInfo(gpus=(gpu,), driver_version="x", driver_api_version=driver)
    install_standin(monkeypatch, version="11.4.0.106", cuda=cuda, gpu=gpu.name)
    monkeypatch.setattr(install, "tensorrt_cuda_major", lambda: built_for)
    assert json.loads(cli("doctor", "--json").out)["driver_problem"] == problem
    out = cli("doctor").out
    assert (f"CUDA driver: TOO OLD: {problem}\n" in out) == (problem is not None)
