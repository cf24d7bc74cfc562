#!/usr/bin/env python3
"""Throughput of ``reprobuild log`` beside ``grep -c`` and ``wc -l`` on the same log.

Builds a log of ``--size-mb`` MB (default 256) by repeating every log fixture in
``tests/fixtures`` (real TensorRT excerpts plus the synthetic reference-backend logs), warms
the page cache, then runs ``--rounds`` rounds (default 3) of, back to back:

- ``grep -c Tactic`` and ``wc -l`` over the file (what reading every line costs in C),
- ``reprobuild log BIG`` (the summary table) and ``reprobuild log BIG --json``, whole
  commands with their output to a file, interpreter start included; a log this large is
  read by two processes (``logs.split``), so both are also run with
  ``REPROBUILD_LOG_PROCESSES=1`` (one process) and the ratio is printed,
- with ``--against DIR``, the same two commands run from another checkout (``PYTHONPATH=DIR``;
  e.g. ``git worktree add /tmp/base main``), so a change is measured beside its baseline in
  the same rounds rather than in another run on another machine state.

Each round is one machine state (these machines are shared and noisy); the median round by
the summary's wall time is the headline. Wall time is what a user waits; CPU time (user +
system of the command) is what the command costs whatever else runs on the machine, and the
wall-time rates fall below it when other processes share the cores (and, for two
processes, CPU time is the sum over both). Peak RSS is each command's largest process
(``wait4`` counts the children it reaped). The goal is >= 50 MB/s for the pure-Python
parser, summary and JSON. The log is written to a temporary directory and deleted
afterwards.

    python scripts/bench_parse.py                           # 256 MB, 3 rounds
    python scripts/bench_parse.py --size-mb 32 --rounds 1   # quick look
    python scripts/bench_parse.py --against /tmp/base       # this tree vs another checkout
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MB = 1 << 20
GOAL = 50  # MB/s, wall time, for `reprobuild log` and `reprobuild log --json`


def build_log(path: Path, size_mb: int) -> tuple[int, int, int]:
    """Write ``size_mb`` MB by repeating the fixtures; returns (bytes, repetitions, files)."""
    files = sorted((FIXTURES / "trt-logs").glob("*.log")) + sorted(
        (FIXTURES / "logparse").glob("*.log")
    )
    unit = b"".join(f.read_bytes().rstrip(b"\n") + b"\n" for f in files)
    reps = -(-(size_mb * MB) // len(unit))
    block_reps = max(1, (8 * MB) // len(unit))
    block = unit * block_reps
    written = done = 0
    with open(path, "wb") as fh:
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


def run(
    argv: list[str], pythonpath: str | None = None, cwd: str | None = None, one: bool = False
) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one command, its stderr to /dev/null.

    Its stdout goes to a temporary file, not /dev/null: GNU grep stops at the first match
    when its output is /dev/null, which would time nothing. ``cwd`` should hold no checkout:
    ``python -m`` imports from the working directory before ``PYTHONPATH``, so a bench
    started in a checkout would time that checkout for every ``--against``."""
    env = dict(os.environ)
    env.pop("REPROBUILD_LOG_PROCESSES", None)
    if one:
        env["REPROBUILD_LOG_PROCESSES"] = "1"
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    with open(os.devnull, "wb") as null, tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=null, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} exited with {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found on PATH")
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=256, help="log size to build (default 256)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, median reported (default 3)")
    ap.add_argument("--against", metavar="DIR", help="also time the checkout in DIR")
    ap.add_argument("--tmpdir", default=None, help="directory for the temporary log")
    args = ap.parse_args()

    grep, wc = tool("grep"), tool("wc")
    tmp = Path(tempfile.mkdtemp(prefix="bench_parse_", dir=args.tmpdir))
    path = tmp / "bench.log"
    log = [sys.executable, "-m", "reprobuild", "log", str(path)]
    commands: list[tuple[str, list[str], str | None]] = [
        ("grep -c", [grep, "-c", "Tactic", str(path)], None),
        ("wc -l", [wc, "-l", str(path)], None),
        ("log", log, str(ROOT)),
        ("log --json", [*log, "--json"], str(ROOT)),
        ("1 process log", log, str(ROOT)),
        ("1 process json", [*log, "--json"], str(ROOT)),
    ]
    if args.against:
        base = str(Path(args.against).resolve())
        commands += [("base log", log, base), ("base log --json", [*log, "--json"], base)]
    rows: list[dict[str, tuple[float, float, float]]] = []
    try:
        load0 = os.getloadavg()[0]
        size, reps, nfiles = build_log(path, args.size_mb)
        mb = size / MB
        warm(path)
        run(commands[0][1])  # untimed: page cache and binaries warm
        print(
            f"log          : {mb:.1f} MB ({nfiles} fixtures x {reps}), {os.cpu_count()} CPUs, "
            f"Python {platform.python_version()}"
        )
        for _ in range(args.rounds):
            row = {
                label: run(argv, pp, str(tmp), label.startswith("1 process"))
                for label, argv, pp in commands
            }
            rows.append(row)
            print(
                "round        : "
                + ", ".join(f"{label} {mb / row[label][0]:.1f}" for label, _, _ in commands)
                + f" MB/s (load {os.getloadavg()[0]:.1f})"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    row = sorted(rows, key=lambda r: r["log"][0])[len(rows) // 2]
    grep_s = row["grep -c"][0]
    for label, _, _ in commands:
        wall, cpu, rss = row[label]
        extra = ""
        if label not in ("grep -c", "wc -l"):
            extra = f"  {grep_s / wall:.3f} of grep; peak RSS {rss:.0f} MB"
            if not label.startswith(("base", "1 process")):
                extra += f"; goal >= {GOAL} MB/s: {'met' if mb / wall >= GOAL else 'NOT met'}"
        print(
            f"{label:<16}: {wall:6.2f} s  {mb / wall:7.1f} MB/s wall  "
            f"{mb / max(cpu, 1e-9):7.1f} MB/s CPU{extra}"
        )
    for label, one in (("log", "1 process log"), ("log --json", "1 process json")):
        print(f"two processes: {label}: {row[one][0] / row[label][0]:.2f}x one (wall, same round)")
    if args.against:
        for label in ("log", "log --json"):
            print(
                f"speed-up     : {label}: {row['base ' + label][0] / row[label][0]:.2f}x "
                "(wall, same round)"
            )
    print(f"median round : by the summary's wall time, of {len(rows)}")
    print(f"load average : {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    print(f"temporary log deleted: {not path.exists()}")


if __name__ == "__main__":
    main()
