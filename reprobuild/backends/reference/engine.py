"""The reference engine: its file format, and the runner that executes it.

File format (version 1, integers little-endian; no pickle anywhere)::

    offset    size  field
    0         8     magic b"RBREFENG"
    8         4     u32 format version (1)
    12        4     u32 metadata length J
    16        8     u64 model length L
    24        J     metadata: UTF-8 JSON (see below)
    24+J      L     the ONNX model, serialized (ModelProto bytes)
    24+J+L    32    SHA-256 of every byte before it

Metadata: ``{"format": "reprobuild-reference-engine", "environment": {...},
"environment_fingerprint": "...", "settings": {...}, "model_sha256": "...",
"inputs": [{"name", "dtype", "shape"}], "outputs": [names], "layers": [{"index", "name",
"op", "key", "kernel", "tactic": "0x<16 hex>", "time_ms"}]}``; ``layers`` holds every
autotuned layer, ``index`` being the node's position in the ONNX graph; ``layer_info`` is
the engine-inspector JSON of every layer (``{"Layers": [...], "Bindings": [...]}``), which
``reprobuild layers`` reads.

The engine stores the model rather than its folded weights: the light model-zoo models
describe 100 MB of weights with a few ``ConstantOfShape`` nodes, and folding is cheap and
deterministic, so it is redone when an engine is loaded.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from reprobuild.backends.base import Environment
from reprobuild.backends.reference import int8, kernels, modelcache, ops
from reprobuild.backends.reference.graphorder import consumed_names as _consumed_names
from reprobuild.backends.reference.graphorder import toposort as _toposort
from reprobuild.errors import EngineError, UsageError

ENGINE_MAGIC = b"RBREFENG"
ENGINE_FORMAT_VERSION = 1
ENGINE_FORMAT_NAME = "reprobuild-reference-engine"
_PREFIX = struct.Struct("<8sIIQ")
_DIGEST_SIZE = 32

_PROGRAMS_MAX = 4  # compiled programs kept per folded model (one per kernel plan)

# Ops whose outputs are not a function of their inputs: never folded at build time.
_NONDETERMINISTIC_OPS = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
}


# -- file format ------------------------------------------------------------------------------
def write_engine(metadata: Mapping[str, Any], model_bytes: bytes) -> bytes:
    meta = json.dumps({"format": ENGINE_FORMAT_NAME, **metadata}, sort_keys=True).encode()
    head = _PREFIX.pack(ENGINE_MAGIC, ENGINE_FORMAT_VERSION, len(meta), len(model_bytes)) + meta
    digest = hashlib.sha256(head)
    digest.update(model_bytes)
    # one join: the model (the weights) is copied once, not once per concatenation
    return b"".join((head, model_bytes, digest.digest()))


def read_engine(data: bytes) -> tuple[dict[str, Any], bytes]:
    """Return (metadata, model bytes); raises ``EngineError`` for foreign or corrupted data."""
    meta, model, _ = split_engine(data)
    return meta, bytes(model)


def split_engine(data: bytes) -> tuple[dict[str, Any], memoryview, bytes]:
    """(metadata, a view of the model bytes, the checked SHA-256 of the body), copying nothing:
    an engine carries the whole model, and copies of it were verify's memory peak."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise EngineError(f"engine must be bytes, got {type(data).__name__}")
    view = memoryview(data).cast("B")
    if len(view) < _PREFIX.size + _DIGEST_SIZE or bytes(view[:8]) != ENGINE_MAGIC:
        raise EngineError(
            "engine was not written by the reference backend (bad magic or too short): "
            "rebuild it with the reference backend, or run it with the backend that built it"
        )
    _, version, meta_len, model_len = _PREFIX.unpack_from(view)
    if version != ENGINE_FORMAT_VERSION:
        raise EngineError(
            f"engine has format version {version}, this reprobuild reads version "
            f"{ENGINE_FORMAT_VERSION}: rebuild the engine"
        )
    body, digest = view[:-_DIGEST_SIZE], bytes(view[-_DIGEST_SIZE:])
    if len(body) != _PREFIX.size + meta_len + model_len:
        raise EngineError("engine file is truncated or has trailing bytes: rebuild the engine")
    if hashlib.sha256(body).digest() != digest:
        raise EngineError("engine file is corrupted (checksum mismatch): rebuild the engine")
    try:
        meta = json.loads(bytes(body[_PREFIX.size : _PREFIX.size + meta_len]).decode())
    except ValueError as exc:
        raise EngineError(f"engine metadata is unreadable ({exc}): rebuild the engine") from exc
    if not isinstance(meta, dict) or meta.get("format") != ENGINE_FORMAT_NAME:
        raise EngineError("engine metadata has an unknown format: rebuild the engine")
    return meta, body[_PREFIX.size + meta_len :], digest


def engine_environment(meta: Mapping[str, Any]) -> Environment:
    try:
        return Environment(**meta["environment"])
    except (KeyError, TypeError) as exc:
        raise EngineError("engine metadata lacks its environment: rebuild the engine") from exc


# -- the prepared model -----------------------------------------------------------------------
def attributes(node: onnx.NodeProto) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        values[attr.name] = value.decode() if isinstance(value, bytes) else value
    return values


def layer_name(node: onnx.NodeProto, index: int) -> str:
    """The ONNX node name, or a stable ``<OpType>_<index>`` for unnamed nodes."""
    return node.name or f"{node.op_type}_{index}"


@dataclass
class Layer:
    """One node of the graph, in execution order."""

    index: int  # position in graph.node: part of the layer's identity
    name: str
    node: onnx.NodeProto
    attrs: dict[str, Any]
    fusion: int8.Fusion | None = None  # DQ -> layer (-> Q): runs INT8 kernels

    @property
    def op(self) -> str:
        return self.node.op_type

    @property
    def domain(self) -> str:
        return "" if self.node.domain in ("", "ai.onnx") else self.node.domain

    @property
    def has_subgraph(self) -> bool:
        return any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for a in self.node.attribute
        )


@dataclass
class PreparedModel:
    """A model with its constant subgraphs folded, ready to execute layer by layer."""

    model: onnx.ModelProto
    opsets: dict[str, int]
    constants: dict[str, Any]
    layers: list[Layer]  # runtime layers (not folded), topologically ordered
    inputs: list[onnx.ValueInfoProto]
    output_names: list[str]
    folded: int = 0
    fast_layers: set[int] = field(default_factory=set)  # layers a numpy fast path ran
    _evaluators: dict[int, Any] = field(default_factory=dict)
    last_use: dict[str, int] = field(default_factory=dict)
    _programs: dict[tuple[tuple[int, str], ...], Any] = field(default_factory=dict)
    _scratch: Any = None  # the programs' shared Conv buffers (:class:`.convstep.Scratch`)

    # -- node execution --------------------------------------------------------------------
    def run_generic(
        self, layer: Layer, inputs: Sequence[Any], outer: Mapping[str, Any] | None = None
    ) -> list[Any]:
        """Run a non-autotuned layer: a vectorized fast path or ``onnx.reference``.

        ``outer`` holds the outer-scope values a subgraph (If/Loop/Scan body) reads; they are
        fed as extra graph inputs so onnx.reference passes them to the body as context.
        """
        n_out = sum(1 for o in layer.node.output if o)
        fast = ops.run_fast(
            layer.op, layer.domain, inputs, layer.attrs, n_out, self.opsets.get(layer.domain, 1)
        )
        if fast is not None:
            self.fast_layers.add(layer.index)
            return fast
        evaluator = self._evaluators.get(layer.index)
        if evaluator is None:
            evaluator = self._make_evaluator(layer)
            self._evaluators[layer.index] = evaluator
        feeds = dict(outer or {})
        feeds.update(
            (name, value) for name, value in zip(layer.node.input, inputs, strict=True) if name
        )
        return list(evaluator.run(None, feeds))

    def _make_evaluator(self, layer: Layer) -> Any:
        from onnx.reference import ReferenceEvaluator

        in_names = list(dict.fromkeys(n for n in _consumed_names(layer.node) if n))
        graph = helper.make_graph(
            [layer.node],
            f"reprobuild_ref_{layer.index}",
            [helper.make_empty_tensor_value_info(n) for n in in_names],
            [helper.make_empty_tensor_value_info(n) for n in layer.node.output if n],
        )
        return ReferenceEvaluator(graph, opsets=self.opsets, functions=list(self.model.functions))

    def run_layer(
        self,
        layer: Layer,
        inputs: Sequence[Any],
        spec: kernels.KernelSpec | None,
        values: Mapping[str, Any] | None = None,
    ) -> list[Any]:
        if spec is not None:
            return [execute_spec(layer, spec, inputs)]
        outer = None
        if layer.has_subgraph and values is not None:
            own = set(layer.node.input)
            outer = {n: values[n] for n in _consumed_names(layer.node) if n and n not in own}
        return self.run_generic(layer, inputs, outer)

    def gather(self, layer: Layer, values: Mapping[str, Any]) -> list[Any]:
        return [values[n] if n else None for n in layer.node.input]

    # -- whole-model execution -------------------------------------------------------------
    def execute(
        self,
        feeds: Mapping[str, Any],
        plan: Mapping[int, kernels.KernelSpec],
    ) -> dict[str, Any]:
        """Run every layer with the kernel ``plan`` names (by graph index); free dead values.

        The layers run as a :class:`.program.Program`, compiled on the first run with this
        plan and kept (a few plans at most: an engine's, and a build's probes)."""
        key = tuple(sorted((index, spec.name) for index, spec in plan.items()))
        compiled = self._programs.get(key)
        if compiled is None:
            from reprobuild.backends.reference.convstep import Scratch
            from reprobuild.backends.reference.program import compile_program

            while len(self._programs) >= _PROGRAMS_MAX:
                self._programs.pop(next(iter(self._programs)))
            if self._scratch is None:
                self._scratch = Scratch()  # one set of buffers, whichever plan runs
            compiled = self._programs[key] = compile_program(self, plan, self._scratch)
        return compiled.execute(self, feeds)

    def release_scratch(self) -> None:
        """Free the Conv buffers kept between runs (they are made again at the next run)."""
        if self._scratch is not None:
            self._scratch.clear()


def execute_spec(layer: Layer, spec: kernels.KernelSpec, inputs: Sequence[Any]) -> Any:
    """Run an autotuned layer with one of its kernels (INT8 kernels need the fusion)."""
    if int8.is_int8(spec):
        if layer.fusion is None:
            raise ValueError(f"layer {layer.name!r} is not a fused Q/DQ layer: no INT8 kernel")
        return int8.execute(spec, layer.fusion, inputs, layer.attrs)
    return kernels.execute(spec, inputs, layer.attrs)


def prepare(model: onnx.ModelProto) -> PreparedModel:
    """Fold every constant subgraph once (as TensorRT does) and order the rest for execution."""
    graph = model.graph
    opsets = {("" if d.domain == "ai.onnx" else d.domain): d.version for d in model.opset_import}
    opsets.setdefault("", onnx.defs.onnx_opset_version())
    constants: dict[str, Any] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in constants]
    input_names = {vi.name for vi in inputs}
    # The arrays above are copies: the proto's copy of the weights is dead weight from here
    # on (the engine keeps the serialized bytes, not this proto), so free it.
    graph.ClearField("initializer")
    order = _toposort(list(graph.node), set(constants) | input_names)
    producers = {o: n for n in graph.node for o in n.output if o}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for name in dict.fromkeys(_consumed_names(n)):
            consumers.setdefault(name, []).append(n)
    graph_outputs = {o.name for o in graph.output}
    prepared = PreparedModel(
        model=model,
        opsets=opsets,
        constants=constants,
        layers=[],
        inputs=inputs,
        output_names=[o.name for o in graph.output],
    )
    for i in order:
        node = graph.node[i]
        layer = Layer(index=i, name=layer_name(node, i), node=node, attrs=attributes(node))
        consumed = [n for n in _consumed_names(node) if n]
        foldable = (
            node.op_type not in _NONDETERMINISTIC_OPS
            and not layer.has_subgraph
            and all(n in constants for n in consumed)
        )
        if foldable:
            args = prepared.gather(layer, constants)
            geo = kernels.geometry(layer.op, args, layer.attrs) if not layer.domain else None
            spec = kernels.candidates(geo)[0] if geo is not None else None
            outs = prepared.run_layer(layer, args, spec)
            for name, value in zip((o for o in node.output if o), outs, strict=False):
                constants[name] = value
            prepared.folded += 1
        else:
            layer.fusion = int8.find_fusion(node, producers, consumers, constants, graph_outputs)
            prepared.layers.append(layer)
    needed = {n for layer in prepared.layers for n in _consumed_names(layer.node)}
    needed.update(prepared.output_names)
    prepared.constants = {k: v for k, v in constants.items() if k in needed}
    for position, layer in enumerate(prepared.layers):
        for name in _consumed_names(layer.node):
            if name:
                prepared.last_use[name] = position
    for name in prepared.output_names:
        prepared.last_use[name] = len(prepared.layers)
    return prepared


# -- inputs -----------------------------------------------------------------------------------
def input_dtype(vi: onnx.ValueInfoProto) -> np.dtype:
    elem = vi.type.tensor_type.elem_type
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem))


def check_inputs(prepared: PreparedModel, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Validate user inputs against the graph (names, dtypes, ranks): strongly typed."""
    feeds: dict[str, Any] = {}
    expected = {vi.name for vi in prepared.inputs}
    unknown = sorted(set(inputs) - expected)
    if unknown:
        raise UsageError(
            f"unknown engine input(s) {', '.join(unknown)}; the engine takes "
            f"{', '.join(sorted(expected)) or 'no inputs'}"
        )
    for vi in prepared.inputs:
        if vi.name not in inputs:
            raise UsageError(f"missing engine input {vi.name!r}: pass a value for every input")
        value = np.asarray(inputs[vi.name])
        dtype = input_dtype(vi)
        if value.dtype != dtype:
            raise UsageError(
                f"engine input {vi.name!r} has dtype {value.dtype}, the model expects {dtype}: "
                "cast it before running"
            )
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and len(dims) != value.ndim:
            raise UsageError(
                f"engine input {vi.name!r} has rank {value.ndim}, the model expects {len(dims)}"
            )
        feeds[vi.name] = value
    return feeds


# -- loading engines --------------------------------------------------------------------------
@dataclass
class LoadedEngine:
    meta: dict[str, Any]
    prepared: PreparedModel
    plan: dict[int, kernels.KernelSpec]


_LOADED: OrderedDict[bytes, LoadedEngine] = OrderedDict()
_LOADED_MAX = 1  # one engine in memory at a time: verify runs one engine, then the next


# The bytes object of the last loaded engine: running the same (immutable) ``bytes`` again
# skips the SHA-256 of the whole file and the metadata parse, which cost more than the layers
# on AlexNet and VGG (weights of 240 and 570 MB). Dropped by ``forget_engine_bytes`` when a
# build starts, so a caller that dropped its engine does not keep it alive through the build.
_LAST_BYTES: list[tuple[bytes, LoadedEngine]] = []


def clear_loaded() -> None:
    """Forget the loaded engine (its folded model stays only if :mod:`.modelcache` has it)."""
    forget_engine_bytes()
    _LOADED.clear()


def forget_engine_bytes() -> None:
    """Stop holding the last run engine's bytes and its runs' scratch buffers (its checked,
    loaded form stays)."""
    _LAST_BYTES.clear()
    for loaded in _LOADED.values():
        loaded.prepared.release_scratch()


def load_engine(data: bytes, environment: Environment) -> LoadedEngine:
    """Parse, check and prepare an engine; the last loaded engine stays in memory, and the
    folded model is shared with the build that made it (:mod:`.modelcache`)."""
    if type(data) is bytes and _LAST_BYTES and _LAST_BYTES[0][0] is data:
        return _LAST_BYTES[0][1]  # the very object checked last time: bytes never change
    loaded = _load_engine(data, environment)
    _LAST_BYTES.clear()
    if type(data) is bytes:
        _LAST_BYTES.append((data, loaded))
    return loaded


def _load_engine(data: bytes, environment: Environment) -> LoadedEngine:
    meta, model_view, digest = split_engine(data)
    cached = _LOADED.get(digest)
    if cached is not None:
        _LOADED.move_to_end(digest)
        return cached
    recorded = engine_environment(meta)
    if recorded.fingerprint() != environment.fingerprint():
        raise EngineError(
            f"engine was built in another environment (cpu {recorded.gpu!r}, "
            f"{recorded.driver_version}; this machine: cpu {environment.gpu!r}, "
            f"{environment.driver_version}): rebuild it here"
        )
    model_sha = hashlib.sha256(model_view).hexdigest()
    prepared = modelcache.get(model_sha)
    if prepared is None:
        try:
            model = onnx.load_model_from_string(bytes(model_view))
        except Exception as exc:  # protobuf raises its own DecodeError
            raise EngineError(f"engine holds an unreadable model ({exc}): rebuild it") from exc
        prepared = prepare(model)
        modelcache.put(model_sha, prepared)
    plan: dict[int, kernels.KernelSpec] = {}
    by_index = {layer.index: layer for layer in prepared.layers}
    for entry in meta.get("layers", []):
        spec = kernels.KERNELS.get(entry.get("kernel")) or int8.BY_NAME.get(entry.get("kernel"))
        layer = by_index.get(entry.get("index"))
        if (
            spec is None
            or layer is None
            or layer.op != spec.op
            or (int8.is_int8(spec) and layer.fusion is None)
        ):
            raise EngineError(
                f"engine layer {entry.get('name')!r} names kernel {entry.get('kernel')!r} that "
                "this reprobuild does not have for it: rebuild the engine"
            )
        if int(entry["tactic"], 16) != spec.tactic_hash:
            raise EngineError(f"engine layer {entry.get('name')!r} has an inconsistent tactic")
        plan[layer.index] = spec
    loaded = LoadedEngine(meta, prepared, plan)
    while len(_LOADED) >= _LOADED_MAX:  # drop the old engine before keeping the new one
        _LOADED.popitem(last=False)
    _LOADED[digest] = loaded
    return loaded
