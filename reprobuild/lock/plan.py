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

if TYPE_CHECKING:  # read only for INT8 plans and converted models: most locks never load it
    from reprobuild.lock.qplan import OpsetConversion, QuantPlan

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
    "include",  # --nodes-to-include / --op-types-to-include overrode a rule that kept it FP32
    "always-fp32",  # on the always-FP32 op list (Upsample, NonMaxSuppression, Celu)
)


@dataclass(frozen=True)
class PrecisionSettings:
    """The rule options a plan was decided with (``reprobuild build --precision`` options).

    The fields after ``keep_io_types`` came later: ``to_dict`` writes each only when it is
    not at its default, and a lock without one reads as the default, so older locks keep
    their bytes and build what they built. ``repr=False`` keeps them out of ``repr()``, which
    tests/lock/test_golden.py holds to what the loader gave for those locks.
    """

    keep_fp32: tuple[str, ...] = ()
    keep_fp32_ops: tuple[str, ...] = ()
    max_output: float = 512.0
    max_reduction_depth: int | None = None
    fp32_accumulate: bool = False
    keep_io_types: bool = True
    # regexes / op types forced into low precision over the name, op, magnitude,
    # reduction-depth and initializer-range rules (never over an overflow)
    nodes_to_include: tuple[str, ...] = field(default=(), repr=False)
    op_types_to_include: tuple[str, ...] = field(default=(), repr=False)
    init_max: float | None = field(default=None, repr=False)  # None: the type's largest value
    # initializers larger than this (bytes, as FP32) are cast by a Cast node at run time
    init_conversion_max_bytes: int | None = field(default=None, repr=False)
    magnitude_io: bool = field(default=False, repr=False)  # magnitude: every input/output
    opset: int | None = field(default=None, repr=False)  # --opset: convert the model to it

    def values(self) -> dict[str, Any]:
        """Every setting, defaults included: what comparisons read."""
        return {
            "keep_fp32": list(self.keep_fp32),
            "keep_fp32_ops": list(self.keep_fp32_ops),
            "max_output": float(self.max_output),
            "max_reduction_depth": self.max_reduction_depth,
            "fp32_accumulate": self.fp32_accumulate,
            "keep_io_types": self.keep_io_types,
            "nodes_to_include": list(self.nodes_to_include),
            "op_types_to_include": list(self.op_types_to_include),
            "init_max": None if self.init_max is None else float(self.init_max),
            "init_conversion_max_bytes": self.init_conversion_max_bytes,
            "magnitude_io": self.magnitude_io,
            "opset": self.opset,
        }

    def to_dict(self) -> dict[str, Any]:
        """What the lock holds: the first six always, the later ones only when set."""
        d = self.values()
        for k in _LATER:
            if d[k] == _LATER[k]:
                del d[k]
        return d


_LATER: dict[str, Any] = {
    "nodes_to_include": [],
    "op_types_to_include": [],
    "init_max": None,
    "init_conversion_max_bytes": None,
    "magnitude_io": False,
    "opset": None,
}


@dataclass(frozen=True)
class NodePrecision:
    node: str
    op: str
    precision: str
    rule: str
    accumulate: str | None = None  # "fp32" for a matrix product kept on FP32 accumulation
    # What decided it, in words ("|output| max 1.3e3 > 512 on 1 calibration sample"):
    # written only when recorded (older locks have none); out of repr() as above.
    why: str | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "node": self.node,
            "op": self.op,
            "precision": self.precision,
            "rule": self.rule,
        }
        if self.accumulate is not None:
            d["accumulate"] = self.accumulate
        if self.why is not None:
            d["why"] = self.why
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
    # fp16/bf16: the model was converted to a newer opset before planning (``--opset``, or
    # automatically when the precision needs it); a locked build converts it again.
    opset: OpsetConversion | None = field(default=None, repr=False)
    # Engine layers the recording build ran in another precision than planned (TensorRT
    # may fuse a Cast without naming it in Metadata): the recording's own verdict, so a
    # locked build fails only where it changes. Written only when non-empty.
    engine_differs: tuple[str, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "mode": self.mode,
            "settings": self.settings.to_dict(),
            "calibration": self.calibration,
        }
        if self.opset is not None:  # absent otherwise: older locks keep their bytes
            d["opset"] = self.opset.to_dict()
        if self.quantization is not None:  # absent otherwise: older locks keep their bytes
            d["quantization"] = self.quantization.to_dict()
        d["nodes"] = [n.to_dict() for n in self.nodes]
        if self.engine_differs:  # absent otherwise: older locks keep their bytes
            d["engine_differs"] = list(self.engine_differs)
        return d

    def by_node(self) -> dict[str, NodePrecision]:
        return {n.node: n for n in self.nodes}


def plan_from_data(doc: Doc, value: Any, path: Path_) -> PrecisionPlan:
    m = doc.mapping(
        value,
        path,
        ("mode", "nodes"),
        ("settings", "calibration", "opset", "quantization", "engine_differs"),
    )
    mode = doc.choice(m["mode"], path + ("mode",), MODES)
    settings = PrecisionSettings()
    if m.get("settings") is not None:
        sp = path + ("settings",)
        s = doc.mapping(
            m["settings"],
            sp,
            (),
            tuple(PrecisionSettings().values()),
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
            nodes_to_include=tuple(
                doc.str_list(s.get("nodes_to_include", []), sp + ("nodes_to_include",)) or ()
            ),
            op_types_to_include=tuple(
                doc.str_list(s.get("op_types_to_include", []), sp + ("op_types_to_include",)) or ()
            ),
            init_max=doc.number(s.get("init_max"), sp + ("init_max",), True),
            init_conversion_max_bytes=doc.integer(
                s.get("init_conversion_max_bytes"),
                sp + ("init_conversion_max_bytes",),
                True,
                minimum=0,
            ),
            magnitude_io=doc.boolean(s.get("magnitude_io", False), sp + ("magnitude_io",)),
            opset=doc.integer(s.get("opset"), sp + ("opset",), True, minimum=1),
        )
    nodes: list[NodePrecision] = []
    seen: set[str] = set()
    for i, item in enumerate(doc.seq(m["nodes"], path + ("nodes",))):
        p = path + ("nodes", i)
        n = doc.mapping(item, p, ("node", "op", "precision", "rule"), ("accumulate", "why"))
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
                why=doc.string(n.get("why"), p + ("why",), optional=True),
            )
        )
    opset = None
    if m.get("opset") is not None:
        from reprobuild.lock.qplan import opset_from_data

        opset = opset_from_data(doc, m["opset"], path + ("opset",))
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
        opset=opset,
        engine_differs=tuple(
            doc.str_list(m.get("engine_differs", []), path + ("engine_differs",)) or ()
        ),
    )
