"""What the user asked for with ``--precision``: the one value both sides of preparing a
model read.

Why a module of its own: ``prepare`` (every precision) and ``prepare_int8`` (calibrating and
checking INT8 plans) both take this request; kept here, below both, ``prepare`` imports
``prepare_int8`` and neither has to import the other back.
"""

from __future__ import annotations

from dataclasses import dataclass

from reprobuild.lock.plan import PrecisionSettings


@dataclass
class PrecisionRequest:
    """What the user asked for with ``--precision`` and its rule options."""

    mode: str
    settings: PrecisionSettings
    calibration: str | None = None  # .npz / Polygraphy JSON path; None = seeded inputs
    calib_method: str = "entropy"  # int8 only: ONNX Runtime's calibration method
    calib_batch_size: int = 1  # int8 only: samples per calibration batch (torch2trt's default)
    calib_samples: int | None = None  # int8 only: the first N samples; None = all
    # int8 only (--float): what stays float runs in fp32, fp16 or bf16; None = not given
    # (fp32 when recording, the lock's own when applying a lock)
    float_precision: str | None = None
    seed: int | None = None  # fp16/bf16 without --calibration: the seeded inputs' seed (0)
