"""SIGTERM and SIGHUP roll back like Ctrl-C, at every write step, and what a killed run
left beside a target is swept by the next write. A signal sent while the commit moves the
files is held until they are all in place, then says they were written.

The signal is really delivered (``os.kill`` of this process) at each step that makes a
write durable or visible; the CLI's handler turns it into an exception where the program
is, so the old outputs (or, past the last rename, the new ones) stay, with no temporary
file and no cache written by the interrupted build.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import restore, snapshot
from .test_faults import COMMANDS, STEPS


class Signaller:
    """Counts write steps; sends ``signum`` to this process at step ``at``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: int = -1, signum: int = 0) -> None:
        self.count, self.at, self.signum = 0, at, signum
        for name in STEPS:
            monkeypatch.setattr(os, name, self._wrap(getattr(os, name)))

    def _wrap(self, real):
        def step(*args, **kwargs):
            n = self.count
            self.count += 1
            if n == self.at:
                os.kill(os.getpid(), self.signum)
            return real(*args, **kwargs)

        return step


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["term", "hup"])
def test_signal_at_every_step(proj: Path, cli, monkeypatch, command: str, signum: int) -> None:
    args = COMMANDS[command]
    pristine = snapshot(proj)
    with monkeypatch.context() as m:
        counter = Signaller(m)
        assert cli(*args).code == 0
        steps = counter.count
    assert steps >= 2, steps
    done = snapshot(proj)
    restore(proj, pristine)
    for at in range(steps):
        before = snapshot(proj)
        with monkeypatch.context() as m:
            Signaller(m, at, signum)
            r = cli(*args)
        after = snapshot(proj)
        assert not [k for k in after if k.endswith((".tmp", ".bak"))], (at, after)
        if r.code == 0:  # the signal came after the last rename: the new outputs, whole
            assert after == done, at
        elif "after the outputs were written" in r.err:  # sent during the renames: held
            assert r.code == 128 + signum and "Traceback" not in r.err, (at, r)  # till done
            last = r.err.strip().splitlines()[-1]
            assert last.startswith(f"terminated (signal {signum}) after the outputs were "), r
            assert set(after) == set(done), at  # every new output (the report's times vary)
            assert all(after[k] == v for k, v in done.items() if "report" not in k), at
        else:
            assert r.code == 128 + signum and "Traceback" not in r.err, (at, r)
            assert r.err.strip().splitlines()[-1] == f"terminated (signal {signum})", r
            assert after == before, (at, r)  # old outputs, no new cache
        restore(proj, pristine)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers put back


def test_leftovers_of_a_killed_run_are_swept(proj: Path, cli) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(dead.stdout)
    left = [proj / f".t.lock.{pid}.abc123.tmp", proj / f".t.lock.{pid}.bak"]
    for p in left:
        p.write_text("left by a killed run")
    mine = proj / f".t.lock.{os.getpid()}.keep.tmp"  # a live process's file is kept
    mine.write_text("in use")
    r = cli("pin", "--lock", "t.lock", "layer=fc1", "tactic=ref_matmul_tree8_f32")
    assert r.code == 0, r
    assert not any(p.exists() for p in left) and mine.exists()


def test_sigterm_of_a_real_process_is_143(tmp_path: Path) -> None:
    """The handler at the process boundary: a build killed with SIGTERM mid-way."""
    import shutil

    from ..conftest import EXAMPLES

    shutil.copy(EXAMPLES / "mlp.onnx", tmp_path / "mlp.onnx")
    proc = subprocess.Popen(
        [sys.executable, "-m", "reprobuild", "build", "mlp.onnx", "--lock", "t.lock",
         "--backend", "reference"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the build is under way
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert first and proc.returncode in (0, 143), (proc.returncode, err)
    names = sorted(p.name for p in tmp_path.iterdir())
    if proc.returncode == 143 and "after the outputs were written" not in err:
        assert "Traceback" not in err and err.strip().endswith("terminated (signal 15)"), err
        assert names == ["mlp.onnx"], names  # no cache, and no folder made for one
    else:  # a process descheduled long enough lets the build finish: all outputs, no temps
        assert "Traceback" not in err, err
        assert {"t.lock", "mlp.engine", "caches"} <= set(names), names
        assert not [n for n in names if n.startswith(".") or "tmp" in n], names


LATE = """
import os, signal, sys
from reprobuild.cli.main import main
sys.argv = ["reprobuild", *sys.argv[1:]]
try:
    main()
finally:  # the signal lands as the interpreter shuts down, after every output is in place
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):
        pass
"""


@pytest.mark.parametrize(
    ("args", "outputs"),
    [
        (("build", "mlp.onnx", "--lock", "t.lock", "-q"), ["t.lock", "mlp.engine"]),
        (("stability", "mlp.onnx", "--records", "2", "--plot", "s.svg", "-q"), ["s.svg"]),
    ],
    ids=["build", "stability"],
)
def test_a_signal_after_the_command_names_its_outputs(
    tmp_path: Path, args: tuple[str, ...], outputs: list[str]
) -> None:
    """One line naming what was written, and nothing else (never a recording's temporary
    files): a signal after the end would otherwise kill the process without a word."""
    import shutil

    from ..conftest import EXAMPLES, child_env

    shutil.copy(EXAMPLES / "mlp.onnx", tmp_path / "mlp.onnx")
    p = subprocess.run(
        [sys.executable, "-c", LATE, *args, "--backend", "reference"],
        cwd=tmp_path, capture_output=True, text=True, env=child_env(), timeout=600,
    )  # fmt: skip
    assert p.returncode == 143, (p.returncode, p.stderr)
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("terminated (signal 15) after the outputs were written: "), last
    named = last.split("written: ", 1)[1].split(" (complete")[0].split(", ")
    assert all(n in named for n in outputs), named
    assert all((tmp_path / n).is_file() for n in named), named  # nothing that is gone
    assert "Traceback" not in p.stderr
