"""The TensorRT stand-in never sees real CUDA, whatever the machine has.

On a machine with a real ``libcudart``, ``device.find_device`` hands out real device
pointers; the stand-in runs engines on the host, so reading those would kill the process.
Here a "real" CUDA runtime is made visible (``tests/fake_cuda``: allocations are pointers
no process may read) and the stand-in's tests are shown never to call it, and the stand-in
is shown to refuse, not read, pointers it did not allocate.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.backends.tensorrt import device as device_mod
from tests import fake_cuda
from tests.conftest import EXAMPLES, ROOT, child_env
from tests.test_trt_variants import install_standin

CUDART = "/usr/local/cuda/lib64/libcudart.so.13"


def visible_cudart(monkeypatch: pytest.MonkeyPatch) -> fake_cuda.FakeLibrary:
    """A CUDA runtime that ``find_device`` finds first, as on a GPU machine."""
    lib = fake_cuda.cudart()
    monkeypatch.setattr(cuda_probe, "cudart_candidates", lambda: [CUDART])
    monkeypatch.setattr(device_mod, "ctypes", fake_cuda.loader({CUDART: lib}))
    return lib


def test_the_standins_tests_never_call_a_real_cuda_runtime(
    monkeypatch: pytest.MonkeyPatch, tmp_path, cli
) -> None:
    lib = visible_cudart(monkeypatch)
    assert device_mod.find_device()[1] == f"libcudart via ctypes ({CUDART})"
    lib.calls.clear()
    trt = install_standin(monkeypatch)
    out = tmp_path / "mlp.engine"
    args = ("build", str(EXAMPLES / "mlp.onnx"), "--backend", "tensorrt", "-o", str(out))
    res = cli(*args, "--lock", str(tmp_path / "t.lock"))
    assert res.code == 0, res
    assert "running the engine" in res.err  # a recording build runs its engine
    assert lib.calls == []
    assert trt._test_device.live == {}


def test_the_standin_refuses_device_pointers_it_did_not_allocate(tmp_path) -> None:
    """A test that forgot to choose the stand-in's memory gets real device pointers: the
    run fails with TensorRT's illegal-address error and nothing is read. In a child
    process, so that a stand-in that did read them kills the child, not the suite."""
    code = f"""
import sys
from reprobuild.backends.base import BuildSettings
from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.backends.tensorrt import device as device_mod
from reprobuild.backends.tensorrt.backend import TensorRTBackend
from reprobuild.errors import EngineError
from tests import fake_cuda
from tests.test_trt_variants import A100
from tests.trt_standin import make_module

lib = fake_cuda.cudart()
cuda_probe.cudart_candidates = lambda: [{CUDART!r}]
device_mod.ctypes = fake_cuda.loader({{{CUDART!r}: lib}})
for name in ("cuda", "cuda.bindings", "cupy", "cupy.cuda"):
    sys.modules[name] = None
sys.modules["tensorrt"] = make_module("10.13.3.9")
cuda_probe.probe_cuda = lambda: A100
be = TensorRTBackend()
lines = []
engine = be.build({str(EXAMPLES / "mlp.onnx")!r}, BuildSettings(), be.create_timing_cache(),
                  lines.append).engine
import numpy as np
try:
    be.run(engine, {{"input": np.ones((8, 1024), np.float32)}})
except EngineError as err:
    print("refused:", err)
print("path:", be.last_run_path)
print("calls:", sorted(set(lib.calls)))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=child_env([ROOT]),
        timeout=300,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    assert "refused: TensorRT failed to run the engine (execute_async_v3 returned False)" in (
        proc.stdout
    ), proc.stdout
    assert f"path: libcudart via ctypes ({CUDART})" in proc.stdout
    assert "cudaMalloc" in proc.stdout and "cudaMemcpy" in proc.stdout
