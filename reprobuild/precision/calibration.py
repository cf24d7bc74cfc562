"""Calibration and reference inputs: seeded, ``.npz`` or Polygraphy ``--save-inputs`` JSON.

Nothing is ever unpickled: the files are decoded by ``precision.safeload`` (which says why
Polygraphy's own reader is not used). INT8 calibration samples, read from more sources and
cut into batches, are ``precision.calibdata``'s.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np
import onnx

from reprobuild.errors import UsageError
from reprobuild.fileio import read_input
from reprobuild.precision.analysis import np_dtype, real_inputs
from reprobuild.precision.safeload import decode_npz, decode_polygraphy_json


def load_calibration(
    path: str | None, model: onnx.ModelProto, seed: int = 0
) -> tuple[dict[str, np.ndarray], str]:
    """Feeds for the magnitude measurement, and how to name them in the plan.

    With no file: seeded inputs (float uniform in [0, 1), integers in {0, 1}, bools random;
    dynamic dims 1) described as ``seeded:<seed>``. With a ``.npz`` file or a Polygraphy
    ``--save-inputs`` JSON file (first feed dict): ``sha256:<hex of the file> (<name>)``, so
    the plan records exactly which data decided the magnitude rule.
    """
    inputs = real_inputs(model)
    if path is None:
        return seeded_feeds(inputs, seed), f"seeded:{seed}"
    data = read_input(
        path,
        "inputs",
        "calibration file",
        missing="no such calibration file; pass an existing .npz or Polygraphy JSON file",
    )
    lower = path.lower()
    if lower.endswith(".npz"):
        feeds = decode_npz(path, data)
    elif lower.endswith(".json"):
        feeds = decode_polygraphy_json(path, data, limit=1)[0]
    else:
        raise UsageError(
            f"{path}: unknown calibration format; use a .npz file (numpy.savez) or a "
            "Polygraphy --save-inputs .json file"
        )
    check_feeds(path, feeds, inputs)
    digest = hashlib.sha256(data).hexdigest()
    return feeds, f"sha256:{digest} ({os.path.basename(path)})"


def seeded_feeds(
    inputs: list[onnx.ValueInfoProto], seed: int, samples: int | None = None
) -> dict[str, np.ndarray]:
    """Seeded random inputs of the model's shapes (dynamic dims 1); ``samples`` replaces
    the first axis (INT8's seeded calibration set: that many samples)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for vi in inputs:
        tt = vi.type.tensor_type
        dtype = np_dtype(tt.elem_type)
        shape = tuple(
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim
        )
        if samples is not None:
            shape = (samples, *shape[1:])
        if dtype == np.bool_:
            arr = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            arr = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            arr = rng.random(shape, dtype=np.float64).astype(dtype)
        feeds[vi.name] = arr
    return feeds


def check_feeds(where: str, feeds: dict[str, Any], inputs: list[onnx.ValueInfoProto]) -> None:
    """Every model input present with the model's dtype and static dims, and nothing else."""
    expected = {vi.name: vi for vi in inputs}
    missing = [n for n in expected if n not in feeds]
    if missing:
        raise UsageError(
            f"{where}: no data for model input {missing[0]!r}; provide every input "
            f"({', '.join(sorted(expected))})"
        )
    extra = sorted(n for n in feeds if n not in expected)
    if extra:
        raise UsageError(
            f"{where}: {extra[0]!r} is not an input of the model; its inputs are "
            f"{', '.join(sorted(expected))}"
        )
    for name, vi in expected.items():
        arr = feeds[name]
        tt = vi.type.tensor_type
        if not isinstance(arr, np.ndarray):
            raise UsageError(f"{where}: input {name!r} is not an array")
        want = np_dtype(tt.elem_type) if tt.elem_type else arr.dtype
        if arr.dtype != want:
            raise UsageError(
                f"{where}: input {name!r} has dtype {arr.dtype} but the model expects {want}; "
                f"save it as {want}"
            )
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        if dims is not None:
            bad = len(dims) != arr.ndim or any(
                d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != s
                for d, s in zip(dims, arr.shape, strict=False)
            )
            if bad:
                want_shape = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]
                raise UsageError(
                    f"{where}: input {name!r} has shape {list(arr.shape)} but the model "
                    f"expects {want_shape}; save data of that shape"
                )
