"""Each node's deciding rule in words: what ``show --precision`` and ``diff`` print.

A plan recorded by a build keeps, beside each node's rule, what decided it (``why``: the
pattern that matched, the magnitude measured, the depth counted). Older plans have only the
rule; their words come from the rule and the plan's settings, so every plan reads the same
way. Works on plan values only (no numpy, no onnx): the lock commands start fast.
"""

from __future__ import annotations

from reprobuild.lock.plan import NodePrecision, PrecisionPlan

_LOW = ("fp16", "bf16")


def head(n: NodePrecision) -> str:
    """What happens to the node: ``kept FP32``, ``runs in FP16``, ``left as is``..."""
    if n.precision == "fp32":
        return "kept FP32"
    if n.precision == "other":
        return "left as is"
    if n.rule == "include":
        return f"forced to {n.precision.upper()}"
    return f"runs in {n.precision.upper()}"


def because(plan: PrecisionPlan, n: NodePrecision) -> str:
    """Why, in words: the recorded ``why``, or the rule read with the plan's settings."""
    acc = "; accumulates in FP32" if n.accumulate == "fp32" else ""
    if n.why is not None:
        return n.why + acc
    s = plan.settings
    low = n.precision in _LOW
    if plan.mode == "int8" and n.rule in ("default", "unsupported"):
        text = (
            "no rule kept it in float"
            if n.precision == "int8"
            else "INT8 quantizes only Conv, Gemm and MatMul"
            if n.rule == "unsupported"
            else "no rule kept it in FP32"
        )
    elif n.rule == "default":
        text = "no rule kept it in FP32"
    elif n.rule == "name":
        text = "name matches --keep-fp32 " + " or ".join(repr(p) for p in s.keep_fp32)
    elif n.rule == "op":
        text = f"{n.op} is in --keep-fp32-op"
    elif n.rule == "initializer-range":
        text = f"a weight does not fit {plan.mode} (overflow, or values that flush to zero)"
    elif n.rule == "reduction-depth":
        text = f"reduces more than {s.max_reduction_depth} elements"
    elif n.rule == "magnitude":
        text = (
            f"|output| > {s.max_output:g} on the calibration inputs, or an input beyond the "
            f"{plan.mode} range"
        )
    elif n.rule == "constant":
        text = (
            f"constant data; every consumer takes it in {n.precision}"
            if low
            else "constant data a consumer takes in FP32"
        )
    elif n.rule == "observed":
        text = f"{n.precision} in the model as given"
    elif n.rule == "include":
        text = "an include option overrides the rule that kept it in FP32"
    elif n.rule == "always-fp32":
        text = f"{n.op} is on the always-FP32 list"
    elif n.precision == "other":
        text = "no float computation to convert"
    else:
        text = f"{n.op} has no {plan.mode} form in this model"
    return text + acc


def sentence(plan: PrecisionPlan, n: NodePrecision) -> str:
    """``kept FP32: |output| max 1.3e3 > 512 on 1 calibration sample``."""
    return f"{head(n)}: {because(plan, n)}"


def decision_change(
    old: PrecisionPlan, a: NodePrecision, new: PrecisionPlan, b: NodePrecision
) -> str:
    """Which rule decides a node now and which did, each with its words."""
    return f"decided by {b.rule} ({sentence(new, b)}), was {a.rule} ({sentence(old, a)})"
