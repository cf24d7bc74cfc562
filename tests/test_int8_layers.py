"""The INT8 layer table: a fused INT8 layer shows INT8 in, INT32 accumulation and its real
output type, and quantize/dequantize steps are counted apart from compute layers, for the
reference backend's engines and TensorRT's inspector JSON through the same code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

import reprobuild
from reprobuild.backends.reference import int8
from reprobuild.backends.reference.prepared import execute_spec, prepare
from reprobuild.logs.kernelname import accumulation_of
from reprobuild.logs.layerinfo import parse_layer_info
from reprobuild.logs.layertable import summarize
from tests.conftest import EXAMPLES

# An excerpt in the shape of TensorRT 8.x's detailed inspector JSON of an INT8 (QAT) ResNet,
# with the facts of NVIDIA/TensorRT's trt-engine-explorer example
# examples/pytorch/resnet/A100/qat-residual-qgap/resnet-qat-residual-qgap.onnx.engine.graph.json:
# the input Q left as a Reformat layer with "Origin": "QDQ" (Float -> Int8), fused
# convolutions with Int8 tensors, "Weights" Int8 and "Bias" Float, xmma kernels named
# ..._i8i8_i8i32_f32_... and, for the classifier whose output is FP32, ..._i8f32_i8i32_f32_...,
# and a final NoOp (names and tactic values shortened).
_INT8 = "Row major Int8 format"
_VECT = "Thirty-two wide channel vectorized row major Int8 format"


def _t(name: str, dims: list[int], fmt: str) -> dict[str, Any]:
    return {"Name": name, "Location": "Device", "Dimensions": dims, "Format/Datatype": fmt}


TRT_INT8 = {
    "Layers": [
        {
            "Name": "QuantizeLinear_2",
            "LayerType": "Reformat",
            "Inputs": [_t("input.1", [32, 3, 224, 224], "Row major linear FP32")],
            "Outputs": [_t("dq_125", [32, 3, 224, 224], _INT8)],
            "ParameterType": "Reformat",
            "Origin": "QDQ",
            "TacticValue": "0x00000000000003ea",
        },
        {
            "Name": "layer1.0.conv1.weight + QuantizeLinear_20 + Conv_22",
            "LayerType": "CaskConvolution",
            "Inputs": [_t("dq_125", [32, 3, 224, 224], _INT8)],
            "Outputs": [_t("dq_154", [32, 64, 56, 56], _VECT)],
            "ParameterType": "Convolution",
            "Weights": {"Type": "Int8", "Count": 36864},
            "Bias": {"Type": "Float", "Count": 64},
            "TacticName": "sm80_xmma_fprop_implicit_gemm_interleaved_i8i8_i8i32_f32_nchw_vect"
            "_c_32kcrs_vect_c_32_nchw_vect_c_32_tilesize192x64x64_stage3_warpsize4x1x1_g1",
            "TacticValue": "0xef01fb6e433afa50",
        },
        {
            "Name": "fc.weight + QuantizeLinear_309 + Gemm_311",
            "LayerType": "CaskConvolution",
            "Inputs": [_t("inputs.48", [32, 512, 1, 1], _VECT)],
            "Outputs": [_t("fc_out", [32, 1000, 1, 1], "Row major linear FP32")],
            "ParameterType": "Convolution",
            "Weights": {"Type": "Int8", "Count": 512000},
            "Bias": {"Type": "Float", "Count": 1000},
            "TacticName": "sm80_xmma_fprop_implicit_gemm_interleaved_i8f32_i8i32_f32_nchw_vect"
            "_c_32kcrs_vect_c_32_nchw_tilesize64x32x64_stage6_warpsize2x1x1_g1",
            "TacticValue": "0xb69eef02adcf1473",
        },
        {
            "Name": "copied_squeeze_after_fc",
            "LayerType": "NoOp",
            "Inputs": [_t("fc_out", [32, 1000, 1, 1], "Row major linear FP32")],
            "Outputs": [_t("476", [32, 1000], "Row major linear FP32")],
            "TacticValue": "0x0000000000000000",
        },
    ],
    "Bindings": ["input.1", "476"],
}


def rows(out: str) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in json.loads(out)["layers"]}


def test_tensorrt_int8_inspector_json(tmp_path: Path, cli) -> None:
    path = tmp_path / "int8.layers.json"
    path.write_text(json.dumps(TRT_INT8))
    r = cli("layers", str(path), "--json")
    assert r.code == 0, r
    got = rows(r.out)
    conv = got["layer1.0.conv1.weight + QuantizeLinear_20 + Conv_22"]
    fc = got["fc.weight + QuantizeLinear_309 + Gemm_311"]
    assert [t["precision"] for t in conv["inputs"]] == ["INT8"]
    assert (conv["weights"], conv["accumulation"], conv["precision"]) == ("INT8", "INT32", "INT8")
    assert [t["format"] for t in conv["outputs"]] == ["CHW32"]
    # INT8 products with an FP32 output: still an INT8 layer, not an FP32 one
    assert [t["precision"] for t in fc["outputs"]] == ["FP32"]
    assert (fc["weights"], fc["accumulation"], fc["precision"]) == ("INT8", "INT32", "INT8")
    assert got["QuantizeLinear_2"]["qdq"] and not got["copied_squeeze_after_fc"]["qdq"]
    summary = json.loads(r.out)["summary"]
    assert summary["by_precision"] == {"INT8": 2}
    assert (summary["compute_layers"], summary["qdq_steps"]) == (2, 1)
    assert summary["reformat_names"] == ["copied_squeeze_after_fc"]
    table = cli("layers", str(path))
    assert table.code == 0, table
    lines = table.out.splitlines()
    assert lines[0].split()[:5] == ["layer", "type", "in", "acc", "out"]
    fc_line = next(line for line in lines if line.startswith("fc.weight"))
    assert "CaskConvolution  INT8  INT32  FP32  linear" in fc_line
    assert lines[-1] == (
        "4 layers: 2 compute (INT8 2); 1 quantize/dequantize step; 1 reformat layer"
    )


def test_a_float_int8_reformat_without_origin_is_a_qdq_step() -> None:
    """8.x-10.x logs print a leftover Q as ``Layer(Reformat): QuantizeLinear_2 ... (Float[..])
    -> 581 (Int8[..])`` (NVIDIA/TensorRT issue 2527): no Origin, the types tell."""
    layers = [dict(TRT_INT8["Layers"][0]), dict(TRT_INT8["Layers"][3])]
    del layers[0]["Origin"]
    info = parse_layer_info(json.dumps({"Layers": layers}))
    s = summarize(info)
    assert (s.qdq_steps, s.reformat_layers) == (["QuantizeLinear_2"], ["copied_squeeze_after_fc"])


def test_int8_layer_lines_of_a_verbose_log(tmp_path: Path, cli) -> None:
    """The ``Engine Layer Information:`` lines of an INT8 engine, in the form TensorRT 8.x
    printed them (NVIDIA/TensorRT issue 2527, names shortened): the leftover Q is a
    Float -> Int8 Reformat; the conv has no kernel name there, so no accumulation."""
    log = tmp_path / "build.log"
    log.write_text(
        "[12/06/2022-19:26:21] [V] [TRT] Engine Layer Information:\n"
        "Layer(Reformat): QuantizeLinear_2, Tactic: 0x00000000000003ea, "
        "input (Float[1,96,800,912]) -> 581 (Int8[1,96:32,800,912])\n"
        "Layer(CaskConvolution): w + QuantizeLinear_9 + Conv_13 + PWN(Clip_14), "
        "Tactic: 0x11123639b0546a5d, 581 (Int8[1,96:32,800,912]) -> 596 (Int8[1,64:32,800,912])\n"
    )
    r = cli("layers", str(log))
    assert r.code == 0, r
    conv = next(line for line in r.out.splitlines() if line.startswith("w + "))
    assert "CaskConvolution  INT8  -    INT8" in conv
    assert r.out.splitlines()[-1] == (
        "2 layers: 1 compute (INT8 1); 1 quantize/dequantize step; 0 reformat layers"
    )


@pytest.mark.parametrize(
    ("kernel", "acc"),
    [
        ("sm80_xmma_fprop_implicit_gemm_interleaved_i8i8_i8i32_f32_nchw_vect_c_32", "INT32"),
        ("sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize32x32x64_stage6", "FP32"),
        ("sm75_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize64", "FP16"),
        ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw", "FP32"),
        ("ref_conv_int8_i32acc_fscale_rne_f16epi", "INT32"),
        ("ref_gemm_splitk4_f16_f16acc", "FP16"),
        ("ref_conv_im2col_blas_f32", "FP32"),
        ("ampere_h16816cudnn_128x64_sliced1x2_ldg8_relu_exp_stages_64x3_small_nhwc_tn_v1", None),
        ("sm50_xmma_pooling_fw_4d_FP16FP32NHWC_Average_FastDiv_CAlign8", None),
        ("__myl_MaxrSubExpSum_0xa612085ebb33c05a523fd71d84e9fe0b", None),
        ("ref_numpy_quantizelinear", None),
        (None, None),
    ],
)
def test_accumulation_from_kernel_names(kernel: str | None, acc: str | None) -> None:
    assert accumulation_of(kernel) == acc


def test_reference_int8_lock_from_the_bundled_cnn(tmp_path: Path, cli, monkeypatch) -> None:
    """docs/int8.md's lock: every fused layer reads INT8 (the tensor its input DQ reads),
    INT8 weights (as many as the model's), sums in INT32 and writes FP32 (no Q directly
    after any of them); the six Q/DQ layers are steps, not INT8 compute."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(EXAMPLES / "cnn.onnx", "model.onnx")
    rng = np.random.default_rng(0)
    np.savez("calib.npz", input=rng.standard_normal((16, 3, 32, 32), dtype=np.float32))
    r = cli(
        *("build", "model.onnx", "--lock", "int8.lock", "--precision", "int8"),
        *("--calibration", "calib.npz", "--calib-method", "minmax", "--calib-batch-size", "2"),
    )
    assert r.code == 0, r
    line = "14 layers: 8 compute (FP32 5, INT8 3); 6 quantize/dequantize steps; 0 reformat layers"
    assert f"({line}; `reprobuild layers` shows them)" in r.out
    weights = {i.name: i for i in onnx.load(str(EXAMPLES / "cnn.onnx")).graph.initializer}
    data = cli("layers", "model.engine", "--json")
    assert data.code == 0, data
    got = rows(data.out)
    entries = {
        e["Name"]: e for e in json.loads(Path("model.engine.layers.json").read_text())["Layers"]
    }
    q_outputs = {
        e["Outputs"][0]["Name"] for e in entries.values() if e["LayerType"] == "RefQuantizeLinear"
    }
    for name in ("conv1", "conv2", "fc"):
        row = got[name]
        assert [t["precision"] for t in row["inputs"]] == ["INT8"], name
        assert row["inputs"][0]["name"] in q_outputs  # a Q's INT8 output, not the DQ's float
        assert (row["weights"], row["accumulation"], row["precision"]) == ("INT8", "INT32", "INT8")
        assert [t["precision"] for t in row["outputs"]] == ["FP32"]
        count = int(np.prod(weights[f"{name}.weight"].dims))
        assert entries[name]["Weights"] == {"Type": "Int8", "Count": count}
        assert entries[name]["Bias"]["Type"] == "Float"
    assert sum(r["qdq"] for r in got.values()) == 6
    table = cli("layers", "model.engine", "--lock", "int8.lock")
    assert table.code == 0, table
    assert line in table.out
    # the INT8 nodes are checked against the plan now, not skipped as "not fused"
    assert "precision plan: follows the plan: 8 layers follow, 0 differ" in table.out


def _requantizing_conv(path: Path) -> None:
    """Q -> DQ -> Conv (DQ'd per-channel INT8 weights, FP32 bias) -> Relu -> Q -> DQ: the
    Conv's output reaches a Q through the Relu, so its kernels requantize to INT8."""
    rng = np.random.default_rng(3)
    inits = [
        nh.from_array(np.array(0.05, np.float32), "sx"),
        nh.from_array(np.array(0, np.int8), "zx"),
        nh.from_array(rng.integers(-127, 128, size=(3, 2, 3, 3)).astype(np.int8), "w_q"),
        nh.from_array(np.full(3, 0.01, np.float32), "sw"),
        nh.from_array(np.zeros(3, np.int8), "zw"),
        nh.from_array(rng.normal(0, 0.1, 3).astype(np.float32), "b"),
        nh.from_array(np.array(0.1, np.float32), "sy"),
        nh.from_array(np.array(0, np.int8), "zy"),
    ]
    nodes = [
        oh.make_node("QuantizeLinear", ["x", "sx", "zx"], ["x_q"], name="x_q"),
        oh.make_node("DequantizeLinear", ["x_q", "sx", "zx"], ["x_dq"], name="x_dq"),
        oh.make_node("DequantizeLinear", ["w_q", "sw", "zw"], ["w_dq"], name="w_dq", axis=0),
        oh.make_node("Conv", ["x_dq", "w_dq", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c"], ["r"], name="relu"),
        oh.make_node("QuantizeLinear", ["r", "sy", "zy"], ["r_q"], name="r_q"),
        oh.make_node("DequantizeLinear", ["r_q", "sy", "zy"], ["y"], name="r_dq"),
    ]
    graph = oh.make_graph(
        nodes,
        "qdq",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 6, 6])],
        inits,
    )
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]), str(path))


def test_a_requantizing_int8_conv_shows_an_int8_output(tmp_path: Path, cli, monkeypatch) -> None:
    """The row says INT8 out, and that is what the kernel it names computes: integers in
    -128..127 times the output scale (the graph's float copy, which the next Q returns to
    exactly those integers), from INT8 inputs."""
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "qdq.onnx"
    _requantizing_conv(model)
    reprobuild.build(model, lock=tmp_path / "q.lock", backend="reference")
    r = cli("layers", str(tmp_path / "qdq.engine"), "--json")
    assert r.code == 0, r
    conv = rows(r.out)["conv"]
    assert [t["name"] for t in conv["inputs"]] == ["x_q"]
    assert [t["precision"] for t in conv["inputs"]] == ["INT8"]
    assert [t["precision"] for t in conv["outputs"]] == ["INT8"]
    assert (conv["weights"], conv["accumulation"]) == ("INT8", "INT32")
    assert json.loads(r.out)["summary"]["qdq_steps"] == 4
    spec = int8.BY_NAME[conv["kernel"]]
    assert spec.requant in ("fscale", "fxmul")
    layer = next(la for la in prepare(onnx.load(str(model))).layers if la.name == "conv")
    assert layer.fusion is not None and layer.fusion.y_scale is not None
    x = np.random.default_rng(0).uniform(-2, 2, (1, 2, 6, 6)).astype(np.float32)
    x_dq = (np.clip(np.rint(x / np.float32(0.05)), -128, 127) * np.float32(0.05)).astype(np.float32)
    bias = nh.to_array(next(i for i in onnx.load(str(model)).graph.initializer if i.name == "b"))
    out = execute_spec(layer, spec, [x_dq, None, bias])
    q = np.rint(out / layer.fusion.y_scale)  # what the graph's Q computes (Relu aside)
    assert np.array_equal((q * layer.fusion.y_scale).astype(np.float32), out)
    assert q.min() >= -128 and q.max() <= 127 and len(np.unique(q)) > 10
