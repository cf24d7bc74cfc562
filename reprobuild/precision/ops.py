"""The vocabulary the precision rules share: element types and the ops they treat specially.

Plain constants with no imports, so option checks and the CLI can read them without loading
numpy or onnx. The element types are ``onnx.TensorProto.DataType`` values, which the ONNX
specification fixes.
"""

from __future__ import annotations

FLOAT = 1  # TensorProto.FLOAT
FLOAT16 = 10  # TensorProto.FLOAT16
DOUBLE = 11  # TensorProto.DOUBLE
BFLOAT16 = 16  # TensorProto.BFLOAT16

LOW_TYPES = {"fp16": FLOAT16, "bf16": BFLOAT16}
TYPE_NAME = {FLOAT: "fp32", FLOAT16: "fp16", BFLOAT16: "bf16", DOUBLE: "fp64"}
TENSOR_STR = {FLOAT: "tensor(float)", FLOAT16: "tensor(float16)", BFLOAT16: "tensor(bfloat16)"}
FLOAT_TYPES = frozenset({FLOAT, FLOAT16, BFLOAT16, DOUBLE})
# Cast supports float16 since opset 6 and bfloat16 since opset 13.
MIN_OPSET = {"fp16": 6, "bf16": 13}
# Largest finite value and machine epsilon of the low-precision types.
LOW_MAX = {FLOAT16: 65504.0, BFLOAT16: 3.3895313892515355e38}
LOW_EPS = {FLOAT16: 2.0**-10, BFLOAT16: 2.0**-7}

MATRIX_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})
"""Matrix products: the nodes that ``--fp32-accumulate`` changes."""

UNSUPPORTED_OPS = frozenset(
    {
        # results that are shapes, sizes or types, not float values
        "Shape",
        "Size",
        "Cast",
        "CastLike",
        "EyeLike",
        # index outputs: low-precision rounding creates ties and changes the indices
        "ArgMax",
        "ArgMin",
        "TopK",
        "NonZero",
        "NonMaxSuppression",
        # the output type comes from an attribute
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        # quantization scales are part of the quantization scheme
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        # control flow: the bodies are separate graphs
        "If",
        "Loop",
        "Scan",
    }
)
"""Ops kept as they are even when their schema has a float16/bfloat16 form."""

ALWAYS_FP32_OPS = frozenset({"Upsample", "NonMaxSuppression", "Celu"})
"""Kept in FP32 whatever the options say, as ModelOpt AutoCast keeps them: NonMaxSuppression
and Celu take FP32 inputs in ONNX (Celu gains float16 only in opset 28), and Upsample's
scales stay FP32, which a node-level precision cannot express (its successor Resize can be
converted: its scales have a type of their own)."""

CONSTANT_FOLLOW_OPS = frozenset(
    {
        "Constant",
        "ConstantOfShape",
        "Identity",
        "Unsqueeze",
        "Squeeze",
        "Reshape",
        "Flatten",
        "Transpose",
        "Concat",
        "Expand",
        "Tile",
        "Slice",
        "Gather",
        "Split",
    }
)
"""Ops that only create or move data: on constant inputs they follow their consumers."""

GENERATOR_OPS = frozenset({"Constant", "ConstantOfShape"})
# Their first input may be any float type: a low-precision value widened to FP32 is exact,
# so casting it (or taking its shape) directly gives the same result without a Cast back.
TYPE_AGNOSTIC_INPUT0 = frozenset({"Cast", "CastLike", "Shape", "Size"})
NONDETERMINISTIC_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
)
REDUCE_RATIO_OPS = frozenset(
    {
        "ReduceSum",
        "ReduceMean",
        "ReduceSumSquare",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceProd",
        "GlobalAveragePool",
        "GlobalLpPool",
    }
)
