#!/usr/bin/env python3
"""Do independent recordings agree? The tie band's figures, side by side in one run.

Per re-weighted zoo model (``tests/models/zoo.py``), ``--records`` recordings (default 5)
with the default tie policy and as many with ``--tie-band 0`` (the fastest as measured),
interleaved (default, band 0, band 0, default, ...), each a fresh ``reprobuild build``
process with its own cache folder; the first ``--quiet`` of them (default 2) run alone, the
others while a neighbour process keeps every core busy (a BLAS matrix-multiply loop with one
thread per core). Printed per model:

- agreement: the share of timing-cache keys (lock entries) on which every recording kept
  the same tactic, for the default policy and for band 0;
- recording time, default vs band 0 (sum over the same interleaved schedule), goal <= 1.3x;
- engine run time of a default-policy engine vs a band-0 engine (the first quiet recording
  of each, run alternately ``--runs`` times on seeded inputs; median), goal within 5 %;
- with ``--stability``: ``reprobuild stability --records N`` wall time vs one quiet
  recording's (goal <= 6x), and its plot with ``--plot FILE``.

    python scripts/bench_stability.py --models squeezenet
    python scripts/bench_stability.py --models resnet50 --stability --plot docs/stability.svg
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
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the re-weighted zoo lives in tests/models
from reprobuild.types import DEFAULT_TIE_BAND  # noqa: E402
from tests.models import zoo  # noqa: E402

GOALS = {"time": 1.3, "engine": 1.05, "stability": 6.0, "agreement": 0.99}


def neighbour() -> subprocess.Popen[bytes]:
    """A process that keeps every core busy: BLAS matrix products, one thread per core."""
    code = (
        "import numpy as np\n"
        "a = np.random.default_rng(0).standard_normal((1024, 1024))\n"
        "while True:\n    a = np.tanh(a @ a)\n"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(os.cpu_count() or 2)}
    return subprocess.Popen([sys.executable, "-c", code], env=env)


def record(model: Path, where: Path, band: float, busy: bool) -> dict:
    """One recording build in a fresh process; its JSON result and lock."""
    other = neighbour() if busy else None
    try:
        if other is not None:
            time.sleep(1.0)
        argv = [
            sys.executable, "-m", "reprobuild", "build", str(model), "--backend", "reference",
            "--lock", str(where / "t.lock"), "--out", str(where / "m.engine"),
            "--cache-dir", str(where / "caches"), "--tie-band", str(band), "--json",
        ]  # fmt: skip
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - start
        load = os.getloadavg()[0]
    finally:
        if other is not None:
            other.kill()
            other.wait()
    if proc.returncode:
        raise SystemExit(f"recording failed ({proc.returncode}): {proc.stderr[-500:]}")
    result = json.loads(proc.stdout)
    return {"wall": wall, "duration_s": result["duration_s"], "tactics": result["tactic_map"],
            "engine": where / "m.engine", "busy": busy, "load": load}  # fmt: skip


def agreement(runs: list[dict]) -> float:
    keys = set().union(*(r["tactics"] for r in runs))
    same = sum(1 for k in keys if len({r["tactics"].get(k) for r in runs}) == 1)
    return same / len(keys) if keys else 1.0


def flips(runs: list[dict]) -> int:
    keys = set().union(*(r["tactics"] for r in runs))
    return sum(
        1
        for k in keys
        if Counter(r["tactics"].get(k) for r in runs).most_common(1)[0][1] < len(runs)
    )


def engine_times(a: Path, b: Path, runs: int) -> tuple[float, float]:
    """Median run time (s) of two engines on the same seeded inputs, run alternately."""
    from reprobuild.backends.reference import ReferenceBackend

    be = ReferenceBackend()
    ea, eb = a.read_bytes(), b.read_bytes()
    (inp,) = be.engine_metadata(ea)["inputs"]
    import numpy as np

    x = np.random.default_rng(0).standard_normal(tuple(inp["shape"])).astype(np.float32)
    feeds = {inp["name"]: x}
    be.run(ea, feeds), be.run(eb, feeds)  # warm both
    ta, tb = [], []
    for _ in range(runs):
        for engine, out in ((ea, ta), (eb, tb)):
            start = time.perf_counter()
            be.run(engine, feeds)
            out.append(time.perf_counter() - start)
    return statistics.median(ta), statistics.median(tb)


def stability_run(model: Path, records: int, plot: Path | None) -> float:
    argv = [sys.executable, "-m", "reprobuild", "stability", str(model), "--records",
            str(records), "--backend", "reference", "--json"]  # fmt: skip
    if plot is not None:
        argv += ["--plot", str(plot.resolve())]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"stability failed ({proc.returncode}): {proc.stderr[-500:]}")
    data = json.loads(proc.stdout)
    print(
        f"  stability --records {records}: agreement {data['agreement']:.1%}, "
        f"{len(data['layers_at_risk'])} keys at risk"
    )
    return wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["squeezenet"], choices=zoo.MODELS)
    ap.add_argument("--records", type=int, default=5)
    ap.add_argument("--quiet", type=int, default=2, help="recordings without a neighbour")
    ap.add_argument("--runs", type=int, default=7, help="engine runs per engine")
    ap.add_argument("--stability", action="store_true", help="also time `stability`")
    ap.add_argument("--plot", type=Path, default=None, help="the stability plot (.svg/.png)")
    ap.add_argument("--zoo-dir", type=Path, default=None, help="re-weighted models (cached)")
    args = ap.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="bench-stability-") as tmp:
        for name in args.models:
            model = zoo.reweighted_path(name, args.zoo_dir or Path(tmp), 0)
            band_d = DEFAULT_TIE_BAND
            runs: dict[float, list[dict]] = {band_d: [], 0.0: []}
            for i in range(args.records):
                busy = i >= args.quiet
                for band in (band_d, 0.0) if i % 2 == 0 else (0.0, band_d):
                    where = Path(tmp) / f"{name}-{band}-{i}"
                    where.mkdir()
                    runs[band].append(record(model, where, band, busy))
            d, z = runs[band_d], runs[0.0]
            loads = [r["load"] for r in d + z]
            print(
                f"{name}: {len(d[0]['tactics'])} keys, {args.records} recordings each "
                f"({args.quiet} quiet, {args.records - args.quiet} with a busy neighbour); "
                f"1-min load average after each recording {min(loads):.1f} to {max(loads):.1f}"
            )
            ad, az = agreement(d), agreement(z)
            print(
                f"  agreement: default policy (band {band_d:g}) {ad:.1%} "
                f"({flips(d)} keys flipped), "
                f"--tie-band 0 {az:.1%} ({flips(z)} flipped); goal >= 99%: "
                f"{'met' if ad >= GOALS['agreement'] else 'NOT met'}"
            )
            sd, sz = sum(r["duration_s"] for r in d), sum(r["duration_s"] for r in z)
            print(
                f"  recording time: default {sd:.1f} s vs band 0 {sz:.1f} s over the same "
                f"schedule: {sd / sz:.2f}x (goal <= 1.3x); per recording default "
                f"{[round(r['duration_s'], 1) for r in d]}, band 0 "
                f"{[round(r['duration_s'], 1) for r in z]}"
            )
            td, tz = engine_times(d[0]["engine"], z[0]["engine"], args.runs)
            print(
                f"  engine run: default-policy engine {td * 1e3:.1f} ms vs fastest-as-measured "
                f"{tz * 1e3:.1f} ms: {td / tz:.3f}x (goal <= 1.05x)"
            )
            if args.stability:
                one = statistics.median(r["wall"] for r in d[: args.quiet])
                wall = stability_run(model, args.records, args.plot)
                print(
                    f"  stability wall {wall:.1f} s vs one quiet recording {one:.1f} s: "
                    f"{wall / one:.2f}x (goal <= 6x)"
                )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
