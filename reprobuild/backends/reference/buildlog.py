"""The reference builder's log: TensorRT 10.8+ verbose lines, tagged ``[REF]``.

The log is the contract the workflow's parser reads on both backends, so the reference
builder prints exactly the editable-timing-cache format TensorRT documents (autotuning
header with the key, the sorted tactic table, the selected tactic, the cache write) and the
engine-inspector tensor names TensorRT uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from reprobuild.backends.base import LogSink
from reprobuild.backends.reference import kernels
from reprobuild.logs.lines import escape_name

LOG_TAG = "REF"

_TRT_TYPE_NAMES = {
    "float32": ("Float", "FP32"),
    "float16": ("Half", "FP16"),
    "bfloat16": ("BFloat16", "BF16"),
    "float64": ("Double", "FP64"),
    "int8": ("Int8", "Int8"),
    "uint8": ("UInt8", "UInt8"),
    "int32": ("Int32", "Int32"),
    "int64": ("Int64", "Int64"),
    "bool": ("Bool", "Bool"),
}


@dataclass
class BuildLog:
    """Writes TensorRT-style lines ``[MM/DD/YYYY-HH:MM:SS] [V] [REF] <message>`` to the sink."""

    sink: LogSink
    lines: int = 0

    def _emit(self, severity: str, message: str) -> None:
        stamp = datetime.now().strftime("%m/%d/%Y-%H:%M:%S")
        self.sink(f"[{stamp}] [{severity}] [{LOG_TAG}] {message}")
        self.lines += 1

    def verbose(self, message: str) -> None:
        self._emit("V", message)

    def info(self, message: str) -> None:
        self._emit("I", message)

    def warning(self, message: str) -> None:
        self._emit("W", message)


def trt_type_name(dtype: np.dtype) -> str:
    return _TRT_TYPE_NAMES.get(str(dtype), (str(dtype), str(dtype)))[0]


def tensor_format(value: Any, channels_last: bool = False) -> str:
    """TensorRT's ``Float(150528,50176,224,1)`` notation: type and strides, linear (NCHW) or,
    with ``channels_last``, TensorRT's kHWC layout (``Float(150528,1,672,3)``: channels
    innermost, strides still listed in N, C, H, W order)."""
    arr = np.asarray(value)
    order = list(range(arr.ndim))
    if channels_last and arr.ndim >= 3:
        order = [0, *range(2, arr.ndim), 1]  # memory order, outermost first
    strides = [1] * arr.ndim
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= arr.shape[axis]
    return f"{trt_type_name(arr.dtype)}({','.join(str(s) for s in strides)})"


def tensor_info(name: str, value: Any) -> dict[str, Any]:
    arr = np.asarray(value) if value is not None else None
    if arr is None:
        return {"Name": name, "Location": "Device", "Dimensions": [], "Format/Datatype": "None"}
    precision = _TRT_TYPE_NAMES.get(str(arr.dtype), (str(arr.dtype), str(arr.dtype)))[1]
    return {
        "Name": name,
        "Location": "Device",
        "Dimensions": [int(d) for d in arr.shape],
        "Format/Datatype": f"Row major linear {precision}",
    }


def autotune_lines(
    layer: str,
    key: str,
    rows: Sequence[tuple[int, float, kernels.KernelSpec]],
    selected: tuple[float, kernels.KernelSpec] | None = None,
) -> list[str]:
    """The TensorRT 10.8+ editable-cache block for one layer; rows sorted by cost. The
    selected tactic is the fastest (TensorRT's choice) unless ``selected`` (cost, kernel)
    names the tie rule's (:mod:`reprobuild.tiebreak`)."""
    fastest = rows[0][1]
    layer = escape_name(layer)
    lines = [
        f"Autotuning op {layer}(key: {key}): [ONNX Layer: {layer}]",
        "Sorted table of all evaluated tactics:",
        "tactic_id, cost(in ms), cost/fastest_cost, prediction_correlation, kernel_name, "
        "tactic_hash, tunable_parameter",
    ]
    for tactic_id, cost, spec in rows:
        ratio = cost / fastest if fastest > 0 else 1.0
        lines.append(
            f"{tactic_id:4d}, {cost:.7f}, {ratio:.5f}, {1.0:.5f}, {spec.name}, "
            f"0x{spec.tactic_hash:x},"
        )
    cost, best = selected if selected is not None else (fastest, rows[0][2])
    lines.append(
        f"The selected tactic is (tactic hash, cost(in ms)):0x{best.tactic_hash:x}, {cost:.6f}"
    )
    lines.append(f"Writing the best tactic (0x{best.tactic_hash:x}) to cache")
    return lines


# -- keys -------------------------------------------------------------------------------------
