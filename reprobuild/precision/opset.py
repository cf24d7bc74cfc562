"""Older models: ``onnx.version_converter`` to the opset a plan needs (INT8: 13; BF16 Conv: 22).

Per-channel QuantizeLinear/DequantizeLinear (``axis``) needs ONNX opset 13. The model zoo's
files (and many old exports) are opset 9, so an INT8 build converts them first, both when it
calibrates and before every locked build applies the plan: the converter is a pure function
of the model for a given onnx version, so the converted graph, and the plan's node names on
it, are the same each time. The lock records the conversion (``quantization.opset``: from,
to, and the onnx version that did it); the lock's model hash stays the original file's.

FP16/BF16 plans convert the same way when the precision needs a newer opset: ONNX has no
bfloat16 Conv, ConvTranspose or pooling before opset 22 (and no Cast to bfloat16 before
13), so a BF16 plan on an opset-17 CNN would leave every Conv in FP32. The plan records the
conversion (``opset``: from, to, onnx, and the reason) and a locked build converts again.
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


# ------------------------------------------------------------------ fp16/bf16 conversions

AUTO_OPSET_MAX = 22
"""Automatic conversion for fp16/bf16 goes no further: ModelOpt AutoCast's BF16 target, the
opset where ONNX gives Conv, ConvTranspose, the pools and most math ops a bfloat16 form.
``--opset N`` converts to any opset onnx's version converter reaches."""

_FIRST: dict[tuple[str, str, str, int], int | None] = {}


def first_opset_with(op: str, domain: str, type_str: str, after: int) -> int | None:
    """The first opset after ``after`` (up to onnx's newest) whose schema of ``op`` lets a
    tensor that may be ``tensor(float)`` be ``type_str``; None when none does."""
    key = (op, domain, type_str, after)
    if key not in _FIRST:
        found = None
        newest = onnx.defs.onnx_opset_version() if domain == "" else after
        for version in range(after + 1, newest + 1):
            try:
                schema = onnx.defs.get_schema(op, version, domain)
            except onnx.defs.SchemaError:
                break
            if any(
                type_str in tc.allowed_type_strs and "tensor(float)" in tc.allowed_type_strs
                for tc in schema.type_constraints
            ):
                found = version
                break
        _FIRST[key] = found
    return _FIRST[key]


def _needed(model: onnx.ModelProto, mode: str) -> dict[str, int]:
    """Op type -> the opset that gives it a ``mode`` form, for every float32 node that has
    none at the model's opset and gains one by :data:`AUTO_OPSET_MAX`."""
    from reprobuild.precision.analysis import analyze
    from reprobuild.precision.ops import (
        ALWAYS_FP32_OPS,
        FLOAT,
        LOW_TYPES,
        TENSOR_STR,
        UNSUPPORTED_OPS,
    )

    low = LOW_TYPES[mode]
    an = analyze(model)
    source = an.opsets.get("", 0)
    out: dict[str, int] = {}
    for info in an.infos:
        op = info.node.op_type
        if (
            not info.known_op
            or info.has_subgraph
            or op in UNSUPPORTED_OPS
            or op in ALWAYS_FP32_OPS
            or FLOAT not in info.float_types()
            or info.convertible(low)
            or info.node.domain not in ("", "ai.onnx")
        ):
            continue
        first = first_opset_with(op, "", TENSOR_STR[low], source)
        if first is not None and first <= AUTO_OPSET_MAX:
            out[op] = first
    return out


def convert_for_float(
    model: onnx.ModelProto, path: str | Path, mode: str, requested: int | None
) -> tuple[onnx.ModelProto, OpsetConversion | None, list[str]]:
    """``model`` at the opset an fp16/bf16 plan is decided on, what was converted, and notes.

    With ``--opset N`` (``requested``): opset N (never older than the model's; N equal to
    the model's opset keeps it and turns the automatic conversion off). Without: converted
    only when the precision needs it: to the opset that gives a float32 node's op a
    ``mode`` form it lacks now (BF16 Conv: 22), or that has a Cast to ``mode`` (BF16: 13).
    An automatic conversion that onnx cannot make leaves the model as it is, with a note.
    """
    from reprobuild.precision.ops import MIN_OPSET

    source = model_opset(model)
    if requested is not None:
        if requested < source:
            raise UsageError(
                f"--opset {requested}: the model is already opset {source}; reprobuild only "
                f"converts forward (pass --opset {source} or newer)"
            )
        if requested == source:
            return model, None, []
        target, reason = requested, f"--opset {requested}"
    else:
        need = _needed(model, mode)
        target = max([*need.values(), MIN_OPSET[mode] if source < MIN_OPSET[mode] else 0])
        if target <= source:
            return model, None, []
        top = sorted(op for op in need if need[op] == target)
        rest = sorted((need[op], op) for op in need if need[op] < target)
        reason = (
            f"{mode} {', '.join(top)} need{'s' if len(top) == 1 else ''} opset {target}"
            if top
            else f"a Cast to {mode} needs opset {target}"
        )
        if rest:
            reason += f" (also {', '.join(f'{op} {v}' for v, op in rest)})"
    from onnx import version_converter

    try:
        converted = version_converter.convert_version(model, target)
    except Exception as err:  # noqa: BLE001 - the converter raises several types
        why = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        if requested is not None:
            raise UsageError(
                f"{path}: onnx.version_converter cannot convert this opset {source} model to "
                f"opset {target} ({why}); re-export it at opset {target}"
            ) from None
        note = (
            f"{Path(path).name}: left at opset {source}: {reason}, but onnx.version_converter "
            f"cannot convert it ({why})"
        )
        return model, None, [note]
    conv = OpsetConversion(source, target, onnx.__version__, reason)
    return converted, conv, [float_conversion_note(path, conv)]


def float_conversion_note(path: str | Path, conv: OpsetConversion) -> str:
    """What the user is told on every fp16/bf16 build of a converted model."""
    return (
        f"{Path(path).name}: ONNX opset {conv.source} converted to {conv.target} with "
        f"onnx.version_converter (onnx {onnx.__version__}; deterministic): {conv.reason}; "
        "the lock records it"
    )


def reconvert(
    model: onnx.ModelProto, path: str | Path, conv: OpsetConversion | None, lock_path: str | Path
) -> tuple[onnx.ModelProto, list[str]]:
    """A locked fp16/bf16 plan's model: converted again as recorded (or left as it is)."""
    source = model_opset(model)
    if conv is None:
        return model, []
    if conv.source != source:
        raise UsageError(
            f"{lock_path}: the precision plan was recorded on an opset {conv.source} model "
            f"converted to {conv.target}, but the model is opset {source}; re-record the lock "
            "for this model"
        )
    from onnx import version_converter

    try:
        converted = version_converter.convert_version(model, conv.target)
    except Exception as err:  # noqa: BLE001 - the converter raises several types
        why = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise UsageError(
            f"{path}: onnx.version_converter cannot convert the model to opset {conv.target} "
            f"as the lock recorded ({why}); re-record the lock"
        ) from None
    notes = [float_conversion_note(path, conv)]
    if conv.onnx != onnx.__version__:
        notes.append(
            f"the lock's opset conversion was made with onnx {conv.onnx}, this one with onnx "
            f"{onnx.__version__}; the plan's node checks hold it to the lock"
        )
    return converted, notes
