"""Which runs of layers the engine's program runs as one chain (:class:`.chain.ChainStep`):
the layers a chain can start with (an elementwise layer, or a Conv whose bias the chain
adds), the elementwise layers it can continue with, and the ops each contributes.

Why a module of its own: these rules read only the folded model (its constants, opsets and
last uses), never a step or a buffer; the program (:mod:`.program`) compiles what they
decide.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from reprobuild.backends.reference import kernels
from reprobuild.backends.reference.chain import RELU, ElementOp, binary_op
from reprobuild.backends.reference.convstep import supported
from reprobuild.backends.reference.elementwise import BINARY
from reprobuild.backends.reference.prepared import Layer, PreparedModel


def chain_end(prepared: PreparedModel, plan: Mapping[int, kernels.KernelSpec], start: int) -> int:
    """One past the last layer of the elementwise run starting at ``start``: each next
    layer reads the previous one's output, which nothing else reads."""
    layers = prepared.layers
    position = start
    if _chain_head(prepared, layers[start], plan.get(layers[start].index)) is None:
        return start
    while position + 1 < len(layers):
        (out,) = (o for o in layers[position].node.output if o)
        nxt = layers[position + 1]
        found = element_ops(prepared, nxt, plan.get(nxt.index))
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


def chain_ops(
    prepared: PreparedModel, plan: Mapping[int, kernels.KernelSpec], start: int, end: int
) -> tuple[str, list[ElementOp]]:
    """(the chain's input, every op in order) of the chain of layers ``start:end``."""
    layers = prepared.layers[start:end]
    head = _chain_head(prepared, layers[0], plan.get(layers[0].index))
    assert head is not None
    ops = list(head[1])
    for layer in layers[1:]:
        found = element_ops(prepared, layer, None)
        assert found is not None
        ops += found[1]
    return head[0], ops


def chain_channels(
    prepared: PreparedModel, plan: Mapping[int, kernels.KernelSpec], start: int, end: int
) -> int:
    """The channels of the output of the chain of layers ``start:end`` when its ops say
    (a per-channel constant: a Conv's bias, BatchNormalization's), else 0."""
    for op in chain_ops(prepared, plan, start, end)[1]:
        if op.channels:
            return int(op.constant.shape[0])
    return 0


def _chain_head(
    prepared: PreparedModel, layer: Layer, spec: kernels.KernelSpec | None
) -> tuple[str, list[ElementOp]] | None:
    """(its input, its ops) of a layer a chain may start with, else None."""
    return element_ops(prepared, layer, spec) or _conv_head(prepared, layer, spec)


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


def element_ops(
    prepared: PreparedModel, layer: Layer, spec: kernels.KernelSpec | None
) -> tuple[str, list[ElementOp]] | None:
    """(the one non-constant input, the ops) of a layer a chain can run, else None: the
    layers and conditions :func:`.program._runner` gives a numpy path to."""
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
        constants = bn_constants(prepared, layer)
        if constants is None:
            return None
        inv, shift = constants
        return names[0], [
            ElementOp(np.multiply, inv, channels=True),
            ElementOp(np.add, shift, channels=True),
        ]
    return None


def bn_constants(prepared: PreparedModel, layer: Layer) -> tuple[np.ndarray, np.ndarray] | None:
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
