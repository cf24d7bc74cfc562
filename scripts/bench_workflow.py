"""Time the reproducible-build workflow on ResNet50 with the reference backend.

Run: python scripts/bench_workflow.py [--model resnet50] [--weights reweighted|light]
                                      [--rebuilds 3] [--precision fp16] [--repeat 1]

Prints, in one run, the wall time of each step and its ratio to the cold recording build:

- cold recording build: no lock; every candidate of every layer is timed, lock written;
- locked build, warm cache: the recording cache is in the cache directory, so the build is
  pins + one pinned build;
- locked build, fresh cache directory: a recording build creates the keys first, then pins;
- verify --rebuilds N: N pinned builds from the lock, each engine run, outputs compared, the
  positive control (one more build with one layer switched, until the outputs change) and
  one ONNX Runtime comparison. Its note says whether the check had power.

The model is onnx's own light model-zoo architecture, by default with seeded, well-scaled
weights (``tests/models/zoo.py``) so that its outputs depend on the tactics; ``--weights
light`` takes the shipped copy, whose flat softmax no tactic reaches (verify says so).
Everything is written in a temporary directory. A small warm-up build (the bundled MLP, not
timed) runs first so that one-time imports (onnx.reference, onnxruntime) are not charged to
the cold build. With ``--repeat R`` the whole sequence runs R times from scratch; each
figure is the median, the ratio is medians', and the fastest run is shown too (the timings
share the CPU with whatever else runs, so single runs are noisy).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from reprobuild.precision.options import validate_options
from reprobuild.workflow.build import BuildResult, PrecisionRequest, build
from reprobuild.workflow.verify import verify

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "reprobuild" / "examples"
sys.path.insert(0, str(ROOT))  # the corpus with power lives in tests/models
from tests.models import zoo  # noqa: E402


def _timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - t0


def _build(
    model: Path, lock: Path, tmp: Path, out: str, cache: str, request: PrecisionRequest | None
) -> tuple[BuildResult, float]:
    return _timed(
        build,
        model,
        lock=lock,
        out=tmp / f"{out}.engine",
        backend="reference",
        cache_dir=tmp / cache,
        report=tmp / f"{out}.report.json",
        precision=request,
    )


def _describe(r: BuildResult) -> str:
    return (
        f"{'recorded' if r.recorded else 'locked'}: {r.layers} layers, {r.pinned} pinned, "
        f"{r.cache_hits} cache hits, {r.timed} timed"
    )


def _control(ver: Any) -> str:
    """The positive control's verdict, short: did one switched tactic reach the outputs?"""
    ctl = ver.control
    if ctl is None:
        return "skipped"
    p = ctl.decisive
    if p is None:
        return f"NO POWER ({len(ctl.probes)} single-tactic changes, outputs unchanged)"
    return f"power (layer {p.layer!r}: {p.bits_flipped} of {p.bits_total} bits flip)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--model", default="resnet50", help=f"one of {', '.join(zoo.MODELS)}")
    ap.add_argument("--weights", choices=("reweighted", "light"), default="reweighted")
    ap.add_argument("--rebuilds", type=int, default=3, help="rebuilds for verify")
    ap.add_argument("--precision", choices=("fp16", "bf16"), default=None)
    ap.add_argument("--repeat", type=int, default=1, help="runs of the whole sequence")
    args = ap.parse_args()

    import onnxruntime

    onnxruntime.set_default_logger_severity(3)  # the light models carry unused initializers
    request = None
    if args.precision is not None:
        settings = validate_options(args.precision, [], [], 512.0, None, False)
        request = PrecisionRequest(args.precision, settings)

    with tempfile.TemporaryDirectory(prefix="bench-workflow-") as tmp_name:
        root = Path(tmp_name)
        if args.weights == "light":
            source = zoo.light_path(args.model)
        else:
            source = zoo.reweighted_path(args.model, root)
        size = source.stat().st_size
        build(
            EXAMPLES / "mlp.onnx",
            lock=root / "warmup.lock",
            out=root / "warmup.engine",
            backend="reference",
            cache_dir=root / "warmup-cache",
            report=root / "warmup.report.json",
        )
        times: dict[str, list[float]] = {"cold": [], "warm": [], "fresh": [], "verify": []}
        for i in range(args.repeat):
            tmp = root / f"run{i}"
            tmp.mkdir()
            model = tmp / source.name
            shutil.copyfile(source, model)
            lock = tmp / "tactics.lock"

            cold, t = _build(model, lock, tmp, "cold", "caches", request)
            times["cold"].append(t)
            warm, t = _build(model, lock, tmp, "warm", "caches", request)
            times["warm"].append(t)
            fresh, t = _build(model, lock, tmp, "fresh", "fresh-caches", request)
            times["fresh"].append(t)
            ver, t = _timed(
                verify,
                model,
                lock=lock,
                rebuilds=args.rebuilds,
                backend="reference",
                cache_dir=tmp / "caches",
            )
            times["verify"].append(t)
            if not ver.reproducible:
                raise SystemExit(f"verify failed: {ver.to_json()}")

    med = {k: statistics.median(v) for k, v in times.items()}
    t_cold = med["cold"]
    plan = f", precision {args.precision}" if args.precision else ""
    runs = f", median of {args.repeat} runs" if args.repeat > 1 else ""
    print(
        f"model: {args.model}, {args.weights} weights ({size} bytes), backend reference{plan}{runs}"
    )
    rows = [
        ("cold recording build", med["cold"], _describe(cold)),
        ("locked build, warm cache", med["warm"], _describe(warm)),
        ("locked build, fresh cache dir", med["fresh"], _describe(fresh)),
        (
            f"verify --rebuilds {args.rebuilds}",
            med["verify"],
            f"{'REPRODUCIBLE' if ver.reproducible else 'NOT REPRODUCIBLE'}, "
            f"max abs vs onnxruntime {ver.accuracy.get('max_abs', float('nan')):.3g}; "
            f"control: {_control(ver)}",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    keys = ("cold", "warm", "fresh", "verify")
    print(f"{'step':<{width}}  {'wall s':>7}  {'x cold':>6}  {'min s':>6}  notes")
    for key, (name, seconds, note) in zip(keys, rows, strict=True):
        low = min(times[key])
        print(f"{name:<{width}}  {seconds:7.2f}  {seconds / t_cold:6.2f}  {low:6.2f}  {note}")


if __name__ == "__main__":
    main()
