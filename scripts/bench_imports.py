"""Time the imports on the build path against `python -c pass` (goal: <= 0.2 s).

Run: python scripts/bench_imports.py [--repeat 5] [--baseline REV]
Figures measured interleaved round after round (medians, every round printed):
``import numpy, onnx`` (the floor: the build needs both); ``import reprobuild.workflow.build``;
every module a locked rebuild of the small example model imports (recorded once from a real
rebuild, then imported alone in a fresh interpreter); and the whole locked rebuild (the
second build with the same lock). ``--baseline REV`` adds the last two for the package as
git revision REV has it (``git archive``, first on ``PYTHONPATH``), in the same rounds. The
CPU seconds (user + system) of each command are printed too: on a shared machine they vary
less than wall time.
"""

from __future__ import annotations

import argparse
import compileall
import io
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "reprobuild" / "examples" / "mlp.onnx"
_RECORD = (
    "import sys, runpy\n"
    "sys.argv = ['reprobuild', *sys.argv[2:]]\n"
    "try:\n"
    "    runpy.run_module('reprobuild', run_name='__main__', alter_sys=True)\n"
    "finally:\n"
    "    open(sys.argv_out, 'w').write('\\n'.join(sorted(sys.modules)))\n"
)
Command = tuple[list[str], Path, dict[str, str]]  # argv, working directory, environment


def _build_modules(build: list[str], out: Path, env: dict[str, str]) -> list[str]:
    """The top-level names of every module a locked rebuild imports (then imported alone)."""
    code = _RECORD.replace("sys.argv_out", repr(str(out)))
    subprocess.run(
        [sys.executable, "-c", code, "-", *build],
        capture_output=True,
        check=True,
        cwd=out.parent,
        env=env,
    )  # in the build's own directory: the build writes its engine and report into the cwd
    names = out.read_text().split("\n")
    return sorted({n for n in names if not n.startswith("__main__")})


def _rebuild(label: str, work: Path, env: dict[str, str]) -> dict[str, Command]:
    """The rows of one tree: the imports of its locked rebuild, and the rebuild itself."""
    work.mkdir()
    lock = work / "t.lock"
    build = ["build", str(MODEL), "--lock", str(lock), "--backend", "reference"]
    rb = [sys.executable, "-m", "reprobuild", *build]
    subprocess.run(rb, capture_output=True, check=True, cwd=work, env=env)  # records the lock
    modules = _build_modules(build, work / "modules.txt", env)
    imports = (
        "import importlib\n"
        f"for m in {modules!r}:\n"
        "    try:\n        importlib.import_module(m)\n"
        "    except Exception:\n        pass\n"
    )
    return {
        f"imports of a locked rebuild{label} ({len(modules)} modules)": (
            [sys.executable, "-c", imports],
            work,
            env,
        ),
        f"locked rebuild{label} (whole command)": (rb, work, env),
    }


def _baseline_tree(rev: str, dest: Path) -> dict[str, str]:
    """The package as ``rev`` has it, byte-compiled; the environment that imports it."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "reprobuild"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    compileall.compile_dir(str(dest / "reprobuild"), quiet=1)
    paths = [str(dest), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    where = subprocess.run(
        [sys.executable, "-c", "import reprobuild; print(reprobuild.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=dest.parent,
        env=env,
    ).stdout.strip()
    if not Path(where).is_relative_to(dest):
        sys.exit(f"--baseline {rev}: the baseline tree is not what imports ({where})")
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", metavar="REV", help="also time this git revision's rebuild")
    args = ap.parse_args()
    # As installed: pip byte-compiles the package, so no round should pay for compiling
    # reprobuild's sources (PYTHONDONTWRITEBYTECODE, set on some machines, stops the first
    # round from writing the .pyc files the later ones would read).
    compileall.compile_dir(str(MODEL.parent.parent), quiet=1)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        env = dict(os.environ)
        commands: dict[str, Command] = {
            "python -c pass": ([sys.executable, "-c", "pass"], tmp, env),
            "import numpy, onnx (floor)": ([sys.executable, "-c", "import numpy, onnx"], tmp, env),
            "import reprobuild.workflow.build": (
                [sys.executable, "-c", "import reprobuild.workflow.build"],
                tmp,
                env,
            ),
            **_rebuild("", tmp / "new", env),
        }
        if args.baseline:
            base_env = _baseline_tree(args.baseline, tmp / "baseline-tree")
            commands.update(_rebuild(f", {args.baseline}", tmp / "baseline", base_env))
        times: dict[str, list[float]] = {k: [] for k in commands}
        cpu: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(args.repeat):
            for key, (cmd, cwd, cmd_env) in commands.items():
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                subprocess.run(cmd, capture_output=True, check=True, cwd=cwd, env=cmd_env)
                times[key].append(time.perf_counter() - t0)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[key].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    base = statistics.median(times["python -c pass"])
    print(
        f"median of {args.repeat} rounds; 'net' is minus `python -c pass`; goal: imports <= 0.2 s"
    )
    width = max(len(k) for k in times) + 2
    print(f"{'command':<{width}} {'seconds':>8} {'net':>7} {'cpu s':>6}  rounds")
    for key, ts in times.items():
        med = statistics.median(ts)
        rounds = " ".join(f"{t:.3f}" for t in ts)
        used = statistics.median(cpu[key])
        print(f"{key:<{width}} {med:8.3f} {med - base:7.3f} {used:6.3f}  {rounds}")


if __name__ == "__main__":
    main()
