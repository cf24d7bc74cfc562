"""Models and small helpers the precision tests share: each rule's trigger model, the
matrix-product model, running and type-checking converted graphs, lock round trips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from reprobuild.backends.base import BuildSettings, Environment
from reprobuild.lock.model import Lock, ModelInfo
from reprobuild.lock.plan import PrecisionPlan, PrecisionSettings
from reprobuild.lock.yamlio import dumps_lock, loads_lock
from reprobuild.precision.analysis import observe_plan
from reprobuild.precision.apply import apply_plan
from reprobuild.precision.options import validate_options

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
FLOAT, FP16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16


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


def _opts(**kw) -> PrecisionSettings:
    args = {
        "mode": "fp16",
        "keep_fp32": [],
        "keep_fp32_ops": [],
        "max_output": 512.0,
        "max_reduction_depth": None,
        "fp32_accumulate": False,
    }
    args.update(kw)
    return validate_options(**args)


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


def _assert_realizes(model: onnx.ModelProto, plan: PrecisionPlan) -> None:
    """Reading the converted graph back gives the plan's precision for every original node
    (a node with FP32 accumulation computes in FP32 between its casts, by design)."""
    mixed = apply_plan(model, plan)
    seen = observe_plan(mixed)
    assert seen is not None
    observed = {n.node: n.precision for n in seen.nodes}  # original nodes keep their names
    for n in plan.nodes:
        want = "fp32" if n.accumulate == "fp32" else n.precision
        assert observed[n.node] == want, n


def make_opset(opset: int) -> onnx.ModelProto:
    return _model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [_vi("x", [1, 2, 5, 5])],
        [_vi("y", [1, 2, 5, 5])],
        [],
        opset=opset,
    )


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


def build_digits(cli, tmp: Path, kind: str, *extra: str, lock: str = "t", out: str = "a"):
    """``reprobuild build`` of a digits model on the reference backend, quietly, with its
    lock, engine and cache directory in ``tmp`` (the INT8 tests' one build command)."""
    from tests.models import digits

    return cli(
        "build", str(digits.model_path(kind)), "--backend", "reference", "--lock",
        str(tmp / f"{lock}.lock"), "--out", str(tmp / f"{out}.engine"), "--cache-dir",
        str(tmp / "caches"), "-q", *extra,
    )  # fmt: skip
