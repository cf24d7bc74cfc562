#!/usr/bin/env python3
"""Throughput and memory of the builder-log parser against ``grep -c Tactic``.

Builds a log of ``--size-mb`` (default 1024) by repeating every log fixture in
``tests/fixtures`` (real TensorRT excerpts plus the synthetic reference-backend logs), warms the
page cache, then runs ``--rounds`` (default 3) rounds of ``grep -c "Tactic"`` followed at once
by the default parser: each round gives a ratio measured side by side on the same machine
state (these machines are shared and noisy), and the median round is the headline. Each parse
runs in a child process that does nothing else:

- ``default``: ``iter_file`` with ``native=None``, i.e. what users get: the C scanner
  (``reprobuild.logs._logscan``) when it was built, else the pure-Python parser. The headline
  ``ratio`` line compares this one to grep, and says which implementation it was.
- ``python``: the pure-Python parser (``native=False``) on the first ``--python-mb`` MB
  (default 128; the same fixtures repeated, so a prefix of the big log), to keep its run
  short (skipped when the default already is the pure-Python parser). The C scanner is also
  run on that prefix, and the two children's counts (records, candidates, chosen tactics,
  lines, warnings) are checked to agree.

For every child the script prints its rate and its peak resident set size, ``VmHWM`` from
/proc/self/status (the whole interpreter; ``ru_maxrss`` is not used because Linux carries the
parent's peak over ``fork``/``exec``). The logs are written to a temporary directory and
deleted afterwards. The children import ``reprobuild`` from this checkout, so the C scanner is
used only when it was built in place (``pip install -e .`` does that).

    python scripts/bench_parse.py                               # 1 GB
    python scripts/bench_parse.py --size-mb 64 --python-mb 16   # quick run
    python scripts/bench_parse.py --python-mb 0                 # skip the pure-Python run
    python scripts/bench_parse.py --json                        # reprobuild log --json

``--json`` times the whole command ``reprobuild log BIG.log --json > /dev/null`` (the C
scanner writing the JSON itself where it was built) beside its goal (issue 15: >= 150 MB/s),
in rounds of ``grep -c Tactic``, ``wc -l``, the summary ``reprobuild log BIG.log``, the JSON
command and the per-record ``json.dumps(rec.to_json())`` path it replaced (a child of this
script that writes the same document; ``--no-old`` skips it), side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
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
    """One timed ``grep -c Tactic`` over the file: (seconds, count)."""
    grep = shutil.which("grep")
    if grep is None:
        raise SystemExit("grep not found on PATH")
    t0 = time.perf_counter()
    out = subprocess.run([grep, "-c", "Tactic", str(path)], capture_output=True, text=True)
    return time.perf_counter() - t0, int(out.stdout.strip() or 0)


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


IMPLS = ("default", "native", "python", "json-old")


def child(path: str, impl: str) -> None:
    """Parse only; report time, counts, the implementation and peak RSS as JSON on stdout."""
    from reprobuild.logs.parser import LogParser
    from reprobuild.logs.reader import iter_file, native_available

    native = {"default": None, "native": True, "python": False}[impl]
    used = "native" if native is not False and native_available() else "python"
    base_kb = peak_rss_kb()
    parser = LogParser(source=path)
    records = candidates = chosen = 0
    t0 = time.perf_counter()
    for rec in iter_file(path, parser, native=native):
        records += 1
        candidates += len(rec.candidates)
        chosen += rec.chosen is not None
    seconds = time.perf_counter() - t0
    peak_kb = peak_rss_kb()
    print(
        json.dumps(
            {
                "impl": impl,
                "used": used,
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


def run_child(path: Path, impl: str) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(path), "--impl", impl],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        raise SystemExit(f"parser child ({impl}) failed:\n{proc.stderr}")
    res = json.loads(proc.stdout)
    res["mb"] = path.stat().st_size / MB
    res["rate"] = res["mb"] / res["seconds"]
    return res


def describe(label: str, res: dict) -> str:
    return (
        f"{label:<13}: {res['seconds']:.2f} s  {res['rate']:.1f} MB/s over {res['mb']:.1f} MB  "
        f"({res['records']} records, {res['candidates']} candidates, "
        f"{res['chosen']} with a chosen tactic, {res['warnings']} warnings; "
        f"peak RSS {res['peak_rss_kb'] / 1024:.1f} MB, {res['base_rss_kb'] / 1024:.1f} MB "
        "after imports)"
    )


COUNTS = ("records", "candidates", "chosen", "lines", "warnings")
JSON_GOAL = 150  # MB/s, issue 15


def json_old_child(path: str) -> None:
    """The per-record dict path ``log --json`` had before streaming, to /dev/null."""
    from reprobuild.logs.parser import LogParser
    from reprobuild.logs.reader import iter_file

    parser = LogParser(source=path)
    with open(os.devnull, "w", encoding="utf-8") as out:
        out.write('{"file": ' + json.dumps(path, ensure_ascii=False) + ', "records": [')
        first = True
        for rec in iter_file(path, parser):
            out.write(
                ("\n  " if first else ",\n  ") + json.dumps(rec.to_json(), ensure_ascii=False)
            )
            first = False
        out.write("\n], " + json.dumps([w.to_json() for w in parser.warnings]) + "}\n")


def time_command(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one whole command, its output to /dev/null (startup
    included). CPU time (user + system of the child) is what the command costs whatever
    else runs on the machine; wall time is what a user waits."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        subprocess.run(argv, stdout=null, stderr=null, env=env, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def time_wc(path: Path) -> float:
    """One timed ``wc -l`` over the file (the cheapest full read of every line)."""
    wc = shutil.which("wc")
    if wc is None:
        raise SystemExit("wc not found on PATH")
    t0 = time.perf_counter()
    subprocess.run([wc, "-l", str(path)], capture_output=True, check=True)
    return time.perf_counter() - t0


def json_mode(path: Path, rounds: int, old: bool) -> None:
    """Rounds of grep, wc -l, ``reprobuild log`` (summary), ``reprobuild log --json`` and
    (``old``) the per-record path, back to back: each round is one machine state."""
    mb = path.stat().st_size / MB
    base = [sys.executable, "-m", "reprobuild", "log", str(path)]
    old_cmd = [sys.executable, __file__, "--child", str(path), "--impl", "json-old"]
    rows = []
    for _ in range(rounds):
        g, w = time_grep(path)[0], time_wc(path)
        summary, new = time_command(base), time_command([*base, "--json"])
        o = time_command(old_cmd) if old else (float("nan"), float("nan"))
        rows.append((new, g, w, summary, o))
        print(
            f"round        : log --json {mb / new[0]:.1f} MB/s, "
            f"summary {mb / summary[0]:.1f} MB/s, grep {mb / g:.0f} MB/s, wc -l {mb / w:.0f} MB/s"
            + (f", per-record path {mb / o[0]:.1f} MB/s" if old else "")
            + f" (load {os.getloadavg()[0]:.1f})"
        )
    new, g, w, summary, o = sorted(rows)[len(rows) // 2]  # the round of the median --json time
    verdict = "met" if mb / new[0] >= JSON_GOAL else "NOT met"
    print(
        f"log --json   : {new[0]:.2f} s  {mb / new[0]:.1f} MB/s over {mb:.1f} MB "
        f"(median round; the whole command)  goal >= {JSON_GOAL} MB/s: {verdict}"
    )
    print(
        f"summary      : {summary[0]:.2f} s  {mb / summary[0]:.1f} MB/s (reprobuild log, same "
        f"round); log --json takes {new[0] / summary[0]:.2f}x its time"
    )
    if old:
        print(
            f"per-record   : {o[0]:.2f} s  {mb / o[0]:.1f} MB/s (the dict + json.dumps path); "
            f"log --json is {o[0] / new[0]:.2f}x faster"
        )
    print(f"grep -c Tactic: {g:.2f} s  {mb / g:.1f} MB/s; log --json at {g / new[0]:.3f} of grep")
    print(f"wc -l        : {w:.2f} s  {mb / w:.1f} MB/s; log --json at {w / new[0]:.3f} of wc -l")
    print(
        f"CPU time     : log --json {new[1]:.2f} s ({mb / new[1]:.1f} MB per CPU second), "
        f"summary {summary[1]:.2f} s ({mb / summary[1]:.1f})"
        + (f", per-record {o[1]:.2f} s ({mb / o[1]:.1f})" if old else "")
        + "; the wall-time rates above fall below these when other processes share the cores"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="log size to build (default 1024)")
    ap.add_argument(
        "--python-mb",
        type=int,
        default=128,
        help="MB of the same log for the pure-Python run (default 128; 0 skips it)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of grep then the default parser, back to back (default 3; median reported)",
    )
    ap.add_argument("--tmpdir", default=None, help="directory for the temporary logs")
    ap.add_argument("--json", action="store_true", help="time reprobuild log --json instead")
    ap.add_argument("--no-old", action="store_true", help="with --json: skip the old path")
    ap.add_argument("--child", metavar="LOG", help=argparse.SUPPRESS)
    ap.add_argument("--impl", choices=IMPLS, default="default", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.impl == "json-old":
            json_old_child(args.child)
        else:
            child(args.child, args.impl)
        return

    tmp = Path(tempfile.mkdtemp(prefix="bench_parse_", dir=args.tmpdir))
    path = tmp / "bench.log"
    small = tmp / "bench_python.log"
    python_mb = min(args.python_mb, args.size_mb)
    native_small = python_small = None
    rounds: list[tuple[float, dict]] = []  # (grep seconds, default child) side by side
    try:
        load0 = os.getloadavg()[0]
        size, reps, nfiles = build_log(path, args.size_mb)
        warm(path)
        time_grep(path)  # untimed: page cache and binary warm
        if args.json:
            print(f"log          : {size / MB:.1f} MB ({nfiles} fixtures x {reps})")
            json_mode(path, args.rounds, not args.no_old)
            print(f"load average : {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end")
            return
        for _ in range(args.rounds):
            grep_s, grep_count = time_grep(path)
            rounds.append((grep_s, run_child(path, "default")))
        res = rounds[0][1]
        if python_mb > 0 and res["used"] == "native":
            build_log(small, python_mb)  # a prefix of the big log, made the same way
            warm(small)
            python_small = run_child(small, "python")
            native_small = run_child(small, "native")
        load1 = os.getloadavg()[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    size_mb = size / MB
    ratios = sorted((r["rate"] / (size_mb / g), g, r) for g, r in rounds)
    ratio, grep_s, res = ratios[len(ratios) // 2]  # the median round
    grep_rate = size_mb / grep_s
    print(f"log          : {size_mb:.1f} MB, {res['lines']} lines ({nfiles} fixtures x {reps})")
    print(describe(f"default={res['used']}", res))
    if python_small is not None:
        print(describe("python", python_small) + f" [first {python_mb} MB]")
    if res["used"] == "python":
        print(
            "native       : not measured: the C scanner is not built here (no C compiler at "
            "install time); the default run above is the pure-Python one"
        )
    print(f"grep -c Tactic: {grep_s:.2f} s  {grep_rate:.1f} MB/s  (count {grep_count})")
    goal = 150 if res["used"] == "native" else 60  # issue 11: the C scanner, or pure Python
    verdict = "met" if res["rate"] >= goal else "NOT met"
    print(f"goal         : >= {goal} MB/s for the {res['used']} parser: {verdict}")
    print(
        f"ratio        : {ratio:.3f} of grep's throughput with the default implementation "
        f"(iter_file, native=None -> {res['used']}); median of "
        f"{len(ratios)} rounds of grep then parser back to back (all: "
        + ", ".join(f"{r:.3f}" for r, _, _ in ratios)
        + ")"
    )
    if python_small is not None and res["used"] == "native":
        print(
            f"speed-up     : native {res['rate']:.1f} MB/s / python {python_small['rate']:.1f} "
            f"MB/s = {res['rate'] / python_small['rate']:.1f}x"
        )
    if native_small is not None and python_small is not None:
        same = all(native_small[k] == python_small[k] for k in COUNTS)
        detail = ", ".join(f"{k} {native_small[k]}/{python_small[k]}" for k in COUNTS)
        print(
            f"same counts  : {'yes' if same else 'NO'} for native/python on the first "
            f"{python_mb} MB ({detail}; native took {native_small['seconds']:.2f} s)"
        )
    print(
        f"peak memory  : {res['peak_rss_kb'] / 1024:.1f} MB peak RSS (VmHWM) of the child process "
        f"that only parses, default implementation ({res['used']}) "
        f"({res['base_rss_kb'] / 1024:.1f} MB after imports, before parsing; goal < 150 MB)"
        + (
            f"; pure-Python child {python_small['peak_rss_kb'] / 1024:.1f} MB"
            if python_small is not None
            else ""
        )
    )
    print(f"load average : {load0:.2f} at start, {load1:.2f} at end ({os.cpu_count()} CPUs)")
    print(f"temporary logs deleted: {not path.exists() and not small.exists()}")


if __name__ == "__main__":
    main()
