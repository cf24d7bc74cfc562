"""Engine layer information: which kernel each engine layer ended up with.

The builder log says what was *timed*; the engine inspector (``IEngineInspector`` JSON, or
``trtexec --exportLayerInfo``) says what the finished engine *runs*. ``verify``, ``show`` and
the kernel cross-check after a pinned build compare the two, so this is the one reader of
every shape the inspector has produced:

- 8.x / 10.x without detailed verbosity: ``{"Layers": ["name", ...], "Bindings": [...]}``
- 8.x detailed: layer objects with ``TacticValue`` on every layer, no ``Metadata``
- 10.x detailed: ``TacticName``/``TacticValue`` (no ``TacticValue`` on Myelin sub-layers),
  ``StreamId``, ``Metadata`` (ONNX layers joined by the control byte ``\\x1e``)
- 11.x: ``Bindings`` renamed ``I/O Tensors``; tensor ``Format/Datatype`` split into
  ``Format`` and ``Datatype``

Files a user hands over are read strictly (a malformed layer is an error naming it); what
a build's own inspector returned is read with ``strict=False``, which skips entries that
are not layer objects, because a kernel check should report kernels, not JSON details.
Logs that print the layers as text go to ``layertext``. The values (``EngineLayer``,
``LayerInfo``, ...) live in ``layermodel`` and are re-exported here, where callers read
layer information.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reprobuild.errors import LogParseError
from reprobuild.logs.layermodel import (
    COMPUTE_PRECISIONS,
    EngineLayer,
    LayerInfo,
    TensorDesc,
    is_reformat,
    kernels_by_layer,
    precision_of,
)
from reprobuild.logs.layertext import read_layer_lines
from reprobuild.logs.values import split_onnx_layers, tactic_to_int

__all__ = [
    "COMPUTE_PRECISIONS",
    "EngineLayer",
    "LayerInfo",
    "TensorDesc",
    "is_reformat",
    "kernels_by_layer",
    "load_layer_info",
    "looks_like_json",
    "parse_layer_info",
    "precision_of",
]


def _str_or_none(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _tensor(obj: Any) -> TensorDesc | None:
    if isinstance(obj, str):
        return TensorDesc(name=obj)
    if not isinstance(obj, Mapping):
        return None
    dims_raw = obj.get("Dimensions")
    dims: tuple[int, ...] | None = None
    if isinstance(dims_raw, list) and all(
        isinstance(d, int) and not isinstance(d, bool) for d in dims_raw
    ):
        dims = tuple(dims_raw)
    # TensorRT's inspector writes "Datatype"; its API spells the type "DataType"
    # (trt.DataType), and tools that re-export layer information may follow the API's
    # spelling: read both, so a precision check never silently sees no tensor types.
    combined = next((k for k in ("Format/Datatype", "Format/DataType") if k in obj), None)
    if combined is not None:
        fmt, dtype = _str_or_none(obj.get(combined)), None
    else:
        raw = obj.get("Datatype", obj.get("DataType"))
        fmt, dtype = _str_or_none(obj.get("Format")), _str_or_none(raw)
    return TensorDesc(name=str(obj.get("Name", "")), dimensions=dims, format=fmt, datatype=dtype)


def _tensors(value: Any) -> tuple[TensorDesc, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(t for t in (_tensor(v) for v in value) if t is not None)


def _layer(obj: Any, index: int, where: str, strict: bool) -> EngineLayer | None:
    if isinstance(obj, str):
        return EngineLayer(name=obj)
    if not strict:
        if not isinstance(obj, Mapping):
            return None
        if not isinstance(obj.get("Name"), str):
            obj = {**obj, "Name": str(obj.get("Name", ""))}
    if not isinstance(obj, Mapping) or not isinstance(obj.get("Name"), str):
        raise LogParseError(
            f"{where}: layer #{index} is neither a name nor an object with a 'Name'; "
            "pass the JSON written by trtexec --exportLayerInfo or the engine inspector"
        )
    md = obj.get("Metadata")
    return EngineLayer(
        name=obj["Name"],
        layer_type=_str_or_none(obj.get("LayerType")),
        tactic_name=_str_or_none(obj.get("TacticName")),
        tactic_value=tactic_to_int(obj.get("TacticValue")),
        metadata=split_onnx_layers(md) if isinstance(md, str) else (),
        inputs=_tensors(obj.get("Inputs")),
        outputs=_tensors(obj.get("Outputs")),
        weights=_weights_type(obj),
        origin=_str_or_none(obj.get("Origin")),
    )


def _weights_type(obj: Mapping[str, Any]) -> str | None:
    """The weights' type: ``"Weights": {"Type": "Int8", "Count": ..}`` on a convolution,
    ``ConvWeights`` on a fused ConvActPool (8.x detailed JSON; both in the INT8 ResNet of
    NVIDIA's trt-engine-explorer examples)."""
    for key in ("Weights", "ConvWeights"):
        value = obj.get(key)
        if isinstance(value, Mapping):
            return _str_or_none(value.get("Type"))
    return None


def _strip_comment_lines(text: str) -> str:
    """Drop leading ``#`` lines (provenance notes on copied fixtures); JSON never has them."""
    while text.lstrip().startswith("#"):
        stripped = text.lstrip()
        nl = stripped.find("\n")
        text = "" if nl < 0 else stripped[nl + 1 :]
    return text


@functools.lru_cache(maxsize=4)
def build_layer_info(text: str | bytes) -> LayerInfo:
    """A build's own inspector JSON (``strict=False``), parsed once however many checks of
    that build read it (the kernel cross-check, the key choice, idle keys, the plan
    check): the same text gives the same frozen :class:`LayerInfo`."""
    return parse_layer_info(text, "engine layer information", strict=False)


def parse_layer_info(
    text: str | bytes, source: str | None = None, *, strict: bool = True
) -> LayerInfo:
    """Parse layer-information JSON; raises LogParseError naming ``source`` when invalid.

    ``strict=False`` (for the JSON a build's inspector just returned) skips entries that
    are not layer objects instead of raising, and in a detailed list also bare names, as
    they carry no kernel; a missing or unparsable ``Layers`` list still raises.
    """
    where = source or "<layer info>"
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise LogParseError(
            f"{where}: layer information must be JSON text, not {type(text).__name__}"
        )
    body = _strip_comment_lines(text.lstrip("\ufeff"))
    try:
        data = json.loads(body)
    except json.JSONDecodeError as err:
        raise LogParseError(
            f"{where}: not valid layer-information JSON ({err.msg} at line {err.lineno}); "
            "write it with trtexec --exportLayerInfo=FILE --profilingVerbosity=detailed"
        ) from None
    except RecursionError:
        raise LogParseError(f"{where}: JSON nested too deeply to be layer information") from None
    except ValueError:  # a number of thousands of digits: Python's int parsing limit
        raise LogParseError(
            f"{where}: a number in the JSON is thousands of digits long, more than any "
            "layer-information value; check that this is the exported layer information"
        ) from None
    if not isinstance(data, Mapping) or not isinstance(data.get("Layers"), list):
        raise LogParseError(
            f"{where}: no 'Layers' list; this is not engine layer information "
            "(expected the JSON of trtexec --exportLayerInfo or IEngineInspector)"
        )
    raw_layers = data["Layers"]
    detailed = any(not isinstance(obj, str) for obj in raw_layers)
    if not strict and detailed:
        raw_layers = [obj for obj in raw_layers if not isinstance(obj, str)]
    parsed = (_layer(obj, i, where, strict) for i, obj in enumerate(raw_layers))
    layers = tuple(layer for layer in parsed if layer is not None)
    raw_bindings = data.get("Bindings", data.get("I/O Tensors", []))
    bindings: list[str] = []
    if isinstance(raw_bindings, list):
        for b in raw_bindings:
            if isinstance(b, str):
                bindings.append(b)
            elif isinstance(b, Mapping) and isinstance(b.get("Name"), str):
                bindings.append(b["Name"])
    return LayerInfo(layers=layers, bindings=tuple(bindings), detailed=detailed, source=source)


def load_layer_info(path: str | os.PathLike[str]) -> LayerInfo:
    """Read a layer-information file: inspector/trtexec JSON, or a log holding the one-line
    (kONELINE ``Name: .., LayerType: ..``) or ``Layer(<Type>): ..`` lines.

    JSON is told apart by its first character after ``#`` notes; a log is streamed line
    by line, so a multi-GB verbose log is never held in memory.
    """
    from reprobuild.fileio import open_regular, read_capped
    from reprobuild.limits import cap

    p = Path(path)
    try:
        with open_regular(
            p,
            "layer information file",
            error=LogParseError,
            missing="cannot read layer information (no such file); check the path",
        ) as fh:
            head = fh.read(65536)
            if not looks_like_json(head):
                fh.seek(0)
                return read_layer_lines(p, fh)
            fh.seek(0)
            text = read_capped(fh, cap("layers"), p, "layers").decode("utf-8", errors="replace")
    except OSError as err:
        raise LogParseError(
            f"{p}: cannot read layer information ({err.strerror or err}); check the path"
        ) from None
    return parse_layer_info(text, source=str(p))


def looks_like_json(head: bytes) -> bool:
    """Whether a file's first bytes (after a BOM and ``#`` note lines) open a JSON object."""
    text = _strip_comment_lines(head.decode("utf-8", errors="replace").lstrip("\ufeff"))
    return text.lstrip().startswith("{")
