"""Outputs that are inputs (or other outputs): refused in one line before any work.

Writing ``--report`` over the lock or ``--out`` over the model would replace the very file
the command read; the check compares files (``samefile``), so a symlink, a hard link or
``./name`` is caught as well as the same spelling.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .helpers import assert_clean, snapshot

BUILD = ("build", "mlp.onnx", "--backend", "reference", "-q")
CASES = {
    "report-is-lock": (*BUILD, "--lock", "t.lock", "--report", "t.lock"),
    "out-is-lock": (*BUILD, "--lock", "t.lock", "--out", "t.lock"),
    "out-is-model": (*BUILD, "--lock", "t.lock", "--out", "mlp.onnx"),
    "report-is-model": (*BUILD, "--lock", "n.lock", "--report", "./mlp.onnx"),
    "lock-is-out": (*BUILD, "--lock", "x.bin", "--out", "x.bin"),
    "report-is-layers": (
        *BUILD,
        "--lock",
        "n.lock",
        "--out",
        "e.engine",
        "--report",
        "e.engine.layers.json",
    ),  # fmt: skip
    "out-links-to-lock": (*BUILD, "--lock", "t.lock", "--out", "link.engine"),
    "out-hard-links-model": (*BUILD, "--lock", "n.lock", "--out", "hard.engine"),
    "lock-is-model": (*BUILD, "--lock", "mlp.onnx"),
    "verify-report-is-lock": ("verify", "--lock", "t.lock", "--report", "t.lock", "-n", "1"),
    "verify-report-is-model": ("verify", "--lock", "t.lock", "--report", "mlp.onnx", "-n", "1"),
}


@pytest.fixture
def proj(proj: Path) -> Path:
    """The shared project, with a symlink to its lock and a hard link to its model."""
    (proj / "link.engine").symlink_to("t.lock")
    os.link(proj / "mlp.onnx", proj / "hard.engine")
    return proj


@pytest.mark.parametrize("case", sorted(CASES))
def test_output_over_an_input_is_refused(proj: Path, cli, monkeypatch, case: str) -> None:
    from reprobuild.backends.reference import ReferenceBackend

    def no_build(*_a, **_k):
        raise AssertionError("the build ran before its outputs were compared with its inputs")

    monkeypatch.setattr(ReferenceBackend, "build", no_build)
    before = snapshot(proj)
    r = cli(*CASES[case])
    assert r.code == 2 and "would overwrite" in r.err, (case, r)
    assert [ln for ln in r.err.splitlines() if not ln.startswith("[")] == [
        r.err.splitlines()[-1]
    ], r
    assert_clean(r, proj, before)
    assert (proj / "link.engine").is_symlink()
