"""Which machine properties change the reference backend's output bits (its target identity).

Each row builds the same models with the same injected timings (``--ref-timing seed:1``,
so the tactics are fixed) in a fresh process under one environment variation, runs the
engine on seeded inputs and prints the outputs' digest beside the baseline's. A property
whose rows differ from the baseline decides bits and belongs in the target's identity;
one whose rows match can be advisory.

    python scripts/identity_bits.py [--models squeezenet cnn]

Variations: OpenBLAS kernel families (``OPENBLAS_CORETYPE``), BLAS threads 1 vs 2, numpy's
SIMD dispatch (``NPY_DISABLE_CPU_FEATURES``). Versions of numpy and onnx cannot be varied
here (one of each is installed): they are advisory, and a lock's recorded digests catch any
bit they change.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = r"""
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
from reprobuild.backends.base import BuildSettings
from reprobuild.backends.reference import ReferenceBackend
from reprobuild.workflow.outputs import load_inputs, output_hashes, outputs_digest
import numpy, threadpoolctl
from pathlib import Path
threads = int(sys.argv[2])
out = {"blas_kernels": threadpoolctl.threadpool_info()[0].get("architecture")}
for i, path in enumerate(sys.argv[3:]):
    be = ReferenceBackend(timing="seed:1", threads=threads)
    built = be.build(path, BuildSettings(), be.create_timing_cache(), lambda _l: None)
    feeds = load_inputs(None, Path(path), 0).feeds
    out[str(i)] = outputs_digest(output_hashes(be.run(built.engine, feeds)))[:12]
out["target"] = be.environment().name
print(json.dumps(out))
"""

VARIATIONS = [
    ("baseline (this machine's defaults)", {}, 1),
    ("OPENBLAS_CORETYPE=Haswell", {"OPENBLAS_CORETYPE": "Haswell"}, 1),
    ("OPENBLAS_CORETYPE=Sandybridge", {"OPENBLAS_CORETYPE": "Sandybridge"}, 1),
    ("OPENBLAS_CORETYPE=SkylakeX", {"OPENBLAS_CORETYPE": "SkylakeX"}, 1),
    ("OPENBLAS_CORETYPE=Nehalem", {"OPENBLAS_CORETYPE": "Nehalem"}, 1),
    ("OPENBLAS_CORETYPE=Zen", {"OPENBLAS_CORETYPE": "Zen"}, 1),
    ("BLAS threads 2", {}, 2),
    ("NPY_DISABLE_CPU_FEATURES=X86_V3", {"NPY_DISABLE_CPU_FEATURES": "X86_V3"}, 1),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["squeezenet", "cnn"])
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.models import zoo

    tmp = Path(tempfile.mkdtemp(prefix="identity-bits-"))
    paths = [
        str(ROOT / "reprobuild" / "examples" / f"{m}.onnx")
        if (ROOT / "reprobuild" / "examples" / f"{m}.onnx").is_file()
        else str(zoo.reweighted_path(m, tmp))
        for m in args.models
    ]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENBLAS_", "NPY_"))}
    rows = []
    for label, extra, threads in VARIATIONS:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(ROOT), str(threads), *paths],
            env={**base, **extra}, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            code = proc.returncode
            crash = "SIGILL: not on this CPU" if code == -4 else f"exit {code}"
            lines = (proc.stderr.strip() or crash).splitlines()
            rows.append((label, {"error": lines[-1][:80]}))
            continue
        row = json.loads(proc.stdout)
        rows.append((label, {**row, **{m: row[str(i)] for i, m in enumerate(args.models)}}))
    ref = rows[0][1]
    for label, row in rows:
        same = [m for m in args.models if row.get(m) == ref.get(m)]
        verdict = "same bits" if len(same) == len(args.models) else "OTHER BITS"
        verdict = "error" if "error" in row else verdict
        digests = " ".join(f"{m}={row.get(m, '-')}" for m in args.models)
        kernels = row.get("blas_kernels", row.get("error"))
        target = row.get("target")
        print(f"{label:38s} kernels={kernels!s:12s} {digests}  {verdict}  target={target}")


if __name__ == "__main__":
    main()
