"""The contract every backend follows.

It mirrors TensorRT's editable timing cache: a build consults a cache of
``key -> (tactic hash, time)``; keys the cache holds are not timed; ``update`` changes only
existing keys. The workflow (build --lock, verify, bisect) is written against this contract
only, so the reference backend exercises exactly the code paths a TensorRT build takes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

LogSink = Callable[[str], None]
"""Receives each verbose builder log line (without trailing newline)."""


@dataclass(frozen=True)
class TimingValue:
    """One timing-cache entry: the chosen tactic (64-bit hash) and its measured time."""

    tactic_hash: int
    time_ms: float


@runtime_checkable
class TimingCache(Protocol):
    """TensorRT's ``ITimingCache`` semantics, with snake_case names and ``str`` keys.

    Keys are ``"0x" + 32 lowercase hex``; tactic hashes are ints (compare as integers).
    """

    def query_keys(self) -> list[str]: ...

    def query(self, key: str) -> TimingValue | None: ...

    def update(self, key: str, tactic_hash: int, time_ms: float) -> bool:
        """Change an existing entry; False when the key is absent. NaN time deletes it."""
        ...

    def combine(self, other: TimingCache, ignore_mismatch: bool = False) -> bool: ...

    def reset(self) -> None: ...

    def serialize(self) -> bytes: ...

    def tactic_map(self) -> dict[str, int]:
        """``{key: tactic_hash}`` for every entry: what the drift check compares."""
        ...


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
        """Short stable id used to key timing caches under ``caches/``."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class BuildOutput:
    """What one build produced.

    ``layer_info`` is engine-inspector JSON text (TensorRT 10.x/11.x shape) so the same
    layer-information parser reads both backends.
    """

    engine: bytes
    layer_info: str
    log_lines: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    """Both backends implement this; keep it small."""

    name: str

    def environment(self) -> Environment:
        """The fingerprint of this machine for this backend (GPU, versions)."""
        ...

    def create_timing_cache(self, data: bytes = b"") -> TimingCache:
        """An empty cache, or one deserialized from ``data``.

        Raises ``CacheError`` when ``data`` is corrupted or from another environment.
        """
        ...

    def build(
        self,
        model_path: str,
        settings: BuildSettings,
        cache: TimingCache,
        log: LogSink,
    ) -> BuildOutput:
        """Build with the editable timing cache ``cache`` (mutated: new keys are added).

        Emits TensorRT-format verbose autotuning lines to ``log``. A pinned tactic that the
        layer cannot use raises ``BuildError`` naming the layer.
        """
        ...

    def run(self, engine: bytes, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Run a built engine on numpy inputs; deterministic for the same engine and inputs."""
        ...
