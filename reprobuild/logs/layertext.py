"""Engine layer information printed as text, in the two forms that appear in builder logs.

- kONELINE, one layer per line (``IEngineInspector`` with ``LayerInformationFormat.ONELINE``,
  trtexec's ``Layers:`` section, Torch-TensorRT's debug log)::

      Name: conv1 + relu1, LayerType: CaskConvolution, Inputs: [ { Name: x, Location: Device,
      Dimensions: [1,1,28,28], Format/Datatype: Row major linear FP32 }], Outputs: [...],
      ..., TacticName: sm80_..., TacticValue: 0x..., StreamId: 0, Metadata: [ONNX Layer: ..]

- the builder's own ``Engine Layer Information:`` lines (10.x verbose)::

      Layer(CaskConvolution): conv1 + relu1, Tactic: 0x..., x (Float[-1,1,28,28]) -> relu (...)

The name, type, kernel, tactic and Metadata come from :mod:`reprobuild.logs.lines` (the log
parser's own readers, so ``reprobuild log`` and ``reprobuild layers`` never disagree); this
module adds the tensors, which only ``reprobuild layers`` and the plan check need.
"""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path
from typing import BinaryIO

from reprobuild.errors import LogParseError
from reprobuild.logs.layermodel import EngineLayer, LayerInfo, TensorDesc
from reprobuild.logs.lines import layer_line, oneline_layer, strip_prefix

__all__ = ["oneline_tensors", "read_layer_lines", "arrow_tensors"]

_OBJECT = re.compile(r"\{\s*(.*?)\s*\}")
_FIELDS = re.compile(
    r"Name: (?P<name>.*?)(?:, Location: [^,]*)?(?:, Dimensions: \[(?P<dims>[^\]]*)\])?"
    r"(?:, Format/Datatype: (?P<fd>.*?)|, Format: (?P<f>.*?), Datatype: (?P<d>.*?))?$"
)
_ARROW_TENSOR = re.compile(
    r"(?:^|, )\s*(?P<name>.+?) \((?P<type>[A-Za-z0-9]+)\[(?P<dims>[^\]]*)\]\)(?=, |$)"
)


def _dims(text: str | None) -> tuple[int, ...] | None:
    """``1,32,28,28`` -> ints; None for vectorized (``32:4``) or empty dimension lists."""
    if not text:
        return None
    try:
        return tuple(int(d) for d in text.split(","))
    except ValueError:
        return None


def _tensor_list(s: str, label: str) -> tuple[TensorDesc, ...]:
    """The ``{ Name: .., .. }`` objects of ``Inputs: [..]`` or ``Outputs: [..]``."""
    start = s.find(f"{label}: [")
    if start < 0:
        return ()
    start += len(label) + 3
    if s[start : start + 1] == "]":
        return ()
    end = s.find("}]", start)
    body = s[start : end + 1 if end >= 0 else len(s)]
    tensors: list[TensorDesc] = []
    for obj in _OBJECT.finditer(body):
        m = _FIELDS.match(obj[1])
        if m is None:
            continue
        fmt = m["fd"] if m["fd"] is not None else m["f"]
        tensors.append(TensorDesc(m["name"].strip(), _dims(m["dims"]), fmt, m["d"]))
    return tuple(tensors)


def oneline_tensors(line: str) -> tuple[tuple[TensorDesc, ...], tuple[TensorDesc, ...]]:
    """Inputs and outputs of a kONELINE layer line."""
    s = strip_prefix(line)
    return _tensor_list(s, "Inputs"), _tensor_list(s, "Outputs")


def _arrow_side(text: str) -> tuple[TensorDesc, ...]:
    return tuple(
        TensorDesc(m["name"].strip(), _dims(m["dims"]), None, m["type"])
        for m in _ARROW_TENSOR.finditer(text)
    )


def arrow_tensors(line: str) -> tuple[tuple[TensorDesc, ...], tuple[TensorDesc, ...]]:
    """Inputs and outputs of a ``Layer(..): name, Tactic: 0x.., a (Float[..]) -> b (..)`` line."""
    s = strip_prefix(line)
    k = s.find(", Tactic: ")
    if k < 0:
        return (), ()
    rest = s[k + 10 :]
    comma = rest.find(", ")
    rest = rest[comma + 2 :] if comma >= 0 else ""
    ins, sep, outs = rest.partition(" -> ")
    return (_arrow_side(ins), _arrow_side(outs)) if sep else ((), ())


def read_layer_lines(path: Path, binary: BinaryIO | None = None) -> LayerInfo:
    """Every engine layer printed in a log; the kONELINE form wins when both are present,
    as it carries kernels and Metadata the ``Layer(..)`` form lacks. ``binary`` is the
    file already opened (and checked) by the caller; it stays open."""
    from reprobuild.fileio import open_regular

    if binary is None:
        with open_regular(path, "layer information file", error=LogParseError) as fh:
            return read_layer_lines(path, fh)
    oneline: list[EngineLayer] = []
    arrows: list[EngineLayer] = []
    bindings: list[str] = []
    in_bindings = False
    try:
        fh = io.TextIOWrapper(binary, encoding="utf-8", errors="replace", newline="\n")
        try:
            for raw in fh:
                if raw.startswith("# "):
                    continue
                line = raw.rstrip("\r\n")
                if in_bindings:
                    name = line.strip()
                    if name and ":" not in name and not name.startswith("["):
                        bindings.append(name)
                        continue
                    in_bindings = False
                if line.strip() == "Bindings:":
                    in_bindings = True
                    continue
                layer = oneline_layer(line)
                if layer is not None:
                    ins, outs = oneline_tensors(line)
                    oneline.append(dataclasses.replace(layer, inputs=ins, outputs=outs))
                    continue
                layer = layer_line(line)
                if layer is not None:
                    ins, outs = arrow_tensors(line)
                    arrows.append(dataclasses.replace(layer, inputs=ins, outputs=outs))
        finally:
            fh.detach()
    except OSError as err:
        raise LogParseError(
            f"{path}: cannot read layer information ({err.strerror or err}); check the path"
        ) from None
    layers = oneline or arrows
    if not layers:
        raise LogParseError(
            f"{path}: no engine layer information in this file (neither inspector JSON nor "
            "'Name: .., LayerType: ..' / 'Layer(..)' lines); write it with trtexec "
            "--exportLayerInfo=FILE --profilingVerbosity=detailed, or print the engine "
            "inspector's JSON"
        )
    return LayerInfo(
        layers=tuple(layers), bindings=tuple(bindings), detailed=True, source=str(path)
    )
