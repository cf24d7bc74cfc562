"""Time the imports on the build path against `python -c pass` (issue 15: goal <= 0.2 s).

Run: python scripts/bench_imports.py [--repeat 5]
Figures measured interleaved round after round (medians, every round printed):
``import numpy, onnx`` (the floor: the build needs both); ``import reprobuild.workflow.build``;
every module a locked rebuild of the small example model imports (recorded once from a real
rebuild, then imported alone in a fresh interpreter); the whole locked rebuild (the second
build with the same lock); and the same rebuild with its arguments read by typer (``-lPATH``,
which the typer-free reader in ``cli/fastargs`` leaves to typer), i.e. as every build ran
before that reader took ``build``.
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = Path(__file__).resolve().parent.parent / "reprobuild" / "examples" / "mlp.onnx"
_RECORD = (
    "import sys, runpy\n"
    "sys.argv = ['reprobuild', *sys.argv[2:]]\n"
    "try:\n"
    "    runpy.run_module('reprobuild', run_name='__main__', alter_sys=True)\n"
    "finally:\n"
    "    open(sys.argv_out, 'w').write('\\n'.join(sorted(sys.modules)))\n"
)


def _build_modules(build: list[str], out: Path) -> list[str]:
    """The top-level names of every module a locked rebuild imports (then imported alone)."""
    code = _RECORD.replace("sys.argv_out", repr(str(out)))
    subprocess.run(
        [sys.executable, "-c", code, "-", *build], capture_output=True, check=True, cwd=out.parent
    )  # in the temporary directory: the build writes its engine and report into the cwd
    names = out.read_text().split("\n")
    return sorted({n for n in names if not n.startswith("__main__")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    # As installed: pip byte-compiles the package, so no round should pay for compiling
    # reprobuild's sources (PYTHONDONTWRITEBYTECODE, set on some machines, stops the first
    # round from writing the .pyc files the later ones would read).
    compileall.compile_dir(str(MODEL.parent.parent), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        lock = Path(tmp) / "t.lock"
        build = ["build", str(MODEL), "--lock", str(lock), "--backend", "reference"]
        rb = [sys.executable, "-m", "reprobuild", *build]
        subprocess.run(rb, capture_output=True, check=True, cwd=tmp)  # records the lock
        modules = _build_modules(build, Path(tmp) / "modules.txt")
        imports = (
            "import importlib\n"
            f"for m in {modules!r}:\n"
            "    try:\n        importlib.import_module(m)\n"
            "    except Exception:\n        pass\n"
        )
        via_typer = [*rb[:-4], f"-l{lock}", *rb[-2:]]  # same build; typer reads -lPATH
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import numpy, onnx (floor)": [sys.executable, "-c", "import numpy, onnx"],
            "import reprobuild.workflow.build": [
                sys.executable, "-c", "import reprobuild.workflow.build"
            ],
            f"imports of a locked rebuild ({len(modules)} modules)": [
                sys.executable, "-c", imports
            ],
            "locked rebuild (whole command)": rb,
            "locked rebuild, arguments read by typer": via_typer,
        }  # fmt: skip
        times: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                t0 = time.perf_counter()
                subprocess.run(cmd, capture_output=True, check=True, cwd=tmp)
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["python -c pass"])
    print(
        f"median of {args.repeat} rounds; 'net' is minus `python -c pass`; goal: imports <= 0.2 s"
    )
    print(f"{'command':<44} {'seconds':>8} {'net':>7}  rounds")
    for name, ts in times.items():
        med = statistics.median(ts)
        rounds = " ".join(f"{t:.3f}" for t in ts)
        print(f"{name:<44} {med:8.3f} {med - base:7.3f}  {rounds}")


if __name__ == "__main__":
    main()
