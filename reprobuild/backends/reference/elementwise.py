"""Numpy paths for elementwise layers and Concat, optionally writing into a dying input.

Why: ``onnx.reference`` runs these ops with the same numpy calls but with per-call checks
and logging, always into a new tensor, and importing it costs more than a small model's
whole build (its op table imports every op). Each function computes exactly what
``onnx.reference`` computes (the same numpy ufunc on the same operands, so the same bits;
one exception: :func:`total` of negative zeros gives ``-0.0`` where ``onnx.reference``'s
``0 + a + b`` gives ``+0.0``), or returns None for inputs it does not cover.

``donate[i]`` says input ``i`` dies at this layer and nothing else can see its buffer
(:mod:`.program` decides); the result is then written into it when shape and dtype allow.
Without ``donate`` (the builder, folding) nothing is overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

BINARY: dict[str, Any] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
}
ELEMENTWISE_OPS = frozenset({"Relu", "Sum", "Concat", *BINARY})
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16))


def run_elementwise(
    op: str, inputs: Sequence[Any], attrs: Mapping[str, Any], opset: int
) -> np.ndarray | None:
    """The numpy result for a one-output elementwise/Concat layer, or None (not covered)."""
    if op == "Relu":
        return relu(inputs)
    if op in BINARY and opset >= 7:
        return binary(op, inputs)
    if op == "Sum" and opset >= 8:
        return total(inputs)
    if op == "Concat" and opset >= 4:
        return concat(inputs, attrs)
    return None


def float_arrays(inputs: Sequence[Any]) -> np.dtype | None:
    """The one float dtype every input has, or None (then the generic path runs)."""
    if not inputs or any(type(a) is not np.ndarray for a in inputs):
        return None
    dtype = inputs[0].dtype
    if dtype not in _FLOATS or any(a.dtype != dtype for a in inputs):
        return None
    return dtype


def relu(inputs: Sequence[Any], donate: Sequence[bool] = ()) -> np.ndarray | None:
    """``max(x, 0)``: onnx.reference's ``np.maximum(x, 0)``."""
    if len(inputs) != 1 or float_arrays(inputs) is None:
        return None
    x = inputs[0]
    return np.maximum(x, 0, out=x if donate and donate[0] else None)


def _target(inputs: Sequence[np.ndarray], donate: Sequence[bool]) -> np.ndarray | None:
    """A dying input with the output's shape, to write the result into (None: allocate)."""
    if not any(donate):
        return None
    shape = np.broadcast_shapes(*(a.shape for a in inputs))
    for a, mine in zip(inputs, donate, strict=False):
        if mine and a.shape == shape and a.flags.c_contiguous:
            return a
    return None


def binary(op: str, inputs: Sequence[Any], donate: Sequence[bool] = ()) -> np.ndarray | None:
    """Add/Sub/Mul/Div of two float tensors with numpy broadcasting (opset >= 7)."""
    if len(inputs) != 2 or float_arrays(inputs) is None:
        return None
    a, b = inputs
    return BINARY[op](a, b, out=_target(inputs, donate))


def total(inputs: Sequence[Any], donate: Sequence[bool] = ()) -> np.ndarray | None:
    """Left to right, as ``onnx.reference``'s ``sum(args)`` (module docstring: zero sign)."""
    if float_arrays(inputs) is None:
        return None
    if len(inputs) == 1:
        return inputs[0].copy()
    # every partial sum has the broadcast shape of the inputs summed so far: only write into
    # a buffer of the final shape when the first two inputs already have it
    out = _target(inputs[:2], donate[:2])
    final = np.broadcast_shapes(*(a.shape for a in inputs))
    if out is not None and out.shape != final:
        out = None
    acc = np.add(inputs[0], inputs[1], out=out)
    for x in inputs[2:]:
        acc = np.add(acc, x, out=acc if acc.shape == final else None)
    return acc


def concat(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray | None:
    """One new tensor, as onnx.reference's ``np.concatenate`` (any dtype, rank >= 1)."""
    if not inputs or any(type(a) is not np.ndarray for a in inputs):
        return None
    if len({a.dtype for a in inputs}) != 1 or inputs[0].ndim == 0:
        return None
    return np.concatenate(inputs, axis=int(attrs.get("axis", 1)))
