#!/usr/bin/env python3
"""A recording build alone and with a second build running on the same cores, per BLAS
thread setting, side by side in one run.

Why: autotuning picks the fastest kernel, so its timings must measure kernels, not the
neighbours (ResNet50 2.9 s quiet vs 13.8 s with another build; goal: contended
<= 1.5x quiet). For each ``--threads`` value (default ``1 0``: one BLAS thread, and the BLAS
default of one per core) and each round, in alternating order, one child process does a
recording build of the re-weighted model alone (the anchor), then again while a neighbour
process loops recording builds of the same model with the same setting. Each build runs in
a fresh child (nothing cached in memory) and reports its wall and CPU seconds. Medians and
every round are printed, with the load average: on a shared machine the "quiet" runs are
only as quiet as the machine.

    python scripts/bench_contention.py                       # resnet50, threads 1 and 0
    python scripts/bench_contention.py --models squeezenet --rounds 5 --threads 1 2 0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the corpus with power lives in tests/models
from tests.models import zoo  # noqa: E402

GOAL = 1.5


def child(model: str, threads: int, loop: bool) -> None:
    """One recording build (or, with ``loop``, builds until killed): the neighbour or the
    measured build. Prints wall and CPU seconds, the threads used and the tactic map."""
    from reprobuild.backends.reference import ReferenceBackend
    from reprobuild.types import BuildSettings

    backend = ReferenceBackend(threads=threads)
    while True:
        cache = backend.create_timing_cache()
        wall, cpu = time.perf_counter(), time.process_time()
        out = backend.build(model, BuildSettings(), cache, lambda line: None)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if not loop:
            tactics = out.extra["tactic_map"]
            print(
                json.dumps(
                    {
                        "wall": wall,
                        "cpu": cpu,
                        "threads": out.extra["blas_threads"],
                        "tactics": {k: f"0x{v:x}" for k, v in tactics.items()},
                    }
                )
            )
            return


def spawn(model: Path, threads: int, loop: bool) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = [sys.executable, __file__, "--child", str(model), "--threads", str(threads)]
    return subprocess.Popen(
        [*argv, *(["--loop"] if loop else [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if loop else None,
        text=True,
        env=env,
    )


def measure(model: Path, threads: int, contended: bool) -> dict:
    neighbour = spawn(model, threads, True) if contended else None
    try:
        if neighbour is not None:
            time.sleep(1.0)  # let the neighbour get past its imports and into a build
        proc = spawn(model, threads, False)
        out, _ = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"build child failed (exit {proc.returncode})")
        return json.loads(out)
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet50"], choices=zoo.MODELS)
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--zoo-dir", type=Path, default=None, help="re-weighted models (cached)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.threads[0], args.loop)
        return 0
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="bench-contention-") as tmp:
        for name in args.models:
            model = zoo.reweighted_path(name, args.zoo_dir or Path(tmp), 0)
            runs: dict[tuple[int, bool], list[dict]] = {}
            for r in range(args.rounds):
                order = args.threads if r % 2 == 0 else args.threads[::-1]
                for t in order:
                    for contended in (False, True) if r % 2 == 0 else (True, False):
                        runs.setdefault((t, contended), []).append(measure(model, t, contended))
            report(name, args.threads, runs)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


def report(name: str, threads: list[int], runs: dict[tuple[int, bool], list[dict]]) -> None:
    quiet_1 = None
    for t in threads:
        q, c = runs[(t, False)], runs[(t, True)]
        qw, cw = statistics.median(x["wall"] for x in q), statistics.median(x["wall"] for x in c)
        used = q[0]["threads"]
        label = f"threads={t}" + (f" (BLAS default: {used})" if t == 0 else "")
        ratio = cw / qw
        print(
            f"{name} {label}: quiet {qw:.2f} s, with a neighbour build {cw:.2f} s: "
            f"{ratio:.2f}x (goal <= {GOAL}x: {'met' if ratio <= GOAL else 'NOT met'})"
        )
        print(
            f"  rounds wall quiet {[round(x['wall'], 2) for x in q]}, "
            f"contended {[round(x['wall'], 2) for x in c]}; CPU s quiet "
            f"{[round(x['cpu'], 2) for x in q]}, contended {[round(x['cpu'], 2) for x in c]}"
        )
        qc, cc = statistics.median(x["cpu"] for x in q), statistics.median(x["cpu"] for x in c)
        print(
            f"  CPU seconds (what a neighbour's spinning inflates; waiting for a core does not): "
            f"quiet {qc:.2f}, contended {cc:.2f}: {cc / qc:.2f}x"
        )
        tactic_sets = {json.dumps(x["tactics"], sort_keys=True) for x in q + c}
        print(f"  distinct tactic maps over these {len(q) + len(c)} builds: {len(tactic_sets)}")
        if quiet_1 is None:
            quiet_1 = (t, qw, cw)
        else:
            t0, q0, c0 = quiet_1
            print(
                f"  threads={t0} vs threads={t}: quiet {q0 / qw:.2f}x the time, "
                f"contended {c0 / cw:.2f}x the time"
            )


if __name__ == "__main__":
    raise SystemExit(main())
