"""The reference backend's QuantizeLinear/DequantizeLinear against ONNX Runtime, bit for bit,
at opset 13 (where onnx.reference has no implementation) and per tensor / per axis."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from reprobuild.backends.reference.qdq import run_qdq


def _ort(op: str, x: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: int) -> np.ndarray:
    out_type = TensorProto.FLOAT if op == "DequantizeLinear" else TensorProto.INT8
    in_type = TensorProto.INT8 if op == "DequantizeLinear" else TensorProto.FLOAT
    node = helper.make_node(op, ["x", "s", "z"], ["y"], axis=axis)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", in_type, list(x.shape))],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_and_dequantize_match_onnxruntime(per_axis: bool) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4, 3, 5)) * 3).astype(np.float32)
    x[0, 0, :3] = [0.5, -0.5, 1000.0]  # a tie (round half to even) and saturation
    if per_axis:
        scale = np.array([0.01, 0.5, 1.0], np.float32)
        zp = np.zeros(3, np.int8)
    else:
        scale, zp = np.array(1.0, np.float32), np.array(0, np.int8)
    (q,) = run_qdq("QuantizeLinear", [x, scale, zp], {"axis": 1})
    assert q.dtype == np.int8 and q.max() == 127
    assert np.array_equal(q, _ort("QuantizeLinear", x, scale, zp, 1))
    (dq,) = run_qdq("DequantizeLinear", [q, scale, zp], {"axis": 1})
    assert dq.dtype == np.float32
    assert dq.tobytes() == _ort("DequantizeLinear", q, scale, zp, 1).tobytes()
    if not per_axis:
        assert q[0, 0, 0] == 0 and q[0, 0, 1] == 0  # 0.5 and -0.5 round to even


def test_unsupported_forms_fall_back() -> None:
    x = np.ones((2, 4), np.float32)
    assert run_qdq("QuantizeLinear", [x, np.ones(2, np.float32)], {"block_size": 2}) is None
    assert run_qdq("QuantizeLinear", [x, np.ones(3, np.float32), np.zeros(3, np.int8)], {}) is None
