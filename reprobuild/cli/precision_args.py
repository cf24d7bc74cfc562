"""The precision options of ``build``, checked and turned into one ``PrecisionRequest``.

Why a module of its own: ``build_cmds`` declares every option (typer is the one parser);
which precision options go together (INT8 calibration options only with int8, a seed only
without a data file, any rule option only with ``--precision``) is checked here, before any
model is loaded, so a wrong combination fails in milliseconds with exit 2.
"""

from __future__ import annotations

from typing import Any

from reprobuild.errors import UsageError


def precision_request(
    mode: str | None,
    calibration: str | None,
    seed: int | None,
    calib: dict[str, Any],
    float_precision: str | None,
    **rules: Any,
) -> Any:
    """The ``PrecisionRequest`` for ``--precision MODE`` and its options; None without a
    mode (then every other precision option is refused). ``rules``: the rule options as
    :func:`reprobuild.precision.options.validate_options` names them."""
    if mode is None:
        if float_precision is not None:
            raise UsageError(
                f"--float {float_precision} is an INT8 option (the precision of what INT8 "
                "leaves in float); use it with --precision int8"
            )
        values = (*rules.values(), *calib.values(), calibration, seed)
        given = rules["keep_io_types"] is not None  # the one tri-state flag: None = not given
        if given or any(v is not None and v is not False and v != () and v != [] for v in values):
            raise UsageError("precision options need --precision fp16, bf16 or int8")
        return None
    from reprobuild.precision.options import validate_options

    # trtexec and Torch-TensorRT users write FP16 / BF16 / INT8: one spelling in the lock.
    mode = mode.lower()
    if float_precision is not None:
        float_precision = float_precision.lower()
    from reprobuild.workflow.request import PrecisionRequest

    _check_seed(mode, calibration, seed)
    max_output = rules.pop("max_output")
    keep_io_types = rules.pop("keep_io_types")
    settings = validate_options(
        mode,
        rules.pop("keep_fp32"),
        rules.pop("keep_fp32_ops"),
        512.0 if max_output is None else max_output,
        rules.pop("max_reduction_depth"),
        rules.pop("fp32_accumulate"),
        True if keep_io_types is None else keep_io_types,
        **rules,
    )
    return PrecisionRequest(
        mode,
        settings,
        calibration,
        seed=seed,
        **calib_options(
            mode, calib["method"], calib["batch_size"], calib["samples"], float_precision
        ),
    )


def _check_seed(mode: str, calibration: str | None, seed: int | None) -> None:
    """The seed picks random inputs: only without a data file."""
    if seed is None:
        return
    if calibration is not None:
        raise UsageError(
            f"--calibration-seed {seed}: the seed is for random reference inputs; "
            f"--calibration {calibration} already gives the inputs (drop one of the two)"
        )
    if seed < 0:
        raise UsageError(f"--calibration-seed {seed}: must be a non-negative integer")


def calib_options(
    mode: str,
    method: str | None,
    batch_size: int | None,
    samples: int | None,
    float_precision: str | None = None,
) -> dict[str, Any]:
    """The INT8 calibration options as PrecisionRequest fields; refused for other modes."""
    if mode != "int8" and float_precision is not None:
        raise UsageError(
            f"--float {float_precision} is an INT8 option (the precision of what INT8 leaves "
            f"in float); with --precision {mode} every converted node is already {mode}"
        )
    given = [
        n
        for n, v in (
            ("--calib-method", method),
            ("--calib-batch-size", batch_size),
            ("--calib-samples", samples),
        )
        if v is not None
    ]
    if mode != "int8":
        if given:
            raise UsageError(
                f"{given[0]} is an INT8 calibration option; use it with --precision int8"
            )
        return {}
    from reprobuild.lock.qplan import CALIB_METHODS, FLOAT_PRECISIONS

    if method is not None and method not in CALIB_METHODS:
        raise UsageError(
            f"--calib-method {method!r}: unknown method; use {', '.join(CALIB_METHODS)}"
        )
    if float_precision is not None and float_precision not in FLOAT_PRECISIONS:
        raise UsageError(
            f"--float {float_precision!r}: unknown precision; use {', '.join(FLOAT_PRECISIONS)}"
        )
    for name, value in (("--calib-batch-size", batch_size), ("--calib-samples", samples)):
        if value is not None and value < 1:
            raise UsageError(f"{name} {value}: must be a positive integer")
    out: dict[str, Any] = {
        "calib_method": method or "entropy",
        "calib_samples": samples,
        "float_precision": float_precision,
    }
    if batch_size is not None:
        out["calib_batch_size"] = batch_size
    return out
