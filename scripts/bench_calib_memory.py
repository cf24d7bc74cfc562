"""Peak memory of an INT8 calibration build against the sample set's size and the estimate
``reprobuild.precision.calibmemory`` refuses by.

Run: python scripts/bench_calib_memory.py [--samples 2000,20000] [--batch 8]
     [--method entropy] [--model mlp|digits-cnn]

For each sample count: seeded normal samples shaped like the model's input are saved as
one ``.npz`` in a temporary directory, and ``reprobuild build MODEL --precision int8
--calibration samples.npz --backend reference`` runs in a child process (calibration, the
recording build, the engine's accuracy on the calibration set); its peak resident memory
is the child's ``ru_maxrss``. Prints the samples' MiB, the peak, peak / samples, the
estimate, and the seconds taken (timings on a shared machine are only indicative).
``REPROBUILD_ROOT`` runs another checkout's reprobuild (e.g. an older commit exported with
``git archive``) with this script, for a before/after comparison.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from reprobuild.precision.analysis import real_inputs  # noqa: E402
from reprobuild.precision.calibmemory import estimate  # noqa: E402

MIB = 1 << 20


def _model(name: str, tmp: Path) -> Path:
    if name == "mlp":
        src = ROOT / "reprobuild" / "examples" / "mlp.onnx"
    else:
        from tests.models import digits

        src = Path(digits.model_path(name.removeprefix("digits-")))
    dst = tmp / src.name
    shutil.copy(src, dst)
    return dst


def _run(model: Path, n: int, batch: int, method: str, tmp: Path) -> dict[str, float]:
    proto = onnx.load(str(model))
    vi = real_inputs(proto)[0]
    dims = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim][1:]
    rng = np.random.default_rng(0)
    samples = rng.standard_normal((n, *dims), dtype=np.float32)
    np.savez(tmp / "samples.npz", **{vi.name: samples})
    guess = estimate(proto, {vi.name: samples[:1]}, batch).total(n)
    env = {**os.environ, "PYTHONPATH": os.environ.get("REPROBUILD_ROOT", str(ROOT))}
    argv = [sys.executable, "-m", "reprobuild", "build", model.name, "--lock", "t.lock",
            "--backend", "reference", "--precision", "int8", "--calibration", "samples.npz",
            "--calib-batch-size", str(batch), "--calib-method", method, "-q"]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"build on {n} samples failed (exit {status})")
    for p in tmp.iterdir():
        if p.name != model.name:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    return {
        "samples_mib": samples.nbytes / MIB,
        "peak_mib": usage.ru_maxrss * 1024 / MIB,
        "estimate_mib": guess / MIB,
        "seconds": seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", default="2000,20000")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--method", default="entropy")
    ap.add_argument("--model", default="mlp")
    args = ap.parse_args()
    print(f"model {args.model}, batch {args.batch}, method {args.method}, "
          f"reprobuild from {os.environ.get('REPROBUILD_ROOT', ROOT)}")  # fmt: skip
    head = ("samples", "data MiB", "peak MiB", "peak/data", "est. MiB")
    print(" ".join(f"{h:>9}" for h in head), f"{'s':>6}")
    with tempfile.TemporaryDirectory(prefix="bench-calib-memory-") as d:
        tmp = Path(d)
        model = _model(args.model, tmp)
        for n in (int(x) for x in args.samples.split(",")):
            r = _run(model, n, args.batch, args.method, tmp)
            print(
                f"{n:>9} {r['samples_mib']:>9.1f} {r['peak_mib']:>9.1f} "
                f"{r['peak_mib'] / r['samples_mib']:>9.1f} {r['estimate_mib']:>9.1f} "
                f"{r['seconds']:>6.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
