"""The checks and joins every INT8 calibration source ends in, and the one formats hint.

Why a module of its own: ``calibdata`` (one ``.npz`` or Polygraphy JSON file, and the
dispatch over every source) and ``calibsource`` (folders of arrays, Python datasets) read
samples in different ways but must hold them to the same rules and the same messages, so
those rules live here, below both: ``calibdata`` imports ``calibsource``, and neither has to
import the other back.
"""

from __future__ import annotations

import numpy as np
import onnx

from reprobuild.errors import UsageError
from reprobuild.fileio import read_input
from reprobuild.limits import check_tensor_bytes
from reprobuild.precision.analysis import np_dtype, real_inputs

FORMATS = (
    "pass a .npz (one array per model input, first axis = samples), a folder of .npy/.npz "
    "files, Polygraphy --save-inputs JSON, or a dataset as file.py:NAME or module:NAME"
)


def read_input_file(path: str, what: str = "calibration", hint: str = FORMATS) -> bytes:
    """A calibration (or ``what``) file's bytes, under the inputs size cap; the messages
    name the file as what the user passed it for."""
    return read_input(path, "inputs", f"{what} file", missing=f"no such {what} file; {hint}")


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
        _check_finite(path, name, arr)
        counts.add(arr.shape[0])
    if len(counts) != 1 or 0 in counts:
        raise UsageError(
            f"{path}: the arrays hold different or zero sample counts ({sorted(counts)}); "
            "give every input the same number of samples along the first axis"
        )
    return counts.pop()


def _check_finite(path: str, name: str, arr: np.ndarray) -> None:
    """NaN or infinity in a sample makes ONNX Runtime's calibrator fail much later, after
    numpy warnings and with a message about scales; name the sample instead."""
    if arr.dtype.kind != "f":
        return
    bad = ~np.isfinite(arr.reshape(arr.shape[0], -1)).all(axis=1)
    if bad.any():
        first = int(np.argmax(bad))
        raise UsageError(
            f"{path}: array {name!r} holds NaN or infinite values in "
            f"{int(bad.sum())} of {arr.shape[0]} samples (first: sample {first}); "
            "give finite samples"
        )
