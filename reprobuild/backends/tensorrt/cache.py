"""The project's ``TimingCache`` contract over TensorRT's ``ITimingCache``.

Ownership (the design choice): an ``ITimingCache`` is created by an ``IBuilderConfig``
(``create_timing_cache``), but per the binding's own documentation it "doesn't belong to a
specific builder config" and can be attached to several. So the wrapper holds the
``ITimingCache`` object itself (plus the config that created it, kept alive), and every
build attaches that same object with ``config.set_timing_cache(cache, ignore_mismatch=True)``
(why lenient: see the backend module's docstring).
Entries the builder writes therefore land in the wrapper directly; nothing is serialized and
re-created between the recording build, ``update()`` and the pinned build.

API facts this follows (TensorRT 10.8 to 11.x): ``queryKeys()`` is camelCase; keys are
``TimingCacheKey`` objects without equality or hash, so ``str(key)`` (lowercase hex) is the
identity; ``TimingCacheValue(tactic_hash, timing_ms)`` is positional; ``query()`` of a missing
key returns ``tacticHash == 2**64 - 1``; ``update()`` only changes existing keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

from reprobuild.backends.base import TimingCache, TimingValue
from reprobuild.errors import CacheError, UsageError

INVALID_TACTIC_HASH = 2**64 - 1
KEY_RE = re.compile(r"0x[0-9a-fA-F]{32}")


def check_key(key: str) -> str:
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        raise UsageError(
            f"timing-cache key {key!r} is not '0x' followed by 32 hex digits; "
            "copy it from the lock's 'key' field"
        )
    return key.lower()


class TrtTimingCache:
    """A TensorRT timing cache with the project's snake_case, string-keyed interface."""

    def __init__(
        self,
        trt: ModuleType,
        trt_cache: Any,
        trt_config: Any,
        from_bytes: Callable[[bytes], TrtTimingCache],
    ) -> None:
        self._trt_module = trt
        self.trt_cache = trt_cache
        # The config that created the cache; kept so its lifetime covers the cache's.
        self._trt_config = trt_config
        self._from_bytes = from_bytes

    def _trt_key(self, key: str) -> Any:
        return self._trt_module.TimingCacheKey.parse(check_key(key))

    def query_keys(self) -> list[str]:
        return [str(trt_key).lower() for trt_key in self.trt_cache.queryKeys()]

    def query(self, key: str) -> TimingValue | None:
        trt_value = self.trt_cache.query(self._trt_key(key))
        tactic = int(trt_value.tacticHash)
        if tactic == INVALID_TACTIC_HASH:
            return None
        return TimingValue(tactic_hash=tactic, time_ms=float(trt_value.timingMSec))

    def update(self, key: str, tactic_hash: int, time_ms: float) -> bool:
        """TensorRT's ``update``: False when the key is absent or the value is invalid."""
        if isinstance(tactic_hash, bool) or not isinstance(tactic_hash, int):
            raise UsageError(f"tactic hash {tactic_hash!r} for key {key} is not an integer")
        if not 0 <= tactic_hash < 2**64:
            raise UsageError(f"tactic hash {tactic_hash:#x} for key {key} does not fit 64 bits")
        trt_key = self._trt_key(key)
        trt_value = self._trt_module.TimingCacheValue(int(tactic_hash), float(time_ms))
        return bool(self.trt_cache.update(trt_key, trt_value))

    def combine(self, other: TimingCache, ignore_mismatch: bool = False) -> bool:
        """Add ``other``'s entries that this cache lacks (existing entries are never overridden)."""
        source = other if isinstance(other, TrtTimingCache) else self._from_bytes(other.serialize())
        return bool(self.trt_cache.combine(source.trt_cache, bool(ignore_mismatch)))

    def reset(self) -> None:
        if not bool(self.trt_cache.reset()):
            raise CacheError("TensorRT could not reset the timing cache")

    def serialize(self) -> bytes:
        return bytes(self.trt_cache.serialize())

    def tactic_map(self) -> dict[str, int]:
        result: dict[str, int] = {}
        for trt_key in self.trt_cache.queryKeys():
            tactic = int(self.trt_cache.query(trt_key).tacticHash)
            if tactic != INVALID_TACTIC_HASH:
                result[str(trt_key).lower()] = tactic
        return result

    def __len__(self) -> int:
        return len(self.trt_cache.queryKeys())
