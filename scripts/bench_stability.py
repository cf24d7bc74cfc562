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
- what ships: the distinct engines (per layer: the key it runs, its tactic and kernel) and
  the distinct recorded output digests over the recordings, for each policy (as
  ``reprobuild stability`` counts them);
- recording time, default vs band 0 (sum over the same interleaved schedule), goal <= 1.3x;
- engine run time of a default-policy engine vs a band-0 engine (the first quiet recording
  of each, run alternately ``--runs`` times on seeded inputs; median), goal within 5 %;
- with ``--stability``: ``reprobuild stability --records N`` wall time vs one quiet
  recording's (goal <= 6x), and its plot with ``--plot FILE``.

- with ``--keep DIR``: each recording's build report is copied to DIR/MODEL-BAND-I.json, so
  that ``--replay DIR`` can re-decide every key offline from the recorded per-candidate
  runs (the reference backend reports them) under other bands and rules, without
  recording again. A replay cannot re-run the settling rounds: those the recordings made
  for their own band are in the runs, no others.

    python scripts/bench_stability.py --models squeezenet
    python scripts/bench_stability.py --models resnet50 --stability --plot docs/stability.svg
    python scripts/bench_stability.py --models squeezenet --keep runs/
    python scripts/bench_stability.py --replay runs/ --bands 0 0.05 0.2 0.4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the re-weighted zoo lives in tests/models
from reprobuild.lock.diff import engine_of  # noqa: E402
from reprobuild.lock.yamlio import load_lock  # noqa: E402
from reprobuild.types import DEFAULT_TIE_BAND, TIE_RULES  # noqa: E402
from reprobuild.workflow.stability import digests_of  # noqa: E402
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
    lock = load_lock(where / "t.lock")
    return {"wall": wall, "duration_s": result["duration_s"], "tactics": result["tactic_map"],
            "engine": where / "m.engine", "busy": busy, "load": load,
            "ships": (tuple(sorted(engine_of(lock.layers).items())), digests_of(lock))}  # fmt: skip


def shipped(runs: list[dict]) -> str:
    """Distinct engines and output digests over the recordings."""
    engines = len({r["ships"][0] for r in runs})
    digests = len({r["ships"][1] for r in runs if r["ships"][1]})
    return f"{engines} distinct engine(s), {digests} distinct output digest(s)"


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


def engine_times(a: Path, b: Path, runs: int) -> tuple[float, float, float, float]:
    """Median run time (s) of two engines on the same seeded inputs, run alternately: on the
    wall clock and on the CPU clock (this process's CPU time, which a loaded machine's
    neighbours do not inflate; the engine runs one BLAS thread)."""
    from reprobuild.backends.reference import ReferenceBackend

    be = ReferenceBackend()
    ea, eb = a.read_bytes(), b.read_bytes()
    (inp,) = be.engine_metadata(ea)["inputs"]
    import numpy as np

    x = np.random.default_rng(0).standard_normal(tuple(inp["shape"])).astype(np.float32)
    feeds = {inp["name"]: x}
    be.run(ea, feeds), be.run(eb, feeds)  # warm both
    wall: dict[int, list[float]] = {0: [], 1: []}
    cpu: dict[int, list[float]] = {0: [], 1: []}
    for _ in range(runs):
        for i, engine in enumerate((ea, eb)):
            start, cstart = time.perf_counter(), time.process_time()
            be.run(engine, feeds)
            cpu[i].append(time.process_time() - cstart)
            wall[i].append(time.perf_counter() - start)
    med = statistics.median
    return med(wall[0]), med(wall[1]), med(cpu[0]), med(cpu[1])


def replay(folder: Path, bands: list[float], rules: list[str]) -> None:
    """Re-decide every key of the kept reports (``--keep``) under each band and rule."""
    from reprobuild.backends.reference.kernels import tactic_hash
    from reprobuild.tiebreak import TieCandidate, decide

    groups: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("*.json")):
        groups.setdefault(path.stem.rsplit("-", 1)[0], []).append(json.loads(path.read_text()))
    for group, reports in groups.items():
        print(f"{group}: {len(reports)} recordings")
        for rule in rules:
            for band in bands:
                maps = []
                for rep in reports:
                    tactics = {}
                    for entry in rep["autotune"]["layers"]:
                        cands = [
                            TieCandidate(
                                tactic_hash(c["kernel"]), c["kernel"], tuple(c["times_ms"])
                            )
                            for c in entry["candidates"]
                        ]
                        d = decide(cands, band, rule)
                        if d is not None:
                            tactics[entry["key"]] = d.chosen
                    maps.append({"tactics": tactics})
                print(f"  rule {rule}, band {band:g}: agreement {agreement(maps):.1%}")


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
        f"{len(data['layers_at_risk'])} keys at risk; {data['distinct_engines']} distinct "
        f"engine(s), {data['distinct_output_digests']} distinct output digest(s)"
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
    ap.add_argument("--keep", type=Path, default=None, help="copy each build report here")
    ap.add_argument("--replay", type=Path, default=None, help="re-decide kept reports offline")
    ap.add_argument("--bands", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.2, 0.3, 0.4])
    ap.add_argument("--rules", nargs="+", default=list(TIE_RULES))
    args = ap.parse_args(argv)
    if args.replay is not None:
        replay(args.replay, args.bands, args.rules)
        return 0
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
                    if args.keep is not None:
                        args.keep.mkdir(parents=True, exist_ok=True)
                        report = where / "m.engine.report.json"
                        shutil.copy(report, args.keep / f"{name}-{band:g}-{i}.json")
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
            print(f"  what ships: default policy {shipped(d)}; --tie-band 0 {shipped(z)}")
            sd, sz = sum(r["duration_s"] for r in d), sum(r["duration_s"] for r in z)
            print(
                f"  recording time: default {sd:.1f} s vs band 0 {sz:.1f} s over the same "
                f"schedule: {sd / sz:.2f}x (goal <= 1.3x); per recording default "
                f"{[round(r['duration_s'], 1) for r in d]}, band 0 "
                f"{[round(r['duration_s'], 1) for r in z]}"
            )
            for j in range(args.quiet):  # the engines of the quiet recordings
                td, tz, cd, cz = engine_times(d[j]["engine"], z[j]["engine"], args.runs)
                print(
                    f"  engine run (quiet recording {j}): default-policy engine CPU "
                    f"{cd * 1e3:.1f} ms vs fastest-as-measured {cz * 1e3:.1f} ms: {cd / cz:.3f}x "
                    f"(goal <= 1.05x); wall {td * 1e3:.1f} vs {tz * 1e3:.1f} ms: {td / tz:.3f}x"
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
