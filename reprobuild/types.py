"""Value types shared by every layer: what a build is tied to and what it was asked for.

They import nothing from reprobuild, so the lock, the backends and the workflow can all
use them without importing each other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class TimingValue:
    """One timing-cache entry: the chosen tactic (64-bit hash) and its measured time."""

    tactic_hash: int
    time_ms: float


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

    def to_dict(self) -> dict[str, Any]:
        """A JSON/YAML-friendly dict with stable key order (used by the lock)."""
        d = asdict(self)
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
        return cls(**d)

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Environment:
    """What a lock and a timing cache are tied to: the same tactics exist only here."""

    backend: str
    tensorrt_version: str | None = None
    gpu: str | None = None
    compute_capability: str | None = None
    cuda_version: str | None = None
    driver_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def fingerprint(self) -> str:
        """Short stable id of every field (what a lock and an engine are tied to)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    CACHE_FIELDS = ("backend", "tensorrt_version", "gpu", "compute_capability", "cuda_version")
    """What makes timing caches differ: keys and tactics depend on the TensorRT version
    (build included), the GPU model (name and compute capability, not which card of that
    model: NVIDIA replays caches across same-SKU GPUs) and the CUDA runtime that ships the
    kernel libraries. The driver is left out: its update changes neither keys nor tactics."""

    def cache_fingerprint(self) -> str:
        """Short stable id used to name timing caches under ``caches/``; it changes only
        when a field of :attr:`CACHE_FIELDS` does."""
        fields = {name: getattr(self, name) for name in self.CACHE_FIELDS}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    def differences(self, here: Environment | None) -> list[str]:
        """``field: lock X, here Y`` for every field that differs from ``here`` (the one
        environment comparison: locks, caches and export-cache all ask it)."""
        if here is None:
            return [f"backend {self.backend!r} is not available on this machine"]
        mine, theirs = self.to_dict(), here.to_dict()
        return [
            f"{name}: lock {mine[name]!r}, here {theirs.get(name)!r}"
            for name in mine
            if mine[name] != theirs.get(name)
        ]
