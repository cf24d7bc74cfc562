"""The one accuracy metric: how far outputs are from reference outputs.

A precision plan's error (mixed model vs FP32 in ONNX Runtime) and an engine's error
(engine vs the FP32 model) are the same question, so they get the same answer:

- ``max_abs``: largest ``|got - want|``; a NaN or infinity where the reference differs counts
  as ``inf`` (and names the output in ``non_finite_outputs``); equal values, NaN == NaN and
  equal infinities included, count as 0.
- ``max_rel``: ``|got - want| / max(|want|, floor)`` with ``floor`` = 1e-3 x the output's
  largest finite magnitude, so near-zero elements do not turn rounding noise into huge ratios.
- ``cosine``: cosine similarity of the flattened outputs. Quantization scales the error with
  the magnitudes, so a direction-only figure tells a uniformly rescaled output (cosine near
  1) from a scrambled one, which ``max_abs`` alone cannot.
- ``top1_agreement``: for a class vector (rows of scores along one axis), the fraction of
  rows whose argmax is the reference's; ``None`` for other outputs. A classifier's error
  that changes no decision is harmless, and this is the figure that says so.

Aggregates are the worst output's: largest errors, smallest cosine and agreement.

Accuracy is reported beside reproducibility, never mixed with it: bits decide ``verify``.
A :class:`Tolerance` (``verify --atol/--rtol``) adds a verdict as Polygraphy gives one:
every element within ``|got - want| <= atol + rtol * |want|``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Tolerance:
    """Polygraphy's element-wise check: ``|got - want| <= atol + rtol * |want|``."""

    atol: float = 0.0
    rtol: float = 0.0

    def beyond(self, got: Any, want: Any) -> int:
        """How many elements are outside the tolerance (equal values, NaN == NaN and equal
        infinities included, are inside; a NaN or infinity where the reference differs is
        outside)."""
        import numpy as np

        a = np.asarray(got, dtype=np.float64)
        b = np.asarray(want, dtype=np.float64)
        with np.errstate(all="ignore"):
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            close = np.abs(a - b) <= self.atol + self.rtol * np.abs(b)
        return int((~(same | close)).sum())


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


def cosine_similarity(got: Any, want: Any) -> float:
    """Cosine of the angle between the flattened outputs, in float64.

    Identical outputs give exactly 1.0 (not a rounded 0.9999999), two zero outputs count as
    identical, one zero output against a non-zero one gives 0.0, and a non-finite value where
    the two differ gives NaN: no direction is defined then.
    """
    import numpy as np

    a = np.asarray(got, dtype=np.float64).ravel()
    b = np.asarray(want, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"shape {a.shape} against the reference's {b.shape}")
    if np.array_equal(a, b, equal_nan=True):
        return 1.0
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))


def class_axis(shape: tuple[int, ...]) -> int | None:
    """The class axis when an output is a batch of class vectors, else None.

    A class vector is (samples, classes, 1, ...) or (samples, 1, classes): after the first
    (sample) axis exactly one axis is longer than 1. Feature maps and scalars are not.
    """
    long = [i for i, n in enumerate(shape[1:], start=1) if n > 1]
    return long[0] if len(shape) >= 2 and len(long) == 1 else None


def top1_agreement(got: Any, want: Any) -> float | None:
    """Fraction of samples whose largest score is at the reference's; None for an output
    that is not a class vector (see :func:`class_axis`)."""
    import numpy as np

    a, b = np.asarray(got), np.asarray(want)
    if a.shape != b.shape:
        raise ValueError(f"shape {a.shape} against the reference's {b.shape}")
    axis = class_axis(a.shape)
    if axis is None or a.shape[0] == 0:
        return None
    return float((a.argmax(axis=axis) == b.argmax(axis=axis)).mean())


def compare_outputs(
    got: Mapping[str, Any], want: Mapping[str, Any], tolerance: Tolerance | None = None
) -> dict[str, Any]:
    """The metric over every reference output that ``got`` has (shapes must agree), and
    with ``tolerance`` how many elements are outside it."""
    per: dict[str, dict[str, Any]] = {}
    max_abs = max_rel = 0.0
    cosines: list[float] = []
    agreements: list[float] = []
    non_finite: list[str] = []
    for name, ref in want.items():
        if name not in got:
            continue
        e_abs, e_rel, bad = output_error(got[name], ref)
        cos = cosine_similarity(got[name], ref)
        top1 = top1_agreement(got[name], ref)
        per[name] = {"max_abs": e_abs, "max_rel": e_rel, "cosine": cos, "top1_agreement": top1}
        if tolerance is not None:
            per[name]["beyond_tolerance"] = tolerance.beyond(got[name], ref)
        max_abs, max_rel = max(max_abs, e_abs), max(max_rel, e_rel)
        cosines.append(cos)
        if top1 is not None:
            agreements.append(top1)
        if bad:
            non_finite.append(name)
    out = {
        "max_abs": max_abs,
        "max_rel": max_rel,
        "cosine": _worst(cosines),
        "top1_agreement": min(agreements) if agreements else None,
        "outputs": per,
        "non_finite_outputs": non_finite,
    }
    if tolerance is not None:
        beyond = sum(p["beyond_tolerance"] for p in per.values())
        out["tolerance"] = {
            "atol": tolerance.atol,
            "rtol": tolerance.rtol,
            "elements_beyond": beyond,
            "within": beyond == 0,
        }
    return out


def _worst(cosines: list[float]) -> float | None:
    """The smallest cosine, NaN (undefined direction) before any number; None for none."""
    import math

    if not cosines:
        return None
    nans = [c for c in cosines if math.isnan(c)]
    return nans[0] if nans else min(cosines)


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
