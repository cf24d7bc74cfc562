"""Inputs that are not regular files: a FIFO, a link to ``/dev/zero``, a folder, a link to
a FIFO. Each input of each command must be refused in one line (exit 2) before any read:
a FIFO would block ``open`` forever and ``/dev/zero`` passes every ``st_size`` cap (0).
An alarm turns a hang into a failure instead of a stuck test run.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from .helpers import assert_clean, snapshot

HOSTILE = ("fifo", "dev-zero", "folder", "link-to-fifo")


def make(path: Path, kind: str) -> None:
    """Put a ``kind`` of non-regular file at ``path`` (replacing what is there)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path.with_name(path.name + ".fifo"))
        path.symlink_to(path.name + ".fifo")


# command line, with X standing for the hostile path; the file X replaces, if any
CASES = {
    "show-lock": (("show", "--lock", "X"), None),
    "pin-lock": (("pin", "--lock", "X", "layer=fc1", "tactic=ref_matmul_tree8_f32"), None),
    "diff-lock": (("diff", "t.lock", "X"), None),
    "build-model": (("build", "X", "--lock", "n.lock", "--backend", "reference"), None),
    "locked-build-lock": (("build", "mlp.onnx", "--lock", "X", "--backend", "reference"), None),
    "verify-inputs": (("verify", "--lock", "t.lock", "--inputs", "X", "-n", "2"), None),
    "fp16-calibration": (
        (
            "build",
            "mlp.onnx",
            "--lock",
            "n.lock",
            "--precision",
            "fp16",
            "--calibration",
            "X.npz",
            "--backend",
            "reference",
        ),
        None,
    ),  # fmt: skip
    "log": (("log", "X"), None),
    "log-diff": (("log", "diff", "X", "X"), None),
    "layers": (("layers", "X"), None),
    "fleet-report": (("fleet", "X", "t.lock"), None),
    "cache-file": (("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference"), "cache"),
    "model-under-lock": (
        ("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference"),
        "mlp.onnx",
    ),  # fmt: skip
}


def _alarm(*_a: object) -> None:
    raise AssertionError("the command hung on a FIFO or a device")


@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize("case", sorted(CASES))
def test_non_regular_inputs_are_refused(proj: Path, cli, case: str, kind: str) -> None:
    args, replaces = CASES[case]
    if replaces == "cache":
        (target,) = sorted((proj / "caches").glob("*.cache"))
    elif replaces:
        target = proj / replaces
    else:
        target = proj / next(a for a in args if a.startswith("X"))
    make(target, kind)
    args = tuple(target.name if a.startswith("X") else a for a in args)
    before = snapshot(proj)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(60)
    try:
        r = cli(*args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if case == "fp16-calibration" and kind == "folder":  # a folder of samples is a source
        assert "no .npy or .npz files in the calibration folder" in r.err, r
    else:
        assert "not a regular file" in r.err or "is a directory" in r.err.lower(), (case, kind, r)
    if replaces == "cache" and r.code == 0:  # a bad cache is re-recorded, with a warning
        assert "re-recording" in r.err and target.is_file() and not target.is_symlink(), r
        return
    assert r.code == 2, (case, kind, r)
    assert_clean(r, proj, before)


def test_pipe_only_through_dash(proj: Path, tmp_path: Path) -> None:
    """``log -`` reads standard input once: the sniff's bytes reach the parser; a pipe
    given as ``/dev/stdin`` is refused with the way to read it."""
    from ..conftest import FIXTURES, run_cli

    log = next((FIXTURES / "trt-logs").glob("*trtexec_verbose*.log")).read_bytes()
    import subprocess
    import sys

    def piped(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "reprobuild", *args], input=log, capture_output=True,
            cwd=proj, timeout=120,
        )  # fmt: skip

    by_file = run_cli("log", str(next((FIXTURES / "trt-logs").glob("*trtexec_verbose*.log"))))
    dash = piped("log", "-")
    assert dash.returncode == 0 and by_file.returncode == 0, dash.stderr
    assert dash.stdout.decode().splitlines()[-1] == by_file.stdout.splitlines()[-1]
    assert " 0 record(s)" not in dash.stdout.decode()
    stdin = piped("log", "/dev/stdin")
    assert stdin.returncode == 2 and b"- reads standard input" in stdin.stderr, stdin.stderr


def test_log_refuses_a_lock_and_markdown(proj: Path, cli) -> None:
    (proj / "README.md").write_text("# Tool\n\nTensorRT tactics.\n\n## Usage\n\ntactic: 1\n")
    before = snapshot(proj)
    for name in ("t.lock", "README.md"):
        r = cli("log", name)
        assert r.code == 2 and "not a builder log" in r.err, r
        assert_clean(r, proj, before)


@pytest.mark.parametrize("value", ["abc", "\u00b2\u00b3", "-5", "1e9"])
def test_bad_cap_overrides_are_refused(proj: Path, cli, monkeypatch, value: str) -> None:
    monkeypatch.setenv("REPROBUILD_MAX_LOCK_BYTES", value)
    before = snapshot(proj)
    r = cli("show", "--lock", "t.lock")
    assert r.code == 2 and "REPROBUILD_MAX_LOCK_BYTES" in r.err, r
    assert_clean(r, proj, before)


def test_reads_stop_at_the_cap(proj: Path, cli, monkeypatch) -> None:
    """A file that grows past its cap after ``fstat`` is still not read past it."""
    monkeypatch.setenv("REPROBUILD_MAX_LOCK_BYTES", "100")
    r = cli("show", "--lock", "t.lock")
    assert r.code == 2 and "100-byte limit" in r.err, r
