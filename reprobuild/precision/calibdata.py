"""INT8 calibration data: samples along the first axis, read without unpickling, hashed.

Unlike the magnitude rule's inputs (one feed dict of the model's own shape), calibration
data is a set of samples that is cut into batches of ``--calib-batch-size``; the sha256
recorded in the lock is of the samples as read and in the order read (names sorted, then
dtype, shape and bytes of each array), so another file holding the same samples hashes
the same, and a reordered set does not.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass

import numpy as np
import onnx

from reprobuild.errors import UsageError
from reprobuild.limits import check_size, check_tensor_bytes
from reprobuild.precision.analysis import np_dtype, real_inputs


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


def load_calib_data(path: str, model: onnx.ModelProto, samples: int | None) -> CalibData:
    """The first ``samples`` samples (all when None) of an ``.npz`` with one array per input."""
    if not path.lower().endswith(".npz"):
        raise UsageError(
            f"{path}: unknown calibration data format; save one array per model input "
            "(first axis = samples) with numpy.savez to a .npz file"
        )
    try:
        check_size(path, os.stat(path).st_size, "inputs")
        with open(path, "rb") as f:
            data = f.read()
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            check_tensor_bytes(f"{path}: the arrays", sum(i.file_size for i in npz.zip.infolist()))
            arrays = {k: np.asarray(npz[k]) for k in npz.files}
    except FileNotFoundError:
        raise UsageError(f"{path}: no such calibration file; pass an existing .npz") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory; pass a .npz calibration file") from None
    except UsageError:
        raise
    except Exception as err:  # noqa: BLE001 - any decoding problem is bad input
        raise UsageError(
            f"{path}: not a readable .npz archive ({err}); save it with numpy.savez"
        ) from None
    count = _check(path, arrays, model)
    if samples is not None:
        if samples > count:
            raise UsageError(
                f"{path}: --calib-samples {samples} but the file holds {count} samples; "
                "pass at most that many"
            )
        arrays = {k: v[:samples] for k, v in arrays.items()}
        count = samples
    return CalibData(arrays, count, samples_hash(arrays), os.path.basename(path))


def _check(path: str, arrays: dict[str, np.ndarray], model: onnx.ModelProto) -> int:
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
