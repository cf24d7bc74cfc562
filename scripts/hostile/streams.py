"""The machine under the command: stdout on a full device, an address-space limit, numpy
refusing its own environment. Each is a documented exit, never exit 4."""

from __future__ import annotations

from pathlib import Path

from hostile.core import BUILD, ROOT, Probe

FULL = r"""
import os, sys
os.dup2(os.open("/dev/full", os.O_WRONLY), 1)
from reprobuild.cli.main import main
sys.argv = ["reprobuild", *sys.argv[1:]]
main()
"""
"""The command with its stdout on /dev/full (every write: ENOSPC); stderr still read."""

LIMITED = r"""
import resource, sys
limit = 4 << 30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from reprobuild.cli.main import main
sys.argv = ["reprobuild", *sys.argv[1:]]
main()
"""
"""The command under ``ulimit -v 4G``: reads must not reserve their whole cap up front."""


def _inputs(root: Path) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    np.savez(root / "small.npz", input=rng.standard_normal((6, 1024)).astype("float32"))


def _written_then_refused(root: Path, code: int, text: str) -> str | None:
    """pin --json on a full stdout: the pin is made, then exit 2 names the lock."""
    if code == 2 and "after the outputs were written: t.lock" in text:
        return "accepted"
    return f"unclean: exit {code}"


def probes() -> list[Probe]:
    log = str(ROOT / "tests" / "fixtures" / "logparse" / "ref_editable.log")
    full = {"driver": FULL}
    return [
        Probe("stdout-full-show", ("show", "--lock", "t.lock"), **full),
        Probe("stdout-full-diff-json", ("diff", "t.lock", "t.lock", "--json"), **full),
        Probe("stdout-full-log", ("log", log), **full),
        Probe("stdout-full-doctor-json", ("doctor", "--json"), **full),
        Probe(
            "stdout-full-pin-json",
            ("pin", "--lock", "t.lock", "layer=fc1", "tactic=ref_matmul_tree8_f32", "--json"),
            check=_written_then_refused,
            **full,
        ),  # fmt: skip
        Probe(
            "ulimit-v-verify-inputs",
            (
                "verify",
                "--lock",
                "t.lock",
                "-n",
                "1",
                "--no-control",
                "--inputs",
                "small.npz",
                "-q",
            ),
            _inputs,
            accept=True,
            driver=LIMITED,
        ),  # fmt: skip
        Probe("ulimit-v-frozen-build", (*BUILD, "--frozen"), accept=True, driver=LIMITED),
        Probe(
            "npy-disable-baseline-feature",
            (*BUILD, "--frozen"),
            accept=True,
            env={"NPY_DISABLE_CPU_FEATURES": "X86_V2"},
        ),  # fmt: skip
    ]
