"""Numpy paths for the few non-autotuned ops that ``onnx.reference`` runs too slowly or wrongly.

Too slowly: ``onnx.reference`` loops over output pixels in Python for pooling, which costs
seconds per layer on ImageNet shapes (:mod:`.pools` computes the same results).

Wrongly (onnx 1.23), for opsets the model zoo still uses: BatchNormalization before opset 14
takes the schema's default ``momentum`` as a request for training mode and normalizes with
the batch's own statistics; Softmax/LogSoftmax/Hardmax before opset 13 reduce over one axis
instead of coercing the input to 2-D at ``axis``; Dropout 7-9 returns a bool mask where the
schema types it like the input; LRN sums squares for channel 0 only (its loop runs over the
batch dimension). These paths implement the opset's own semantics.

Each function returns None for a configuration it does not cover, and the caller then falls
back to ``onnx.reference``; tests compare the paths with ONNX Runtime and onnx.reference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reprobuild.backends.reference.avgpool import average_pool, global_average_pool
from reprobuild.backends.reference.elementwise import ELEMENTWISE_OPS, run_elementwise
from reprobuild.backends.reference.pools import max_pool
from reprobuild.backends.reference.qdq import run_qdq


def batch_norm(
    inputs: Sequence[Any], attrs: Mapping[str, Any], opset: int, n_outputs: int
) -> list[np.ndarray] | None:
    """Inference-mode BatchNormalization as a per-channel scale and shift, in float32."""
    if n_outputs != 1 or len(inputs) != 5 or any(not isinstance(a, np.ndarray) for a in inputs):
        return None
    if opset >= 14 and int(attrs.get("training_mode", 0)):
        return None
    if opset < 9 and int(attrs.get("spatial", 1)) != 1:
        return None
    x, scale, bias, mean, var = inputs
    if x.dtype not in (np.float32, np.float16) or x.ndim < 2:
        return None
    if any(a.shape != (x.shape[1],) for a in (scale, bias, mean, var)):
        return None
    eps = np.float32(attrs.get("epsilon", 1e-5))
    f32 = np.float32
    inv = scale.astype(f32) / np.sqrt(var.astype(f32) + eps)
    shift = bias.astype(f32) - mean.astype(f32) * inv
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    y = x.astype(f32, copy=False) * inv.reshape(shape) + shift.reshape(shape)
    return [y.astype(x.dtype, copy=False)]


def _coerced_softmax(op: str, x: np.ndarray, axis: int) -> np.ndarray:
    """Softmax family before opset 13: flatten to 2-D at ``axis``, reduce over dimension 1."""
    axis = axis + x.ndim if axis < 0 else axis
    rows = math.prod(x.shape[:axis])
    flat = x.reshape(rows, -1)
    if op == "Hardmax":
        out = np.zeros_like(flat)
        if flat.shape[1]:
            out[np.arange(rows), np.argmax(flat, axis=1)] = 1
        return out.reshape(x.shape)
    shifted = flat - flat.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    total = exp.sum(axis=1, keepdims=True)
    out = shifted - np.log(total) if op == "LogSoftmax" else exp / total
    return out.astype(x.dtype).reshape(x.shape)


def softmax_legacy(
    op: str, inputs: Sequence[Any], attrs: Mapping[str, Any], opset: int, n_outputs: int
) -> list[np.ndarray] | None:
    if opset >= 13 or n_outputs != 1 or len(inputs) != 1:
        return None
    x = inputs[0]
    if not isinstance(x, np.ndarray) or x.ndim == 0 or not np.issubdtype(x.dtype, np.floating):
        return None
    if x.size == 0:
        return [x.copy()]
    return [_coerced_softmax(op, x, int(attrs.get("axis", 1)))]


def dropout_inference(
    inputs: Sequence[Any], attrs: Mapping[str, Any], opset: int, n_outputs: int
) -> list[np.ndarray] | None:
    """Inference Dropout: identity, and an all-kept mask typed as the opset's schema says.
    The output is the input itself, not a copy: nothing writes into either (the engine's
    program lets a layer overwrite only the outputs of :data:`.program.FRESH_OPS`, and
    never an input a layer that may return a view reads)."""
    x = inputs[0] if inputs else None
    if not isinstance(x, np.ndarray):
        return None
    if opset >= 12 and len(inputs) > 2 and inputs[2] is not None and bool(np.asarray(inputs[2])):
        return None  # training_mode = true: let onnx.reference apply the random mask
    if opset < 7 and int(attrs.get("is_test", 0)) == 0:
        return None
    outputs = [x]
    if n_outputs > 1:
        outputs.append(np.ones(x.shape, dtype=x.dtype if opset < 10 else np.bool_))
    return outputs


def lrn(inputs: Sequence[Any], attrs: Mapping[str, Any], n_outputs: int) -> list[np.ndarray] | None:
    """LRN across channels: ``x / (bias + alpha / size * sum of squares) ** beta``."""
    x = inputs[0] if len(inputs) == 1 else None
    if n_outputs != 1 or not isinstance(x, np.ndarray) or x.ndim < 3:
        return None
    if x.dtype not in (np.float32, np.float16):
        return None
    size = int(attrs["size"])
    alpha = float(attrs.get("alpha", 1e-4))
    beta = float(attrs.get("beta", 0.75))
    bias = float(attrs.get("bias", 1.0))
    below, above = (size - 1) // 2, -(-(size - 1) // 2)
    xf = x.astype(np.float32, copy=False)
    squares = xf * xf
    channels = x.shape[1]
    # the window's squares added in channel order; the zero channels outside the tensor are
    # skipped (adding +0.0 to a sum of squares changes no bit)
    total = np.zeros_like(squares)
    for shift in range(-below, above + 1):
        lo, hi = max(0, -shift), min(channels, channels - shift)
        if lo < hi:
            total[:, lo:hi] += squares[:, lo + shift : hi + shift]
    # x / (bias + alpha / size * total) ** beta, one operation at a time in place
    np.multiply(total, np.float32(alpha / size), out=total)
    np.add(total, np.float32(bias), out=total)
    np.power(total, np.float32(beta), out=total)
    np.divide(xf, total, out=total)
    return [total.astype(x.dtype, copy=False)]


def run_fast(
    op: str,
    domain: str,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any],
    n_outputs: int,
    opset: int,
) -> list[np.ndarray] | None:
    """The numpy path's outputs, or None when onnx.reference must run the node."""
    if domain not in ("", "ai.onnx"):
        return None
    if op == "BatchNormalization":
        return batch_norm(inputs, attrs, opset, n_outputs)
    if op in ("Softmax", "LogSoftmax", "Hardmax"):
        return softmax_legacy(op, inputs, attrs, opset, n_outputs)
    if op == "Dropout":
        return dropout_inference(inputs, attrs, opset, n_outputs)
    if op == "LRN":
        return lrn(inputs, attrs, n_outputs)
    if op in ("QuantizeLinear", "DequantizeLinear") and n_outputs == 1:
        return run_qdq(op, inputs, attrs)
    if n_outputs == 1 and op in ELEMENTWISE_OPS:
        result = run_elementwise(op, inputs, attrs, opset)
        return None if result is None else [result]
    pool = {
        "MaxPool": max_pool,
        "AveragePool": average_pool,
        "GlobalAveragePool": global_average_pool,
    }.get(op)
    if pool is None or n_outputs != 1 or len(inputs) != 1:
        return None
    x = inputs[0]
    if not isinstance(x, np.ndarray) or x.ndim < 3:
        return None
    result = pool(x, attrs)
    return None if result is None else [result]
