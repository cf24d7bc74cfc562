"""Deciding a precision plan: every node's precision and the rule that decided it.

Deciding needs measurements (output magnitudes on calibration inputs), so it happens once,
when a plan is recorded; a locked build never re-decides but re-applies the stored plan
(:mod:`reprobuild.precision.apply`). :func:`match_plan` is the check both sides share: a
stored plan must name exactly the model's nodes, with the same op types.

Rules (the first that applies decides; documented for ``reprobuild show --precision``):

``always-fp32``
    A float32 node whose op is on :data:`ALWAYS_FP32_OPS` (Upsample, NonMaxSuppression,
    Celu: the ops ModelOpt AutoCast always keeps in FP32) stays in FP32, whatever the
    include options say.
``unsupported``
    The node stays as it is. Precision ``other``: it has no float tensor at all, or it is a
    Cast/CastLike/Shape/Size, which reads its input in whatever float type it arrives (a
    low-precision value widened to FP32 is exact, so no Cast back is needed). Precision
    ``fp32``: a float32 node that cannot or should not run in low precision:
    its op schema (at the model's opset) has no float16/bfloat16 form for its float32 type
    parameters; its op is in :data:`UNSUPPORTED_OPS` (shape/size, type casts, index outputs,
    random generators, quantization, control flow); it carries a subgraph; or its op is
    unknown (custom domains, local functions).
``observed``
    A node whose float tensors are already float16/bfloat16/double: recorded as found.
``constant``
    A node that only produces or moves constant data (``Constant``, ``ConstantOfShape``, or a
    data-movement op from :data:`CONSTANT_FOLLOW_OPS` whose inputs are all constant, as in
    weights built by ``ConstantOfShape -> Unsqueeze``). Such data is a weight, not an
    activation: it is judged by the consumer's ``initializer-range`` rule, never by
    ``magnitude``. Unless the ``name`` or ``op`` rule keeps it in FP32, it is stored in low
    precision when every consumer takes it in low precision, else in FP32.
``name``
    A ``--keep-fp32`` regular expression matches the node key (``re.search``: anywhere in
    the name; anchor with ``^...$`` for a full match).
``op``
    The node's op type is listed in ``--keep-fp32-op``.
``initializer-range``
    A constant input the node would take in low precision (an initializer, or constant data
    such as a ``ConstantOfShape`` weight) does not fit the low-precision type: a finite value
    with magnitude above its largest finite value (FP16 65504, BF16 about 3.39e38), or a
    nonzero value that rounds to zero *and* is not negligible, i.e. at least the type's
    epsilon (FP16 2**-10, BF16 2**-7) times the tensor's largest magnitude. (A value below
    that fraction is already lost when added to the tensor's largest element in that
    precision, so flushing it changes nothing that matters; a tensor of only tiny values,
    such as a 1e-8 scale, would become all zeros.)
``reduction-depth``
    With ``--max-reduction-depth N``: the node accumulates more than N input elements into
    one output element, measured on the calibration shapes: MatMul K (A's last dim); Gemm K
    (A's dim 1, or dim 0 with transA); Conv C_in/group x kernel volume (W.shape[1:]);
    ConvTranspose C_in/group x kernel volume; ReduceSum/Mean/SumSquare/L1/L2/LogSum/
    LogSumExp/Prod and GlobalAverage/GlobalLpPool input size / output size; Softmax and
    LogSoftmax the normalized axis (opset >= 13) or the flattened dims from ``axis`` on
    (older opsets); AveragePool/LpPool kernel volume; LayerNormalization the dims from
    ``axis`` on; InstanceNormalization the spatial size; GroupNormalization C/groups x
    spatial size; MeanVarianceNormalization the product of ``axes``. ReduceMax/Min and other
    ops accumulate nothing (exact in any precision) and are never kept by this rule.
``magnitude``
    On the calibration inputs (ONNX Runtime, CPU, all graph optimizations off, every
    intermediate exposed as an output), a float32 output the node would produce in low
    precision has a value with ``|x| > --max-output``, or a NaN/Inf; or a float32 input it
    would take in low precision exceeds that type's largest finite value (the Cast feeding
    it would overflow).
    With ``--magnitude-io`` the rule reads what ModelOpt's data_max reads: every tensor the
    node reads or writes on the calibration run, whatever its type (an int64 shape of 1000
    keeps its Reshape) and at any position, graph inputs included, initializers not.
``include``
    ``--nodes-to-include`` (a regex, searched in the node key) or ``--op-types-to-include``
    matches a node that one of ``name``, ``op``, ``initializer-range``, ``reduction-depth``
    or ``magnitude`` would keep in FP32: it runs in FP16/BF16 anyway, as ModelOpt's include
    options force it. Never over an overflow: a weight, input or output beyond the type's
    largest finite value (or a NaN/Inf on the calibration inputs) keeps its rule, as the
    converted node would compute inf.
``default``
    No rule kept it: the node runs in FP16/BF16. With ``--fp32-accumulate``, a converted
    MatMul/Gemm/Conv/ConvTranspose records ``accumulate: fp32``.

``initializer-range`` reads ``--init-max`` (ModelOpt's init_max) when given: a weight with
``|w| > init-max`` keeps its node, besides the overflow and flush-to-zero checks.

With ``explain``, every node a rule decided records what decided it in words (``why``,
:mod:`.reasons`): the pattern or op that matched, the measured magnitude or depth.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from reprobuild.errors import UsageError
from reprobuild.lock.plan import NodePrecision, PrecisionPlan, PrecisionSettings
from reprobuild.precision import reasons
from reprobuild.precision.analysis import (
    Analysis,
    NodeInfo,
    analyze,
    check_opset,
    observed_precision,
    reduction_depth,
    round_to,
)
from reprobuild.precision.calibration import check_feeds
from reprobuild.precision.measure import Stat, measure
from reprobuild.precision.ops import (
    ALWAYS_FP32_OPS,
    BFLOAT16,
    CONSTANT_FOLLOW_OPS,
    FLOAT,
    FLOAT16,
    LOW_EPS,
    LOW_MAX,
    LOW_TYPES,
    MATRIX_OPS,
    TYPE_AGNOSTIC_INPUT0,
)
from reprobuild.precision.options import check_mode

STALE = (
    "the lock was recorded for a different model; re-record the plan with "
    "`reprobuild build MODEL --precision ...` after deleting the lock's precision section"
)


# Smallest normal value of each low-precision type: a value at least this large never
# rounds to zero, so only smaller ones need the (costly) rounding in range_problem.
_LOW_NORMAL = {FLOAT16: 2.0**-14, BFLOAT16: 2.0**-126}


def range_problem(arr: np.ndarray, low: int, limit: float | None = None) -> str | None:
    """Why ``arr`` does not fit ``low`` (see ``initializer-range`` in the module docs);
    ``limit``: ``--init-max``, a magnitude bound below the type's own.

    Reads the largest magnitude as max(max x, -min x) and rounds only the values below the
    type's smallest normal: no copy of the whole tensor unless it holds NaN/Inf.
    """
    a = np.asarray(arr, dtype=np.float32)
    with np.errstate(all="ignore"):
        finite = np.isfinite(a)
        if not finite.all():
            a = a[finite]
        if a.size == 0:
            return None
        top = max(float(a.max()), -float(a.min())) + 0.0  # + 0.0: never -0.0
        if top > LOW_MAX[low]:
            return f"max |w| {top:g} > {LOW_MAX[low]:g}"
        if limit is not None and top > limit:
            return f"max |w| {reasons.num(top, limit)} > {limit:g} (--init-max)"
        edge = _LOW_NORMAL[low]
        mag = np.abs(a[(a > -edge) & (a < edge)])
    nonzero = mag[mag > 0]
    if nonzero.size:
        flushed = nonzero[round_to(nonzero, low).astype(np.float32) == 0]
        if flushed.size and float(flushed.max()) >= top * LOW_EPS[low]:
            return f"{flushed.size} values such as {float(flushed.max()):g} flush to zero"
    return None


@dataclass
class _Measured:
    """What the rules read from one calibration run, with fallbacks to feeds and weights."""

    an: Analysis
    feeds: dict[str, np.ndarray]
    stats: dict[str, Stat]
    values: dict[str, np.ndarray]
    more_feeds: Sequence[dict[str, np.ndarray]] = ()
    samples: int = 1

    def shape_of(self, name: str) -> tuple[int, ...] | None:
        if name in self.stats:
            return self.stats[name].shape
        if name in self.feeds:
            return tuple(self.feeds[name].shape)
        if name in self.an.inits:
            return tuple(int(d) for d in self.an.inits[name].dims)
        return None

    def const_value(self, name: str) -> np.ndarray | None:
        if name in self.an.inits:
            return numpy_helper.to_array(self.an.inits[name])
        return self.values.get(name)

    def input_max(self, name: str, any_type: bool = False) -> float:
        """max |x| of a measured tensor or a graph input; ``any_type``: integer inputs too."""
        if name in self.stats:
            return self.stats[name].max_abs
        return max(_feed_max(f, name, any_type) for f in (self.feeds, *self.more_feeds))


def _feed_max(feeds: dict[str, np.ndarray], name: str, any_type: bool = False) -> float:
    arr = feeds.get(name)
    if arr is None or not arr.size:
        return 0.0
    if np.issubdtype(arr.dtype, np.floating):
        return float(np.abs(arr).max()) if np.isfinite(arr).all() else float("inf")
    if any_type and np.issubdtype(arr.dtype, np.integer):
        return max(float(arr.max()), -float(arr.min())) + 0.0
    return 0.0


def derive_plan(
    model: onnx.ModelProto,
    mode: str,
    settings: PrecisionSettings,
    feeds: dict[str, np.ndarray],
    calibration: str,
    more_feeds: Sequence[dict[str, np.ndarray]] = (),
    explain: bool = False,
) -> PrecisionPlan:
    """Decide every node's precision by the rules (module docstring); never changes ``model``.

    ``more_feeds``: further batches of calibration inputs (an INT8 build's calibration set,
    run batch by batch); the magnitude rule reads the largest value over all of them.
    ``explain``: record each decision's words (``why``) in the plan, as builds do; without
    it the plan is what it was before the words existed, byte for byte."""
    check_mode(mode)
    low = LOW_TYPES[mode]
    an = analyze(model)
    check_opset(an, mode)
    for f in (feeds, *more_feeds):
        check_feeds("calibration inputs", f, an.real_inputs)
    rx = _Patterns(settings)

    conv = [info.convertible(low) for info in an.infos]
    follow = [
        info.node.op_type in CONSTANT_FOLLOW_OPS
        and bool(conv[i])
        and all(o in an.constant for o in info.node.output if o)
        for i, info in enumerate(an.infos)
    ]
    # constant tensors the initializer-range rule reads that ONNX Runtime must produce
    keep_values: set[str] = set()
    for i, info in enumerate(an.infos):
        if follow[i] or not conv[i]:
            continue
        for pos, x in enumerate(info.node.input):
            if x and x in an.constant and x not in an.inits and info.in_params[pos] in conv[i]:
                keep_values.add(x)
    m = _Measured(an, feeds, *measure(an, feeds, keep_values, more_feeds), more_feeds=more_feeds)
    m.samples = sum(_samples(f) for f in (feeds, *more_feeds))

    decided: list[_Decision | None] = [None] * len(an.infos)
    for i, info in enumerate(an.infos):
        if not follow[i]:
            decided[i] = _decide(info, conv[i], mode, low, settings, rx, m)
    # constant producers follow their consumers; consumers come later in graph order
    for i in reversed(range(len(an.infos))):
        if follow[i]:
            decided[i] = _decide_constant(an, i, conv, decided, mode, rx)

    nodes: list[NodePrecision] = []
    for i, info in enumerate(an.infos):
        d = decided[i]
        assert d is not None  # every node is decided by one of the two passes
        precision, rule, why = d
        accumulate = (
            "fp32"
            if settings.fp32_accumulate
            and precision == mode
            and rule == "default"
            and info.node.op_type in MATRIX_OPS
            else None
        )
        why = why if explain else None
        nodes.append(NodePrecision(info.key, info.node.op_type, precision, rule, accumulate, why))
    return PrecisionPlan(mode=mode, settings=settings, calibration=calibration, nodes=nodes)


def _samples(feeds: dict[str, np.ndarray]) -> int:
    """Samples in one feed dict: the first axis of its first input that has one."""
    for arr in feeds.values():
        if getattr(arr, "ndim", 0) >= 1:
            return int(arr.shape[0])
    return 1


_Decision = tuple[str, str, str | None]  # (precision, rule, why)


class _Patterns:
    """The name and op options, compiled once: which pattern matched is part of the why."""

    def __init__(self, settings: PrecisionSettings) -> None:
        self.keep = [re.compile(p) for p in settings.keep_fp32]
        self.include = [re.compile(p) for p in settings.nodes_to_include]
        self.keep_ops = settings.keep_fp32_ops
        self.include_ops = settings.op_types_to_include

    def kept(self, info: NodeInfo) -> tuple[str, str] | None:
        """(rule, why) when ``--keep-fp32`` or ``--keep-fp32-op`` keeps the node."""
        hit = next((p.pattern for p in self.keep if p.search(info.key)), None)
        if hit is not None:
            return "name", f"name matches --keep-fp32 {hit!r}"
        if info.node.op_type in self.keep_ops:
            return "op", f"{info.node.op_type} is in --keep-fp32-op"
        return None

    def included(self, info: NodeInfo) -> str | None:
        """The include option that forces the node into low precision, in words."""
        hit = next((p.pattern for p in self.include if p.search(info.key)), None)
        if hit is not None:
            return f"--nodes-to-include {hit!r}"
        if info.node.op_type in self.include_ops:
            return f"--op-types-to-include {info.node.op_type}"
        return None


def _decide(
    info: NodeInfo,
    conv: frozenset[str],
    mode: str,
    low: int,
    settings: PrecisionSettings,
    rx: _Patterns,
    m: _Measured,
) -> _Decision:
    """(precision, rule, why) of a node that computes: the first rule that applies decides,
    and an include option overrides any rule that kept it short of an overflow."""
    node = info.node
    an = m.an
    floats = info.float_types()
    if FLOAT in floats and node.op_type in ALWAYS_FP32_OPS and info.known_op:
        return ("fp32", "always-fp32", reasons.always_fp32(node.op_type))
    if not conv:
        if not info.known_op:
            obs = observed_precision(info, an.types)
            if obs in ("fp16", "bf16"):
                return (obs, "observed", f"already {obs} in the model")
            return (obs, "unsupported", reasons.unsupported(info, mode, an.opsets.get("", 0)))
        if node.op_type in TYPE_AGNOSTIC_INPUT0:  # reads any float type as it comes
            return ("other", "unsupported", f"{node.op_type} reads its input in any float type")
        if FLOAT in floats:
            return ("fp32", "unsupported", reasons.unsupported(info, mode, an.opsets.get("", 0)))
        if floats:
            obs = observed_precision(info, an.types)
            return (obs, "observed", f"already {obs} in the model")
        return ("other", "unsupported", "no float tensors")
    kept = _kept(info, conv, low, settings, rx, m)
    if kept is None:
        return (mode, "default", None)
    rule, why, overflow = kept
    forced = None if overflow else rx.included(info)
    if forced is not None:
        return (mode, "include", f"{forced} overrides {rule}: {why}")
    return ("fp32", rule, why)


def _kept(
    info: NodeInfo,
    conv: frozenset[str],
    low: int,
    settings: PrecisionSettings,
    rx: _Patterns,
    m: _Measured,
) -> tuple[str, str, bool] | None:
    """(rule, why, overflow) of the first rule that keeps a convertible node in FP32;
    ``overflow``: the node would compute inf in low precision (no include overrides it)."""
    node = info.node
    an = m.an
    hit = rx.kept(info)
    if hit is not None:
        return (*hit, False)
    for pos, x in enumerate(node.input):
        if (
            x
            and info.in_params[pos] in conv
            and x in an.constant
            and an.types.get(x) == FLOAT
            and (v := m.const_value(x)) is not None
            and (problem := range_problem(v, low, settings.init_max)) is not None
        ):
            overflow = problem.startswith("max |w|") and "--init-max" not in problem
            return ("initializer-range", f"weight {x!r}: {problem}", overflow)
    if settings.max_reduction_depth is not None and (
        (depth := reduction_depth(node, m.shape_of, an.opsets.get("", 1))) is not None
        and depth > settings.max_reduction_depth
    ):
        return (
            "reduction-depth",
            f"reduces {depth} elements > {settings.max_reduction_depth}",
            False,
        )
    on = f"on {reasons.samples_text(m.samples)}"
    limit = settings.max_output
    for pos, o in enumerate(node.output):
        if o and info.out_params[pos] in conv and o in m.stats and m.stats[o].max_abs > limit:
            top = m.stats[o].max_abs
            if not np.isfinite(top):
                return ("magnitude", f"output has NaN or Inf {on}", True)
            why = f"|output| max {reasons.num(top, limit)} > {limit:g} {on}"
            return ("magnitude", why, top > LOW_MAX[low])
    for pos, x in enumerate(node.input):
        if (
            x
            and info.in_params[pos] in conv
            and x not in an.constant
            and an.types.get(x) == FLOAT
            and (top := m.input_max(x)) > LOW_MAX[low]
        ):
            # An FP32 value beyond the low-precision range would overflow in the Cast that
            # feeds this node (inf, then NaN downstream): the node stays in FP32.
            why = f"|input| {x!r} max {reasons.num(top, LOW_MAX[low])} > {LOW_MAX[low]:g} {on}"
            return ("magnitude", why, True)
    if settings.magnitude_io:  # every tensor the node reads or writes, as ModelOpt reads them
        for x in node.input:
            if x and x not in an.inits and (top := m.input_max(x, any_type=True)) > limit:
                why = f"|input| {x!r} max {reasons.num(top, limit)} > {limit:g} {on}"
                return ("magnitude", why, not np.isfinite(top))
        for o in node.output:
            if o and o in m.stats and (top := m.stats[o].max_abs) > limit:
                why = f"|output| {o!r} max {reasons.num(top, limit)} > {limit:g} {on}"
                return ("magnitude", why, not np.isfinite(top))
    return None


def _decide_constant(
    an: Analysis,
    i: int,
    conv: list[frozenset[str]],
    decided: list[_Decision | None],
    mode: str,
    rx: _Patterns,
) -> _Decision:
    """A constant producer is low precision only when every consumer takes it so."""
    info = an.infos[i]
    hit = rx.kept(info)
    if hit is not None and rx.included(info) is None:
        return ("fp32", *hit)
    for o in info.node.output:
        if not o or an.types.get(o) != FLOAT:
            continue
        uses = an.consumers.get(o, [])
        if o in an.output_names or o in an.subgraph_refs:
            return ("fp32", "constant", "constant data that is a graph output")
        if not uses:
            return ("fp32", "constant", "constant data no node reads")
        for j, pos in uses:
            d = decided[j]
            if d is None or d[0] != mode or an.infos[j].in_params[pos] not in conv[j]:
                who = an.infos[j].key
                return ("fp32", "constant", f"constant data; {who} takes it in FP32")
    return (mode, "constant", f"constant data; every consumer takes it in {mode}")


def match_plan(an: Analysis, plan: PrecisionPlan) -> list[NodePrecision]:
    """The plan's entry for every node in graph order; a plan for another model is exit 2."""
    by_node = plan.by_node()
    keys = {info.key for info in an.infos}
    for n in plan.nodes:
        if n.node not in keys:
            raise UsageError(
                f"the precision plan names node {n.node!r}, which is not in the model: {STALE}"
            )
    out: list[NodePrecision] = []
    for info in an.infos:
        entry = by_node.get(info.key)
        if entry is None:
            raise UsageError(
                f"model node {info.key!r} ({info.node.op_type}) is missing from the precision "
                f"plan: {STALE}"
            )
        if entry.op != info.node.op_type:
            raise UsageError(
                f"node {info.key!r} is a {info.node.op_type} in the model but a {entry.op} in "
                f"the precision plan: {STALE}"
            )
        out.append(entry)
    return out
