"""The reference backend's editable timing cache, with TensorRT's ``ITimingCache`` semantics.

Semantics (what the lock workflow relies on, see ``shared/TENSORRT_NOTES.md``):

- one entry per layer key (``"0x"`` + 32 lowercase hex), value = (tactic hash, time in ms);
- ``update`` changes only keys that already exist (False otherwise); a NaN time deletes;
- ``combine`` adds the other cache's missing keys and never overrides an existing entry;
- the builder adds entries for layers it timed (:meth:`ReferenceTimingCache.record`), and a
  layer whose key is present is not timed at all.

Serialized format (version 1, all integers little-endian)::

    offset  size  field
    0       8     magic b"RBREFTC\\0"
    8       4     u32 format version (1)
    12      4     u32 header length H
    16      H     header: UTF-8 JSON {"backend": "reference", "environment": {...},
                  "environment_fingerprint": "<16 hex>", "entries": N}
    16+H    32*N  entries sorted by key: 16-byte key, u64 tactic hash, f64 time (ms)
    end-32  32    SHA-256 of every byte before it

The checksum catches truncation and bit rot; the header ties the cache to the environment
(CPU model, numpy and BLAS versions) because a tactic's timing only means something on the
machine that measured it. Entries are sorted so equal caches serialize to equal bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from collections.abc import Iterator
from typing import Any

from reprobuild.backends.base import Environment, TimingCache, TimingValue
from reprobuild.errors import CacheError, UsageError

CACHE_MAGIC = b"RBREFTC\0"
CACHE_FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sII")
_ENTRY = struct.Struct("<16sQd")
_DIGEST_SIZE = 32
KEY_RE = re.compile(r"0x[0-9a-f]{32}")
MAX_TACTIC_HASH = 2**64 - 1


def check_key(key: str) -> str:
    """Normalize a key to lowercase; a malformed key is a usage error (as in TensorRT's parse)."""
    if isinstance(key, str) and KEY_RE.fullmatch(key.lower()):
        return key.lower()
    raise UsageError(
        f"timing-cache key {key!r} is not '0x' followed by 32 hex digits; "
        "copy it from the lock's 'key' field"
    )


def _is_nan(value: object) -> bool:
    try:
        return math.isnan(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def check_tactic_hash(tactic_hash: int, key: str) -> int:
    if isinstance(tactic_hash, bool) or not isinstance(tactic_hash, int):
        raise UsageError(f"tactic hash {tactic_hash!r} for key {key} is not an integer")
    if not 0 <= tactic_hash < MAX_TACTIC_HASH:
        raise UsageError(f"tactic hash {tactic_hash:#x} for key {key} does not fit 64 bits")
    return tactic_hash


class ReferenceTimingCache:
    """An in-memory editable timing cache tied to one :class:`Environment`."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self._entries: dict[str, TimingValue] = {}

    # -- the TimingCache protocol -------------------------------------------------------
    def query_keys(self) -> list[str]:
        return sorted(self._entries)

    def query(self, key: str) -> TimingValue | None:
        return self._entries.get(check_key(key))

    def update(self, key: str, tactic_hash: int, time_ms: float) -> bool:
        """Change an existing entry; False when absent. A NaN time deletes the entry."""
        key = check_key(key)
        if key not in self._entries:
            return False
        if _is_nan(time_ms):
            del self._entries[key]
            return True
        check_tactic_hash(tactic_hash, key)
        self._entries[key] = TimingValue(int(tactic_hash), float(time_ms))
        return True

    def combine(self, other: TimingCache, ignore_mismatch: bool = False) -> bool:
        """Add ``other``'s missing keys; existing entries win (TensorRT never overrides).

        A cache from another environment is refused (False) unless ``ignore_mismatch``.
        """
        other_env = getattr(other, "environment", None)
        if (
            not ignore_mismatch
            and isinstance(other_env, Environment)
            and other_env.fingerprint() != self.environment.fingerprint()
        ):
            return False
        for key in other.query_keys():
            value = other.query(key)
            if value is not None and key.lower() not in self._entries:
                self._entries[key.lower()] = TimingValue(int(value.tactic_hash), value.time_ms)
        return True

    def reset(self) -> None:
        self._entries.clear()

    def serialize(self) -> bytes:
        header = json.dumps(
            {
                "backend": "reference",
                "environment": self.environment.to_dict(),
                "environment_fingerprint": self.environment.fingerprint(),
                "entries": len(self._entries),
            },
            sort_keys=True,
        ).encode()
        parts = [_PREFIX.pack(CACHE_MAGIC, CACHE_FORMAT_VERSION, len(header)), header]
        for key in sorted(self._entries):
            value = self._entries[key]
            parts.append(_ENTRY.pack(bytes.fromhex(key[2:]), value.tactic_hash, value.time_ms))
        body = b"".join(parts)
        return body + hashlib.sha256(body).digest()

    def tactic_map(self) -> dict[str, int]:
        return {key: value.tactic_hash for key, value in sorted(self._entries.items())}

    # -- used by the builder ------------------------------------------------------------
    def record(self, key: str, tactic_hash: int, time_ms: float) -> None:
        """Add (or replace) the entry the builder measured: the only way keys are created."""
        key = check_key(key)
        self._entries[key] = TimingValue(check_tactic_hash(tactic_hash, key), float(time_ms))

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self.query_keys())


def read_header(data: bytes) -> dict[str, Any]:
    """Validate framing and checksum and return the JSON header; raises ``CacheError``."""
    if len(data) < _PREFIX.size + _DIGEST_SIZE:
        raise CacheError(
            f"timing cache is truncated ({len(data)} bytes): delete the cache file and rebuild "
            "to record a new one"
        )
    magic, version, header_len = _PREFIX.unpack_from(data)
    if magic != CACHE_MAGIC:
        # The bytes found are not shown: the "cache" may be a link to any file (a key, a
        # password file), and its first bytes must not reach a CI log.
        raise CacheError(
            "timing cache was not written by the reference backend (it does not start with "
            "the reference cache's magic bytes): delete the cache file or use the backend "
            "that wrote it"
        )
    if version != CACHE_FORMAT_VERSION:
        raise CacheError(
            f"timing cache has format version {version}, this reprobuild reads version "
            f"{CACHE_FORMAT_VERSION}: delete the cache file and rebuild to record a new one"
        )
    body, digest = data[:-_DIGEST_SIZE], data[-_DIGEST_SIZE:]
    if hashlib.sha256(body).digest() != digest:
        raise CacheError(
            "timing cache is corrupted (checksum mismatch): delete the cache file and rebuild "
            "to record a new one"
        )
    try:
        header = json.loads(data[_PREFIX.size : _PREFIX.size + header_len].decode())
        count = int(header["entries"])
        environment = Environment.from_dict(header["environment"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CacheError(
            f"timing cache header is unreadable ({exc}): delete the cache file and rebuild"
        ) from exc
    if len(body) != _PREFIX.size + header_len + count * _ENTRY.size:
        raise CacheError(
            "timing cache length does not match its header: delete the cache file and rebuild"
        )
    header["environment"] = environment
    return header


def deserialize_cache(
    data: bytes, environment: Environment, *, ignore_mismatch: bool = False
) -> ReferenceTimingCache:
    """Inverse of :meth:`ReferenceTimingCache.serialize`.

    A cache from another environment raises ``CacheError`` (its timings were measured on
    other hardware or numerics) unless ``ignore_mismatch``, TensorRT's escape hatch.
    """
    header = read_header(data)
    recorded: Environment = header["environment"]
    if not ignore_mismatch and recorded.fingerprint() != environment.fingerprint():
        raise CacheError(
            f"timing cache was recorded in another environment ({_describe(recorded)}; "
            f"this machine: {_describe(environment)}): delete it or record a new one here"
        )
    cache = ReferenceTimingCache(environment if ignore_mismatch else recorded)
    offset = _PREFIX.size + _PREFIX.unpack_from(data)[2]
    for _ in range(int(header["entries"])):
        raw_key, tactic, time_ms = _ENTRY.unpack_from(data, offset)
        offset += _ENTRY.size
        if tactic == MAX_TACTIC_HASH:
            raise CacheError("timing cache holds an invalid tactic hash: delete it and rebuild")
        cache.record("0x" + raw_key.hex(), tactic, time_ms)
    return cache


def _describe(env: Environment) -> str:
    return f"target {env.name}"
