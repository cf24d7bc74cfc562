#!/usr/bin/env python3
"""Hostile probes through the real CLI, one child process each: the closing figures of the
"nothing lost, nothing hung" work (probes run, clean refusals, slowest refusal, largest
peak memory). The probes are in ``scripts/hostile/``, one module per area: the suite's
cases (``suite``), the smaller ones (``small``), outputs and loader bounds (``outputs``),
targets and identity (``targets``), the builder log (``logs``), late signals
(``signals``) and the machine under the command (``streams``).

A report, not a test (the suite in ``tests/faults/`` is the test): it reuses the suite's
cases (non-regular inputs, plain bad input, outputs that are inputs) and adds the smaller
ones (a dangling graph output, a 0-sized input, read-only and symlinked locks, hand-edited
INT8 scales, numeric overflow, ``.npz`` bombs, a cache linked to another file, bad cap
overrides; outputs on device nodes it makes itself, as root, else FIFOs). Each probe runs
in a fresh copy of one recorded project, as a user's shell would run it (or through a
small driver that first puts stdout on /dev/full, limits the address space, or signals
the process as it ends), and is judged:

- clean refusal: a documented failure code (1, 2 or 3), no traceback, the last stderr line
  ``error: ...``, every file that was there before unchanged and no temporary file left;
- accepted: exit 0 where that is the documented right behaviour (e.g. a pin through a
  symlinked lock), with no traceback and no raw Python warning; or the outcome the probe's
  own check asks for (a late signal's line naming only real outputs, exit 143);
- anything else is listed as unclean.

Peak memory is each child's ``ru_maxrss`` (``os.wait4``); the largest is also checked
against ``resource.getrusage(RUSAGE_CHILDREN)`` at the end. Timings are wall-clock seconds on
whatever machine runs it: figures for a note, never asserted.

    python scripts/hostile_probes.py            # all probes, a summary at the end
    python scripts/hostile_probes.py -v         # one line per probe as well
"""

from __future__ import annotations

import argparse
import resource
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from hostile.core import Launcher, Outcome, judge, make_project


def all_probes() -> list:
    from hostile import logs, outputs, signals, small, streams, suite, targets

    return [p for m in (suite, small, outputs, targets, logs, signals, streams) for p in m.probes()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per probe")
    parser.add_argument(
        "-k", default="", help="only probes whose name contains one of these (comma-separated)"
    )
    opts = parser.parse_args()
    launcher = Launcher()  # first, while this process is small
    from tests.faults.helpers import snapshot

    probes = [p for p in all_probes() if any(k in p.name for k in opts.k.split(","))]
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        pristine = Path(tmp) / "pristine"
        pristine.mkdir()
        make_project(pristine)
        crashes = Path(tmp) / "crashes"
        for p in probes:
            root = Path(tmp) / "p"
            if root.exists():
                for q in root.rglob("*"):  # read-only files and folders must go too
                    if not q.is_symlink():
                        q.chmod(0o700 if q.is_dir() else 0o600)
                shutil.rmtree(root)
            shutil.copytree(pristine, root, symlinks=True)
            p.setup(root)
            before = snapshot(root)
            env = {"REPROBUILD_CRASH_DIR": str(crashes), **p.env}
            code, err, seconds, peak = launcher.run(list(p.args), root, env, p.driver)
            verdict = p.check(root, code, err)
            if verdict is None or "Traceback" in err:
                verdict = judge(p, code, err, before, root)
            outcomes.append(Outcome(p, code, seconds, peak, verdict))
            if opts.verbose:
                print(f"{verdict:9.60} exit {code:3}  {seconds:6.2f}s  {peak:7.1f} MiB  {p.name}")
    launcher.close()
    report(outcomes)


def report(outcomes: list[Outcome]) -> None:
    refused = [o for o in outcomes if o.verdict == "refused"]
    accepted = [o for o in outcomes if o.verdict == "accepted"]
    unclean = [o for o in outcomes if o.verdict.startswith("unclean")]
    slowest = max(refused, key=lambda o: o.seconds, default=None)
    largest = max(outcomes, key=lambda o: o.peak_mib, default=None)
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"probes run: {len(outcomes)}")
    print(f"clean refusals: {len(refused)} (one line, documented exit code, no traceback, "
          "files untouched)")  # fmt: skip
    print(f"accepted as documented (exit 0, or what the probe's own check asks): {len(accepted)}")
    print(f"unclean: {len(unclean)}")
    for o in unclean:
        print(f"  {o.probe.name}: {o.verdict} (exit {o.code})")
    if slowest is not None:
        print(f"slowest refusal: {slowest.seconds:.2f} s ({slowest.probe.name})")
    if largest is not None:
        print(f"largest peak memory: {largest.peak_mib:.0f} MiB ({largest.probe.name}); "
              f"getrusage(RUSAGE_CHILDREN) max over every child, project set-up included: "
              f"{children:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
