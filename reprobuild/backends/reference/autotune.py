"""How the reference builder times one layer's candidates: fewer kernel runs, a timed choice.

The policy (:class:`AutotunePolicy`, written to the build report under ``autotune``):

- **Runs.** Each candidate runs at most ``reps`` times (``avg_timing_iterations``, default
  3); its cost is the fastest of its runs, in ms, leaving out a run impossibly far below
  the others (:func:`reprobuild.tiebreak.robust_cost`: one reading cannot decide). The
  fastest sane run is the one least disturbed by anything else on the machine.
- **Warm-up counted.** A candidate's first run is also its first timed sample: there is no
  untimed warm-up run. A cold first run only raises that one sample, which the minimum
  discards as soon as a warm run is faster.
- **Rounds.** Every candidate still in the race runs once per round, in declaration order,
  so that a burst of load from a neighbour falls on all candidates alike instead of on all
  runs of one of them.
- **Early drop.** After round ``drop_after`` and after every later round, a candidate whose
  cost so far is more than ``drop_factor`` times the best cost so far runs no more. It
  keeps its cost, stays in the timing table, the log and the lock's candidate list, and is
  listed as dropped in the build report. The best is never dropped (its ratio is 1), and a
  dropped candidate wins later only if a run of the best is left out as impossible after
  the drop (its cost frozen, the best's risen): its output is then computed once more.
- **Clock.** ``wall`` (elapsed time, with ``--tie-band 0``) or ``cpu`` (this process's CPU
  time, with a tie band): a neighbour that takes the core away mid-run adds its whole
  time slice to the elapsed time (a 2 ms kernel timed at 2 or 12 ms on a loaded machine)
  but nothing to the CPU time, and the tie band needs costs that hold still.
- **Settling** (with a tie band only). After the rounds, while the tie rule is unsure of
  a candidate's side of the band edge (:func:`reprobuild.tiebreak.unsure`: the rule's
  choice or a candidate before it in the rule's order lies near the edge), those
  candidates and the best run one more round together, up to ``settle_rounds`` rounds:
  the fastest sane run over more runs falls to the kernel's undisturbed cost, and running them
  together lets a burst of load fall on all of them.
- **Choice.** The cheapest; with a tie band, the tie rule's choice among the costs
  (:func:`reprobuild.tiebreak.decide`, on the same costs the workflow reads from the
  report, so it agrees and has nothing to write back), and a candidate ahead of the
  rule's current choice in the rule's order (:func:`reprobuild.tiebreak.ahead`: one the
  rule would rather keep) is dropped only after ``GUARDED_RUNS`` runs: one cold first run
  (a 0.14 ms kernel's once took 41 ms of CPU time) must not drop the rule's preference in
  one recording and not in another. Candidates behind the choice drop as before: they
  can only move the best, and a candidate twice the best does not.
- **Shared operands.** A Conv's FP32 copies, padding and im2col matrix are made once per
  layer (:class:`.kernels.ConvOperands`); the time they took is added to the cost of each
  candidate that uses them (the im2col time only to im2col kernels), so ``direct`` and the
  im2col kernels are still compared on what a run of each costs in the engine.

The test knob (:mod:`.knob`) replaces the measured costs by injected ones before they are
compared, for the drops as for the final choice, so a knob that forces a tactic also drops
the others early. Should a ``perceive`` ever rank a dropped candidate first, its output is
computed once more.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from reprobuild.tiebreak import OUTLIER_BELOW, robust_cost

DEFAULT_TIMING_REPS = 3
DROP_AFTER_RUNS = 1
DROP_FACTOR = 2.0
GUARDED_RUNS = 2  # runs before a candidate ahead of the tie rule's choice can be dropped

CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
"""How a run is timed, in seconds. ``wall``: elapsed time, which also counts every moment
the scheduler gave the core to another process. ``cpu``: the CPU time this process spent,
which a neighbour cannot inflate by taking the core away."""


@dataclass(frozen=True)
class AutotunePolicy:
    """How many runs a candidate gets and when a clearly slower one stops running."""

    reps: int = DEFAULT_TIMING_REPS
    drop_after: int = DROP_AFTER_RUNS
    drop_factor: float = DROP_FACTOR
    clock: str = "wall"  # a key of CLOCKS
    settle_rounds: int = 0  # at most this many extra rounds for unsure candidates
    guard_ahead: bool = False  # a tie band: candidates ahead of the rule's choice drop late

    def to_json(self) -> dict[str, Any]:
        return {
            "max_runs_per_candidate": self.reps,
            "warm_up": "counted: a candidate's first run is its first timed run",
            "cost": (
                "fastest of the candidate's runs, in ms, leaving out runs more than "
                f"{OUTLIER_BELOW:g}x below its median run"
            ),
            "clock": self.clock,
            "settle_rounds": self.settle_rounds,
            "guard_ahead": self.guard_ahead,
            "order": "rounds: each remaining candidate runs once per round",
            "drop_after_runs": self.drop_after,
            "drop_factor": self.drop_factor,
            "drop_rule": (
                (
                    "a candidate ahead of the tie rule's choice in the rule's order only "
                    f"after {max(self.drop_after, GUARDED_RUNS)} runs; otherwise "
                    if self.guard_ahead
                    else ""
                )
                + f"after {self.drop_after} run(s), a candidate whose cost is more than "
                f"{self.drop_factor:g}x the best cost so far runs no more (the best never)"
            ),
        }


@dataclass
class Tuning:
    """One layer's timing: costs as compared (knob applied), runs, dropped candidates."""

    costs: list[float]
    runs: list[int]
    dropped: list[int]
    best: int
    output: Any
    extra_runs: int = 0  # a dropped winner computed once more
    samples: list[list[float]] = field(default_factory=list)  # every timed run, raw ms
    settle_runs: int = 0  # runs of the settling rounds (included in ``runs``)

    @property
    def kernel_runs(self) -> int:
        return sum(self.runs) + self.extra_runs


Measure = Callable[[int], tuple[float, Any]]
"""Run candidate ``i`` once: (its cost in ms for this run, its output)."""

Settle = Callable[[list[float]], list[int]]
"""The candidates (indices) to run once more, given the costs as compared; [] when none."""


def tune(
    count: int,
    measure: Measure,
    policy: AutotunePolicy,
    perceive: Callable[[list[float]], list[float]] = list,
    settle: Settle | None = None,
    pick: Callable[[list[float]], int] | None = None,
    ahead: Settle | None = None,
) -> Tuning:
    """Time ``count`` candidates by ``policy``; ``perceive`` maps raw costs to compared ones,
    ``settle`` names the candidates still in doubt after the rounds (the module docstring),
    ``pick`` chooses from the final costs (default: the cheapest, the lowest index on a tie),
    ``ahead`` names the candidates not to drop before :data:`GUARDED_RUNS` runs."""
    if count < 1:
        raise ValueError("a layer needs at least one candidate")
    best_raw = [math.inf] * count
    samples: list[list[float]] = [[] for _ in range(count)]
    runs = [0] * count
    outputs: list[Any] = [None] * count
    racing = list(range(count))
    dropped: list[int] = []
    for round_no in range(1, policy.reps + 1):
        for i in racing:
            ms, outputs[i] = measure(i)
            samples[i].append(ms)
            best_raw[i] = robust_cost(samples[i])
            runs[i] += 1
        if round_no >= policy.drop_after and round_no < policy.reps:
            costs = perceive(best_raw)
            fastest = min(costs)
            guarded = set(ahead(costs)) if ahead is not None else set()
            slow = [
                i
                for i in racing
                if costs[i] > policy.drop_factor * fastest
                and (i not in guarded or runs[i] >= GUARDED_RUNS)
            ]
            for i in slow:
                outputs[i] = None  # never needed again unless it wins
            dropped += slow
            racing = [i for i in racing if i not in slow]
    settled = 0
    for _ in range(policy.settle_rounds if settle is not None else 0):
        again = [i for i in settle(perceive(best_raw)) if i in racing]
        if not again:
            break
        for i in again:
            ms, outputs[i] = measure(i)
            samples[i].append(ms)
            best_raw[i] = robust_cost(samples[i])
            runs[i] += 1
            settled += 1
    costs = perceive(best_raw)
    best = pick(costs) if pick is not None else min(range(count), key=lambda i: (costs[i], i))
    extra = 0
    if outputs[best] is None:
        _ms, outputs[best] = measure(best)
        extra = 1
    return Tuning(costs, runs, sorted(dropped), best, outputs[best], extra, samples, settled)


@dataclass
class AutotuneStats:
    """What the build report says about autotuning: the policy and what it saved."""

    policy: AutotunePolicy
    kernel_runs: int = 0  # every run of an autotuned layer's kernel, timed or not
    timed_runs: int = 0
    settle_runs: int = 0
    candidates: int = 0
    layers: list[dict[str, Any]] = field(default_factory=list)

    def add_timed(
        self,
        layer: str,
        key: str,
        names: Sequence[str],
        tuning: Tuning,
        times: Sequence[Sequence[float]] = (),
    ) -> None:
        """``times``: each candidate's runs as compared (the knob applied), which the
        workflow's tie band is measured from (:mod:`reprobuild.tiebreak`)."""
        self.kernel_runs += tuning.kernel_runs
        self.timed_runs += sum(tuning.runs)
        self.settle_runs += tuning.settle_runs
        self.candidates += len(names)
        self.layers.append(
            {
                "layer": layer,
                "key": key,
                "candidates": [
                    {
                        "kernel": name,
                        "runs": runs,
                        "dropped": i in tuning.dropped,
                        "times_ms": list(times[i]) if times else [],
                    }
                    for i, (name, runs) in enumerate(zip(names, tuning.runs, strict=True))
                ],
            }
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy.to_json(),
            "kernel_runs": self.kernel_runs,
            "timed_runs": self.timed_runs,
            "settle_runs": self.settle_runs,
            "timed_candidates": self.candidates,
            "dropped_candidates": sum(
                c["dropped"] for entry in self.layers for c in entry["candidates"]
            ),
            "layers": self.layers,
        }
