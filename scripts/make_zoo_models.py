"""Write the light model-zoo architectures with seeded, well-scaled weights (for benchmarks).

Usage:
    python scripts/make_zoo_models.py OUTDIR [--models squeezenet resnet50 ...] [--seed 0]

Why: the shipped light models have constant weights, so their outputs are flat and no
tactic change reaches them (see tests/models/zoo.py). Each file is OUTDIR/NAME.seedSEED.onnx;
an existing file is kept (same seed, same bytes). Prints per model the generation time and
the output statistics on seeded uniform [0, 1) inputs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the generator lives in tests/
from tests.models import zoo  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--models", nargs="+", choices=zoo.MODELS, default=list(zoo.MODELS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in args.models:
        start = time.perf_counter()
        path = zoo.reweighted_path(name, args.outdir, args.seed)
        elapsed = time.perf_counter() - start
        stats = zoo.output_stats(onnx.load(str(path)))
        print(
            f"{path}: {elapsed:.2f} s; logits std {stats.logit_std:.3g}, "
            f"softmax max {stats.softmax_max:.3g}, max change between two inputs "
            f"{stats.input_change:.3g}, finite {stats.finite}"
        )
        if not (stats.finite and np.isfinite(stats.logit_std)):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
