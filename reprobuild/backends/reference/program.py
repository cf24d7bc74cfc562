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
  (:mod:`.concats`, which also lets DenseNet's Concats append to the previous one), or
  hand it image by image to the 2-D MaxPool after it, so that it is never written whole
  (:func:`.pools.chained_max_pool`), also when a Concat of such chains stands between
  them (each chain pools into its channels of the pool's output); which layers a chain
  covers is :mod:`.chainplan`'s.

Each numpy step computes what the generic path computes, the same float operations in the
same order (``tests/test_reference_program.py`` holds them to it bit for bit); the one
difference is the sign of a zero: ``Sum`` of negative zeros gives ``-0.0`` where
``onnx.reference`` (``0 + a + b``) gives ``+0.0``.

Buffer ownership, decided statically: a tensor may be overwritten by the layer that reads
it last only if a layer known to return a new array produced it (:data:`FRESH_OPS`, or an
autotuned float kernel), it is not a graph output, and no layer that might return a view of
it (Reshape, Flatten, Identity, Dropout, ...) reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reprobuild.backends.reference import int8, kernels
from reprobuild.backends.reference.chain import ChainStep
from reprobuild.backends.reference.chainplan import (
    bn_constants,
    chain_channels,
    chain_end,
    chain_ops,
)
from reprobuild.backends.reference.concats import ConcatBuffers, Layout, growth, slots
from reprobuild.backends.reference.convstep import ConvStep, Scratch, supported
from reprobuild.backends.reference.elementwise import BINARY, binary, concat, relu, total
from reprobuild.backends.reference.graphorder import consumed_names
from reprobuild.backends.reference.pools import chained_max_pool
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
        runs.append((start, max(chain_end(prepared, plan, start), start + 1)))
    chains = {
        prepared.layers[end - 1].node.output[0]: channels
        for start, end in runs
        if end - start > 1 and (channels := chain_channels(prepared, plan, start, end))
    }
    concats, grown = ConcatBuffers(), growth(prepared, ownable)
    joined = slots(prepared, chains, set(grown))
    into_concat = {
        name: (position, layout)
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
    pooled_joins = {
        p
        for p in joined
        if _pool_after(prepared, steps, p + 1) and _on_channels(prepared.layers[p])
    }
    fused: list[LayerStep] = []
    pooled: set[int] = set()  # MaxPools run by the chains before them
    for start, end in runs:
        if start in pooled:
            continue
        if start in pooled_joins:  # its inputs come pooled: it stands in for the MaxPool
            pooled.add(start + 1)
            fused.append(_standing_in(steps[start], steps[start + 1]))
        elif end - start < 2:
            fused.append(steps[start])
        else:
            target = into_concat.get(steps[end - 1].outputs[0])
            pool, into = _chain_target(prepared, steps, end, concats, target, pooled_joins)
            if pool is not None and pool.into is None:
                pooled.add(end)
            fused.append(_chain_step(prepared, plan, steps[start:end], start, ownable, pool, into))
    return Program(tuple(fused), scratch, concats)


def _chain_target(
    prepared: PreparedModel,
    steps: Sequence[LayerStep],
    end: int,
    concats: ConcatBuffers,
    target: tuple[int, Layout] | None,
    pooled_joins: set[int],
) -> tuple[PoolAfter | None, Callable[[np.ndarray], np.ndarray | None] | None]:
    """Where the chain ending before position ``end`` puts its output: (the MaxPool it
    hands it to, else None; where it writes it, else None). ``target``: the Concat (its
    position) and place in it where the output goes, if any."""
    if _pool_after(prepared, steps, end):
        return PoolAfter(steps[end], prepared.layers[end].attrs), None
    if target is None:
        return None, _next_conv_input(prepared, steps, end)
    position, layout = target
    slot = _concat_slot(concats, prepared.layers[position], layout)
    if position in pooled_joins:
        return PoolAfter(steps[position + 1], prepared.layers[position + 1].attrs, slot), None
    return None, lambda x: slot(x.shape)


def _on_channels(concat: Layer) -> bool:
    """Whether a Concat before a 2-D pool (4-D tensors) joins along the channels: the pool
    of the joined tensor is then the join of its inputs' pools (a pool reads one channel)."""
    return int(concat.attrs.get("axis", 1)) % 4 == 1


def _standing_in(concat: LayerStep, pool: LayerStep) -> LayerStep:
    """One step for a Concat and the MaxPool after it, when the chains that make the
    Concat's inputs pool them (:class:`PoolAfter` with ``into``): the Concat's own step,
    joining the pooled inputs (its buffer, when each was pooled into its channels), under
    the pool's output name."""
    return LayerStep(
        inputs=concat.inputs,
        outputs=pool.outputs,
        run=concat.run,
        free=tuple(dict.fromkeys((*concat.free, *pool.free))),
    )


def _concat_slot(
    concats: ConcatBuffers, layer: Layer, layout: Layout
) -> Callable[[tuple[int, ...]], np.ndarray | None]:
    """Where a chain writes its output (of a given shape), an input of the Concat ``layer``:
    its channels of the Concat's buffer (:meth:`.ConcatBuffers.slot`)."""
    (name,) = (o for o in layer.node.output if o)
    axis = int(layer.attrs.get("axis", 1))
    return lambda shape: concats.slot(name, layout, axis, shape)


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


@dataclass(frozen=True)
class PoolAfter:
    """The 2-D MaxPool a chain hands its output to image by image (:func:`_pool_after`):
    the pool's step and attributes, and where the pooled output goes: a new array that is
    the pool's output, or (``into``) the chain's channels of the pooled buffer of the
    Concat that stands in for that pool (:func:`_standing_in`)."""

    step: LayerStep
    attrs: Mapping[str, Any]
    into: Callable[[tuple[int, ...]], np.ndarray | None] | None = None


def _chain_step(
    prepared: PreparedModel,
    plan: Mapping[int, kernels.KernelSpec],
    parts: Sequence[LayerStep],
    start: int,
    ownable: set[str],
    pool: PoolAfter | None = None,
    into: Callable[[np.ndarray], np.ndarray | None] | None = None,
) -> LayerStep:
    """One step for the layers ``parts`` (starting at position ``start``), as a chain that
    writes its output where ``into`` says (:func:`_next_conv_input`), or hands it image by
    image to a MaxPool (``pool``)."""
    conv = parts[0].conv
    x_name, ops = chain_ops(prepared, plan, start, start + len(parts))
    head = parts[0].inputs.index(x_name)
    # a Conv head's product is a new array, which nothing else sees
    donate = conv is not None or (x_name in ownable and prepared.last_use.get(x_name) == start)
    chain = ChainStep(ops, donate)

    def run(inputs: list[Any], values: Mapping[str, Any], model: PreparedModel) -> list[Any]:
        x = inputs[head] if conv is None else conv.product(inputs)
        if x is not None and pool is not None:
            out = chained_max_pool(x, pool.attrs, chain, pool.into)
            if out is not None:
                return [out]
        value = None if x is None else chain(x, into)
        if value is None:  # one by one, as unchained
            value = parts[0].run(inputs, values, model)[0]
            for prev, part in zip(parts, parts[1:], strict=False):
                (made,) = prev.outputs
                ins = [value if n == made else (values[n] if n else None) for n in part.inputs]
                value = part.run(ins, values, model)[0]
        return [value] if pool is None else pool.step.run([value], values, model)

    last = parts if pool is None or pool.into is not None else [*parts, pool.step]
    return LayerStep(
        inputs=parts[0].inputs,
        outputs=last[-1].outputs,
        run=run,
        free=tuple(dict.fromkeys(n for part in last for n in part.free)),
    )


def _pool_after(prepared: PreparedModel, steps: Sequence[LayerStep], end: int) -> bool:
    """Whether the layer at ``end`` is a 2-D MaxPool (no Indices output) that is the only
    reader of the output of the chain ending before it: the chain then hands it its output
    image by image (:func:`.pools.chained_max_pool`), never writing it out whole."""
    if end >= len(steps):
        return False
    layer = prepared.layers[end]
    (out,) = steps[end - 1].outputs
    return (
        layer.op == "MaxPool"
        and not layer.domain
        and len(layer.node.output) == len(steps[end].outputs) == 1
        and list(layer.node.input) == [out]
        and prepared.last_use.get(out) == end
        and out not in prepared.output_names
        and len(layer.attrs.get("kernel_shape", ())) == 2
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


def _batch_norm(
    prepared: PreparedModel, layer: Layer, donate: tuple[bool, ...]
) -> Callable[[list[Any]], Any | None] | None:
    """BatchNormalization as ``x * inv + shift`` (:func:`bn_constants`)."""
    constants = bn_constants(prepared, layer)
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
