"""INT8 kernels: DequantizeLinear -> Conv/MatMul/Gemm (-> QuantizeLinear) fused, as TensorRT
runs explicit Q/DQ.

TensorRT never executes a DQ -> Conv -> Q chain as three float layers: it fuses it into one
kernel that multiplies the INT8 input by the INT8 weights, accumulates in int32 and applies
the scales in an epilogue. The accumulation is exact, so INT8 kernels do not differ in their
summation order; they differ in the epilogue, and that is what the tactics here model:

- ``fscale`` requantizes with one float scale ``sx * sw / sy``; ``fxmul`` with a fixed-point
  multiplier and shift (Q31 multiplier, one rounding right shift, the bias added to the
  int32 accumulator), as integer-only requantizers do.
- ``rne`` rounds half to even (``cvt.rni``), ``rna`` half away from zero. Offered with the
  FP16 epilogue only: in FP32 a product of the accumulator and a float scale is never
  exactly halfway (on the digits layers the two give the same bits), in FP16 often is.
- ``f32``/``f16``: the precision of the epilogue's multiply-add.

Layers without an output Q (a float output, e.g. the logits) get ``deq`` epilogues: the
scales applied in FP32 or FP16, or the bias folded into the int32 accumulator (``ibias``).

How the fusion is executed without rewriting the graph: the layer's inputs stay the
dequantized tensors the graph computes (``q * s`` exactly, so ``rint(x / s)`` recovers the
INT8 values), and a requantizing kernel outputs ``q * sy``, which the following Q (through
Relu/Flatten/Reshape, which commute with it) turns back into exactly its ``q``. So the Q/DQ
layers around a fused layer still run, and their results are the fused kernel's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from reprobuild.backends.reference import kernels
from reprobuild.backends.reference.convparams import columns, conv_params, padded

PASS_THROUGH = ("Relu", "Flatten", "Reshape")
"""Ops between the layer and its output Q that commute with requantization."""


@dataclass(frozen=True)
class Fusion:
    """What the fused INT8 kernel needs beyond the layer's inputs: every scale is a graph
    constant, found once when the model is prepared."""

    x_scale: np.float32  # the input's DQ scale (per tensor)
    w_int8: np.ndarray  # the weights before their DQ
    w_scale: np.ndarray  # float32, one per output channel (or one value)
    y_scale: np.float32 | None  # the output Q's scale, None for a float output
    x_int8: str = ""  # the INT8 tensor the input's DQ reads: what the kernel really reads


def _scalar_scale(node: onnx.NodeProto, constants: Mapping[str, Any]) -> np.float32 | None:
    """A per-tensor float32 scale with a zero (or absent) INT8 zero point, else None."""
    scale = constants.get(node.input[1]) if len(node.input) > 1 else None
    if not isinstance(scale, np.ndarray) or scale.dtype != np.float32 or scale.size != 1:
        return None
    if len(node.input) > 2 and node.input[2]:
        zp = constants.get(node.input[2])
        if not isinstance(zp, np.ndarray) or zp.dtype != np.int8 or zp.any():
            return None
    return np.float32(scale.reshape(()))


def _weight(
    node: onnx.NodeProto, op: str, attrs: Mapping[str, Any], constants: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray] | None:
    """(INT8 weights, per-output-channel scales) of a constant weight DQ, else None: only a
    scale along the output channels can be pulled out of the int32 accumulation."""
    if len(node.input) < 2:
        return None
    w, scale = constants.get(node.input[0]), constants.get(node.input[1])
    zp = constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if not isinstance(w, np.ndarray) or w.dtype != np.int8 or not isinstance(scale, np.ndarray):
        return None
    if scale.dtype != np.float32 or (zp is not None and (zp.dtype != np.int8 or zp.any())):
        return None
    if scale.size == 1:
        return w, scale.reshape(1)
    axis = int(attrs.get("axis", 1))
    axis = axis + w.ndim if axis < 0 else axis
    if op == "Conv":
        out_axis = 0
    elif op == "Gemm":
        out_axis = 0 if int(attrs.get("transB", 0)) else 1
    else:
        out_axis = w.ndim - 1
    if w.ndim < 2 or axis != out_axis or scale.ndim != 1 or scale.shape[0] != w.shape[axis]:
        return None
    return w, scale


def find_fusion(
    node: onnx.NodeProto,
    producers: Mapping[str, onnx.NodeProto],
    consumers: Mapping[str, list[onnx.NodeProto]],
    constants: Mapping[str, Any],
    graph_outputs: set[str],
) -> Fusion | None:
    """The fusion of ``node`` when it reads a DQ'd activation and DQ'd constant weights."""
    if node.op_type not in kernels.AUTOTUNED_OPS or len(node.input) < 2 or node.domain:
        return None
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Gemm" and (
        int(attrs.get("transA", 0)) or float(attrs.get("alpha", 1.0)) != 1.0
    ):
        return None
    if node.op_type == "Gemm" and len(node.input) > 2 and float(attrs.get("beta", 1.0)) != 1.0:
        return None
    x_dq, w_dq = producers.get(node.input[0]), producers.get(node.input[1])
    if x_dq is None or w_dq is None:
        return None
    if x_dq.op_type != "DequantizeLinear" or w_dq.op_type != "DequantizeLinear":
        return None
    x_scale = _scalar_scale(x_dq, constants)
    w_attrs = {a.name: onnx.helper.get_attribute_value(a) for a in w_dq.attribute}
    weight = _weight(w_dq, node.op_type, {**w_attrs, "transB": attrs.get("transB", 0)}, constants)
    if x_scale is None or weight is None:
        return None
    if len(node.input) > 2 and node.input[2]:
        bias = constants.get(node.input[2])
        if not isinstance(bias, np.ndarray) or bias.dtype != np.float32:
            return None
    y_scale = _output_q(node, consumers, constants, graph_outputs)
    return Fusion(x_scale, weight[0], weight[1], y_scale, x_dq.input[0])


def _output_q(
    node: onnx.NodeProto,
    consumers: Mapping[str, list[onnx.NodeProto]],
    constants: Mapping[str, Any],
    graph_outputs: set[str],
) -> np.float32 | None:
    """The scale of the Q the layer's output reaches through pass-through ops, if any."""
    name = node.output[0]
    while True:
        users = consumers.get(name, [])
        if name in graph_outputs or len(users) != 1:
            return None
        user = users[0]
        if user.op_type == "QuantizeLinear" and user.input[0] == name:
            return _scalar_scale(user, constants)
        if user.op_type not in PASS_THROUGH or user.input[0] != name:
            return None
        name = user.output[0]


# -- the candidates ---------------------------------------------------------------------------
_REQUANT = (
    ("fscale", "rne", "f32"),
    ("fscale", "rne", "f16"),
    ("fscale", "rna", "f16"),
    ("fxmul", "rna", "f32"),
)
_DEQUANT = (("deq", "", "f32"), ("deq", "", "f16"), ("ibias", "", "f32"))
_PREFIX = {"MatMul": "ref_matmul", "Gemm": "ref_gemm", "Conv": "ref_conv"}


def _name(op: str, requant: str, rounding: str, epilogue: str) -> str:
    parts = [_PREFIX[op], "int8_i32acc", requant, rounding, f"{epilogue}epi"]
    return "_".join(p for p in parts if p)


SPECS: list[kernels.KernelSpec] = [
    kernels.KernelSpec(_name(op, r, m, e), op, "i8", "int8", requant=r, rounding=m, epilogue=e)
    for op in kernels.AUTOTUNED_OPS
    for r, m, e in _REQUANT + _DEQUANT
]

BY_NAME: dict[str, kernels.KernelSpec] = {s.name: s for s in SPECS}


def candidates(op: str, fusion: Fusion, has_bias: bool) -> list[kernels.KernelSpec]:
    """A requantizing layer's four kernels, or a float-output layer's two (three with a
    bias: folding it into the accumulator is only a different kernel when there is one)."""
    wanted = ("fscale", "fxmul") if fusion.y_scale is not None else ("deq", "ibias")
    return [
        s
        for s in SPECS
        if s.op == op and s.requant in wanted and (s.requant != "ibias" or has_bias)
    ]


# -- execution --------------------------------------------------------------------------------
def accumulate(op: str, x: np.ndarray, w: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    """The exact int32 accumulation of INT8 values (as float64 integers: every partial sum
    of +-127 x +-127 products is exact in float64, so BLAS's order cannot change it)."""
    if op == "Conv":
        return _conv_integer_gemm(x, w, attrs)
    if op == "Gemm":
        return np.matmul(x, w.T if int(attrs.get("transB", 0)) else w)
    return np.matmul(x, w)


def _conv_integer_gemm(x: np.ndarray, w: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    """A Conv without bias in ``x``'s dtype by one GEMM over the im2col matrix: for INT8
    values in float64 every sum is exact, so this is the int32 accumulation."""
    params = conv_params(x, w, attrs)
    if params is None:
        raise ValueError("unsupported Conv configuration")
    group, m_out = params["group"], w.shape[0]
    cols = columns(padded(x, params), params)
    result = np.matmul(w.reshape(group, m_out // group, -1), cols)
    return result.reshape(x.shape[0], m_out, *params["out"])


def _round(v: np.ndarray, rounding: str) -> np.ndarray:
    if rounding == "rna":
        return np.sign(v) * np.floor(np.abs(v) + 0.5)
    return np.rint(v)


def _channel_shape(op: str, ndim: int) -> tuple[int, ...]:
    """How a per-output-channel vector broadcasts against the layer's output."""
    if op == "Conv":
        return (1, -1) + (1,) * (ndim - 2)
    return (1,) * (ndim - 1) + (-1,)


def _fixed_point(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``m = M0 * 2**-(31 + shift)`` with ``M0`` in [2**30, 2**31): Q31 multiplier + shift."""
    frac, exp = np.frexp(m.astype(np.float64))
    m0 = np.rint(frac * 2.0**31).astype(np.int64)
    carry = m0 == 2**31
    m0 = np.where(carry, 2**30, m0)
    exp = np.where(carry, exp + 1, exp)
    return m0, (31 - exp).astype(np.int64)


def execute(
    spec: kernels.KernelSpec,
    fusion: Fusion,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any],
) -> np.ndarray:
    """Run the fused layer; the result is float32, as the graph's tensor after the layer."""
    x = np.rint(np.asarray(inputs[0], np.float32) / fusion.x_scale).astype(np.float64)
    acc = accumulate(spec.op, x, fusion.w_int8.astype(np.float64), attrs)
    bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    shape = _channel_shape(spec.op, acc.ndim)
    s_in = (fusion.x_scale * fusion.w_scale).astype(np.float32).reshape(shape)
    b = None if bias is None else np.asarray(bias, np.float32).reshape(shape)
    if spec.requant == "ibias":
        acc = acc + (0.0 if b is None else np.rint(b / s_in).astype(np.float64))
        return (acc.astype(np.float32) * s_in).astype(np.float32)
    if spec.requant == "deq":
        low = np.float16 if spec.epilogue == "f16" else np.float32
        y = (acc.astype(np.float32) * s_in).astype(low)
        if b is not None:
            y = (y + b.astype(low)).astype(low)
        return y.astype(np.float32)
    y_scale = fusion.y_scale
    assert y_scale is not None
    if spec.requant == "fxmul":
        m0, shift = _fixed_point(s_in.astype(np.float64) / np.float64(y_scale))
        total = acc.astype(np.int64)
        if b is not None:
            total = total + np.rint(b / s_in).astype(np.int64)
        prod = total * m0
        half = np.left_shift(np.int64(1), shift - 1)
        q = np.sign(prod) * np.right_shift(np.abs(prod) + half, shift)
    else:
        low = np.float16 if spec.epilogue == "f16" else np.float32
        m = (s_in / y_scale).astype(np.float32)
        v = (acc.astype(np.float32) * m).astype(low)  # int32 -> FP32 first: no FP16 overflow
        if b is not None:
            v = (v + (b / y_scale).astype(low)).astype(low)
        q = _round(v.astype(np.float64), spec.rounding)
    q = np.clip(q, -128, 127).astype(np.float32)
    return (q * y_scale).astype(np.float32)


_INT8_FORMAT = "Row major Int8 format"  # TensorRT 8.x/10.x's name for a linear INT8 tensor


def inspector_tensors(
    spec: kernels.KernelSpec, fusion: Fusion, inputs: Sequence[Any], y: np.ndarray, y_name: str
) -> dict[str, Any]:
    """What the engine inspector shows of a fused INT8 layer, from what :func:`execute`
    does, as TensorRT shows its own (a convolution of the INT8 ResNet in NVIDIA's
    trt-engine-explorer examples: Int8 inputs, ``"Weights": {"Type": "Int8"}``,
    ``"Bias": {"Type": "Float"}``, an Int8 output, or FP32 where no Q follows).

    The input is the INT8 tensor the DQ reads (the kernel recovers exactly its values from
    the dequantized one), the weights are ``w_int8``, the bias FP32; the output is INT8
    for a requantizing kernel (it clips to -128..127; the graph holds ``q * y_scale``
    only so that the next Q returns ``q``) and FP32 for a ``deq``/``ibias`` one (an FP16
    epilogue rounds through FP16 and still writes FP32). The INT32 accumulation is in
    the kernel's name (``i32acc``), where TensorRT's names carry it too.
    """
    requantizes = spec.requant in ("fscale", "fxmul")
    x = np.asarray(inputs[0])
    bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    out: dict[str, Any] = {
        "Name": y_name,
        "Location": "Device",
        "Dimensions": [int(d) for d in y.shape],
        "Format/Datatype": _INT8_FORMAT if requantizes else "Row major linear FP32",
    }
    fields: dict[str, Any] = {
        "Inputs": [
            {
                "Name": fusion.x_int8,
                "Location": "Device",
                "Dimensions": [int(d) for d in x.shape],
                "Format/Datatype": _INT8_FORMAT,
            }
        ],
        "Outputs": [out],
        "Weights": {"Type": "Int8", "Count": int(fusion.w_int8.size)},
    }
    if bias is not None:
        fields["Bias"] = {"Type": "Float", "Count": int(np.asarray(bias).size)}
    return fields


def is_int8(spec: kernels.KernelSpec | None) -> bool:
    return spec is not None and spec.precision == "i8"
