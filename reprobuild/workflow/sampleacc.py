"""Accuracy on sample sets: the engine against the FP32 model on the calibration samples and
on held-apart ones (accuracy is reported, not assumed).

A quantized engine's error on the samples it was calibrated on is its best case; held-apart
samples say whether the scales generalise. Both are reported by ``build`` and ``verify``
beside reproducibility, never deciding it. The engine runs first and ONNX Runtime after, so
that ``verify`` can release the engine before the FP32 model is loaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprobuild.accuracy import json_safe
from reprobuild.errors import ReprobuildError
from reprobuild.events import Progress, Step
from reprobuild.workflow.outputs import engine_batch, run_engine_samples, sample_accuracy


@dataclass
class SampleSet:
    """A named set of samples (first axis = sample), as read from an ``.npz``."""

    label: str  # "calibration" or "held_out"
    arrays: dict[str, Any]
    count: int
    source: str


def load_sets(
    model_path: Path,
    calibration: str | None,
    calib_samples: int | None,
    held_out: str | None,
) -> list[SampleSet]:
    """The calibration set (its first ``calib_samples``, as calibrated on) and the
    held-apart set, each when given; bad files are refused before any engine runs."""
    import onnx

    from reprobuild.precision.calibdata import load_calib_data

    proto = onnx.load(str(model_path), load_external_data=False)
    sets = []
    for label, path, samples in (
        ("calibration", calibration, calib_samples),
        ("held_out", held_out, None),
    ):
        if path is not None:
            # the calibration count is the lock's plan's (a recording build's plan was
            # made from --calib-samples, whose shortfall calibrating already refused)
            data = load_calib_data(str(path), proto, samples, from_lock=label == "calibration")
            sets.append(SampleSet(label, data.arrays, data.count, data.source))
    return sets


def run_sets(
    run: Any, sets: list[SampleSet], model_path: Path, settings: Any
) -> list[dict[str, Any]]:
    """The engine's outputs (``run(feeds)``) on every set, in runs of its batch."""
    batch = engine_batch(model_path, settings)
    return [run_engine_samples(run, s.arrays, s.count, batch) for s in sets]


def compare_sets(
    model_path: Path, sets: list[SampleSet], outputs: list[dict[str, Any]], settings: Any
) -> dict[str, Any] | None:
    """``{label: metric}`` against ONNX Runtime on the FP32 model; None without sets."""
    if not sets:
        return None
    batch = engine_batch(model_path, settings)
    return {
        s.label: json_safe(sample_accuracy(model_path, s.arrays, s.count, batch, out, s.source))
        for s, out in zip(sets, outputs, strict=True)
    }


def describe(label: str, acc: dict[str, Any]) -> str:
    """One line for the text output of ``build`` and ``verify``."""
    head = f"accuracy vs FP32 on the {label.replace('_', '-')} set ({acc['samples']} samples"
    if "error" in acc:
        return f"{head}): not measured ({acc['error']})"
    top1 = acc.get("top1_agreement")
    top1_text = "" if top1 is None else f", top-1 agreement {top1:.4f}"
    cos = acc.get("cosine")
    cos_text = f"{cos:.6f}" if isinstance(cos, float) else str(cos)
    return f"{head}): max abs {_num(acc['max_abs'])}, cosine {cos_text}{top1_text}"


def _num(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def engine_accuracy(
    run: Any,
    plan: Any,
    model_path: Path,
    request: Any,
    held_out: str | os.PathLike[str] | None,
    settings: Any,
    progress: Progress,
) -> dict[str, Any] | None:
    """A build's engine (``run``: feeds -> outputs) against FP32 on the calibration samples
    (INT8: the first ``samples`` the lock's ``plan`` was calibrated on) and on ``held_out``;
    None when neither is given (then the model is not read again)."""
    quant = None if plan is None or plan.mode != "int8" else plan.quantization
    calib = None if quant is None or request is None else request.calibration
    if calib is None and held_out is None:
        return None
    sets = load_sets(
        model_path,
        calib,
        None if quant is None else quant.samples,
        None if held_out is None else str(held_out),
    )
    if not sets:
        return None
    progress(Step("measuring the engine's error against FP32 on the sample sets"))
    try:
        outputs = run_sets(run, sets, model_path, settings)
    except ReprobuildError as err:  # reported, never deciding: the build itself stands
        why = f"the engine did not run on the samples: {err}"[:300]
        return {s.label: {"source": s.source, "samples": s.count, "error": why} for s in sets}
    return compare_sets(model_path, sets, outputs, settings)
