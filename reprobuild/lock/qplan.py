"""The lock's INT8 quantization plan: how it was calibrated and every scale, exactly.

Strongly typed TensorRT gets INT8 only from QuantizeLinear/DequantizeLinear nodes, so the
scales are as much a build decision as a tactic: calibrate again (other data, another batch
size or method) and they change, and with them the output bits. Activation scales are kept
verbatim as hex floats (``float.hex`` of the float32 value: no decimal rounding can alter
them); weight scales follow from the weights, so only their hash is kept, as a check.
Like ``plan.py`` this module holds data and validation only (no numpy/onnx).
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from reprobuild.lock.schema import Doc, Path_

CALIB_METHODS = ("entropy", "minmax", "percentile")
FLOAT_PRECISIONS = ("fp32", "fp16", "bf16")  # --float: what an INT8 build leaves in float
_SHA = re.compile(r"^[0-9a-f]{64}$")
_HEX_FLOAT = re.compile(r"^0x[0-9a-f](\.[0-9a-f]*)?p[+-]?[0-9]+$")  # float.hex(), positive


@dataclass(frozen=True)
class ActivationScale:
    """One quantized activation tensor: its symmetric INT8 scale (zero point 0)."""

    tensor: str
    scale: float

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "scale": float(self.scale).hex()}


@dataclass(frozen=True)
class WeightScale:
    """One per-channel quantized weight: the channel axis and the sha256 of its float32
    scales (recomputed from the weight on every build and compared)."""

    tensor: str
    axis: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "axis": self.axis, "sha256": self.sha256}


@dataclass(frozen=True)
class OpsetConversion:
    """The model's opset was older than the plan needs (per-channel Q/DQ; a BF16 Conv; an
    ``--opset``): ``onnx.version_converter`` (a pure function of the model, per onnx
    version) converted it before planning, and converts it again before every locked build
    applies the plan."""

    source: int
    target: int
    onnx: str  # the onnx version that converted it when the plan was recorded
    reason: str | None = None  # fp16/bf16 plans: why ("--opset 22", "bf16 Conv needs 22")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"from": self.source, "to": self.target, "onnx": self.onnx}
        if self.reason is not None:
            d["reason"] = self.reason
        return d


@dataclass
class QuantPlan:
    """Calibration settings, the data's identity and every scale."""

    method: str
    batch_size: int
    samples: int
    data_sha256: str
    onnxruntime: str
    activations: list[ActivationScale] = field(default_factory=list)
    weights: list[WeightScale] = field(default_factory=list)
    # What stays float runs in this precision (``--float``). Written only when it is not
    # fp32, and a lock without it reads as fp32: older INT8 locks keep their bytes.
    float_precision: str = "fp32"
    opset: OpsetConversion | None = None  # written only when the model was converted

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "method": self.method,
            "batch_size": self.batch_size,
            "samples": self.samples,
            "data_sha256": self.data_sha256,
            "onnxruntime": self.onnxruntime,
        }
        if self.float_precision != "fp32":
            d["float"] = self.float_precision
        if self.opset is not None:
            d["opset"] = self.opset.to_dict()
        d["activations"] = [a.to_dict() for a in self.activations]
        d["weights"] = [w.to_dict() for w in self.weights]
        return d

    def scales(self) -> dict[str, float]:
        return {a.tensor: a.scale for a in self.activations}


SCALE_MIN = 2.0**-126
"""The smallest normal float32. A scale below it is zero or subnormal: TensorRT and ONNX
Runtime take scales as float32, where a subnormal loses precision and flushes to zero on
GPUs that flush denormals, so the engine would not compute what the lock says."""

SCALE_MAX = float.fromhex("0x1.fffffep+127") / 127
"""The largest scale whose INT8 range (127 x scale) is still a finite float32."""

_SCALE_FIX = (
    "an INT8 scale is a positive normal float32 (float.hex() of it, 0x1p-126 to "
    f"{SCALE_MAX.hex()}); restore the recorded value or re-record the lock"
)


def _hex_float(doc: Doc, value: Any, path: Path_) -> float:
    """An activation scale: a hex float that is a float32 INT8 can use (see ``SCALE_MIN``).

    A hand edit can make it anything; each way of being wrong is named, at file:line."""
    text = doc.string(value, path)
    if text.strip().startswith("-"):
        doc.fail(path, f"scale {text} is negative", _SCALE_FIX)
    if text.strip().lstrip("+").lower() in ("nan", "inf", "infinity"):
        doc.fail(path, f"scale {text} is not finite", _SCALE_FIX)
    if not _HEX_FLOAT.match(text):  # float.fromhex alone would read "0.5" as hex digits
        doc.fail(path, f"{text!r} is not a hex float", "write it as float.hex() gives it")
    try:
        scale = float.fromhex(text)
    except OverflowError:
        scale = math.inf  # refused as too large below
    except ValueError:
        doc.fail(path, f"{text!r} is not a hex float", "write it as float.hex() gives it")
    if scale == 0:
        doc.fail(path, f"scale {text} is zero", _SCALE_FIX)
    if scale < SCALE_MIN:
        doc.fail(path, f"scale {text} is subnormal (below 0x1p-126)", _SCALE_FIX)
    if scale > SCALE_MAX:
        doc.fail(path, f"scale {text} is too large (127 x it overflows float32)", _SCALE_FIX)
    if struct.unpack("<f", struct.pack("<f", scale))[0] != scale:
        doc.fail(path, f"scale {text} is not a float32 value (more bits than it holds)", _SCALE_FIX)
    return scale


def _sha(doc: Doc, value: Any, path: Path_) -> str:
    text = doc.string(value, path)
    if not _SHA.match(text):
        doc.fail(path, f"{text!r} is not a sha256 (64 lowercase hex digits)", "re-record")
    return text


def quant_from_data(doc: Doc, value: Any, path: Path_) -> QuantPlan:
    keys = ("method", "batch_size", "samples", "data_sha256", "onnxruntime")
    m = doc.mapping(value, path, (*keys, "activations", "weights"), ("float", "opset"))
    acts: list[ActivationScale] = []
    seen: set[str] = set()
    for i, item in enumerate(doc.seq(m["activations"], path + ("activations",))):
        p = path + ("activations", i)
        a = doc.mapping(item, p, ("tensor", "scale"), ())
        name = doc.string(a["tensor"], p + ("tensor",))
        if name in seen:
            doc.fail(p + ("tensor",), f"tensor {name!r} appears twice", "keep one entry")
        seen.add(name)
        acts.append(ActivationScale(name, _hex_float(doc, a["scale"], p + ("scale",))))
    weights: list[WeightScale] = []
    for i, item in enumerate(doc.seq(m["weights"], path + ("weights",))):
        p = path + ("weights", i)
        w = doc.mapping(item, p, ("tensor", "axis", "sha256"), ())
        weights.append(
            WeightScale(
                doc.string(w["tensor"], p + ("tensor",)),
                doc.integer(w["axis"], p + ("axis",), minimum=0),
                _sha(doc, w["sha256"], p + ("sha256",)),
            )
        )
    return QuantPlan(
        method=doc.choice(m["method"], path + ("method",), CALIB_METHODS),
        batch_size=doc.integer(m["batch_size"], path + ("batch_size",), minimum=1),
        samples=doc.integer(m["samples"], path + ("samples",), minimum=1),
        data_sha256=_sha(doc, m["data_sha256"], path + ("data_sha256",)),
        onnxruntime=doc.string(m["onnxruntime"], path + ("onnxruntime",)),
        activations=acts,
        weights=weights,
        float_precision="fp32"
        if m.get("float") is None
        else doc.choice(m["float"], path + ("float",), FLOAT_PRECISIONS),
        opset=None
        if m.get("opset") is None
        else opset_from_data(doc, m["opset"], path + ("opset",)),
    )


def opset_from_data(doc: Doc, value: Any, path: Path_) -> OpsetConversion:
    """An ``opset`` mapping (an INT8 plan's ``quantization.opset``, a float plan's ``opset``)."""
    m = doc.mapping(value, path, ("from", "to", "onnx"), ("reason",))
    source = doc.integer(m["from"], path + ("from",), minimum=1)
    target = doc.integer(m["to"], path + ("to",), minimum=1)
    if target <= source:
        doc.fail(path + ("to",), f"opset {target} is not newer than {source}", "re-record")
    return OpsetConversion(
        source,
        target,
        doc.string(m["onnx"], path + ("onnx",)),
        doc.string(m.get("reason"), path + ("reason",), optional=True),
    )
