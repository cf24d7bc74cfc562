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

_SEED_STEP = 1000.0  # each rank costs this many times the previous one: far outside any band


def seeded_ranks(seed: int, key: str, names: Sequence[str], prefer: str = "") -> list[int]:
    """Each candidate's rank (0 = fastest) in the order sha256(seed, key, name) gives, the
    kernels whose name contains ``prefer`` (when given) ranked before all others."""
    digests = [hashlib.sha256(f"{seed}\0{key}\0{name}".encode()).digest() for name in names]
    late = [not (prefer and prefer in name) for name in names]
    order = sorted(range(len(names)), key=lambda i: (late[i], digests[i], i))
    ranks = [0] * len(names)
    for rank, i in enumerate(order):
        ranks[i] = rank
    return ranks


@dataclass(frozen=True)
class TimingKnob:
    """Injected costs in place of measured ones (tests and demos), for the early drops of
    :mod:`.autotune` as for the final pick.

    ``mode`` "" keeps the measured costs; "seed" costs each candidate ``1000 ** rank`` where
    ``rank`` orders the layer's candidates by sha256(seed, key, kernel): a fixed choice for
    each (seed, key); "reverse" is seed 0's order reversed (the candidate seed 0 ranks last
    wins); "prefer" is seed 0's order with every kernel whose name contains ``prefer``
    moved to the front (several preferred kernels keep seed 0's order among themselves).
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
        }.get(self.mode, "")

    def apply(self, key: str, names: Sequence[str], costs: Sequence[float]) -> list[float]:
        """The costs the candidates are compared by: ``costs`` (measured) when inactive,
        else the injected ones, which ignore ``costs`` entirely."""
        if not self.mode:
            return list(costs)
        ranks = seeded_ranks(self.seed if self.mode == "seed" else 0, key, names, self.prefer)
        if self.mode == "reverse":
            ranks = [len(names) - 1 - r for r in ranks]
        return [_SEED_STEP**r for r in ranks]


def parse_timing_knob(value: str) -> TimingKnob:
    """Parse the test knob's text (``reverse``, ``seed:N``, ``prefer:SUBSTRING``)."""
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
    if raw.startswith("prefer:") and raw[7:]:
        return TimingKnob("prefer", prefer=raw[7:])
    raise UsageError(
        f"timing knob {raw!r} is not understood: use 'reverse', 'seed:<int>' or "
        "'prefer:<kernel-name substring>', or leave it empty"
    )
