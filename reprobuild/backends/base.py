"""The contract every backend follows.

It mirrors TensorRT's editable timing cache: a build consults a cache of
``key -> (tactic hash, time)``; keys the cache holds are not timed; ``update`` changes only
existing keys. The workflow (build --lock, verify, bisect) is written against this contract
only, so the reference backend exercises exactly the code paths a TensorRT build takes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from reprobuild.types import BuildSettings, Environment, TimingValue

__all__ = [
    "Backend",
    "BuildOutput",
    "BuildSettings",
    "Environment",
    "LogSink",
    "TimingCache",
    "TimingValue",
]

LogSink = Callable[[str], None]
"""Receives each verbose builder log line (without trailing newline)."""


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
    key_rule: bool
    """Whether the builder chooses between a layer's keys by the tie rule on their cached
    times (:func:`reprobuild.tiebreak.choose_key`: the reference builder), so a locked build
    can write back times that make it run the recorded key; False: the lowest cached time
    (TensorRT), recorded and checked only."""

    def environment(self) -> Environment:
        """The fingerprint of this machine for this backend (GPU, versions)."""
        ...

    def for_target(self, target: Environment) -> Backend:
        """This backend building the timing-cache keys a lock target was recorded with:
        itself, unless the backend's own key scheme changed since that target was recorded
        (TensorRT's keys are TensorRT's, so its backend always returns itself)."""
        ...

    def check_settings(self, settings: BuildSettings) -> None:
        """Raise ``UsageError`` for a setting this backend cannot build or lock with.

        The backend says what it accepts; the workflow asks before any work starts.
        """
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
        *,
        pinned: bool = False,
    ) -> BuildOutput:
        """Build with the editable timing cache ``cache`` (mutated: new keys are added).

        Emits TensorRT-format verbose autotuning lines to ``log``. A pinned tactic that the
        layer cannot use raises ``BuildError`` naming the layer. ``pinned`` says every key
        should come from ``cache`` (TensorRT then disables its compilation cache and makes a
        miss an error where it can); the caller's cache-map check stays the authority.
        """
        ...

    def run(self, engine: bytes, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Run a built engine on numpy inputs; deterministic for the same engine and inputs."""
        ...
