"""Time the precision pass (derive + apply) on the light DenseNet121 and report its FP16 error.

Run: python scripts/bench_precision.py [--model light_densenet121] [--repeat 3] [--seeded]
                                       [--baseline main]
The model is onnx's own light model-zoo copy (weights built by ConstantOfShape nodes). Inputs
are the ones onnx's backend runner feeds it (np.arange(n).reshape(shape) / n), or seeded
random ones with --seeded. Times are the median of --repeat runs; the error is the FP16
model's output against the FP32 model's in ONNX Runtime on the CPU.

With ``--baseline REV`` the pass of git revision REV (``git archive``) and of this tree are
timed side by side instead, in alternating child processes, ``--repeat`` rounds of each,
with the goal (derive + apply <= 1 s on DenseNet121): on a shared machine only
such paired figures compare. Each child checks nothing; the plan goldens
(tests/precision/test_plan_goldens.py) hold the plans to the baseline's bytes.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
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
    ap.add_argument("--baseline", help="git revision to time side by side with this tree")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline:
        compare(args)
        return

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
        model = onnx.load(path)  # a fresh object each pass, as a build loads it: nothing reused
        t0 = time.perf_counter()
        plan = derive_plan(model, "fp16", settings, feeds, desc)
        t1 = time.perf_counter()
        mixed = apply_plan(model, plan)
        t2 = time.perf_counter()
        derive_t.append(t1 - t0)
        apply_t.append(t2 - t1)
    assert plan is not None and mixed is not None
    if args.child:
        print(json.dumps({"derive": derive_t, "apply": apply_t}))
        return
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


GOAL_S = 1.0


def compare(args: argparse.Namespace) -> None:
    """This tree's pass and the baseline's, alternating, one child process per round."""
    root = Path(__file__).resolve().parent.parent
    # two passes per child, the second timed: the first pays the one-time imports
    argv = [__file__, "--child", "--repeat", "2", "--model", args.model]
    argv += ["--max-output", str(args.max_output)] + (["--seeded"] if args.seeded else [])
    times: dict[str, list[float]] = {"baseline": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="bench-precision-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", args.baseline], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        trees = {"baseline": tmp, "new": str(root)}
        for r in range(args.repeat):
            for name in ("baseline", "new") if r % 2 == 0 else ("new", "baseline"):
                env = {**os.environ, "PYTHONPATH": trees[name]}
                done = subprocess.run(
                    [sys.executable, *argv], capture_output=True, text=True, env=env, check=True
                )
                t = json.loads(done.stdout.strip().splitlines()[-1])
                times[name].append(t["derive"][-1] + t["apply"][-1])
                print(
                    f"round {r + 1} {name:8} derive {t['derive'][-1]:.3f} s + apply "
                    f"{t['apply'][-1]:.3f} s (load {os.getloadavg()[0]:.2f})"
                )
    print(f"{args.model}, derive + apply (second pass in each child), {args.repeat} rounds:")
    for label, pick in (("median", statistics.median), ("fastest", min)):
        base, new = pick(times["baseline"]), pick(times["new"])
        print(
            f"  {label:7} baseline {args.baseline}: {base:.3f} s; this tree: {new:.3f} s; "
            f"new / baseline {new / base:.2f}; goal <= {GOAL_S:g} s"
        )


if __name__ == "__main__":
    main()
