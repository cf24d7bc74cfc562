"""What the recorded digests cost: the engine run a recording adds, and verify's comparison.

A recording build stores its engine's output digest (one engine run on the seeded inputs);
``verify`` compares its first rebuild's outputs with it (one hash over the per-output hashes
it already has). Both are printed beside the recording build's own time, measured in the
same run.

    python scripts/bench_digests.py [--models squeezenet resnet50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reprobuild.backends.base import BuildSettings  # noqa: E402
from reprobuild.backends.reference import ReferenceBackend  # noqa: E402
from reprobuild.workflow.existing import expected_bits  # noqa: E402
from reprobuild.workflow.outputs import load_inputs, output_hashes, outputs_digest  # noqa: E402
from tests.models import zoo  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["squeezenet", "resnet50"])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-digests-"))
    print(f"{'model':<12} {'record s':>9} {'digest s':>9} {'ratio':>6} {'compare s':>10}")
    for name in args.models:
        path = zoo.reweighted_path(name, tmp)
        build_s, digest_s, compare_s = [], [], []
        for _ in range(args.rounds):
            be = ReferenceBackend(timing="seed:1")
            t0 = time.perf_counter()
            out = be.build(str(path), BuildSettings(), be.create_timing_cache(), lambda _l: None)
            t1 = time.perf_counter()
            expected_bits(be, out.engine, path)
            t2 = time.perf_counter()
            samples = load_inputs(None, path, 0)
            hashes = output_hashes(samples.run(partial(be.run, out.engine)))  # verify has these
            t3 = time.perf_counter()
            outputs_digest(hashes)
            t4 = time.perf_counter()
            build_s.append(t1 - t0)
            digest_s.append(t2 - t1)
            compare_s.append(t4 - t3)
            be.release()
        b, d, c = (statistics.median(x) for x in (build_s, digest_s, compare_s))
        print(f"{name:<12} {b:9.3f} {d:9.3f} {d / b:6.2f} {c:10.5f}")


if __name__ == "__main__":
    main()
