"""Benchmark the reference backend on ResNet50 (onnx's light model-zoo architecture).

Prints, in one run: the cold build time (every Conv/Gemm autotuned), the time of a build
from the cold build's full timing cache (nothing timed), their ratio (goal: <= 0.25), the
inference time of the reference engine against ONNX Runtime on the same model and inputs
(the onnx test runner's ``arange(n) / n`` input), and a positive control: the output bits
that one switched tactic (the first layer's runner-up) flips, which says whether these
timings are of a model whose outputs depend on its kernels. By default the model has
seeded, well-scaled weights (``tests/models/zoo.py``); ``--weights light`` takes the shipped
copy, whose flat softmax no tactic reaches. Usage::

    python scripts/bench_reference.py [--model resnet50] [--weights light] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import onnx
import onnxruntime as ort

from reprobuild.backends.reference import ReferenceBackend
from reprobuild.types import BuildSettings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the corpus with power lives in tests/models
from tests.models import zoo  # noqa: E402


def best_of(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def control(backend, path: Path, settings, cold, lines: list[str], feeds) -> dict[str, int]:
    """Flip the first autotuned layer to its runner-up and count the output bits that move."""
    from reprobuild.logs.parser import LogParser
    from reprobuild.workflow.control import bit_difference

    parser = LogParser(source="bench")
    records = [r for line in lines for r in parser.feed(line)] + parser.finish()
    rec = next(r for r in records if r.key and len(r.candidates) > 1)
    other = next(c.tactic_hash for c in rec.candidates if c.tactic_hash != rec.chosen)
    cache = backend.create_timing_cache(cold.extra["cache_bytes"])
    cache.update(rec.key, other, 0.001)
    switched = backend.build(str(path), settings, cache, lambda _line: None)
    flipped, total, _ = bit_difference(
        backend.run(cold.engine, feeds), backend.run(switched.engine, feeds)
    )
    return {"layer": rec.layer, "bits_flipped": flipped, "bits_total": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="light model name (default resnet50)")
    parser.add_argument("--weights", choices=("reweighted", "light"), default="reweighted")
    parser.add_argument("--runs", type=int, default=5, help="inference repetitions (min is kept)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="bench-reference-")
    if args.weights == "light":
        path = zoo.light_path(args.model)
    else:
        path = zoo.reweighted_path(args.model, tmp.name)
    backend = ReferenceBackend()
    settings = BuildSettings()

    cache = backend.create_timing_cache()
    lines: list[str] = []
    start = time.perf_counter()
    cold = backend.build(str(path), settings, cache, lines.append)
    cold_s = time.perf_counter() - start
    cold.extra["cache_bytes"] = cache.serialize()

    cached_cache = backend.create_timing_cache(cache.serialize())
    start = time.perf_counter()
    warm = backend.build(str(path), settings, cached_cache, lambda _line: None)
    cached_s = time.perf_counter() - start
    assert warm.extra["timed_layers"] == 0, "the cached build should time nothing"
    assert warm.extra["tactic_map"] == cold.extra["tactic_map"]

    feeds = zoo.runner_inputs(onnx.load(path))
    backend.run(cold.engine, feeds)  # load + fold once, as a deserialized engine would
    ref_s = best_of(lambda: backend.run(cold.engine, feeds), args.runs)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    ort_s = best_of(lambda: session.run(None, feeds), args.runs)
    ctl = control(backend, path, settings, cold, lines, feeds)

    result = {
        "model": args.model,
        "weights": args.weights,
        "autotuned_layers": cold.extra["timed_layers"],
        "kernel_runs": cold.extra["autotune"]["kernel_runs"],
        "dropped_candidates": cold.extra["autotune"]["dropped_candidates"],
        "cold_build_s": round(cold_s, 3),
        "cached_build_s": round(cached_s, 3),
        "cached_over_cold": round(cached_s / cold_s, 4),
        "goal_cached_over_cold": 0.25,
        "reference_inference_s": round(ref_s, 4),
        "onnxruntime_inference_s": round(ort_s, 4),
        "reference_over_onnxruntime": round(ref_s / ort_s, 2),
        "samples": args.runs,
        "cpu": backend.environment().gpu,
        "control": ctl,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    layers = result["autotuned_layers"]
    print(f"model                      {args.model}, {args.weights} ({layers} autotuned layers)")
    print(f"cpu                        {result['cpu']}")
    print(f"cold build                 {cold_s:8.3f} s")
    print(
        f"kernel runs (cold build)   {result['kernel_runs']:8d}   "
        f"({result['dropped_candidates']} candidates dropped early)"
    )
    print(f"build from full cache      {cached_s:8.3f} s")
    print(f"cached / cold              {cached_s / cold_s:8.3f}   (goal <= 0.25)")
    print(f"reference inference        {ref_s * 1e3:8.1f} ms (min of {args.runs})")
    print(f"onnxruntime inference      {ort_s * 1e3:8.1f} ms (min of {args.runs})")
    print(f"reference / onnxruntime    {ref_s / ort_s:8.2f}x")
    power = "power" if ctl["bits_flipped"] else "NO POWER: these outputs hide the kernels"
    print(
        f"control: layer {ctl['layer']!r} switched flips {ctl['bits_flipped']} of "
        f"{ctl['bits_total']} output bits ({power})"
    )


if __name__ == "__main__":
    main()
