"""The precision-plan check: which layers follow the plan, which differ, which cannot be
mapped (and why), on hand-made layer information and on a real 10.16 inspector log."""

from __future__ import annotations

import json
from pathlib import Path

from reprobuild.lock.plan import NodePrecision, PrecisionPlan
from reprobuild.logs.layerinfo import load_layer_info, parse_layer_info
from reprobuild.workflow.plancheck import check_plan

TRT = Path(__file__).resolve().parent / "fixtures" / "trt-logs"


def plan(*nodes: tuple[str, str, str], acc: dict[str, str] | None = None) -> PrecisionPlan:
    acc = acc or {}
    return PrecisionPlan(
        mode="fp16",
        nodes=[NodePrecision(n, op, p, "default", acc.get(n)) for n, op, p in nodes],
    )


def tensor(dtype: str) -> dict[str, str]:
    return {"Name": "t", "Format/Datatype": f"Row major linear {dtype}"}


def layer(name: str, ins: list[str], outs: list[str], md: list[str] | None = None) -> dict:
    entry = {
        "Name": name,
        "LayerType": "X",
        "Inputs": [tensor(d) for d in ins],
        "Outputs": [tensor(d) for d in outs],
    }
    if md is not None:
        entry["Metadata"] = "\x1e".join(f"[ONNX Layer: {n}]" for n in md)
    return entry


def info(*layers: dict):
    return parse_layer_info(json.dumps({"Layers": list(layers)}))


def statuses(check) -> dict[str, tuple[str, str]]:
    return {v.layer: (v.status, v.reason) for v in check.verdicts}


def test_follows_differs_both_ways_and_fp32_accumulation() -> None:
    p = plan(
        ("a", "MatMul", "fp16"),
        ("b", "MatMul", "fp32"),
        ("c", "MatMul", "fp16"),
        ("d", "MatMul", "fp16"),
        acc={"c": "fp32", "d": "fp32"},
    )
    check = check_plan(
        info(
            layer("a", ["FP16"], ["FP16"], ["a"]),
            layer("b", ["FP16"], ["FP16"], ["b"]),  # planned FP32, ran FP16
            layer("c", ["FP32"], ["FP32"], ["c"]),  # FP32 accumulation: FP32 is right
            layer("d", ["FP16"], ["FP16"], ["d"]),  # should have accumulated in FP32
        ),
        p,
    )
    s = {v.layer: v.status for v in check.verdicts}
    assert s == {"a": "follows", "b": "differs", "c": "follows", "d": "differs"}
    assert not check.follows
    assert check.problems()[0] == (
        "layer 'b' runs in FP16 but the precision plan says fp32 (ONNX nodes: b)"
    )


def test_what_cannot_be_mapped_is_said_not_guessed() -> None:
    p = plan(
        ("x", "Gemm", "fp16"),
        ("y", "Add", "fp32"),
        ("dup", "Relu", "fp16"),
        ("dup#2", "Relu", "fp16"),
        ("cast", "Cast", "other"),
    )
    check = check_plan(
        info(
            layer("x + y", ["FP16"], ["FP16"]),  # 8.x name, fused nodes planned differently
            layer("__myl_Foo_myl0_1", ["FP16"], ["FP16"], []),  # Myelin, empty Metadata
            layer("dup", ["FP16"], ["FP16"], ["dup"]),
            layer("z", ["FP16"], ["FP16"], ["z"]),
            layer("cast", ["FP32"], ["FP16"], ["cast"]),
            {"Name": "Reformatting CopyNode for Input Tensor 0 to x", "LayerType": "Reformat"},
            {"Name": "x", "Metadata": "[ONNX Layer: x]"},  # no tensors
        ),
        p,
    )
    s = statuses(check)
    assert s["x + y"] == ("unmapped", "fused nodes are planned in fp16 and fp32")
    assert s["__myl_Foo_myl0_1"][0] == "unmapped" and "Metadata" in s["__myl_Foo_myl0_1"][1]
    assert s["dup"] == ("unmapped", "several ONNX nodes are named 'dup'")
    assert s["z"] == ("unmapped", "node 'z' is not in the plan")
    assert s["cast"][0] == "unchecked"
    assert s["Reformatting CopyNode for Input Tensor 0 to x"] == ("unchecked", "reformat layer")
    assert s["x"] == ("unmapped", "the layer information has no tensor types")
    assert check.follows  # nothing differs; nothing was assumed to follow either
    assert check.counts() == {"follows": 0, "differs": 0, "unmapped": 5, "unchecked": 2}


def test_8x_names_fused_cast_and_conversion_casts() -> None:
    p = plan(("Conv_0", "Conv", "fp16"), ("Relu_1", "Relu", "fp16"), ("g", "Gemm", "bf16"))
    check = check_plan(
        info(
            layer("Conv_0 + Relu_1 [profile 1]", ["FP16"], ["FP16"]),
            layer("g", ["FP32"], ["BF16"], ["g__bf16", "g"]),  # the conversion Cast fused in
        ),
        p,
        {"g__bf16": "Cast"},
    )
    assert [v.status for v in check.verdicts] == ["follows", "follows"]
    assert check.verdicts[0].nodes == ("Conv_0", "Relu_1")


def test_names_only_information_checks_nothing_and_says_so() -> None:
    names = parse_layer_info(json.dumps({"Layers": ["a", "b"]}))
    check = check_plan(names, plan(("a", "Gemm", "fp16")))
    assert check.verdicts == [] and check.follows and "names only" in check.note


def test_a_real_inspector_log_against_a_hand_written_plan() -> None:
    """The 10.16 cookbook engine ran conv/pool 1 in FP32 and the rest in FP16; a plan that
    wants node_max_pool2d in FP16 is told exactly that layer differs."""
    real = load_layer_info(TRT / "trt1016_cookbook_engineinspector_oneline.log")
    p = plan(
        ("node_conv2d", "Conv", "fp32"),
        ("node_relu", "Relu", "fp32"),
        ("node_max_pool2d", "MaxPool", "fp16"),
        ("node_conv2d_1", "Conv", "fp16"),
        ("node_relu_1", "Relu", "fp16"),
        ("node_max_pool2d_1", "MaxPool", "fp16"),
        ("node_view", "Reshape", "fp16"),
        ("node_linear", "Gemm", "fp16"),
        ("node_relu_2", "Relu", "fp16"),
        ("node_linear_1", "Gemm", "fp16"),
        ("node_softmax", "Softmax", "fp16"),
        ("node_argmax", "ArgMax", "fp16"),
    )
    check = check_plan(real, p)
    differs = {v.layer for v in check.by_status("differs")}
    assert differs == {"node_max_pool2d", "node_max_pool2d [profile 1]"}
    follows = {v.layer for v in check.by_status("follows")}
    assert {"node_conv2d + node_relu", "node_linear_myl5_2", "__myl_DivMulTopk_myl5_5"} <= follows
    unmapped = {v.layer for v in check.by_status("unmapped")}
    assert "__myl_Cast_myl5_7" in unmapped  # "Metadata:" is empty
