"""Generate the bundled example models in reprobuild/examples/ (seeded, byte-stable).

Run: python scripts/make_examples.py [--out reprobuild/examples]
The same seed gives the same bytes, so regenerating never produces a spurious diff.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # readable by every TensorRT 10.x parser and onnxruntime >= 1.17


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def _linear(rng: np.random.Generator, fan_in: int, fan_out: int, dtype=np.float32):
    bound = 1.0 / np.sqrt(fan_in)
    w = rng.uniform(-bound, bound, size=(fan_in, fan_out)).astype(dtype)
    b = rng.uniform(-bound, bound, size=(fan_out,)).astype(dtype)
    return w, b


def _model(graph: onnx.GraphProto, name: str) -> onnx.ModelProto:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="reprobuild-examples"
    )
    model.ir_version = IR_VERSION
    model.doc_string = name
    onnx.checker.check_model(model, full_check=True)
    return model


def mlp(seed: int = 0) -> onnx.ModelProto:
    """Two-layer MLP 1024 -> 1024 -> ReLU -> 10, as PyTorch exports Linear (MatMul + Add)."""
    rng = np.random.default_rng(seed)
    w1, b1 = _linear(rng, 1024, 1024)
    w2, b2 = _linear(rng, 1024, 10)
    nodes = [
        helper.make_node("MatMul", ["input", "fc1.weight"], ["fc1.mm"], name="fc1"),
        helper.make_node("Add", ["fc1.mm", "fc1.bias"], ["fc1.out"], name="fc1.bias_add"),
        helper.make_node("Relu", ["fc1.out"], ["relu1.out"], name="relu1"),
        helper.make_node("MatMul", ["relu1.out", "fc2.weight"], ["fc2.mm"], name="fc2"),
        helper.make_node("Add", ["fc2.mm", "fc2.bias"], ["output"], name="fc2.bias_add"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [8, 1024])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [8, 10])],
        [
            _init("fc1.weight", w1),
            _init("fc1.bias", b1),
            _init("fc2.weight", w2),
            _init("fc2.bias", b2),
        ],
    )
    return _model(graph, "two-layer MLP 1024 -> 1024 -> ReLU -> 10")


def fp16_middle(seed: int = 1) -> onnx.ModelProto:
    """10 -> 10, then an FP16 Linear 10 -> 30 between Casts, then 30 -> 40 (already mixed)."""
    rng = np.random.default_rng(seed)
    w1, b1 = _linear(rng, 10, 10)
    w2, b2 = _linear(rng, 10, 30, np.float16)
    w3, b3 = _linear(rng, 30, 40)
    nodes = [
        helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["fc1.out"], name="fc1"),
        helper.make_node("Cast", ["fc1.out"], ["fc1.half"], name="to_fp16", to=TensorProto.FLOAT16),
        helper.make_node("Gemm", ["fc1.half", "fc2.weight", "fc2.bias"], ["fc2.out"], name="fc2"),
        helper.make_node("Cast", ["fc2.out"], ["fc2.float"], name="to_fp32", to=TensorProto.FLOAT),
        helper.make_node("Gemm", ["fc2.float", "fc3.weight", "fc3.bias"], ["output"], name="fc3"),
    ]
    graph = helper.make_graph(
        nodes,
        "fp16_middle",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [4, 10])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [4, 40])],
        [
            _init("fc1.weight", w1),
            _init("fc1.bias", b1),
            _init("fc2.weight", w2),
            _init("fc2.bias", b2),
            _init("fc3.weight", w3),
            _init("fc3.bias", b3),
        ],
    )
    return _model(graph, "FP16 middle Linear between casts: 10 -> 10, FP16 10 -> 30, 30 -> 40")


def cnn(seed: int = 2) -> onnx.ModelProto:
    """Small CNN: two Conv+ReLU stages, pooling, and a Gemm classifier."""
    rng = np.random.default_rng(seed)

    def conv_w(cout: int, cin: int, k: int) -> np.ndarray:
        bound = 1.0 / np.sqrt(cin * k * k)
        return rng.uniform(-bound, bound, size=(cout, cin, k, k)).astype(np.float32)

    c1w, c1b = conv_w(16, 3, 3), rng.uniform(-0.1, 0.1, 16).astype(np.float32)
    c2w, c2b = conv_w(32, 16, 3), rng.uniform(-0.1, 0.1, 32).astype(np.float32)
    fw, fb = _linear(rng, 32, 10)
    nodes = [
        helper.make_node(
            "Conv",
            ["input", "conv1.weight", "conv1.bias"],
            ["c1"],
            name="conv1",
            pads=[1, 1, 1, 1],
            kernel_shape=[3, 3],
        ),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node(
            "MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node(
            "Conv",
            ["p1", "conv2.weight", "conv2.bias"],
            ["c2"],
            name="conv2",
            pads=[1, 1, 1, 1],
            kernel_shape=[3, 3],
        ),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["output"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 3, 32, 32])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [2, 10])],
        [
            _init("conv1.weight", c1w),
            _init("conv1.bias", c1b),
            _init("conv2.weight", c2w),
            _init("conv2.bias", c2b),
            _init("fc.weight", fw),
            _init("fc.bias", fb),
        ],
    )
    return _model(graph, "small CNN: conv-relu-pool, conv-relu, global pool, linear")


EXAMPLES = {"mlp": mlp, "fp16_middle": fp16_middle, "cnn": cnn}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    default = Path(__file__).resolve().parent.parent / "reprobuild" / "examples"
    ap.add_argument("--out", type=Path, default=default)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, make in EXAMPLES.items():
        path = args.out / f"{name}.onnx"
        path.write_bytes(make().SerializeToString())
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
