"""onnx's light model-zoo copies: the magnitude rule, conversion error, plan_error."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from reprobuild.precision.analysis import node_keys, real_inputs
from reprobuild.precision.apply import apply_plan
from reprobuild.precision.measure import plan_error
from reprobuild.precision.rules import derive_plan

from .helpers import (
    FP16,
    LIGHT,
    _check,
    _opts,
    _run,
    _table,
    make_opset,
)

# ---------------------------------------------------------------------------- model zoo


def _arange_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The inputs onnx's own backend runner feeds the light models."""
    (vi,) = real_inputs(model)
    shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return {vi.name: (np.arange(n).reshape(shape) / n).astype(np.float32)}


def _intermediate_max(model: onnx.ModelProto, feeds) -> dict[str, float]:
    work = onnx.ModelProto()
    work.CopyFrom(model)
    names = [o for n in model.graph.node for o in n.output]
    del work.graph.output[:]
    for n in names:
        work.graph.output.add().name = n
    outs = _run(work, feeds)
    return {n: float(np.abs(v).max()) for n, v in zip(names, outs, strict=True)}


@pytest.mark.slow
def test_light_resnet50_magnitude_rule_and_conversion() -> None:
    model = onnx.load(LIGHT / "light_resnet50.onnx")
    feeds = _arange_feeds(model)
    plan = derive_plan(model, "fp16", _opts(), feeds, "arange")
    keys = node_keys(model)
    assert keys[0] == "node_of_gpu_0/conv1_w_0" and keys[-1] == "n175"
    table = _table(plan)
    # weights come from ConstantOfShape nodes: judged as constants, never by magnitude
    for node, key in zip(model.graph.node, keys, strict=True):
        if node.op_type == "ConstantOfShape":
            assert table[key][1] == "constant"
    # exactly the compute nodes with an output above 512, or an input beyond the FP16
    # range (the Softmax fed by 1e19 logits), are kept by the magnitude rule
    mags = _intermediate_max(model, feeds)
    expected = {
        k
        for node, k in zip(model.graph.node, keys, strict=True)
        if node.op_type != "ConstantOfShape"
        and (
            mags[node.output[0]] > 512
            or any(mags.get(x, 0.0) > 65504 for x in node.input if x in mags)
        )
    }
    assert {k for k, (_, r) in table.items() if r == "magnitude"} == expected
    assert len(expected) > 10
    mixed = apply_plan(model, plan)
    _check(mixed)
    err = plan_error(model, mixed, feeds)
    assert err["max_abs"] < 1e-3, err


@pytest.mark.slow
def test_light_densenet121_conversion_error() -> None:
    model = onnx.load(LIGHT / "light_densenet121.onnx")
    feeds = _arange_feeds(model)
    plan = derive_plan(model, "fp16", _opts(max_reduction_depth=1024), feeds, "arange")
    table = _table(plan)
    keys = node_keys(model)
    conv_depth = {
        k
        for node, k in zip(model.graph.node, keys, strict=True)
        if node.op_type == "Conv" and table[k][1] == "reduction-depth"
    }
    assert conv_depth and all(k.startswith("n") for k in conv_depth)
    counts: dict[str, int] = {}
    for _, rule in table.values():
        counts[rule] = counts.get(rule, 0) + 1
    assert counts["constant"] == 836 + 242  # ConstantOfShape weights and their Unsqueezes
    mixed = apply_plan(model, plan)
    _check(mixed)
    low_consts = {k for k, (p, r) in table.items() if r == "constant" and p == "fp16"}
    converted = [
        n for n, k in zip(mixed.graph.node, node_keys(mixed), strict=True) if k in low_consts
    ]
    cos = [n for n in converted if n.op_type == "ConstantOfShape"]
    assert cos and all(n.attribute[0].t.data_type == FP16 for n in cos)
    err = plan_error(model, mixed, feeds)
    assert err["max_abs"] < 1e-3 and err["max_rel"] < 5e-3, err


def test_plan_error_detects_a_real_difference() -> None:
    model = make_opset(17)
    other = make_opset(17)
    other.graph.node[0].op_type = "Sigmoid"
    feeds = {"x": np.full((1, 2, 5, 5), -1.0, np.float32)}
    err = plan_error(model, other, feeds)
    assert err["max_abs"] == pytest.approx(1 / (1 + np.e))
