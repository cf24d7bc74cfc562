"""The reference backend's timing knob: injected costs that force other tactics.

Tests and demos need builds that choose differently on purpose (to show that a lock holds
against them, or that bisect finds the layer that matters), and tests need builds whose
choices never depend on how busy the machine is. So an active knob does not perturb the
measured costs: it *replaces* them with costs computed from the layer's key and the kernel
names alone. Candidates still run (their outputs are real), but which one wins is a pure
function of the knob, the key and the names, on any machine and under any load.

The knob is a constructor parameter of ``ReferenceBackend``, never read from the
environment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from reprobuild.errors import UsageError
from reprobuild.tiebreak import robust_cost, varies

_SEED_STEP = 1000.0  # each rank costs this many times the previous one: far outside any band
_TIE_STEP = 0.004  # "tie": each rank costs 0.4 % more than the previous: inside any band
_TIE_JITTER = 0.03  # "tie": a later run costs up to 3 % more than the candidate's first


def seeded_ranks(
    seed: int, key: str, names: Sequence[str], prefer: str = "", *, reverse: bool = False
) -> list[int]:
    """Each candidate's rank (0 = fastest) in the order sha256(seed, key, name) gives (or
    its reverse), the kernels whose name contains ``prefer`` (when given) ranked before all
    others and the run-to-run and batch-dependent kernels (:func:`.tiebreak.varies`) after
    all others unless ``prefer`` names them.

    Why those last: they stand for kernels no lock can hold to its bits, so an injected
    choice takes one only when a test or demo asks for it (``prefer:atomic4``); every
    other kernel keeps the rank it had among the others before they were added."""
    digests = [hashlib.sha256(f"{seed}\0{key}\0{name}".encode()).digest() for name in names]
    late = [not (prefer and prefer in name) for name in names]
    last = [behind and varies(name) for behind, name in zip(late, names, strict=True)]
    sign = -1 if reverse else 1

    def order_key(i: int) -> tuple[bool, bool, int, int]:
        return late[i], last[i], sign * int.from_bytes(digests[i], "big"), i

    order = sorted(range(len(names)), key=order_key)
    ranks = [0] * len(names)
    for rank, i in enumerate(order):
        ranks[i] = rank
    return ranks


def key_factor(key: str) -> float:
    """A factor in [1, 2) drawn from sha256(key): it scales all of a key's injected costs,
    so the keys of one layer (one per format combination, :mod:`.formats`) get different
    best times. It ignores the seed: every knob ranks a layer's keys the same way (as if
    formats differed by more than the noise that reorders tactics), so a re-recording
    under another knob picks other tactics but runs the same keys, except where
    ``prefer`` names a kernel of another key. Only a cache whose times are changed
    (``update()``) or measured timings make a layer switch keys."""
    digest = hashlib.sha256(f"reprobuild-format-key\0{key}".encode()).digest()
    return 1.0 + int.from_bytes(digest[:8], "big") / 2.0**64


@dataclass(frozen=True)
class TimingKnob:
    """Injected costs in place of measured ones (tests and demos), for the early drops of
    :mod:`.autotune` as for the final pick.

    ``mode`` "" keeps the measured costs; "seed" costs each candidate ``f * 1000 ** rank``
    where ``rank`` orders the key's candidates by sha256(seed, key, kernel) and ``f`` in
    [1, 2) is the key's factor (:func:`key_factor`, the same for every knob): a fixed
    choice for each (seed, key); "reverse" is seed 0's order reversed (the run-to-run and
    batch-dependent kernels stay last under every mode, :func:`seeded_ranks`); "prefer" is seed 0's
    order with every kernel whose name contains ``prefer`` moved to the front (several
    preferred kernels keep seed 0's order among themselves) and every other kernel one rank
    further back, so a key with a preferred kernel also beats a key without one; "tie"
    makes every candidate a near-tie: ``f * (1 + 0.004 * rank)`` with ``rank`` from
    sha256(seed, key, kernel), and runs after the first up to 3 % slower (:meth:`runs`), so
    another seed changes which candidate is fastest but not which ones are near-ties.
    """

    mode: str = ""
    seed: int = 0
    prefer: str = ""

    @property
    def active(self) -> bool:
        return bool(self.mode)

    def describe(self) -> str:
        return {
            "reverse": "reverse",
            "seed": f"seed:{self.seed}",
            "prefer": f"prefer:{self.prefer}",
            "tie": f"tie:{self.seed}",
        }.get(self.mode, "")

    def apply(self, key: str, names: Sequence[str], costs: Sequence[float]) -> list[float]:
        """The costs the candidates are compared by: ``costs`` (measured) when inactive,
        else the injected ones, which ignore ``costs`` entirely."""
        if not self.mode:
            return list(costs)
        seed = self.seed if self.mode in ("seed", "tie") else 0
        ranks = seeded_ranks(seed, key, names, self.prefer, reverse=self.mode == "reverse")
        if self.mode == "tie":
            return [key_factor(key) * (1.0 + _TIE_STEP * r) for r in ranks]
        if self.mode == "prefer":
            late = [self.prefer not in name for name in names]
            ranks = [r + 1 if behind else r for r, behind in zip(ranks, late, strict=True)]
        factor = key_factor(key)
        return [factor * _SEED_STEP**r for r in ranks]

    def runs(
        self, key: str, names: Sequence[str], samples: Sequence[Sequence[float]]
    ) -> list[list[float]]:
        """Each candidate's runs as compared, for the tie band (:mod:`reprobuild.tiebreak`).

        Inactive: the measured runs. "tie": injected runs, the first at the candidate's
        cost and each later one up to 3 % above it by sha256(seed, key, kernel, run).
        Otherwise the measured runs scaled so that their cost (:func:`robust_cost`) is the
        injected cost: the
        spread stays measured, the costs are the knob's."""
        mins = [robust_cost(s) for s in samples]
        costs = self.apply(key, names, mins)
        if self.mode == "tie":
            out = []
            for name, cost, s in zip(names, costs, samples, strict=True):
                runs = [cost]
                for j in range(1, len(s)):
                    d = hashlib.sha256(f"{self.seed}\0{key}\0{name}\0{j}".encode()).digest()
                    runs.append(cost * (1.0 + _TIE_JITTER * int.from_bytes(d[:8], "big") / 2**64))
                out.append(runs)
            return out
        return [
            [r * (c / m) if m > 0 else c for r in s]
            for c, m, s in zip(costs, mins, samples, strict=True)
        ]


def parse_timing_knob(value: str) -> TimingKnob:
    """Parse the test knob's text (``reverse``, ``seed:N``, ``prefer:SUBSTRING``, ``tie:N``)."""
    raw = value.strip()
    if not raw:
        return TimingKnob()
    if raw == "reverse":
        return TimingKnob("reverse")
    if raw.startswith("seed:"):
        try:
            return TimingKnob("seed", seed=int(raw[5:]))
        except ValueError:
            pass
    if raw.startswith("tie:"):
        try:
            return TimingKnob("tie", seed=int(raw[4:]))
        except ValueError:
            pass
    if raw.startswith("prefer:") and raw[7:]:
        return TimingKnob("prefer", prefer=raw[7:])
    raise UsageError(
        f"timing knob {raw!r} is not understood: use 'reverse', 'seed:<int>', "
        "'prefer:<kernel-name substring>' or 'tie:<int>', or leave it empty"
    )
