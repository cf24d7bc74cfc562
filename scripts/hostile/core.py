"""What every probe shares: the probe and its outcome, the launcher that runs each one in
a child process (``ru_maxrss`` per child), the judge, and the recorded project each probe
gets a fresh copy of."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

Setup = Callable[[Path], None]
Check = Callable[[Path, int, str], "str | None"]
TIMEOUT = 120.0

PIN = ("pin", "--lock", "t.lock", "layer=fc1", "tactic=ref_matmul_tree8_f32")
BUILD = ("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q")


@dataclass
class Probe:
    name: str
    args: tuple[str, ...]
    setup: Setup = lambda _p: None
    env: dict[str, str] = field(default_factory=dict)
    accept: bool = False  # exit 0 is the documented right behaviour
    # after the run, given the exit code and output: a verdict ("accepted", "unclean: why")
    # that replaces the judge's, or None to let the judge decide
    check: Check = lambda _p, _c, _t: None
    driver: str | None = None  # Python code run with the arguments instead of the CLI


@dataclass
class Outcome:
    probe: Probe
    code: int
    seconds: float
    peak_mib: float
    verdict: str  # "refused", "accepted" or "unclean: why"


LAUNCHER = r"""
import json, os, subprocess, sys, tempfile, time
for line in sys.stdin:
    job = json.loads(line)
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(job["argv"], cwd=job["cwd"], env=job["env"],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > job["timeout"]:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    print(json.dumps([proc.returncode, text, seconds, usage.ru_maxrss / 1024]), flush=True)
"""
"""Runs each probe and reports its ``ru_maxrss`` (``os.wait4``). It is started before this
script imports anything large: on Linux a child's peak RSS starts at its parent's RSS at the
fork (kept across ``exec``), so children of this script (numpy, onnx loaded for the set-ups)
would all report at least its size."""


class Launcher:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)  # fmt: skip

    def run(
        self, args: list[str], cwd: Path, env: dict[str, str], driver: str | None = None
    ) -> tuple[int, str, float, float]:
        """(exit code, stdout and stderr, seconds, peak MiB) of one ``python -m reprobuild``
        (or of ``driver``, Python code given the same arguments)."""
        import json

        assert self.proc.stdin is not None and self.proc.stdout is not None
        head = ["-m", "reprobuild"] if driver is None else ["-c", driver]
        job = {"argv": [sys.executable, *head, *args], "cwd": str(cwd),
               "env": child_env(env), "timeout": TIMEOUT}  # fmt: skip
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        code, text, seconds, peak = json.loads(self.proc.stdout.readline())
        return code, text, seconds, peak

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def judge(p: Probe, code: int, err: str, before: dict[str, bytes], root: Path) -> str:
    if "Traceback" in err:
        return "unclean: a traceback"
    if "Warning:" in err:
        return "unclean: a raw Python warning"
    if "hunter2" in err:
        return "unclean: echoed the bytes of a file it was linked to"
    if code == 0:
        return "accepted" if p.accept else "unclean: exit 0 for hostile input"
    if code < 0 or code == 4 or code not in (1, 2, 3):
        return f"unclean: exit {code}"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    json_error = "--json" in p.args and lines and lines[-1].startswith('{"error": ')
    if not lines or not (lines[-1].startswith("error: ") or json_error):
        return "unclean: no one-line error"
    from tests.faults.helpers import snapshot

    after = snapshot(root)
    changed = [k for k, v in before.items() if after.get(k) != v]
    if changed:
        return f"unclean: changed {changed}"
    if [k for k in after if k.endswith((".tmp", ".bak"))]:
        return "unclean: temporary files left"
    return "refused"


def cache(root: Path) -> Path:
    """The recording cache of ``t.lock`` (the FP32 build of mlp.onnx itself; the FP16 and
    INT8 builds' caches are keyed by their converted models)."""
    import hashlib

    sha = hashlib.sha256((root / "mlp.onnx").read_bytes()).hexdigest()[:16]
    (cache,) = (root / "caches").glob(f"*-{sha}.cache")
    return cache


def edit_lock(old: str, new: str) -> Setup:
    def edit(root: Path) -> None:
        lock = root / "t.lock"
        text = lock.read_text()
        found = re.search(old, text)
        if found is None:
            raise SystemExit(f"probe setup: {old!r} not in t.lock")
        lock.write_text(text[: found.start()] + found.expand(new) + text[found.end() :])

    return edit


def make_project(root: Path) -> None:
    """mlp.onnx with an FP32 lock (t.lock), an FP16 lock (f.lock) and an INT8 lock."""
    import numpy as np

    shutil.copy(ROOT / "reprobuild" / "examples" / "mlp.onnx", root / "mlp.onnx")
    np.savez(
        root / "cal.npz",
        input=np.random.default_rng(0).standard_normal((8, 1024)).astype("float32"),
    )
    for args in (
        ("--lock", "t.lock"),
        ("--lock", "f.lock", "--precision", "fp16", "--out", "f.engine"),
        ("--lock", "i8.lock", "--precision", "int8", "--calibration", "cal.npz",
         "--calib-method", "minmax", "--out", "i8.engine"),
    ):  # fmt: skip
        run_cli(root, "build", "mlp.onnx", *args, "--backend", "reference", "-q")
    (root / "cal.npz").unlink()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment with this checkout first on ``PYTHONPATH``: every child runs the
    code beside this script, whatever else is installed."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **(extra or {})}


def run_cli(root: Path, *args: str) -> None:
    """A set-up step through the CLI; the script stops if it fails (no probe would mean
    anything)."""
    p = subprocess.run([sys.executable, "-m", "reprobuild", *args], cwd=root,
                       capture_output=True, text=True, env=child_env())  # fmt: skip
    if p.returncode != 0:
        sys.exit(f"probe set-up failed: reprobuild {' '.join(args)}: {p.stderr.strip()}")


def last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def named_outputs(root: Path, line: str) -> list[str]:
    """The files a signal's line says were written (``after the outputs were written:
    A, B (complete; ...)``); [] when it names none."""
    if "after the outputs were written: " not in line:
        return []
    return line.split("written: ", 1)[1].rsplit(" (complete", 1)[0].split(", ")
