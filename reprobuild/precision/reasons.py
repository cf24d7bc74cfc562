"""What decided a node, as the few words the plan records beside its rule.

Why words in the lock: the rules read measurements (output magnitudes on the calibration
inputs, reduction depths on their shapes) that no one can see again without re-running the
model. ``reprobuild show --precision`` and ``reprobuild diff`` print these words (the lock
side, :mod:`reprobuild.lock.planwords`, turns them into sentences) so a reviewer reads
"|output| max 1.3e3 > 512 on 1 calibration sample" instead of "magnitude".
"""

from __future__ import annotations

import math

from reprobuild.precision.analysis import NodeInfo
from reprobuild.precision.ops import (
    ALWAYS_FP32_OPS,
    LOW_TYPES,
    TENSOR_STR,
    UNSUPPORTED_OPS,
)
from reprobuild.precision.opset import AUTO_OPSET_MAX, first_opset_with

_KINDS = {
    "Shape": "its result is a shape",
    "Size": "its result is a size",
    "Cast": "it converts types itself",
    "CastLike": "it converts types itself",
    "EyeLike": "its output type is an attribute",
    "ArgMax": "it outputs indices, which low-precision ties would change",
    "ArgMin": "it outputs indices, which low-precision ties would change",
    "TopK": "it outputs indices, which low-precision ties would change",
    "NonZero": "it outputs indices, which low-precision ties would change",
    "NonMaxSuppression": "it outputs indices, which low-precision ties would change",
    "QuantizeLinear": "its scales belong to the quantization scheme",
    "DequantizeLinear": "its scales belong to the quantization scheme",
    "DynamicQuantizeLinear": "its scales belong to the quantization scheme",
    "If": "it is control flow (its bodies are separate graphs)",
    "Loop": "it is control flow (its bodies are separate graphs)",
    "Scan": "it is control flow (its bodies are separate graphs)",
}


def num(value: float, limit: float | None = None) -> str:
    """``value`` short (``1.3e3``), with as many digits as it takes to stay on its side of
    ``limit`` (513 against 512 reads ``513``, never ``5.1e2``)."""
    if not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    for digits in range(2, 10):
        text = f"{value:.{digits}g}"
        if limit is None or (float(text) > limit) == (value > limit):
            break
    mant, _, exp = text.partition("e")
    return mant + ("e" + str(int(exp)) if exp else "")


def samples_text(n: int) -> str:
    return f"{n} calibration sample{'' if n == 1 else 's'}"


def unsupported(info: NodeInfo, mode: str, opset: int) -> str:
    """Why a float32 node cannot run in ``mode`` in this model."""
    op = info.node.op_type
    if not info.known_op:
        domain = info.node.domain or "ai.onnx"
        return f"{domain} op {op} has no ONNX schema (custom op or local function)"
    if info.has_subgraph:
        return f"{op} carries a subgraph"
    if op in _KINDS:
        return f"{op} is never converted: {_KINDS[op]}"
    if op in UNSUPPORTED_OPS:
        return f"{op} is never converted: its output type is an attribute"
    type_name = TENSOR_STR[LOW_TYPES[mode]][7:-1]
    text = f"ONNX {op} has no {type_name} form at opset {opset}"
    later = first_opset_with(op, "", TENSOR_STR[LOW_TYPES[mode]], opset)
    if later is None:
        return text
    # at most AUTO_OPSET_MAX, the model was not converted: --opset pinned it, or onnx could not
    how = "" if later <= AUTO_OPSET_MAX else f"; pass --opset {later}"
    return f"{text} (opset {later} adds one{how})"


def always_fp32(op: str) -> str:
    return f"{op} is on the always-FP32 list ({', '.join(sorted(ALWAYS_FP32_OPS))})"
