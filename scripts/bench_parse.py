#!/usr/bin/env python3
"""Throughput and memory of the builder-log parser against ``grep -c Tactic``.

Builds a log of ``--size-mb`` (default 1024) by repeating every log fixture in
``tests/fixtures`` (real TensorRT excerpts plus the synthetic reference-backend logs), parses
it in a child process that does nothing else, times ``grep -c "Tactic"`` over the same file
(page cache warmed first, median of 3 runs), and prints both rates, their ratio and the
parser's peak memory: the child's peak resident set size, ``VmHWM`` from /proc/self/status
(the whole interpreter; ``ru_maxrss`` is not used because Linux carries the parent's peak
over ``fork``/``exec``). The log is written to a temporary directory and deleted afterwards.

    python scripts/bench_parse.py                # 1 GB
    python scripts/bench_parse.py --size-mb 64   # quick run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MB = 1 << 20


def build_log(path: Path, size_mb: int) -> tuple[int, int, int]:
    """Write ``size_mb`` MB by repeating the fixtures; returns (bytes, repetitions, files)."""
    files = sorted((FIXTURES / "trt-logs").glob("*.log")) + sorted(
        (FIXTURES / "logparse").glob("*.log")
    )
    unit = b"".join(f.read_bytes().rstrip(b"\n") + b"\n" for f in files)
    target = size_mb * MB
    reps = -(-target // len(unit))
    block_reps = max(1, (8 * MB) // len(unit))
    block = unit * block_reps
    written = 0
    with open(path, "wb") as fh:
        done = 0
        while done < reps:
            n = min(block_reps, reps - done)
            data = block if n == block_reps else unit * n
            fh.write(data)
            written += len(data)
            done += n
    return written, reps, len(files)


def warm(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(16 * MB):
            pass


def time_grep(path: Path) -> tuple[float, int]:
    grep = shutil.which("grep")
    if grep is None:
        raise SystemExit("grep not found on PATH")
    runs = []
    count = 0
    for _ in range(3):
        t0 = time.perf_counter()
        out = subprocess.run([grep, "-c", "Tactic", str(path)], capture_output=True, text=True)
        runs.append(time.perf_counter() - t0)
        count = int(out.stdout.strip() or 0)
    return statistics.median(runs), count


def peak_rss_kb() -> int:
    """This process's own peak RSS (VmHWM); ru_maxrss only where /proc is missing."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(path: str) -> None:
    """Parse only; report time, counts and peak RSS as JSON on stdout."""
    from reprobuild.logparse import LogParser, iter_file

    base_kb = peak_rss_kb()
    parser = LogParser(source=path)
    records = candidates = chosen = 0
    t0 = time.perf_counter()
    for rec in iter_file(path, parser):
        records += 1
        candidates += len(rec.candidates)
        chosen += rec.chosen is not None
    seconds = time.perf_counter() - t0
    peak_kb = peak_rss_kb()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "records": records,
                "candidates": candidates,
                "chosen": chosen,
                "lines": parser.lineno,
                "warnings": len(parser.warnings) + parser.warnings_dropped,
                "peak_rss_kb": peak_kb,
                "base_rss_kb": base_kb,
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="log size to build (default 1024)")
    ap.add_argument("--tmpdir", default=None, help="directory for the temporary log")
    ap.add_argument("--child", metavar="LOG", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return

    tmp = Path(tempfile.mkdtemp(prefix="bench_parse_", dir=args.tmpdir))
    path = tmp / "bench.log"
    try:
        load0 = os.getloadavg()[0]
        size, reps, nfiles = build_log(path, args.size_mb)
        warm(path)
        grep_s, grep_count = time_grep(path)
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        }
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(path)],
            capture_output=True,
            text=True,
            env=env,
        )
        if proc.returncode != 0:
            raise SystemExit(f"parser child failed:\n{proc.stderr}")
        res = json.loads(proc.stdout)
        grep_s2, _ = time_grep(path)  # again after the parse: the machine may be shared
        load1 = os.getloadavg()[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    size_mb = size / MB
    grep_best = min(grep_s, grep_s2)
    parser_rate = size_mb / res["seconds"]
    grep_rate = size_mb / grep_best
    ratio = parser_rate / grep_rate
    print(f"log          : {size_mb:.1f} MB, {res['lines']} lines ({nfiles} fixtures x {reps})")
    print(
        f"parser       : {res['seconds']:.2f} s  {parser_rate:.1f} MB/s  "
        f"({res['records']} records, {res['candidates']} candidates, "
        f"{res['chosen']} with a chosen tactic, {res['warnings']} warnings)"
    )
    print(
        f"grep -c Tactic: {grep_best:.2f} s  {grep_rate:.1f} MB/s  (count {grep_count}; "
        f"median of 3 before the parse {grep_s:.2f} s, after {grep_s2:.2f} s; faster used)"
    )
    print(f"ratio        : {ratio:.3f} of grep's throughput (goal >= 0.333)")
    print(
        f"peak memory  : {res['peak_rss_kb'] / 1024:.1f} MB peak RSS (VmHWM) of the child process "
        f"that only parses ({res['base_rss_kb'] / 1024:.1f} MB after imports, before parsing; "
        "goal < 150 MB)"
    )
    print(f"load average : {load0:.2f} at start, {load1:.2f} at end ({os.cpu_count()} CPUs)")
    print(f"temporary log deleted: {not path.exists()}")


if __name__ == "__main__":
    main()
