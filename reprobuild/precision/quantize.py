"""Deciding an INT8 plan: which nodes are quantized, and every activation scale, by
calibrating with ONNX Runtime's quantization tools.

``quantize_static`` (QDQ format, symmetric INT8 activations, per-channel symmetric
weights: what strongly typed TensorRT accepts) is run once to *measure*; only its
activation scales are kept. The graph that is built is always made by :mod:`.qdq` from
the plan, on the recording build as on every locked one, so a locked rebuild gives the
same Q/DQ graph bit for bit without the calibration data, whatever ONNX Runtime version
is installed later. Quantized ops are those TensorRT runs as INT8 kernels (Conv, MatMul,
Gemm); everything else stays FP32 with rule ``unsupported``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx

from reprobuild.errors import UsageError
from reprobuild.lock.plan import NodePrecision, PrecisionPlan, PrecisionSettings
from reprobuild.lock.qplan import ActivationScale, OpsetConversion, QuantPlan
from reprobuild.precision.analysis import node_keys
from reprobuild.precision.calibdata import CalibData, samples_hash
from reprobuild.precision.calibstream import histogram_ranges
from reprobuild.precision.qdq import activation_inputs, weight_scale_entries

QUANT_OPS = ("Conv", "MatMul", "Gemm")  # the ops qdq.WEIGHT_INPUT knows


def decide_nodes(model: onnx.ModelProto, settings: PrecisionSettings) -> list[NodePrecision]:
    """Each node's decision and the rule that made it (the ``--keep-fp32`` options win)."""
    patterns = [re.compile(p) for p in settings.keep_fp32]
    out: list[NodePrecision] = []
    for key, node in zip(node_keys(model), model.graph.node, strict=True):
        op = node.op_type
        if op not in QUANT_OPS:
            out.append(NodePrecision(key, op, "fp32", "unsupported"))
        elif any(p.search(key) for p in patterns):
            out.append(NodePrecision(key, op, "fp32", "name"))
        elif op in settings.keep_fp32_ops:
            out.append(NodePrecision(key, op, "fp32", "op"))
        else:
            out.append(NodePrecision(key, op, "int8", "default"))
    return out


def _dynamic_batch(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose inputs and outputs take any first dimension, so that calibration runs
    in batches of ``--calib-batch-size`` whatever the model's static batch is."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for vi in list(copy.graph.input) + list(copy.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if len(dims):
            dims[0].Clear()
            dims[0].dim_param = "reprobuild_calib_batch"
    del copy.graph.value_info[:]
    for key, node in zip(node_keys(copy), copy.graph.node, strict=True):
        node.name = key  # ONNX Runtime's nodes_to_exclude needs names
    return copy


def calibrate(
    model: onnx.ModelProto,
    settings: PrecisionSettings,
    method: str,
    batch_size: int,
    data: CalibData,
    float_precision: str = "fp32",
    opset: OpsetConversion | None = None,
) -> tuple[PrecisionPlan, list[str]]:
    """Calibrate with ONNX Runtime and return the INT8 plan, with notes for the user.

    ``float_precision`` fp16/bf16: what stays float is decided by those rules on the same
    batches (:mod:`.int8float`); ``opset``: the conversion ``model`` already went through,
    recorded in the plan."""
    from reprobuild.precision.measure import import_onnxruntime

    onnxruntime = import_onnxruntime()
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    notes: list[str] = []
    batches = data.batches(batch_size)
    if not batches:
        raise UsageError(
            f"{data.source}: {data.count} samples do not fill one batch of "
            f"--calib-batch-size {batch_size}; pass a smaller batch size or more samples"
        )
    used = len(batches) * batch_size
    if used != data.count:
        notes.append(
            f"calibration: the last {data.count - used} samples do not fill a batch of "
            f"{batch_size} and are not used"
        )
    sha = (
        data.sha256
        if used == data.count
        else samples_hash({k: v[:used] for k, v in data.arrays.items()})
    )
    nodes = decide_nodes(model, settings)
    excluded = [n.node for n in nodes if n.precision != "int8"]

    class _Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self, some: list[dict[str, np.ndarray]]) -> None:
            self._it = iter(some)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    calib_method = {
        "entropy": CalibrationMethod.Entropy,
        "minmax": CalibrationMethod.MinMax,
        "percentile": CalibrationMethod.Percentile,
    }[method]
    extra: dict[str, object] = {
        "ActivationSymmetric": True,
        "WeightSymmetric": True,
        "CalibTensorRangeSymmetric": True,
    }
    with tempfile.TemporaryDirectory(prefix="reprobuild-calib-") as tmp:
        src, dst = Path(tmp) / "model.onnx", Path(tmp) / "model.qdq.onnx"
        onnx.save(_dynamic_batch(model), str(src))
        with _quiet(), _calibration_errors(batch_size):
            if method in ("entropy", "percentile"):
                # quantize_static passes no histogram size to its entropy calibrator, whose
                # default (128 bins for 128 quantized bins) leaves one threshold: the full
                # range, i.e. minmax; and its histogram calibrators hold every activation of
                # every batch at once. The ranges come from histograms collected batch by
                # batch (calibstream) with TensorRT's sizes; quantize_static turns them into
                # scales as for any method.
                extra["TensorQuantOverrides"] = histogram_ranges(
                    src, Path(tmp), list(QUANT_OPS), method, lambda: iter(batches)
                )
                calib_method = CalibrationMethod.MinMax
            given = extra.get("TensorQuantOverrides")

            def quantize(some: list[dict[str, np.ndarray]]) -> dict[str, float]:
                quantize_static(
                    str(src),
                    str(dst),
                    _Reader(some),
                    quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=list(QUANT_OPS),
                    nodes_to_exclude=excluded,
                    per_channel=True,
                    activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8,
                    calibrate_method=calib_method,
                    extra_options=extra,
                )
                return _scales_of(onnx.load(str(dst)))

            # With every range given, quantize_static's own calibration pass decides
            # nothing: one batch satisfies it, instead of a third pass over every sample;
            # a tensor it quantized without a given range would have the one batch's, so
            # then it calibrates on all of them.
            measured = quantize(batches[:1] if given else batches)
            if given and not set(measured) <= set(given):
                measured = quantize(batches)
    scales: dict[str, float] = {}
    by_key = dict(zip(node_keys(model), model.graph.node, strict=True))
    for i, n in enumerate(nodes):
        if n.precision != "int8":
            continue
        wanted = activation_inputs(model, by_key[n.node])
        if any(t not in measured for t in wanted):
            nodes[i] = NodePrecision(n.node, n.op, "fp32", "unsupported")
            notes.append(f"node {n.node!r}: ONNX Runtime gave no scale for its input; kept FP32")
            continue
        scales.update({t: measured[t] for t in wanted})
    if float_precision != "fp32":
        from reprobuild.precision.int8float import float_side

        nodes = float_side(model, settings, float_precision, batches, nodes)
    quant = QuantPlan(
        method=method,
        batch_size=batch_size,
        samples=used,
        data_sha256=sha,
        onnxruntime=onnxruntime.__version__,
        activations=[ActivationScale(t, scales[t]) for t in sorted(scales)],
        weights=weight_scale_entries(model, nodes),
        float_precision=float_precision,
        opset=opset,
    )
    plan = PrecisionPlan(
        mode="int8",
        settings=settings,
        # seeded samples are named by their seed, as fp16/bf16's seeded inputs are
        calibration=data.source
        if data.source.startswith("seeded:")
        else f"sha256:{sha} ({data.source}, {used} samples)",
        nodes=nodes,
        quantization=quant,
    )
    return plan, notes


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """ONNX Runtime's quantizer prints progress to stdout and warns on the root logger and
    through numpy; reprobuild's stdout is for results (``--json``), so all are muted while
    it runs. Its
    sessions' C++ log (an error it also raises, in colour on stderr) is muted too: the
    raised error becomes reprobuild's one-line message."""
    import onnxruntime

    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    onnxruntime.set_default_logger_severity(4)  # fatal only
    try:
        # numpy's RuntimeWarnings from inside the calibrator ("All-NaN slice encountered")
        # print a file path and a source line from onnxruntime; what they point at is
        # reported as one line (bad samples: calibcheck; a failed calibration: exit 2).
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            yield
    finally:
        onnxruntime.set_default_logger_severity(2)  # ONNX Runtime's default: warnings
        logging.disable(previous)


@contextlib.contextmanager
def _calibration_errors(batch_size: int) -> Iterator[None]:
    """ONNX Runtime failing on the calibration batches is a bad input (exit 2), most often a
    model made for one fixed batch size."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 - ORT raises several unrelated types
        if isinstance(err, UsageError):
            raise
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        if "not finite" in reason:  # the samples are finite (calibcheck), the activations not
            raise UsageError(
                f"ONNX Runtime could not calibrate the model ({reason}): an activation "
                "overflows to infinity or NaN on these samples; check their scale and "
                "preprocessing"
            ) from None
        raise UsageError(
            f"ONNX Runtime could not calibrate the model in batches of {batch_size} ({reason}); "
            "check that the samples fit the model: one made for a fixed batch size (a Reshape "
            "to [1, ...], say) needs --calib-batch-size equal to it"
        ) from None


def _scales_of(qdq: onnx.ModelProto) -> dict[str, float]:
    """Activation tensor -> the float32 scale ONNX Runtime's QuantizeLinear gives it."""
    inits = {i.name: i for i in qdq.graph.initializer}
    out: dict[str, float] = {}
    for node in qdq.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[1] in inits:
            value = onnx.numpy_helper.to_array(inits[node.input[1]])
            if value.size == 1:
                out[node.input[0]] = float(np.float32(value.reshape(())))
    return out
