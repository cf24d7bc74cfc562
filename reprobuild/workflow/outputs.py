"""Engine outputs as evidence: their bits (reproducibility) and their error (accuracy).

Reproducibility is judged on bits: the sha256 of every output, with its dtype and shape.
Accuracy against ONNX Runtime on the FP32 model is reported beside it with the one metric in
:mod:`reprobuild.accuracy`, never confused with it.
"""

from __future__ import annotations

import hashlib
import json
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


def outputs_digest(hashes: dict[str, str]) -> str:
    """One sha256 for all of an engine's outputs, from their :func:`output_hashes` (each
    one's name, dtype, shape and bytes): what a lock records as the bits a target's engine
    gives. Taking the per-output hashes lets ``verify`` reuse the ones it already made."""
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()


def tactic_map_digest(tactic_map: dict[str, int]) -> str:
    """One sha256 for a ``{key: tactic}`` map: machines of one target must report the same."""
    text = "\n".join(f"{k}=0x{t:x}" for k, t in sorted(tactic_map.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def inputs_label(path: str | os.PathLike[str] | None, seed: int) -> str:
    """How a lock names the inputs a digest is for: ``seeded:N``, or the inputs file's
    ``sha256:...`` (its name may differ from machine to machine, its bytes may not)."""
    if path is None:
        return f"seeded:{seed}"
    from reprobuild.fileio import sha256_file

    return "sha256:" + sha256_file(Path(path))


def load_inputs(
    path: str | os.PathLike[str] | None, model_path: Path, seed: int
) -> tuple[dict, str]:
    """Seeded random inputs, or ``.npz`` / Polygraphy saved-inputs JSON (never unpickled)."""
    import onnx

    from reprobuild.precision.calibration import load_calibration

    proto = onnx.load(str(model_path), load_external_data=False)
    return load_calibration(None if path is None else str(path), proto, seed=seed)


def engine_accuracy(
    model_path: Path, feeds: dict[str, Any], outputs: dict[str, Any]
) -> dict[str, Any]:
    """Largest error of the engine against ONNX Runtime on the FP32 model (reported only).

    Compared with the original model, so a precision plan's error shows here too.
    """
    from reprobuild.precision.measure import run_model

    try:
        import onnx

        names, ref, runtime = run_model(onnx.load(str(model_path)), feeds, "FP32 model")
        result = compare_outputs(outputs, dict(zip(names, ref, strict=True)))
    except Exception as err:  # ORT lacks some kernels (e.g. BF16 Conv): report, don't fail
        return {"runtime": "onnxruntime", "error": f"{type(err).__name__}: {err}"[:300]}
    return {"runtime": runtime, "reference_model": str(model_path), **result}


def engine_batch(model_path: Path, settings: Any) -> int | None:
    """How many samples the engine takes per run: the first input's fixed first dimension,
    else its profile's opt shape; None when the engine takes any count."""
    import onnx

    from reprobuild.precision.analysis import real_inputs

    proto = onnx.load(str(model_path), load_external_data=False)
    first = real_inputs(proto)[0]
    dims = first.type.tensor_type.shape.dim
    if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0:
        return int(dims[0].dim_value)
    for name, _mn, opt, _mx in getattr(settings, "input_shapes", ()):
        if name == first.name and opt:
            return int(opt[0])
    return None


def _chunks(arrays: dict[str, Any], count: int, batch: int | None) -> list[dict[str, Any]]:
    """The samples cut into runs of ``batch``; the last run is padded by repeating its last
    sample (engines with a fixed batch take exactly that many), and the padding's outputs
    are cut off again by :func:`_join`. Samples are independent in inference, so padding
    cannot change the others' outputs."""
    import numpy as np

    size = batch or count
    out = []
    for start in range(0, count, size):
        part = {k: v[start : start + size] for k, v in arrays.items()}
        short = size - (min(count, start + size) - start)
        if short:
            part = {
                k: np.concatenate([v, np.repeat(v[-1:], short, axis=0)]) for k, v in part.items()
            }
        out.append(part)
    return out


def _join(runs: list[dict[str, Any]], count: int) -> dict[str, Any]:
    import numpy as np

    return {n: np.concatenate([np.asarray(r[n]) for r in runs])[:count] for n in runs[0]}


def run_engine_samples(
    run: Any, arrays: dict[str, Any], count: int, batch: int | None
) -> dict[str, Any]:
    """``run(feeds)`` (an engine) over every sample, in runs of the engine's batch."""
    return _join([run(c) for c in _chunks(arrays, count, batch)], count)


def sample_accuracy(
    model_path: Path,
    arrays: dict[str, Any],
    count: int,
    batch: int | None,
    engine_outputs: dict[str, Any],
    source: str,
) -> dict[str, Any]:
    """The engine's outputs on a sample set against ONNX Runtime on the FP32 model, with the
    one metric (reported only): how far quantization moved the outputs on these samples."""
    from reprobuild.precision.measure import run_model

    desc = {"source": source, "samples": count}
    try:
        import onnx

        proto = onnx.load(str(model_path))
        runs = []
        for c in _chunks(arrays, count, batch):
            names, ref, runtime = run_model(proto, c, "FP32 model")
            runs.append(dict(zip(names, ref, strict=True)))
        result = compare_outputs(engine_outputs, _join(runs, count))
    except Exception as err:  # ORT lacks some kernels: report, don't fail
        return {**desc, "error": f"{type(err).__name__}: {err}"[:300]}
    return {**desc, "runtime": runtime, **result}
