"""The INT8 graph rewrite: QuantizeLinear/DequantizeLinear from a plan's scales, and
nothing else.

This is the only place a Q/DQ graph is made, on the recording build as on every locked one:
the activation scales come verbatim from the plan (float32 values of the lock's hex
floats), weights are quantized per output channel with symmetric scales
``max|w| / 127`` computed here in float32, and the result is a pure function of the model
and the plan. A weight whose scales no longer hash to the lock's value means another model,
and is refused.
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from reprobuild.errors import UsageError
from reprobuild.lock.plan import NodePrecision, PrecisionPlan
from reprobuild.lock.qplan import WeightScale
from reprobuild.precision.analysis import node_keys
from reprobuild.precision.opset import INT8_OPSET, model_opset

WEIGHT_INPUT = {"Conv": 1, "MatMul": 1, "Gemm": 1}
"""The input of each quantized op that is its weight (quantized per channel)."""


def activation_inputs(model: onnx.ModelProto, node: onnx.NodeProto) -> list[str]:
    """The inputs of a quantized node that get Q/DQ from an activation scale.

    Here, with the rewrite that inserts those Q/DQ, because calibration (:mod:`.quantize`)
    must ask ONNX Runtime for the scales of exactly these inputs."""
    inits = {i.name for i in model.graph.initializer}
    limit = 2  # data and weight; a Conv/Gemm bias stays float (TensorRT adds it in FP32)
    return [t for t in list(node.input)[:limit] if t and t not in inits]


def weight_input(model: onnx.ModelProto, node: onnx.NodeProto) -> str | None:
    """The weight initializer quantized per channel, if the node has one."""
    inits = {i.name for i in model.graph.initializer}
    i = WEIGHT_INPUT[node.op_type]
    name = node.input[i] if len(node.input) > i else ""
    return name if name in inits else None


def weight_axis(node: onnx.NodeProto) -> int:
    """The output-channel axis of a node's weight: Conv [O, I, ...] 0; MatMul [K, N] 1;
    Gemm B [K, N] 1, or [N, K] 0 with transB."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    return 1


def quantize_weight(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weight, float32 per-channel scales): symmetric, zero point 0, range +-127."""
    w = np.asarray(w, np.float32)
    other = tuple(i for i in range(w.ndim) if i != axis)
    absmax = np.max(np.abs(w), axis=other) if other else np.abs(w)
    scale = (absmax.astype(np.float32) / np.float32(127.0)).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)  # all-zero channel
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def scales_sha256(scale: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(scale, np.float32).tobytes()).hexdigest()


def weight_scale_entries(model: onnx.ModelProto, nodes: list[NodePrecision]) -> list[WeightScale]:
    """The lock's weight entries: every quantized node's weight, its axis and scale hash."""
    inits = {i.name: i for i in model.graph.initializer}
    by_key = dict(zip(node_keys(model), model.graph.node, strict=True))
    out: dict[str, WeightScale] = {}
    for n in nodes:
        if n.precision != "int8":
            continue
        node = by_key[n.node]
        w = weight_input(model, node)
        if w is None or w in out:
            continue
        axis = weight_axis(node)
        _, scale = quantize_weight(numpy_helper.to_array(inits[w]), axis)
        out[w] = WeightScale(w, axis, scales_sha256(scale))
    return [out[k] for k in sorted(out)]


def apply_quant_plan(model: onnx.ModelProto, plan: PrecisionPlan) -> onnx.ModelProto:
    """A copy of ``model`` with Q/DQ before every quantized node's inputs, as planned."""
    quant = plan.quantization
    if quant is None:
        raise UsageError("the INT8 precision plan has no quantization section; re-record it")
    opset = model_opset(model)
    if opset < INT8_OPSET:  # a build converts first (precision.opset.convert_for_int8)
        raise UsageError(
            f"the model uses ONNX opset {opset}; INT8 needs opset >= {INT8_OPSET} for "
            "per-channel quantization: convert it with precision.opset.convert_for_int8"
        )
    keys = node_keys(model)
    planned = plan.by_node()
    missing = [k for k in keys if k not in planned]
    if missing or len(planned) != len(keys):
        raise UsageError(
            f"the lock's INT8 plan does not match the model's nodes (e.g. "
            f"{(missing or sorted(set(planned) - set(keys)))[0]!r}); re-record the lock"
        )
    scales = quant.scales()
    weights = {w.tensor: w for w in quant.weights}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inits = {i.name: i for i in g.initializer}
    made: dict[str, str] = {}  # original tensor -> its dequantized name
    new_nodes: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    for key, node in zip(keys, g.node, strict=True):
        if planned[key].precision == "int8":
            for t in activation_inputs(model, node):
                if t not in scales:
                    raise UsageError(
                        f"the lock's INT8 plan has no scale for tensor {t!r}; re-record it"
                    )
                if t not in made:
                    made[t] = _activation_qdq(t, scales[t], new_nodes, new_inits)
            w = weight_input(model, node)
            if w is not None and w not in made:
                made[w] = _weight_dq(w, inits[w], weight_axis(node), weights, new_nodes, new_inits)
            for i, name in enumerate(node.input):
                if i < 2 and name in made:
                    node.input[i] = made[name]
        new_nodes.append(node)
    del g.node[:]
    g.node.extend(new_nodes)
    still_used = {t for n in g.node for t in n.input}
    kept = [i for i in g.initializer if i.name in still_used]
    dropped = {i.name for i in g.initializer} - {i.name for i in kept}
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    # Old-style models (opset < 9 exporters) also list every initializer as a graph input;
    # a weight replaced by its INT8 copy must leave that list too, or runtimes ask for it.
    inputs = [vi for vi in g.input if vi.name not in dropped]
    del g.input[:]
    g.input.extend(inputs)
    return out


def _activation_qdq(
    t: str, scale: float, nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]
) -> str:
    s, z = f"{t}_int8_scale", f"{t}_int8_zero_point"
    inits.append(numpy_helper.from_array(np.array(scale, np.float32), s))
    inits.append(numpy_helper.from_array(np.array(0, np.int8), z))
    q, dq = f"{t}_int8", f"{t}_dequantized"
    nodes.append(helper.make_node("QuantizeLinear", [t, s, z], [q], name=f"{t}_QuantizeLinear"))
    nodes.append(
        helper.make_node("DequantizeLinear", [q, s, z], [dq], name=f"{t}_DequantizeLinear")
    )
    return dq


def _weight_dq(
    w: str,
    init: onnx.TensorProto,
    axis: int,
    recorded: dict[str, WeightScale],
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto],
) -> str:
    if init.data_type != TensorProto.FLOAT:
        raise UsageError(f"weight {w!r} is not FP32; INT8 quantizes FP32 weights only")
    q, scale = quantize_weight(numpy_helper.to_array(init), axis)
    entry = recorded.get(w)
    if entry is None or entry.axis != axis or entry.sha256 != scales_sha256(scale):
        raise UsageError(
            f"weight {w!r}: its per-channel scales do not match the lock's INT8 plan (another "
            "model, or an edited lock); re-record the lock"
        )
    qn, sn, zn, dq = f"{w}_int8", f"{w}_int8_scale", f"{w}_int8_zero_point", f"{w}_dequantized"
    inits.append(numpy_helper.from_array(q, qn))
    inits.append(numpy_helper.from_array(scale, sn))
    inits.append(numpy_helper.from_array(np.zeros(scale.shape, np.int8), zn))
    nodes.append(
        helper.make_node(
            "DequantizeLinear", [qn, sn, zn], [dq], name=f"{w}_DequantizeLinear", axis=axis
        )
    )
    return dq
