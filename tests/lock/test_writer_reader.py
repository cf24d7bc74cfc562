"""The writer and the reader accept the same language: whatever a command can write into a
lock (a seed's inputs label, a recorded time, digests) loads again, and what the loader
would reject is refused before it is written (a seed over ``SEED_DIGITS`` digits) or at
file:line (an overflowing time, two digests for one inputs), never as a crash.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprobuild.errors import LockError
from reprobuild.limits import SEED_MAX
from reprobuild.lock.model import OutputDigest
from reprobuild.lock.yamlio import dumps_lock, loads_lock

from ..conftest import sample_lock

SHA = "ab" * 32


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, SEED_MAX),
    time_ms=st.floats(min_value=0, allow_nan=False, allow_infinity=True),
)
def test_whatever_the_writer_writes_the_reader_reads(seed: int, time_ms: float) -> None:
    lock = sample_lock()
    lock.layers[0] = replace(lock.layers[0], time_ms=time_ms)
    lock.outputs = [OutputDigest(f"seeded:{seed}", SHA)]
    loaded = loads_lock(dumps_lock(lock))
    assert loaded.outputs[0].inputs == f"seeded:{seed}"
    assert loaded.layers[0].time_ms == time_ms


def _text(**edit: str) -> str:
    lock = sample_lock()
    lock.layers[0] = replace(lock.layers[0], time_ms=0.5)
    lock.outputs = [OutputDigest("seeded:1", SHA)]
    text = dumps_lock(lock)
    for old, new in edit.items():
        assert old in text
        text = text.replace(old, new, 1)
    return text


def test_an_overflowing_time_is_refused_at_its_line() -> None:
    text = _text(**{"0x1.0000000000000p-1": "0x1p+99999999"})
    with pytest.raises(LockError, match=r"^tactics.lock:\d+:\d+: .*malformed time"):
        loads_lock(text)


def test_two_digests_for_one_inputs_are_refused() -> None:
    text = _text()
    line = next(ln for ln in text.splitlines() if "seeded:1" in ln)
    text = text.replace(f"{line}\n", f"{line}\n{line.replace(SHA, 'cd' * 32)}\n")
    with pytest.raises(LockError, match=r"a second digest for inputs 'seeded:1'"):
        loads_lock(text)


def test_a_seed_the_loader_would_refuse_is_refused_up_front(cli, tmp_path) -> None:
    r = cli("verify", "--lock", str(tmp_path / "none.lock"), "--seed", str(SEED_MAX + 1))
    assert r.code == 2 and "--seed" in r.err, r
