"""What the rules and the rewrite need to know about a graph, computed once per model.

Node identity. Plans name nodes by :func:`node_keys`: the node's name, or
``node_of_<first output>`` for an unnamed node (the name TensorRT's ONNX parser gives such a
layer); a repeated name gets ``#2``, ``#3``... in graph order.

Types come from ONNX shape inference plus the initializers, and each node's schema (at the
model's opset) says which of its tensors share a type parameter, so deriving a plan and
applying it agree on which tensors a node would take in low precision.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from reprobuild.errors import UsageError
from reprobuild.lock.plan import NodePrecision, PrecisionPlan, PrecisionSettings
from reprobuild.precision.ops import (
    BFLOAT16,
    FLOAT,
    FLOAT16,
    FLOAT_TYPES,
    GENERATOR_OPS,
    MIN_OPSET,
    NONDETERMINISTIC_OPS,
    REDUCE_RATIO_OPS,
    TENSOR_STR,
    TYPE_AGNOSTIC_INPUT0,
    UNSUPPORTED_OPS,
)

_SCHEMA_CACHE: dict[tuple[str, str, int], Any] = {}


def node_keys(model_or_graph: onnx.ModelProto | onnx.GraphProto) -> list[str]:
    """The plan's name for every node, in graph order (see the module docstring)."""
    graph = model_or_graph.graph if isinstance(model_or_graph, onnx.ModelProto) else model_or_graph
    used: set[str] = set()
    keys: list[str] = []
    for i, node in enumerate(graph.node):
        outs = [o for o in node.output if o]
        base = node.name or (f"node_of_{outs[0]}" if outs else f"node_{i}")
        key, k = base, 1
        while key in used:
            k += 1
            key = f"{base}#{k}"
        used.add(key)
        keys.append(key)
    return keys


@dataclass
class NodeInfo:
    """One node and the schema facts that decide whether it can change type."""

    index: int
    key: str
    node: onnx.NodeProto
    known_op: bool
    has_subgraph: bool
    in_params: list[str | None]  # the schema type parameter of each input (None: fixed/unknown)
    out_params: list[str | None]
    bound: dict[str, int]  # type parameter -> element type, from tensors with a known type
    allowed: dict[str, frozenset[str]]

    def convertible(self, low: int) -> frozenset[str]:
        """Type parameters bound to float32 that this op can also run in ``low``."""
        if not self.known_op or self.has_subgraph or self.node.op_type in UNSUPPORTED_OPS:
            return frozenset()
        want = TENSOR_STR[low]
        in_side = {p for p in self.in_params if p is not None}
        return frozenset(
            p
            for p, t in self.bound.items()
            if t == FLOAT
            and want in self.allowed.get(p, ())
            # an output-only parameter is typed by an attribute, which only generators update
            and (p in in_side or self.node.op_type in GENERATOR_OPS)
        )

    def float_types(self) -> set[int]:
        return {t for t in self.bound.values() if t in FLOAT_TYPES}


@dataclass
class Analysis:
    """A model with its inferred types, shapes, constants and consumers, read once."""

    model: onnx.ModelProto
    opsets: dict[str, int]
    infos: list[NodeInfo]
    types: dict[str, int]  # elem type of every tensor whose type is known
    shapes: dict[str, onnx.TensorShapeProto]  # static shape info where known
    inits: dict[str, onnx.TensorProto]
    input_names: list[str]  # every graph input (IR < 4: initializers too)
    real_inputs: list[onnx.ValueInfoProto]  # graph inputs that are not initializers
    output_names: list[str]
    consumers: dict[str, list[tuple[int, int]]]
    constant: set[str]
    subgraph_refs: set[str]

    @property
    def graph(self) -> onnx.GraphProto:
        return self.model.graph


def _schema(op: str, domain: str, version: int | None) -> Any | None:
    if version is None:
        return None
    key = (op, domain, version)
    if key not in _SCHEMA_CACHE:
        try:
            _SCHEMA_CACHE[key] = onnx.defs.get_schema(op, version, domain)
        except onnx.defs.SchemaError:
            _SCHEMA_CACHE[key] = None
    return _SCHEMA_CACHE[key]


def subgraph_names(graph: onnx.GraphProto, out: set[str]) -> None:
    """Add every tensor name a graph's nodes (and their subgraphs) read to ``out``."""
    for node in graph.node:
        out.update(x for x in node.input if x)
        for attr in node.attribute:
            for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
                subgraph_names(g, out)


def _tensor_types(
    model: onnx.ModelProto,
) -> tuple[dict[str, int], dict[str, onnx.TensorShapeProto]]:
    """Element type and shape of every tensor inference (or the initializers) can tell."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - a model inference cannot type is still usable
        inferred = model
    types: dict[str, int] = {}
    shapes: dict[str, onnx.TensorShapeProto] = {}
    for vi in [
        *inferred.graph.value_info,
        *inferred.graph.output,
        *inferred.graph.input,
    ]:
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and tt.elem_type:
            types[vi.name] = tt.elem_type
            if tt.HasField("shape"):
                shapes[vi.name] = tt.shape
    for t in model.graph.initializer:
        types[t.name] = t.data_type
        shapes[t.name] = shape_proto(t.dims)
    return types, shapes


@dataclass(frozen=True)
class _SchemaFacts:
    """What :func:`_node_info` reads from an op schema, read once per schema (a model has
    thousands of nodes and a few dozen schemas)."""

    allowed: dict[str, frozenset[str]]  # shared by every NodeInfo of the schema, never mutated
    inputs: tuple[str | None, ...]  # each formal input's type parameter (None: fixed type)
    inputs_variadic: bool  # the last formal input repeats
    outputs: tuple[str | None, ...]
    outputs_variadic: bool

    @staticmethod
    def of(schema: Any) -> _SchemaFacts:
        allowed = {
            tc.type_param_str: frozenset(tc.allowed_type_strs) for tc in schema.type_constraints
        }
        variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic

        def params(formals: list[Any]) -> tuple[tuple[str | None, ...], bool]:
            types = tuple(f.type_str if f.type_str in allowed else None for f in formals)
            return types, bool(formals) and formals[-1].option == variadic

        ins, ins_var = params(list(schema.inputs))
        outs, outs_var = params(list(schema.outputs))
        return _SchemaFacts(allowed, ins, ins_var, outs, outs_var)

    def param(self, output: bool, i: int) -> str | None:
        """The type parameter of input/output ``i``: its formal's, or past the last formal
        the last one's when that one is variadic."""
        types, variadic = (
            (self.outputs, self.outputs_variadic) if output else (self.inputs, self.inputs_variadic)
        )
        if i < len(types):
            return types[i]
        return types[-1] if variadic else None


_FACTS_CACHE: dict[int, _SchemaFacts] = {}


def _facts(schema: Any) -> _SchemaFacts:
    key = id(schema)  # schemas live in _SCHEMA_CACHE for the process: ids are stable
    facts = _FACTS_CACHE.get(key)
    if facts is None:
        facts = _FACTS_CACHE[key] = _SchemaFacts.of(schema)
    return facts


def _node_info(
    idx: int, key: str, node: onnx.NodeProto, has_sub: bool, schema: Any, types: dict[str, int]
) -> NodeInfo:
    in_params: list[str | None] = []
    out_params: list[str | None] = []
    bound: dict[str, int] = {}
    allowed: dict[str, frozenset[str]] = {}
    if schema is not None:
        facts = _facts(schema)
        allowed = facts.allowed
        for names, output, dest in (
            (node.input, False, in_params),
            (node.output, True, out_params),
        ):
            for i, name in enumerate(names):
                p = facts.param(output, i)
                dest.append(p if name else None)
                if p is not None and name and name in types and p not in bound:
                    bound[p] = types[name]
    else:
        in_params = [None] * len(node.input)
        out_params = [None] * len(node.output)
    return NodeInfo(
        index=idx,
        key=key,
        node=node,
        known_op=schema is not None,
        has_subgraph=has_sub,
        in_params=in_params,
        out_params=out_params,
        bound=bound,
        allowed=allowed,
    )


_MEMO_MAX_BYTES = 16 * 1024 * 1024
_memo: list[tuple[onnx.ModelProto, bytes, Analysis]] = []  # the last small model analyzed


def analyze(model: onnx.ModelProto) -> Analysis:
    """Read ``model`` once for everything :mod:`rules` and :mod:`apply` ask about it.

    Deriving a plan and applying it analyze the same model one after the other; for a model
    of at most 16 MB the second call returns the first's result when it is the same object
    with the same serialized bytes (so a model edited in between is analyzed again). The
    result is shared: callers only read it.
    """
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"expected an onnx.ModelProto, got {type(model).__name__}")
    data = model.SerializeToString() if model.ByteSize() <= _MEMO_MAX_BYTES else None
    if data is not None and _memo and _memo[0][0] is model and _memo[0][1] == data:
        return _memo[0][2]
    an = _analyze(model)
    _memo[:] = [] if data is None else [(model, data, an)]
    return an


def _analyze(model: onnx.ModelProto) -> Analysis:
    graph = model.graph
    opsets = {(o.domain if o.domain != "ai.onnx" else ""): o.version for o in model.opset_import}
    types, shapes = _tensor_types(model)
    inits = {t.name: t for t in graph.initializer}
    keys = node_keys(graph)
    consumers: dict[str, list[tuple[int, int]]] = {}
    constant: set[str] = set(inits)
    subgraph_refs: set[str] = set()
    infos: list[NodeInfo] = []
    for idx, node in enumerate(graph.node):
        for pos, name in enumerate(node.input):
            if name:
                consumers.setdefault(name, []).append((idx, pos))
        has_sub = False
        for attr in node.attribute:
            if attr.HasField("g") or len(attr.graphs):
                has_sub = True
                for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    subgraph_names(g, subgraph_refs)
        if (
            not has_sub
            and node.op_type not in NONDETERMINISTIC_OPS
            and all(x in constant for x in node.input if x)
        ):
            constant.update(o for o in node.output if o)
        domain = "" if node.domain == "ai.onnx" else node.domain
        schema = _schema(node.op_type, domain, opsets.get(domain))
        infos.append(_node_info(idx, keys[idx], node, has_sub, schema, types))
    return Analysis(
        model=model,
        opsets=opsets,
        infos=infos,
        types=types,
        shapes=shapes,
        inits=inits,
        input_names=[i.name for i in graph.input],
        real_inputs=[i for i in graph.input if i.name not in inits],
        output_names=[o.name for o in graph.output],
        consumers=consumers,
        constant=constant,
        subgraph_refs=subgraph_refs,
    )


def shape_proto(dims: Iterable[int]) -> onnx.TensorShapeProto:
    shape = onnx.TensorShapeProto()
    for d in dims:
        shape.dim.add().dim_value = int(d)
    return shape


def check_opset(an: Analysis, mode: str) -> None:
    """Refuse a model whose opset has no Cast to the target type, before any rewriting."""
    version = an.opsets.get("")
    if version is None or version < MIN_OPSET[mode]:
        raise UsageError(
            f"{mode} needs a model with ONNX opset >= {MIN_OPSET[mode]} (this one has "
            f"{version}); convert it first with onnx.version_converter.convert_version"
        )


def observed_precision(info: NodeInfo, types: dict[str, int]) -> str:
    """The type a node computes in, read from its tensors."""
    node = info.node
    if node.op_type in TYPE_AGNOSTIC_INPUT0:  # converts or measures; computes nothing
        return "other"
    kind: int | None = None
    if info.known_op:
        for p in info.out_params:
            if p is not None and info.bound.get(p) in FLOAT_TYPES:
                kind = info.bound[p]
                break
        if kind is None:
            floats = sorted(info.float_types())
            kind = floats[0] if floats else None
    else:
        kind = next(
            (types[o] for o in [*node.output, *node.input] if types.get(o) in FLOAT_TYPES),
            None,
        )
    names = {FLOAT: "fp32", FLOAT16: "fp16", BFLOAT16: "bf16"}
    return names.get(kind, "other") if kind is not None else "other"


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that need a feed (IR < 4 lists initializers as inputs too)."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def fixed_batch(model: onnx.ModelProto) -> int | None:
    """The first real input's fixed first dimension (what an engine of that shape takes per
    run), or None when it is dynamic or the model has no input."""
    inputs = real_inputs(model)
    dims = inputs[0].type.tensor_type.shape.dim if inputs else ()
    if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0:
        return int(dims[0].dim_value)
    return None


def np_dtype(elem_type: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def round_to(arr: np.ndarray, low: int) -> np.ndarray:
    """``arr`` stored in ``low``; bfloat16 comes from ml_dtypes, loaded only when needed."""
    with np.errstate(all="ignore"):
        if low == FLOAT16:
            return arr.astype(np.float16)
        import ml_dtypes

        return arr.astype(ml_dtypes.bfloat16)


# ----------------------------------------------------------------------------- reductions


def _prod(dims: Iterable[int]) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def reduction_depth(
    node: onnx.NodeProto, shape_of: Callable[[str], tuple[int, ...] | None], opset: int
) -> int | None:
    """Input elements accumulated into one output element (definitions in :mod:`rules`)."""
    op = node.op_type
    ins = [shape_of(x) if x else None for x in node.input]
    x = ins[0] if ins else None
    try:
        if op in REDUCE_RATIO_OPS:
            y = shape_of(node.output[0])
            if x is None or y is None:
                return None
            return _prod(x) // max(_prod(y), 1)
        if op == "MatMul":
            return x[-1] if x else None
        if op == "Gemm":
            if x is None or len(x) != 2:
                return None
            return x[0] if _attr(node, "transA", 0) else x[1]
        if op == "Conv":
            w = ins[1] if len(ins) > 1 else None
            return _prod(w[1:]) if w else None
        if op == "ConvTranspose":
            w = ins[1] if len(ins) > 1 else None
            if not w:
                return None
            return w[0] // max(int(_attr(node, "group", 1)), 1) * _prod(w[2:])
        if op in ("Softmax", "LogSoftmax"):
            if x is None:
                return None
            axis = int(_attr(node, "axis", -1 if opset >= 13 else 1)) % max(len(x), 1)
            return x[axis] if opset >= 13 else _prod(x[axis:])
        if op in ("AveragePool", "LpPool"):
            return _prod(_attr(node, "kernel_shape", []))
        if op == "LayerNormalization":
            if x is None:
                return None
            axis = int(_attr(node, "axis", -1)) % max(len(x), 1)
            return _prod(x[axis:])
        if op == "InstanceNormalization":
            return _prod(x[2:]) if x else None
        if op == "GroupNormalization":
            if x is None or len(x) < 2:
                return None
            groups = max(int(_attr(node, "num_groups", 1)), 1)
            return x[1] // groups * _prod(x[2:])
        if op == "MeanVarianceNormalization":
            if x is None:
                return None
            return _prod(x[a % len(x)] for a in _attr(node, "axes", [0, 2, 3]))
    except (IndexError, ZeroDivisionError):
        return None
    return None


def observe_plan(model: onnx.ModelProto) -> PrecisionPlan | None:
    """The per-node types of a model that is already mixed precision; None if it is not."""
    an = analyze(model)
    low_tensors = any(t in (FLOAT16, BFLOAT16) for t in an.types.values())
    nodes = [
        NodePrecision(info.key, info.node.op_type, observed_precision(info, an.types), "observed")
        for info in an.infos
    ]
    if not low_tensors and not any(n.precision in ("fp16", "bf16") for n in nodes):
        return None
    return PrecisionPlan(mode="observed", settings=PrecisionSettings(), nodes=nodes)
