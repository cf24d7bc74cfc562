"""``export-cache`` exports this machine's target of a lock with several, not the first."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

import reprobuild
from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.errors import EXIT_ENV
from reprobuild.lock.yamlio import load_lock
from tests.conftest import EXAMPLES
from tests.test_trt_variants import install_standin
from tests.trt_standin import make_module

H100 = cuda_probe.CudaInfo(
    gpus=(cuda_probe.GpuInfo(0, "NVIDIA H100 80GB HBM3", "9.0"),),
    driver_version="550.54.14",
    driver_api_version="12.4",
    runtime_version="12.4",
)
L4 = cuda_probe.CudaInfo(gpus=(cuda_probe.GpuInfo(0, "NVIDIA L4", "8.9"),), runtime_version="12.4")


def _machine(monkeypatch: pytest.MonkeyPatch, cuda: cuda_probe.CudaInfo) -> None:
    """Another GPU model: the stand-in's device and the CUDA probe agree on it."""
    name = cuda.gpus[0].name
    major, minor = (int(x) for x in cuda.gpus[0].compute_capability.split("."))
    module = make_module(device=name, compute_capability=(major, minor))
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    monkeypatch.setattr(cuda_probe, "probe_cuda", lambda: cuda)


def test_export_cache_picks_this_machines_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli
) -> None:
    install_standin(monkeypatch)  # an A100: the lock's first target
    shutil.copy(EXAMPLES / "mlp.onnx", tmp_path / "mlp.onnx")
    lock = tmp_path / "t.lock"
    kw = {"backend": "tensorrt", "cache_dir": tmp_path / "caches"}
    reprobuild.build(tmp_path / "mlp.onnx", lock=lock, out=tmp_path / "a.engine", **kw)
    _machine(monkeypatch, H100)  # a second target, recorded beside the first
    reprobuild.build(tmp_path / "mlp.onnx", lock=lock, out=tmp_path / "h.engine", **kw)
    targets = load_lock(lock).targets()
    assert len(targets) == 2 and "-9.0-" in targets[-1].name  # the H100 (sm 9.0)
    out = tmp_path / "pinned.cache"
    res = cli("export-cache", "--lock", str(lock), "-o", str(out),
              "--cache-dir", str(tmp_path / "caches"))  # fmt: skip
    assert res.code == 0, res
    h100 = {e.key: e.tactic for e in targets[-1].layers}
    assert not set(h100) & {e.key for e in targets[0].layers}  # other keys on another GPU
    from reprobuild.backends.tensorrt.backend import TensorRTBackend

    cache = TensorRTBackend().create_timing_cache(out.read_bytes())
    assert {k: v for k, v in cache.tactic_map().items() if k in h100} == h100
    _machine(monkeypatch, L4)  # a machine of neither target: exit 3 naming both
    res = cli("export-cache", "--lock", str(lock), "-o", str(tmp_path / "l4.cache"),
              "--cache-dir", str(tmp_path / "caches"))  # fmt: skip
    assert res.code == EXIT_ENV and "no target for this machine" in res.err
    assert not (tmp_path / "l4.cache").exists()
