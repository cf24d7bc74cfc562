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
    "parse_layer_info",
]

_REFORMAT_TYPES = ("Reformat", "NoOp")


@dataclass(frozen=True)
class TensorDesc:
    """One engine-layer input or output; ``format`` holds the joined 8.x/10.x string."""

    name: str
    dimensions: tuple[int, ...] | None = None
    format: str | None = None
    datatype: str | None = None


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
    """Read and parse a layer-information file (UTF-8, undecodable bytes replaced)."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8", errors="replace")
    except OSError as err:
        raise LogParseError(
            f"{p}: cannot read layer information ({err.strerror or err}); check the path"
        ) from None
    return parse_layer_info(text, source=str(p))


def kernels_by_layer(layers: Iterable[EngineLayer]) -> dict[str, tuple[str | None, int | None]]:
    """``{engine layer name: (kernel name, tactic value)}``: the map ``verify`` compares."""
    return {layer.name: (layer.tactic_name, layer.tactic_value) for layer in layers}
