"""The folded model: a model's constant subgraphs folded once, its other layers in order.

Why a module of its own: the build (:mod:`.builder`), the engine loader (:mod:`.engine`) and
the compiled program (:mod:`.program`) all work on a :class:`PreparedModel`; kept here, below
all three, each imports it without importing the others (the loader and the program used to
import each other through it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from reprobuild.backends.reference import int8, kernels, ops
from reprobuild.backends.reference.graphorder import consumed_names as _consumed_names
from reprobuild.backends.reference.graphorder import toposort as _toposort

# Ops whose outputs are not a function of their inputs: never folded at build time.
_NONDETERMINISTIC_OPS = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
}


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
    # compiled programs (:func:`.program.run_compiled`) and their shared Conv buffers
    # (:class:`.convstep.Scratch`), kept on the model they were compiled for
    _programs: dict[tuple[tuple[int, str], ...], Any] = field(default_factory=dict)
    _scratch: Any = None

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


def input_dtype(vi: onnx.ValueInfoProto) -> np.dtype:
    elem = vi.type.tensor_type.elem_type
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem))
