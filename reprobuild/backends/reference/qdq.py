"""QuantizeLinear / DequantizeLinear in numpy, for every opset that defines them.

``onnx.reference`` (1.23) only implements them from opset 19, while an INT8 model made
for TensorRT is commonly opset 13 to 17; the arithmetic has not changed between those
opsets for INT8/UINT8 (per-tensor or per-axis; block quantization came in 21 and falls
back to ``onnx.reference``). Quantize divides in float32 and rounds half to even, as ONNX
Runtime and the ONNX specification do, then saturates to the zero point's type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

_RANGES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}


def _broadcast(param: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray | None:
    """A scale/zero point shaped to broadcast against ``x``: scalar, or 1-D along ``axis``."""
    if param.ndim == 0 or param.size == 1 and param.ndim <= 1:
        return param.reshape(())
    if param.ndim != 1 or x.ndim == 0:
        return None
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim or x.shape[axis] != param.shape[0]:
        return None
    shape = [1] * x.ndim
    shape[axis] = -1
    return param.reshape(shape)


def run_qdq(op: str, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray] | None:
    """The node's output, or None for what this path does not cover (onnx.reference runs it)."""
    if int(attrs.get("block_size", 0) or 0) or len(inputs) < 2:
        return None
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    if not all(isinstance(a, np.ndarray) for a in (x, scale)) or scale.dtype != np.float32:
        return None
    axis = int(attrs.get("axis", 1))
    s = _broadcast(scale, x, axis)
    if s is None:
        return None
    if op == "QuantizeLinear":
        out_type = np.dtype(np.uint8) if zp is None else zp.dtype
        if out_type not in _RANGES or x.dtype != np.float32 or int(attrs.get("saturate", 1)) != 1:
            return None
        z = np.zeros((), np.int32) if zp is None else _broadcast(zp.astype(np.int32), x, axis)
        if z is None:
            return None
        lo, hi = _RANGES[out_type]
        q = np.rint(x / s).astype(np.float64) + z  # float64: no overflow before saturating
        return [np.clip(q, lo, hi).astype(out_type)]
    if op == "DequantizeLinear":
        if x.dtype not in _RANGES and x.dtype != np.int32:
            return None
        z = np.zeros((), np.int32) if zp is None else _broadcast(zp.astype(np.int32), x, axis)
        if z is None:
            return None
        return [((x.astype(np.int32) - z).astype(np.float32) * s).astype(np.float32)]
    return None
