"""Did the engine follow the lock's precision plan? Per engine layer, through its Metadata.

The plan says which ONNX node computes in which precision; the engine's layer information
says which tensor types each engine layer reads and writes, and (``Metadata``) which ONNX
nodes it came from. A strongly typed build should follow the plan exactly, so a layer that
does not is a finding worth exit 1, whether it ran planned-FP16 work in FP32 or the reverse.

Mapping is never guessed: a layer maps to nodes through its Metadata (10.x+, the reference
backend) or, without Metadata (8.x), through a name made only of plan nodes joined by
``" + "``; anything else is reported as *unmapped* with the reason, not as followed.
Reformat layers and nodes the plan computes nothing in (Cast, Shape, integer ops) are
*unchecked*. Rules the comparison uses:

- a node planned ``fp16``/``bf16`` with FP32 accumulation runs its product in FP32 (Casts
  around an FP32 node), so FP32 is what it should show;
- a layer's precision is its first output's floating-point type (else its first input's);
  when a Cast was fused into the layer, any of its tensor types may carry the planned one;
- fused nodes planned in different precisions cannot be attributed: unmapped;
- a node planned ``int8`` whose layer runs in float (Q/DQ not fused) is unchecked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.lock.plan import NodePrecision, PrecisionPlan
from reprobuild.logs.layerinfo import COMPUTE_PRECISIONS, EngineLayer, LayerInfo

__all__ = [
    "LayerVerdict",
    "PlanCheck",
    "check_against_lock",
    "check_engine",
    "judge",
    "check_plan",
    "model_ops",
]

_CHECKED = ("fp32", "fp16", "bf16", "int8")
_PROFILE = re.compile(r" \[profile \d+\]$")
_CASTS = ("Cast", "CastLike")
# An INT8 node's quantization is the graph's Q/DQ; a backend that does not fuse DQ -> node
# -> Q runs the node itself in float on dequantized values, with the same INT8 rounding.
_UNFUSED = "INT8 node run on dequantized values (Q/DQ not fused into an INT8 kernel)"


@dataclass(frozen=True)
class LayerVerdict:
    """One engine layer against the plan: ``follows``, ``differs``, ``unmapped`` or
    ``unchecked``, with the nodes it maps to and why."""

    layer: str
    status: str
    nodes: tuple[str, ...] = ()
    planned: str | None = None
    engine: str | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "status": self.status,
            "nodes": list(self.nodes),
            "planned": self.planned,
            "engine": self.engine,
            "reason": self.reason,
        }

    def message(self) -> str:
        nodes = ", ".join(self.nodes) or "-"
        if self.status == "differs":
            return (
                f"layer {self.layer!r} runs in {self.engine} but the precision plan says "
                f"{self.planned} (ONNX nodes: {nodes})"
            )
        return f"layer {self.layer!r}: {self.status}: {self.reason}"


@dataclass
class PlanCheck:
    """Every layer's verdict; ``follows`` is False only for a layer that differs."""

    verdicts: list[LayerVerdict] = field(default_factory=list)
    note: str | None = None  # why nothing could be checked (names-only information)

    @property
    def follows(self) -> bool:
        return not any(v.status == "differs" for v in self.verdicts)

    def by_status(self, status: str) -> list[LayerVerdict]:
        return [v for v in self.verdicts if v.status == status]

    def problems(self) -> list[str]:
        """One line per layer that did not follow the plan."""
        return [v.message() for v in self.by_status("differs")]

    def counts(self) -> dict[str, int]:
        out = {"follows": 0, "differs": 0, "unmapped": 0, "unchecked": 0}
        for v in self.verdicts:
            out[v.status] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "follows": self.follows,
            "counts": self.counts(),
            "note": self.note,
            "layers": [v.to_json() for v in self.verdicts if v.status != "unchecked"],
        }


def model_ops(path: str | Path) -> dict[str, str]:
    """``{plan node key: op type}`` of the model a backend built (the plan's conversion adds
    Cast nodes the plan does not list; they are expected, not unmapped)."""
    import onnx

    from reprobuild.precision.analysis import node_keys

    model = onnx.load(str(path), load_external_data=False)
    return {k: n.op_type for k, n in zip(node_keys(model), model.graph.node, strict=True)}


def _planned(entry: NodePrecision) -> str | None:
    if entry.precision not in _CHECKED:
        return None
    return "fp32" if entry.accumulate == "fp32" else entry.precision


def _aliases(plan: PrecisionPlan, ops: Mapping[str, str]) -> dict[str, str]:
    """Built-model node key -> plan node key. The conversion keeps every original node in
    order and only inserts Casts, but renames the outputs it retypes, so an unnamed node's
    ``node_of_<output>`` changes; walking both lists in order (skipping what does not match
    the next plan node's op, i.e. inserted Casts) pairs them up again."""
    out: dict[str, str] = {}
    nodes = plan.nodes
    i = 0
    for key, op in ops.items():
        if i < len(nodes) and op == nodes[i].op:
            out[key] = nodes[i].node
            i += 1
    return out if i == len(nodes) else {}


class _Mapper:
    def __init__(self, plan: PrecisionPlan, ops: Mapping[str, str]) -> None:
        self.by_node = {n.node: n for n in plan.nodes}
        self.alias = _aliases(plan, ops)
        for key, target in self.alias.items():
            if key != target and key not in self.by_node:
                self.by_node[key] = self.by_node[target]
        self.ops = dict(ops)
        self.shared = {k.split("#", 1)[0] for k in [*self.by_node, *self.ops] if "#" in k}

    def known(self, node: str) -> bool:
        return node in self.by_node or node in self.ops

    def nodes_of(self, layer: EngineLayer) -> tuple[tuple[str, ...], str]:
        if layer.metadata:
            return layer.metadata, ""
        parts = tuple(_PROFILE.sub("", layer.name).split(" + "))
        if all(self.known(p) for p in parts):
            return parts, ""
        return (), "no ONNX node in its Metadata, and its name is not made of plan nodes"

    def verdict(self, layer: EngineLayer) -> LayerVerdict:
        name = layer.name
        if layer.is_reformat:
            return LayerVerdict(name, "unchecked", reason="reformat layer")
        nodes, why = self.nodes_of(layer)
        if not nodes:
            return LayerVerdict(name, "unmapped", reason=why)
        planned: set[str] = set()
        has_cast = False
        for node in nodes:
            if node in self.shared:
                return LayerVerdict(
                    name, "unmapped", nodes, reason=f"several ONNX nodes are named {node!r}"
                )
            entry = self.by_node.get(node)
            op = entry.op if entry is not None else self.ops.get(node)
            if op is None:
                return LayerVerdict(
                    name, "unmapped", nodes, reason=f"node {node!r} is not in the plan"
                )
            has_cast |= op in _CASTS
            p = _planned(entry) if entry is not None else None
            if p is not None:
                planned.add(p)
        if not planned:
            return LayerVerdict(
                name, "unchecked", nodes, reason="the plan computes nothing here (casts, shapes)"
            )
        if len(planned) > 1:
            return LayerVerdict(
                name,
                "unmapped",
                nodes,
                reason=f"fused nodes are planned in {' and '.join(sorted(planned))}",
            )
        (want,) = planned
        if has_cast:
            types = {t.precision for t in (*layer.inputs, *layer.outputs)} & COMPUTE_PRECISIONS
            got = ", ".join(sorted(types)) or None
            ok = want.upper() in types
        else:
            got = layer.precision
            ok = got is not None and got.lower() == want
        if want == "int8" and not ok and got is not None:
            return LayerVerdict(name, "unchecked", nodes, want, got, reason=_UNFUSED)
        if got is None:
            return LayerVerdict(
                name, "unmapped", nodes, want, reason="the layer information has no tensor types"
            )
        return LayerVerdict(name, "follows" if ok else "differs", nodes, want, got)


def check_plan(
    info: LayerInfo, plan: PrecisionPlan, ops: Mapping[str, str] | None = None
) -> PlanCheck:
    """Compare every engine layer with the plan (see the module docstring for the rules)."""
    if info.names_only:
        return PlanCheck(
            note="the layer information lists names only: build with detailed profiling "
            "verbosity to check precisions"
        )
    mapper = _Mapper(plan, ops or {})
    return PlanCheck([mapper.verdict(layer) for layer in info.layers])


def check_engine(
    layer_info: str, plan: PrecisionPlan | None, built_model: str | Path
) -> PlanCheck | None:
    """The plan check of a build's own inspector JSON against the model it built; None
    without a plan. Unreadable JSON is a note, not a failure: a build's kernels are
    checked elsewhere, and this check must not guess."""
    from reprobuild.errors import LogParseError
    from reprobuild.logs.layerinfo import build_layer_info

    if plan is None:
        return None
    try:
        info = build_layer_info(layer_info)
    except LogParseError as err:
        return PlanCheck(note=f"layer information unreadable: {err}")
    return check_plan(info, plan, model_ops(built_model))


def judge(
    check: PlanCheck | None, plan: PrecisionPlan | None, recorded: bool, warnings: list[str]
) -> PlanCheck | None:
    """What a build does with its plan check.

    A recording build warns and keeps its own verdict in the plan (``engine_differs``):
    TensorRT can legitimately differ (a Cast fused without a Metadata entry). A locked
    build is drift (``DriftError``: exit 1, nothing written) only where it changes from
    that verdict: a layer that differs now but did not at recording."""
    from reprobuild.errors import DriftError

    if check is None or plan is None:
        return check
    differs = sorted({v.layer for v in check.by_status("differs")})
    if recorded:
        plan.engine_differs = tuple(differs)
        warnings.extend(check.problems())
        return check
    new = [v.message() for v in check.by_status("differs") if v.layer not in plan.engine_differs]
    if new:
        raise DriftError(
            "the engine does not follow the lock's precision plan: "
            + "; ".join(new)
            + "; check the model's Cast nodes and tensor types, or re-record the lock"
        )
    warnings.extend(f"{m} (as at recording)" for m in check.problems() if m not in warnings)
    now_follow = sorted(set(plan.engine_differs) - set(differs))
    if now_follow:
        warnings.append(
            f"layers {', '.join(now_follow)} differed from the precision plan at recording "
            "and follow it now"
        )
    return check


def check_against_lock(info: LayerInfo, lock: str | Path) -> PlanCheck:
    """``reprobuild layers FILE --lock LOCK``: any engine's layers (a trtexec export too)
    against a lock's plan. When the lock's model is at hand, the plan is applied to it as
    a build would, so the Cast nodes the conversion adds are known rather than unmapped."""
    import tempfile

    from reprobuild.errors import ReprobuildError, UsageError
    from reprobuild.lock.yamlio import load_lock
    from reprobuild.workflow.prepare import prepare_model

    lock_path = Path(lock)
    data = load_lock(lock_path)
    if data.precision is None:
        raise UsageError(
            f"{lock_path}: has no precision plan to check against; record one with "
            "reprobuild build --precision fp16 (or from a mixed-precision model)"
        )
    ops: dict[str, str] = {}
    model_path = lock_path.parent / data.model.path
    if model_path.is_file():
        with tempfile.TemporaryDirectory(prefix="reprobuild-plan-") as tmp:
            try:
                built, _, _ = prepare_model(model_path, data, None, True, Path(tmp), lock_path)
                ops = model_ops(built)
            except ReprobuildError:
                ops = {}  # a stale plan: map through the plan alone
    return check_plan(info, data.precision, ops)
