"""The reference timing cache follows TensorRT's editable-cache semantics and file checks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprobuild.backends.base import Environment, TimingCache, TimingValue
from reprobuild.backends.reference import ReferenceBackend, ReferenceTimingCache
from reprobuild.backends.reference.timingcache import deserialize_cache
from reprobuild.errors import CacheError, UsageError

K1 = "0x" + "11" * 16
K2 = "0x" + "22" * 16
K3 = "0x" + "ab" * 16


@pytest.fixture
def backend() -> ReferenceBackend:
    return ReferenceBackend()


def filled(
    backend: ReferenceBackend, entries: dict[str, tuple[int, float]]
) -> ReferenceTimingCache:
    cache = backend.create_timing_cache()
    for key, (tactic, ms) in entries.items():
        cache.record(key, tactic, ms)
    return cache


def test_cache_satisfies_protocol(backend: ReferenceBackend) -> None:
    assert isinstance(backend.create_timing_cache(), TimingCache)


def test_query_and_update_only_existing_keys(backend: ReferenceBackend) -> None:
    cache = filled(backend, {K1: (0x10, 1.5)})
    assert cache.query(K1) == TimingValue(0x10, 1.5)
    assert cache.query(K2) is None
    assert cache.update(K2, 0x20, 1.0) is False
    assert cache.query_keys() == [K1]
    assert cache.update(K1, 0x30, 2.0) is True
    assert cache.query(K1) == TimingValue(0x30, 2.0)
    # keys are case-insensitive on input, lowercase in output
    assert cache.update(K3.upper().replace("0X", "0x"), 1, 1.0) is False
    assert cache.tactic_map() == {K1: 0x30}


def test_nan_time_deletes_the_entry(backend: ReferenceBackend) -> None:
    cache = filled(backend, {K1: (0x10, 1.5), K2: (0x20, 2.5)})
    assert cache.update(K1, 0x10, math.nan) is True
    assert cache.query(K1) is None
    assert cache.query_keys() == [K2]
    assert cache.update(K1, 0x10, math.nan) is False


def test_combine_never_overrides(backend: ReferenceBackend) -> None:
    mine = filled(backend, {K1: (0x10, 1.0)})
    other = filled(backend, {K1: (0x99, 0.1), K2: (0x20, 2.0)})
    assert mine.combine(other) is True
    assert mine.tactic_map() == {K1: 0x10, K2: 0x20}


def test_combine_refuses_other_environment_unless_ignored(backend: ReferenceBackend) -> None:
    mine = filled(backend, {K1: (0x10, 1.0)})
    env = backend.environment()
    foreign_env = Environment.make(
        "reference", {**env.identity_dict(), "blas_kernels": "Other"}, env.advisory_dict()
    )
    other = ReferenceTimingCache(foreign_env)
    other.record(K2, 0x20, 2.0)
    assert mine.combine(other) is False
    assert mine.query(K2) is None
    assert mine.combine(other, ignore_mismatch=True) is True
    assert mine.query(K2) == TimingValue(0x20, 2.0)


def test_reset_empties(backend: ReferenceBackend) -> None:
    cache = filled(backend, {K1: (1, 1.0), K2: (2, 2.0)})
    cache.reset()
    assert cache.query_keys() == [] and len(cache) == 0


def test_malformed_keys_and_hashes_are_usage_errors(backend: ReferenceBackend) -> None:
    cache = filled(backend, {K1: (1, 1.0)})
    with pytest.raises(UsageError, match="32 hex"):
        cache.query("0x1234")
    with pytest.raises(UsageError, match="32 hex"):
        cache.update("not-a-key", 1, 1.0)
    with pytest.raises(UsageError, match="64 bits"):
        cache.update(K1, 2**64, 1.0)
    with pytest.raises(UsageError, match="not an integer"):
        cache.update(K1, "0x10", 1.0)  # type: ignore[arg-type]


def test_serialize_roundtrip_is_deterministic(backend: ReferenceBackend) -> None:
    a = filled(backend, {K2: (0x20, 2.25), K1: (0x10, 1.5)})
    b = filled(backend, {K1: (0x10, 1.5), K2: (0x20, 2.25)})
    data = a.serialize()
    assert data == b.serialize()  # insertion order does not matter
    assert data[:8] == b"RBREFTC\0"
    back = backend.create_timing_cache(data)
    assert back.tactic_map() == {K1: 0x10, K2: 0x20}
    assert back.query(K2) == TimingValue(0x20, 2.25)
    assert back.serialize() == data


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(
        st.binary(min_size=16, max_size=16).map(lambda b: "0x" + b.hex()),
        st.tuples(
            st.integers(min_value=0, max_value=2**64 - 2),
            st.floats(allow_nan=False, allow_infinity=False, width=64),
        ),
        max_size=20,
    )
)
def test_serialize_roundtrip_property(entries: dict[str, tuple[int, float]]) -> None:
    backend = ReferenceBackend()
    cache = filled(backend, entries)
    back = backend.create_timing_cache(cache.serialize())
    assert back.tactic_map() == {k: v[0] for k, v in entries.items()}
    for key, (tactic, ms) in entries.items():
        assert back.query(key) == TimingValue(tactic, ms)


def test_corrupted_cache_raises_clear_errors(backend: ReferenceBackend) -> None:
    data = bytearray(filled(backend, {K1: (0x10, 1.5)}).serialize())
    flipped = bytearray(data)
    flipped[-40] ^= 0x01  # inside the entry records
    with pytest.raises(CacheError, match="corrupted.*checksum"):
        backend.create_timing_cache(bytes(flipped))
    with pytest.raises(CacheError, match="truncated|checksum|length"):
        backend.create_timing_cache(bytes(data[:-5]))
    with pytest.raises(CacheError, match="truncated"):
        backend.create_timing_cache(b"RBREF")
    with pytest.raises(CacheError, match="not written by the reference backend"):
        backend.create_timing_cache(b"\x00" * 100)


def test_cache_from_another_environment_is_refused(backend: ReferenceBackend) -> None:
    env = backend.environment()
    foreign_env = Environment.make(
        "reference", {**env.identity_dict(), "blas": "other blas 0.0"}, env.advisory_dict()
    )
    foreign = ReferenceTimingCache(foreign_env)
    foreign.record(K1, 0x10, 1.0)
    data = foreign.serialize()
    with pytest.raises(CacheError, match="another environment"):
        backend.create_timing_cache(data)
    lenient = backend.create_timing_cache(data, ignore_mismatch=True)
    assert lenient.tactic_map() == {K1: 0x10}
    assert lenient.environment == backend.environment()
    # the foreign cache loads fine in its own environment
    assert deserialize_cache(data, foreign_env).tactic_map() == {K1: 0x10}
