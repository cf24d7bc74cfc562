"""Interrupted writes at every step, and the guard at the real process boundary.

Every call that makes a write durable or visible (``os.fsync``, ``os.replace``, ``os.link``)
is a step. A build and a pin are run once to count their steps, then once per step with
that step failing (a full disk: ``OSError(ENOSPC)``) or interrupted (Ctrl-C). Each run must
end in a clean refusal (or 130), with every file that existed before byte-identical and no
temporary file left.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import EXAMPLES, run_cli
from .helpers import assert_clean, restore, snapshot

STEPS = ("fsync", "replace", "link")


class Injector:
    """Counts write steps; makes step number ``fail_at`` raise ``error``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail_at: int = -1, error=None) -> None:
        self.count = 0
        self.fail_at = fail_at
        self.error = error
        for name in STEPS:
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(real))

    def _wrap(self, real):
        def step(*args, **kwargs):
            n = self.count
            self.count += 1
            if n == self.fail_at:
                raise self.error()
            return real(*args, **kwargs)

        return step


def _disk_full() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


COMMANDS = {
    # a recording build over an existing engine and report
    "build": ("build", "mlp.onnx", "--lock", "new.lock", "--backend", "reference", "-q"),
    # a locked build that brings a stale lock up to date (rewrites the lock)
    "pin": ("pin", "--lock", "t.lock", "layer=fc1", "tactic=ref_matmul_tree8_f32"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("error", [_disk_full, KeyboardInterrupt], ids=["disk-full", "ctrl-c"])
def test_interrupted_at_every_step(
    proj: Path, cli, monkeypatch: pytest.MonkeyPatch, command: str, error
) -> None:
    args = COMMANDS[command]
    pristine = snapshot(proj)
    with monkeypatch.context() as m:
        counter = Injector(m)
        assert cli(*args).code == 0
        steps = counter.count
    assert steps >= 2, steps  # the command really writes through the counted calls
    restore(proj, pristine)
    for fail_at in range(steps):
        before = snapshot(proj)
        with monkeypatch.context() as m:
            Injector(m, fail_at, error)
            r = cli(*args)
        if error is KeyboardInterrupt:
            assert r.code == 130 and "Traceback" not in r.err, (fail_at, r)
            after = snapshot(proj)
            assert all(after.get(k) == v for k, v in before.items()), (fail_at, r)
            assert not [k for k in after if k.endswith((".tmp", ".bak"))], after
        else:
            assert_clean(r, proj, before)
            assert r.code == 2, (fail_at, r)
        # whatever a failed run left under caches/ is allowed; start the next one clean
        for rel in set(snapshot(proj)) - set(before):
            (proj / rel).unlink()


def test_outputs_checked_before_any_work(proj: Path, cli, monkeypatch) -> None:
    from reprobuild.backends.reference import ReferenceBackend

    def no_build(*_a, **_k):
        raise AssertionError("the build ran before its outputs were checked")

    monkeypatch.setattr(ReferenceBackend, "build", no_build)
    before = snapshot(proj)
    cases = [
        (("--lock", "mlp.onnx/x.lock"), "mlp.onnx is not a directory"),
        (("--out", "mlp.onnx/e.engine"), "mlp.onnx is not a directory"),
        (("--report", "caches"), "it is a directory"),
        (("--lock", "/proc/x.lock"), "cannot create files in /proc"),
    ]
    for extra, words in cases:
        r = cli("build", "mlp.onnx", "--backend", "reference", "-q", "--lock", "n.lock", *extra)
        assert r.code == 2 and words in r.err, r  # refused before the build ran
        assert_clean(r, proj, before)


def test_internal_error_is_exit_4_with_a_saved_traceback(
    proj: Path, cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import reprobuild.lock.yamlio as yamlio

    def boom(*args, **kwargs):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(yamlio, "loads_lock", boom)
    r = cli("show", "--lock", "t.lock")
    assert r.code == 4 and r.out == ""
    (line,) = r.err.splitlines()
    assert line.startswith("error: internal error (RuntimeError: planted bug)")
    saved = Path(line.rsplit("traceback saved to ", 1)[1])
    assert saved.parent == tmp_path / "crashes"
    text = saved.read_text()
    assert "Traceback (most recent call last)" in text and "planted bug" in text
    assert "command: reprobuild show --lock t.lock" in text
    r = cli("show", "--lock", "t.lock", "--json")
    assert r.code == 4 and json.loads(r.out)["error"]["code"] == 4 and r.out == r.err


def test_process_boundary(tmp_path: Path) -> None:
    """The console entry point: JSON errors on both streams, and a build killed mid-way."""
    shutil.copy(EXAMPLES / "mlp.onnx", tmp_path / "mlp.onnx")
    p = run_cli("build", "mlp.onnx", "--opt-level", "0", "--backend", "reference", "--json",
                cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2 and p.stdout == p.stderr and "Traceback" not in p.stderr
    assert "optimization level 0" in json.loads(p.stdout)["error"]["message"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["mlp.onnx"]
    p = run_cli("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q",
                cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr
    before = snapshot(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "reprobuild", "build", "mlp.onnx", "--lock", "t.lock",
         "--backend", "reference", "--cache-dir", "other-caches"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the first progress step: the build is under way
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert first and proc.returncode == -signal.SIGKILL, first
    after = snapshot(tmp_path)
    assert all(after.get(k) == v for k, v in before.items())
    assert not [k for k in after if k.endswith((".tmp", ".bak"))], after
