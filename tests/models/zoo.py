"""The onnx package's light model-zoo architectures with seeded, well-scaled weights.

Why: ``onnx/backend/test/data/light/light_*.onnx`` keep each architecture but replace its
weights by ``ConstantOfShape`` nodes holding one value (0.02). Every channel then computes
the same thing, the final outputs are one value repeated (a flat softmax) whatever the
input, and no tactic change can reach them: a reproducibility check on these models has no
power. :func:`reweighted` keeps every compute node (name, op, attributes, inputs, outputs)
and replaces the parameters with:

- He-normal weights (std ``sqrt(2 / fan_in)``) for Conv, Gemm and MatMul, zero biases: the
  second moment of the activations stays about constant through ReLU layers;
- BatchNormalization as the identity (scale 1, bias 0, mean 0, var 1), except the last
  BatchNormalization of each residual branch, whose scale is :data:`RESIDUAL_GAMMA`, so
  ResNet's residual sums grow slowly instead of doubling per block;
- the Caffe-style per-channel ``Mul``/``Add`` after BatchNormalization (DenseNet,
  Inception v2) as scale 1 and shift 0.

Each ``ConstantOfShape`` weight becomes an initializer of the same name (listed as a graph
input too, as these IR-3 models list every initializer); its shape input goes away. The
logits are then scaled by a power of two (exact in floating point, and robust to the last
bits of the one ONNX Runtime run that measures them) so that their spread over the output
vector is about :data:`TARGET_LOGIT_STD`: the softmax varies without saturating.
Values are drawn per parameter from ``(seed, crc32(parameter name))``, so the same seed
gives the same bytes.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

LIGHT_DIR = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
MODELS = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)
RESIDUAL_GAMMA = 0.2
TARGET_LOGIT_STD = 2.0

_MOVE_OPS = {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity"}
"""Ops that only move constant data: a weight reaches its consumer through them."""
_PASS_OPS = {"Relu", "GlobalAveragePool", "AveragePool", "Reshape", "Flatten", "Dropout"}
"""Positively homogeneous ops between the last weighted layer and the softmax."""


@dataclass
class _Slot:
    """One parameter tensor a compute node reads, and how to fill it."""

    root: str  # the initializer or ConstantOfShape output that holds the values
    shape: tuple[int, ...]  # the shape the consumer sees (after Reshape/Unsqueeze)
    kind: str  # "he", "bias", "zero", "one", "bn_scale", "bn_damped", "bn_var"
    fan_in: int = 0


def light_path(name: str) -> Path:
    """The shipped light model file (``ValueError`` naming the choices if unknown)."""
    if name not in MODELS:
        raise ValueError(f"unknown light model {name!r}; choose one of {', '.join(MODELS)}")
    return LIGHT_DIR / f"light_{name}.onnx"


def light_model(name: str) -> onnx.ModelProto:
    """The light model as shipped (constant stand-in weights)."""
    return onnx.load(str(light_path(name)))


def runner_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The inputs onnx's own backend test runner feeds these models: ``arange(n) / n`` in
    each graph input's shape (dynamic dims 1), as float32."""
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name not in inits:
            shape = tuple(d.dim_value or 1 for d in vi.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


def data_input(model: onnx.ModelProto) -> tuple[str, tuple[int, ...]]:
    """The one graph input that is not an initializer, and its static shape."""
    inits = {t.name for t in model.graph.initializer}
    (vi,) = [vi for vi in model.graph.input if vi.name not in inits]
    return vi.name, tuple(int(d.dim_value) for d in vi.type.tensor_type.shape.dim)


def seeded_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Uniform [0, 1) float32 input of the model's input shape, as ``verify`` seeds them."""
    name, shape = data_input(model)
    return {name: np.random.default_rng(seed).random(shape, dtype=np.float32)}


def _constants(model: onnx.ModelProto) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Values of every constant tensor, and the root each constant is moved from."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    root = {name: name for name in values}
    for node in model.graph.node:
        if not node.input or not all(i in values for i in node.input if i):
            continue
        if node.op_type == "ConstantOfShape":
            fill = numpy_helper.to_array(node.attribute[0].t) if node.attribute else np.zeros(1)
            values[node.output[0]] = np.full(tuple(values[node.input[0]]), fill[0], fill.dtype)
            root[node.output[0]] = node.output[0]
        elif node.op_type in _MOVE_OPS:
            values[node.output[0]] = _move(node, [values[i] for i in node.input if i])
            root[node.output[0]] = root[node.input[0]]
    return values, root


def _move(node: onnx.NodeProto, args: list[np.ndarray]) -> np.ndarray:
    """Evaluate a data-movement op on constants (only the shape matters for the weights)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    data = args[0]
    if node.op_type == "Reshape":
        target = [d if d != 0 else data.shape[i] for i, d in enumerate(args[1].tolist())]
        return data.reshape(target)
    axes = attrs.get("axes", args[1].tolist() if len(args) > 1 else None)
    if node.op_type == "Unsqueeze":
        for axis in sorted(a % (data.ndim + len(axes)) for a in axes):
            data = np.expand_dims(data, axis)
        return data
    if node.op_type == "Squeeze":
        return np.squeeze(data, axis=None if axes is None else tuple(axes))
    if node.op_type == "Flatten":
        axis = attrs.get("axis", 1)
        return data.reshape(int(np.prod(data.shape[:axis])), -1)
    return data


def _conv_depths(model: onnx.ModelProto, constant: set[str]) -> dict[str, int]:
    """Number of Conv/Gemm/MatMul layers on the longest path to each tensor."""
    depth: dict[str, int] = {}
    for node in model.graph.node:
        d = max((depth.get(i, 0) for i in node.input if i and i not in constant), default=0)
        d += node.op_type in ("Conv", "Gemm", "MatMul")
        for out in node.output:
            depth[out] = d
    return depth


def _damped_bns(model: onnx.ModelProto, constant: set[str]) -> set[str]:
    """Outputs of the last BatchNormalization of each residual branch.

    A residual sum adds a branch to a shortcut; the branch is the input with more weighted
    layers behind it, so a BatchNormalization feeding a Sum/Add is damped unless it is the
    shallowest input (a projection shortcut).
    """
    producer = {out: node for node in model.graph.node for out in node.output}
    depth = _conv_depths(model, constant)
    damped: set[str] = set()
    for node in model.graph.node:
        if node.op_type not in ("Sum", "Add"):
            continue
        live = [i for i in node.input if i and i not in constant]
        if len(live) < 2:
            continue
        shallowest = min(depth.get(i, 0) for i in live)
        for i in live:
            if producer.get(i) is not None and producer[i].op_type == "BatchNormalization":
                if depth.get(i, 0) > shallowest:
                    damped.add(i)
    return damped


def _slots(
    model: onnx.ModelProto, values: dict[str, np.ndarray], root: dict[str, str]
) -> dict[str, _Slot]:
    """Every parameter root with its consumer-side shape and how to fill it."""
    damped = _damped_bns(model, set(values))
    slots: dict[str, _Slot] = {}

    def add(tensor: str, kind: str, fan_in: int = 0) -> None:
        if not tensor or tensor not in values or values[tensor].dtype != np.float32:
            return
        slot = _Slot(root[tensor], tuple(values[tensor].shape), kind, fan_in)
        if slots.setdefault(slot.root, slot) != slot:
            raise ValueError(f"parameter {slot.root!r} feeds two different slots")

    for node in model.graph.node:
        ins = list(node.input) + [""] * 5
        if node.op_type == "Conv" and ins[1] in values:
            add(ins[1], "he", int(np.prod(values[ins[1]].shape[1:])))
            add(ins[2], "bias")
        elif node.op_type == "Gemm" and ins[1] in values:
            trans_b = any(a.name == "transB" and a.i for a in node.attribute)
            add(ins[1], "he", int(values[ins[1]].shape[1 if trans_b else 0]))
            add(ins[2], "bias")
        elif node.op_type == "MatMul" and ins[1] in values:
            add(ins[1], "he", int(values[ins[1]].shape[-2]))
        elif node.op_type == "BatchNormalization":
            add(ins[1], "bn_damped" if node.output[0] in damped else "bn_scale")
            add(ins[2], "zero")
            add(ins[3], "zero")
            add(ins[4], "bn_var")
        elif node.op_type in ("Mul", "Add"):
            for i in ins[:2]:
                add(i, "one" if node.op_type == "Mul" else "zero")
    return slots


def _fill(slot: _Slot, seed: int, eps: float, bias_std: float = 0.0) -> np.ndarray:
    """The slot's seeded values in the consumer's shape."""
    if slot.kind == "he" or (slot.kind == "bias" and bias_std > 0):
        rng = np.random.default_rng([seed, zlib.crc32(slot.root.encode())])
        std = math.sqrt(2.0 / max(slot.fan_in, 1)) if slot.kind == "he" else bias_std
        return rng.normal(0.0, std, slot.shape).astype(np.float32)
    constant = {"zero": 0.0, "bias": 0.0, "one": 1.0, "bn_scale": 1.0, "bn_damped": RESIDUAL_GAMMA}
    # var = 1 - eps makes the normalisation exactly the identity (scale / sqrt(var + eps))
    value = 1.0 - eps if slot.kind == "bn_var" else constant[slot.kind]
    return np.full(slot.shape, value, np.float32)


def _bn_eps(model: onnx.ModelProto) -> dict[str, float]:
    eps: dict[str, float] = {}
    for node in model.graph.node:
        if node.op_type == "BatchNormalization":
            e = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
            for i in node.input[1:]:
                eps[i] = e
    return eps


def _replace(model: onnx.ModelProto, new: dict[str, np.ndarray]) -> None:
    """Put ``new`` root values in place: initializers overwritten, ConstantOfShape replaced."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    inputs = {vi.name: vi for vi in graph.input}
    kept = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.output[0] in new:
            continue
        kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    for name, arr in sorted(new.items()):
        tensor = numpy_helper.from_array(arr, name)
        if name in inits:
            inits[name].CopyFrom(tensor)
        else:
            graph.initializer.append(tensor)
        vi = helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(arr.shape))
        if name in inputs:
            inputs[name].CopyFrom(vi)
        else:
            graph.input.append(vi)
    used = {i for node in graph.node for i in node.input} | {o.name for o in graph.output}
    for container in (graph.initializer, graph.input):
        dead = [item for item in container if item.name not in used]
        for item in dead:
            container.remove(item)


def logits_name(model: onnx.ModelProto) -> str:
    """The tensor the softmax normalizes, or the output itself when there is no softmax."""
    (out,) = [o.name for o in model.graph.output]
    producer = {o: node for node in model.graph.node for o in node.output}
    node = producer.get(out)
    return node.input[0] if node is not None and node.op_type == "Softmax" else out


def _last_weight(model: onnx.ModelProto, start: str, root: dict[str, str]) -> str | None:
    """The weight root of the last weighted layer before ``start``, through homogeneous ops."""
    producer = {o: node for node in model.graph.node for o in node.output}
    node = producer.get(start)
    while node is not None and node.op_type in _PASS_OPS:
        node = producer.get(node.input[0])
    if node is None or node.op_type not in ("Conv", "Gemm", "MatMul"):
        return None
    return root.get(node.input[1])


def run_onnxruntime(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], names: Iterable[str]
) -> list[np.ndarray]:
    """Run ``model`` on ONNX Runtime's CPU provider, returning the named tensors."""
    import onnxruntime as ort

    model = onnx.ModelProto.FromString(model.SerializeToString())
    have = {o.name for o in model.graph.output}
    names = list(names)
    for name in names:
        if name not in have:
            model.graph.output.append(onnx.ValueInfoProto(name=name))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(names, feeds)


def resize_input(model: onnx.ModelProto, side: int) -> None:
    """Make the data input ``side`` x ``side`` (NCHW) in place. Only for architectures that
    end in a global pooling (squeezenet, densenet121): the others reshape to fixed sizes."""
    name, _ = data_input(model)
    (vi,) = [vi for vi in model.graph.input if vi.name == name]
    dims = vi.type.tensor_type.shape.dim
    dims[2].dim_value = dims[3].dim_value = side
    del model.graph.value_info[:]  # inferred shapes of the old size


def free_batch(model: onnx.ModelProto) -> int:
    """Reshape targets whose first entry is the batch size 1 take it from their input (0)
    instead, in place, as an export with a dynamic batch gives them; returns how many.
    Why: INT8 calibration runs the model in batches of ``--calib-batch-size``, which a
    Reshape to ``[1, ...]`` refuses (shufflenet, resnet50, inception, vgg19, alexnet)."""
    inits = {t.name: t for t in model.graph.initializer}
    changed = 0
    for node in model.graph.node:
        target = inits.get(node.input[1]) if node.op_type == "Reshape" else None
        if target is None:
            continue
        shape = numpy_helper.to_array(target)
        if shape.ndim == 1 and shape.size and shape[0] == 1:
            shape = shape.copy()
            shape[0] = 0
            target.CopyFrom(numpy_helper.from_array(shape, target.name))
            changed += 1
    return changed


def at_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``model`` converted by onnx's version converter, with its weights only initializers
    (no longer also graph inputs), as a re-export at that opset would give it. Why: the zoo
    files are opset 9, and per-channel Q/DQ (INT8) needs opset 13."""
    from onnx import version_converter

    new = version_converter.convert_version(model, opset)
    # IR 3 requires every initializer to be an input too; the opset's own IR version does not
    new.ir_version = max(new.ir_version, helper.find_min_ir_version_for(new.opset_import))
    inits = {t.name for t in new.graph.initializer}
    kept = [vi for vi in new.graph.input if vi.name not in inits]
    del new.graph.input[:]
    new.graph.input.extend(kept)
    return new


def reweighted(
    name: str,
    seed: int = 0,
    *,
    side: int | None = None,
    opset: int | None = None,
    bias_std: float = 0.0,
    logit_std: float = TARGET_LOGIT_STD,
) -> onnx.ModelProto:
    """The light ``name`` architecture with seeded, well-scaled weights (module docstring);
    with ``side``, at that input size (:func:`resize_input`); with ``opset``, converted
    (:func:`at_opset`); with ``bias_std``, Conv/Gemm biases drawn from N(0, bias_std)
    instead of zero (kernels that treat the bias differently, such as INT8 epilogues that
    round it to the int32 grid, give the same bits on a zero bias); with ``logit_std``, the
    logits spread that much instead of :data:`TARGET_LOGIT_STD` (a large spread saturates
    the softmax: one-hot outputs whatever the last bits of the logits, on any BLAS)."""
    model = light_model(name)
    if side is not None:
        resize_input(model, side)
    values, root = _constants(model)
    eps = _bn_eps(model)
    slots = _slots(model, values, root)
    new: dict[str, np.ndarray] = {}
    for slot in slots.values():
        arr = _fill(slot, seed, eps.get(slot.root, 1e-5), bias_std)
        new[slot.root] = arr.reshape(values[slot.root].shape)
    _replace(model, new)
    weight = _last_weight(model, logits_name(model), root)
    if weight is not None:
        (logits,) = run_onnxruntime(model, seeded_feeds(model), [logits_name(model)])
        spread = float(np.std(logits.reshape(logits.shape[0], -1), axis=1).mean())
        if spread > 0 and math.isfinite(spread):
            gain = 2.0 ** round(math.log2(logit_std / spread))
            _replace(model, {weight: new[weight] * np.float32(gain)})
    if opset is not None:
        model = at_opset(model, opset)
    onnx.checker.check_model(model)
    return model


def reweighted_path(
    name: str,
    directory: str | os.PathLike[str],
    seed: int = 0,
    *,
    side: int | None = None,
    opset: int | None = None,
    bias_std: float = 0.0,
    logit_std: float = TARGET_LOGIT_STD,
) -> Path:
    """``directory/NAME.seedSEED[.sSIDE][.opsetN][.bSTD][.lSTD].onnx``, written on first use
    and reused."""
    logit_tag = None if logit_std == TARGET_LOGIT_STD else logit_std
    tags = "".join(
        f".{k}{v}"
        for k, v in (
            ("seed", seed),
            ("s", side),
            ("opset", opset),
            ("b", bias_std or None),
            ("l", logit_tag),
        )
        if v is not None
    )
    path = Path(directory) / f"{name}{tags}.onnx"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        model = reweighted(
            name, seed, side=side, opset=opset, bias_std=bias_std, logit_std=logit_std
        )
        tmp.write_bytes(model.SerializeToString())
        os.replace(tmp, path)
    return path


@dataclass(frozen=True)
class OutputStats:
    """How much a model's output says, on seeded uniform [0, 1) inputs (ONNX Runtime).

    ``output_std``: spread of the final output over its vector (input seed 1);
    ``logit_std`` and ``softmax_max``: the same for the softmax's input, and the largest
    probability (from the logits when the model has no softmax); ``input_change``: largest
    change of the final output between input seeds 1 and 2; ``finite``: no NaN or Inf.
    """

    output_std: float
    logit_std: float
    softmax_max: float
    input_change: float
    finite: bool


def output_stats(model: onnx.ModelProto) -> OutputStats:
    """Measure :class:`OutputStats` for ``model`` (two ONNX Runtime runs)."""
    out = model.graph.output[0].name
    names = [out, logits_name(model)]
    out1, logits1 = run_onnxruntime(model, seeded_feeds(model, 1), names)
    out2, _ = run_onnxruntime(model, seeded_feeds(model, 2), names)
    z = logits1.reshape(-1).astype(np.float64)
    prob = np.exp(z - z.max())
    return OutputStats(
        output_std=float(np.std(out1)),
        logit_std=float(np.std(z)),
        softmax_max=float(prob.max() / prob.sum()),
        input_change=float(np.max(np.abs(out1.astype(np.float64) - out2))),
        finite=bool(np.isfinite(out1).all() and np.isfinite(out2).all()),
    )
