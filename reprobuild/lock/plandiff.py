"""Two precision plans compared: what ``reprobuild diff`` and the plan tests show.

A scale is a build decision like a tactic (it changes the output bits), so a diff of two
INT8 locks that only compares tactics would call two different builds equivalent. This
module lists every plan difference as a :class:`PlanChange`: the mode, each setting, the
opset conversion, each node's precision and deciding rule (with which rule decides it now
and which did, in words: :mod:`.planwords`), the calibration settings and data, every activation
scale (hex float, exact, beside its decimal value) and every weight's per-channel scales.
It works on :class:`PrecisionPlan` values only, so ``diff`` never imports numpy or onnx.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reprobuild.lock.plan import NodePrecision, PrecisionPlan
from reprobuild.lock.planwords import decision_change

KINDS = ("plan", "mode", "setting", "opset", "node", "quantization", "scale", "weight_scales")
_QUANT_KEYS = ("method", "batch_size", "samples", "data_sha256", "onnxruntime", "float", "opset")
_QUANT_DEFAULTS = {"float": "fp32"}  # written only when not the default: older locks


@dataclass(frozen=True)
class PlanChange:
    """One difference. ``a``/``b``: the old and new value as text, ``None`` where absent
    (a node or scale only on one side). Scales are hex floats (``float.hex``)."""

    kind: str
    name: str
    a: str | None
    b: str | None
    # a node whose decision changed: which rule decides it now and which did, in words
    # (printed under the line by ``diff``; the line itself keeps its form)
    detail: str | None = None

    def line(self) -> str:
        """The change as one line of text, e.g. ``scale relu1_out: 0x1.8p-4 (0.09375) -> ...``."""
        if self.kind == "plan":
            return f"precision plan: {self.a or 'none'} -> {self.b or 'none'}"
        if self.kind == "mode":
            return f"mode: {self.a} -> {self.b}"
        if self.kind == "setting":
            return f"settings.{self.name}: {self.a} -> {self.b}"
        if self.kind == "opset":
            return f"opset conversion: {self.a or 'none'} -> {self.b or 'none'}"
        if self.kind == "node":
            if self.b is None:
                return f"node {self.name}: removed"
            return f"node {self.name}: " + (
                f"added ({self.b})" if self.a is None else f"{self.a} -> {self.b}"
            )
        if self.kind == "quantization":
            return f"quantization.{self.name}: {self.a} -> {self.b}"
        if self.kind == "scale":
            return f"scale {self.name}: {_scale_text(self.a)} -> {_scale_text(self.b)}"
        return f"weight scales {self.name}: {_short(self.a)} -> {_short(self.b)}"

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "name": self.name, "a": self.a, "b": self.b}
        if self.detail is not None:
            d["detail"] = self.detail
        if self.kind == "scale":  # the decimal value beside the exact one, for people
            d["a_decimal"] = None if self.a is None else float.fromhex(self.a)
            d["b_decimal"] = None if self.b is None else float.fromhex(self.b)
        return d


def _scale_text(hex_scale: str | None) -> str:
    return "-" if hex_scale is None else f"{hex_scale} ({float.fromhex(hex_scale):.6g})"


def _short(sha: str | None) -> str:
    return "-" if sha is None else f"sha256 {sha[:12]}"


def _node_text(n: NodePrecision) -> str:
    return f"{n.precision}/{n.rule}" + (f" (acc {n.accumulate})" if n.accumulate else "")


def _opset_text(plan: PrecisionPlan) -> str | None:
    o = plan.opset
    if o is None:
        return None
    return f"{o.source} to {o.target}" + (f" ({o.reason})" if o.reason else "")


def plan_changes(old: PrecisionPlan | None, new: PrecisionPlan | None) -> list[PlanChange]:
    """Every difference between two plans (either may be absent: a build as it is)."""
    if old is None or new is None:
        if old is new:
            return []
        return [
            PlanChange(
                "plan", "", None if old is None else old.mode, None if new is None else new.mode
            )
        ]
    out: list[PlanChange] = []
    if old.mode != new.mode:
        out.append(PlanChange("mode", "", old.mode, new.mode))
    a, b = old.settings.values(), new.settings.values()
    out.extend(PlanChange("setting", k, repr(a[k]), repr(b[k])) for k in a if a[k] != b[k])
    if old.opset != new.opset:
        out.append(PlanChange("opset", "", _opset_text(old), _opset_text(new)))
    before, after = old.by_node(), new.by_node()
    for n in old.nodes:
        m = after.get(n.node)
        if m is None:
            out.append(PlanChange("node", n.node, _node_text(n), None))
        elif m.op != n.op:
            out.append(PlanChange("node", n.node, n.op, m.op))
        elif (m.precision, m.rule, m.accumulate) != (n.precision, n.rule, n.accumulate):
            detail = decision_change(old, n, new, m)
            out.append(PlanChange("node", n.node, _node_text(n), _node_text(m), detail))
    out.extend(
        PlanChange("node", n.node, None, _node_text(n)) for n in new.nodes if n.node not in before
    )
    return out + _quant_changes(old, new)


def _quant_changes(old: PrecisionPlan, new: PrecisionPlan) -> list[PlanChange]:
    """INT8: calibration settings, data and every scale that changed."""
    qa, qb = old.quantization, new.quantization
    if qa is None or qb is None:
        if qa is qb:
            return []
        return [PlanChange("quantization", "", "absent" if qa is None else "present",
                           "absent" if qb is None else "present")]  # fmt: skip
    a, b = (
        {k: d.get(k, _QUANT_DEFAULTS.get(k)) for k in _QUANT_KEYS}
        for d in (qa.to_dict(), qb.to_dict())
    )
    out = [
        PlanChange("quantization", k, repr(a[k]), repr(b[k])) for k in _QUANT_KEYS if a[k] != b[k]
    ]
    sa, sb = qa.scales(), qb.scales()
    for t in sorted(set(sa) | set(sb)):
        if sa.get(t) != sb.get(t):
            was = None if t not in sa else sa[t].hex()
            now = None if t not in sb else sb[t].hex()
            out.append(PlanChange("scale", t, was, now))
    wa = {w.tensor: w for w in qa.weights}
    wb = {w.tensor: w for w in qb.weights}
    for t in sorted(set(wa) | set(wb)):
        if wa.get(t) != wb.get(t):
            out.append(
                PlanChange(
                    "weight_scales",
                    t,
                    None if t not in wa else wa[t].sha256,
                    None if t not in wb else wb[t].sha256,
                )
            )
    return out


def diff_plans(old: PrecisionPlan | None, new: PrecisionPlan | None) -> list[str]:
    """One line per difference (empty when the plans are the same)."""
    return [c.line() for c in plan_changes(old, new)]
