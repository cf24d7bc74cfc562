"""Precision plans: each rule on a model built to trigger it, conversion validity and error,
lock round trips, FP32 accumulation, observed plans, calibration files and option errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from reprobuild import precision as P
from reprobuild.backends.base import BuildSettings, Environment
from reprobuild.errors import UsageError
from reprobuild.lockfile import Lock, ModelInfo, dumps_lock, loads_lock
from reprobuild.precision_plan import NodePrecision, PrecisionPlan

from .conftest import EXAMPLES

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
FLOAT, FP16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16


# ---------------------------------------------------------------------------- helpers


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _vi(name: str, shape, elem: int = FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _init(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _opts(**kw) -> P.PrecisionSettings:
    args = {
        "mode": "fp16",
        "keep_fp32": [],
        "keep_fp32_ops": [],
        "max_output": 512.0,
        "max_reduction_depth": None,
        "fp32_accumulate": False,
    }
    args.update(kw)
    return P.validate_options(**args)


def _table(plan: PrecisionPlan) -> dict[str, tuple[str, str]]:
    return {n.node: (n.precision, n.rule) for n in plan.nodes}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(model: onnx.ModelProto) -> None:
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)


def _types(model: onnx.ModelProto) -> dict[str, int]:
    g = model.graph
    out = {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.input, *g.output]}
    out.update({t.name: t.data_type for t in g.initializer})
    return out


def rules_model() -> onnx.ModelProto:
    """One or more nodes per rule; the comments give the rule each node must get."""
    rng = np.random.default_rng(7)
    f32 = np.float32
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),  # default (K = 8)
        helper.make_node("Relu", ["h1"], ["h2"], name="keep_me_relu"),  # name
        helper.make_node("Sigmoid", ["h2"], ["h3"], name="sig"),  # op
        helper.make_node("Mul", ["h3", "c1000"], ["h4"], name="scale_big"),  # magnitude
        helper.make_node("Mul", ["h4", "c_milli"], ["h5"], name="scale_down"),  # default
        helper.make_node("Mul", ["h5", "w_huge"], ["out_huge"], name="huge_w"),  # init-range
        helper.make_node("Mul", ["h5", "w_tiny"], ["out_tiny"], name="tiny_w"),  # init-range
        helper.make_node("Mul", ["h5", "w_mixed"], ["out_mixed"], name="mixed_w"),  # default
        helper.make_node("ReduceSum", ["y", "ax1"], ["out_rw"], name="reduce_wide"),  # depth
        helper.make_node("MatMul", ["y", "w2"], ["out_mm"], name="mm_deep"),  # depth (K = 64)
        helper.make_node("ReduceSum", ["h5", "ax1"], ["out_rn"], name="reduce_narrow"),
        helper.make_node("Shape", ["h5"], ["shp"], name="shape_of"),  # unsupported fp32
        helper.make_node("Gather", ["shp", "idx0"], ["out_dim"], name="gather_dim"),  # other
        helper.make_node("ArgMax", ["h5"], ["out_arg"], name="argmax", axis=1),  # unsupported
        helper.make_node(
            "Constant",
            [],
            ["cw"],
            name="const_w",
            value=numpy_helper.from_array(np.full([8], 0.25, f32)),
        ),  # constant fp16
        helper.make_node("Mul", ["h5", "cw"], ["out_cmul"], name="cmul"),  # default
        helper.make_node(
            "ConstantOfShape",
            ["shape8"],
            ["cos"],
            name="cos_w",
            value=numpy_helper.from_array(np.array([2.0], f32)),
        ),  # constant fp32 (its consumer stays FP32)
        helper.make_node("Add", ["h2", "cos"], ["out_keep"], name="keep_me_add"),  # name
    ]
    mixed = np.full([8], 0.5, f32)
    mixed[3] = 1e-9  # flushes to zero in FP16 but is negligible next to 0.5
    inits = [
        _init("w1", rng.uniform(0.0, 0.5, (8, 8)).astype(f32)),
        _init("c1000", np.array(1000.0, f32)),
        _init("c_milli", np.array(1e-3, f32)),
        _init("w_huge", np.array([1.0] * 7 + [1e5], f32)),
        _init("w_tiny", np.full([8], 1e-8, f32)),
        _init("w_mixed", mixed),
        _init("w2", rng.uniform(-0.1, 0.1, (64, 8)).astype(f32)),
        _init("ax1", np.array([1], np.int64)),
        _init("idx0", np.array(0, np.int64)),
        _init("shape8", np.array([8], np.int64)),
    ]
    outs = [
        _vi("out_huge", [2, 8]),
        _vi("out_tiny", [2, 8]),
        _vi("out_mixed", [2, 8]),
        _vi("out_rw", [2, 1]),
        _vi("out_mm", [2, 8]),
        _vi("out_rn", [2, 1]),
        _vi("out_dim", [], TensorProto.INT64),
        _vi("out_arg", [2, 1], TensorProto.INT64),
        _vi("out_cmul", [2, 8]),
        _vi("out_keep", [2, 8]),
    ]
    return _model(nodes, [_vi("x", [2, 8]), _vi("y", [2, 64])], outs, inits)


RULES_OPTS = {"keep_fp32": ["^keep_me"], "keep_fp32_ops": ["Sigmoid"], "max_reduction_depth": 16}
EXPECTED_RULES = {
    "mm1": ("fp16", "default"),
    "keep_me_relu": ("fp32", "name"),
    "sig": ("fp32", "op"),
    "scale_big": ("fp32", "magnitude"),
    "scale_down": ("fp16", "default"),
    "huge_w": ("fp32", "initializer-range"),
    "tiny_w": ("fp32", "initializer-range"),
    "mixed_w": ("fp16", "default"),
    "reduce_wide": ("fp32", "reduction-depth"),
    "mm_deep": ("fp32", "reduction-depth"),
    "reduce_narrow": ("fp16", "default"),
    "shape_of": ("other", "unsupported"),
    "gather_dim": ("other", "unsupported"),
    "argmax": ("fp32", "unsupported"),
    "const_w": ("fp16", "constant"),
    "cmul": ("fp16", "default"),
    "cos_w": ("fp32", "constant"),
    "keep_me_add": ("fp32", "name"),
}


@pytest.fixture(scope="module")
def rules() -> tuple[onnx.ModelProto, dict[str, np.ndarray], PrecisionPlan]:
    model = rules_model()
    feeds, desc = P.load_calibration(None, model, seed=0)
    plan = P.derive_plan(model, "fp16", _opts(**RULES_OPTS), feeds, desc)
    return model, feeds, plan


# ---------------------------------------------------------------------------- rules


def test_rules_decide_every_node(rules) -> None:
    model, _, plan = rules
    assert _table(plan) == EXPECTED_RULES
    assert [n.node for n in plan.nodes] == P.node_keys(model)  # graph order
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
    loose = P.derive_plan(model, "fp16", _opts(**RULES_OPTS, max_output=2000.0), feeds, "s")
    assert _table(loose)["scale_big"] == ("fp16", "default")
    # ... and sigmoid(0) * 1000 = 500 on all-zero inputs: the rule is data dependent
    zeros = {k: np.zeros_like(v) for k, v in feeds.items()}
    plan0 = P.derive_plan(model, "fp16", _opts(**RULES_OPTS), zeros, "zeros")
    assert _table(plan0)["scale_big"] == ("fp16", "default")


def test_constant_nodes_follow_consumers_unless_kept_by_name_or_op(rules) -> None:
    model, feeds, _ = rules
    by_op = P.derive_plan(model, "fp16", _opts(keep_fp32_ops=["Constant"]), feeds, "s")
    assert _table(by_op)["const_w"] == ("fp32", "op")
    assert _table(by_op)["cmul"] == ("fp16", "default")
    by_name = P.derive_plan(model, "fp16", _opts(keep_fp32=["^cmul$"]), feeds, "s")
    assert _table(by_name)["const_w"] == ("fp32", "constant")  # its only consumer is FP32
    mixed = P.apply_plan(model, by_op)
    _check(mixed)
    cmul = next(n for n in mixed.graph.node if n.name == "cmul")
    assert cmul.input[1] == "cw__fp16"  # the FP32 constant is cast for its FP16 consumer


def test_initializer_range_thresholds() -> None:
    fp16 = TensorProto.FLOAT16
    assert P._range_problem(np.array([1.0, 65504.0], np.float32), fp16) is None
    assert "65504" in P._range_problem(np.array([1.0, 65505.0], np.float32), fp16)
    assert P._range_problem(np.array([1.0, 1e-9], np.float32), fp16) is None  # negligible
    assert "flush" in P._range_problem(np.array([3e-8, 1e-8], np.float32), fp16)
    assert P._range_problem(np.array([np.inf, 1.0], np.float32), fp16) is None
    assert P._range_problem(np.array([1e30], np.float32), TensorProto.BFLOAT16) is None


def test_reduction_depth_definitions() -> None:
    shapes = {"a": (2, 3, 5), "w": (16, 4, 3, 3), "b": (4, 6, 7), "y": (4, 1, 1), "s": (2, 10, 3)}

    def depth(node, opset=17):
        return P.reduction_depth(node, shapes.get, opset)

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
    text = P.format_plan_table(plan)
    lines = text.splitlines()
    assert lines[0] == "precision plan: mode fp16, calibration seeded:0"
    assert lines[1].split() == ["NODE", "OP", "PRECISION", "RULE"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines[2:-1]}
    assert rows["huge_w"] == ["Mul", "fp32", "initializer-range"]
    assert rows["const_w"] == ["Constant", "fp16", "constant"]
    assert lines[-1] == "18 nodes: 6 fp16, 10 fp32, 2 other"


# ---------------------------------------------------------------------------- conversion


def test_converted_rules_model_is_valid_and_close(rules) -> None:
    model, feeds, plan = rules
    mixed = P.apply_plan(model, plan)
    _check(mixed)
    types = _types(mixed)
    # graph inputs and outputs keep their types
    assert [i.type.tensor_type.elem_type for i in mixed.graph.input] == [FLOAT, FLOAT]
    assert [o.type.tensor_type.elem_type for o in mixed.graph.output] == [
        o.type.tensor_type.elem_type for o in model.graph.output
    ]
    by_name = {n.name: n for n in mixed.graph.node}
    assert types[by_name["mm1"].output[0]] == FP16
    assert types[by_name["scale_big"].output[0]] == FLOAT
    # initializers of low-precision nodes are converted, not cast at run time
    assert types[by_name["mm1"].input[1]] == FP16 and by_name["mm1"].input[1] == "w1"
    assert types["w_huge"] == FLOAT
    const = by_name["const_w"].attribute[0].t
    assert const.data_type == FP16
    # a low-precision node that produces a graph output writes a copy that is cast back
    assert by_name["cmul"].output[0] == "out_cmul__fp16"
    err = P.plan_error(model, mixed, feeds)
    assert err["runtime"] == "onnxruntime"
    assert err["max_rel"] < 2e-3, err
    assert np.isfinite(err["max_abs"])


def _assert_realizes(model: onnx.ModelProto, plan: PrecisionPlan) -> None:
    """Reading the converted graph back gives the plan's precision for every original node
    (a node with FP32 accumulation computes in FP32 between its casts, by design)."""
    mixed = P.apply_plan(model, plan)
    seen = P.observe_plan(mixed)
    assert seen is not None
    observed = {n.node: n.precision for n in seen.nodes}  # original nodes keep their names
    for n in plan.nodes:
        want = "fp32" if n.accumulate == "fp32" else n.precision
        assert observed[n.node] == want, n


def test_converted_graph_realizes_the_plan(rules) -> None:
    model, feeds, plan = rules
    _assert_realizes(model, plan)
    matrix = matrix_model()
    mfeeds, desc = P.load_calibration(None, matrix)
    for acc in (False, True):
        _assert_realizes(
            matrix, P.derive_plan(matrix, "fp16", _opts(fp32_accumulate=acc), mfeeds, desc)
        )


def test_converted_plan_is_deterministic_and_keeps_input_model(rules) -> None:
    model, _, plan = rules
    before = model.SerializeToString()
    a = P.apply_plan(model, plan).SerializeToString()
    b = P.apply_plan(model, plan).SerializeToString()
    assert a == b
    assert model.SerializeToString() == before


def test_keep_io_types_false_converts_inputs_and_outputs() -> None:
    rng = np.random.default_rng(3)
    w = rng.uniform(-1, 1, (4, 4)).astype(np.float32)
    model = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Relu", ["h"], ["y"], name="relu"),
        ],
        [_vi("x", [3, 4])],
        [_vi("y", [3, 4])],
        [_init("w", w)],
    )
    feeds, desc = P.load_calibration(None, model, seed=1)
    plan = P.derive_plan(model, "fp16", _opts(keep_io_types=False), feeds, desc)
    mixed = P.apply_plan(model, plan)
    _check(mixed)
    assert mixed.graph.input[0].type.tensor_type.elem_type == FP16
    assert mixed.graph.output[0].type.tensor_type.elem_type == FP16
    assert not [n for n in mixed.graph.node if n.op_type == "Cast"]
    (out,) = _run(mixed, {"x": feeds["x"].astype(np.float16)})
    assert out.dtype == np.float16
    assert P.plan_error(model, mixed, feeds)["max_rel"] < 2e-3


def test_bundled_cnn_converts_within_bound() -> None:
    model = onnx.load(EXAMPLES / "cnn.onnx")
    feeds, desc = P.load_calibration(None, model, seed=0)
    plan = P.derive_plan(model, "fp16", _opts(), feeds, desc)
    assert {n.node: n.precision for n in plan.nodes} == {n.name: "fp16" for n in model.graph.node}
    mixed = P.apply_plan(model, plan)
    _check(mixed)
    err = P.plan_error(model, mixed, feeds)
    assert err["max_abs"] < 2e-3 and err["max_rel"] < 5e-3, err


def test_attention_block_with_fixed_type_inputs_converts() -> None:
    """LayerNorm, Softmax, a -1e9 mask, Resize's float-only scales, TopK indices, Shape."""
    rng = np.random.default_rng(0)
    f32, d = np.float32, 16
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], name="ln", axis=-1),
        helper.make_node("MatMul", ["ln", "wq"], ["q"], name="q"),
        helper.make_node("Transpose", ["ln"], ["lt"], name="lt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "lt"], ["s"], name="scores"),
        helper.make_node("Less", ["s", "zero"], ["m"], name="mask"),
        helper.make_node("Where", ["m", "ninf", "s"], ["s2"], name="masked"),
        helper.make_node("Softmax", ["s2"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "ln"], ["a"], name="attn"),
        helper.make_node("Resize", ["a", "", "scales"], ["y"], name="resize", mode="nearest"),
        helper.make_node("TopK", ["a", "k3"], ["tv", "ti"], name="topk", axis=-1),
        helper.make_node("Shape", ["a"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "one"], ["n"], name="seqlen", axis=0),
        helper.make_node("Cast", ["n"], ["nf"], name="seqlen_f", to=FLOAT),
        helper.make_node("Mul", ["tv", "nf"], ["z"], name="scale_top"),
    ]
    inits = [
        _init("g", np.ones(d, f32)),
        _init("b", np.zeros(d, f32)),
        _init("wq", rng.normal(0, 0.3, (d, d)).astype(f32)),
        _init("zero", np.array(0.0, f32)),
        _init("ninf", np.array(-1e9, f32)),
        _init("scales", np.array([1, 1, 2], f32)),
        _init("k3", np.array([3], np.int64)),
        _init("one", np.array(1, np.int64)),
    ]
    model = _model(
        nodes,
        [_vi("x", [2, 5, d])],
        [_vi("y", [2, 5, 2 * d]), _vi("z", [2, 5, 3]), _vi("ti", [2, 5, 3], TensorProto.INT64)],
        inits,
    )
    feeds, desc = P.load_calibration(None, model)
    plan = P.derive_plan(model, "fp16", _opts(), feeds, desc)
    assert {k: v for k, v in _table(plan).items() if v != ("fp16", "default")} == {
        "masked": ("fp32", "initializer-range"),  # -1e9 does not fit FP16
        # its input (the masked scores, about -1e9) would overflow the Cast to FP16
        "softmax": ("fp32", "magnitude"),
        "topk": ("fp32", "unsupported"),
        "shape": ("other", "unsupported"),
        "seqlen": ("other", "unsupported"),
        "seqlen_f": ("other", "unsupported"),
    }
    mixed = P.apply_plan(model, plan)
    _check(mixed)
    types = _types(mixed)
    by_name = {n.name: n for n in mixed.graph.node}
    assert by_name["resize"].input[2] == "scales" and types["scales"] == FLOAT
    assert types[by_name["resize"].input[0]] == FP16
    assert by_name["shape"].input[0] == "a"  # Shape reads the FP16 tensor: no Cast back
    err = P.plan_error(model, mixed, feeds)
    assert err["outputs"]["ti"]["max_abs"] == 0.0
    assert err["outputs"]["y"]["max_abs"] < 5e-3, err


def test_bf16_follows_op_schemas_and_falls_back_to_reference_runtime() -> None:
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("ReduceSum", ["r", "axes"], ["y"], name="mean", keepdims=0),
    ]

    def make(opset: int) -> onnx.ModelProto:
        return _model(
            nodes,
            [_vi("x", [1, 2, 5, 5])],
            [_vi("y", [1, 3])],
            [
                _init("w", rng.uniform(-1, 1, (3, 2, 3, 3)).astype(np.float32)),
                _init("axes", np.array([2, 3], np.int64)),
            ],
            opset=opset,
        )

    old, new = make(17), make(22)
    feeds, desc = P.load_calibration(None, old)
    p17 = P.derive_plan(old, "bf16", _opts(mode="bf16"), feeds, desc)
    assert _table(p17) == {
        "conv": ("fp32", "unsupported"),  # Conv has no bfloat16 form before opset 22
        "relu": ("bf16", "default"),
        "mean": ("bf16", "default"),
    }
    p22 = P.derive_plan(new, "bf16", _opts(mode="bf16"), feeds, desc)
    assert _table(p22)["conv"] == ("bf16", "default")
    for model, plan in ((old, p17), (new, p22)):
        mixed = P.apply_plan(model, plan)
        _check(mixed)
        err = P.plan_error(model, mixed, feeds)
        assert err["max_rel"] < 2e-2, err
    assert err["runtime"] == "onnx.reference"  # ORT has no CPU bf16 Conv
    with pytest.raises(UsageError, match="opset >= 13"):
        P.derive_plan(make_opset(9), "bf16", _opts(mode="bf16"), {"x": feeds["x"]}, desc)


def make_opset(opset: int) -> onnx.ModelProto:
    return _model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [_vi("x", [1, 2, 5, 5])],
        [_vi("y", [1, 2, 5, 5])],
        [],
        opset=opset,
    )


# ---------------------------------------------------------------------------- lock round trip


def _lock_round_trip(plan: PrecisionPlan) -> PrecisionPlan:
    lock = Lock(
        model=ModelInfo(path="m.onnx", sha256="ab" * 32),
        environment=Environment(backend="reference"),
        settings=BuildSettings(),
        precision=plan,
    )
    loaded = loads_lock(dumps_lock(lock)).precision
    assert loaded is not None
    return loaded


def test_plan_round_trips_through_the_lock_and_reapplies_bytewise(rules) -> None:
    model, feeds, plan = rules
    loaded = _lock_round_trip(plan)
    assert loaded.to_dict() == plan.to_dict()
    first = P.apply_plan(model, plan).SerializeToString()
    assert P.apply_plan(model, loaded).SerializeToString() == first
    # new calibration data changes what derive_plan would decide ...
    zeros = {k: np.zeros_like(v) for k, v in feeds.items()}
    rederived = P.derive_plan(model, "fp16", plan.settings, zeros, "zeros")
    assert _table(rederived) != _table(plan)
    assert P.apply_plan(model, rederived).SerializeToString() != first
    # ... but a locked build applies the stored plan, so its model is unchanged
    assert P.apply_plan(model, _lock_round_trip(loaded)).SerializeToString() == first


def test_diff_plans_names_each_changed_node(rules) -> None:
    model, feeds, plan = rules
    assert P.diff_plans(plan, _lock_round_trip(plan)) == []
    zeros = {k: np.zeros_like(v) for k, v in feeds.items()}
    other = P.derive_plan(model, "fp16", _opts(**RULES_OPTS, max_output=600.0), zeros, "z")
    assert P.diff_plans(plan, other) == [
        "settings.max_output: 512.0 -> 600.0",
        "node scale_big: fp32/magnitude -> fp16/default",
    ]


def test_plan_for_another_model_is_rejected(rules) -> None:
    model, _, plan = rules
    cnn = onnx.load(EXAMPLES / "cnn.onnx")
    with pytest.raises(UsageError, match="different model") as exc:
        P.apply_plan(cnn, plan)
    assert "mm1" in str(exc.value) and "\n" not in str(exc.value)
    missing = PrecisionPlan(plan.mode, plan.settings, plan.calibration, plan.nodes[:-1])
    with pytest.raises(UsageError, match="'keep_me_add' .* missing from the precision plan"):
        P.apply_plan(model, missing)
    wrong_op = [
        NodePrecision(n.node, "Gemm" if n.node == "mm1" else n.op, n.precision, n.rule)
        for n in plan.nodes
    ]
    with pytest.raises(UsageError, match="'mm1' is a MatMul in the model but a Gemm"):
        P.apply_plan(model, PrecisionPlan("fp16", plan.settings, None, wrong_op))
    impossible = [
        NodePrecision(n.node, n.op, "fp16" if n.node == "argmax" else n.precision, n.rule)
        for n in plan.nodes
    ]
    with pytest.raises(UsageError, match="'argmax' .* cannot run in fp16"):
        P.apply_plan(model, PrecisionPlan("fp16", plan.settings, None, impossible))


# ---------------------------------------------------------------------------- fp32 accumulate


def matrix_model() -> onnx.ModelProto:
    rng = np.random.default_rng(11)
    f32 = np.float32
    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["g"], name="gemm", transB=1),
        helper.make_node("Tanh", ["g"], ["t"], name="tanh"),
        helper.make_node("MatMul", ["t", "mw"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "mb"], ["y"], name="bias"),
    ]
    inits = [
        _init("cw", rng.uniform(-0.3, 0.3, (8, 3, 3, 3)).astype(f32)),
        _init("cb", rng.uniform(-0.1, 0.1, (8,)).astype(f32)),
        _init("gw", rng.uniform(-0.5, 0.5, (16, 8)).astype(f32)),
        _init("gb", rng.uniform(-0.1, 0.1, (16,)).astype(f32)),
        _init("mw", rng.uniform(-0.5, 0.5, (16, 4)).astype(f32)),
        _init("mb", rng.uniform(-0.1, 0.1, (4,)).astype(f32)),
    ]
    return _model(nodes, [_vi("x", [2, 3, 6, 6])], [_vi("y", [2, 4])], inits)


def test_fp32_accumulate_changes_only_matrix_nodes() -> None:
    model = matrix_model()
    feeds, desc = P.load_calibration(None, model, seed=0)
    plain = P.derive_plan(model, "fp16", _opts(), feeds, desc)
    acc = P.derive_plan(model, "fp16", _opts(fp32_accumulate=True), feeds, desc)
    assert {n.node for n in acc.nodes if n.accumulate == "fp32"} == {"conv", "gemm", "matmul"}
    for a, b in zip(plain.nodes, acc.nodes, strict=True):
        assert (a.node, a.op, a.precision, a.rule) == (b.node, b.op, b.precision, b.rule)

    m_plain, m_acc = P.apply_plan(model, plain), P.apply_plan(model, acc)
    _check(m_acc)
    plain_nodes = {n.name: n for n in m_plain.graph.node}
    acc_nodes = {n.name: n for n in m_acc.graph.node}
    matrix = {"conv", "gemm", "matmul"}
    # every non-Cast node is the same, except the matrix nodes' input/output names
    for name, node in plain_nodes.items():
        if node.op_type == "Cast":
            continue
        other = acc_nodes[name]
        assert other.op_type == node.op_type
        if name not in matrix:
            assert list(other.input) == list(node.input)
            assert list(other.output) == list(node.output)
    # the added Casts sit right around the matrix nodes, and the matrix nodes compute in FP32
    added = [n for name, n in acc_nodes.items() if name not in plain_nodes]
    assert added and all(n.op_type == "Cast" for n in added)
    feeds_matrix = {x for m in matrix for x in acc_nodes[m].input}
    from_matrix = {x for m in matrix for x in acc_nodes[m].output}
    for cast in added:
        assert cast.output[0] in feeds_matrix or cast.input[0] in from_matrix, cast
    types = _types(m_acc)
    for m in matrix:
        assert {types[x] for x in acc_nodes[m].input} == {FLOAT}
        assert {types[x] for x in acc_nodes[m].output} == {FLOAT}
        assert types[plain_nodes[m].output[0]] == FP16
    # weights are rounded to FP16 (stored as FP16, cast up), inputs too
    assert types["cw"] == FP16 and types["gw"] == FP16 and types["mw"] == FP16
    assert len(added) == 3 * 2 + 1 + 3 + 1  # conv x,w,b + out; gemm a,w,b + out; matmul a,w + out
    err = P.plan_error(model, m_acc, feeds)
    assert err["max_rel"] < 5e-3, err
    # the accumulate field survives the lock and re-applies to the same bytes
    loaded = _lock_round_trip(acc)
    assert loaded.to_dict() == acc.to_dict()
    assert P.apply_plan(model, loaded).SerializeToString() == m_acc.SerializeToString()


def test_reference_backend_fp32_accumulate_changes_matrix_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: the converted models built by the reference backend.

    FP16-accumulating tactics are preferred (the backend's test knob), so the plain FP16
    plan runs its matrix layers with FP16 accumulation, while the ``--fp32-accumulate``
    plan's matrix layers are FP32 in the graph and can only take FP32 kernels.
    """
    from reprobuild.backends.reference import ReferenceBackend

    monkeypatch.setenv("REPROBUILD_REF_TIMING", "prefer:f16acc")
    model = matrix_model()
    feeds, desc = P.load_calibration(None, model, seed=0)
    backend = ReferenceBackend()

    def build(plan: PrecisionPlan, name: str, cache_bytes: bytes = b""):
        path = tmp_path / f"{name}.onnx"
        onnx.save(P.apply_plan(model, plan), path)
        cache = backend.create_timing_cache(cache_bytes)
        out = backend.build(str(path), BuildSettings(), cache, lambda _line: None)
        layers = backend.engine_metadata(out.engine)["layers"]
        kernels = {x["name"]: x["kernel"] for x in layers}
        return backend.run(out.engine, feeds)["y"], kernels, cache.serialize()

    plain_plan = P.derive_plan(model, "fp16", _opts(), feeds, desc)
    acc_plan = P.derive_plan(model, "fp16", _opts(fp32_accumulate=True), feeds, desc)
    plain, plain_k, _ = build(plain_plan, "plain")
    acc, acc_k, acc_cache = build(acc_plan, "acc")
    assert set(plain_k) == set(acc_k) == {"conv", "gemm", "matmul"}
    assert all(k.endswith("_f16_f16acc") for k in plain_k.values()), plain_k
    assert all(k.endswith("_f32") for k in acc_k.values()), acc_k
    assert not np.array_equal(plain, acc)
    (ref,) = _run(model, feeds)
    assert np.abs(acc - ref).max() < 5e-3 and np.abs(plain - ref).max() < 5e-3
    # the plan re-read from the lock, with the recorded timing cache, builds the same bits
    again, again_k, _ = build(_lock_round_trip(acc_plan), "again", acc_cache)
    assert again_k == acc_k and np.array_equal(again.view(np.uint32), acc.view(np.uint32))


# ---------------------------------------------------------------------------- observed plans


def test_observe_plan_records_existing_mixed_precision() -> None:
    model = onnx.load(EXAMPLES / "fp16_middle.onnx")
    plan = P.observe_plan(model)
    assert plan is not None and plan.mode == "observed"
    assert _table(plan) == {
        "fc1": ("fp32", "observed"),
        "to_fp16": ("other", "observed"),
        "fc2": ("fp16", "observed"),
        "to_fp32": ("other", "observed"),
        "fc3": ("fp32", "observed"),
    }
    same = P.apply_plan(model, _lock_round_trip(plan))
    assert same.SerializeToString() == model.SerializeToString()
    lie = [
        NodePrecision(n.node, n.op, "fp32" if n.node == "fc2" else n.precision, n.rule)
        for n in plan.nodes
    ]
    with pytest.raises(UsageError, match="'fc2' has precision fp16 in the model but fp32"):
        P.apply_plan(model, PrecisionPlan("observed", plan.settings, None, lie))
    assert P.observe_plan(onnx.load(EXAMPLES / "cnn.onnx")) is None
    # a derived plan on an already mixed model leaves its FP16 node alone
    feeds, desc = P.load_calibration(None, model)
    derived = P.derive_plan(model, "fp16", _opts(), feeds, desc)
    assert _table(derived)["fc2"] == ("fp16", "observed")
    assert _table(derived)["fc1"] == ("fp16", "default")
    mixed = P.apply_plan(model, derived)
    _check(mixed)
    assert [n.op_type for n in mixed.graph.node].count("Cast") == 5  # 2 + input, fc3, output
    by_name = {n.name: n for n in mixed.graph.node}
    assert by_name["to_fp16"].input[0] == "fc1.out"  # takes FP16 directly: no Cast back
    assert P.plan_error(model, mixed, feeds)["max_abs"] < 2e-4


def test_tensor_used_inside_a_subgraph_keeps_its_type() -> None:
    """An If branch reads ``h`` from the outer graph by name, so ``h`` must stay FP32."""
    then_g = helper.make_graph(
        [helper.make_node("Neg", ["h"], ["t_out"], name="neg")], "then", [], [_vi("t_out", [2, 3])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Abs", ["h"], ["e_out"], name="abs")], "else", [], [_vi("e_out", [2, 3])]
    )
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["h"], name="relu"),
            helper.make_node("Sigmoid", ["h"], ["s"], name="sig"),
            helper.make_node(
                "If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g
            ),
        ],
        [_vi("x", [2, 3]), _vi("cond", [], TensorProto.BOOL)],
        [_vi("y", [2, 3]), _vi("s", [2, 3])],
        [],
    )
    feeds, desc = P.load_calibration(None, model)
    plan = P.derive_plan(model, "fp16", _opts(), feeds, desc)
    assert _table(plan) == {
        "relu": ("fp16", "default"),
        "sig": ("fp16", "default"),
        "branch": ("fp32", "unsupported"),
    }
    mixed = P.apply_plan(model, plan)
    _check(mixed)
    types = _types(mixed)
    relu = next(n for n in mixed.graph.node if n.name == "relu")
    assert relu.output[0] == "h__fp16" and types["h"] == FLOAT and types["h__fp16"] == FP16
    for cond in (True, False):
        run_feeds = {"x": feeds["x"] - 0.5, "cond": np.array(cond)}
        err = P.plan_error(model, mixed, run_feeds)
        assert err["max_abs"] < 1e-3, err


# ---------------------------------------------------------------------------- random plans


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    choices=st.lists(st.sampled_from(["fp16", "fp32", "acc"]), min_size=7, max_size=7),
    keep_io=st.booleans(),
)
def test_any_plan_gives_a_valid_model(seed: int, choices: list[str], keep_io: bool) -> None:
    """Whatever a (hand-edited) plan decides, the converted graph is valid and runs."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"], name="n0"),
        helper.make_node("Add", ["a", "b"], ["a2"], name="n1"),
        helper.make_node("Relu", ["a2"], ["r"], name="n2"),
        helper.make_node("MatMul", ["r", "w"], ["m2"], name="n3"),  # shares w with n0
        helper.make_node("Concat", ["m2", "r"], ["cat"], name="n4", axis=1),
        helper.make_node("Mul", ["cat", "b2"], ["y"], name="n5"),
        helper.make_node("Sigmoid", ["r"], ["z"], name="n6"),  # r is also a graph output
    ]
    model = _model(
        nodes,
        [_vi("x", [2, 6])],
        [_vi("y", [2, 12]), _vi("r", [2, 6]), _vi("z", [2, 6])],
        [
            _init("w", rng.uniform(-1, 1, (6, 6)).astype(f32)),
            _init("b", rng.uniform(-1, 1, (6,)).astype(f32)),
            _init("b2", rng.uniform(-1, 1, (12,)).astype(f32)),
        ],
    )
    plan = PrecisionPlan(
        "fp16",
        _opts(keep_io_types=keep_io),
        "test",
        [
            NodePrecision(
                n.name,
                n.op_type,
                "fp32" if c == "fp32" else "fp16",
                "name" if c == "fp32" else "default",
                "fp32" if c == "acc" and n.op_type == "MatMul" else None,
            )
            for n, c in zip(nodes, choices, strict=True)
        ],
    )
    mixed = P.apply_plan(model, plan)
    _check(mixed)
    feeds = {"x": rng.uniform(-1, 1, (2, 6)).astype(f32)}
    err = P.plan_error(model, mixed, feeds)
    assert err["max_abs"] < 1e-2, (choices, err)  # values are O(1); FP16 keeps ~3 digits
    types = _types(mixed)
    for n, c in zip(nodes, choices, strict=True):
        node = next(m for m in mixed.graph.node if m.name == n.name)
        if c == "fp16":
            assert types[node.output[0]] == FP16
        elif c == "fp32":
            assert {types[x] for x in node.input} == {FLOAT}


# ---------------------------------------------------------------------------- calibration


def test_seeded_calibration_is_reproducible(rules) -> None:
    model, _, _ = rules
    a, da = P.load_calibration(None, model, seed=4)
    b, _ = P.load_calibration(None, model, seed=4)
    c, dc = P.load_calibration(None, model, seed=5)
    assert da == "seeded:4" and dc == "seeded:5"
    assert a.keys() == {"x", "y"} and a["x"].shape == (2, 8) and a["x"].dtype == np.float32
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["x"], c["x"])


def test_calibration_files(tmp_path: Path, rules) -> None:
    import hashlib

    from polygraphy.json import save_json

    model, feeds, _ = rules
    npz = tmp_path / "inputs.npz"
    np.savez(npz, **feeds)
    got, desc = P.load_calibration(str(npz), model)
    assert desc == f"sha256:{hashlib.sha256(npz.read_bytes()).hexdigest()} (inputs.npz)"
    assert all(np.array_equal(got[k], feeds[k]) for k in feeds)

    other = {k: v * 2 for k, v in feeds.items()}
    js = tmp_path / "inputs.json"
    save_json([other, feeds], str(js))  # Polygraphy's own writer; the first feed is used
    got, desc = P.load_calibration(str(js), model)
    assert desc.startswith("sha256:") and desc.endswith("(inputs.json)")
    assert all(np.array_equal(got[k], other[k]) for k in feeds)


@pytest.mark.parametrize(
    ("arrays", "name", "match"),
    [
        ({"x": np.zeros((2, 8), np.float32)}, "a.npz", "no data for model input 'y'"),
        (
            {"x": np.zeros((2, 8), np.float32), "y": np.zeros((2, 64), np.float32), "q": 1},
            "a.npz",
            "'q' is not an input of the model",
        ),
        (
            {"x": np.zeros((2, 8)), "y": np.zeros((2, 64), np.float32)},
            "a.npz",
            "'x' has dtype float64 but the model expects float32",
        ),
        (
            {"x": np.zeros((3, 8), np.float32), "y": np.zeros((2, 64), np.float32)},
            "a.npz",
            r"'x' has shape \[3, 8\] but the model expects \[2, 8\]",
        ),
        ({}, "a.txt", "unknown calibration format"),
        (None, "missing.npz", "no such calibration file"),
    ],
)
def test_calibration_errors(tmp_path: Path, rules, arrays, name: str, match: str) -> None:
    model, _, _ = rules
    path = tmp_path / name
    if arrays is not None:
        if name.endswith(".npz"):
            np.savez(path, **arrays)
        else:
            path.write_text(json.dumps(arrays))
    with pytest.raises(UsageError, match=match) as exc:
        P.load_calibration(str(path), model)
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value)


# ---------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"keep_fp32": ["conv(["]}, r"--keep-fp32 'conv\(\[': bad regular expression"),
        ({"keep_fp32_ops": ["Matmul"]}, r"--keep-fp32-op 'Matmul': not an ONNX operator.*'MatMul'"),
        ({"keep_fp32_ops": ["Frobnicate"]}, "--keep-fp32-op 'Frobnicate': not an ONNX operator"),
        ({"max_output": -1.0}, "--max-output -1.0: must be a positive finite number"),
        ({"max_output": 0.0}, "--max-output 0.0: must be a positive"),
        ({"max_output": float("nan")}, "--max-output nan: must be a positive"),
        ({"max_reduction_depth": -5}, "--max-reduction-depth -5: must be a positive integer"),
        ({"max_reduction_depth": 0}, "--max-reduction-depth 0: must be a positive integer"),
        ({"mode": "int8"}, "--precision 'int8': unknown precision; use fp16 or bf16"),
    ],
)
def test_invalid_options(kw: dict, match: str) -> None:
    with pytest.raises(UsageError, match=match) as exc:
        _opts(**kw)
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value)


def test_valid_options_are_recorded() -> None:
    s = _opts(
        keep_fp32=["^head"],
        keep_fp32_ops=["Softmax", "LayerNormalization"],
        max_output=100,
        max_reduction_depth=4096,
        fp32_accumulate=True,
    )
    assert s.to_dict() == {
        "keep_fp32": ["^head"],
        "keep_fp32_ops": ["Softmax", "LayerNormalization"],
        "max_output": 100.0,
        "max_reduction_depth": 4096,
        "fp32_accumulate": True,
        "keep_io_types": True,
    }


# ---------------------------------------------------------------------------- model zoo


def _arange_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The inputs onnx's own backend runner feeds the light models."""
    (vi,) = P._real_input_names(model)
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
    plan = P.derive_plan(model, "fp16", _opts(), feeds, "arange")
    keys = P.node_keys(model)
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
    mixed = P.apply_plan(model, plan)
    _check(mixed)
    err = P.plan_error(model, mixed, feeds)
    assert err["max_abs"] < 1e-3, err


@pytest.mark.slow
def test_light_densenet121_conversion_error() -> None:
    model = onnx.load(LIGHT / "light_densenet121.onnx")
    feeds = _arange_feeds(model)
    plan = P.derive_plan(model, "fp16", _opts(max_reduction_depth=1024), feeds, "arange")
    table = _table(plan)
    keys = P.node_keys(model)
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
    mixed = P.apply_plan(model, plan)
    _check(mixed)
    low_consts = {k for k, (p, r) in table.items() if r == "constant" and p == "fp16"}
    converted = [
        n for n, k in zip(mixed.graph.node, P.node_keys(mixed), strict=True) if k in low_consts
    ]
    cos = [n for n in converted if n.op_type == "ConstantOfShape"]
    assert cos and all(n.attribute[0].t.data_type == FP16 for n in cos)
    err = P.plan_error(model, mixed, feeds)
    assert err["max_abs"] < 1e-3 and err["max_rel"] < 5e-3, err


def test_plan_error_detects_a_real_difference() -> None:
    model = make_opset(17)
    other = make_opset(17)
    other.graph.node[0].op_type = "Sigmoid"
    feeds = {"x": np.full((1, 2, 5, 5), -1.0, np.float32)}
    err = P.plan_error(model, other, feeds)
    assert err["max_abs"] == pytest.approx(1 / (1 + np.e))
