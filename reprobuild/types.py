"""Value types shared by every layer: what a build is tied to and what it was asked for.

They import nothing from reprobuild, so the lock, the backends and the workflow can all
use them without importing each other.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from typing import Any, TypeVar

_C = TypeVar("_C")  # a candidate: anything with ``kernel`` and ``tactic``


@dataclass(frozen=True)
class TimingValue:
    """One timing-cache entry: the chosen tactic (64-bit hash) and its measured time."""

    tactic_hash: int
    time_ms: float


DEFAULT_TIE_BAND = 0.4
"""A recording's tie band, as a fraction of a key's best time: candidates timed within it
of the best are near-ties, chosen between by :data:`DEFAULT_TIE_RULE` (``docs/stability.md``
says why it is this wide: under load, a kernel's cost relative to the best moves by up
to 30 % between recordings, and the rule prefers a kernel that is usually the fastest)."""

DEFAULT_TIE_RULE = "steady-then-splits"
LOG_TIE_BAND = 0.05
"""The default band where a builder reports one averaged time per candidate and no spread
(TensorRT's verbose log): :data:`DEFAULT_TIE_BAND` was measured on the reference backend's
CPU-clock times and kernel names that carry a split count; TensorRT's names carry none, so
the rule would fall back to the lowest hash within 40 % of the best. An explicit
``--tie-band`` other than the default is used as given."""
MAX_TIE_RECORDS = 50
"""The most recording builds ``build --records`` pools (each one times every candidate)."""
TIE_RULES = (DEFAULT_TIE_RULE, "steady-then-hash")
TIE_FIELDS = ("tie_band", "tie_rule", "tie_records")
"""Settings that decide between timed candidates, not which ones exist: never in a
fingerprint (keys and cache names), and written only where they are not the defaults, so
a lock that does not name them (every lock older than them) reads as the default policy."""


RULE_FIELDS = ("deny",)
"""Settings that rule candidates out of the choice (``reprobuild deny``), not out of the
builder's timing (TensorRT times every tactic before the rule's choice is written back):
never in a fingerprint, so adding or removing a rule keeps the lock's keys and caches, and
written only when there is a rule, so a lock without rules keeps its bytes."""


@dataclass(frozen=True, order=True)
class KernelRule:
    """``kernel=PATTERN layer=PATTERN``: no layer whose name ``layer`` matches may run a
    candidate whose kernel name (or tactic hash as ``0x...`` text) ``kernel`` matches.

    Patterns are shell-style globs (:func:`fnmatch.fnmatchcase`: ``*``, ``?``, ``[seq]``,
    ``[!seq]``), matched against the whole name and case-sensitively, as kernel names are
    compared everywhere else; ``layer`` ``*`` (the default) is every layer."""

    kernel: str
    layer: str = "*"

    def denies(self, layer: str, kernel: str | None, tactic: int) -> bool:
        if not fnmatchcase(layer, self.layer):
            return False
        return (kernel is not None and fnmatchcase(kernel, self.kernel)) or fnmatchcase(
            f"0x{tactic:x}", self.kernel
        )

    @classmethod
    def exact(cls, kernel: str, layer: str = "*") -> KernelRule:
        """The rule matching exactly these names (``*``, ``?`` and ``[`` in them escaped)."""
        return cls(_glob_literal(kernel), layer if layer == "*" else _glob_literal(layer))

    def describe(self) -> str:
        """The rule as ``deny`` and ``undeny`` take it."""
        return f"kernel={self.kernel} layer={self.layer}"

    def to_dict(self) -> dict[str, str]:
        return {"kernel": self.kernel, "layer": self.layer}


def _glob_literal(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


@dataclass(frozen=True)
class BuildSettings:
    """Every builder setting that changes which kernels are candidates.

    These go into the lock (by name, never by TensorRT enum integer) and into the cache
    fingerprint: a build with different settings times different candidates.
    """

    optimization_level: int = 3
    workspace: int | None = None  # bytes; None = backend default
    tactic_sources: tuple[str, ...] | None = None  # TensorRT TacticSource names
    tf32: bool = True
    max_num_tactics: int | None = None
    avg_timing_iterations: int | None = None
    tiling_optimization_level: str | None = None
    max_aux_streams: int | None = None
    hardware_compatibility_level: str | None = None
    # name -> (min, opt, max) shapes; a static shape has min == opt == max
    input_shapes: tuple[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = ()
    tie_band: float = DEFAULT_TIE_BAND  # 0: the builder's choice, the fastest as measured
    tie_rule: str = DEFAULT_TIE_RULE
    tie_records: int = 1  # recording builds whose times the rule pools (build --records N)
    deny: tuple[KernelRule, ...] = ()  # sorted; :data:`RULE_FIELDS`
    # TensorRT's BuilderFlag.DISTRIBUTIVE_INDEPENDENCE: only kernels whose result for one
    # sample does not depend on the rest of the batch are candidates (written only when on)
    distributive_independence: bool = False

    def denying(self, layer: str, kernel: str | None, tactic: int) -> KernelRule | None:
        """The first rule that denies this candidate of ``layer``, if any."""
        return next((r for r in self.deny if r.denies(layer, kernel, tactic)), None)

    def allowed(self, layer: str, candidates: Iterable[_C]) -> list[_C]:
        """The candidates of ``layer`` (anything with ``kernel`` and ``tactic``) that no
        rule denies, in their order."""
        return [c for c in candidates if self.denying(layer, c.kernel, c.tactic) is None]

    def to_dict(self) -> dict[str, Any]:
        """A JSON/YAML-friendly dict with stable key order (used by the lock); the tie
        settings only where they differ from the defaults (:data:`TIE_FIELDS`)."""
        d = asdict(self)
        if self.tie_band == DEFAULT_TIE_BAND:
            del d["tie_band"]
        if self.tie_rule == DEFAULT_TIE_RULE:
            del d["tie_rule"]
        if self.tie_records == 1:
            del d["tie_records"]
        if self.deny:
            d["deny"] = [r.to_dict() for r in self.deny]
        else:
            del d["deny"]
        if not self.distributive_independence:
            del d["distributive_independence"]
        d["tactic_sources"] = list(self.tactic_sources) if self.tactic_sources is not None else None
        d["input_shapes"] = {
            name: {"min": list(mn), "opt": list(opt), "max": list(mx)}
            for name, mn, opt, mx in self.input_shapes
        }
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BuildSettings:
        """Inverse of :meth:`to_dict`; validation of types is the lockfile loader's job."""
        d = dict(data)
        if d.get("tactic_sources") is not None:
            d["tactic_sources"] = tuple(d["tactic_sources"])
        shapes = d.get("input_shapes") or {}
        d["input_shapes"] = tuple(
            (name, tuple(v["min"]), tuple(v["opt"]), tuple(v["max"]))
            for name, v in sorted(shapes.items())
        )
        d["deny"] = tuple(sorted(KernelRule(**r) for r in d.get("deny") or ()))
        return cls(**d)

    def fingerprint(self) -> str:
        """Hashes what shapes the candidates; the tie settings and the rules only decide
        between them."""
        d = {k: v for k, v in self.to_dict().items() if k not in TIE_FIELDS + RULE_FIELDS}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


Fields = tuple[tuple[str, str], ...]

LABEL_FIELDS: dict[str, tuple[str, ...]] = {
    "reference": ("blas_kernels", "blas_threads"),
    "tensorrt": ("tensorrt_version", "compute_capability"),
}
"""The identity fields a target's name shows, per backend (the rest is in its hash)."""

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9.]+")


@dataclass(frozen=True)
class Environment:
    """What a lock target, a timing cache and an engine are tied to.

    ``identity`` holds what decides which tactics exist and what bits they give (for the
    reference backend the BLAS library, its kernel family and thread count, numpy's SIMD
    dispatch; for TensorRT its version, the GPU model and the CUDA major version): a
    difference there is another target. ``advisory`` holds what is recorded and shown but
    never refused on (the CPU's marketing name, the driver, which card): a difference is a
    warning. Each backend documents why each field is where it is (``docs/fleets.md``).
    """

    backend: str
    identity: Fields = ()
    advisory: Fields = ()

    @classmethod
    def make(
        cls, backend: str, identity: Mapping[str, Any], advisory: Mapping[str, Any] | None = None
    ) -> Environment:
        """From mappings; values become text, None values are left out (unknown)."""
        return cls(backend, _fields(identity), _fields(advisory or {}))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Environment:
        """Inverse of :meth:`to_dict`; a flat schema-1 mapping goes through
        :func:`legacy_environment`. Types are the caller's to check (``TypeError``)."""
        if "identity" not in data and "advisory" not in data:
            unknown = set(data) - {"backend", *LEGACY_ENV_FIELDS}
            if unknown or not isinstance(data.get("backend"), str):
                raise TypeError(f"unknown environment fields {sorted(unknown)}")
            return legacy_environment(data)
        if set(data) - {"backend", "identity", "advisory"} or not isinstance(data["backend"], str):
            raise TypeError("an environment holds backend, identity and advisory")
        return cls.make(
            data["backend"], dict(data.get("identity") or {}), dict(data.get("advisory") or {})
        )

    def identity_dict(self) -> dict[str, str]:
        return dict(self.identity)

    def advisory_dict(self) -> dict[str, str]:
        return dict(self.advisory)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "identity": self.identity_dict(),
            "advisory": self.advisory_dict(),
        }

    def fingerprint(self) -> str:
        """Short stable id of the backend and identity: names timing caches and ties
        engines and caches to a target; advisory fields never change it."""
        data = {"backend": self.backend, "identity": self.identity_dict()}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def name(self) -> str:
        """The target's name: a readable label and the fingerprint's first six digits."""
        values = [self.identity_dict().get(f) for f in LABEL_FIELDS.get(self.backend, ())]
        label = "-".join(_NAME_UNSAFE.sub("_", v) for v in values if v)
        head = f"{self.backend}-{label}" if label else self.backend
        return f"{head}-{self.fingerprint()[:6]}"

    def matches(self, here: Environment) -> bool:
        """Same backend and no identity difference (see :meth:`differences`)."""
        return self.backend == here.backend and not self.differences(here)

    def differences(self, here: Environment | None) -> list[str]:
        """``field: lock X, here Y`` for every identity field that differs from ``here``
        (the one environment comparison: locks, caches and export-cache all ask it). A
        field this side does not record (a lock from before the field existed) is not a
        difference: :meth:`unrecorded` names those."""
        if here is None:
            return [f"backend {self.backend!r} is not available on this machine"]
        if here.backend != self.backend:
            return [f"backend: lock {self.backend!r}, here {here.backend!r}"]
        theirs = here.identity_dict()
        return [
            f"{name}: lock {value!r}, here {theirs.get(name)!r}"
            for name, value in self.identity
            if theirs.get(name) != value
        ]

    def unrecorded(self, here: Environment) -> list[str]:
        """Identity fields ``here`` has and this side does not record."""
        mine = self.identity_dict()
        return [name for name, _ in here.identity if name not in mine]

    def advisory_differences(self, here: Environment) -> list[str]:
        """``field: lock X, here Y`` for every advisory field both sides record."""
        theirs = here.advisory_dict()
        return [
            f"{name}: lock {value!r}, here {theirs[name]!r}"
            for name, value in self.advisory
            if name in theirs and theirs[name] != value
        ]


def _fields(values: Mapping[str, Any]) -> Fields:
    return tuple((k, str(v)) for k, v in values.items() if v is not None)


LEGACY_ENV_FIELDS = (
    "tensorrt_version", "gpu", "compute_capability", "cuda_version", "driver_version"
)  # fmt: skip
"""The flat environment of schema-1 locks, engines and caches."""


def legacy_environment(data: Mapping[str, Any]) -> Environment:
    """A schema-1 environment (one flat mapping) in today's terms. TensorRT's version, GPU
    name and compute capability were identity then as now; the CUDA runtime version (the
    first libcudart found), the driver and, for the reference backend, the CPU name and the
    numerics versions are advisory. Identity fields it lacks are unrecorded, so such a
    target matches any machine on the fields it has (:meth:`Environment.differences`)."""
    backend = str(data.get("backend"))
    if backend == "tensorrt":
        identity = {k: data.get(k) for k in ("tensorrt_version", "gpu", "compute_capability")}
        advisory = {
            "cuda_runtime": data.get("cuda_version"),
            "driver_version": data.get("driver_version"),
        }
    else:
        identity = {}
        advisory = {"cpu": data.get("gpu"), "numerics": data.get("driver_version")}
    return Environment.make(backend, identity, advisory)
