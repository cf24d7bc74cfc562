"""Run every documented command with measured timings, several fresh times, and report
which documented exit codes do not hold.

``tests/test_docs.py`` runs each page's ```sh and ```python blocks with injected timings, so
the suite never depends on which kernel won a race on a busy machine. A reader's machine
has no injection: a recording may choose the candidate a page pins, and then a ``diff`` or
``bisect`` the page says exits 1 exits 0. The suite runs the pages whose exit codes depend
on that once with measured timings; several fresh runs of every page are this script's
job, before a release. It runs the same pages through the same runner
(:func:`tests.test_docs.run_page`, ``injected=False``, every command run even after one
fails), each in a fresh temporary folder, ``--runs`` times, and prints per page the runs
whose every command exited as documented, then each command that did not, with its block,
the documented code and the code of each run:

    .venv/bin/python scripts/docs_real_timings.py --runs 5            # every page
    .venv/bin/python scripts/docs_real_timings.py --page README.md    # one page

Exit 0 when every run of every page held, 1 otherwise. Stdout starts with the table (one
``#`` line per page), then one line per command that did not hold; progress goes to stderr.

Last measured (2026-11-28, ``--runs 5``, every page one after another, 5 min 50 s wall in
all, on the 2-core x86_64 development machine (OpenBLAS 0.3.31, SkylakeX kernels) shared
with five other busy sessions, load about 2); a number is the runs in which every command
exited as the page documents (tensorrt.md runs under the TensorRT stand-in as in the suite,
whose tactic times come from a seed, not a clock: its runs show only that nothing else
differs):

    page               runs held  wall s per run
    README.md          5/5        5 6 6 6 7
    backends.md        5/5        2 2 2 3 3
    development.md     5/5        0 0 0 0 0  (no command)
    exit-codes.md      5/5        2 2 2 2 2
    export-cache.md    5/5        0 0 0 0 0  (no command)
    fleets.md          5/5        10 9 8 10 9
    int8.md            5/5        8 8 7 8 5
    lockfile.md        5/5        1 1 1 1 1
    precision.md       5/5        3 4 4 3 3
    record-and-pin.md  5/5        11 11 9 10 12
    stability.md       5/5        5 5 5 5 3
    tensorrt.md        5/5        9 12 14 8 8
    verify-in-ci.md    5/5        17 13 11 11 10

A second batch of the four pages whose exit codes depend on which candidate a recording
chose (README.md, record-and-pin.md, stability.md, verify-in-ci.md) held 5/5 each too. Their
pins name ``ref_gemm_tree8_f32`` for ``fc``: here about 4x the BLAS kernel's time (0.033 vs
0.008 ms), far outside the 0.4 tie band, and last in the tie rule, so no recording chose it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the runner lives in tests/test_docs.py
from tests.test_docs import MISMATCH, PAGES, page_commands, run_page  # noqa: E402


@dataclass
class PageResult:
    """One page's runs: for each run, the commands that exited otherwise than documented
    (command number -> exit code), or an error that stopped the run; and the wall times."""

    page: Path
    failures: list[dict[int, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def held(self) -> int:
        return sum(not f and not e for f, e in zip(self.failures, self.errors, strict=True))


def run_once(page: Path, folder: Path) -> tuple[dict[int, int], str]:
    """One fresh run of ``page``: the commands that did not exit as documented, and an
    error line when the run itself did not finish (a timeout, a script error)."""
    try:
        res = run_page(page, folder, injected=False, keep_going=True)
    except subprocess.TimeoutExpired:
        return {}, "timed out"
    bad = {int(n): int(rc) for n, rc, _ in MISMATCH.findall(res.stderr)}
    error = "" if res.returncode == 0 else f"the page's script exited {res.returncode}"
    return bad, error


def run_page_n(page: Path, runs: int) -> PageResult:
    result = PageResult(page)
    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix="docs-real-") as tmp:
            start = time.monotonic()
            bad, error = run_once(page, Path(tmp))
            result.seconds.append(time.monotonic() - start)
        result.failures.append(bad)
        result.errors.append(error)
        state = "held" if not bad and not error else f"FAILED {sorted(bad)} {error}".rstrip()
        print(
            f"{page.name} run {i + 1}/{runs}: {state} ({result.seconds[-1]:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    return result


def report(results: list[PageResult], runs: int) -> list[str]:
    """The table first (a comment line each), then every command that failed a run."""
    width = max(len(r.page.name) for r in results)
    lines = [f"# {'page':<{width}}  runs held  wall time (s, each run)"]
    for r in results:
        secs = " ".join(f"{s:.0f}" for s in r.seconds)
        lines.append(f"# {r.page.name:<{width}}  {r.held()}/{runs}        {secs}")
    for r in results:
        cmds = page_commands(r.page)
        failed: dict[int, dict[int, int]] = defaultdict(dict)
        for run, bad in enumerate(r.failures, start=1):
            for n, rc in bad.items():
                failed[n][run] = rc
        for run, error in enumerate(r.errors, start=1):
            if error:
                lines.append(f"{r.page.name}: run {run}: {error}")
        for n in sorted(failed):
            block, cmd, want = cmds[n - 1]
            got = ", ".join(f"run {run} exited {rc}" for run, rc in sorted(failed[n].items()))
            first = cmd.splitlines()[0]
            lines.append(
                f"{r.page.name}: block {block}, command [{n}] `{first}`: documented exit "
                f"{want}; {got}"
            )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh runs of each page (default 5)")
    ap.add_argument(
        "--page", action="append", help="run only this page, e.g. README.md (repeatable)"
    )
    args = ap.parse_args()
    pages = [p for p in PAGES if not args.page or p.name in args.page]
    if args.page and len(pages) != len(set(args.page)):
        known = ", ".join(p.name for p in PAGES)
        print(f"docs_real_timings: --page names no page; pages: {known}", file=sys.stderr)
        return 2
    results = [run_page_n(page, args.runs) for page in pages]
    print("\n".join(report(results, args.runs)))
    return 0 if all(r.held() == args.runs for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
