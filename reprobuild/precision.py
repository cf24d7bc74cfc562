"""Strongly typed mixed precision on the CPU: decide a plan by rules, then apply it verbatim.

TensorRT 11 takes every layer's precision from the ONNX graph, so "build in FP16" now means
"rewrite the graph": Cast nodes at precision boundaries and FP16/BF16 tensor types. Deciding
*which* nodes may run in low precision needs measurements (output magnitudes), and those
depend on calibration inputs; a reproducible build must therefore never re-decide. Hence
two separate steps: :func:`derive_plan` (rules + ONNX Runtime measurements -> a
:class:`PrecisionPlan` stored in the lock) and :func:`apply_plan` (a pure graph rewrite that
follows the plan and nothing else).

Node identity. Plans name nodes by :func:`node_keys`: the node's name, or
``node_of_<first output>`` for an unnamed node (the name TensorRT's ONNX parser gives such a
layer); a repeated name gets ``#2``, ``#3``... in graph order.

Rules (the first that applies decides; documented for ``reprobuild show --precision``):

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
``default``
    No rule kept it: the node runs in FP16/BF16. With ``--fp32-accumulate``, a converted
    MatMul/Gemm/Conv/ConvTranspose records ``accumulate: fp32``.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import io
import json
import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from reprobuild.errors import UsageError
from reprobuild.precision_plan import NodePrecision, PrecisionPlan, PrecisionSettings

__all__ = [
    "CONSTANT_FOLLOW_OPS",
    "MATRIX_OPS",
    "UNSUPPORTED_OPS",
    "apply_plan",
    "derive_plan",
    "diff_plans",
    "format_plan_table",
    "load_calibration",
    "node_keys",
    "observe_plan",
    "plan_error",
    "reduction_depth",
    "validate_options",
]

FLOAT = TensorProto.FLOAT
FLOAT16 = TensorProto.FLOAT16
BFLOAT16 = TensorProto.BFLOAT16
DOUBLE = TensorProto.DOUBLE

LOW_TYPES = {"fp16": FLOAT16, "bf16": BFLOAT16}
_TYPE_NAME = {FLOAT: "fp32", FLOAT16: "fp16", BFLOAT16: "bf16", DOUBLE: "fp64"}
_TENSOR_STR = {FLOAT: "tensor(float)", FLOAT16: "tensor(float16)", BFLOAT16: "tensor(bfloat16)"}
_FLOAT_TYPES = frozenset({FLOAT, FLOAT16, BFLOAT16, DOUBLE})
# Cast supports float16 since opset 6 and bfloat16 since opset 13.
_MIN_OPSET = {"fp16": 6, "bf16": 13}
# Largest finite value and machine epsilon of the low-precision types.
_LOW_MAX = {FLOAT16: 65504.0, BFLOAT16: 3.3895313892515355e38}
_LOW_EPS = {FLOAT16: 2.0**-10, BFLOAT16: 2.0**-7}

MATRIX_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})
"""Matrix products: the nodes that ``--fp32-accumulate`` changes."""

UNSUPPORTED_OPS = frozenset(
    {
        # results that are shapes, sizes or types, not float values
        "Shape",
        "Size",
        "Cast",
        "CastLike",
        "EyeLike",
        # index outputs: low-precision rounding creates ties and changes the indices
        "ArgMax",
        "ArgMin",
        "TopK",
        "NonZero",
        "NonMaxSuppression",
        # the output type comes from an attribute
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        # quantization scales are part of the quantization scheme
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        # control flow: the bodies are separate graphs
        "If",
        "Loop",
        "Scan",
    }
)
"""Ops kept as they are even when their schema has a float16/bfloat16 form."""

CONSTANT_FOLLOW_OPS = frozenset(
    {
        "Constant",
        "ConstantOfShape",
        "Identity",
        "Unsqueeze",
        "Squeeze",
        "Reshape",
        "Flatten",
        "Transpose",
        "Concat",
        "Expand",
        "Tile",
        "Slice",
        "Gather",
        "Split",
    }
)
"""Ops that only create or move data: on constant inputs they follow their consumers."""

_GENERATOR_OPS = frozenset({"Constant", "ConstantOfShape"})
# Their first input may be any float type: a low-precision value widened to FP32 is exact,
# so casting it (or taking its shape) directly gives the same result without a Cast back.
_TYPE_AGNOSTIC_INPUT0 = frozenset({"Cast", "CastLike", "Shape", "Size"})
_NONDETERMINISTIC_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
)
_REDUCE_RATIO_OPS = frozenset(
    {
        "ReduceSum",
        "ReduceMean",
        "ReduceSumSquare",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceProd",
        "GlobalAveragePool",
        "GlobalLpPool",
    }
)
_MEASURE_BUDGET_BYTES = 512 * 1024 * 1024  # per ONNX Runtime run while measuring
_UNKNOWN_TENSOR_BYTES = 4 * 1024 * 1024
_STALE = (
    "the lock was recorded for a different model; re-record the plan with "
    "`reprobuild build MODEL --precision ...` after deleting the lock's precision section"
)


# ----------------------------------------------------------------------------- options


def validate_options(
    mode: str,
    keep_fp32: list[str],
    keep_fp32_ops: list[str],
    max_output: float,
    max_reduction_depth: int | None,
    fp32_accumulate: bool,
    keep_io_types: bool = True,
) -> PrecisionSettings:
    """Check the user's options before any model work, so mistakes fail fast with exit 2."""
    if mode not in LOW_TYPES:
        raise UsageError(f"--precision {mode!r}: unknown precision; use fp16 or bf16")
    for pattern in keep_fp32:
        try:
            re.compile(pattern)
        except re.error as err:
            raise UsageError(
                f"--keep-fp32 {pattern!r}: bad regular expression ({err}); fix the pattern "
                "(it is a Python regex matched anywhere in the node name)"
            ) from None
    known = _known_op_types()
    for op in keep_fp32_ops:
        if op not in known:
            close = difflib.get_close_matches(op, sorted(known), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "use an ONNX op type such as MatMul"
            raise UsageError(
                f"--keep-fp32-op {op!r}: not an ONNX operator type (op types are case "
                f"sensitive); {hint}"
            )
    if isinstance(max_output, bool) or not isinstance(max_output, (int, float)):
        raise UsageError(f"--max-output {max_output!r}: expected a number such as 512")
    if not math.isfinite(max_output) or max_output <= 0:
        raise UsageError(
            f"--max-output {max_output}: must be a positive finite number; pass a limit such "
            "as 512 (outputs with a larger magnitude stay in FP32)"
        )
    if max_reduction_depth is not None and (
        isinstance(max_reduction_depth, bool)
        or not isinstance(max_reduction_depth, int)
        or max_reduction_depth < 1
    ):
        raise UsageError(
            f"--max-reduction-depth {max_reduction_depth}: must be a positive integer; pass "
            "e.g. 4096, or omit it to disable the rule"
        )
    return PrecisionSettings(
        keep_fp32=tuple(keep_fp32),
        keep_fp32_ops=tuple(keep_fp32_ops),
        max_output=float(max_output),
        max_reduction_depth=max_reduction_depth,
        fp32_accumulate=bool(fp32_accumulate),
        keep_io_types=bool(keep_io_types),
    )


_KNOWN_OPS: frozenset[str] | None = None


def _known_op_types() -> frozenset[str]:
    global _KNOWN_OPS
    if _KNOWN_OPS is None:
        _KNOWN_OPS = frozenset(s.name for s in onnx.defs.get_all_schemas_with_history())
    return _KNOWN_OPS


# ----------------------------------------------------------------------------- analysis


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
class _NodeInfo:
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
        want = _TENSOR_STR[low]
        in_side = {p for p in self.in_params if p is not None}
        return frozenset(
            p
            for p, t in self.bound.items()
            if t == FLOAT
            and want in self.allowed.get(p, ())
            # an output-only parameter is typed by an attribute, which only generators update
            and (p in in_side or self.node.op_type in _GENERATOR_OPS)
        )

    def float_types(self) -> set[int]:
        return {t for t in self.bound.values() if t in _FLOAT_TYPES}


@dataclass
class _Analysis:
    model: onnx.ModelProto
    opsets: dict[str, int]
    infos: list[_NodeInfo]
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


_SCHEMA_CACHE: dict[tuple[str, str, int], Any] = {}


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


def _formal(params: list[Any], i: int) -> Any | None:
    if i < len(params):
        return params[i]
    if params and params[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return params[-1]
    return None


def _subgraph_names(graph: onnx.GraphProto, out: set[str]) -> None:
    for node in graph.node:
        out.update(x for x in node.input if x)
        for attr in node.attribute:
            for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
                _subgraph_names(g, out)


def _analyze(model: onnx.ModelProto) -> _Analysis:
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"expected an onnx.ModelProto, got {type(model).__name__}")
    graph = model.graph
    opsets = {(o.domain if o.domain != "ai.onnx" else ""): o.version for o in model.opset_import}
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
    inits = {t.name: t for t in graph.initializer}
    for t in graph.initializer:
        types[t.name] = t.data_type
        shapes[t.name] = _shape_proto(t.dims)
    input_names = [i.name for i in graph.input]
    real_inputs = [i for i in graph.input if i.name not in inits]
    keys = node_keys(graph)
    consumers: dict[str, list[tuple[int, int]]] = {}
    constant: set[str] = set(inits)
    subgraph_refs: set[str] = set()
    infos: list[_NodeInfo] = []
    for idx, node in enumerate(graph.node):
        for pos, name in enumerate(node.input):
            if name:
                consumers.setdefault(name, []).append((idx, pos))
        has_sub = False
        for attr in node.attribute:
            if attr.HasField("g") or len(attr.graphs):
                has_sub = True
                for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    _subgraph_names(g, subgraph_refs)
        if (
            not has_sub
            and node.op_type not in _NONDETERMINISTIC_OPS
            and all(x in constant for x in node.input if x)
        ):
            constant.update(o for o in node.output if o)
        domain = "" if node.domain == "ai.onnx" else node.domain
        schema = _schema(node.op_type, domain, opsets.get(domain))
        in_params: list[str | None] = []
        out_params: list[str | None] = []
        bound: dict[str, int] = {}
        allowed: dict[str, frozenset[str]] = {}
        if schema is not None:
            allowed = {
                tc.type_param_str: frozenset(tc.allowed_type_strs) for tc in schema.type_constraints
            }
            for names, formals, dest in (
                (node.input, schema.inputs, in_params),
                (node.output, schema.outputs, out_params),
            ):
                for i, name in enumerate(names):
                    f = _formal(list(formals), i)
                    p = f.type_str if f is not None and f.type_str in allowed else None
                    dest.append(p if name else None)
                    if p is not None and name and name in types and p not in bound:
                        bound[p] = types[name]
        else:
            in_params = [None] * len(node.input)
            out_params = [None] * len(node.output)
        infos.append(
            _NodeInfo(
                index=idx,
                key=keys[idx],
                node=node,
                known_op=schema is not None,
                has_subgraph=has_sub,
                in_params=in_params,
                out_params=out_params,
                bound=bound,
                allowed=allowed,
            )
        )
    return _Analysis(
        model=model,
        opsets=opsets,
        infos=infos,
        types=types,
        shapes=shapes,
        inits=inits,
        input_names=input_names,
        real_inputs=real_inputs,
        output_names=[o.name for o in graph.output],
        consumers=consumers,
        constant=constant,
        subgraph_refs=subgraph_refs,
    )


def _shape_proto(dims: Iterable[int]) -> onnx.TensorShapeProto:
    shape = onnx.TensorShapeProto()
    for d in dims:
        shape.dim.add().dim_value = int(d)
    return shape


def _check_opset(an: _Analysis, mode: str) -> None:
    version = an.opsets.get("")
    if version is None or version < _MIN_OPSET[mode]:
        raise UsageError(
            f"{mode} needs a model with ONNX opset >= {_MIN_OPSET[mode]} (this one has "
            f"{version}); convert it first with onnx.version_converter.convert_version"
        )


def _observed_precision(info: _NodeInfo, types: dict[str, int]) -> str:
    """The type a node computes in, read from its tensors."""
    node = info.node
    if node.op_type in _TYPE_AGNOSTIC_INPUT0:  # converts or measures; computes nothing
        return "other"
    kind: int | None = None
    if info.known_op:
        for p in info.out_params:
            if p is not None and info.bound.get(p) in _FLOAT_TYPES:
                kind = info.bound[p]
                break
        if kind is None:
            floats = sorted(info.float_types())
            kind = floats[0] if floats else None
    else:
        kind = next(
            (types[o] for o in [*node.output, *node.input] if types.get(o) in _FLOAT_TYPES),
            None,
        )
    names = {FLOAT: "fp32", FLOAT16: "fp16", BFLOAT16: "bf16"}
    return names.get(kind, "other") if kind is not None else "other"


# ----------------------------------------------------------------------------- calibration


def _real_input_names(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _np_dtype(elem_type: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def load_calibration(
    path: str | None, model: onnx.ModelProto, seed: int = 0
) -> tuple[dict[str, np.ndarray], str]:
    """Feeds for the magnitude measurement, and how to name them in the plan.

    With no file: seeded inputs (float uniform in [0, 1), integers in {0, 1}, bools random;
    dynamic dims 1) described as ``seeded:<seed>``. With a ``.npz`` file or a Polygraphy
    ``--save-inputs`` JSON file (first feed dict): ``sha256:<hex of the file> (<name>)``, so
    the plan records exactly which data decided the magnitude rule.
    """
    inputs = _real_input_names(model)
    if path is None:
        rng = np.random.default_rng(seed)
        feeds: dict[str, np.ndarray] = {}
        for vi in inputs:
            tt = vi.type.tensor_type
            dtype = _np_dtype(tt.elem_type)
            shape = tuple(
                d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
                for d in tt.shape.dim
            )
            if dtype == np.bool_:
                arr = rng.integers(0, 2, size=shape).astype(np.bool_)
            elif np.issubdtype(dtype, np.integer):
                arr = rng.integers(0, 2, size=shape).astype(dtype)
            else:
                arr = rng.random(shape, dtype=np.float64).astype(dtype)
            feeds[vi.name] = arr
        return feeds, f"seeded:{seed}"
    try:
        data = open(path, "rb").read()  # noqa: SIM115 - read once, hashed and parsed
    except FileNotFoundError:
        raise UsageError(
            f"{path}: no such calibration file; pass an existing .npz or Polygraphy JSON file"
        ) from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read the calibration file ({err.strerror})") from None
    lower = path.lower()
    if lower.endswith(".npz"):
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                feeds = {k: np.asarray(npz[k]) for k in npz.files}
        except Exception as err:  # noqa: BLE001 - any decoding problem is bad input
            raise UsageError(
                f"{path}: not a readable .npz archive ({err}); save it with numpy.savez"
            ) from None
    elif lower.endswith(".json"):
        feeds = _load_polygraphy_json(path, data)
    else:
        raise UsageError(
            f"{path}: unknown calibration format; use a .npz file (numpy.savez) or a "
            "Polygraphy --save-inputs .json file"
        )
    _check_feeds(path, feeds, inputs)
    digest = hashlib.sha256(data).hexdigest()
    return feeds, f"sha256:{digest} ({os.path.basename(path)})"


def _load_polygraphy_json(path: str, data: bytes) -> dict[str, np.ndarray]:
    """Polygraphy's saved inputs: a list of feed dicts; arrays are base64 ``np.save`` bytes."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise UsageError(f"{path}: not valid JSON ({err}); pass Polygraphy saved inputs") from None
    if isinstance(doc, list):
        if not doc:
            raise UsageError(f"{path}: the input list is empty; save at least one feed")
        doc = doc[0]
    if not isinstance(doc, dict):
        raise UsageError(
            f"{path}: expected a list of {{input name: array}} feeds (Polygraphy "
            "--save-inputs format)"
        )
    feeds: dict[str, np.ndarray] = {}
    for name, value in doc.items():
        if not isinstance(value, dict) or not isinstance(value.get("array"), str):
            raise UsageError(
                f"{path}: input {name!r} is not a Polygraphy-encoded array; re-save the "
                "inputs with `polygraphy run --save-inputs`"
            )
        try:
            raw = base64.b64decode(value["array"].encode(), validate=True)
            loaded = np.load(io.BytesIO(raw), allow_pickle=False)
            if not isinstance(loaded, np.ndarray):  # older Polygraphy: an NPZ archive
                with loaded as npz:
                    loaded = np.asarray(npz[npz.files[0]])
        except Exception as err:  # noqa: BLE001 - any decoding problem is bad input
            raise UsageError(
                f"{path}: input {name!r} cannot be decoded ({err}); re-save the inputs"
            ) from None
        feeds[str(name)] = loaded
    return feeds


def _check_feeds(where: str, feeds: dict[str, Any], inputs: list[onnx.ValueInfoProto]) -> None:
    expected = {vi.name: vi for vi in inputs}
    missing = [n for n in expected if n not in feeds]
    if missing:
        raise UsageError(
            f"{where}: no data for model input {missing[0]!r}; provide every input "
            f"({', '.join(sorted(expected))})"
        )
    extra = sorted(n for n in feeds if n not in expected)
    if extra:
        raise UsageError(
            f"{where}: {extra[0]!r} is not an input of the model; its inputs are "
            f"{', '.join(sorted(expected))}"
        )
    for name, vi in expected.items():
        arr = feeds[name]
        tt = vi.type.tensor_type
        if not isinstance(arr, np.ndarray):
            raise UsageError(f"{where}: input {name!r} is not an array")
        want = _np_dtype(tt.elem_type) if tt.elem_type else arr.dtype
        if arr.dtype != want:
            raise UsageError(
                f"{where}: input {name!r} has dtype {arr.dtype} but the model expects {want}; "
                f"save it as {want}"
            )
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        if dims is not None:
            bad = len(dims) != arr.ndim or any(
                d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != s
                for d, s in zip(dims, arr.shape, strict=False)
            )
            if bad:
                want_shape = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]
                raise UsageError(
                    f"{where}: input {name!r} has shape {list(arr.shape)} but the model "
                    f"expects {want_shape}; save data of that shape"
                )


# ----------------------------------------------------------------------------- measurement


@dataclass(frozen=True)
class _Stat:
    shape: tuple[int, ...]
    max_abs: float  # inf when any value is NaN or Inf; 0.0 for non-float tensors


def _ort_session(model_bytes: bytes, what: str) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    try:
        return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 - ORT raises several unrelated types
        msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UsageError(
            f"ONNX Runtime cannot load the {what} on the CPU ({msg[:300]}); check the model "
            "with onnx.checker"
        ) from None


def _tensor_bytes(an: _Analysis, name: str) -> int:
    shape = an.shapes.get(name)
    t = an.types.get(name)
    if shape is None or t is None:
        return _UNKNOWN_TENSOR_BYTES
    n = 1
    for d in shape.dim:
        if not d.HasField("dim_value"):
            return _UNKNOWN_TENSOR_BYTES
        n *= d.dim_value
    try:
        return n * _np_dtype(t).itemsize
    except (TypeError, KeyError, ValueError):
        return _UNKNOWN_TENSOR_BYTES


def _measure(
    an: _Analysis, feeds: dict[str, np.ndarray], keep: set[str]
) -> tuple[dict[str, _Stat], dict[str, np.ndarray]]:
    """Shape and max |x| of every node output on ``feeds``; full values only for ``keep``.

    All intermediates become graph outputs (so ONNX Runtime computes exactly the graph's
    ops, nothing fused away); big models run in several passes to bound memory.
    """
    names: list[str] = []
    seen = set(an.input_names)
    for info in an.infos:
        for o in info.node.output:
            if o and o not in seen:
                seen.add(o)
                names.append(o)
    batches: list[list[str]] = []
    size = 0
    for n in names:
        b = _tensor_bytes(an, n)
        if not batches or size + b > _MEASURE_BUDGET_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(n)
        size += b
    work = onnx.ModelProto()
    work.CopyFrom(an.model)
    del work.graph.value_info[:]
    stats: dict[str, _Stat] = {}
    values: dict[str, np.ndarray] = {}
    for batch in batches:
        del work.graph.output[:]
        for n in batch:
            work.graph.output.add().name = n
        sess = _ort_session(work.SerializeToString(), "model")
        try:
            outs = sess.run(batch, feeds)
        except Exception as err:  # noqa: BLE001 - ORT raises several unrelated types
            msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UsageError(
                f"ONNX Runtime failed to run the model on the calibration inputs "
                f"({msg[:300]}); check that the inputs fit the model"
            ) from None
        for n, v in zip(batch, outs, strict=True):
            if not isinstance(v, np.ndarray):
                continue
            mag = 0.0
            if np.issubdtype(v.dtype, np.floating) and v.size:
                with np.errstate(all="ignore"):
                    mag = float(np.max(np.abs(v)))
                if not math.isfinite(mag):
                    mag = math.inf
            stats[n] = _Stat(tuple(int(d) for d in v.shape), mag)
            if n in keep:
                values[n] = v
    return stats, values


# ----------------------------------------------------------------------------- rules


def _round_to(arr: np.ndarray, low: int) -> np.ndarray:
    with np.errstate(all="ignore"):
        if low == FLOAT16:
            return arr.astype(np.float16)
        import ml_dtypes

        return arr.astype(ml_dtypes.bfloat16)


def _range_problem(arr: np.ndarray, low: int) -> str | None:
    """Why ``arr`` does not fit ``low`` (see ``initializer-range`` in the module docs)."""
    a = np.asarray(arr, dtype=np.float32)
    with np.errstate(all="ignore"):
        mag = np.abs(a[np.isfinite(a)])
    if mag.size == 0:
        return None
    top = float(mag.max())
    if top > _LOW_MAX[low]:
        return f"max |w| {top:g} > {_LOW_MAX[low]:g}"
    nonzero = mag[mag > 0]
    if nonzero.size:
        flushed = nonzero[_round_to(nonzero, low).astype(np.float32) == 0]
        if flushed.size and float(flushed.max()) >= top * _LOW_EPS[low]:
            return f"{flushed.size} values such as {float(flushed.max()):g} flush to zero"
    return None


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
    """Input elements accumulated into one output element (definitions in the module docs)."""
    op = node.op_type
    ins = [shape_of(x) if x else None for x in node.input]
    x = ins[0] if ins else None
    try:
        if op in _REDUCE_RATIO_OPS:
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


def derive_plan(
    model: onnx.ModelProto,
    mode: str,
    settings: PrecisionSettings,
    feeds: dict[str, np.ndarray],
    calibration: str,
) -> PrecisionPlan:
    """Decide every node's precision by the rules (module docstring); never changes ``model``."""
    if mode not in LOW_TYPES:
        raise UsageError(f"--precision {mode!r}: unknown precision; use fp16 or bf16")
    low = LOW_TYPES[mode]
    an = _analyze(model)
    _check_opset(an, mode)
    _check_feeds("calibration inputs", feeds, an.real_inputs)
    patterns = [re.compile(p) for p in settings.keep_fp32]
    keep_ops = set(settings.keep_fp32_ops)
    opset = an.opsets.get("", 1)

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
    stats, values = _measure(an, feeds, keep_values)

    def shape_of(name: str) -> tuple[int, ...] | None:
        if name in stats:
            return stats[name].shape
        if name in feeds:
            return tuple(feeds[name].shape)
        if name in an.inits:
            return tuple(int(d) for d in an.inits[name].dims)
        return None

    def const_value(name: str) -> np.ndarray | None:
        if name in an.inits:
            return numpy_helper.to_array(an.inits[name])
        return values.get(name)

    def input_max(name: str) -> float:
        if name in stats:
            return stats[name].max_abs
        if name in feeds and feeds[name].size and np.issubdtype(feeds[name].dtype, np.floating):
            arr = feeds[name]
            return float(np.abs(arr).max()) if np.isfinite(arr).all() else float("inf")
        return 0.0

    decided: list[tuple[str, str] | None] = [None] * len(an.infos)
    for i, info in enumerate(an.infos):
        node = info.node
        if follow[i]:
            continue
        floats = info.float_types()
        if not conv[i]:
            if not info.known_op:
                obs = _observed_precision(info, an.types)
                rule = "observed" if obs in ("fp16", "bf16") else "unsupported"
                decided[i] = (obs, rule)
            elif node.op_type in _TYPE_AGNOSTIC_INPUT0:
                decided[i] = ("other", "unsupported")  # reads any float type as it comes
            elif FLOAT in floats:
                decided[i] = ("fp32", "unsupported")
            elif floats:
                decided[i] = (_observed_precision(info, an.types), "observed")
            else:
                decided[i] = ("other", "unsupported")
            continue
        if any(p.search(info.key) for p in patterns):
            decided[i] = ("fp32", "name")
        elif node.op_type in keep_ops:
            decided[i] = ("fp32", "op")
        elif any(
            x
            and info.in_params[pos] in conv[i]
            and x in an.constant
            and an.types.get(x) == FLOAT
            and (v := const_value(x)) is not None
            and _range_problem(v, low) is not None
            for pos, x in enumerate(node.input)
        ):
            decided[i] = ("fp32", "initializer-range")
        elif settings.max_reduction_depth is not None and (
            (depth := reduction_depth(node, shape_of, opset)) is not None
            and depth > settings.max_reduction_depth
        ):
            decided[i] = ("fp32", "reduction-depth")
        elif any(
            o
            and info.out_params[pos] in conv[i]
            and o in stats
            and stats[o].max_abs > settings.max_output
            for pos, o in enumerate(node.output)
        ):
            decided[i] = ("fp32", "magnitude")
        elif any(
            x
            and info.in_params[pos] in conv[i]
            and x not in an.constant
            and an.types.get(x) == FLOAT
            and input_max(x) > _LOW_MAX[low]
            for pos, x in enumerate(node.input)
        ):
            # An FP32 value beyond the low-precision range would overflow in the Cast that
            # feeds this node (inf, then NaN downstream): the node stays in FP32.
            decided[i] = ("fp32", "magnitude")
        else:
            decided[i] = (mode, "default")

    # constant producers follow their consumers; consumers come later in graph order
    for i in reversed(range(len(an.infos))):
        if not follow[i]:
            continue
        info = an.infos[i]
        if any(p.search(info.key) for p in patterns):
            decided[i] = ("fp32", "name")
            continue
        if info.node.op_type in keep_ops:
            decided[i] = ("fp32", "op")
            continue
        takes_low = True
        for o in info.node.output:
            if not o or an.types.get(o) != FLOAT:
                continue
            uses = an.consumers.get(o, [])
            if not uses or o in an.output_names or o in an.subgraph_refs:
                takes_low = False
                break
            for j, pos in uses:
                d = decided[j]
                if d is None or d[0] != mode or an.infos[j].in_params[pos] not in conv[j]:
                    takes_low = False
                    break
            if not takes_low:
                break
        decided[i] = (mode if takes_low else "fp32", "constant")

    nodes: list[NodePrecision] = []
    for i, info in enumerate(an.infos):
        d = decided[i]
        assert d is not None  # every node is decided by one of the two passes
        precision, rule = d
        accumulate = (
            "fp32"
            if settings.fp32_accumulate
            and precision == mode
            and rule == "default"
            and info.node.op_type in MATRIX_OPS
            else None
        )
        nodes.append(NodePrecision(info.key, info.node.op_type, precision, rule, accumulate))
    return PrecisionPlan(mode=mode, settings=settings, calibration=calibration, nodes=nodes)


def observe_plan(model: onnx.ModelProto) -> PrecisionPlan | None:
    """The per-node types of a model that is already mixed precision; None if it is not."""
    an = _analyze(model)
    low_tensors = any(t in (FLOAT16, BFLOAT16) for t in an.types.values())
    nodes = [
        NodePrecision(info.key, info.node.op_type, _observed_precision(info, an.types), "observed")
        for info in an.infos
    ]
    if not low_tensors and not any(n.precision in ("fp16", "bf16") for n in nodes):
        return None
    return PrecisionPlan(mode="observed", settings=PrecisionSettings(), nodes=nodes)


# ----------------------------------------------------------------------------- apply


def _match_plan(an: _Analysis, plan: PrecisionPlan) -> list[NodePrecision]:
    by_node = plan.by_node()
    keys = {info.key for info in an.infos}
    for n in plan.nodes:
        if n.node not in keys:
            raise UsageError(
                f"the precision plan names node {n.node!r}, which is not in the model: {_STALE}"
            )
    out: list[NodePrecision] = []
    for info in an.infos:
        entry = by_node.get(info.key)
        if entry is None:
            raise UsageError(
                f"model node {info.key!r} ({info.node.op_type}) is missing from the precision "
                f"plan: {_STALE}"
            )
        if entry.op != info.node.op_type:
            raise UsageError(
                f"node {info.key!r} is a {info.node.op_type} in the model but a {entry.op} in "
                f"the precision plan: {_STALE}"
            )
        out.append(entry)
    return out


class _Names:
    """Fresh, deterministic tensor/node names that collide with nothing in the graph."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        used: set[str] = {x for n in graph.node for x in (*n.input, *n.output, n.name)}
        used.update(i.name for i in graph.input)
        used.update(o.name for o in graph.output)
        used.update(t.name for t in graph.initializer)
        used.update(v.name for v in graph.value_info)
        _subgraph_names(graph, used)
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
        helper.make_attribute("value", numpy_helper.from_array(_round_to(value, low)))
    )


def apply_plan(model: onnx.ModelProto, plan: PrecisionPlan) -> onnx.ModelProto:
    """Rewrite ``model`` to the types ``plan`` records, verbatim; ``model`` is not changed.

    Low-precision nodes get their float32 initializers converted (in place when every use
    is low precision and the initializer is not a graph input, else as a ``<name>__fp16``
    copy) and Casts on their other float32 inputs; nodes the plan keeps in FP32 get Casts
    back. With ``keep_io_types`` the graph's inputs and outputs keep their types (an output
    produced in low precision is computed into ``<name>__fp16`` and cast back). A node with
    ``accumulate: fp32`` takes its low-precision inputs cast up to FP32, computes in FP32,
    and its result is cast back to low precision.
    """
    an = _analyze(model)
    entries = _match_plan(an, plan)
    if plan.mode == "observed":
        for info, e in zip(an.infos, entries, strict=True):
            seen = _observed_precision(info, an.types)
            if seen != e.precision:
                raise UsageError(
                    f"node {info.key!r} has precision {seen} in the model but {e.precision} "
                    f"in the observed precision plan: {_STALE}"
                )
        out = onnx.ModelProto()
        out.CopyFrom(model)
        return out
    if plan.mode not in LOW_TYPES:
        raise UsageError(f"precision plan mode {plan.mode!r} is not fp16, bf16 or observed")
    _check_opset(an, plan.mode)
    low = LOW_TYPES[plan.mode]
    low_name = _TYPE_NAME[low]
    keep_io = plan.settings.keep_io_types
    graph = an.graph

    conv: list[frozenset[str]] = []
    acc: list[bool] = []
    for info, e in zip(an.infos, entries, strict=True):
        c: frozenset[str] = frozenset()
        if e.precision == plan.mode:
            c = info.convertible(low)
            if not c and FLOAT in info.float_types():
                raise UsageError(
                    f"the precision plan runs node {info.key!r} ({info.node.op_type}) in "
                    f"{e.precision}, but it cannot run in {e.precision} in this model: {_STALE}"
                )
        elif e.precision in ("fp16", "bf16"):
            seen = _observed_precision(info, an.types)
            if seen != e.precision:
                raise UsageError(
                    f"the precision plan runs node {info.key!r} in {e.precision}, but a "
                    f"{plan.mode} plan can only convert to {plan.mode}: {_STALE}"
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

    def in_target(i: int, pos: int) -> int | None:
        """The type node i takes input pos in; None: whatever type the value has now."""
        info = an.infos[i]
        x = info.node.input[pos]
        t = an.types.get(x)
        if t == FLOAT and info.in_params[pos] in conv[i]:
            return low
        if pos == 0 and t == FLOAT and info.node.op_type in _TYPE_AGNOSTIC_INPUT0:
            return None
        return t

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
    for name, t in an.inits.items():
        cur[name] = (name, t.data_type)
        if (
            t.data_type == FLOAT
            and name not in an.input_names
            and wanted.get(name) == {low}
            and name not in pinned
        ):
            conv_t = numpy_helper.from_array(_round_to(numpy_helper.to_array(t), low), name)
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
        if x in an.inits and an.inits[x].data_type == FLOAT and t in (FLOAT16, BFLOAT16):
            dst = names.fresh(f"{x}__{_TYPE_NAME[t]}")
            arr = _round_to(numpy_helper.to_array(an.inits[x]), t)
            new_inits.append(numpy_helper.from_array(arr, dst))
            if out_model.ir_version < 4:  # IR < 4: every initializer is also a graph input
                new_inputs.append(helper.make_tensor_value_info(dst, t, list(arr.shape)))
            new_types[dst] = t
            shape_src[dst] = x
        else:
            dst = cast(now, t, f"{x}__{_TYPE_NAME.get(t, str(t))}", x)
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
        if conv[i] and info.node.op_type in _GENERATOR_OPS:
            _convert_generator(node, low)
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
                back = names.fresh(f"{holder}__to_{_TYPE_NAME[FLOAT]}")
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
    an: _Analysis, g: onnx.GraphProto, new_types: dict[str, int], shape_src: dict[str, str]
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


# ----------------------------------------------------------------------------- reporting


def _run_model(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], what: str
) -> tuple[list[str], list[np.ndarray], str]:
    """Outputs in ONNX Runtime; the ONNX reference evaluator where ORT has no CPU kernel
    (bf16 Conv, for one), so every plan can be judged on this machine."""
    inputs = {vi.name: vi for vi in _real_input_names(model)}
    cast_feeds: dict[str, np.ndarray] = {}
    for name, arr in feeds.items():
        t = inputs[name].type.tensor_type.elem_type if name in inputs else 0
        low_input = t in (FLOAT16, BFLOAT16) and arr.dtype == np.float32
        cast_feeds[name] = _round_to(arr, t) if low_input else arr
    out_names = [o.name for o in model.graph.output]
    try:
        sess = _ort_session(model.SerializeToString(), what)
        return out_names, sess.run(out_names, cast_feeds), "onnxruntime"
    except Exception as err:  # noqa: BLE001 - fall back only for missing kernels
        if "NOT_IMPLEMENTED" not in str(err) and "Could not find an implementation" not in str(err):
            raise
    from onnx.reference import ReferenceEvaluator

    outs = ReferenceEvaluator(model).run(out_names, cast_feeds)
    return out_names, [np.asarray(o) for o in outs], "onnx.reference"


def plan_error(
    model_fp32: onnx.ModelProto, model_mixed: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> dict[str, Any]:
    """Max abs / max rel error of the mixed model's outputs against FP32, for the build report.

    ``max_rel`` is ``|mixed - fp32| / max(|fp32|, floor)`` with ``floor`` = 1e-3 x the
    output's largest magnitude, so near-zero elements do not turn rounding noise into huge
    ratios. Non-finite mismatches count as ``inf``.

    Caveat: ONNX Runtime's CPU provider has FP16 kernels only for data-movement ops; it runs
    FP16 Conv/MatMul/Add/... in FP32 between inserted casts. The figure therefore measures
    FP16 *storage* of weights and activations, not FP16 arithmetic or accumulation (the
    reference backend's FP16 tactics measure those).
    """
    names, ref, _ = _run_model(model_fp32, feeds, "FP32 model")
    names2, got, runtime = _run_model(model_mixed, feeds, "mixed-precision model")
    got_by = dict(zip(names2, got, strict=True))
    per: dict[str, dict[str, float]] = {}
    max_abs = max_rel = 0.0
    for name, r in zip(names, ref, strict=True):
        if name not in got_by:
            raise UsageError(f"the mixed-precision model has no output {name!r}; re-convert it")
        a = np.asarray(got_by[name], dtype=np.float64)
        b = np.asarray(r, dtype=np.float64)
        if a.shape != b.shape:
            raise UsageError(
                f"output {name!r} has shape {a.shape} in the mixed model but {b.shape} in FP32"
            )
        with np.errstate(all="ignore"):
            diff = np.abs(a - b)
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            diff = np.where(same, 0.0, diff)
            diff = np.where(np.isnan(diff), np.inf, diff)
            finite_b = np.abs(b[np.isfinite(b)])
            floor = 1e-3 * float(finite_b.max()) if finite_b.size else 0.0
            denom = np.maximum(np.abs(b), floor if floor > 0 else np.finfo(np.float64).tiny)
            rel = np.where(diff == 0, 0.0, diff / denom)
        e_abs = float(diff.max()) if diff.size else 0.0
        e_rel = float(rel.max()) if rel.size else 0.0
        per[name] = {"max_abs": e_abs, "max_rel": e_rel}
        max_abs, max_rel = max(max_abs, e_abs), max(max_rel, e_rel)
    return {"max_abs": max_abs, "max_rel": max_rel, "outputs": per, "runtime": runtime}


def diff_plans(old: PrecisionPlan, new: PrecisionPlan) -> list[str]:
    """One line per difference (for ``--frozen``: a locked build fails if this is not empty)."""
    out: list[str] = []
    if old.mode != new.mode:
        out.append(f"mode: {old.mode} -> {new.mode}")
    a, b = old.settings.to_dict(), new.settings.to_dict()
    out.extend(f"settings.{k}: {a[k]!r} -> {b[k]!r}" for k in a if a[k] != b[k])
    before, after = old.by_node(), new.by_node()

    def show(n: NodePrecision) -> str:
        return f"{n.precision}/{n.rule}" + (f" (acc {n.accumulate})" if n.accumulate else "")

    for n in old.nodes:
        m = after.get(n.node)
        if m is None:
            out.append(f"node {n.node}: removed")
        elif (m.op, m.precision, m.rule, m.accumulate) != (n.op, n.precision, n.rule, n.accumulate):
            what = f"{n.op} -> {m.op}" if m.op != n.op else f"{show(n)} -> {show(m)}"
            out.append(f"node {n.node}: {what}")
    out.extend(f"node {n.node}: added ({show(n)})" for n in new.nodes if n.node not in before)
    return out


def format_plan_table(plan: PrecisionPlan) -> str:
    """Aligned ``node  op  precision  rule`` table, with a header line and a count summary."""
    rows = [("NODE", "OP", "PRECISION", "RULE")]
    for n in plan.nodes:
        prec = n.precision + (f" (acc {n.accumulate})" if n.accumulate else "")
        rows.append((n.node, n.op, prec, n.rule))
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    lines = [
        f"precision plan: mode {plan.mode}"
        + (f", calibration {plan.calibration}" if plan.calibration else "")
    ]
    for r in rows:
        lines.append("  ".join(r[c].ljust(widths[c]) for c in range(3)) + "  " + r[3])
    counts: dict[str, int] = {}
    for n in plan.nodes:
        counts[n.precision] = counts.get(n.precision, 0) + 1
    summary = ", ".join(f"{counts[p]} {p}" for p in sorted(counts))
    lines.append(f"{len(plan.nodes)} nodes: {summary}" if plan.nodes else "0 nodes")
    return "\n".join(line.rstrip() for line in lines)
