"""INT8 calibration data: samples along the first axis, read without unpickling, hashed.

Unlike the magnitude rule's inputs (one feed dict of the model's own shape), calibration
data is a set of samples that is cut into batches of ``--calib-batch-size``; the sha256
recorded in the lock is of the samples as read and in the order read (names sorted, then
dtype, shape and bytes of each array), so another file holding the same samples hashes
the same, and a reordered set does not. That holds across sources too: an ``.npz``,
Polygraphy JSON (here), a folder of arrays or a Python dataset (``calibsource``) all end in
one array per input with the samples along the first axis, checked by ``check_samples``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np
import onnx

from reprobuild.errors import UsageError
from reprobuild.limits import check_size, check_tensor_bytes
from reprobuild.precision.analysis import np_dtype, real_inputs
from reprobuild.precision.safeload import decode_npz, decode_polygraphy_json

FORMATS = (
    "pass a .npz (one array per model input, first axis = samples), a folder of .npy/.npz "
    "files, Polygraphy --save-inputs JSON, or a dataset as file.py:NAME or module:NAME"
)


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
        h.update(arr.tobytes())
    return h.hexdigest()


def load_calib_data(spec: str, model: onnx.ModelProto, samples: int | None) -> CalibData:
    """The first ``samples`` samples (all when None) from any calibration source.

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
        if samples > count:
            raise UsageError(
                f"{spec}: --calib-samples {samples} but the data holds {count} samples; "
                "pass at most that many"
            )
        arrays = {k: v[:samples] for k, v in arrays.items()}
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


def read_input_file(path: str) -> bytes:
    """A calibration file's bytes, under the inputs size cap."""
    try:
        check_size(path, os.stat(path).st_size, "inputs")
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such calibration file; {FORMATS}") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read the calibration file ({err.strerror})") from None


def concat_parts(
    source: str, parts: list[tuple[str, dict[str, np.ndarray]]]
) -> dict[str, np.ndarray]:
    """Parts already checked (each a batch of samples per input) joined in order; every
    part's samples must have the first part's shape (the model may leave dims dynamic)."""
    if not parts:
        raise UsageError(f"{source}: no calibration samples; {FORMATS}")
    first_where, first = parts[0]
    for where, part in parts[1:]:
        check_same_shape(first_where, first, where, part)
    check_tensor_bytes(
        f"{source}: the samples", sum(a.nbytes for _, p in parts for a in p.values())
    )
    if len(parts) == 1:
        return first
    return {name: np.concatenate([p[name] for _, p in parts]) for name in first}


def check_same_shape(
    first_where: str, first: dict[str, np.ndarray], where: str, part: dict[str, np.ndarray]
) -> None:
    """``part``'s samples have the shape of ``first``'s, input by input."""
    for name, arr in part.items():
        if arr.shape[1:] != first[name].shape[1:]:
            raise UsageError(
                f"{where}: samples of input {name!r} have shape {list(arr.shape[1:])} but "
                f"{first_where} has {list(first[name].shape[1:])}; give every sample one shape"
            )


def check_samples(path: str, arrays: dict[str, np.ndarray], model: onnx.ModelProto) -> int:
    """Every input present with the model's dtype and per-sample dims; one sample count."""
    inputs = {vi.name: vi for vi in real_inputs(model)}
    names = ", ".join(sorted(inputs))
    for name in inputs:
        if name not in arrays:
            raise UsageError(
                f"{path}: no array for model input {name!r}; save one per input ({names})"
            )
    for name in arrays:
        if name not in inputs:
            raise UsageError(
                f"{path}: {name!r} is not an input of the model; its inputs are {names}"
            )
    counts = set()
    for name, vi in inputs.items():
        arr, tt = arrays[name], vi.type.tensor_type
        want = np_dtype(tt.elem_type)
        if arr.dtype != want:
            raise UsageError(
                f"{path}: array {name!r} has dtype {arr.dtype} but the model expects {want}; "
                f"save it as {want}"
            )
        dims = list(tt.shape.dim)[1:]
        if arr.ndim != len(dims) + 1 or any(
            d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != s
            for d, s in zip(dims, arr.shape[1:], strict=False)
        ):
            raise UsageError(
                f"{path}: array {name!r} has shape {list(arr.shape)}; expected (samples, "
                f"{', '.join(str(d.dim_value or d.dim_param) for d in dims)})"
            )
        counts.add(arr.shape[0])
    if len(counts) != 1 or 0 in counts:
        raise UsageError(
            f"{path}: the arrays hold different or zero sample counts ({sorted(counts)}); "
            "give every input the same number of samples along the first axis"
        )
    return counts.pop()
