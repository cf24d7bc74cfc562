"""Small models made in code for the verify tests: a random-weight CNN with no dense head,
and a ConvTranspose-only model (no op the reference backend times, so its lock is empty).

Why made here and not committed: a few kilobytes of seeded weights, and the test says what
the model is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def conv_only_cnn(path: Path, seed: int = 0) -> Path:
    """input (1, 3, 16, 16) -> conv1 3x3 (8) -> Relu -> conv2 3x3 (8) -> output: every
    output element is a short FP32-accumulated sum, so in FP16 the FP32-accumulating kernels
    round to the same bits and only a kernel that accumulates in FP16 shows."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["input", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["output"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_only_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 8, 16, 16])],
        [w1, w2],
    )
    return _save(graph, path)


def conv_transpose_only(path: Path, seed: int = 0) -> Path:
    """input (1, 4, 8, 8) -> ConvTranspose 2x2 stride 2 (4) -> output (1, 4, 16, 16)."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 4, 2, 2)).astype(np.float32), "w")
    node = helper.make_node("ConvTranspose", ["input", "w"], ["output"], name="up", strides=[2, 2])
    graph = helper.make_graph(
        [node],
        "conv_transpose_only",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4, 16, 16])],
        [w],
    )
    return _save(graph, path)
