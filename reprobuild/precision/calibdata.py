"""INT8 calibration data: samples along the first axis, read without unpickling, hashed.

Unlike the magnitude rule's inputs (one feed dict of the model's own shape), calibration
data is a set of samples that is cut into batches of ``--calib-batch-size``; the sha256
recorded in the lock is of the samples as read and in the order read (names sorted, then
dtype, shape and bytes of each array), so another file holding the same samples hashes
the same, and a reordered set does not. That holds across sources too: an ``.npz``,
Polygraphy JSON (here), a folder of arrays or a Python dataset (``calibsource``) all end in
one array per input with the samples along the first axis, checked by
``calibcheck.check_samples``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np
import onnx

from reprobuild.errors import UsageError
from reprobuild.precision.analysis import fixed_batch
from reprobuild.precision.calibcheck import FORMATS, check_samples, concat_parts, read_input_file
from reprobuild.precision.safeload import decode_npz, decode_polygraphy_json


@dataclass
class CalibData:
    """Samples per model input (first axis = sample), their count and hash."""

    arrays: dict[str, np.ndarray]
    count: int
    sha256: str
    source: str

    def batches(self, batch_size: int) -> list[dict[str, np.ndarray]]:
        """Whole batches only: ONNX Runtime's histogram calibrators cannot stack a short
        last batch, and a build must not depend on how a remainder would be treated."""
        return [
            {k: v[i : i + batch_size] for k, v in self.arrays.items()}
            for i in range(0, self.count - batch_size + 1, batch_size)
        ]


def samples_hash(arrays: dict[str, np.ndarray]) -> str:
    """sha256 of the samples: names sorted, then dtype, shape and C-order bytes."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        h.update(f"{name}\0{arr.dtype.str}\0{list(arr.shape)}\0".encode())
        h.update(arr.reshape(-1).view(np.uint8))  # the bytes in place: no copy of the set
    return h.hexdigest()


def load_calib_data(
    spec: str, model: onnx.ModelProto, samples: int | None, *, from_lock: bool = False
) -> CalibData:
    """The first ``samples`` samples (all when None) from any calibration source.

    ``from_lock``: ``samples`` is the count a lock's INT8 plan records, not the user's
    ``--calib-samples``, so a shortfall names the lock rather than a flag never typed.

    ``spec`` is a Python dataset (``file.py:NAME`` or ``module:NAME``, see
    ``calibsource.is_dataset_spec``), a folder of ``.npy``/``.npz`` files, an ``.npz`` (one
    array per input, first axis = samples) or Polygraphy ``--save-inputs`` JSON (feeds
    concatenated along the first axis). Every source ends in the same arrays, so the same
    samples in another form hash the same.
    """
    from reprobuild.precision import calibsource

    if calibsource.is_dataset_spec(spec):
        arrays = calibsource.read_dataset(spec, model, samples)
        source = spec
    elif os.path.isdir(spec):
        arrays = calibsource.read_folder(spec, model, samples)
        source = os.path.basename(os.path.normpath(spec))
    else:
        arrays = _read_file(spec, model)
        source = os.path.basename(spec)
    count = check_samples(spec, arrays, model)
    if samples is not None:
        if samples > count and from_lock:
            raise UsageError(
                f"{spec}: holds {count} samples, but the lock's INT8 plan was calibrated on "
                f"the first {samples}; pass the calibration data the lock was recorded with"
            )
        if samples > count:
            raise UsageError(
                f"{spec}: --calib-samples {samples} but the data holds {count} samples; "
                "pass at most that many"
            )
        if samples < count:  # a copy, so the rest of the set is not kept alive by views
            arrays = {k: v[:samples].copy() for k, v in arrays.items()}
        count = samples
    return CalibData(arrays, count, samples_hash(arrays), source)


def _read_file(path: str, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """An ``.npz`` as saved, or Polygraphy JSON with its feeds concatenated in order."""
    lower = path.lower()
    if not lower.endswith((".npz", ".json")):
        raise UsageError(f"{path}: unknown calibration data format; {FORMATS}")
    data = read_input_file(path)
    if lower.endswith(".npz"):
        return decode_npz(path, data)
    feeds = decode_polygraphy_json(path, data)
    parts = [(f"{path}: feed {i}", feed) for i, feed in enumerate(feeds)]
    for where, feed in parts:
        check_samples(where, feed, model)
    return concat_parts(path, parts)


def rule_batches(spec: str, model: onnx.ModelProto) -> tuple[list[dict[str, np.ndarray]], str]:
    """The fp16/bf16 rules' calibration inputs: every sample of ``spec`` (any source INT8
    reads), in batches of the model's own batch size, and how the plan names them.

    ModelOpt AutoCast reads every batch of its calibration data and Torch-TensorRT every
    batch of its DataLoader, so a node kept FP32 for a large activation is kept whichever
    sample shows it. The batch is the first input's fixed first dimension (1 where it is
    dynamic), so the model runs exactly as exported; samples past the last whole batch are
    left out, as INT8 calibration leaves them. The name is the samples' hash (the same
    samples in another form name the same data).
    """
    data = load_calib_data(spec, model, None)
    size = fixed_batch(model) or 1
    batches = data.batches(size)
    if not batches:
        raise UsageError(
            f"{spec}: holds {data.count} samples, fewer than the model's batch of {size}; "
            f"give at least {size}"
        )
    return batches, f"sha256:{data.sha256} ({data.source})"
