"""What an engine layer is: the values every reader of layer information produces.

``EngineLayer`` (one layer and the kernel it runs), ``TensorDesc`` (its inputs and
outputs), ``LayerInfo`` (a whole file) and the words that name a precision or a memory
layout. They sit below every reader, the inspector JSON (``layerinfo``), the log's text
forms (``lines``, ``layertext``) and the builder-log parser's engine layers (``blocks``), so
those readers import this module and never each other for a type. Only the standard
library is imported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from reprobuild.logs.kernelname import accumulation_of

__all__ = [
    "COMPUTE_PRECISIONS",
    "EngineLayer",
    "LayerInfo",
    "TensorDesc",
    "is_qdq",
    "is_reformat",
    "kernels_by_layer",
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
    if low.startswith("row major"):  # "Row major linear FP32", "Row major Int8 format"
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
    report a kernel name but no tactic value. ``weights`` is the type of the layer's
    weights as the inspector names it (``"Weights": {"Type": "Int8"}``), ``origin`` the
    8.x inspector's ``Origin`` (``QDQ`` for a Q/DQ node left as a Reformat layer).
    """

    name: str
    layer_type: str | None = None
    tactic_name: str | None = None
    tactic_value: int | None = None
    metadata: tuple[str, ...] = ()
    inputs: tuple[TensorDesc, ...] = ()
    outputs: tuple[TensorDesc, ...] = ()
    # left out of repr: the log parser's goldens (tests/fixtures/logparse) hold the repr
    # of the layers it reads, and a log line carries neither
    weights: str | None = field(default=None, repr=False)
    origin: str | None = field(default=None, repr=False)

    @property
    def is_reformat(self) -> bool:
        """Whether this is a Reformat/NoOp layer; see :func:`is_reformat`."""
        return is_reformat(self)

    @property
    def is_qdq(self) -> bool:
        """Whether this layer quantizes or dequantizes; see :func:`is_qdq`."""
        return is_qdq(self)

    @property
    def accumulation(self) -> str | None:
        """The precision the layer's products are summed in, where its kernel's name says
        it (:mod:`reprobuild.logs.kernelname`); None otherwise."""
        return accumulation_of(self.tactic_name)

    @property
    def precision(self) -> str | None:
        """The precision the layer computes in, as far as its tensors tell.

        INT8 when its weights are INT8, or it reads INT8 and sums in INT32: a fused INT8
        convolution may write FP32 (the last layer of an INT8 ResNet in NVIDIA's
        trt-engine-explorer examples reads Int8, writes FP32, with Int8 weights), and its
        products are still INT8 ones. Otherwise its first output's floating-point (or
        INT8/FP8) type, else its first input's, else any type; outputs first because a
        Myelin gemm's FP32 ``alpha`` input says nothing, and an ArgMax's INT64 output says
        nothing about the FP16 it compared. None without tensor types (names-only exports).
        """
        reads_int8 = any(t.precision == "INT8" for t in self.inputs)
        if precision_of(self.weights) == "INT8" or (reads_int8 and self.accumulation == "INT32"):
            return "INT8"
        tensors = (*self.outputs, *self.inputs)
        types = [t.precision for t in tensors if t.precision is not None]
        return next((p for p in types if p in COMPUTE_PRECISIONS), types[0] if types else None)


def is_reformat(layer: EngineLayer) -> bool:
    """Reformat and NoOp layers are named after the layer they feed (``Reformatting
    CopyNode for Input Tensor 0 to conv1 + relu1``), so a name match must skip them or
    ``conv1``'s kernel check would look at a copy kernel."""
    return layer.layer_type in _REFORMAT_TYPES or layer.name.startswith("Reformatting ")


_QDQ_TYPES = re.compile(r"^Ref(Quantize|Dequantize)Linear$")


def is_qdq(layer: EngineLayer) -> bool:
    """A quantize or dequantize step: it converts between float and INT8 and computes
    nothing else, so the layer table counts it apart from compute layers.

    TensorRT fuses most Q/DQ nodes into INT8 kernels; one it leaves runs as a Reformat
    layer named after the node, ``Origin: QDQ`` in 8.x JSON (``QuantizeLinear_2``, Float to
    Int8, in the INT8 ResNet of NVIDIA's trt-engine-explorer examples) and a Float <-> Int8
    ``Layer(Reformat)`` line in a log (NVIDIA/TensorRT issue 2527). The reference backend
    runs every Q/DQ node as a layer of its own (``RefQuantizeLinear``).
    """
    if layer.origin == "QDQ" or _QDQ_TYPES.match(layer.layer_type or ""):
        return True
    if not is_reformat(layer) or not layer.inputs or not layer.outputs:
        return False
    pair = {layer.inputs[0].precision, layer.outputs[0].precision}
    return "INT8" in pair and len(pair & COMPUTE_PRECISIONS) == 2


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


def kernels_by_layer(layers: Iterable[EngineLayer]) -> dict[str, tuple[str | None, int | None]]:
    """``{engine layer name: (kernel name, tactic value)}``: the map ``verify`` compares."""
    return {layer.name: (layer.tactic_name, layer.tactic_value) for layer in layers}
