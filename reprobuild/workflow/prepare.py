"""The model a backend builds: the original, or the original with the lock's precision plan.

A lock's plan is never re-derived: new calibration data or new defaults cannot change a
locked build. Strongly typed TensorRT takes precision from the graph, so the plan becomes
Cast nodes here, before any backend sees the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reprobuild.accuracy import json_safe
from reprobuild.errors import DriftError, ReprobuildError, UsageError
from reprobuild.events import Progress, quiet
from reprobuild.lock.model import Lock
from reprobuild.lock.plan import PrecisionPlan
from reprobuild.workflow.request import PrecisionRequest


def prepare_model(
    model_path: Path,
    lock: Lock | None,
    request: PrecisionRequest | None,
    frozen: bool,
    workdir: Path,
    lock_path: Path,
    progress: Progress = quiet,
) -> tuple[Path, PrecisionPlan | None, list[str]]:
    """The model to build (``model_path`` itself, or a converted copy in ``workdir``), its
    plan, and notes for the user."""
    import onnx

    from reprobuild.precision.analysis import observe_plan

    notes: list[str] = []
    proto = onnx.load(str(model_path))
    locked = lock.precision if lock is not None else None
    if locked is not None:
        _check_request(locked, request, frozen, lock_path)
        plan = locked
        if locked.mode == "int8":
            from reprobuild.workflow.prepare_int8 import check_locked_int8, int8_opset

            proto, conv = int8_opset(proto, model_path, notes)
            notes += check_locked_int8(proto, locked, request, frozen, lock_path, conv)
        else:
            from reprobuild.precision.opset import reconvert

            proto, more = reconvert(proto, model_path, locked.opset, lock_path)
            notes += more
            given = request.calibration if request is not None else None
            if request is not None and given is None and request.seed is not None:
                given = f"seeded:{request.seed}"
            if given is not None and given != locked.calibration:
                notes.append(
                    f"--calibration {given} ignored: the lock's plan (calibrated on "
                    f"{locked.calibration}) is applied as recorded"
                )
    elif request is not None:
        if lock is not None and frozen:
            raise DriftError(f"{lock_path}: has no precision plan; --frozen refuses to add one")
        if lock is not None:
            raise UsageError(
                f"{lock_path}: was recorded without a precision plan; delete it to re-record "
                f"with --precision {request.mode}"
            )
        if request.mode == "int8":
            from reprobuild.workflow.prepare_int8 import calibrate_int8, int8_opset

            proto, conv = int8_opset(proto, model_path, notes)
            plan, more = calibrate_int8(proto, request, conv, progress)
            notes += more
        else:
            from reprobuild.precision.calibration import load_calibration
            from reprobuild.precision.opset import convert_for_float
            from reprobuild.precision.rules import derive_plan

            proto, conv, more = convert_for_float(
                proto, model_path, request.mode, request.settings.opset
            )
            notes += more
            if request.calibration is None:
                feeds, desc = load_calibration(None, proto, request.seed or 0)
                batches = [feeds]
            else:
                from reprobuild.precision.calibdata import rule_batches

                batches, desc = rule_batches(request.calibration, proto)
            plan = derive_plan(
                proto, request.mode, request.settings, batches[0], desc, batches[1:], explain=True
            )
            plan.opset = conv
    else:
        plan = observe_plan(proto)
        if lock is not None and lock.precision is None and plan is not None:
            notes.append("the model is mixed precision but the lock has no plan")
    if plan is None:  # the model as it is: nothing to apply (nor to import)
        return model_path, plan, notes
    from reprobuild.precision.apply import apply_plan

    if plan.mode == "observed":
        apply_plan(proto, plan)  # validates node names against the model
        return model_path, plan, notes
    if plan.mode == "int8":
        from reprobuild.precision.int8float import apply_int8_plan

        converted = apply_int8_plan(proto, plan)
    else:
        converted = apply_plan(proto, plan)
    out = workdir / f"{model_path.stem}.{plan.mode}.onnx"
    onnx.save(converted, str(out))
    return out, plan, notes


def _check_request(
    locked: PrecisionPlan, request: PrecisionRequest | None, frozen: bool, lock_path: Path
) -> None:
    """Options given with a locked plan must be the plan's own."""
    if request is None or (request.mode == locked.mode and request.settings == locked.settings):
        return
    was = {"mode": locked.mode, **locked.settings.values()}
    now = {"mode": request.mode, **request.settings.values()}
    changed = ", ".join(f"{k}: {was[k]!r} -> {now[k]!r}" for k in was if was[k] != now[k])
    msg = f"{lock_path}: the precision options differ from the lock's plan ({changed})"
    if frozen:
        raise DriftError(msg + "; --frozen refuses to change the plan")
    raise UsageError(msg + "; drop the options, or delete the lock to re-plan")


def plan_error_report(original: Path, converted: Path) -> dict[str, Any]:
    """Output error of the converted model against the FP32 one, on seeded inputs (for the
    build report: a backend that cannot run the converted model gives the reason)."""
    import onnx

    from reprobuild.precision.calibration import load_calibration
    from reprobuild.precision.measure import plan_error

    fp32 = onnx.load(str(original))
    feeds, desc = load_calibration(None, fp32)
    try:
        err = plan_error(fp32, onnx.load(str(converted)), feeds)
    except ReprobuildError as exc:  # e.g. ONNX Runtime lacks a BF16 kernel
        return {"error": str(exc), "inputs": desc}
    keep = ("max_abs", "max_rel", "cosine", "top1_agreement", "runtime")
    clean = {k: v for k, v in err.items() if k in keep}
    return {**json_safe(clean), "inputs": desc}
