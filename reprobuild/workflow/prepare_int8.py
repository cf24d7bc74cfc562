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
from reprobuild.lock.plan import PrecisionPlan

if TYPE_CHECKING:
    from reprobuild.workflow.prepare import PrecisionRequest


def calibrate_int8(
    proto: onnx.ModelProto, request: PrecisionRequest
) -> tuple[PrecisionPlan, list[str]]:
    """Read the calibration data and calibrate: a new INT8 plan and notes."""
    from reprobuild.precision.calibdata import load_calib_data
    from reprobuild.precision.quantize import calibrate

    if request.calibration is None:
        raise UsageError(
            "--precision int8 needs --calibration DATA to calibrate the activation scales: "
            "a .npz (one array per model input, first axis = samples), a folder of .npy/.npz "
            "files, Polygraphy --save-inputs JSON, or a dataset as file.py:NAME or module:NAME"
        )
    data = load_calib_data(request.calibration, proto, request.calib_samples)
    return calibrate(proto, request.settings, request.calib_method, request.calib_batch_size, data)


def check_locked_int8(
    proto: onnx.ModelProto,
    locked: PrecisionPlan,
    request: PrecisionRequest | None,
    frozen: bool,
    lock_path: Path,
) -> list[str]:
    """Calibration options must be the lock's; data given with ``--frozen`` must be it."""
    quant = locked.quantization
    if quant is None:
        raise UsageError(
            f"{lock_path}: the INT8 precision plan has no quantization section; re-record it"
        )
    if request is None or request.mode != "int8":
        return []
    asked = {"method": request.calib_method, "batch_size": request.calib_batch_size}
    if request.calib_samples is not None:
        asked["samples"] = request.calib_samples
    have = {"method": quant.method, "batch_size": quant.batch_size, "samples": quant.samples}
    changed = ", ".join(f"{k}: {have[k]!r} -> {v!r}" for k, v in asked.items() if have[k] != v)
    if changed:
        msg = f"{lock_path}: the calibration options differ from the lock's INT8 plan ({changed})"
        if frozen:
            raise DriftError(msg + "; --frozen refuses to change the plan")
        raise UsageError(msg + "; drop the options, or delete the lock to re-calibrate")
    if request.calibration is None:
        return []
    if not frozen:
        return [
            f"--calibration {request.calibration} ignored: the lock's INT8 scales (calibrated "
            f"on {locked.calibration}) are applied as recorded"
        ]
    from reprobuild.precision.calibdata import load_calib_data

    data = load_calib_data(request.calibration, proto, quant.samples)
    if data.sha256 != quant.data_sha256:
        raise DriftError(
            f"{lock_path}: the calibration data {request.calibration} "
            f"(sha256 {data.sha256[:16]}..) is not the lock's "
            f"(sha256 {quant.data_sha256[:16]}..: other samples or another order), "
            "so calibration would change the INT8 plan; --frozen refuses"
        )
    return []
