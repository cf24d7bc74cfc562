"""Time the precision pass (derive + apply) on the light DenseNet121 and report its FP16 error.

Run: python scripts/bench_precision.py [--model light_densenet121] [--repeat 3] [--seeded]
The model is onnx's own light model-zoo copy (weights built by ConstantOfShape nodes). Inputs
are the ones onnx's backend runner feeds it (np.arange(n).reshape(shape) / n), or seeded
random ones with --seeded. Times are the median of --repeat runs; the error is the FP16
model's output against the FP32 model's in ONNX Runtime on the CPU.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from pathlib import Path

import numpy as np
import onnx

from reprobuild.precision.apply import apply_plan
from reprobuild.precision.calibration import load_calibration
from reprobuild.precision.measure import plan_error
from reprobuild.precision.options import validate_options
from reprobuild.precision.rules import derive_plan


def _arange_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value or 1 for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="light_densenet121", help="a light model-zoo name")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seeded", action="store_true", help="seeded random inputs instead")
    ap.add_argument("--max-output", type=float, default=512.0)
    args = ap.parse_args()

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{args.model}.onnx"
    model = onnx.load(path)
    if args.seeded:
        feeds, desc = load_calibration(None, model, seed=0)
    else:
        feeds, desc = _arange_feeds(model), "arange"
    settings = validate_options("fp16", [], [], args.max_output, None, False)

    derive_t, apply_t = [], []
    plan = mixed = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        plan = derive_plan(model, "fp16", settings, feeds, desc)
        t1 = time.perf_counter()
        mixed = apply_plan(model, plan)
        t2 = time.perf_counter()
        derive_t.append(t1 - t0)
        apply_t.append(t2 - t1)
    assert plan is not None and mixed is not None
    t0 = time.perf_counter()
    onnx.checker.check_model(mixed, full_check=True)
    check_t = time.perf_counter() - t0
    err = plan_error(model, mixed, feeds)

    rules = collections.Counter(f"{n.precision}/{n.rule}" for n in plan.nodes)
    casts = sum(1 for n in mixed.graph.node if n.op_type == "Cast")
    d, a = statistics.median(derive_t), statistics.median(apply_t)
    print(f"model: {args.model} ({len(model.graph.node)} nodes), inputs: {desc}")
    print(f"plan: {', '.join(f'{v} {k}' for k, v in sorted(rules.items()))}; {casts} Casts added")
    print(
        f"pass time (median of {args.repeat}): derive {d:.3f} s + apply {a:.3f} s = {d + a:.3f} s"
    )
    print(f"onnx.checker full check of the converted model: {check_t:.3f} s")
    print(
        f"FP16 vs FP32 output error ({err['runtime']}): max abs {err['max_abs']:.3g}, "
        f"max rel {err['max_rel']:.3g}"
    )


if __name__ == "__main__":
    main()
