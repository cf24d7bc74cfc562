"""Lock writers hold the file lock from reading to committing, and a digest is recorded
only over the tactics that were verified; the races are driven deterministically.

``merge --out`` racing a ``pin`` once lost the merged-in target (merge never took the
lock), and ``verify --record-digests`` racing a ``pin`` recorded the old tactics' digest
into the lock that held the pinned tactic, so every later verify failed.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from reprobuild.lock.yamlio import load_lock, save_lock


def _pin_fc1(path: Path) -> None:
    """What ``pin`` writes, done by hand (the caller holds the file lock)."""
    lock = load_lock(path)
    next(e for e in lock.layers if e.layer == "fc1").pinned = True
    save_lock(lock, path)


def test_merge_waits_for_the_lock_and_keeps_a_pin(proj: Path, cli, monkeypatch) -> None:
    waiting = threading.Event()
    real_sleep = time.sleep

    def sleep(s: float) -> None:  # the file lock's wait loop: merge is now blocked on it
        waiting.set()
        real_sleep(s)

    monkeypatch.setattr(time, "sleep", sleep)
    fd = os.open("t.lock.lck", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a pin holding the lock
    result: list = []
    worker = threading.Thread(
        target=lambda: result.append(cli("merge", "t.lock", "--out", "t.lock"))
    )
    worker.start()
    try:
        assert waiting.wait(60), "merge did not wait for the file lock"
        assert not result, "merge wrote while another writer held the lock"
        _pin_fc1(Path("t.lock"))
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        worker.join(120)
    assert result and result[0].code == 0, result
    assert next(e for e in load_lock("t.lock").layers if e.layer == "fc1").pinned


def test_a_digest_is_not_recorded_over_tactics_changed_meanwhile(
    proj: Path, cli, monkeypatch
) -> None:
    from reprobuild.lock import edit

    real = edit.record_digest

    def pin_first(path, *args, **kwargs):  # a pin lands after the rebuilds, before recording
        lock = load_lock(path)
        entry = next(e for e in lock.layers if e.layer == "fc1")
        entry.tactic ^= 1
        save_lock(lock, path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(edit, "record_digest", pin_first)
    r = cli(
        "verify", "--lock", "t.lock", "-n", "1", "--seed", "7", "--record-digests", "--no-control"
    )
    assert r.code == 0, r
    assert "the digest was not recorded" in r.err, r
    assert not any("7" in o.inputs for o in load_lock("t.lock").outputs), load_lock(
        "t.lock"
    ).outputs


def test_a_digest_is_recorded_when_the_tactics_held(proj: Path, cli) -> None:
    r = cli(
        "verify", "--lock", "t.lock", "-n", "1", "--seed", "7", "--record-digests", "--no-control"
    )
    assert r.code == 0 and "not recorded" not in r.err, r
    assert any("7" in o.inputs for o in load_lock("t.lock").outputs)


@pytest.fixture(autouse=True)
def _no_leftover_lck(proj: Path):
    yield
    assert not list(proj.glob("*.lck.*"))
