"""INT8 with FP16/BF16 for what stays float: ``--precision int8 --float fp16|bf16``.

Which nodes: every node the INT8 plan does not quantize (ops other than Conv/MatMul/Gemm,
those ``--keep-fp32``/``--keep-fp32-op`` keep, those ONNX Runtime gave no scale) takes the
decision the FP16/BF16 rules of :mod:`.rules` give it on the same calibration samples
(magnitude over every calibration batch, ``--max-output``, ``--keep-fp32``, ...), with that
rule recorded; a constant producer is low precision only if every consumer still is (an
INT8 consumer takes it in FP32). INT8 nodes are ``int8``/``default`` as before.

The graph, as strongly typed TensorRT 11 takes it:

- the Q/DQ part is exactly the FP32-float INT8 graph (:func:`.qdq.apply_quant_plan`): FP32
  scales holding the lock's float32 values bit for bit, INT8 weights with FP32 per-channel
  scales. A DequantizeLinear's output type is its scale's type (at opset 13 both are
  float32 only; FP16 scales, allowed from opset 19, would also round the locked scales and
  flush tiny ones), so each quantized node reads FP32 dequantized values and writes FP32,
  which TensorRT fuses into an INT8 kernel with an FP32 bias;
- then the FP16/BF16 plan is applied to that graph by :func:`.apply.apply_plan`, as
  ``--precision fp16`` does, with the quantized nodes and every Q/DQ node kept FP32: a Cast
  to FP16 after a quantized node whose consumer is FP16, a Cast to FP32 before a
  QuantizeLinear fed by an FP16 tensor (opset 13 QuantizeLinear takes float32 input with a
  float32 scale; strongly typed TensorRT, too, wants input and scale of one type), the
  graph's inputs and outputs keeping their types.

An FP16 activation between a quantized node and the next QuantizeLinear (a Relu epilogue)
sits between Casts, so TensorRT may run it as its own pointwise layer instead of fusing it
into the INT8 kernel; ``--keep-fp32-op Relu`` keeps such epilogues in FP32 and fusable.
"""

from __future__ import annotations

import onnx

from reprobuild.errors import UsageError
from reprobuild.lock.plan import NodePrecision, PrecisionPlan, PrecisionSettings
from reprobuild.precision.analysis import node_keys, real_inputs

_QDQ = ("QuantizeLinear", "DequantizeLinear")


def _sized(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """A copy whose data inputs take ``batch`` samples (the calibration batch), so the rules
    measure batch by batch with known tensor sizes (their memory budget needs them)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    names = {vi.name for vi in real_inputs(model)}
    for vi in copy.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if vi.name in names and len(dims):
            dims[0].Clear()
            dims[0].dim_value = batch
    for vi in copy.graph.output:
        dims = vi.type.tensor_type.shape.dim
        if len(dims):
            dims[0].Clear()
            dims[0].dim_param = "reprobuild_calib_batch"
    del copy.graph.value_info[:]
    return copy


def float_side(
    model: onnx.ModelProto,
    settings: PrecisionSettings,
    mode: str,
    batches: list[dict],
    int8_nodes: list[NodePrecision],
) -> list[NodePrecision]:
    """The INT8 plan's nodes with what stays float decided by the ``mode`` rules."""
    from reprobuild.precision.rules import derive_plan

    size = len(next(iter(batches[0].values())))
    ruled = derive_plan(_sized(model, size), mode, settings, batches[0], "", batches[1:])
    return combine(model, int8_nodes, ruled.nodes, mode)


def combine(
    model: onnx.ModelProto,
    int8_nodes: list[NodePrecision],
    float_nodes: list[NodePrecision],
    mode: str,
) -> list[NodePrecision]:
    """INT8 decisions win; elsewhere the float rules' decision; constants re-follow."""
    ruled = {n.node: n for n in float_nodes}
    out = [n if n.precision == "int8" else ruled[n.node] for n in int8_nodes]
    index = {n.node: i for i, n in enumerate(out)}
    consumers: dict[str, list[int]] = {}
    for key, node in zip(node_keys(model), model.graph.node, strict=True):
        for x in node.input:
            if x:
                consumers.setdefault(x, []).append(index[key])
    nodes = list(model.graph.node)
    for i in reversed(range(len(out))):  # consumers come later in graph order
        n = out[i]
        if n.rule == "constant" and n.precision == mode:
            uses = [j for o in nodes[i].output if o for j in consumers.get(o, [])]
            if any(out[j].precision != mode for j in uses):
                out[i] = NodePrecision(n.node, n.op, "fp32", "constant")
    return out


def apply_int8_plan(model: onnx.ModelProto, plan: PrecisionPlan) -> onnx.ModelProto:
    """The INT8 graph of ``plan``: Q/DQ, then (``float`` fp16/bf16) the float side's Casts."""
    from reprobuild.precision.apply import apply_plan
    from reprobuild.precision.qdq import apply_quant_plan

    quant = plan.quantization
    if quant is None:
        raise UsageError("the INT8 precision plan has no quantization section; re-record it")
    low = quant.float_precision
    for n in plan.nodes:
        if n.precision not in ("int8", "fp32", "other", low):
            raise UsageError(
                f"the lock's INT8 plan runs node {n.node!r} in {n.precision}, but its float "
                f"precision is {low}; re-record the lock"
            )
    if low == "fp32":
        return apply_quant_plan(model, plan)
    named = onnx.ModelProto()
    named.CopyFrom(model)
    for key, node in zip(node_keys(named), named.graph.node, strict=True):
        node.name = key  # the plan's keys survive the Q/DQ nodes inserted between them
    qdq = apply_quant_plan(named, plan)
    planned = plan.by_node()
    view: list[NodePrecision] = []
    for key, node in zip(node_keys(qdq), qdq.graph.node, strict=True):
        e = planned.get(key)
        if e is None or e.op != node.op_type or node.op_type in _QDQ:
            view.append(NodePrecision(key, node.op_type, "fp32", "unsupported"))
        elif e.precision == "int8":
            view.append(NodePrecision(key, e.op, "fp32", "unsupported"))
        else:
            view.append(e)
    return apply_plan(qdq, PrecisionPlan(mode=low, settings=plan.settings, nodes=view))
