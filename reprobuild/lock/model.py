"""What a lock holds: the model and settings, and per *target* (one kind of machine: see
:class:`~reprobuild.types.Environment`) the chosen tactic and recorded time of every layer
and the digests of the outputs the engine gave.

Design choices, after uv/Cargo lockfiles:
- Entries are identified by timing-cache key; layer names may repeat in real logs.
- Each entry keeps the time its key was recorded with, exactly: a builder chooses between
  the several keys of one layer by their cached times, so a rebuild writes them back; and
  of a layer with several keys, which one the engine runs (``runs``), checked on every
  locked build.
- One lock serves a fleet: each target's section is independent, and a build on a machine
  of another target adds a section without touching the others.
- ``canonicalize`` fixes the order, so equal content always serializes to equal bytes and
  one changed pin is a one-entry diff.

A ``Lock`` is the view of one target (the *active* one: ``environment``, ``layers``,
``outputs``) with the other targets carried along untouched in ``others``, so code that
works on one target's layers needs to know nothing of fleets.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reprobuild.lock.plan import PrecisionPlan
from reprobuild.types import BuildSettings, Environment

SCHEMA_VERSION = 2
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
    time_ms: float | None = None  # the key's recorded time (None: a schema-1 lock's entry)
    # A near-tie (docs/stability.md): the recording's tie band in ms and the tactics timed
    # within it of the best, the chosen one included; empty where one candidate stood clear.
    band_ms: float | None = None
    ties: list[int] = field(default_factory=list)
    # Of a layer with several keys (format combinations): whether the engine runs this key
    # (the builder's choice between them, docs/stability.md); None with one key or unknown.
    runs: bool | None = None

    @property
    def near_tie(self) -> bool:
        return len(self.ties) > 1

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


@dataclass(frozen=True)
class OutputDigest:
    """The bits one engine of a target gave: ``sha256`` over every output (name, dtype,
    shape, bytes; :func:`reprobuild.workflow.outputs.digest_outputs`) for ``inputs``
    (``seeded:N``, or ``sha256:<hex>`` of an inputs file)."""

    inputs: str
    sha256: str


@dataclass
class Target:
    """One target's section: its identity and advisory fields, layers and expected bits."""

    environment: Environment
    layers: list[LayerEntry] = field(default_factory=list)
    outputs: list[OutputDigest] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.environment.name


@dataclass
class Lock:
    model: ModelInfo
    environment: Environment
    settings: BuildSettings
    layers: list[LayerEntry] = field(default_factory=list)
    precision: PrecisionPlan | None = None
    schema: int = SCHEMA_VERSION  # as read; a lock is always written in SCHEMA_VERSION
    outputs: list[OutputDigest] = field(default_factory=list)
    others: list[Target] = field(default_factory=list)

    @property
    def target_name(self) -> str:
        return self.environment.name

    def active(self) -> Target:
        """The active target's section (sharing its lists with this view)."""
        return Target(self.environment, self.layers, self.outputs)

    def targets(self) -> list[Target]:
        """Every target, in name order (the order they are written in)."""
        return sorted([self.active(), *self.others], key=lambda t: t.name)

    def target_names(self) -> list[str]:
        return [t.name for t in self.targets()]

    def select(self, target: Target) -> Lock:
        """The view of the same lock with ``target`` (one of :meth:`targets`) active."""
        others = [t for t in self.targets() if t is not target and t.name != target.name]
        return Lock(
            self.model, target.environment, self.settings, target.layers, self.precision,
            self.schema, target.outputs, others,
        )  # fmt: skip

    def canonicalize(self) -> None:
        """Sort in place so that equal content always serializes to equal bytes."""
        for t in [self.active(), *self.others]:
            for e in t.layers:
                if not _strictly_increasing(e.candidates):
                    e.candidates = sorted(
                        set(e.candidates), key=lambda c: (c.tactic, c.kernel or "")
                    )
            t.layers.sort(key=lambda e: (e.layer, e.key))
            t.outputs.sort(key=lambda o: o.inputs)

    def by_key(self) -> dict[str, LayerEntry]:
        return {e.key: e for e in self.layers}

    def tactic_map(self) -> dict[str, int]:
        return {e.key: e.tactic for e in self.layers}


_E = TypeVar("_E", bound=Any)


def by_layer(entries: Iterable[_E]) -> dict[str, list[_E]]:
    """Entries grouped by layer name, in entry order: a layer with several timing-cache keys
    (format combinations) has several entries, one of which it runs."""
    out: dict[str, list[_E]] = {}
    for e in entries:
        out.setdefault(e.layer, []).append(e)
    return out


def _strictly_increasing(candidates: list[LockCandidate]) -> bool:
    """Already canonical: tactics strictly increasing means sorted and without repeats.
    (A lock read back is, and ``pin`` then skips 10,000 sorts of sets.)"""
    tactics = [c.tactic for c in candidates]
    return all(map(operator.lt, tactics, tactics[1:]))


NO_IDENTITY = (
    "no digest recorded: the lock's target has no identity (a schema-1 lock), so its bits "
    "would be claimed for every machine; build without --frozen to record this machine's "
    "target in its place"
)
"""Why verify never records a digest into a section without identity (a build records the
machine's target in its place first)."""
