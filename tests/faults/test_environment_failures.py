"""Failures of the machine, not of reprobuild, exit with a documented code and one line:
a full device under stdout (exit 2, naming the outputs already written) and numpy refusing
its own environment variable (exit 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _run(args: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, **kw.pop("env", {})}
    return subprocess.run([sys.executable, "-m", "reprobuild", *args], cwd=cwd, env=env,
                          stderr=subprocess.PIPE, text=True, **kw)  # fmt: skip


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_stdout_on_a_full_device_names_the_written_lock(proj: Path) -> None:
    with open("/dev/full", "w") as full:
        p = _run(["pin", "--lock", "t.lock", "layer=fc1", "tactic=ref_matmul_tree8_f32"],
                 proj, stdout=full)  # fmt: skip
    assert p.returncode == 2, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot write to the output stream") and "t.lock" in last


def test_numpy_refusing_its_environment_is_exit_3(proj: Path) -> None:
    p = _run(["verify", "--lock", "t.lock", "-n", "1", "-q"], proj,
             env={"NPY_DISABLE_CPU_FEATURES": "X86_V2"},
             stdout=subprocess.DEVNULL)  # fmt: skip
    if p.returncode == 0:
        pytest.skip("this numpy accepts the value (it only warns)")
    assert p.returncode == 3 and "numpy refuses this environment" in p.stderr, p.stderr
