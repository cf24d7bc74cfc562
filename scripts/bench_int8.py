"""INT8 by calibration: cost and accuracy of each calibration method and batch size.

Run: python scripts/bench_int8.py [--zoo squeezenet,shufflenet,inception_v1] [--calib-zoo 64]
     [--apart-zoo 16]

Prints one table measured in one run. Per model, calibration method (entropy, minmax,
percentile) and calibration batch size (1, 8, 24, 32):

- ``calib+conv s``: ONNX Runtime's calibration plus the Q/DQ conversion from the plan
  (``precision.quantize.calibrate`` + ``precision.qdq.apply_quant_plan``), timed directly;
- ``build s``: the whole ``reprobuild build --precision int8`` (calibration again, the
  recording build with every INT8 tactic timed, the accuracy measurement);
- on the held-apart samples (never calibrated on), as ``build`` reports them: top-1
  agreement with FP32, cosine similarity and max abs error of the outputs against FP32; and
  for the digits models top-1 against the labels, FP32 and INT8;
- the batch-size effect on the plan itself: ``scales != b1``, how many activation scales
  differ from the same method's batch-1 calibration, and the largest relative change.

Models: the digits MLP and CNN (trained on real data; calibrated on the first 256 images of
the test split, measured on the other 284) and re-weighted model-zoo architectures
(``tests/models/zoo.py``: seeded He-normal weights and N(0, 0.1) biases, so outputs depend
on the input; converted from opset 9 to 13, which per-channel Q/DQ needs; Reshapes to a
batch of 1 made batch-free, as a dynamic-batch export has them, so that calibration can
run in batches; calibrated on seeded uniform [0, 1) images, measured on others).
Calibration uses whole batches only, so batch 32 calibrates on 256 of 256 digits images,
and on 64 of 64 zoo images, and batch 24 on 240 and 48 (the rest is dropped: the one
batch size here that changes which samples are calibrated on). Everything is written in a
temporary directory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the models with power live in tests/models
from reprobuild.backends import get_backend  # noqa: E402
from reprobuild.lock.plan import PrecisionSettings  # noqa: E402
from reprobuild.precision.calibdata import load_calib_data  # noqa: E402
from reprobuild.precision.qdq import apply_quant_plan  # noqa: E402
from reprobuild.precision.quantize import calibrate  # noqa: E402
from reprobuild.workflow.build import PrecisionRequest, build  # noqa: E402
from reprobuild.workflow.outputs import run_engine_samples  # noqa: E402
from tests.models import digits, zoo  # noqa: E402

METHODS = ("entropy", "minmax", "percentile")
BATCHES = (1, 8, 24, 32)
CALIB_DIGITS = 256


def _models(tmp: Path, zoo_names: list[str], n_calib: int, n_apart: int) -> list[dict[str, Any]]:
    """(name, model path, calibration npz, held-apart npz, labels of the held-apart set)."""
    x, y = digits.held_out_split()
    np.savez(tmp / "digits_calib.npz", input=x[:CALIB_DIGITS])
    np.savez(tmp / "digits_apart.npz", input=x[CALIB_DIGITS:])
    out = [
        {
            "name": f"digits-{kind}",
            "path": digits.model_path(kind),
            "calib": tmp / "digits_calib.npz",
            "apart": tmp / "digits_apart.npz",
            "labels": y[CALIB_DIGITS:],
        }
        for kind in digits.KINDS
    ]
    for zoo_name in zoo_names:
        proto = onnx.load(str(zoo.reweighted_path(zoo_name, tmp / "zoo", opset=13, bias_std=0.1)))
        zoo.free_batch(proto)
        path = tmp / "zoo" / f"{zoo_name}.int8bench.onnx"
        onnx.save(proto, str(path))
        name, shape = zoo.data_input(proto)
        rng = np.random.default_rng(1)
        calib, apart = tmp / f"{zoo_name}_calib.npz", tmp / f"{zoo_name}_apart.npz"
        np.savez(calib, **{name: rng.random((n_calib, *shape[1:]), np.float32)})
        np.savez(apart, **{name: rng.random((n_apart, *shape[1:]), np.float32)})
        out.append({"name": zoo_name, "path": path, "calib": calib, "apart": apart, "labels": None})
    return out


def _calib_conv(model: dict[str, Any], method: str, batch: int) -> tuple[float, dict]:
    """Seconds to calibrate and convert, and the activation scales calibrated."""
    proto = onnx.load(str(model["path"]))
    data = load_calib_data(str(model["calib"]), proto, None)
    t0 = time.perf_counter()
    plan, _ = calibrate(proto, PrecisionSettings(), method, batch, data)
    apply_quant_plan(proto, plan)
    assert plan.quantization is not None
    return time.perf_counter() - t0, plan.quantization.scales()


def _scale_change(scales: dict[str, float], base: dict[str, float] | None) -> str:
    """``differing/total max-rel-change`` against the batch-1 scales ('-' for batch 1)."""
    if base is None:
        return "-"
    moved = [abs(scales[t] / base[t] - 1) for t in scales if scales[t] != base.get(t)]
    return f"{len(moved)}/{len(scales)} {max(moved, default=0.0):.1%}"


def _label_top1(engine: Path, model: dict[str, Any], batch: int | None) -> float:
    apart = dict(np.load(model["apart"], allow_pickle=False))
    count = len(model["labels"])
    run = get_backend("reference").run
    out = run_engine_samples(lambda f: run(engine.read_bytes(), f), apart, count, batch)
    return digits.accuracy(out[digits.OUTPUT], model["labels"])


def _fp32_top1(model: dict[str, Any]) -> float:
    x = digits.held_out_split()[0]
    proto = onnx.load(str(model["path"]))
    (logits,) = zoo.run_onnxruntime(proto, {digits.INPUT: x}, [digits.OUTPUT])
    return digits.accuracy(logits[CALIB_DIGITS:], model["labels"])


def _row(
    model: dict[str, Any], method: str, batch: int, tmp: Path, base: dict[str, dict]
) -> list[str]:
    calib_s, scales = _calib_conv(model, method, batch)
    if batch == BATCHES[0]:
        base[method] = scales
    moved = _scale_change(scales, None if batch == BATCHES[0] else base[method])
    tag = f"{model['name']}-{method}-{batch}"
    engine = tmp / f"{tag}.engine"
    t0 = time.perf_counter()
    result = build(
        model["path"],
        lock=tmp / f"{tag}.lock",
        out=engine,
        backend="reference",
        cache_dir=tmp / "caches",
        precision=PrecisionRequest(
            "int8", PrecisionSettings(), str(model["calib"]), method, batch, None
        ),
        held_out=str(model["apart"]),
    )
    build_s = time.perf_counter() - t0
    acc = (result.accuracy or {})["held_out"]
    row = [
        model["name"],
        method,
        str(batch),
        f"{calib_s:.2f}",
        f"{build_s:.2f}",
        f"{acc['top1_agreement']:.4f}",
        f"{acc['cosine']:.6f}",
        f"{acc['max_abs']:.3g}",
        moved,
    ]
    if model["labels"] is None:
        return [*row, "-", "-"]
    int8 = _label_top1(engine, model, len(digits.held_out_split()[1]))
    return [*row, f"{model['fp32_top1']:.4f}", f"{int8:.4f}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--zoo",
        default="squeezenet,shufflenet,inception_v1",
        help="re-weighted model-zoo architectures",
    )
    ap.add_argument("--calib-zoo", type=int, default=64, help="zoo calibration samples")
    ap.add_argument("--apart-zoo", type=int, default=16, help="zoo held-apart samples")
    args = ap.parse_args()
    head = [
        "model", "method", "batch", "calib+conv s", "build s", "top1 vs FP32",
        "cosine", "max abs", "scales != b1", "FP32 top1", "INT8 top1",
    ]  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-int8-") as tmp_name:
        tmp = Path(tmp_name)
        zoo_names = [n for n in args.zoo.split(",") if n]
        models = _models(tmp, zoo_names, args.calib_zoo, args.apart_zoo)
        for m in models:
            if m["labels"] is not None:
                m["fp32_top1"] = _fp32_top1(m)
        for m in models:
            base: dict[str, dict] = {}
            for method in METHODS:
                for batch in BATCHES:
                    rows.append(_row(m, method, batch, tmp, base))
                    print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    print(
        "held-apart: digits 284 test images not calibrated on (top1 = against the labels); "
        f"{', '.join(zoo_names)}: {args.apart_zoo} seeded images each (top1 vs FP32 only)"
    )
    print(
        "goal: INT8 top-1 within 0.03 of FP32 on the digits labels and top-1 agreement "
        ">= 0.95 (tests/precision/test_int8.py holds the digits to it)"
    )


if __name__ == "__main__":
    main()
