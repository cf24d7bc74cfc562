#!/usr/bin/env python3
"""Peak memory of ``verify --rebuilds N`` against the recording build of the same model.

Why: verify rebuilds the engine several times and runs controls; if it holds one rebuild's
engine, folded weights and outputs while the next one builds, its peak grows with every
copy. The goal is a verify peak <= 1.2x the recording build's. Both commands run
as children of ``/usr/bin/time -v`` (a small C parent, so the peak is the command's own; a
Python parent's ``ru_maxrss`` would carry over fork), in one run, alternating, ``--rounds``
times; the median of each is printed with every round. The recording build is the anchor.

    python scripts/bench_verify_memory.py                      # resnet50, re-weighted
    python scripts/bench_verify_memory.py --models resnet50 vgg19 --rounds 1
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the corpus with power lives in tests/models
from tests.models import zoo  # noqa: E402

GOAL = 1.2


def peak_mb(argv: list[str], cwd: Path) -> tuple[float, int]:
    """(peak RSS in MB, exit code) of one command run under ``/usr/bin/time -v``."""
    proc = subprocess.run(
        ["/usr/bin/time", "-v", *argv], cwd=cwd, capture_output=True, text=True, check=False
    )
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    if m is None:
        raise SystemExit(f"no peak from /usr/bin/time for {argv}:\n{proc.stderr[-2000:]}")
    return int(m.group(1)) / 1024, proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet50"], choices=zoo.MODELS)
    ap.add_argument("--rebuilds", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--zoo-dir", type=Path, default=None, help="re-weighted models (cached)")
    args = ap.parse_args(argv)
    if not Path("/usr/bin/time").exists():
        raise SystemExit("needs /usr/bin/time (GNU time) for the peak RSS")
    cli = [sys.executable, "-m", "reprobuild"]
    with tempfile.TemporaryDirectory(prefix="bench-verify-mem-") as tmp:
        work = Path(tmp)
        zoo_dir = args.zoo_dir or work
        for name in args.models:
            model = zoo.reweighted_path(name, zoo_dir, 0)
            rec, ver = [], []
            for r in range(args.rounds):
                run = work / f"{name}-{r}"
                run.mkdir()
                shutil.copy(model, run / "model.onnx")
                build = [*cli, "build", "model.onnx", "--lock", "t.lock", "-q"]
                mb, rc = peak_mb(build, run)
                if rc:
                    raise SystemExit(f"recording build failed (exit {rc})")
                rec.append(mb)
                verify = [*cli, "verify", "--lock", "t.lock", "--rebuilds", str(args.rebuilds)]
                mb, rc = peak_mb([*verify, "-q"], run)
                if rc:
                    raise SystemExit(f"verify failed (exit {rc})")
                ver.append(mb)
            a, b = statistics.median(rec), statistics.median(ver)
            print(
                f"{name}: recording build {a:.0f} MB, verify --rebuilds {args.rebuilds} "
                f"{b:.0f} MB: ratio {b / a:.2f}x (goal <= {GOAL}x)"
            )
            print(
                f"  rounds: build {[round(x) for x in rec]} MB, verify {[round(x) for x in ver]} MB"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
