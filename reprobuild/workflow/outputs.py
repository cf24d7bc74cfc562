"""Engine outputs as evidence: their bits (reproducibility) and their error (accuracy).

Reproducibility is judged on bits: the sha256 of every output, with its dtype and shape.
Accuracy against ONNX Runtime on the FP32 model is reported beside it with the one metric in
:mod:`reprobuild.accuracy`, never confused with it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprobuild.accuracy import Tolerance, compare_outputs
from reprobuild.errors import UsageError
from reprobuild.precision.analysis import fixed_batch, real_inputs


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


INPUT_FORMATS = (
    "pass a .npz (one array per model input; the first axis holds the samples) or Polygraphy "
    "--save-inputs JSON"
)


@dataclass
class InputSamples:
    """What ``verify`` and ``bisect`` run an engine on: seeded inputs or an inputs file's
    arrays, as one run of the model's shape (``count`` None) or as ``count`` samples along
    the first axis, run ``batch`` at a time as Polygraphy's data loaders iterate a batch."""

    feeds: dict[str, Any]
    description: str
    count: int | None = None
    batch: int | None = None

    def run(self, run: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """``run(feeds)`` (an engine) over every sample, outputs joined along the first axis."""
        if self.count is None:
            return run(self.feeds)
        return run_engine_samples(run, self.feeds, self.count, self.batch)


def load_inputs(
    path: str | os.PathLike[str] | None, model_path: Path, seed: int = 0
) -> InputSamples:
    """Seeded random inputs, or an ``.npz`` / Polygraphy saved-inputs JSON file (never
    unpickled). A file of exactly the model's input shapes is one run, as before; any other
    count of samples along the first axis (every feed of a JSON file, joined) is run in
    batches of the model's fixed first dimension (all at once when it has none)."""
    import onnx

    from reprobuild.precision.calibcheck import check_samples, concat_parts, read_input_file
    from reprobuild.precision.calibration import check_feeds, load_calibration
    from reprobuild.precision.safeload import decode_npz, decode_polygraphy_json

    proto = onnx.load(str(model_path), load_external_data=False)
    if path is None:
        feeds, desc = load_calibration(None, proto, seed=seed)
        return InputSamples(feeds, desc)
    where = str(path)
    data = read_input_file(where, "inputs", INPUT_FORMATS)
    name = os.path.basename(where)
    desc = f"sha256:{hashlib.sha256(data).hexdigest()} ({name})"
    if where.lower().endswith(".npz"):
        parts = [(where, decode_npz(where, data))]
    elif where.lower().endswith(".json"):
        feeds = decode_polygraphy_json(where, data)
        parts = [
            (f"{where}: feed {i}" if len(feeds) > 1 else where, f) for i, f in enumerate(feeds)
        ]
    else:
        raise UsageError(f"{where}: unknown inputs format; {INPUT_FORMATS}")
    if len(parts) == 1:
        try:
            check_feeds(where, parts[0][1], real_inputs(proto))
            return InputSamples(parts[0][1], desc)  # the model's own shapes: one run
        except UsageError:
            pass  # samples along the first axis, checked below
    for part_where, part in parts:
        check_samples(part_where, part, proto)
    arrays = concat_parts(where, parts)
    count = check_samples(where, arrays, proto)
    return InputSamples(arrays, f"{desc}, {count} samples", count, fixed_batch(proto))


def select_outputs(model_path: Path, names: Sequence[str] | None) -> list[str] | None:
    """The outputs ``--outputs`` chose, checked against the model's (None: all). An unknown
    name is refused with the nearest one."""
    if not names:
        return None
    import difflib

    import onnx

    proto = onnx.load(str(model_path), load_external_data=False)
    known = [o.name for o in proto.graph.output]
    for n in names:
        if n not in known:
            near = difflib.get_close_matches(n, known, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise UsageError(
                f"--outputs: {model_path} has no output {n!r}; {hint}its outputs are "
                f"{', '.join(known)}"
            )
    return list(dict.fromkeys(names))


def inputs_accuracy(
    model_path: Path,
    inputs: InputSamples,
    outputs: dict[str, Any],
    tolerance: Tolerance | None = None,
) -> dict[str, Any]:
    """:func:`engine_accuracy` on the inputs as they were run (one run, or sample batches)."""
    if inputs.count is None:
        return engine_accuracy(model_path, inputs.feeds, outputs, tolerance)
    return sample_accuracy(
        model_path,
        inputs.feeds,
        inputs.count,
        inputs.batch,
        outputs,
        inputs.description,
        tolerance,
    )


def engine_accuracy(
    model_path: Path,
    feeds: dict[str, Any],
    outputs: dict[str, Any],
    tolerance: Tolerance | None = None,
) -> dict[str, Any]:
    """Largest error of the engine against ONNX Runtime on the FP32 model (reported only).

    Compared with the original model, so a precision plan's error shows here too.
    """
    from reprobuild.precision.measure import run_model

    try:
        import onnx

        names, ref, runtime = run_model(onnx.load(str(model_path)), feeds, "FP32 model")
        result = compare_outputs(outputs, dict(zip(names, ref, strict=True)), tolerance)
    except Exception as err:  # ORT lacks some kernels (e.g. BF16 Conv): report, don't fail
        return {"runtime": "onnxruntime", "error": f"{type(err).__name__}: {err}"[:300]}
    return {"runtime": runtime, "reference_model": str(model_path), **result}


def engine_batch(model_path: Path, settings: Any) -> int | None:
    """How many samples the engine takes per run: the first input's fixed first dimension,
    else its profile's opt shape; None when the engine takes any count."""
    import onnx

    proto = onnx.load(str(model_path), load_external_data=False)
    fixed = fixed_batch(proto)
    if fixed is not None:
        return fixed
    first = real_inputs(proto)[0]
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
    tolerance: Tolerance | None = None,
) -> dict[str, Any]:
    """The engine's outputs on a sample set against ONNX Runtime on the FP32 model, with the
    one metric (reported only): how far quantization moved the outputs on these samples."""
    from reprobuild.precision.measure import model_runner

    desc = {"source": source, "samples": count}
    try:
        import onnx

        run_model = model_runner(onnx.load(str(model_path)), "FP32 model")
        runs = []
        for c in _chunks(arrays, count, batch):
            names, ref, runtime = run_model(c)
            runs.append(dict(zip(names, ref, strict=True)))
        result = compare_outputs(engine_outputs, _join(runs, count), tolerance)
    except Exception as err:  # ORT lacks some kernels: report, don't fail
        return {**desc, "error": f"{type(err).__name__}: {err}"[:300]}
    return {**desc, "runtime": runtime, **result}
