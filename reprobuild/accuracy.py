"""The one accuracy metric: how far outputs are from reference outputs.

A precision plan's error (mixed model vs FP32 in ONNX Runtime) and an engine's error
(engine vs the FP32 model) are the same question, so they get the same answer:

- ``max_abs``: largest ``|got - want|``; a NaN or infinity where the reference differs counts
  as ``inf`` (and names the output in ``non_finite_outputs``); equal values, NaN == NaN and
  equal infinities included, count as 0.
- ``max_rel``: ``|got - want| / max(|want|, floor)`` with ``floor`` = 1e-3 x the output's
  largest finite magnitude, so near-zero elements do not turn rounding noise into huge ratios.

Accuracy is reported beside reproducibility, never mixed with it: bits decide ``verify``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def output_error(got: Any, want: Any) -> tuple[float, float, bool]:
    """``(max_abs, max_rel, non_finite)`` of one output against its reference.

    Raises ``ValueError`` when the shapes differ: no error figure means anything then.
    """
    import numpy as np

    a = np.asarray(got, dtype=np.float64)
    b = np.asarray(want, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shape {a.shape} against the reference's {b.shape}")
    with np.errstate(all="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        diff = np.where(same, 0.0, np.abs(a - b))
        diff = np.where(np.isnan(diff), np.inf, diff)
        finite_b = np.abs(b[np.isfinite(b)])
        floor = 1e-3 * float(finite_b.max()) if finite_b.size else 0.0
        denom = np.maximum(np.abs(b), floor if floor > 0 else np.finfo(np.float64).tiny)
        rel = np.where(diff == 0, 0.0, diff / denom)
    non_finite = bool(np.isinf(diff).any())
    e_abs = float(diff.max()) if diff.size else 0.0
    e_rel = float(rel.max()) if rel.size else 0.0
    return e_abs, e_rel, non_finite


def compare_outputs(got: Mapping[str, Any], want: Mapping[str, Any]) -> dict[str, Any]:
    """The metric over every reference output that ``got`` has (shapes must agree)."""
    per: dict[str, dict[str, float]] = {}
    max_abs = max_rel = 0.0
    non_finite: list[str] = []
    for name, ref in want.items():
        if name not in got:
            continue
        e_abs, e_rel, bad = output_error(got[name], ref)
        per[name] = {"max_abs": e_abs, "max_rel": e_rel}
        max_abs, max_rel = max(max_abs, e_abs), max(max_rel, e_rel)
        if bad:
            non_finite.append(name)
    return {
        "max_abs": max_abs,
        "max_rel": max_rel,
        "outputs": per,
        "non_finite_outputs": non_finite,
    }


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as its string (``"inf"``, ``"nan"``): strict JSON
    has no Infinity, and an infinite error is a finding worth keeping."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
