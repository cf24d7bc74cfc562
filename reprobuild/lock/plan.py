"""The lock's ``precision`` section: which nodes run in which precision, and why.

Strongly typed TensorRT takes precision from the ONNX graph, so the plan is part of what a
lock must pin. This module only holds the data and its validation (the lock loader imports
it, so it stays free of onnx/numpy); deciding and applying a plan lives in
``reprobuild.precision``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reprobuild.lock.schema import Doc, Path_

if TYPE_CHECKING:  # read only for INT8 plans: most locks never load it
    from reprobuild.lock.qplan import QuantPlan

MODES = ("fp16", "bf16", "int8", "observed")
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "other")
RULES = (
    "default",  # converted: no rule kept it in FP32
    "name",  # --keep-fp32 regex matched the node name
    "op",  # --keep-fp32-op matched the op type
    "magnitude",  # an output exceeded --max-output on the calibration inputs
    "initializer-range",  # a weight does not fit the low-precision range
    "reduction-depth",  # reduces over more than --max-reduction-depth elements
    "unsupported",  # op has no low-precision form; stays as is
    "constant",  # constant data (Constant, ConstantOfShape, moved constants): follows consumers
    "observed",  # already mixed precision: types read from the graph
)


@dataclass(frozen=True)
class PrecisionSettings:
    keep_fp32: tuple[str, ...] = ()
    keep_fp32_ops: tuple[str, ...] = ()
    max_output: float = 512.0
    max_reduction_depth: int | None = None
    fp32_accumulate: bool = False
    keep_io_types: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "keep_fp32": list(self.keep_fp32),
            "keep_fp32_ops": list(self.keep_fp32_ops),
            "max_output": float(self.max_output),
            "max_reduction_depth": self.max_reduction_depth,
            "fp32_accumulate": self.fp32_accumulate,
            "keep_io_types": self.keep_io_types,
        }


@dataclass(frozen=True)
class NodePrecision:
    node: str
    op: str
    precision: str
    rule: str
    accumulate: str | None = None  # "fp32" for a matrix product kept on FP32 accumulation

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "node": self.node,
            "op": self.op,
            "precision": self.precision,
            "rule": self.rule,
        }
        if self.accumulate is not None:
            d["accumulate"] = self.accumulate
        return d


@dataclass
class PrecisionPlan:
    mode: str
    settings: PrecisionSettings = field(default_factory=PrecisionSettings)
    calibration: str | None = None  # e.g. "seeded:0" or "sha256:<hex> (inputs.npz)"
    nodes: list[NodePrecision] = field(default_factory=list)
    # mode int8: calibration and every scale. Left out of repr() so that the loader's
    # output for existing locks stays what tests/lock/test_golden.py holds it to.
    quantization: QuantPlan | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "mode": self.mode,
            "settings": self.settings.to_dict(),
            "calibration": self.calibration,
        }
        if self.quantization is not None:  # absent otherwise: older locks keep their bytes
            d["quantization"] = self.quantization.to_dict()
        d["nodes"] = [n.to_dict() for n in self.nodes]
        return d

    def by_node(self) -> dict[str, NodePrecision]:
        return {n.node: n for n in self.nodes}


def plan_from_data(doc: Doc, value: Any, path: Path_) -> PrecisionPlan:
    m = doc.mapping(value, path, ("mode", "nodes"), ("settings", "calibration", "quantization"))
    mode = doc.choice(m["mode"], path + ("mode",), MODES)
    settings = PrecisionSettings()
    if m.get("settings") is not None:
        sp = path + ("settings",)
        s = doc.mapping(
            m["settings"],
            sp,
            (),
            (
                "keep_fp32",
                "keep_fp32_ops",
                "max_output",
                "max_reduction_depth",
                "fp32_accumulate",
                "keep_io_types",
            ),
        )
        settings = PrecisionSettings(
            keep_fp32=tuple(doc.str_list(s.get("keep_fp32", []), sp + ("keep_fp32",)) or ()),
            keep_fp32_ops=tuple(
                doc.str_list(s.get("keep_fp32_ops", []), sp + ("keep_fp32_ops",)) or ()
            ),
            max_output=doc.number(s.get("max_output", 512.0), sp + ("max_output",)),
            max_reduction_depth=doc.integer(
                s.get("max_reduction_depth"), sp + ("max_reduction_depth",), True, minimum=1
            ),
            fp32_accumulate=doc.boolean(s.get("fp32_accumulate", False), sp + ("fp32_accumulate",)),
            keep_io_types=doc.boolean(s.get("keep_io_types", True), sp + ("keep_io_types",)),
        )
    nodes: list[NodePrecision] = []
    seen: set[str] = set()
    for i, item in enumerate(doc.seq(m["nodes"], path + ("nodes",))):
        p = path + ("nodes", i)
        n = doc.mapping(item, p, ("node", "op", "precision", "rule"), ("accumulate",))
        name = doc.string(n["node"], p + ("node",))
        if name in seen:
            doc.fail(p + ("node",), f"node {name!r} appears twice", "keep one entry per node")
        seen.add(name)
        acc = n.get("accumulate")
        nodes.append(
            NodePrecision(
                node=name,
                op=doc.string(n["op"], p + ("op",)),
                precision=doc.choice(n["precision"], p + ("precision",), PRECISIONS),
                rule=doc.choice(n["rule"], p + ("rule",), RULES),
                accumulate=None
                if acc is None
                else doc.choice(acc, p + ("accumulate",), ("fp32", "fp16")),
            )
        )
    quantization = None
    if m.get("quantization") is not None:
        from reprobuild.lock.qplan import quant_from_data

        quantization = quant_from_data(doc, m["quantization"], path + ("quantization",))
    return PrecisionPlan(
        mode=mode,
        settings=settings,
        calibration=doc.string(m.get("calibration"), path + ("calibration",), optional=True),
        nodes=nodes,
        quantization=quantization,
    )
