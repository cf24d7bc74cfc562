"""The INT8 side of preparing a model: calibrating a new plan, and checking a locked one
against the options and data given again.

A locked INT8 plan is applied without calibration data; data given anyway is only hashed,
so that ``--frozen`` can refuse a build whose calibration would have made another plan
(other samples, another order: the lock's ``data_sha256`` catches both).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from reprobuild.errors import DriftError, UsageError
from reprobuild.events import Progress, Step, quiet
from reprobuild.lock.plan import PrecisionPlan
from reprobuild.lock.qplan import OpsetConversion
from reprobuild.words import count
from reprobuild.workflow.request import PrecisionRequest

if TYPE_CHECKING:
    from reprobuild.precision.calibdata import CalibData


def int8_opset(
    proto: onnx.ModelProto, model_path: Path, notes: list[str]
) -> tuple[onnx.ModelProto, OpsetConversion | None]:
    """The model at an opset INT8 can use (converted if older, with a note for the user)."""
    from reprobuild.precision.opset import conversion_note, convert_for_int8

    proto, conv = convert_for_int8(proto, model_path)
    if conv is not None:
        notes.append(conversion_note(model_path, conv))
    return proto, conv


def calibrate_int8(
    proto: onnx.ModelProto,
    request: PrecisionRequest,
    conv: OpsetConversion | None = None,
    progress: Progress = quiet,
) -> tuple[PrecisionPlan, list[str]]:
    """Read the calibration data and calibrate: a new INT8 plan and notes. Calibrating
    runs the model on every sample (entropy: a histogram search per tensor too), the
    longest quiet stretch of an INT8 build, so it is announced with what it works on."""
    from reprobuild.precision.calibdata import load_calib_data
    from reprobuild.precision.calibmemory import check_fits
    from reprobuild.precision.quantize import calibrate

    notes: list[str] = []
    if request.calibration is None:
        data = seeded_calib(proto, request)
        notes.append(
            f"--precision int8 without --calibration: the activation scales come from "
            f"{count(data.count, 'seeded random sample')} ({data.source}); scales from random "
            "data are for trying the workflow, not for shipping (they do not span your "
            "inputs' ranges): calibrate on real samples with --calibration DATA"
        )
    else:
        data = load_calib_data(request.calibration, proto, request.calib_samples)
        check_fits(request.calibration, proto, data.arrays, data.count, request.calib_batch_size)
    batches = data.count // request.calib_batch_size
    progress(
        Step(
            f"calibrating INT8 scales with ONNX Runtime ({request.calib_method}): "
            f"{count(data.count, 'sample')} from {data.source}, "
            f"{count(batches, 'batch', 'batches')} of {request.calib_batch_size}"
        )
    )
    plan, more = calibrate(
        proto,
        request.settings,
        request.calib_method,
        request.calib_batch_size,
        data,
        request.float_precision or "fp32",
        conv,
    )
    return plan, notes + more


SEEDED_BATCHES = 8
"""Seeded INT8 calibration without --calib-samples: this many batches of random samples."""


def seeded_calib(proto: onnx.ModelProto, request: PrecisionRequest) -> CalibData:
    """``seeded:N`` calibration samples (``--calibration-seed N``, default 0): what
    Polygraphy's default data loader does, recorded under the seed, not a file's hash."""
    from reprobuild.precision.analysis import real_inputs
    from reprobuild.precision.calibdata import CalibData, samples_hash
    from reprobuild.precision.calibration import seeded_feeds

    seed = request.seed or 0
    n = request.calib_samples or SEEDED_BATCHES * request.calib_batch_size
    arrays = seeded_feeds(real_inputs(proto), seed, n)
    return CalibData(arrays, n, samples_hash(arrays), f"seeded:{seed}")


def check_locked_int8(
    proto: onnx.ModelProto,
    locked: PrecisionPlan,
    request: PrecisionRequest | None,
    frozen: bool,
    lock_path: Path,
    conv: OpsetConversion | None = None,
) -> list[str]:
    """Calibration options must be the lock's; data given with ``--frozen`` must be it; the
    model's opset conversion must be the one the plan was recorded on."""
    quant = locked.quantization
    if quant is None:
        raise UsageError(
            f"{lock_path}: the INT8 precision plan has no quantization section; re-record it"
        )
    was = None if quant.opset is None else quant.opset.source
    now = None if conv is None else conv.source
    if was != now:
        then = "an opset >= 13 model" if was is None else f"an opset {was} model, converted"
        raise UsageError(
            f"{lock_path}: the INT8 plan was recorded on {then}, but the model is opset "
            f"{now if now is not None else '>= 13'}; re-record the lock for this model"
        )
    notes: list[str] = []
    if quant.opset is not None and conv is not None and quant.opset.onnx != conv.onnx:
        notes.append(
            f"the lock's opset conversion was made with onnx {quant.opset.onnx}, this one "
            f"with onnx {conv.onnx}; the plan's node and weight checks hold it to the lock"
        )
    if request is None or request.mode != "int8":
        return notes
    asked: dict[str, object] = {
        "method": request.calib_method,
        "batch_size": request.calib_batch_size,
    }
    if request.calib_samples is not None:
        asked["samples"] = request.calib_samples
    if request.float_precision is not None:
        asked["float"] = request.float_precision
    have = {
        "method": quant.method,
        "batch_size": quant.batch_size,
        "samples": quant.samples,
        "float": quant.float_precision,
    }
    changed = ", ".join(f"{k}: {have[k]!r} -> {v!r}" for k, v in asked.items() if have[k] != v)
    if changed:
        msg = f"{lock_path}: the calibration options differ from the lock's INT8 plan ({changed})"
        if frozen:
            raise DriftError(msg + "; --frozen refuses to change the plan")
        raise UsageError(msg + "; drop the options, or delete the lock to re-calibrate")
    if request.calibration is None:
        return notes
    if not frozen:
        return notes + [
            f"--calibration {request.calibration} ignored: the lock's INT8 scales (calibrated "
            f"on {locked.calibration}) are applied as recorded"
        ]
    from reprobuild.precision.calibdata import load_calib_data

    data = load_calib_data(request.calibration, proto, quant.samples, from_lock=True)
    if data.sha256 != quant.data_sha256:
        raise DriftError(
            f"{lock_path}: the calibration data {request.calibration} "
            f"(sha256 {data.sha256[:16]}..) is not the lock's "
            f"(sha256 {quant.data_sha256[:16]}..: other samples or another order), "
            "so calibration would change the INT8 plan; --frozen refuses"
        )
    return notes
