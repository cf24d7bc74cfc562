"""The tie band and the tie-break rule: which of a key's near-tied candidates a recording keeps.

Why: many candidates of a layer are timed within noise of each other, so "the fastest as
measured" is a draw that two recordings of one machine answer differently. Among the
candidates within the band of the best, the choice is made by a fixed rule that reads no
time, so independent recordings agree wherever the band covers the noise.

The band of one key (timing-cache key) is ``tie_band * best`` ms, ``best`` being the lowest
cost among the key's candidates (a candidate's cost: :func:`robust_cost` of its runs). It is a
fixed fraction: a band widened by each recording's measured noise moves its own edge from
one recording to the next. The measured noise (the median, over the candidates timed more
than once, of (second-fastest run - fastest run) / fastest run) is reported, not used.

Why the default band is wide (0.4) and what the rule prefers: measured on a loaded two-core
machine, a candidate's cost relative to its key's best moves between recordings by 5 to 30 %
even on the CPU-time clock (a neighbour's cache and memory traffic slows some kernels more
than others): that is a change of the machine, not noise that more runs remove, so any
band edge with a candidate near it is a knife edge. The default rule therefore prefers the
kernel that is usually the fastest (one reduction pass: the fastest or within 6 % of it in
9 of 10 key-recordings measured), and the band is wide enough that this preference stays
inside it; a kernel that is clearly slower still stays out. ``docs/stability.md`` has the
figures.

The rules (neither reads a time or the order candidates were timed in):

- ``steady-then-splits`` (default): among the candidates within the band, (0) a kernel
  whose name says its bits change from run to run or with the batch size (the reference
  ``atomic4`` and ``rowsplit`` kernels, :data:`VARIABLE`) after every other one, because
  no lock can make its outputs repeat; (1) a kernel that accumulates in a wide type
  before one whose name says it accumulates in FP16/BF16 (``f16acc``, ``bf16acc``, the
  reference ``k16`` kernels), because its result moves less with the summation order;
  (2) the fewest partial sums its name says the reduction is cut into
  (:func:`partial_sums`: ``splitkN`` and ``treeN`` N, the reference ``direct`` Conv one
  per kernel tap, ``kN`` chunks many, any other name one); (3) the lowest tactic hash,
  compared as an integer.
- ``steady-then-hash``: steps (0), (1) and (3) alone.

:func:`unsure` tells a backend that times in rounds which candidates' side of the band edge
is still in doubt, so it can time them again before the decision (the reference backend
does, :mod:`reprobuild.backends.reference.autotune`).

``tie_band`` 0 keeps the builder's choice (the fastest as measured): nothing is decided here.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reprobuild.types import DEFAULT_TIE_RULE, TIE_RULES

_LOW_ACCUMULATION = ("f16acc", "bf16acc", "_k16_")
VARIABLE = ("_atomic", "_rowsplit_")
"""Name parts of kernels whose bits vary from run to run (split-K partials added with
atomics) or with the batch size (a split chosen from the row count): ranked last."""
_SPLITS = re.compile(r"_(?:splitk|tree)(\d+)_")
_CHUNKS = re.compile(r"_k(\d+)_")
_PER_TAP = "ref_conv_direct_"
PER_TAP_SUMS = 1 << 20
"""What :func:`partial_sums` counts for a reference ``direct`` Conv kernel: one partial sum
per kernel tap, added in order; the name does not say how many taps (at least two: a
pointwise Conv has no ``direct`` kernel), so it ranks after every named split and before
fixed-length chunks."""

UNSURE_BELOW = 0.5
UNSURE_ABOVE = 1.0
"""A candidate is unsure (:func:`unsure`) while ``edge / (1 + UNSURE_BELOW * band) <
cost / best <= edge * (1 + UNSURE_ABOVE * band)``, ``edge = 1 + band``. Wider above the
edge: a cost is a low statistic over runs, so more runs mostly lower it, and a candidate
lifted out of the band by a burst of load (one was seen 1.7x the best over six runs,
the fastest in every other recording) comes back in only if it runs again."""

OUTLIER_BELOW = 3.0
"""A run more than this many times below its candidate's median run (the lower median)
is impossible, not fast: :func:`robust_cost` leaves it out."""


def robust_cost(runs: Sequence[float]) -> float:
    """A candidate's cost: the fastest of its runs, leaving out any run more than
    :data:`OUTLIER_BELOW` times below the lower median of its runs.

    Why not the plain minimum: one impossible reading then decides (a kernel timed
    [1.081, 0.591, 0.038] ms became the best and pushed a 0.41 ms kernel out of the band).
    Why not the median: load only ever slows a run, so the fastest sane run is the one
    least disturbed, and settling rounds rely on more runs lowering the cost. With fewer
    than three runs the lower median is the minimum, so nothing is left out: two runs
    cannot say which one is the outlier (a cold first run is the slow one)."""
    finite = sorted(r for r in runs if math.isfinite(r))
    if not finite:
        return math.inf
    floor = statistics.median_low(finite) / OUTLIER_BELOW
    return next(r for r in finite if r >= floor)


@dataclass(frozen=True)
class TieCandidate:
    """One timed candidate of a key: its tactic, kernel name and every timed run (ms)."""

    tactic: int
    kernel: str | None
    runs: tuple[float, ...]

    @property
    def cost(self) -> float:
        """The cost the builder compares: the fastest sane run (:func:`robust_cost`)."""
        return robust_cost(self.runs)


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


def partial_sums(kernel: str | None) -> int:
    """How many partial sums the kernel's name says its reduction is cut into: ``splitkN``
    and ``treeN`` N, the reference ``direct`` Conv one per tap (:data:`PER_TAP_SUMS`),
    ``kN`` (fixed-length chunks) more than any of them, else 1."""
    name = (kernel or "").lower()
    if m := _SPLITS.search(name):
        return int(m.group(1))
    if _CHUNKS.search(name):
        return 1 << 30
    if name.startswith(_PER_TAP):
        return PER_TAP_SUMS
    return 1


def varies(kernel: str | None) -> bool:
    """Whether the kernel's name says its bits change from run to run or with the batch
    size (:data:`VARIABLE`)."""
    name = (kernel or "").lower()
    return any(m in name for m in VARIABLE)


def rule_key(c: TieCandidate, rule: str = DEFAULT_TIE_RULE) -> tuple[int, int, int, int]:
    """The rule's order: run-to-run and batch-dependent kernels last, then wide
    accumulation first, then (``steady-then-splits``) the fewest partial sums, then the
    lowest tactic hash."""
    if rule not in TIE_RULES:
        raise ValueError(f"unknown tie rule {rule!r}")
    name = (c.kernel or "").lower()
    low = 1 if any(m in name for m in _LOW_ACCUMULATION) else 0
    splits = partial_sums(c.kernel) if rule == "steady-then-splits" else 0
    return (int(varies(c.kernel)), low, splits, c.tactic)


def measured_noise(cands: Sequence[TieCandidate]) -> float | None:
    """Median relative gap between each candidate's two fastest runs (None: no repeats)."""
    gaps = []
    for c in cands:
        runs = sorted(r for r in c.runs if math.isfinite(r))
        if len(runs) >= 2 and runs[0] > 0:
            gaps.append((runs[1] - runs[0]) / runs[0])
    return statistics.median(gaps) if gaps else None


def decide(
    cands: Sequence[TieCandidate], tie_band: float, rule: str = DEFAULT_TIE_RULE
) -> TieDecision | None:
    """The rule's choice among ``cands`` (in any order); None without a finite cost."""
    if rule not in TIE_RULES:
        raise ValueError(f"unknown tie rule {rule!r}")
    timed = sorted((c for c in cands if math.isfinite(c.cost)), key=lambda c: (c.cost, c.tactic))
    if not timed:
        return None
    best = timed[0]
    noise = measured_noise(timed)
    rel = max(tie_band, 0.0)
    width = rel * best.cost
    near = sorted(
        (c for c in timed if c.cost <= best.cost + width), key=lambda c: rule_key(c, rule)
    )
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


def unsure(
    cands: Sequence[TieCandidate], tie_band: float, rule: str = DEFAULT_TIE_RULE
) -> list[int]:
    """Indices into ``cands`` worth timing again before the rule decides: every candidate
    up to the rule's choice (in the rule's order) whose cost lies near the band's edge
    (:data:`UNSURE_BELOW`, :data:`UNSURE_ABOVE`), and then also the best (the band is
    measured from it). Only these can change the choice: a candidate after the choice in the rule's
    order never can. Empty when nothing is in doubt, or with ``tie_band`` 0."""
    if tie_band <= 0:
        return []
    timed = [i for i, c in enumerate(cands) if math.isfinite(c.cost) and c.cost > 0]
    if not timed:
        return []
    best = min(timed, key=lambda i: (cands[i].cost, cands[i].tactic))
    edge = 1.0 + tie_band
    low, high = edge / (1.0 + UNSURE_BELOW * tie_band), edge * (1.0 + UNSURE_ABOVE * tie_band)
    doubt = []
    for i in sorted(timed, key=lambda i: rule_key(cands[i], rule)):
        ratio = cands[i].cost / cands[best].cost
        if low < ratio <= high:
            doubt.append(i)
        if ratio <= edge:  # the rule's choice: nothing after it matters
            break
    return sorted(set(doubt) | {best}) if doubt else []


RULE_TEXT = {
    "steady-then-splits": (
        "among candidates within the band of the best: run-to-run and batch-dependent "
        "kernels last, then wide accumulation before f16acc/bf16acc/k16 kernels, then the "
        "fewest partial sums, then the lowest tactic hash"
    ),
    "steady-then-hash": (
        "among candidates within the band of the best: run-to-run and batch-dependent "
        "kernels last, then wide accumulation before f16acc/bf16acc/k16 kernels, then the "
        "lowest tactic hash"
    ),
}


def ahead(
    cands: Sequence[TieCandidate], tie_band: float, rule: str = DEFAULT_TIE_RULE
) -> list[int]:
    """Indices into ``cands`` of the candidates before the rule's choice in the rule's
    order: the ones the rule would rather keep, were they within the band. A backend that
    drops clearly slower candidates early drops these only after more runs. Empty with
    ``tie_band`` 0."""
    d = decide(cands, tie_band, rule) if tie_band > 0 else None
    if d is None:
        return []
    chosen = next(c for c in cands if c.tactic == d.chosen)
    return [i for i, c in enumerate(cands) if rule_key(c, rule) < rule_key(chosen, rule)]


def describe_policy(tie_band: float, rule: str, measured: str) -> dict[str, Any]:
    """The build report's ``tie_break`` head: the policy and how the band was measured."""
    return {
        "tie_band": tie_band,
        "rule": rule,
        "band": (
            "none: the builder's choice, the fastest as measured"
            if tie_band <= 0
            else "tie_band x best time"
        ),
        "measured": measured,
        "rule_text": RULE_TEXT[rule],
    }


@dataclass(frozen=True)
class KeyOption:
    """One timing-cache key of a layer (one format combination): its time, the kernel its
    tactic runs and the key itself, which the rule between keys reads."""

    key: str
    time_ms: float
    kernel: str | None = None

    @property
    def cost(self) -> float:
        return math.inf if math.isnan(self.time_ms) else self.time_ms


def key_rule_key(o: KeyOption, rule: str = DEFAULT_TIE_RULE) -> tuple[int, int, int, int]:
    """The rule's order between keys: the key whose kernel is numerically steadier
    (:func:`rule_key` without the tactic hash), then the lowest key hash."""
    variable, low, splits, _tactic = rule_key(TieCandidate(0, o.kernel, ()), rule)
    return (variable, low, splits, int(o.key, 16) if o.key.startswith("0x") else 0)


def _band_edge(best: float, tie_band: float) -> float:
    """The highest time within the band of ``best``, computed one way for choosing and
    forcing alike (``best * (1 + band)`` can differ from it in the last bit)."""
    return best + max(tie_band, 0.0) * best if math.isfinite(best) else best


def choose_key(options: Sequence[KeyOption], tie_band: float, rule: str = DEFAULT_TIE_RULE) -> int:
    """Index of the key a layer runs, in any order the keys were timed in: among the keys
    whose time is within ``tie_band * best`` of the best, the first in :func:`key_rule_key`
    order; with ``tie_band`` 0 the fastest (equal times: the lowest key hash). A NaN never
    wins. The same band and rule as within a key, for the same reason: two keys timed
    within noise of each other must not be chosen between by the noise."""
    if not options:
        raise ValueError("a layer needs at least one key")
    best = min(o.cost for o in options)
    edge = _band_edge(best, tie_band)
    near = [i for i, o in enumerate(options) if o.cost <= edge]
    order = (
        (lambda i: key_rule_key(options[i], rule))
        if tie_band > 0
        else (lambda i: key_rule_key(options[i], rule)[3:])
    )
    return min(near, key=order)


def forcing_times(
    options: Sequence[KeyOption], runs: int, tie_band: float, rule: str = DEFAULT_TIE_RULE
) -> list[float]:
    """Each key's time such that :func:`choose_key` picks ``runs``: the given times when it
    already does; else every other key's time raised just above the band of the running
    key's (a locked build whose tactic change made another key preferable by the rule
    keeps running the recorded key). The running key's own time is never changed."""
    times = [o.time_ms for o in options]
    if choose_key(options, tie_band, rule) == runs:
        return times
    floor = math.nextafter(_band_edge(options[runs].cost, tie_band), math.inf)
    return [t if i == runs else max(t, floor) for i, t in enumerate(times)]
