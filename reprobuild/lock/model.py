"""What a lock holds: the model, the environment and settings it is valid for, and the
chosen tactic of every layer.

Design choices, after uv/Cargo lockfiles:
- Entries are identified by timing-cache key; layer names may repeat in real logs.
- Timings change on every build, so they stay out of the lock (see the build report).
- ``canonicalize`` fixes the order, so equal content always serializes to equal bytes and
  one changed pin is a one-entry diff.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

from reprobuild.lock.plan import PrecisionPlan
from reprobuild.types import BuildSettings, Environment

SCHEMA_VERSION = 1
DEFAULT_LOCK = "tactics.lock"


@dataclass(slots=True)
class LockCandidate:
    """A tactic the builder timed for a layer: what ``reprobuild pin`` may choose.

    A value (equal and hashed by its fields, kept in sets) that nothing changes once made.
    Not declared frozen: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, which doubles the cost of the 60,000 candidates a
    10,000-layer lock holds (``reprobuild show`` reads them all)."""

    tactic: int
    kernel: str | None = None

    def __hash__(self) -> int:
        return hash((self.tactic, self.kernel))


@dataclass
class LayerEntry:
    """One timing-cache entry; mutable because ``pin`` edits it in place before saving."""

    key: str
    layer: str
    tactic: int
    kernel: str | None = None
    pinned: bool = False
    candidates: list[LockCandidate] = field(default_factory=list)

    def candidate(self, tactic: int) -> LockCandidate | None:
        return next((c for c in self.candidates if c.tactic == tactic), None)


@dataclass(frozen=True)
class ExternalFile:
    """An ONNX external-data file: its hash is part of the model's identity."""

    path: str
    sha256: str


@dataclass
class ModelInfo:
    path: str  # relative to the lock
    sha256: str
    external_data: list[ExternalFile] = field(default_factory=list)


@dataclass
class Lock:
    model: ModelInfo
    environment: Environment
    settings: BuildSettings
    layers: list[LayerEntry] = field(default_factory=list)
    precision: PrecisionPlan | None = None
    schema: int = SCHEMA_VERSION

    def canonicalize(self) -> None:
        """Sort in place so that equal content always serializes to equal bytes."""
        for e in self.layers:
            if not _strictly_increasing(e.candidates):
                e.candidates = sorted(set(e.candidates), key=lambda c: (c.tactic, c.kernel or ""))
        self.layers.sort(key=lambda e: (e.layer, e.key))

    def by_key(self) -> dict[str, LayerEntry]:
        return {e.key: e for e in self.layers}

    def tactic_map(self) -> dict[str, int]:
        return {e.key: e.tactic for e in self.layers}


def _strictly_increasing(candidates: list[LockCandidate]) -> bool:
    """Already canonical: tactics strictly increasing means sorted and without repeats.
    (A lock read back is, and ``pin`` then skips 10,000 sorts of sets.)"""
    tactics = [c.tactic for c in candidates]
    return all(map(operator.lt, tactics, tactics[1:]))
