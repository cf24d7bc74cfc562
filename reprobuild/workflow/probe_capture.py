"""Evidence for ``doctor --probe``: a backend wrapper that keeps what each build saw.

Every build through :class:`CapturingBackend` keeps its raw verbose log, the cache's
``{key: tactic}`` map and timing values before and after, the inspector JSON and its wall
time, so the probe's bundle holds exactly what TensorRT did, not reprobuild's reading of it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reprobuild.backends.base import Backend, BuildOutput, LogSink, TimingCache
from reprobuild.types import BuildSettings, Environment


@dataclass
class BuildCapture:
    """One build: what it was, its log lines and the cache around it."""

    label: str
    pinned: bool
    lines: list[str] = field(default_factory=list)
    before: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    times_after: dict[str, float | None] = field(default_factory=dict)
    layer_info: str = ""
    seconds: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def cache_json(self, which: str) -> dict[str, Any]:
        tactics = self.before if which == "before" else self.after
        return {k: f"0x{v:x}" for k, v in sorted(tactics.items())}


class CapturingBackend:
    """Delegates to a real backend and records every build (see the module docstring)."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.builds: list[BuildCapture] = []
        self.label = "build"

    def __getattr__(self, name: str) -> Any:  # run paths, strict-attach checks, ...
        return getattr(self.inner, name)

    def environment(self) -> Environment:
        return self.inner.environment()

    def for_target(self, target: Environment) -> CapturingBackend:
        """Captures the wrapped backend building ``target``'s keys (one probe, one capture)."""
        self.inner = self.inner.for_target(target)
        return self

    def check_settings(self, settings: BuildSettings) -> None:
        self.inner.check_settings(settings)

    def create_timing_cache(self, data: bytes = b"") -> TimingCache:
        return self.inner.create_timing_cache(data)

    def build(
        self,
        model_path: str,
        settings: BuildSettings,
        cache: TimingCache,
        log: LogSink,
        *,
        pinned: bool = False,
    ) -> BuildOutput:
        cap = BuildCapture(self.label, pinned, before=cache.tactic_map())
        self.builds.append(cap)

        def tee(line: str) -> None:
            cap.lines.append(line)
            log(line)

        t0 = time.perf_counter()
        try:
            if pinned:
                out = self.inner.build(model_path, settings, cache, tee, pinned=True)
            else:
                out = self.inner.build(model_path, settings, cache, tee)
        except Exception as err:
            cap.error = str(err)
            raise
        finally:
            cap.seconds = round(time.perf_counter() - t0, 4)
            cap.after = cache.tactic_map()
            cap.times_after = {k: _time(cache, k) for k in cap.after}
        cap.layer_info = out.layer_info
        cap.extra = dict(out.extra)
        return out

    def run(self, engine: bytes, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return self.inner.run(engine, inputs)


def _time(cache: TimingCache, key: str) -> float | None:
    value = cache.query(key)
    return None if value is None else value.time_ms


def non_finite_times(captures: list[BuildCapture]) -> list[str]:
    """Keys any build left with an infinite or NaN time (TensorRT's failed-tactic marker)."""
    bad = {
        k
        for c in captures
        for k, t in c.times_after.items()
        if t is not None and not math.isfinite(t)
    }
    return sorted(bad)
