#!/usr/bin/env python3
"""Recording builds with the autotuning of this tree and of a baseline git revision, side by
side in one run: kernel runs per build, wall time, and whether the choices agree.

Why: autotuning was 68% of a ResNet50 recording build (887 kernel runs for 54
layers). The policy in ``reprobuild/backends/reference/autotune.py`` (warm-up counted,
shared im2col, clearly slower candidates dropped early) must time less for the same kind
of decision. Each round runs one recording build per tree, in alternating order, each in a
fresh child process (nothing cached in memory) on the same re-weighted model. Kernel runs
come from the build output's ``autotune.kernel_runs`` when the tree reports it, else from
counting calls of ``engine.execute_spec`` (every kernel run of the older builder). Tactic
agreement is the share of layers on which two builds chose the same tactic: baseline vs
baseline and new vs new (different rounds) say how much timing noise alone changes, new vs
baseline says whether the policy changes more than that.

    python scripts/bench_autotune.py                         # resnet50 vs main, 3 rounds
    python scripts/bench_autotune.py --model squeezenet --baseline HEAD~3 --rounds 5
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(model: str) -> None:
    """One recording build with whatever ``reprobuild`` PYTHONPATH gives; prints JSON."""
    from reprobuild.backends.reference import ReferenceBackend
    from reprobuild.backends.reference import engine as engine_mod
    from reprobuild.types import BuildSettings

    calls = [0]
    # older trees (the only ones that need counting) define execute_spec in the engine module
    execute_spec = getattr(engine_mod, "execute_spec", None)

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return execute_spec(*args, **kwargs)

    if execute_spec is not None:
        engine_mod.execute_spec = counted
    backend = ReferenceBackend()
    wall = time.perf_counter()
    out = backend.build(model, BuildSettings(), backend.create_timing_cache(), lambda _l: None)
    wall = time.perf_counter() - wall
    autotune = out.extra.get("autotune")
    print(
        json.dumps(
            {
                "wall": wall,
                "kernel_runs": calls[0] if autotune is None else autotune["kernel_runs"],
                "dropped": None if autotune is None else autotune["dropped_candidates"],
                "layers": out.extra["timed_layers"],
                "tactics": {k: f"0x{v:x}" for k, v in out.extra["tactic_map"].items()},
            }
        )
    )


def run_child(tree: Path, model: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(model)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=tree,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def agreement(a: dict, b: dict) -> float:
    keys = set(a["tactics"]) & set(b["tactics"])
    return sum(a["tactics"][k] == b["tactics"][k] for k in keys) / max(1, len(keys))


def mean_agreement(pairs: list[tuple[dict, dict]]) -> str:
    if not pairs:
        return "   n/a"
    return f"{statistics.mean(agreement(a, b) for a, b in pairs):6.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help="light model-zoo name (default resnet50)")
    ap.add_argument("--baseline", default="main", help="git revision to compare (default main)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    sys.path.insert(0, str(ROOT))  # the corpus with power lives in tests/models
    from tests.models import zoo

    with tempfile.TemporaryDirectory(prefix="bench-autotune-") as tmp_name:
        tmp = Path(tmp_name)
        base = tmp / "baseline"
        base.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.baseline], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        model = zoo.reweighted_path(args.model, tmp)
        trees = {"baseline": base, "new": ROOT}
        runs: dict[str, list[dict]] = {"baseline": [], "new": []}
        for r in range(args.rounds):
            order = ("baseline", "new") if r % 2 == 0 else ("new", "baseline")
            for name in order:
                runs[name].append(run_child(trees[name], model))
            print(
                f"round {r + 1}: "
                + ", ".join(
                    f"{n} {runs[n][-1]['wall']:.2f} s {runs[n][-1]['kernel_runs']} runs"
                    for n in order
                ),
                f"(load {os.getloadavg()[0]:.2f})",
            )

    old, new = runs["baseline"], runs["new"]
    med = {n: statistics.median(x["wall"] for x in runs[n]) for n in runs}
    kr = {n: statistics.median(x["kernel_runs"] for x in runs[n]) for n in runs}
    print(f"\n{args.model}: {new[0]['layers']} autotuned layers, median of {args.rounds} rounds")
    print(f"{'':26}{'baseline':>10}{'new':>10}{'new/base':>10}")
    print(
        f"{'kernel runs per build':26}{kr['baseline']:10.0f}{kr['new']:10.0f}"
        f"{kr['new'] / kr['baseline']:10.2f}"
    )
    print(
        f"{'recording build, s':26}{med['baseline']:10.2f}{med['new']:10.2f}"
        f"{med['new'] / med['baseline']:10.2f}"
    )
    dropped = [x["dropped"] for x in new if x["dropped"] is not None]
    if dropped:
        print(f"{'candidates dropped early':26}{'':>10}{statistics.median(dropped):10.0f}")
    print("tactic agreement (share of layers with the same choice):")
    print(f"  baseline vs baseline {mean_agreement(list(itertools.combinations(old, 2)))}")
    print(f"  new vs new           {mean_agreement(list(itertools.combinations(new, 2)))}")
    print(f"  new vs baseline      {mean_agreement(list(itertools.product(new, old)))}")


if __name__ == "__main__":
    main()
