"""Engine outputs as evidence: their bits (reproducibility) and their error (accuracy).

Reproducibility is judged on bits: the sha256 of every output, with its dtype and shape.
Accuracy against ONNX Runtime on the FP32 model is reported beside it with the one metric in
:mod:`reprobuild.accuracy`, never confused with it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from reprobuild.accuracy import compare_outputs


def output_hashes(outputs: dict[str, Any]) -> dict[str, str]:
    """sha256 of each output's dtype, shape and bytes, by output name."""
    import numpy as np

    out = {}
    for name in sorted(outputs):
        arr = np.ascontiguousarray(outputs[name])
        h = hashlib.sha256(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(arr.tobytes())
        out[name] = h.hexdigest()
    return out


def load_inputs(
    path: str | os.PathLike[str] | None, model_path: Path, seed: int
) -> tuple[dict, str]:
    """Seeded random inputs, or ``.npz`` / Polygraphy saved-inputs JSON (never unpickled)."""
    import onnx

    from reprobuild.precision import load_calibration

    proto = onnx.load(str(model_path), load_external_data=False)
    return load_calibration(None if path is None else str(path), proto, seed=seed)


def engine_accuracy(
    model_path: Path, feeds: dict[str, Any], outputs: dict[str, Any]
) -> dict[str, Any]:
    """Largest error of the engine against ONNX Runtime on the FP32 model (reported only).

    Compared with the original model, so a precision plan's error shows here too.
    """
    from reprobuild.precision import run_model

    try:
        import onnx

        names, ref, runtime = run_model(onnx.load(str(model_path)), feeds, "FP32 model")
        result = compare_outputs(outputs, dict(zip(names, ref, strict=True)))
    except Exception as err:  # ORT lacks some kernels (e.g. BF16 Conv): report, don't fail
        return {"runtime": "onnxruntime", "error": f"{type(err).__name__}: {err}"[:300]}
    return {"runtime": runtime, "reference_model": str(model_path), **result}
