"""The engine's execution program: the layer list compiled once into steps that run fast.

Why: an engine run used to re-derive, per layer and per run, what never changes between
runs (which inputs die after the layer, the BatchNormalization scale and shift, which ops
have a numpy path) and ran elementwise layers through ``onnx.reference``, each allocating
a new tensor. A :class:`Program` is compiled once per (folded model, kernel plan) and:

- runs the autotuned layers with their locked kernels, exactly as before
  (:func:`.prepared.execute_spec`, untouched);
- runs the elementwise layers (Relu, Add/Sub/Mul/Div, Sum, BatchNormalization) and Concat
  with numpy directly, writing into an input's buffer when that input dies at the layer and
  nothing else can see it: a chain such as Conv -> BatchNormalization -> Relu (-> Mul ->
  Add) runs in the Conv output's buffer, one tensor instead of one per layer;
- folds BatchNormalization's per-channel scale and shift once, at compile time;
- adds a Conv layer's constant bias in the pass of the elementwise layers that follow it
  (Conv -> Relu is one pass over the output after the GEMM, not two);
- has such a chain write its output where the next layer wants it: into the padded
  buffer of the Conv after it, or into its channels of the Concat after it
  (:mod:`.concats`, which also lets DenseNet's Concats append to the previous one).

Each numpy step computes what the generic path computes, the same float operations in the
same order (``tests/test_reference_program.py`` holds them to it bit for bit); the one
difference is the sign of a zero: ``Sum`` of negative zeros gives ``-0.0`` where
``onnx.reference`` (``0 + a + b``) gives ``+0.0``.

Buffer ownership, decided statically: a tensor may be overwritten by the layer that reads
it last only if a layer known to return a new array produced it (:data:`FRESH_OPS`, or an
autotuned float kernel), it is not a graph output, and no layer that might return a view of
it (Reshape, Flatten, Identity, ...) reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reprobuild.backends.reference import int8, kernels
from reprobuild.backends.reference.chain import RELU, ChainStep, ElementOp, binary_op
from reprobuild.backends.reference.concats import ConcatBuffers, Layout, growth, slots
from reprobuild.backends.reference.convstep import ConvStep, Scratch, supported
from reprobuild.backends.reference.elementwise import BINARY, binary, concat, relu, total
from reprobuild.backends.reference.graphorder import consumed_names
from reprobuild.backends.reference.prepared import Layer, PreparedModel, execute_spec

FRESH_OPS = frozenset(
    {"Relu", "Sum", "BatchNormalization", "Concat", "MaxPool", "AveragePool", "LRN", *BINARY}
)
"""Ops whose outputs (fast path or ``onnx.reference``) never share memory with an input."""

PROGRAMS_MAX = 4
"""Compiled programs kept per folded model (one per kernel plan)."""

KEEP_SCRATCH_BYTES = 32 << 20
"""Conv buffers up to this size stay allocated between runs (:meth:`.Scratch.trim`)."""

Runner = Callable[[list[Any], Mapping[str, Any], "PreparedModel"], list[Any]]
"""(inputs, every live value, the model) -> outputs. The model is an argument, not captured:
a program kept on its model must not form a cycle with it, or dropping the model would
wait for the cyclic garbage collector with all its weights alive (verify's peak)."""


@dataclass(frozen=True)
class LayerStep:
    """One layer: where its inputs come from, how it runs, which values die after it."""

    inputs: tuple[str, ...]  # "" for an omitted optional input
    outputs: tuple[str, ...]
    run: Runner
    free: tuple[str, ...]
    conv: ConvStep | None = None  # a Conv layer's step, whose bias a chain may add


@dataclass(frozen=True)
class Program:
    steps: tuple[LayerStep, ...]
    scratch: Scratch  # the Conv steps' kept buffers (:mod:`.convstep`), shared per model
    concats: ConcatBuffers  # this run's Concat buffers being filled (:mod:`.concats`)

    def execute(self, prepared: PreparedModel, feeds: Mapping[str, Any]) -> dict[str, Any]:
        self.concats.clear()
        values: dict[str, Any] = dict(prepared.constants)
        values.update(feeds)
        for step in self.steps:
            inputs = [values[n] if n else None for n in step.inputs]
            outputs = step.run(inputs, values, prepared)
            for name, value in zip(step.outputs, outputs, strict=False):
                values[name] = value
            for name in step.free:
                values.pop(name, None)
        self.scratch.trim(KEEP_SCRATCH_BYTES)
        self.concats.clear()
        return {name: values[name] for name in prepared.output_names}


def run_compiled(
    prepared: PreparedModel, feeds: Mapping[str, Any], plan: Mapping[int, kernels.KernelSpec]
) -> dict[str, Any]:
    """Run every layer with the kernel ``plan`` names (by graph index); free dead values.

    The layers run as a :class:`Program`, compiled on the first run with this plan and kept
    on the model (a few plans at most: an engine's, and a build's probes). A function here,
    not a method of the model: the model sits below the program, which compiles it."""
    key = tuple(sorted((index, spec.name) for index, spec in plan.items()))
    compiled = prepared._programs.get(key)
    if compiled is None:
        while len(prepared._programs) >= PROGRAMS_MAX:
            prepared._programs.pop(next(iter(prepared._programs)))
        if prepared._scratch is None:
            prepared._scratch = Scratch()  # one set of buffers, whichever plan runs
        compiled = prepared._programs[key] = compile_program(prepared, plan, prepared._scratch)
    return compiled.execute(prepared, feeds)


def compile_program(
    prepared: PreparedModel, plan: Mapping[int, kernels.KernelSpec], scratch: Scratch
) -> Program:
    """The steps of ``prepared`` run with the kernel ``plan`` (graph index -> kernel); the
    Conv steps keep their buffers in ``scratch``; runs of elementwise layers become one
    :class:`.chain.ChainStep` each."""
    ownable = _ownable(prepared, plan)
    runs: list[tuple[int, int]] = []  # (first, one past the last) layer of each step
    while not runs or runs[-1][1] < len(prepared.layers):
        start = runs[-1][1] if runs else 0
        runs.append((start, max(_chain_end(prepared, plan, start), start + 1)))
    chains = {
        prepared.layers[end - 1].node.output[0]: channels
        for start, end in runs
        if end - start > 1 and (channels := _chain_channels(prepared, plan, start, end))
    }
    concats, grown = ConcatBuffers(), growth(prepared, ownable)
    joined = slots(prepared, chains, set(grown))
    into_concat = {
        name: (prepared.layers[position], layout)
        for position, layouts in joined.items()
        for name, layout in zip(prepared.layers[position].node.input, layouts, strict=True)
    }
    steps = [
        _step(
            prepared,
            plan,
            position,
            ownable,
            scratch,
            (concats, grown.get(position)),
            joined.get(position),
        )
        for position in range(len(prepared.layers))
    ]
    fused: list[LayerStep] = []
    for start, end in runs:
        if end - start < 2:
            fused.append(steps[start])
            continue
        into = _next_conv_input(prepared, steps, end)
        target = into_concat.get(steps[end - 1].outputs[0])
        if target is not None:
            into = _concat_input(concats, *target)
        fused.append(_chain_step(prepared, plan, steps[start:end], start, ownable, into))
    return Program(tuple(fused), scratch, concats)


def _chain_ops(
    prepared: PreparedModel, plan: Mapping[int, kernels.KernelSpec], start: int, end: int
) -> tuple[str, list[ElementOp]]:
    """(the chain's input, every op in order) of the chain of layers ``start:end``."""
    layers = prepared.layers[start:end]
    head = _chain_head(prepared, layers[0], plan.get(layers[0].index))
    assert head is not None
    ops = list(head[1])
    for layer in layers[1:]:
        found = _element_ops(prepared, layer, None)
        assert found is not None
        ops += found[1]
    return head[0], ops


def _chain_channels(
    prepared: PreparedModel, plan: Mapping[int, kernels.KernelSpec], start: int, end: int
) -> int:
    """The channels of the output of the chain of layers ``start:end`` when its ops say
    (a per-channel constant: a Conv's bias, BatchNormalization's), else 0."""
    for op in _chain_ops(prepared, plan, start, end)[1]:
        if op.channels:
            return int(op.constant.shape[0])
    return 0


def _concat_input(
    concats: ConcatBuffers, layer: Layer, layout: Layout
) -> Callable[[np.ndarray], np.ndarray | None]:
    """Where a chain writes its output, an input of the Concat ``layer``: its channels of
    the Concat's buffer (:meth:`.ConcatBuffers.slot`)."""
    (name,) = (o for o in layer.node.output if o)
    axis = int(layer.attrs.get("axis", 1))
    return lambda x: concats.slot(name, layout, axis, x)


def _next_conv_input(
    prepared: PreparedModel, steps: Sequence[LayerStep], end: int
) -> Callable[[np.ndarray], np.ndarray | None] | None:
    """Where a chain ending before position ``end`` may write its output: into the padded
    buffer of the Conv at ``end`` (:meth:`.ConvStep.input_buffer`), when that Conv runs right
    after it, is the only layer that reads the output (as its data input) and its weights
    are constant; the next Conv's padding then copies nothing. Else None."""
    if end >= len(steps) or steps[end].conv is None:
        return None
    (out,) = steps[end - 1].outputs
    conv, names = steps[end].conv, list(prepared.layers[end].node.input)
    w = prepared.constants.get(names[1])
    if (
        names[0] != out
        or names.count(out) != 1
        or prepared.last_use.get(out) != end
        or out in prepared.output_names
        or type(w) is not np.ndarray
    ):
        return None
    return lambda x: conv.input_buffer(x, w)


def _step(
    prepared: PreparedModel,
    plan: Mapping[int, kernels.KernelSpec],
    position: int,
    ownable: set[str],
    scratch: Scratch,
    grown: tuple[ConcatBuffers, str | None],
    joined: list[Layout] | None,
) -> LayerStep:
    layer = prepared.layers[position]
    inputs = tuple(layer.node.input)
    donate = tuple(
        bool(n) and n in ownable and prepared.last_use.get(n) == position for n in inputs
    )
    free = tuple(
        dict.fromkeys(
            n
            for n in consumed_names(layer.node)
            if n and prepared.last_use.get(n) == position and n not in prepared.constants
        )
    )
    spec = plan.get(layer.index)
    conv = None
    if spec is not None and supported(spec) and layer.fusion is None:
        conv = ConvStep(spec, layer.attrs, scratch)
    return LayerStep(
        inputs=inputs,
        outputs=tuple(o for o in layer.node.output if o),
        run=_runner(prepared, layer, spec, donate, conv, grown, joined),
        free=free,
        conv=conv,
    )


def _chain_head(
    prepared: PreparedModel, layer: Layer, spec: kernels.KernelSpec | None
) -> tuple[str, list[ElementOp]] | None:
    """(its input, its ops) of a layer a chain may start with, else None."""
    return _element_ops(prepared, layer, spec) or _conv_head(prepared, layer, spec)


def _conv_head(
    prepared: PreparedModel, layer: Layer, spec: kernels.KernelSpec | None
) -> tuple[str, list[ElementOp]] | None:
    """(its input, the bias add) of a Conv layer run by :class:`.ConvStep` whose bias is a
    float32 constant: a chain may start with it and add the bias in its own pass over the
    output (one pass over the Conv's output fewer), else None."""
    if spec is None or not supported(spec) or layer.fusion is not None:
        return None
    names = list(layer.node.input)
    bias = prepared.constants.get(names[2]) if len(names) > 2 and names[2] else None
    if type(bias) is not np.ndarray or bias.dtype != np.float32 or bias.ndim != 1:
        return None
    return names[0], [ElementOp(np.add, bias, channels=True)]


def _element_ops(
    prepared: PreparedModel, layer: Layer, spec: kernels.KernelSpec | None
) -> tuple[str, list[ElementOp]] | None:
    """(the one non-constant input, the ops) of a layer a chain can run, else None: the
    layers and conditions :func:`_runner` gives a numpy path to."""
    if spec is not None or layer.domain or layer.has_subgraph:
        return None
    names = list(layer.node.input)
    if sum(1 for o in layer.node.output if o) != 1 or not names or not names[0]:
        return None
    if layer.op == "Relu" and len(names) == 1:
        return names[0], [RELU]
    if layer.op in BINARY and prepared.opsets.get("", 1) >= 7:
        op = binary_op(layer.op, names, prepared.constants)
        return None if op is None else (names[0] if op.first else names[1], [op])
    if layer.op == "BatchNormalization":
        constants = _bn_constants(prepared, layer)
        if constants is None:
            return None
        inv, shift = constants
        return names[0], [
            ElementOp(np.multiply, inv, channels=True),
            ElementOp(np.add, shift, channels=True),
        ]
    return None


def _chain_end(prepared: PreparedModel, plan: Mapping[int, kernels.KernelSpec], start: int) -> int:
    """One past the last layer of the elementwise run starting at ``start``: each next
    layer reads the previous one's output, which nothing else reads."""
    layers = prepared.layers
    position = start
    if _chain_head(prepared, layers[start], plan.get(layers[start].index)) is None:
        return start
    while position + 1 < len(layers):
        (out,) = (o for o in layers[position].node.output if o)
        nxt = layers[position + 1]
        found = _element_ops(prepared, nxt, plan.get(nxt.index))
        if (
            found is None
            or found[0] != out
            or prepared.last_use.get(out) != position + 1
            or out in prepared.output_names
            or list(nxt.node.input).count(out) != 1
        ):
            break
        position += 1
    return position + 1


def _chain_step(
    prepared: PreparedModel,
    plan: Mapping[int, kernels.KernelSpec],
    parts: Sequence[LayerStep],
    start: int,
    ownable: set[str],
    into: Callable[[np.ndarray], np.ndarray | None] | None = None,
) -> LayerStep:
    """One step for the layers ``parts`` (starting at position ``start``), as a chain that
    writes its output where ``into`` says (:func:`_next_conv_input`)."""
    conv = parts[0].conv
    x_name, ops = _chain_ops(prepared, plan, start, start + len(parts))
    head = parts[0].inputs.index(x_name)
    # a Conv head's product is a new array, which nothing else sees
    donate = conv is not None or (x_name in ownable and prepared.last_use.get(x_name) == start)
    chain = ChainStep(ops, donate)

    def run(inputs: list[Any], values: Mapping[str, Any], model: PreparedModel) -> list[Any]:
        x = inputs[head] if conv is None else conv.product(inputs)
        out = None if x is None else chain(x, into)
        if out is not None:
            return [out]
        value = parts[0].run(inputs, values, model)[0]  # one by one, as unchained
        for prev, part in zip(parts, parts[1:], strict=False):
            (made,) = prev.outputs
            ins = [value if n == made else (values[n] if n else None) for n in part.inputs]
            value = part.run(ins, values, model)[0]
        return [value]

    return LayerStep(
        inputs=parts[0].inputs,
        outputs=parts[-1].outputs,
        run=run,
        free=tuple(dict.fromkeys(n for part in parts for n in part.free)),
    )


def _ownable(prepared: PreparedModel, plan: Mapping[int, kernels.KernelSpec]) -> set[str]:
    """Names whose buffer the layer that reads them last may overwrite (module docstring)."""
    fresh: set[str] = set()
    shared: set[str] = set(prepared.output_names) | set(prepared.constants)
    for layer in prepared.layers:
        spec = plan.get(layer.index)
        kernel = spec is not None and not int8.is_int8(spec)
        new_arrays = not layer.domain and (kernel or layer.op in FRESH_OPS)
        if new_arrays and not layer.has_subgraph:
            fresh.update(o for o in layer.node.output if o)
        if not (new_arrays or spec is not None) or layer.has_subgraph:
            shared.update(n for n in consumed_names(layer.node) if n)
    return fresh - shared


def _runner(
    prepared: PreparedModel,
    layer: Layer,
    spec: kernels.KernelSpec | None,
    donate: tuple[bool, ...],
    conv: ConvStep | None,
    grown: tuple[ConcatBuffers, str | None],
    joined: list[Layout] | None,
) -> Runner:
    if conv is not None:
        return lambda inputs, _values, _model: [conv(inputs)]
    if spec is not None:
        return lambda inputs, _values, _model: [execute_spec(layer, spec, inputs)]

    def generic(inputs: list[Any], values: Mapping[str, Any], model: PreparedModel) -> list[Any]:
        return model.run_layer(layer, inputs, None, values)

    n_out = sum(1 for o in layer.node.output if o)
    if layer.domain or n_out != 1:
        return generic
    opset = prepared.opsets.get("", 1)
    fast: Callable[[list[Any]], Any | None] | None = None
    if layer.op == "Relu":
        fast = lambda inputs: relu(inputs, donate)  # noqa: E731
    elif layer.op in BINARY and opset >= 7:
        fast = lambda inputs: binary(layer.op, inputs, donate)  # noqa: E731
    elif layer.op == "Sum" and opset >= 8:
        fast = lambda inputs: total(inputs, donate)  # noqa: E731
    elif layer.op == "Concat" and opset >= 4:
        fast = _concat(layer, *grown, joined)
    elif layer.op == "BatchNormalization":
        fast = _batch_norm(prepared, layer, donate)
    if fast is None:
        return generic

    def run(inputs: list[Any], values: Mapping[str, Any], model: PreparedModel) -> list[Any]:
        out = fast(inputs)
        return generic(inputs, values, model) if out is None else [out]

    return run


def _concat(
    layer: Layer, concats: ConcatBuffers, extends: str | None, joined: list[Layout] | None
) -> Callable[[list[Any]], Any | None]:
    """A Concat layer's numpy path: a copy, or a buffer its inputs were written into
    (:mod:`.concats`)."""
    (name,) = (o for o in layer.node.output if o)
    if extends is not None:
        return lambda inputs: concats.grow(inputs, layer.attrs, extends, name)
    if joined is not None:
        return lambda inputs: concats.join(name, inputs, layer.attrs, joined)
    return lambda inputs: concat(inputs, layer.attrs)


def _bn_constants(prepared: PreparedModel, layer: Layer) -> tuple[np.ndarray, np.ndarray] | None:
    """Inference BatchNormalization on float32 with constant parameters: its per-channel
    ``inv`` and ``shift`` (``y = x * inv + shift``), computed once, as :func:`.ops.batch_norm`
    computes them; None where that numpy path would refuse the layer."""
    from reprobuild.backends.reference import ops

    names = list(layer.node.input)
    if len(names) != 5 or any(n not in prepared.constants for n in names[1:]):
        return None
    opset = prepared.opsets.get("", 1)
    params = [np.asarray(prepared.constants[n]) for n in names[1:]]
    probe = np.zeros((1, params[0].shape[0] if params[0].ndim == 1 else 0), np.float32)
    if ops.batch_norm([probe, *params], layer.attrs, opset, 1) is None:
        return None  # training mode, spatial=0, shapes or dtypes the numpy path refuses
    scale, bias, mean, var = params
    f32 = np.float32
    eps = f32(layer.attrs.get("epsilon", 1e-5))
    inv = scale.astype(f32) / np.sqrt(var.astype(f32) + eps)
    return inv, bias.astype(f32) - mean.astype(f32) * inv


def _batch_norm(
    prepared: PreparedModel, layer: Layer, donate: tuple[bool, ...]
) -> Callable[[list[Any]], Any | None] | None:
    """BatchNormalization as ``x * inv + shift`` (:func:`_bn_constants`)."""
    constants = _bn_constants(prepared, layer)
    if constants is None:
        return None
    inv, shift = constants
    f32 = np.float32

    def run(inputs: list[Any]) -> np.ndarray | None:
        x = inputs[0]
        if type(x) is not np.ndarray or x.dtype != f32 or x.ndim < 2:
            return None
        if x.shape[1] != inv.shape[0]:
            return None
        shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        out = x if donate[0] and x.flags.c_contiguous else None
        y = np.multiply(x, inv.reshape(shape), out=out)
        return np.add(y, shift.reshape(shape), out=y)

    return run
