#!/usr/bin/env python3
"""Do two checkouts print the same bytes for ``reprobuild log`` and ``reprobuild log --json``?

A change to the log parser must keep every record, warning, exit code and output byte. The
goldens (tests/logs/test_golden_output.py) hold that for each fixture log alone; this
compares two checkouts on larger and odder inputs built from the same fixtures:

- every fixture log in ``tests/fixtures/trt-logs`` and ``tests/fixtures/logparse``,
- the log ``bench_parse.py`` times (``--size-mb``, default 64), so blocks cross the
  reader's chunk boundaries at every offset the repetition gives,
- the fixtures' lines shuffled (blocks cut and interleaved), with CRLF line ends, and with
  lines dropped, cut, split and mixed with random bytes (seeded: the same files each run).

Each command runs from a temporary directory (``python -m`` would import a checkout in the
working directory first) with ``PYTHONPATH`` set to one checkout; stdout, stderr and the
exit code are compared by SHA-256.

    python scripts/compare_log_outputs.py --against /tmp/base     # this tree vs another
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_parse import FIXTURES, ROOT, build_log


def odd_logs(out: Path, seed: int = 20261125) -> list[Path]:
    """The fixtures' lines shuffled, with CRLF ends, and damaged; returns the files."""
    files = sorted((FIXTURES / "trt-logs").glob("*.log")) + sorted(
        (FIXTURES / "logparse").glob("*.log")
    )
    unit = b"".join(f.read_bytes().rstrip(b"\n") + b"\n" for f in files)
    lines = unit.split(b"\n")
    rng = random.Random(seed)
    shuffled = lines * 3
    rng.shuffle(shuffled)
    damaged = []
    for line in lines * 4:
        r, i = rng.random(), rng.randrange(len(line) + 1)
        if r < 0.05:
            damaged.append(rng.randbytes(rng.randrange(80)))
        elif r < 0.15:
            damaged.append(line[:i] + line[i + 1 :])
        elif r < 0.2:
            damaged.append(line[:i])
        elif r < 0.25:
            damaged.append(line[:i] + bytes([rng.choice(b", x0:()\t\r\x1e")]) + line[i:])
        else:
            damaged.append(line)
    made = {
        "shuffled.log": b"\n".join(shuffled),
        "crlf.log": unit.replace(b"\n", b"\r\n"),
        "damaged.log": b"[V] [TRT] start\n" + b"\n".join(damaged),
    }
    for name, data in made.items():
        (out / name).write_bytes(data)
    return [*files, *(out / name for name in made)]


def outcome(checkout: Path, log: Path, json: bool, cwd: Path) -> str:
    """SHA-256 of stdout and stderr, and the exit code, of one ``reprobuild log`` run."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    argv = [sys.executable, "-m", "reprobuild", "log", str(log), *(["--json"] if json else [])]
    proc = subprocess.run(argv, capture_output=True, env=env, cwd=cwd, check=False)
    digest = hashlib.sha256(proc.stdout + b"\0" + proc.stderr).hexdigest()[:16]
    return f"{digest} exit {proc.returncode}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", metavar="DIR", required=True, help="the other checkout")
    ap.add_argument("--size-mb", type=int, default=64, help="bench log size (default 64)")
    args = ap.parse_args()
    other = Path(args.against).resolve()
    tmp = Path(tempfile.mkdtemp(prefix="compare_logs_"))
    try:
        build_log(tmp / "bench.log", args.size_mb)
        logs = [*odd_logs(tmp), tmp / "bench.log"]
        differ = 0
        for log in logs:
            for json in (False, True):
                a, b = outcome(ROOT, log, json, tmp), outcome(other, log, json, tmp)
                same = a == b
                differ += not same
                label = f"{log.name}{' --json' if json else ''}"
                print(
                    f"{'same' if same else 'DIFFER':<6} {label:<60} {a}"
                    + ("" if same else f"  vs {b}")
                )
        print(f"{2 * len(logs) - differ} of {2 * len(logs)} outputs identical")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
