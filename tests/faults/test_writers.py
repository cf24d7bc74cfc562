"""One lock writer, and a cache that is written only with a successful build's outputs.

A ``pin`` made while a locked build runs must never be lost: the build holds the lock's
file lock from reading the lock to committing it, so the pin waits and then edits the lock
the build wrote. The race is made deterministic: the build pauses until the pin is seen
blocked on the file lock (``fcntl.flock`` answering "would block"), then goes on.
"""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path

from reprobuild.lock.edit import edit_lock
from reprobuild.lock.yamlio import load_lock, save_lock

from .helpers import snapshot


def test_a_pin_during_a_locked_build_is_never_lost(proj: Path, cli, monkeypatch) -> None:
    import reprobuild.workflow.build as build_mod

    lock = load_lock(proj / "t.lock")
    lock.outputs = []  # the locked build will record the expected bits: it rewrites the lock
    save_lock(lock, proj / "t.lock")
    fc1 = next(e for e in lock.layers if e.layer == "fc1")
    other = next(c for c in fc1.candidates if c.tactic != fc1.tactic)

    blocked = threading.Event()
    real_flock = fcntl.flock

    def flock(fd, op):
        try:
            return real_flock(fd, op)
        except BlockingIOError:
            if threading.current_thread().name == "pin":
                blocked.set()
            raise

    monkeypatch.setattr(fcntl, "flock", flock)
    errors: list[BaseException] = []

    def pin() -> None:
        try:
            edit_lock(proj / "t.lock", [f"key={fc1.key}", f"tactic=0x{other.tactic:x}"])
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    thread = threading.Thread(target=pin, name="pin")
    real_pinned = build_mod.pinned_build

    def pinned_build(*args, **kwargs):
        thread.start()
        assert blocked.wait(120), "the pin was not made to wait for the build's file lock"
        return real_pinned(*args, **kwargs)

    monkeypatch.setattr(build_mod, "pinned_build", pinned_build)
    r = cli("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q")
    thread.join(120)
    assert r.code == 0 and not errors, (r, errors)
    after = load_lock(proj / "t.lock")
    entry = next(e for e in after.layers if e.key == fc1.key)
    assert entry.pinned and entry.tactic == other.tactic  # the pin survived
    # the build did rewrite the lock (its expected bits; a pin then drops them, as bits
    # recorded for other tactics no longer hold)
    assert "written: recorded the target's expected bits" in r.out, r
    assert not list(proj.glob("*.lck")), "a .lck file was left beside the lock"


def test_lck_that_is_a_folder_is_one_line(proj: Path, cli) -> None:
    (proj / "t.lock.lck").mkdir()
    r = cli("pin", "--lock", "t.lock", "layer=fc1", "tactic=ref_matmul_tree8_f32")
    assert r.code == 2 and r.err.startswith("error: t.lock.lck: cannot create"), r


def test_failed_pin_leaves_no_lck(proj: Path, cli) -> None:
    r = cli("pin", "--lock", "t.lock", "layer=nope", "tactic=0x1")
    assert r.code == 2, r
    assert not list(proj.glob("*.lck"))


def _no_caches(proj: Path) -> None:
    for f in (proj / "caches").glob("*"):
        f.unlink()


def test_frozen_build_writes_no_cache(proj: Path, cli) -> None:
    _no_caches(proj)
    r = cli("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q", "--frozen")
    assert r.code == 0, r
    assert not list((proj / "caches").glob("*")), "a --frozen build wrote a recording cache"


def test_failed_locked_build_writes_no_cache(proj: Path, cli, monkeypatch) -> None:
    import reprobuild.workflow.build as build_mod
    from reprobuild.errors import DriftError

    def drift(*_a, **_k):
        raise DriftError("planted drift after the recording build")

    monkeypatch.setattr(build_mod, "pinned_build", drift)
    _no_caches(proj)
    before = snapshot(proj)
    r = cli("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q")
    assert r.code == 1 and "planted drift" in r.err, r
    assert snapshot(proj) == before, "a failed build wrote a file (the recording cache?)"
