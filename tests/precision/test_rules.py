"""Each rule on a model built to trigger it, the plan table, and observed plans."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from reprobuild.errors import UsageError
from reprobuild.lock.plan import NodePrecision, PrecisionPlan
from reprobuild.precision.analysis import node_keys, observe_plan, reduction_depth
from reprobuild.precision.apply import apply_plan
from reprobuild.precision.calibration import load_calibration
from reprobuild.precision.measure import plan_error
from reprobuild.precision.report import format_plan_table
from reprobuild.precision.rules import derive_plan, range_problem

from ..conftest import EXAMPLES
from .helpers import (
    EXPECTED_RULES,
    RULES_OPTS,
    _check,
    _lock_round_trip,
    _opts,
    _table,
)

# ---------------------------------------------------------------------------- rules


def test_rules_decide_every_node(rules) -> None:
    model, _, plan = rules
    assert _table(plan) == EXPECTED_RULES
    assert [n.node for n in plan.nodes] == node_keys(model)  # graph order
    assert plan.calibration == "seeded:0"
    assert all(n.accumulate is None for n in plan.nodes)


@pytest.mark.parametrize(
    "rule",
    sorted({r for _, r in EXPECTED_RULES.values()}),
)
def test_each_rule_decides_exactly_its_nodes(rules, rule: str) -> None:
    _, _, plan = rules
    got = sorted(n.node for n in plan.nodes if n.rule == rule)
    assert got == sorted(k for k, (_, r) in EXPECTED_RULES.items() if r == rule)
    assert got  # every rule is exercised


def test_magnitude_rule_follows_limit_and_calibration(rules) -> None:
    model, feeds, _ = rules
    # scale_big's output on the seeded inputs is sigmoid(h2) * 1000 > 512 ...
    sig = 1 / (
        1 + np.exp(-np.maximum(feeds["x"] @ numpy_helper.to_array(model.graph.initializer[0]), 0))
    )
    assert (sig * 1000).max() > 512
    loose = derive_plan(model, "fp16", _opts(**RULES_OPTS, max_output=2000.0), feeds, "s")
    assert _table(loose)["scale_big"] == ("fp16", "default")
    # ... and sigmoid(0) * 1000 = 500 on all-zero inputs: the rule is data dependent
    zeros = {k: np.zeros_like(v) for k, v in feeds.items()}
    plan0 = derive_plan(model, "fp16", _opts(**RULES_OPTS), zeros, "zeros")
    assert _table(plan0)["scale_big"] == ("fp16", "default")


def test_constant_nodes_follow_consumers_unless_kept_by_name_or_op(rules) -> None:
    model, feeds, _ = rules
    by_op = derive_plan(model, "fp16", _opts(keep_fp32_ops=["Constant"]), feeds, "s")
    assert _table(by_op)["const_w"] == ("fp32", "op")
    assert _table(by_op)["cmul"] == ("fp16", "default")
    by_name = derive_plan(model, "fp16", _opts(keep_fp32=["^cmul$"]), feeds, "s")
    assert _table(by_name)["const_w"] == ("fp32", "constant")  # its only consumer is FP32
    mixed = apply_plan(model, by_op)
    _check(mixed)
    cmul = next(n for n in mixed.graph.node if n.name == "cmul")
    assert cmul.input[1] == "cw__fp16"  # the FP32 constant is cast for its FP16 consumer


def test_initializer_range_thresholds() -> None:
    fp16 = TensorProto.FLOAT16
    assert range_problem(np.array([1.0, 65504.0], np.float32), fp16) is None
    assert "65504" in range_problem(np.array([1.0, 65505.0], np.float32), fp16)
    assert range_problem(np.array([1.0, 1e-9], np.float32), fp16) is None  # negligible
    assert "flush" in range_problem(np.array([3e-8, 1e-8], np.float32), fp16)
    assert range_problem(np.array([np.inf, 1.0], np.float32), fp16) is None
    assert range_problem(np.array([1e30], np.float32), TensorProto.BFLOAT16) is None


def test_reduction_depth_definitions() -> None:
    shapes = {"a": (2, 3, 5), "w": (16, 4, 3, 3), "b": (4, 6, 7), "y": (4, 1, 1), "s": (2, 10, 3)}

    def depth(node, opset=17):
        return reduction_depth(node, shapes.get, opset)

    assert depth(helper.make_node("MatMul", ["a", "b"], ["o"])) == 5
    assert depth(helper.make_node("Gemm", ["s2", "b"], ["o"])) is None
    shapes["g"] = (7, 9)
    assert depth(helper.make_node("Gemm", ["g", "w"], ["o"])) == 9
    assert depth(helper.make_node("Gemm", ["g", "w"], ["o"], transA=1)) == 7
    assert depth(helper.make_node("Conv", ["x", "w"], ["o"], group=2)) == 4 * 3 * 3
    assert depth(helper.make_node("ReduceSum", ["b", "ax"], ["y"])) == 42
    assert depth(helper.make_node("ReduceMax", ["b", "ax"], ["y"])) is None
    assert depth(helper.make_node("Softmax", ["s"], ["o"], axis=1)) == 10
    assert depth(helper.make_node("Softmax", ["s"], ["o"], axis=1), opset=11) == 30
    assert depth(helper.make_node("AveragePool", ["s"], ["o"], kernel_shape=[3, 3])) == 9


def test_precision_plan_table(rules) -> None:
    _, _, plan = rules
    text = format_plan_table(plan)
    lines = text.splitlines()
    assert lines[0] == "precision plan: mode fp16, calibration seeded:0"
    assert lines[1].split() == ["NODE", "OP", "PRECISION", "RULE"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines[2:-1]}
    assert rows["huge_w"] == ["Mul", "fp32", "initializer-range"]
    assert rows["const_w"] == ["Constant", "fp16", "constant"]
    assert lines[-1] == "18 nodes: 6 fp16, 10 fp32, 2 other"


# ---------------------------------------------------------------------------- observed plans


def test_observe_plan_records_existing_mixed_precision() -> None:
    model = onnx.load(EXAMPLES / "fp16_middle.onnx")
    plan = observe_plan(model)
    assert plan is not None and plan.mode == "observed"
    assert _table(plan) == {
        "fc1": ("fp32", "observed"),
        "to_fp16": ("other", "observed"),
        "fc2": ("fp16", "observed"),
        "to_fp32": ("other", "observed"),
        "fc3": ("fp32", "observed"),
    }
    same = apply_plan(model, _lock_round_trip(plan))
    assert same.SerializeToString() == model.SerializeToString()
    lie = [
        NodePrecision(n.node, n.op, "fp32" if n.node == "fc2" else n.precision, n.rule)
        for n in plan.nodes
    ]
    with pytest.raises(UsageError, match="'fc2' has precision fp16 in the model but fp32"):
        apply_plan(model, PrecisionPlan("observed", plan.settings, None, lie))
    assert observe_plan(onnx.load(EXAMPLES / "cnn.onnx")) is None
    # a derived plan on an already mixed model leaves its FP16 node alone
    feeds, desc = load_calibration(None, model)
    derived = derive_plan(model, "fp16", _opts(), feeds, desc)
    assert _table(derived)["fc2"] == ("fp16", "observed")
    assert _table(derived)["fc1"] == ("fp16", "default")
    mixed = apply_plan(model, derived)
    _check(mixed)
    assert [n.op_type for n in mixed.graph.node].count("Cast") == 4  # to_fp32, input, fc3, output
    by_name = {n.name: n for n in mixed.graph.node}
    assert by_name["to_fp16"].input[0] == "fc1.out"  # takes FP16 directly: no Cast back
    # and, a FLOAT16-to-FLOAT16 Cast now, is an Identity (ONNX Runtime 1.30 cannot load one)
    assert by_name["to_fp16"].op_type == "Identity" and not by_name["to_fp16"].attribute
    assert plan_error(model, mixed, feeds)["max_abs"] < 2e-4
