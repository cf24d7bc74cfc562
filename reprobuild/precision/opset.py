"""Older models for INT8: ``onnx.version_converter`` to opset 13 before calibrating.

Per-channel QuantizeLinear/DequantizeLinear (``axis``) needs ONNX opset 13. The model zoo's
files (and many old exports) are opset 9, so an INT8 build converts them first, both when it
calibrates and before every locked build applies the plan: the converter is a pure function
of the model for a given onnx version, so the converted graph, and the plan's node names on
it, are the same each time. The lock records the conversion (``quantization.opset``: from,
to, and the onnx version that did it); the lock's model hash stays the original file's.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from reprobuild.errors import UsageError
from reprobuild.lock.qplan import OpsetConversion

INT8_OPSET = 13  # per-channel QuantizeLinear/DequantizeLinear (axis)


def model_opset(model: onnx.ModelProto) -> int:
    """The default-domain opset the model imports (0 if it imports none)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def convert_for_int8(
    model: onnx.ModelProto, path: str | Path
) -> tuple[onnx.ModelProto, OpsetConversion | None]:
    """``model`` itself at opset >= 13; else its conversion to 13, and what was done."""
    source = model_opset(model)
    if source >= INT8_OPSET:
        return model, None
    from onnx import version_converter

    try:
        converted = version_converter.convert_version(model, INT8_OPSET)
    except Exception as err:  # noqa: BLE001 - the converter raises several types
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise UsageError(
            f"{path}: INT8 needs ONNX opset >= {INT8_OPSET} and onnx.version_converter cannot "
            f"convert this opset {source} model ({reason}); convert it by hand (re-export "
            f"with opset {INT8_OPSET} or newer) and build that file"
        ) from None
    return converted, OpsetConversion(source, INT8_OPSET, onnx.__version__)


def conversion_note(path: str | Path, conv: OpsetConversion) -> str:
    """What the user is told on every INT8 build of an old-opset model."""
    return (
        f"{Path(path).name}: ONNX opset {conv.source} converted to {conv.target} with "
        f"onnx.version_converter (onnx {onnx.__version__}; deterministic) for per-channel "
        "INT8 Q/DQ; the lock records it"
    )
