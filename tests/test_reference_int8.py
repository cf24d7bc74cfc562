"""The reference backend's fused INT8 kernels on the digits models: every tactic
gives other bits on a real layer, all stay within one quantization step of the float
Q/DQ graph, and an INT8 lock rebuilds to the same bits with a check that has power."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import reprobuild
from reprobuild.backends import get_backend
from reprobuild.backends.reference import int8, kernels
from reprobuild.backends.reference.prepared import Layer, execute_spec, prepare
from reprobuild.lock import load_lock
from reprobuild.precision.qdq import apply_quant_plan
from tests.models import digits


@pytest.fixture(scope="module")
def int8_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("int8")
    np.savez(tmp / "c.npz", input=digits.held_out_split()[0][:256])
    _cli(tmp, "a", "--precision", "int8", "--calibration", str(tmp / "c.npz"))
    return tmp


def _cli(tmp: Path, out: str, *extra: str) -> None:
    args = [sys.executable, "-m", "reprobuild", "build", str(digits.model_path("cnn"))]
    args += ["--backend", "reference", "--lock", str(tmp / "t.lock"), "-q"]
    args += ["--out", str(tmp / f"{out}.engine"), "--cache-dir", str(tmp / "caches"), *extra]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def _layer_runs(tmp: Path) -> dict[str, tuple[Layer, list, np.ndarray]]:
    """Each fused layer's inputs on the 540 test images and its float (unfused) output."""
    plan = load_lock(tmp / "t.lock").precision
    prepared = prepare(apply_quant_plan(onnx.load(str(digits.model_path("cnn"))), plan))
    values = dict(prepared.constants)
    values.update(digits.held_out_feeds())
    runs = {}
    for layer in prepared.layers:
        inputs = prepared.gather(layer, values)
        outputs = prepared.run_layer(layer, inputs, None, values)  # the float Q/DQ path
        if layer.fusion is not None:
            runs[layer.name] = (layer, inputs, outputs[0])
        values.update(zip(layer.node.output, outputs, strict=False))
    return runs


def test_fusions_found_with_their_output_scales(int8_build: Path) -> None:
    runs = _layer_runs(int8_build)
    assert sorted(runs) == ["conv1", "conv2", "fc"]
    # conv1 -> Relu -> Q and conv2 -> Relu -> Flatten -> Q requantize; fc gives the logits
    assert runs["conv1"][0].fusion.y_scale is not None
    assert runs["conv2"][0].fusion.y_scale is not None
    assert runs["fc"][0].fusion.y_scale is None
    assert runs["conv1"][0].fusion.w_int8.dtype == np.int8


@pytest.mark.parametrize("name", ["conv1", "conv2"])
def test_requantizing_tactics_differ_and_stay_within_one_step(int8_build: Path, name: str) -> None:
    layer, inputs, ref = _layer_runs(int8_build)[name]
    specs = int8.candidates(layer.op, layer.fusion, has_bias=True)
    assert [s.name.split("i32acc_")[1] for s in specs] == [
        "fscale_rne_f32epi",
        "fscale_rne_f16epi",
        "fscale_rna_f16epi",
        "fxmul_rna_f32epi",
    ]
    step = float(layer.fusion.y_scale)
    want = np.clip(np.rint(np.maximum(ref, 0) / np.float32(step)), 0, 127) * step
    outs = {s.name: np.maximum(execute_spec(layer, s, inputs), 0) for s in specs}
    for got in outs.values():
        # the float graph rounds once too: an INT8 epilogue is at most one step away
        assert np.abs(got - want).max() <= step * 1.001
    names = list(outs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert (outs[a] != outs[b]).sum() > 0, (a, b)


def test_float_output_tactics_differ_within_their_epilogue_precision(int8_build: Path) -> None:
    layer, inputs, ref = _layer_runs(int8_build)["fc"]
    specs = int8.candidates(layer.op, layer.fusion, has_bias=True)
    assert [s.name for s in specs] == [
        "ref_gemm_int8_i32acc_deq_f32epi",
        "ref_gemm_int8_i32acc_deq_f16epi",
        "ref_gemm_int8_i32acc_ibias_f32epi",
    ]
    outs = [execute_spec(layer, s, inputs) for s in specs]
    scale = float(np.abs(ref).max())
    assert np.abs(outs[0] - ref).max() <= 1e-6 * scale * 10  # FP32: a few ulps
    assert np.abs(outs[1] - ref).max() <= 2.0**-10 * scale  # FP16: half an ulp of the max
    assert np.abs(outs[2] - ref).max() <= 1e-5 * scale  # bias rounded to the int32 grid
    assert (outs[0] != outs[1]).mean() > 0.9 and (outs[0] != outs[2]).mean() > 0.9
    assert (outs[1] != outs[2]).mean() > 0.9


def test_int8_kernels_are_named_tactics_with_stable_hashes() -> None:
    names = [s.name for s in int8.SPECS]
    assert len(set(names)) == len(names) == 3 * 7
    assert not set(names) & set(kernels.KERNELS)
    spec = int8.BY_NAME["ref_conv_int8_i32acc_fxmul_rna_f32epi"]
    assert spec.tactic_hash == kernels.tactic_hash(spec.name) == 0xBCB6008E1DFEC0


def test_locked_int8_build_reproduces_its_bits_and_verify_has_power(int8_build: Path) -> None:
    tmp = int8_build
    lock = load_lock(tmp / "t.lock")
    kernels_used = {e.layer: e.kernel for e in lock.layers}
    assert set(kernels_used) == {"conv1", "conv2", "fc"}
    assert all("_int8_i32acc_" in k for k in kernels_used.values())
    backend = get_backend("reference")
    first = backend.run((tmp / "a.engine").read_bytes(), digits.held_out_feeds())
    _cli(tmp, "b", "--precision", "int8", "--frozen")  # no calibration data: the lock's
    again = backend.run((tmp / "b.engine").read_bytes(), digits.held_out_feeds())
    assert again[digits.OUTPUT].tobytes() == first[digits.OUTPUT].tobytes()
    labels = digits.held_out_split()[1]
    assert digits.accuracy(first[digits.OUTPUT], labels) >= digits.FP32_FLOOR["cnn"]
    report = reprobuild.verify(
        lock=str(tmp / "t.lock"), rebuilds=2, backend="reference", cache_dir=str(tmp / "caches")
    )
    assert report.reproducible and report.power
