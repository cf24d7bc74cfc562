"""The reference backend's timing knob: perturbed costs that force other tactics.

Tests and demos need builds that choose differently on purpose (to show that a lock holds
against them, or that bisect finds the layer that matters). The knob is a constructor
parameter of ``ReferenceBackend``, never read from the environment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from reprobuild.errors import UsageError

_SEED_STEP = 1000.0  # seed mode: each rank is this many times slower than the previous one


@dataclass(frozen=True)
class TimingKnob:
    """How measured costs are perturbed before candidates are compared (tests only): for the
    early drops of :mod:`.autotune` as for the final pick.

    ``mode`` "" leaves timings alone; "reverse" reflects them (the slowest wins);
    "seed" multiplies each by ``1000 ** rank`` where ``rank`` orders the layer's candidates
    by sha256(seed, key, kernel): a deterministic choice for each (seed, key);
    "prefer" divides the cost of kernels whose name contains ``prefer`` by 1e6.
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
        if self.mode == "reverse":
            hi, lo = max(costs), min(costs)
            return [hi + lo - c for c in costs]
        if self.mode == "seed":
            digests = [
                hashlib.sha256(f"{self.seed}\0{key}\0{name}".encode()).digest() for name in names
            ]
            ranks = {i: r for r, i in enumerate(sorted(range(len(names)), key=digests.__getitem__))}
            return [c * _SEED_STEP ** ranks[i] for i, c in enumerate(costs)]
        if self.mode == "prefer":
            return [c * 1e-6 if self.prefer in n else c for n, c in zip(names, costs, strict=True)]
        return list(costs)


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
