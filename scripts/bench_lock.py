"""Time `reprobuild show`, `pin` and `diff` on a 10,000-layer lock against `python -c pass`.

Run: python scripts/bench_lock.py [--layers 10000] [--repeat 5]
Commands are run interleaved, round after round, so machine noise hits all of them alike;
the figures are medians of wall time and ratios to the interpreter's own start-up
(``python -c pass``, measured in the same rounds), each beside its goal (issue 15: each
lock command <= 0.3 s as a whole command). A warm-up round runs first with bytecode
writing allowed, so the commands import from ``.pyc`` files as an installed package does
even when PYTHONDONTWRITEBYTECODE is set. The CPU seconds (user + system) of each command
are printed too: on a shared machine they vary less than wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reprobuild.lock.model import LayerEntry, Lock, LockCandidate, ModelInfo
from reprobuild.lock.yamlio import save_lock
from reprobuild.types import BuildSettings, Environment


def make_lock(n: int, shift: int = 0) -> Lock:
    layers = []
    for i in range(n):
        cands = [LockCandidate((i << 8) + j + 1, f"sm80_xmma_kernel_{j}") for j in range(6)]
        pick = cands[(i + shift) % 6 if i % 97 == 0 else 0]
        layers.append(
            LayerEntry(
                f"0x{i:032x}", f"/model/layer{i}/Conv", pick.tactic, pick.kernel, False, cands
            )
        )
    return Lock(
        ModelInfo("model.onnx", "0" * 64),
        Environment("tensorrt", "10.13.3", "NVIDIA A100-SXM4-80GB", "8.0", "12.9", "575.57"),
        BuildSettings(),
        layers,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a.lock", Path(tmp) / "b.lock"
        save_lock(make_lock(args.layers), a)
        save_lock(make_lock(args.layers, shift=1), b)
        size = a.stat().st_size
        rb = [sys.executable, "-m", "reprobuild"]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "reprobuild --help": [*rb, "--help"],
            "show": [*rb, "show", "--lock", str(a)],
            "pin": [*rb, "pin", "layer=/model/layer5/Conv", "tactic=0x503", "--lock", str(a)],
            "diff": [*rb, "diff", str(a), str(b)],
        }
        goals = {"show": 0.3, "pin": 0.3, "diff": 0.3}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        for cmd in commands.values():  # warm-up: .pyc files written, file cache warm
            subprocess.run(cmd, capture_output=True, env=env)
        times: dict[str, list[float]] = {k: [] for k in commands}
        cpu: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True)
                times[name].append(time.perf_counter() - t0)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
                if proc.returncode not in (0, 1):
                    raise SystemExit(f"{name} failed: {proc.stderr.decode()[-500:]}")
        base = statistics.median(times["python -c pass"])
        print(f"lock: {args.layers} layers, {size / 1e6:.1f} MB; median of {args.repeat} runs")
        print(
            f"{'command':<20} {'seconds':>8} {'goal':>8} {'x python -c pass':>17} "
            f"{'cpu s':>6}  rounds"
        )
        for name, ts in times.items():
            med = statistics.median(ts)
            rounds = " ".join(f"{t:.3f}" for t in ts)
            goal = f"<= {goals[name]:.1f}" if name in goals else "-"
            verdict = ("  ok" if med <= goals[name] else "  OVER") if name in goals else ""
            used = statistics.median(cpu[name])
            print(
                f"{name:<20} {med:8.3f} {goal:>8} {med / base:17.1f} {used:6.3f}  {rounds}{verdict}"
            )


if __name__ == "__main__":
    main()
