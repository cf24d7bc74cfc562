"""Applying a precision plan: a pure graph rewrite that follows the plan and nothing else.

A locked build re-applies the recorded plan verbatim, and the converted model's bytes key the
recording cache and decide the engine, so the rewrite is deterministic: node order, Cast
placement and every new name depend only on the model and the plan.

Why hand-written proto edits and not a graph library. ``onnx-ir`` (1.1) was tried: its round
trip drops model fields that are set but empty (``producer_version``, ``domain``,
``doc_string``, ``model_version``; every model in onnx's light model zoo has them), so the
converted bytes would change, and it adds ``value_info`` for every intermediate. It has no
plan-driven Cast insertion either, so the logic below (which type each input is taken in,
shared Casts, fresh names, FP32 accumulation, kept graph I/O types) would stay as it is and
only the one-line proto edits would change. ONNX Runtime's ``float16`` tool converts by its
own op list and names its Casts itself (``graph_input_cast_0``...), which is not a recorded
plan.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from reprobuild.errors import UsageError
from reprobuild.lock.plan import NodePrecision, PrecisionPlan
from reprobuild.precision.analysis import (
    Analysis,
    analyze,
    check_opset,
    observed_precision,
    round_to,
    subgraph_names,
)
from reprobuild.precision.ops import (
    BFLOAT16,
    FLOAT,
    FLOAT16,
    GENERATOR_OPS,
    LOW_TYPES,
    MATRIX_OPS,
    TYPE_AGNOSTIC_INPUT0,
    TYPE_NAME,
)
from reprobuild.precision.rules import STALE, match_plan


class _Names:
    """Fresh, deterministic tensor/node names that collide with nothing in the graph."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        used: set[str] = {x for n in graph.node for x in (*n.input, *n.output, n.name)}
        used.update(i.name for i in graph.input)
        used.update(o.name for o in graph.output)
        used.update(t.name for t in graph.initializer)
        used.update(v.name for v in graph.value_info)
        subgraph_names(graph, used)
        self.used = used

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name


def _convert_generator(node: onnx.NodeProto, low: int) -> None:
    """Retype a Constant/ConstantOfShape node's value attribute in place."""
    value: np.ndarray | None = None
    keep: list[onnx.AttributeProto] = []
    for a in node.attribute:
        if a.name == "value" and a.t.data_type == FLOAT:
            value = numpy_helper.to_array(a.t)
        elif a.name == "value_float":
            value = np.array(a.f, dtype=np.float32)
        elif a.name == "value_floats":
            value = np.array(list(a.floats), dtype=np.float32)
        else:
            keep.append(a)
            continue
    if value is None:
        if node.op_type != "ConstantOfShape":
            return
        value = np.zeros((1,), dtype=np.float32)  # the ConstantOfShape default
    del node.attribute[:]
    node.attribute.extend(keep)
    node.attribute.append(
        helper.make_attribute("value", numpy_helper.from_array(round_to(value, low)))
    )


def _noop_cast_to_identity(
    node: onnx.NodeProto, was: tuple[int | None, int | None], now: tuple[int | None, int | None]
) -> None:
    """A Cast or CastLike that the conversion made a no-op becomes an Identity.

    ``was`` and ``now`` are its (input, target) types in the model and as converted. It
    computes nothing either way, but ONNX Runtime before 1.32 cannot load a model with a
    FLOAT16-to-FLOAT16 Cast between FLOAT16 nodes its CPU provider runs in FP32 (the Casts
    it inserts retype the Cast's output to FP32, and the load fails), and the accuracy check
    runs the converted model in whatever ONNX Runtime is installed. The node keeps its name,
    so the plan and the engine's layers still find it. A Cast that was a no-op in the model
    itself is the model's own and stays.
    """
    if now[0] is None or now[0] != now[1] or was[0] == was[1]:
        return
    node.op_type = "Identity"
    del node.attribute[:]
    del node.input[1:]


def _check_observed(an: Analysis, entries: list[NodePrecision]) -> None:
    """An observed plan changes nothing; it only has to still describe the model."""
    for info, e in zip(an.infos, entries, strict=True):
        seen = observed_precision(info, an.types)
        if seen != e.precision:
            raise UsageError(
                f"node {info.key!r} has precision {seen} in the model but {e.precision} "
                f"in the observed precision plan: {STALE}"
            )


def _converted_nodes(
    an: Analysis, entries: list[NodePrecision], mode: str, low: int
) -> tuple[list[frozenset[str]], list[bool]]:
    """Per node: the type parameters that change to ``low``, and whether it accumulates in FP32.

    A plan that asks for something this model cannot do (stale, or edited by hand) is exit 2
    here, before any rewriting.
    """
    conv: list[frozenset[str]] = []
    acc: list[bool] = []
    for info, e in zip(an.infos, entries, strict=True):
        c: frozenset[str] = frozenset()
        if e.precision == mode:
            c = info.convertible(low)
            if not c and FLOAT in info.float_types():
                raise UsageError(
                    f"the precision plan runs node {info.key!r} ({info.node.op_type}) in "
                    f"{e.precision}, but it cannot run in {e.precision} in this model: {STALE}"
                )
        elif e.precision in ("fp16", "bf16"):
            seen = observed_precision(info, an.types)
            if seen != e.precision:
                raise UsageError(
                    f"the precision plan runs node {info.key!r} in {e.precision}, but a "
                    f"{mode} plan can only convert to {mode}: {STALE}"
                )
        a = e.accumulate == "fp32"
        if a and (info.node.op_type not in MATRIX_OPS or not c):
            raise UsageError(
                f"the precision plan asks FP32 accumulation for node {info.key!r} "
                f"({info.node.op_type}), which is not a converted matrix product "
                "(MatMul/Gemm/Conv/ConvTranspose); fix or re-record the lock"
            )
        conv.append(c)
        acc.append(a)
    return conv, acc


def apply_plan(model: onnx.ModelProto, plan: PrecisionPlan) -> onnx.ModelProto:
    """Rewrite ``model`` to the types ``plan`` records, verbatim; ``model`` is not changed.

    Low-precision nodes get their float32 initializers converted (in place when every use
    is low precision and the initializer is not a graph input, else as a ``<name>__fp16``
    copy) and Casts on their other float32 inputs; nodes the plan keeps in FP32 get Casts
    back; with ``init_conversion_max_bytes``, an initializer larger than that (as FP32)
    stays FP32 and a Cast converts it at run time. With ``keep_io_types`` the graph's
    inputs and outputs keep their types (an output
    produced in low precision is computed into ``<name>__fp16`` and cast back). A node with
    ``accumulate: fp32`` takes its low-precision inputs cast up to FP32, computes in FP32,
    and its result is cast back to low precision.
    """
    an = analyze(model)
    entries = match_plan(an, plan)
    if plan.mode == "observed":
        _check_observed(an, entries)
        out = onnx.ModelProto()
        out.CopyFrom(model)
        return out
    if plan.mode not in LOW_TYPES:
        raise UsageError(f"precision plan mode {plan.mode!r} is not fp16, bf16 or observed")
    check_opset(an, plan.mode)
    low = LOW_TYPES[plan.mode]
    low_name = TYPE_NAME[low]
    keep_io = plan.settings.keep_io_types
    graph = an.graph

    conv, acc = _converted_nodes(an, entries, plan.mode, low)

    def in_target(i: int, pos: int) -> int | None:
        """The type node i takes input pos in; None: whatever type the value has now."""
        info = an.infos[i]
        x = info.node.input[pos]
        t = an.types.get(x)
        if t == FLOAT and info.in_params[pos] in conv[i]:
            return low
        if pos == 0 and t == FLOAT and info.node.op_type in TYPE_AGNOSTIC_INPUT0:
            return None
        return t

    def fed_type(i: int, pos: int) -> int | None:
        """The type node i's input pos has as the converted node takes it."""
        x = an.infos[i].node.input[pos]
        return in_target(i, pos) or cur.get(x, (x, None))[1]

    pinned = set(an.subgraph_refs)
    if keep_io:
        pinned.update(an.output_names)
    # what type each tensor is wanted in, by its consumers
    wanted: dict[str, set[int | None]] = {}
    for i, info in enumerate(an.infos):
        for pos, x in enumerate(info.node.input):
            if x:
                wanted.setdefault(x, set()).add(in_target(i, pos))
    for x in (*an.output_names, *an.subgraph_refs):
        wanted.setdefault(x, set()).add(an.types.get(x))

    names = _Names(graph)
    out_model = onnx.ModelProto()
    out_model.CopyFrom(model)
    g = out_model.graph
    del g.node[:]
    # current (name, type) holding each original tensor's value
    cur: dict[str, tuple[str, int | None]] = {}
    for x in an.input_names:
        cur[x] = (x, an.types.get(x))
    new_inits: list[onnx.TensorProto] = []
    init_by_name = {t.name: t for t in g.initializer}
    limit = plan.settings.init_conversion_max_bytes

    def stored_low(name: str) -> bool:
        """Whether a float32 initializer taken in low precision is stored converted; one
        over ``init_conversion_max_bytes`` (its FP32 size) is cast at run time instead."""
        return limit is None or 4 * int(np.prod(an.inits[name].dims, dtype=np.int64)) <= limit

    for name, t in an.inits.items():
        cur[name] = (name, t.data_type)
        if (
            t.data_type == FLOAT
            and stored_low(name)
            and name not in an.input_names
            and wanted.get(name) == {low}
            and name not in pinned
        ):
            conv_t = numpy_helper.from_array(round_to(numpy_helper.to_array(t), low), name)
            init_by_name[name].CopyFrom(conv_t)
            cur[name] = (name, low)
    if not keep_io:
        for vi in g.input:
            x = vi.name
            if (
                x not in an.inits
                and an.types.get(x) == FLOAT
                and wanted.get(x) == {low}
                and x not in pinned
            ):
                vi.type.tensor_type.elem_type = low
                cur[x] = (x, low)

    new_types: dict[str, int] = {}
    shape_src: dict[str, str] = {}
    cache: dict[tuple[str, int], str] = {}
    new_inputs: list[onnx.ValueInfoProto] = []
    nodes_out: list[onnx.NodeProto] = []

    def cast(src_name: str, to: int, base: str, origin: str) -> str:
        dst = names.fresh(base)
        nodes_out.append(helper.make_node("Cast", [src_name], [dst], name=dst, to=to))
        new_types[dst] = to
        shape_src[dst] = origin
        return dst

    def value_in(x: str, t: int | None) -> str:
        now, tnow = cur.get(x, (x, None))  # an undefined name is left for the checker
        if t is None or tnow is None or t == tnow:
            return now
        if (x, t) in cache:
            return cache[(x, t)]
        if (
            x in an.inits
            and an.inits[x].data_type == FLOAT
            and t in (FLOAT16, BFLOAT16)
            and stored_low(x)
        ):
            dst = names.fresh(f"{x}__{TYPE_NAME[t]}")
            arr = round_to(numpy_helper.to_array(an.inits[x]), t)
            new_inits.append(numpy_helper.from_array(arr, dst))
            if out_model.ir_version < 4:  # IR < 4: every initializer is also a graph input
                new_inputs.append(helper.make_tensor_value_info(dst, t, list(arr.shape)))
            new_types[dst] = t
            shape_src[dst] = x
        else:
            dst = cast(now, t, f"{x}__{TYPE_NAME.get(t, str(t))}", x)
        cache[(x, t)] = dst
        return dst

    for i, info in enumerate(an.infos):
        node = onnx.NodeProto()
        node.CopyFrom(info.node)
        for pos, x in enumerate(info.node.input):
            if not x:
                continue
            name = value_in(x, in_target(i, pos))
            if acc[i] and info.in_params[pos] in conv[i] and an.types.get(x) == FLOAT:
                key = (name, FLOAT)
                if key not in cache:
                    cache[key] = cast(name, FLOAT, f"{name}__fp32", x)
                name = cache[key]
            node.input[pos] = name
        if conv[i] and info.node.op_type in GENERATOR_OPS:
            _convert_generator(node, low)
        if (node.op_type, len(node.input)) in (("Cast", 1), ("CastLike", 2)):
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            x, like = info.node.input[0], info.node.input[-1]  # a Cast: its ``to``
            was = (an.types.get(x), to or an.types.get(like))
            now = (fed_type(i, 0), to or fed_type(i, len(node.input) - 1))
            _noop_cast_to_identity(node, was, now)
        after: list[onnx.NodeProto] = []
        for pos, o in enumerate(info.node.output):
            if not o:
                continue
            t = an.types.get(o)
            if not (t == FLOAT and info.out_params[pos] in conv[i]):
                cur[o] = (o, t)
                continue
            holder = o if o not in pinned else names.fresh(f"{o}__{low_name}")
            if acc[i]:
                wide = names.fresh(f"{o}__fp32acc")
                node.output[pos] = wide
                new_types[wide] = FLOAT
                shape_src[wide] = o
                down = names.fresh(f"{wide}__to_{low_name}")
                after.append(helper.make_node("Cast", [wide], [holder], name=down, to=low))
            else:
                node.output[pos] = holder
            if holder != o:
                new_types[holder] = low
                shape_src[holder] = o
                back = names.fresh(f"{holder}__to_{TYPE_NAME[FLOAT]}")
                after.append(helper.make_node("Cast", [holder], [o], name=back, to=t))
                cache[(o, FLOAT)] = o
            else:
                new_types[o] = low
            cur[o] = (holder, low)
        nodes_out.append(node)
        nodes_out.extend(after)

    g.node.extend(nodes_out)
    g.initializer.extend(new_inits)
    g.input.extend(new_inputs)
    if not keep_io:
        for vi in g.output:
            now, tnow = cur.get(vi.name, (vi.name, None))
            if tnow is not None and now == vi.name:
                vi.type.tensor_type.elem_type = tnow
    _set_value_info(an, g, new_types, shape_src)
    return out_model


def _set_value_info(
    an: Analysis, g: onnx.GraphProto, new_types: dict[str, int], shape_src: dict[str, str]
) -> None:
    """Type every intermediate tensor: a strongly typed graph states its types."""
    io_names = {i.name for i in g.input} | {o.name for o in g.output}
    io_names |= {t.name for t in g.initializer}
    del g.value_info[:]
    done: set[str] = set()
    for node in g.node:
        for o in node.output:
            if not o or o in io_names or o in done:
                continue
            done.add(o)
            t = new_types.get(o, an.types.get(o))
            if t is None:
                continue
            vi = g.value_info.add()
            vi.name = o
            vi.type.tensor_type.elem_type = t
            shape = an.shapes.get(shape_src.get(o, o))
            if shape is not None:
                vi.type.tensor_type.shape.CopyFrom(shape)
