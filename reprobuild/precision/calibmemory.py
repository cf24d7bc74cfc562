"""How much memory an INT8 calibration build needs, estimated before the work, and the
refusal when that is over the limit.

Why an estimate: calibrating runs the model over every sample and a build then measures the
engine against FP32 on the same samples; a set too large for the machine used to end in an
allocation failure (or the kernel's OOM killer) after minutes. The figure follows what the
code really holds at its peak, term by term (``scripts/bench_calib_memory.py`` measures
it against the real peak):

- the samples, twice: the set itself for the whole build, and the file's bytes or the
  dataset's items while it is read (``calibdata``);
- one batch's activations, three times: ONNX Runtime's buffers for every node output of
  the batch, the calibrated tensors handed back, and one flattened ``|x|`` copy
  (``calibstream`` keeps one batch alive at a time, never the whole set's);
- the model's outputs for every sample, six times: the engine's and FP32's outputs, their
  joins and the comparison's float64 differences (``workflow.sampleacc``);
- the weights three times (the ONNX model, ONNX Runtime's session, the engine) and the
  runtime itself (Python, numpy, ONNX Runtime: about 200 MB measured).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from reprobuild.errors import UsageError
from reprobuild.limits import memory_limit
from reprobuild.precision.analysis import np_dtype, real_inputs

RUNTIME_BYTES = 256 << 20
_GIB = 1 << 30


@dataclass(frozen=True)
class CalibMemory:
    """The estimate's parts: bytes per sample, and bytes that do not grow with samples."""

    per_sample: int  # 2x the sample's bytes + 6x the model's outputs for one sample
    fixed: int  # 3x one batch's activations + 3x the weights + the runtime

    def total(self, samples: int) -> int:
        return self.fixed + self.per_sample * samples


def estimate(model: onnx.ModelProto, sample: dict[str, np.ndarray], batch: int) -> CalibMemory:
    """The estimate for ``model`` calibrated in batches of ``batch`` on samples shaped like
    ``sample`` (one array per input, first axis = samples)."""
    sample_bytes = sum(a[:1].nbytes for a in sample.values())
    inferred = _inferred(model, sample, batch)
    known = _value_infos(inferred)
    produced = [o for node in inferred.graph.node for o in node.output if o]
    activations = sum(_bytes(known.get(name), sample_bytes * batch) for name in produced)
    outputs = sum(_bytes(known.get(o.name), sample_bytes * batch) for o in inferred.graph.output)
    weights = sum(_initializer_bytes(t) for t in model.graph.initializer)
    return CalibMemory(
        per_sample=2 * sample_bytes + 6 * math.ceil(outputs / batch),
        fixed=3 * activations + 3 * weights + RUNTIME_BYTES,
    )


def check_fits(
    source: str, model: onnx.ModelProto, sample: dict[str, np.ndarray], count: int, batch: int
) -> None:
    """Refuse, with the figure and what would fit, a calibration over the memory limit."""
    limit, why = memory_limit()
    if limit is None:
        return
    need = estimate(model, sample, batch)
    total = need.total(count)
    if total <= limit:
        return
    fits = max(0, (limit - need.fixed) // need.per_sample) // batch * batch
    fix = (
        f"use --calib-samples {fits} (or fewer)"
        if fits >= batch
        else "use a smaller --calib-batch-size or smaller samples"
    )
    raise UsageError(
        f"{source}: INT8 calibration on {count:,} samples in batches of {batch} needs about "
        f"{total / _GIB:,.2f} GiB, over the {limit / _GIB:,.2f} GiB limit ({why}); {fix}, "
        "or raise the limit with REPROBUILD_MAX_MEMORY_BYTES"
    )


def _inferred(model: onnx.ModelProto, sample: dict[str, np.ndarray], batch: int) -> onnx.ModelProto:
    """A copy whose data inputs have the samples' shape with ``batch`` samples, shapes
    inferred from there (a dynamic dimension takes the samples' size)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.value_info[:]
    real = {vi.name for vi in real_inputs(model)}
    for vi in copy.graph.input:
        if vi.name not in real or vi.name not in sample:
            continue
        dims = vi.type.tensor_type.shape.dim
        shape = (batch, *sample[vi.name].shape[1:])
        if len(dims) != len(shape):
            continue
        for d, size in zip(dims, shape, strict=True):
            d.Clear()
            d.dim_value = int(size)
    for vi in copy.graph.output:
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            if i == 0:
                d.Clear()  # the batch: inference gives it from the inputs
    try:
        return onnx.shape_inference.infer_shapes(copy)
    except Exception:  # noqa: BLE001 - a model inference cannot follow: every tensor unknown
        return copy


def _value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    g = model.graph
    return {vi.name: vi for vi in (*g.value_info, *g.output, *g.input)}


def _bytes(vi: onnx.ValueInfoProto | None, unknown: int) -> int:
    """A tensor's bytes from its inferred shape; ``unknown`` (a batch of samples' bytes)
    when inference could not tell its shape or type."""
    if vi is None or not vi.type.HasField("tensor_type"):
        return unknown
    tt = vi.type.tensor_type
    dims = list(tt.shape.dim) if tt.HasField("shape") else None
    if dims is None or not all(d.HasField("dim_value") for d in dims):
        return unknown
    try:
        itemsize = np_dtype(tt.elem_type).itemsize
    except (TypeError, KeyError, ValueError):
        return unknown
    return math.prod(d.dim_value for d in dims) * itemsize


def _initializer_bytes(t: onnx.TensorProto) -> int:
    """Bytes of one weight (its external data too: the build loads it)."""
    try:
        itemsize = np_dtype(t.data_type).itemsize
    except (TypeError, KeyError, ValueError):
        itemsize = 4
    return math.prod(t.dims) * itemsize
