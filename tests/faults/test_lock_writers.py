"""Every lock writer treats a symlinked or read-only lock the same way (``lock_target``):

- a symlinked lock is written through, as uv and Cargo do: the link stays a link and the
  file it names gets the change (a lock shared by several folders stays shared);
- a read-only lock is refused with the fix (make it writable), never replaced: the rename
  that replaces a lock needs only its folder to be writable, so it once went through;
- a signal that lands after the commit point says the lock WAS written.
"""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from reprobuild.lock.yamlio import load_lock

from .helpers import assert_clean, snapshot

PIN = ("pin", "--lock", "{}", "layer=fc1", "tactic=ref_matmul_tree8_f32")
WRITERS = {
    "pin": PIN,
    "unpin": ("unpin", "--lock", "{}", "layer=fc1"),
    "build": ("build", "mlp.onnx", "--lock", "{}", "--backend", "reference", "-q"),
}


def _pinned(path: Path) -> bool:
    return next(e for e in load_lock(path).layers if e.layer == "fc1").pinned


def _prepare(proj: Path, cli, writer: str) -> None:
    """Make ``t.lock`` need the writer's change: pinned for unpin, stale for build."""
    if writer == "unpin":
        assert cli(*(a.format("t.lock") for a in PIN)).code == 0
    if writer == "build":
        lock = load_lock(proj / "t.lock")
        lock.outputs = []  # the locked build records the expected bits: it rewrites the lock
        from reprobuild.lock.yamlio import save_lock

        save_lock(lock, proj / "t.lock")


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_symlinked_lock_is_written_through(proj: Path, cli, writer: str) -> None:
    _prepare(proj, cli, writer)
    (proj / "shared").mkdir()
    os.replace(proj / "t.lock", proj / "shared" / "real.lock")
    (proj / "t.lock").symlink_to("shared/real.lock")
    old = (proj / "shared" / "real.lock").read_bytes()
    r = cli(*(a.format("t.lock") for a in WRITERS[writer]))
    assert r.code == 0, r
    assert (proj / "t.lock").is_symlink() and os.readlink(proj / "t.lock") == "shared/real.lock"
    assert (proj / "shared" / "real.lock").read_bytes() != old, "the target was not written"
    assert not list(proj.rglob("*.lck")) and not list(proj.rglob("*.tmp"))


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("linked", [False, True], ids=["file", "link"])
def test_read_only_lock_is_refused(proj: Path, cli, writer: str, linked: bool) -> None:
    _prepare(proj, cli, writer)
    name = "t.lock"
    if linked:
        (proj / "l.lock").symlink_to("t.lock")
        name = "l.lock"
    os.chmod(proj / "t.lock", 0o444)
    before = snapshot(proj)
    r = cli(*(a.format(name) for a in WRITERS[writer]))
    assert r.code == 2, r
    line = r.err.splitlines()[-1]
    assert line.startswith(f"error: {name}: the lock") and "is read-only" in line, r
    assert "make it writable (chmod u+w " in line and "t.lock" in line.split("chmod")[1], r
    assert_clean(r, proj, before)
    assert stat.S_IMODE(os.stat(proj / "t.lock").st_mode) == 0o444
    assert (proj / "l.lock").is_symlink() if linked else True


def test_read_only_lock_that_needs_no_change_still_builds(proj: Path, cli) -> None:
    """Like Cargo: a lock is only written when it changes, so only then must it be
    writable (a locked build of an up-to-date lock reads it)."""
    os.chmod(proj / "t.lock", 0o444)
    r = cli(*(a.format("t.lock") for a in WRITERS["build"]))
    assert r.code == 0 and "t.lock (unchanged)" in r.out, r


def test_symlink_loop_is_one_line(proj: Path, cli) -> None:
    (proj / "a.lock").symlink_to("b.lock")
    (proj / "b.lock").symlink_to("a.lock")
    before = snapshot(proj)
    r = cli(*(a.format("a.lock") for a in PIN))
    assert r.code == 2 and "a.lock: " in r.err, r
    assert_clean(r, proj, before)


@pytest.fixture()
def ctrl_c() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt, as in a terminal. A shell starts a background job
    (``cmd &``, as CI wrappers and nohup loops do) with SIGINT ignored, and Python keeps an
    inherited ignore: without this, a SIGINT sent here would do nothing at all."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["int", "term"])
def test_signal_after_the_commit_says_the_lock_was_written(
    proj: Path, cli, monkeypatch, signum: int, ctrl_c: None
) -> None:
    """The signal is really delivered, at the hook right after the commit's last rename
    (while ``pin`` still holds the file lock): no timing race."""
    from reprobuild.transaction import Outputs

    real = Outputs.commit

    def commit(self: Outputs) -> None:
        real(self)
        os.kill(os.getpid(), signum)

    monkeypatch.setattr(Outputs, "commit", commit)
    r = cli(*(a.format("t.lock") for a in PIN))
    assert r.code == 128 + signum and "Traceback" not in r.err, r
    line = r.err.strip().splitlines()[-1]
    assert "after the outputs were written: t.lock (complete; nothing to roll back)" in line, r
    assert _pinned(proj / "t.lock"), "the lock the message calls written was not"
    assert not list(proj.glob("*.lck")) and not list(proj.glob(".t.lock.*"))


def test_signal_before_the_commit_still_rolls_back(
    proj: Path, cli, monkeypatch, ctrl_c: None
) -> None:
    from reprobuild.transaction import Outputs

    def commit(self: Outputs) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(Outputs, "commit", commit)
    before = snapshot(proj)
    r = cli(*(a.format("t.lock") for a in PIN))
    assert r.code == 130 and r.err.strip().splitlines()[-1] == "interrupted", r
    assert snapshot(proj) == before
