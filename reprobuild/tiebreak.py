"""The tie band and the tie-break rule: which of a key's near-tied candidates a recording keeps.

Why: many candidates of a layer are timed within noise of each other, so "the fastest as
measured" is a draw that two recordings of one machine answer differently. Among the
candidates within the band of the best, the choice is made by a fixed rule that reads no
time, so independent recordings agree wherever the band covers the noise.

The band of one key (timing-cache key) is ``band_rel * best`` ms, where ``band_rel`` is the
setting ``tie_band`` (a fraction of the best time) widened by the noise measured on the
key's own candidates, up to ``NOISE_CAP`` times ``tie_band``. The measured noise is the
median, over the candidates timed more than once, of (second-fastest run - fastest run) /
fastest run: how far a candidate's cost (the minimum of its runs) could move had one run
fewer been taken. A builder that prints one averaged time per candidate (TensorRT) gives no
spread: its band is ``tie_band`` alone.

The rule ``steady-then-hash``: among the candidates within the band, (1) a kernel that
accumulates in a wide type before one whose name says it accumulates in FP16/BF16
(``f16acc``, ``bf16acc``, the reference ``k16`` kernels), because its result moves less with
the summation order; then (2) the lowest tactic hash, compared as an integer. Neither step
reads a time or the order candidates were timed in.

``tie_band`` 0 keeps the builder's choice (the fastest as measured): nothing is decided here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reprobuild.types import DEFAULT_TIE_RULE

NOISE_CAP = 2.0
"""The measured noise widens the band to at most this many times ``tie_band``: a run
disturbed by a neighbour must not let a clearly slower kernel in."""

_LOW_ACCUMULATION = ("f16acc", "bf16acc", "_k16_")


@dataclass(frozen=True)
class TieCandidate:
    """One timed candidate of a key: its tactic, kernel name and every timed run (ms)."""

    tactic: int
    kernel: str | None
    runs: tuple[float, ...]

    @property
    def cost(self) -> float:
        """The cost the builder compares: the fastest run."""
        return min(self.runs) if self.runs else math.inf


@dataclass(frozen=True)
class TieDecision:
    """What the rule made of one key: the fastest, the kept one, the band and the ties."""

    fastest: int  # tactic with the lowest cost (ties in cost: the lowest hash)
    chosen: int  # tactic the rule keeps
    best_ms: float
    second_ms: float | None  # the next candidate's cost, None with one candidate
    band_ms: float
    band_rel: float
    noise_rel: float | None  # measured; None when no candidate was timed twice
    ties: tuple[int, ...]  # tactics within the band, in rule order (chosen first)
    chosen_ms: float
    outside_ms: float | None = None  # the fastest candidate outside the band, if any

    @property
    def near_tie(self) -> bool:
        return len(self.ties) > 1

    def to_json(self) -> dict[str, Any]:
        return {
            "fastest": f"0x{self.fastest:x}",
            "chosen": f"0x{self.chosen:x}",
            "best_ms": self.best_ms,
            "second_ms": self.second_ms,
            "chosen_ms": self.chosen_ms,
            "band_ms": self.band_ms,
            "band_rel": self.band_rel,
            "noise_rel": self.noise_rel,
            "ties": [f"0x{t:x}" for t in self.ties],
            "outside_ms": self.outside_ms,
        }


def rule_key(c: TieCandidate) -> tuple[int, int]:
    """``steady-then-hash``: wide accumulation first, then the lowest tactic hash."""
    name = (c.kernel or "").lower()
    return (1 if any(m in name for m in _LOW_ACCUMULATION) else 0, c.tactic)


def measured_noise(cands: Sequence[TieCandidate]) -> float | None:
    """Median relative gap between each candidate's two fastest runs (None: no repeats)."""
    gaps = []
    for c in cands:
        runs = sorted(r for r in c.runs if math.isfinite(r))
        if len(runs) >= 2 and runs[0] > 0:
            gaps.append((runs[1] - runs[0]) / runs[0])
    return statistics.median(gaps) if gaps else None


def band_fraction(tie_band: float, noise: float | None) -> float:
    """``tie_band`` widened by the measured noise, to at most ``NOISE_CAP * tie_band``."""
    if tie_band <= 0:
        return 0.0
    return max(tie_band, min(noise or 0.0, NOISE_CAP * tie_band))


def decide(
    cands: Sequence[TieCandidate], tie_band: float, rule: str = DEFAULT_TIE_RULE
) -> TieDecision | None:
    """The rule's choice among ``cands`` (in any order); None without a finite cost."""
    if rule != DEFAULT_TIE_RULE:
        raise ValueError(f"unknown tie rule {rule!r}")
    timed = sorted((c for c in cands if math.isfinite(c.cost)), key=lambda c: (c.cost, c.tactic))
    if not timed:
        return None
    best = timed[0]
    noise = measured_noise(timed)
    rel = band_fraction(tie_band, noise)
    width = rel * best.cost
    near = sorted((c for c in timed if c.cost <= best.cost + width), key=rule_key)
    chosen = near[0] if rel > 0 else best
    outside = [c.cost for c in timed if c.cost > best.cost + width]
    return TieDecision(
        fastest=best.tactic,
        chosen=chosen.tactic,
        best_ms=best.cost,
        second_ms=timed[1].cost if len(timed) > 1 else None,
        band_ms=width,
        band_rel=rel,
        noise_rel=noise,
        ties=tuple(c.tactic for c in near),
        chosen_ms=chosen.cost,
        outside_ms=outside[0] if outside else None,
    )


def describe_policy(tie_band: float, rule: str, measured: str) -> dict[str, Any]:
    """The build report's ``tie_break`` head: the policy and how the band was measured."""
    return {
        "tie_band": tie_band,
        "rule": rule,
        "noise_cap": NOISE_CAP,
        "band": (
            "none: the builder's choice, the fastest as measured"
            if tie_band <= 0
            else f"max(tie_band, min(measured noise, {NOISE_CAP:g} x tie_band)) x best time"
        ),
        "measured": measured,
        "rule_text": (
            "among candidates within the band of the best: wide accumulation before "
            "f16acc/bf16acc/k16 kernels, then the lowest tactic hash"
        ),
    }
