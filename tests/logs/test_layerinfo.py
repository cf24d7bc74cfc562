"""Engine layer information in its 8.x, 10.x and 11.x shapes, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprobuild.errors import LogParseError
from reprobuild.logs.layerinfo import (
    is_reformat,
    kernels_by_layer,
    load_layer_info,
    parse_layer_info,
)
from reprobuild.logs.values import split_onnx_layers, tactic_to_int

FIX = Path(__file__).resolve().parent.parent / "fixtures"
TRT = FIX / "trt-logs"
OWN = FIX / "logparse"


def test_trt84_detailed_export() -> None:
    info = load_layer_info(TRT / "trt84_trex_resnet_a100_fp16_exportLayerInfo.json")
    assert info.detailed and len(info.layers) == 36
    assert info.bindings == ("input.1", "191")
    assert info.source.endswith("trt84_trex_resnet_a100_fp16_exportLayerInfo.json")
    reformat, conv = info.layers[0], info.layers[1]
    assert (reformat.name, reformat.layer_type, reformat.tactic_name, reformat.tactic_value) == (
        "Reformatting CopyNode for Input Tensor 0 to Conv_0 + Relu_1",
        "Reformat",
        None,
        0,
    )
    assert reformat.inputs[0].format == "Row major linear FP32"
    assert reformat.inputs[0].dimensions == (32, 3, 224, 224)
    assert reformat.outputs[0].format == "Channel major FP16 format where channel % 4 == 0"
    assert (conv.name, conv.layer_type, conv.tactic_value) == (
        "Conv_0 + Relu_1",
        "CaskConvolution",
        0xE2222883A6602489,
    )
    assert conv.tactic_name == (
        "trt_turing_cutlass_image_network_first_layer_hmma_fprop_f16f16f32_nhwc_nhwc_k64r7s7c4_stride2x2"
    )
    assert conv.metadata == ()  # 8.4 has no Metadata field
    last = info.layers[-1]
    assert (last.name, last.tactic_value) == (
        "Reformatting CopyNode for Output Tensor 0 to reshape_after_Gemm_48",
        0x3E8,
    )
    assert sum(1 for layer in info.layers if layer.tactic_name) == 22
    kernels = kernels_by_layer(info.layers)
    assert kernels["Conv_0 + Relu_1"] == (conv.tactic_name, 0xE2222883A6602489)


def test_trt84_names_only_export() -> None:
    info = load_layer_info(TRT / "trt84_hackathon_issue18_exportLayerInfo_namesonly.json")
    assert not info.detailed
    assert len(info.layers) == 12
    assert info.layers[0].name == "Conv__25 + Relu"
    assert info.layers[6].name == "MaxPool2d_1__22 + Reshape + (Unnamed Layer* 14) [Shuffle]"
    assert info.layers[-1].name == "(Unnamed Layer* 52) [Shuffle]"
    assert all(la.tactic_value is None and la.layer_type is None for la in info.layers)
    assert info.bindings == ("x:0", "z:0")


def test_trt10_shape_metadata_and_myelin_without_tactic_value() -> None:
    info = load_layer_info(OWN / "layerinfo_trt10_detailed.json")
    conv, gemm = info.layers
    assert conv.metadata == ("/conv1/Conv", "/relu1/Relu")
    assert conv.tactic_value == 0xB0BF940D5E0F9F45
    assert (conv.inputs[0].format, conv.inputs[0].datatype) == ("Row major linear FP32", None)
    assert (gemm.layer_type, gemm.tactic_value, gemm.metadata) == ("gemm", None, ("/fc/Gemm",))
    assert gemm.tactic_name.startswith("sm80_xmma_gemm")
    assert info.bindings == ("x", "y")


def test_trt11_shape_io_tensors_and_split_format() -> None:
    info = load_layer_info(OWN / "layerinfo_trt11_detailed.json")
    assert info.bindings == ("x", "y")  # from "I/O Tensors"
    conv, kgen = info.layers
    assert (conv.inputs[0].format, conv.inputs[0].datatype) == ("Row major linear", "FP32")
    assert conv.tactic_value == 0xE0123
    assert kgen.metadata == ("mul_1", "erf_2")  # joined by \x1f inside Myelin
    assert (kgen.tactic_name, kgen.tactic_value) == ("__myl_Gelu_0x1234", None)


def test_tactic_values_as_ints_strings_and_signed() -> None:
    text = json.dumps(
        {"Layers": [{"Name": "a", "TacticValue": 1002}, {"Name": "b", "TacticValue": "-1"}]}
    )
    a, b = parse_layer_info(text).layers
    assert (a.tactic_value, b.tactic_value) == (1002, 2**64 - 1)
    assert tactic_to_int(True) is None and tactic_to_int("0x") is None


def test_split_onnx_layers_keeps_brackets_inside_names() -> None:
    md = "[ONNX Layer: /blocks.0[1]/Add]\x1e[ONNX Layer: b]\x1f[ONNX Layer: c]"
    assert split_onnx_layers(md) == ("/blocks.0[1]/Add", "b", "c")
    assert split_onnx_layers("") == ()


def test_bad_json_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "layers.json"
    bad.write_text('{"Layers": [ {"Name": "a", }')
    with pytest.raises(LogParseError, match=r"layers\.json: not valid layer-information JSON"):
        load_layer_info(bad)
    bad.write_text('{"layers": []}')
    with pytest.raises(LogParseError, match=r"layers\.json: no 'Layers' list"):
        load_layer_info(bad)
    bad.write_text('{"Layers": [3]}')
    with pytest.raises(LogParseError, match=r"layers\.json: layer #0"):
        load_layer_info(bad)
    with pytest.raises(LogParseError, match=r"nope\.json: cannot read layer information"):
        load_layer_info(tmp_path / "nope.json")
    with pytest.raises(LogParseError, match="too deeply"):
        parse_layer_info("[" * 100_000, source="deep.json")


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(
        st.sampled_from(
            ["Name", "LayerType", "TacticName", "TacticValue", "Metadata", "Inputs", "Outputs",
             "Dimensions", "Format/Datatype", "Format", "Datatype", "Layers", "Bindings",
             "I/O Tensors", "x"]
        ),
        children,
        max_size=6,
    ),
    max_leaves=25,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.one_of(_json_values.map(json.dumps), st.text(max_size=300)))
def test_anything_raises_only_log_parse_error(text: str) -> None:
    try:
        info = parse_layer_info(text, source="fuzz.json")
    except LogParseError as err:
        assert str(err).startswith("fuzz.json: ")
        return
    assert all(isinstance(layer.name, str) for layer in info.layers)


# --- the tolerant reading a build's kernel cross-check uses ------------------------------------


def test_tolerant_reading_skips_what_is_not_a_layer_object() -> None:
    text = json.dumps(
        {
            "Layers": [
                {"Name": "conv1", "LayerType": "CaskConvolution", "TacticName": "k1"},
                "bare name in a detailed list",
                7,
                {"Name": 5, "TacticValue": "0x10"},
                {"LayerType": "NoOp"},
            ]
        }
    )
    with pytest.raises(LogParseError):
        parse_layer_info(text, "strict")
    info = parse_layer_info(text, "build", strict=False)
    assert [layer.name for layer in info.layers] == ["conv1", "5", ""]
    assert info.layers[1].tactic_value == 0x10
    assert info.detailed and not info.names_only


def test_names_only_and_empty_lists() -> None:
    names = parse_layer_info(json.dumps({"Layers": ["a", "b"]}), strict=False)
    assert names.names_only and not names.detailed
    empty = parse_layer_info(json.dumps({"Layers": []}), strict=False)
    assert not empty.names_only and empty.layers == ()
    with pytest.raises(LogParseError):
        parse_layer_info(json.dumps({"layers": []}), strict=False)
    with pytest.raises(LogParseError):
        parse_layer_info("not json", strict=False)
    assert parse_layer_info(b'{"Layers": ["a"]}', strict=False).names_only


def test_is_reformat() -> None:
    text = json.dumps(
        {
            "Layers": [
                {"Name": "Reformatting CopyNode for Input Tensor 0 to conv1", "LayerType": "X"},
                {"Name": "r", "LayerType": "Reformat"},
                {"Name": "n", "LayerType": "NoOp"},
                {"Name": "conv1", "LayerType": "CaskConvolution"},
            ]
        }
    )
    flags = [layer.is_reformat for layer in parse_layer_info(text).layers]
    assert flags == [True, True, True, False]
    assert is_reformat(parse_layer_info(text).layers[1])


def test_datatype_is_read_in_either_spelling() -> None:
    for key in ("Datatype", "DataType"):
        tensor = {"Name": "x", "Format": "Row major linear", key: "FP16"}
        text = json.dumps({"Layers": [{"Name": "a", "Inputs": [tensor], "Outputs": []}]})
        (layer,) = parse_layer_info(text).layers
        assert layer.inputs[0].datatype == "FP16", key
    combined = {"Name": "x", "Format/DataType": "Row major linear FP16 format"}
    text = json.dumps({"Layers": [{"Name": "a", "Inputs": [combined], "Outputs": []}]})
    assert parse_layer_info(text).layers[0].inputs[0].format == "Row major linear FP16 format"
