"""What an engine runs, layer by layer: rows, a summary, and the difference between two engines.

Built on :class:`~reprobuild.logs.layerinfo.LayerInfo` only, so every shape the reader takes
(8.x/10.x/11.x JSON, names-only, log lines, reference engines) gives the same rows. The
summary answers the question users ask TensorRT's layer information most ("which layers run
in FP16 or INT8, and what did reformatting and quantizing cost?"); the diff answers "what
changed between these two engines" by kernel, tactic and precision, which is what decides
the output bits.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from reprobuild.logs.layermodel import EngineLayer, LayerInfo, precision_of
from reprobuild.words import count

__all__ = ["LayerDiff", "LayerSummary", "diff_layers", "layer_json", "summarize"]


def _hex(value: int | None) -> str | None:
    return None if value is None else f"0x{value:x}"


def layer_json(layer: EngineLayer) -> dict[str, Any]:
    """One row: what ``layers --json`` prints per engine layer."""
    return {
        "name": layer.name,
        "layer_type": layer.layer_type,
        "precision": layer.precision,
        "weights": precision_of(layer.weights),
        "accumulation": layer.accumulation,
        "inputs": [
            {"name": t.name, "precision": t.precision, "format": t.layout} for t in layer.inputs
        ],
        "outputs": [
            {"name": t.name, "precision": t.precision, "format": t.layout} for t in layer.outputs
        ],
        "kernel": layer.tactic_name,
        "tactic": _hex(layer.tactic_value),
        "onnx_nodes": list(layer.metadata),
        "reformat": layer.is_reformat,
        "qdq": layer.is_qdq,
    }


@dataclass
class LayerSummary:
    """Counts over one engine's layers. Reformat layers and quantize/dequantize steps are
    counted apart from the per-precision counts of compute layers: they convert between
    layers (a Q step's INT8 output is not INT8 arithmetic), they compute nothing."""

    layers: int
    by_precision: dict[str, int]
    reformat_layers: list[str]
    without_tactic_value: int  # Myelin sub-layers and names-only exports
    names_only: bool
    qdq_steps: list[str] = field(default_factory=list)

    @property
    def compute_layers(self) -> int:
        return self.layers - len(self.reformat_layers) - len(self.qdq_steps)

    def to_json(self) -> dict[str, Any]:
        return {
            "layers": self.layers,
            "compute_layers": self.compute_layers,
            "by_precision": dict(self.by_precision),
            "qdq_steps": len(self.qdq_steps),
            "qdq_names": list(self.qdq_steps),
            "reformat_layers": len(self.reformat_layers),
            "reformat_names": list(self.reformat_layers),
            "without_tactic_value": self.without_tactic_value,
            "names_only": self.names_only,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LayerSummary:
        """The summary a build report stored (:meth:`to_json`), so ``build`` prints the
        line ``layers`` prints; reports written before Q/DQ steps were counted have none."""
        return cls(
            layers=data["layers"],
            by_precision=dict(data["by_precision"]),
            reformat_layers=list(data.get("reformat_names", [])),
            without_tactic_value=data.get("without_tactic_value", 0),
            names_only=data.get("names_only", False),
            qdq_steps=list(data.get("qdq_names", [])),
        )

    def line(self) -> str:
        """``12 layers: FP16 9, FP32 1; 2 reformat layers`` for people; with Q/DQ steps
        ``14 layers: 8 compute (FP32 6, INT8 2); 6 quantize/dequantize steps; 0 reformat
        layers``."""
        if self.names_only:
            return (
                f"{self.layers} layers (names only: rebuild with "
                "--profilingVerbosity=detailed for kernels and precisions)"
            )
        counts = ", ".join(f"{p} {n}" for p, n in self.by_precision.items()) or "none"
        reformats = count(len(self.reformat_layers), "reformat layer")
        if not self.qdq_steps:
            return f"{count(self.layers, 'layer')}: {counts}; {reformats}"
        steps = count(len(self.qdq_steps), "quantize/dequantize step")
        return (
            f"{count(self.layers, 'layer')}: {self.compute_layers} compute ({counts}); "
            f"{steps}; {reformats}"
        )


def summarize(info: LayerInfo) -> LayerSummary:
    counts: Counter[str] = Counter()
    reformats: list[str] = []
    steps: list[str] = []
    for layer in info.layers:
        if layer.is_qdq:
            steps.append(layer.name)
        elif layer.is_reformat:
            reformats.append(layer.name)
        else:
            counts[layer.precision or "unknown"] += 1
    return LayerSummary(
        layers=len(info.layers),
        by_precision=dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        reformat_layers=reformats,
        without_tactic_value=sum(1 for la in info.layers if la.tactic_value is None),
        names_only=info.names_only,
        qdq_steps=steps,
    )


def _precisions(layer: EngineLayer) -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
    return tuple(t.precision for t in layer.inputs), tuple(t.precision for t in layer.outputs)


@dataclass
class LayerChange:
    name: str
    changed: list[str]  # "kernel", "tactic", "precision", "type"
    a: EngineLayer
    b: EngineLayer

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "changed": list(self.changed),
            "a": layer_json(self.a),
            "b": layer_json(self.b),
        }


@dataclass
class LayerDiff:
    compared: int
    changed: list[LayerChange] = field(default_factory=list)
    only_a: list[EngineLayer] = field(default_factory=list)
    only_b: list[EngineLayer] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return not (self.changed or self.only_a or self.only_b)

    def to_json(self) -> dict[str, Any]:
        return {
            "same": self.same,
            "compared": self.compared,
            "changed": [c.to_json() for c in self.changed],
            "only_a": [layer_json(la) for la in self.only_a],
            "only_b": [layer_json(la) for la in self.only_b],
        }


def _keyed(info: LayerInfo) -> dict[tuple[str, int], EngineLayer]:
    """Layers by (name, occurrence): names repeat across optimization profiles and in
    names-only exports, and the n-th ``X`` of one engine is the n-th ``X`` of the other."""
    seen: Counter[str] = Counter()
    out: dict[tuple[str, int], EngineLayer] = {}
    for layer in info.layers:
        out[(layer.name, seen[layer.name])] = layer
        seen[layer.name] += 1
    return out


def diff_layers(a: LayerInfo, b: LayerInfo) -> LayerDiff:
    """Layers whose kernel, tactic value, type or tensor precisions differ, by name."""
    ka, kb = _keyed(a), _keyed(b)
    result = LayerDiff(compared=len(set(ka) & set(kb)))
    for key, la in ka.items():
        lb = kb.get(key)
        if lb is None:
            result.only_a.append(la)
            continue
        what = []
        if la.layer_type != lb.layer_type:
            what.append("type")
        # A field one side does not print (Layer(..) lines have no kernel names, names-only
        # exports nothing) is unknown, not changed.
        if None not in (la.tactic_name, lb.tactic_name) and la.tactic_name != lb.tactic_name:
            what.append("kernel")
        if None not in (la.tactic_value, lb.tactic_value) and la.tactic_value != lb.tactic_value:
            what.append("tactic")
        pa, pb = _precisions(la), _precisions(lb)
        if la.precision and lb.precision and pa != pb:
            what.append("precision")
        if what:
            result.changed.append(LayerChange(la.name, what, la, lb))
    result.only_b = [lb for key, lb in kb.items() if key not in ka]
    return result
