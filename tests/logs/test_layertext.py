"""Every layer-information fixture, read into rows: values checked against the files by hand.

Each expected value below was read off the fixture text (the line is quoted in the comment),
so a reader that mixes up fields, drops the tensors of one shape or mis-splits a fused name
fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprobuild.errors import LogParseError
from reprobuild.logs.layerinfo import load_layer_info, precision_of
from reprobuild.logs.layertable import diff_layers, layer_json, summarize
from reprobuild.logs.layertext import arrow_tensors, oneline_tensors

FIX = Path(__file__).resolve().parent.parent / "fixtures"
TRT = FIX / "trt-logs"
OWN = FIX / "logparse"


def rows(path: Path) -> dict[str, dict]:
    return {r["name"]: r for r in map(layer_json, load_layer_info(path).layers)}


def io(row: dict) -> tuple[list, list]:
    return [t["precision"] for t in row["inputs"]], [t["precision"] for t in row["outputs"]]


def test_trt84_detailed_json_rows_and_reformat_cost() -> None:
    info = load_layer_info(TRT / "trt84_trex_resnet_a100_fp16_exportLayerInfo.json")
    r = {la.name: layer_json(la) for la in info.layers}
    # "Reformatting CopyNode for Input Tensor 0 to Conv_0 + Relu_1": Row major linear FP32 ->
    # Channel major FP16 format where channel % 4 == 0, TacticValue 0x0
    first = r["Reformatting CopyNode for Input Tensor 0 to Conv_0 + Relu_1"]
    assert io(first) == (["FP32"], ["FP16"]) and first["reformat"]
    assert first["outputs"][0]["format"] == "HWC4" and first["tactic"] == "0x0"
    conv = r["Conv_0 + Relu_1"]  # a " + " fusion, no Metadata in 8.4
    assert io(conv) == (["FP16"], ["FP16"])
    assert [conv["inputs"][0]["format"], conv["outputs"][0]["format"]] == ["HWC4", "HWC8"]
    assert conv["kernel"].startswith("trt_turing_cutlass_image_network_first_layer_hmma")
    assert conv["tactic"] == "0xe2222883a6602489" and conv["onnx_nodes"] == []
    # "Conv_5 + Add_6 + Relu_7": two HWC16 FP16 inputs
    assert io(r["Conv_5 + Add_6 + Relu_7"]) == (["FP16", "FP16"], ["FP16"])
    last = r["Reformatting CopyNode for Output Tensor 0 to reshape_after_Gemm_48"]
    assert io(last) == (["FP16"], ["FP32"]) and last["tactic"] == "0x3e8"
    s = summarize(info)
    assert s.layers == 36 and len(s.reformat_layers) == 13  # 13 Reformat/NoOp entries
    assert s.by_precision == {"FP16": 23}
    assert "36 layers: FP16 23; 13 reformat layers" == s.line()


def test_trt84_names_only_json() -> None:
    info = load_layer_info(TRT / "trt84_hackathon_issue18_exportLayerInfo_namesonly.json")
    r = [layer_json(la) for la in info.layers]
    assert r[6]["name"] == "MaxPool2d_1__22 + Reshape + (Unnamed Layer* 14) [Shuffle]"
    assert all(x["precision"] is None and x["kernel"] is None and x["tactic"] is None for x in r)
    s = summarize(info)
    assert s.names_only and s.without_tactic_value == 12
    assert "names only" in s.line()


def test_trt10_and_trt11_json_shapes() -> None:
    r10 = rows(OWN / "layerinfo_trt10_detailed.json")
    conv = r10["/conv1/Conv + /relu1/Relu"]
    assert io(conv) == (["FP32"], ["FP32"]) and conv["inputs"][0]["format"] == "linear"
    assert conv["tactic"] == "0xb0bf940d5e0f9f45"
    gemm = r10["/fc/Gemm_myl0_0"]  # Myelin: kernel, no TacticValue
    assert gemm["tactic"] is None and gemm["kernel"].startswith("sm80_xmma_gemm")
    r11 = rows(OWN / "layerinfo_trt11_detailed.json")
    conv, kgen = r11["/conv1/Conv + /relu1/Relu"], r11["__myl_Gelu_myl1_0"]
    assert io(conv) == (["FP32"], ["FP32"]) and conv["tactic"] == "0xe0123"  # split Datatype
    assert io(kgen)[0] == ["FP16"] and kgen["tactic"] is None  # "Datatype": "Half"
    assert kgen["onnx_nodes"] == ["mul_1", "erf_2"]


def test_trt1016_oneline_log() -> None:
    info = load_layer_info(TRT / "trt1016_cookbook_engineinspector_oneline.log")
    r = {la.name: layer_json(la) for la in info.layers}
    assert len(info.layers) == 26 and info.bindings == ("x", "y", "z")
    conv = r["node_conv2d + node_relu"]
    assert io(conv) == (["FP32"], ["FP32"]) and conv["outputs"][0]["format"] == "linear"
    assert conv["kernel"].startswith("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs")
    assert conv["tactic"] == "0x5b8bf1b8028629d9"
    assert conv["onnx_nodes"] == ["node_conv2d", "node_relu"]  # joined by \x1e
    ref = r["Reformatting CopyNode for Input Tensor 0 to node_conv2d_1 + node_relu_1"]
    assert io(ref) == (["FP32"], ["FP16"]) and ref["outputs"][0]["format"] == "HWC8"
    assert r["node_conv2d_1 + node_relu_1"]["precision"] == "FP16"
    gemm = r["node_linear_myl5_2"]  # Myelin gemm: "Format/Datatype: Half", no TacticValue
    assert io(gemm) == (["FP16"], ["FP16"]) and gemm["tactic"] is None
    assert gemm["kernel"] == (
        "sm90_xmma_gemm_f16f16_f16f16_f16_tn_n_tilesize64x64x64_cgasize1x1x1_"
        "warpgroupsize1x1x1_beta0"
    )
    assert gemm["onnx_nodes"] == ["node_linear", "node_relu_2"]  # joined by \x1f
    topk = r["__myl_DivMulTopk_myl5_5"]  # FP16 and Int32 outputs: computes in FP16
    assert io(topk)[1] == ["FP16", "INT32"] and topk["precision"] == "FP16"
    assert r["__myl_Cast_myl5_7"]["onnx_nodes"] == []  # "Metadata:" empty
    shape = r["__mye260_0_myl5_0"]  # "Inputs: [], Outputs: [], TacticName: ,"
    assert shape["inputs"] == [] and shape["kernel"] is None and shape["precision"] is None
    assert r["node_linear [profile 1]_myl11_2"]["precision"] == "FP16"
    s = summarize(info)
    assert len(s.reformat_layers) == 2 and s.without_tactic_value == 16


def test_trt104_trtexec_doc_log_and_trt108_readme() -> None:
    r = rows(TRT / "trt104_fuzzylabs_trtexec_verbose_doc_excerpt.log")
    conv = r["/features/features.0/Conv + /features/features.1/Relu"]
    assert io(conv) == (["FP16"], ["FP16"]) and conv["tactic"] == "0x280b0ad3c23d8442"
    assert conv["kernel"].startswith("sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_f16f16")
    gemm = r["/classifier/classifier_6/Gemm_myl9_4"]
    assert io(gemm)[0][:3] == ["FP16", "FP16", "FP32"]  # the FP32 alpha says nothing
    assert gemm["precision"] == "FP16" and gemm["tactic"] is None
    assert gemm["onnx_nodes"] == ["/classifier/classifier.6/Gemm"]
    (mm,) = rows(TRT / "trt108-111_sampleEditableTimingCache_readme_excerpt.log").values()
    assert mm["name"] == "matMul1_myl0_0" and mm["precision"] == "FP32"  # 4-space indent
    assert mm["kernel"] == (
        "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize32x32x64_stage3_warpsize2x1x2_tensor16x8x8"
    )
    assert mm["tactic"] is None


def test_layer_lines_of_verbose_logs() -> None:
    r = rows(TRT / "trt1016_cookbook_python_logger_verbose_excerpt.log")
    # Layer(CaskConvolution): node_conv2d + node_relu, Tactic: 0xcf8ea142095f02d2, ... (Float[..])
    conv = r["node_conv2d + node_relu"]
    assert conv["tactic"] == "0xcf8ea142095f02d2" and io(conv) == (["FP32"], ["FP32"])
    myelin = r["{ForeignNode[gemm1.weight...ONNXTRT_castHelper_9]}"]
    assert myelin["layer_type"] == "Myelin" and io(myelin) == (["FP32"], ["FP32", "INT64"])
    assert [t["name"] for t in myelin["outputs"]] == ["y", "z"]
    t = rows(TRT / "trt1016_cookbook_trtexec_verbose_excerpt.log")
    fp16 = t["{ForeignNode[node_conv2d_1...node_relu_1]}"]
    assert fp16["precision"] == "FP16" and fp16["tactic"] == "0x0"
    reformat = next(x for x in t.values() if x["reformat"])
    assert io(reformat) == (["FP32"], ["FP16"])


@pytest.mark.parametrize(
    "name",
    [
        "trt7x-80_legacy_python_logger_issue_excerpts.log",
        "trt862_jetson_inference_issue1855_excerpt.log",
        "trt851_vaccel_docs_jetson_inference_logger_excerpt.log",
    ],
)
def test_logs_without_layer_information_say_how_to_get_it(name: str) -> None:
    with pytest.raises(LogParseError, match=r"no engine layer information.*--exportLayerInfo"):
        load_layer_info(TRT / name)


def test_precision_words() -> None:
    assert precision_of("Channel major FP16 format where channel % 8 == 0") == "FP16"
    assert [precision_of(w) for w in ("Half", "Float", "BFloat16", "Int8", "bf16")] == [
        "FP16",
        "FP32",
        "BF16",
        "INT8",
        "BF16",
    ]
    assert precision_of("Row major linear") is None and precision_of(None) is None


def test_diff_reports_kernel_and_precision_changes_only_where_both_tell() -> None:
    a = load_layer_info(TRT / "trt1016_cookbook_engineinspector_oneline.log")
    b = load_layer_info(TRT / "trt1016_cookbook_python_logger_verbose_excerpt.log")
    d = diff_layers(a, b)
    changed = {c.name: c.changed for c in d.changed}
    assert changed["node_conv2d + node_relu"] == ["tactic"]  # Layer(..) lines print no kernel
    assert changed["node_conv2d_1 + node_relu_1"] == ["tactic", "precision"]  # FP16 vs Float
    assert not d.same and diff_layers(a, a).same


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="Name:LayerTyp,{}[] Inputs/Outputs->()Float0x123", max_size=200))
def test_tensor_readers_never_raise(text: str) -> None:
    for reader in (oneline_tensors, arrow_tensors):
        ins, outs = reader(text)
        assert all(isinstance(t.name, str) for t in (*ins, *outs))
