"""Converting graphs by a plan: validity, types, error bounds, determinism, subgraphs and
any hand-edited plan."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from reprobuild.errors import UsageError
from reprobuild.lock.plan import NodePrecision, PrecisionPlan
from reprobuild.precision.apply import apply_plan
from reprobuild.precision.calibration import load_calibration
from reprobuild.precision.measure import ort_session, plan_error
from reprobuild.precision.rules import derive_plan

from ..conftest import EXAMPLES
from .helpers import (
    FLOAT,
    FP16,
    _assert_realizes,
    _check,
    _init,
    _model,
    _opts,
    _run,
    _table,
    _types,
    _vi,
    make_opset,
    matrix_model,
)

# ---------------------------------------------------------------------------- conversion


def test_converted_rules_model_is_valid_and_close(rules) -> None:
    model, feeds, plan = rules
    mixed = apply_plan(model, plan)
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
    err = plan_error(model, mixed, feeds)
    assert err["runtime"] == "onnxruntime"
    assert err["max_rel"] < 2e-3, err
    assert np.isfinite(err["max_abs"])


def test_converted_graph_realizes_the_plan(rules) -> None:
    model, feeds, plan = rules
    _assert_realizes(model, plan)
    matrix = matrix_model()
    mfeeds, desc = load_calibration(None, matrix)
    for acc in (False, True):
        _assert_realizes(
            matrix, derive_plan(matrix, "fp16", _opts(fp32_accumulate=acc), mfeeds, desc)
        )


def test_converted_plan_is_deterministic_and_keeps_input_model(rules) -> None:
    model, _, plan = rules
    before = model.SerializeToString()
    a = apply_plan(model, plan).SerializeToString()
    b = apply_plan(model, plan).SerializeToString()
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
    feeds, desc = load_calibration(None, model, seed=1)
    plan = derive_plan(model, "fp16", _opts(keep_io_types=False), feeds, desc)
    mixed = apply_plan(model, plan)
    _check(mixed)
    assert mixed.graph.input[0].type.tensor_type.elem_type == FP16
    assert mixed.graph.output[0].type.tensor_type.elem_type == FP16
    assert not [n for n in mixed.graph.node if n.op_type == "Cast"]
    (out,) = _run(mixed, {"x": feeds["x"].astype(np.float16)})
    assert out.dtype == np.float16
    assert plan_error(model, mixed, feeds)["max_rel"] < 2e-3


def test_bundled_cnn_converts_within_bound() -> None:
    model = onnx.load(EXAMPLES / "cnn.onnx")
    feeds, desc = load_calibration(None, model, seed=0)
    plan = derive_plan(model, "fp16", _opts(), feeds, desc)
    assert {n.node: n.precision for n in plan.nodes} == {n.name: "fp16" for n in model.graph.node}
    mixed = apply_plan(model, plan)
    _check(mixed)
    err = plan_error(model, mixed, feeds)
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
    feeds, desc = load_calibration(None, model)
    plan = derive_plan(model, "fp16", _opts(), feeds, desc)
    assert {k: v for k, v in _table(plan).items() if v != ("fp16", "default")} == {
        "masked": ("fp32", "initializer-range"),  # -1e9 does not fit FP16
        # its input (the masked scores, about -1e9) would overflow the Cast to FP16
        "softmax": ("fp32", "magnitude"),
        "topk": ("fp32", "unsupported"),
        "shape": ("other", "unsupported"),
        "seqlen": ("other", "unsupported"),
        "seqlen_f": ("other", "unsupported"),
    }
    mixed = apply_plan(model, plan)
    _check(mixed)
    types = _types(mixed)
    by_name = {n.name: n for n in mixed.graph.node}
    assert by_name["resize"].input[2] == "scales" and types["scales"] == FLOAT
    assert types[by_name["resize"].input[0]] == FP16
    assert by_name["shape"].input[0] == "a"  # Shape reads the FP16 tensor: no Cast back
    err = plan_error(model, mixed, feeds)
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
    feeds, desc = load_calibration(None, old)
    p17 = derive_plan(old, "bf16", _opts(mode="bf16"), feeds, desc)
    assert _table(p17) == {
        "conv": ("fp32", "unsupported"),  # Conv has no bfloat16 form before opset 22
        "relu": ("bf16", "default"),
        "mean": ("bf16", "default"),
    }
    p22 = derive_plan(new, "bf16", _opts(mode="bf16"), feeds, desc)
    assert _table(p22)["conv"] == ("bf16", "default")
    for model, plan in ((old, p17), (new, p22)):
        mixed = apply_plan(model, plan)
        _check(mixed)
        err = plan_error(model, mixed, feeds)
        assert err["max_rel"] < 2e-2, err
    assert err["runtime"] == "onnx.reference"  # ORT has no CPU bf16 Conv
    with pytest.raises(UsageError, match="opset >= 13"):
        derive_plan(make_opset(9), "bf16", _opts(mode="bf16"), {"x": feeds["x"]}, desc)


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
    feeds, desc = load_calibration(None, model)
    plan = derive_plan(model, "fp16", _opts(), feeds, desc)
    assert _table(plan) == {
        "relu": ("fp16", "default"),
        "sig": ("fp16", "default"),
        "branch": ("fp32", "unsupported"),
    }
    mixed = apply_plan(model, plan)
    _check(mixed)
    types = _types(mixed)
    relu = next(n for n in mixed.graph.node if n.name == "relu")
    assert relu.output[0] == "h__fp16" and types["h"] == FLOAT and types["h__fp16"] == FP16
    for cond in (True, False):
        run_feeds = {"x": feeds["x"] - 0.5, "cond": np.array(cond)}
        err = plan_error(model, mixed, run_feeds)
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
    mixed = apply_plan(model, plan)
    _check(mixed)
    feeds = {"x": rng.uniform(-1, 1, (2, 6)).astype(f32)}
    err = plan_error(model, mixed, feeds)
    assert err["max_abs"] < 1e-2, (choices, err)  # values are O(1); FP16 keeps ~3 digits
    types = _types(mixed)
    for n, c in zip(nodes, choices, strict=True):
        node = next(m for m in mixed.graph.node if m.name == n.name)
        if c == "fp16":
            assert types[node.output[0]] == FP16
        elif c == "fp32":
            assert {types[x] for x in node.input} == {FLOAT}


def test_a_model_too_new_for_onnx_runtime_is_refused_with_the_ir_version_to_save() -> None:
    """``make_model`` stamps the installed onnx's newest IR version; an older ONNX Runtime
    refuses it with a bare "Unsupported", so the message says which IR version to save."""
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])], [])
    model.ir_version = 99  # newer than any runtime reads
    with pytest.raises(UsageError, match="save it with ir_version = 8 .* or upgrade onnxruntime"):
        ort_session(model.SerializeToString(), "model")


def test_a_castlike_the_conversion_makes_a_no_op_becomes_an_identity() -> None:
    """fc1 converted, its CastLike to FP16 casts FP16 to FP16: an Identity of the same name,
    which every ONNX Runtime loads (1.30 refuses such a CastLike between FP16 nodes)."""
    rng = np.random.default_rng(0)
    model = _model(
        [
            helper.make_node("MatMul", ["x", "w1"], ["a"], name="fc1"),
            helper.make_node("CastLike", ["a", "like"], ["b"], name="to_half"),
            helper.make_node("MatMul", ["b", "w2"], ["y"], name="fc2"),
        ],
        [_vi("x", [2, 4])],
        [_vi("y", [2, 3], FP16)],
        [
            _init("w1", rng.standard_normal((4, 4)).astype(np.float32)),
            _init("like", np.zeros((1,), np.float16)),
            _init("w2", rng.standard_normal((4, 3)).astype(np.float16)),
        ],
    )
    feeds, desc = load_calibration(None, model)
    mixed = apply_plan(model, derive_plan(model, "fp16", _opts(), feeds, desc))
    _check(mixed)
    node = next(n for n in mixed.graph.node if n.name == "to_half")
    assert node.op_type == "Identity" and list(node.input) == ["a"]
    assert plan_error(model, mixed, feeds)["max_abs"] < 1e-2
