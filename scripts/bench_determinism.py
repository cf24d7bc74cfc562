"""What ``verify --runs 3 --batch-invariance`` costs beside ``verify`` alone, on ResNet50.

Run: python scripts/bench_determinism.py [--model resnet50] [--repeat 3] [--batch 4]

The model is onnx's light model-zoo architecture with seeded, well-scaled weights
(``tests/models/zoo.py``). It is recorded once (injected timings, ``seed:0``: the choices do
not matter here, and the recording is not what is timed), then ``verify`` (3 rebuilds, the
positive control, ONNX Runtime) and ``verify --runs 3 --batch-invariance`` run alternately
``--repeat`` times; the figures are medians and the ratio is theirs.

The zoo's ResNet50 takes a fixed batch of 1, so its batch check only says that there is no
batch dimension. ``--batch B`` also times a copy with a dynamic batch (its Reshape to
``[1, ...]`` takes the batch from its input, profile 1..B) on seeded inputs of one sample,
where the check runs B samples alone and the batch of B twice.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import onnx

from reprobuild.backends.reference.backend import ReferenceBackend
from reprobuild.types import BuildSettings
from reprobuild.workflow.build import build
from reprobuild.workflow.verify import verify

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the corpus with power lives in tests/models
from tests.models import zoo  # noqa: E402


def _dynamic_copy(model: Path, batch: int) -> tuple[Path, BuildSettings]:
    """``model`` with a dynamic first input dimension, and the build settings of a profile
    from 1 to ``batch`` samples."""
    proto = onnx.load(str(model))
    zoo.free_batch(proto)
    name, shape = zoo.data_input(proto)
    (vi,) = [vi for vi in proto.graph.input if vi.name == name]
    vi.type.tensor_type.shape.dim[0].dim_param = "N"
    del proto.graph.value_info[:]
    out = model.with_name(f"{model.stem}.dynamic.onnx")
    onnx.save(proto, str(out))
    rest = tuple(shape[1:])
    profile = ((name, (1, *rest), (batch, *rest), (batch, *rest)),)
    return out, BuildSettings(input_shapes=profile)


def _median_times(model: Path, lock: Path, tmp: Path, repeat: int) -> dict[str, Any]:
    be = ReferenceBackend()
    times: dict[str, list[float]] = {"verify": [], "checks": []}
    results: dict[str, Any] = {}
    for _ in range(repeat):
        for name, extra in (("verify", {}), ("checks", {"runs": 3, "batch_invariance": True})):
            t0 = time.perf_counter()
            results[name] = verify(model, lock=lock, backend=be, cache_dir=tmp / "caches", **extra)
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()} | {"results": results}


def _batch_note(result: Any) -> str:
    b = result.batch_invariance
    if b is None or b.batch is None:
        return f"batch check: {b.reason if b else 'not run'}"
    return f"batch check: {b.batch} samples alone vs in the batch, invariant={b.invariant}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", choices=zoo.MODELS)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=0, help="also a dynamic-batch copy, B samples")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_determinism_") as name:
        tmp = Path(name)
        model = zoo.reweighted_path(args.model, tmp)
        cases = [("as shipped (fixed batch 1)", model, BuildSettings())]
        if args.batch > 1:
            dyn, settings = _dynamic_copy(model, args.batch)
            cases.append((f"dynamic batch (profile 1..{args.batch})", dyn, settings))
        print(f"{'model':<40} {'verify':>9} {'--runs 3 --batch-inv.':>22} {'ratio':>6}")
        for label, path, settings in cases:
            lock = tmp / f"{path.stem}.lock"
            build(
                path,
                lock=lock,
                out=tmp / f"{path.stem}.engine",
                backend=ReferenceBackend(timing="seed:0"),
                cache_dir=tmp / "caches",
                settings=settings,
            )
            med = _median_times(path, lock, tmp, args.repeat)
            ratio = med["checks"] / med["verify"]
            print(
                f"{args.model + ', ' + label:<40} {med['verify']:>8.1f}s "
                f"{med['checks']:>21.1f}s {ratio:>5.2f}x"
            )
            checked = med["results"]["checks"]
            runs = checked.run_check
            print(f"  run check: deterministic={runs.deterministic}; {_batch_note(checked)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
