"""Time `reprobuild show`, `pin` and `diff` on a 10,000-layer lock against PyYAML's C loader.

Run: python scripts/bench_lock.py [--layers 10000] [--repeat 5]
The goal: each command takes at most 0.5x the time of loading the same lock with
``yaml.load(text, Loader=yaml.CSafeLoader)`` alone in a fresh interpreter (the baseline
rows). ``show`` runs on two locks: the writer's own (canonical) output and the same data
written by ``yaml.safe_dump``, each against the baseline of loading that lock; ``pin``
(which reads and rewrites the lock) and ``diff`` (which reads two) run on canonical locks.
Commands are run interleaved, round after round, so machine noise hits all of them alike;
the figures are medians of wall time. A warm-up round runs first with bytecode writing
allowed, so the commands import from ``.pyc`` files as an installed package does even when
PYTHONDONTWRITEBYTECODE is set. The CPU seconds (user + system) of each command are printed
too: on a shared machine they vary less than wall time.
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

import yaml

from reprobuild.lock.model import LayerEntry, Lock, LockCandidate, ModelInfo, OutputDigest
from reprobuild.lock.yamlio import dumps_lock, save_lock
from reprobuild.types import BuildSettings, Environment

GOAL = 0.5  # at most this many times the C loader's time on the same lock


def make_lock(n: int, shift: int = 0, gpu: str = "NVIDIA A100-SXM4-80GB") -> Lock:
    """One target of ``n`` layers with six candidates and a recorded time each."""
    layers = []
    for i in range(n):
        cands = [LockCandidate((i << 8) + j + 1, f"sm80_xmma_kernel_{j}") for j in range(6)]
        pick = cands[(i + shift) % 6 if i % 97 == 0 else 0]
        layers.append(
            LayerEntry(
                f"0x{i:032x}",
                f"/model/layer{i}/Conv",
                pick.tactic,
                pick.kernel,
                False,
                cands,
                time_ms=0.0123 + i * 1e-6,
            )  # fmt: skip
        )
    identity = {"tensorrt_version": "10.13.3.9", "gpu": gpu, "compute_capability": "8.0"}
    advisory = {"driver_version": "575.57", "cuda_runtime": "12.9"}
    return Lock(
        ModelInfo("model.onnx", "0" * 64),
        Environment.make("tensorrt", {**identity, "sm_count": "108", "cuda_major": "12"}, advisory),
        BuildSettings(),
        layers,
        outputs=[OutputDigest("seeded:0", "ab" * 32)],
    )


def _c_load(path: Path) -> list[str]:
    code = f"import yaml; yaml.load(open({str(path)!r}).read(), Loader=yaml.CSafeLoader)"
    return [sys.executable, "-c", code]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if not getattr(yaml, "__with_libyaml__", False):
        raise SystemExit("PyYAML is built without libyaml here: no CSafeLoader to compare with")
    with tempfile.TemporaryDirectory() as tmp:
        a, b, dumped = Path(tmp) / "a.lock", Path(tmp) / "b.lock", Path(tmp) / "dumped.lock"
        save_lock(make_lock(args.layers), a)
        save_lock(make_lock(args.layers, shift=1), b)
        h100 = Path(tmp) / "h100.lock"  # a second target: what `merge` joins
        save_lock(make_lock(args.layers, shift=2, gpu="NVIDIA H100 80GB HBM3"), h100)
        dumped.write_text(yaml.safe_dump(yaml.safe_load(dumps_lock(make_lock(args.layers)))))
        rb = [sys.executable, "-m", "reprobuild"]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "CSafeLoader load": _c_load(a),
            "CSafeLoader load (dumped)": _c_load(dumped),
            "show": [*rb, "show", "--lock", str(a)],
            "show (dumped)": [*rb, "show", "--lock", str(dumped)],
            "pin": [*rb, "pin", "layer=/model/layer5/Conv", "tactic=0x503", "--lock", str(a)],
            "diff": [*rb, "diff", str(a), str(b)],
            "merge (2 targets)": [
                *rb,
                "merge",
                str(a),
                str(h100),
                "--out",
                str(Path(tmp) / "m.lock"),
            ],
        }
        # Each command against the C loader on the lock it reads (diff reads two like it).
        baseline = {name: "CSafeLoader load" for name in ("show", "pin", "diff")}
        baseline["show (dumped)"] = "CSafeLoader load (dumped)"
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
        _report(args, a.stat().st_size, dumped.stat().st_size, times, cpu, baseline)
        per_layer = a.stat().st_size / args.layers
        print(f"lock bytes per layer (one target, recorded times): {per_layer:.0f}")


def _report(
    args: argparse.Namespace,
    size: int,
    dumped_size: int,
    times: dict[str, list[float]],
    cpu: dict[str, list[float]],
    baseline: dict[str, str],
) -> None:
    print(
        f"lock: {args.layers} layers, {size / 1e6:.1f} MB (dumped by yaml.safe_dump: "
        f"{dumped_size / 1e6:.1f} MB); median of {args.repeat} runs"
    )
    print(f"PyYAML {yaml.__version__}, libyaml {yaml.__with_libyaml__}; goal: ratio <= {GOAL}")
    print(
        f"{'command':<26} {'seconds':>8} {'baseline':>9} {'ratio':>6} {'goal':>7} "
        f"{'cpu s':>6} {'cpu ratio':>9}  rounds"
    )
    for name, ts in times.items():
        med = statistics.median(ts)
        used = statistics.median(cpu[name])
        rounds = " ".join(f"{t:.3f}" for t in ts)
        base = baseline.get(name)
        if base is None:
            cells = f"{'-':>9} {'-':>6} {'-':>7} {used:6.3f} {'-':>9}"
            verdict = ""
        else:
            ref = statistics.median(times[base])
            ratio = med / ref
            cpu_ratio = used / statistics.median(cpu[base])
            cells = f"{ref:9.3f} {ratio:6.2f} {'<= ' + str(GOAL):>7} {used:6.3f} {cpu_ratio:9.2f}"
            verdict = "  ok" if ratio <= GOAL else "  OVER"
        print(f"{name:<26} {med:8.3f} {cells}  {rounds}{verdict}")


if __name__ == "__main__":
    main()
