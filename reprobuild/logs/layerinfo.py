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
Only the standard library is imported: the CLI loads this module at startup.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprobuild.errors import LogParseError
from reprobuild.logs.values import split_onnx_layers, tactic_to_int

__all__ = [
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

_REFORMAT_TYPES = ("Reformat", "NoOp")

# Every spelling of a data type in layer information: 8.x/10.x joined formats ("Row major
# linear FP32", "Channel major FP16 format ..."), Myelin and log forms ("Half", "Float"),
# 11.x split ``Datatype`` and the reference backend's numpy names.
_PRECISION_WORDS = {
    "fp32": "FP32",
    "float": "FP32",
    "float32": "FP32",
    "fp16": "FP16",
    "half": "FP16",
    "float16": "FP16",
    "bf16": "BF16",
    "bfloat16": "BF16",
    "int8": "INT8",
    "fp8": "FP8",
    "e4m3": "FP8",
    "fp4": "FP4",
    "int4": "INT4",
    "int32": "INT32",
    "int64": "INT64",
    "uint8": "UINT8",
    "bool": "BOOL",
    "double": "FP64",
    "fp64": "FP64",
    "float64": "FP64",
}
COMPUTE_PRECISIONS = frozenset({"FP32", "FP16", "BF16", "INT8", "FP8", "FP4", "FP64"})
"""Types a layer computes in (as opposed to index/shape types such as INT64)."""
_WORD = re.compile(r"[A-Za-z0-9]+")
_VECTOR_WIDTHS = {"two": 2, "four": 4, "eight": 8, "sixteen": 16, "thirty-two": 32}
_VECTORIZED = re.compile(r"(two|four|eight|sixteen|thirty-two) wide channel vectorized")
_CHANNEL_ALIGN = re.compile(r"channel % (\d+) == 0")


def precision_of(text: str | None) -> str | None:
    """The data type named in a format or datatype string (``FP16`` for ``Half``), or None."""
    if not text:
        return None
    for word in _WORD.findall(text):
        found = _PRECISION_WORDS.get(word.lower())
        if found is not None:
            return found
    return None


def _layout(fmt: str | None) -> str | None:
    """A short memory-layout name (``linear``, ``HWC8``, ``CHW4``) for a format string;
    None when the string names only a data type (Myelin tensors, 8.x-style logs)."""
    if not fmt:
        return None
    low = fmt.strip().lower()
    if low.startswith("row major linear"):
        return "linear"
    if low.startswith("channel major"):
        m = _CHANNEL_ALIGN.search(low)
        return f"HWC{m[1]}" if m else "HWC"
    m = _VECTORIZED.match(low)
    if m:
        return f"CHW{_VECTOR_WIDTHS[m[1]]}"
    if all(w.lower() in _PRECISION_WORDS for w in _WORD.findall(fmt)):
        return None
    return fmt.strip()


@dataclass(frozen=True)
class TensorDesc:
    """One engine-layer input or output; ``format`` holds the joined 8.x/10.x string."""

    name: str
    dimensions: tuple[int, ...] | None = None
    format: str | None = None
    datatype: str | None = None

    @property
    def precision(self) -> str | None:
        """``FP32``/``FP16``/``BF16``/``INT8``/...: from ``Datatype`` (11.x) or the joined
        ``Format/Datatype`` string, so every shape answers "which precision" the same way."""
        return precision_of(self.datatype) or precision_of(self.format)

    @property
    def layout(self) -> str | None:
        """The memory layout without the data type, short (``linear``, ``HWC8``, ``CHW4``)."""
        return _layout(self.format)


@dataclass(frozen=True, slots=True)
class EngineLayer:
    """One layer of a built engine and the kernel it runs.

    ``tactic_value`` is None for names-only exports and for Myelin sub-layers, which
    report a kernel name but no tactic value.
    """

    name: str
    layer_type: str | None = None
    tactic_name: str | None = None
    tactic_value: int | None = None
    metadata: tuple[str, ...] = ()
    inputs: tuple[TensorDesc, ...] = ()
    outputs: tuple[TensorDesc, ...] = ()

    @property
    def is_reformat(self) -> bool:
        """Whether this is a Reformat/NoOp layer; see :func:`is_reformat`."""
        return is_reformat(self)

    @property
    def precision(self) -> str | None:
        """The precision the layer computes in, as far as its tensors tell: its first
        output's floating-point (or INT8/FP8) type, else its first input's, else any type;
        outputs first because a Myelin gemm's FP32 ``alpha`` input says nothing, and an
        ArgMax's INT64 output says nothing about the FP16 it compared. None without tensor
        types (names-only exports)."""
        tensors = (*self.outputs, *self.inputs)
        types = [t.precision for t in tensors if t.precision is not None]
        return next((p for p in types if p in COMPUTE_PRECISIONS), types[0] if types else None)


def is_reformat(layer: EngineLayer) -> bool:
    """Reformat and NoOp layers are named after the layer they feed (``Reformatting
    CopyNode for Input Tensor 0 to conv1 + relu1``), so a name match must skip them or
    ``conv1``'s kernel check would look at a copy kernel."""
    return layer.layer_type in _REFORMAT_TYPES or layer.name.startswith("Reformatting ")


@dataclass(frozen=True)
class LayerInfo:
    """A whole layer-information file."""

    layers: tuple[EngineLayer, ...]
    bindings: tuple[str, ...]
    detailed: bool  # False for names-only exports (no --profilingVerbosity=detailed)
    source: str | None = None

    @property
    def names_only(self) -> bool:
        """Layers listed by name alone (built without detailed profiling verbosity): there
        is nothing to cross-check, which callers report instead of "no such layer"."""
        return bool(self.layers) and not self.detailed

    def by_name(self) -> dict[str, EngineLayer]:
        return {layer.name: layer for layer in self.layers}


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
    if "Format/Datatype" in obj:
        fmt, dtype = _str_or_none(obj.get("Format/Datatype")), None
    else:
        fmt, dtype = _str_or_none(obj.get("Format")), _str_or_none(obj.get("Datatype"))
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
    )


def _strip_comment_lines(text: str) -> str:
    """Drop leading ``#`` lines (provenance notes on copied fixtures); JSON never has them."""
    while text.lstrip().startswith("#"):
        stripped = text.lstrip()
        nl = stripped.find("\n")
        text = "" if nl < 0 else stripped[nl + 1 :]
    return text


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
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            head = fh.read(65536)
    except OSError as err:
        raise LogParseError(
            f"{p}: cannot read layer information ({err.strerror or err}); check the path"
        ) from None
    if not looks_like_json(head):
        from reprobuild.logs.layertext import read_layer_lines

        return read_layer_lines(p)
    try:
        text = p.read_bytes().decode("utf-8", errors="replace")
    except OSError as err:
        raise LogParseError(
            f"{p}: cannot read layer information ({err.strerror or err}); check the path"
        ) from None
    return parse_layer_info(text, source=str(p))


def looks_like_json(head: bytes) -> bool:
    """Whether a file's first bytes (after a BOM and ``#`` note lines) open a JSON object."""
    text = _strip_comment_lines(head.decode("utf-8", errors="replace").lstrip("\ufeff"))
    return text.lstrip().startswith("{")


def kernels_by_layer(layers: Iterable[EngineLayer]) -> dict[str, tuple[str | None, int | None]]:
    """``{engine layer name: (kernel name, tactic value)}``: the map ``verify`` compares."""
    return {layer.name: (layer.tactic_name, layer.tactic_value) for layer in layers}
