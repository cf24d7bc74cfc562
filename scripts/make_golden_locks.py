"""Write the golden locks in tests/fixtures/locks/ with the writer from BEFORE the move to
PyYAML (the hand-written emitter), so tests can prove the new writer gives the same bytes.

Run it only against that old code, never the new writer (that would prove nothing):

    PYTHONPATH=/tmp/base .venv/bin/python scripts/make_golden_locks.py [OUT_DIR]

where /tmp/base is a checkout of the commit before the restructuring. Three
locks are recorded by real `reprobuild build --backend reference` runs on the bundled
examples (one with a precision plan, one with a pinned layer); the rest are built in code
to stress the emitter: quoting, escapes, YAML words, unicode, every optional field.
Next to each NAME.lock, NAME.repr holds ``repr()`` of what the old loader read from it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import reprobuild.lockfile as old

if not hasattr(old, "_emit"):
    raise SystemExit("run this against the old hand-written emitter (PYTHONPATH=/tmp/base)")

from reprobuild.lockfile import (  # noqa: E402
    ExternalFile,
    LayerEntry,
    Lock,
    LockCandidate,
    ModelInfo,
    load_lock,
    save_lock,
)
from reprobuild.precision_plan import (  # noqa: E402
    NodePrecision,
    PrecisionPlan,
    PrecisionSettings,
)

from reprobuild.backends.base import BuildSettings, Environment  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "reprobuild" / "examples"

# Names that each hit one branch of the old plain-or-quoted decision and of its escaping.
NAMES = [
    "fc1",
    "/model/layer0/Conv",
    "a-b.c_d/e",
    "_under",
    "with space",
    " leading space",
    "trailing space ",
    'quote "inside"',
    "single 'quote'",
    "back\\slash",
    "colon: value",
    "colon:nospace",
    "hash # comment",
    "#start",
    "- dash",
    "-dash",
    "[bracket]",
    "{brace}",
    "a, comma",
    "? question",
    "&anchor",
    "*alias",
    "!tag",
    "%percent",
    "@at",
    "`tick",
    "|pipe",
    ">gt",
    "yes",
    "No",
    "on",
    "OFF",
    "null",
    "Null",
    "none",
    "y",
    "N",
    "true",
    "False",
    "~",
    "123",
    "0x1f",
    "1.5",
    "1e3",
    "-0",
    ".inf",
    ".nan",
    "2024-01-01",
    "1:20",
    "<<",
    "=",
    "",
    "---",
    "...",
    "ünïcödé",
    "名前/層",
    "emoji \U0001f600 face",
    "tab\there",
    "new\nline",
    "cr\rreturn",
    "nul\x00byte",
    "bell\x07",
    "bs\x08 ff\x0c vt\x0b",
    "esc\x1b[0m",
    "rs\x1e",
    "del\x7f",
    "c1\x85\x9f",
    "nbsp\xa0",
    "ls\u2028ps\u2029",
    "bom\ufeff",
    "nonchar\ufffe\uffff",
    "lone\ud800surrogate",
    "pair\ud83d\ude00",
    "x" * 300,
]


def _layers(names: list[str], *, kernels: bool = True) -> list[LayerEntry]:
    out = []
    for i, name in enumerate(names):
        kern = NAMES[(i * 7 + 3) % len(NAMES)] if kernels else None
        cands = [
            LockCandidate(0x1000 + 16 * i + j, f"k{j}_{kern}" if kern else None) for j in range(2)
        ]
        cands.append(LockCandidate(0xFFFFFFFFFFFFFFFF - i, kern))
        out.append(
            LayerEntry(
                key=f"0x{i:032x}",
                layer=name,
                tactic=cands[i % 3].tactic,
                kernel=cands[i % 3].kernel,
                pinned=i % 4 == 1,
                candidates=cands if i % 5 else [],
            )
        )
    return out


def _full_settings() -> BuildSettings:
    return BuildSettings(
        optimization_level=5,
        workspace=1 << 31,
        tactic_sources=("CUBLAS", "CUBLAS_LT", "EDGE_MASK_CONVOLUTIONS", "yes", "a b"),
        tf32=False,
        max_num_tactics=8,
        avg_timing_iterations=4,
        tiling_optimization_level="MODERATE",
        max_aux_streams=0,
        hardware_compatibility_level="AMPERE_PLUS",
        input_shapes=(
            ("", (1,), (1,), (1,)),
            ("input:0", (1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224)),
            ("no", (0,), (2,), (4,)),
            ("tokens", (1, 1), (4, 128), (16, 512)),
            ("ü " + "y" * 200, (1,), (2,), (3,)),
        ),
    )


def _env() -> Environment:
    return Environment(
        backend="tensorrt",
        tensorrt_version="10.13.3",
        gpu="NVIDIA A100-SXM4-80GB",
        compute_capability="8.0",
        cuda_version="12.9",
        driver_version="575.57",
    )


def _plan(names: list[str], max_output: float) -> PrecisionPlan:
    rules = ("default", "name", "op", "magnitude", "constant")
    return PrecisionPlan(
        mode="bf16",
        settings=PrecisionSettings(
            keep_fp32=("^head$", r"\.bias\b", "layer[0-9]+/Soft.*", "yes"),
            keep_fp32_ops=("Softmax", "LayerNormalization"),
            max_output=max_output,
            max_reduction_depth=4096,
            fp32_accumulate=True,
            keep_io_types=False,
        ),
        calibration="sha256:" + "c" * 64 + " (inputs.npz)",
        nodes=[
            NodePrecision(
                n or "unnamed",
                "MatMul" if i % 2 else "Softmax",
                ("fp32", "fp16", "bf16", "other")[i % 4],
                rules[i % len(rules)],
                accumulate=("fp32", None, "fp16")[i % 3],
            )
            for i, n in enumerate(names)
        ],
    )


def constructed() -> dict[str, Lock]:
    sha = "0123456789abcdef" * 4
    minimal = Lock(ModelInfo("model.onnx", sha), Environment("reference"), BuildSettings(), [])
    names = Lock(
        ModelInfo("models/my model: v2.onnx", sha),
        Environment("reference", gpu='cpu "x86" #1', driver_version="yes"),
        BuildSettings(),
        _layers(NAMES),
    )
    full = Lock(
        ModelInfo(
            "../ünï/model.onnx",
            sha,
            [
                ExternalFile("model.onnx.data", "a" * 64),
                ExternalFile("weights/w 1.bin", "b" * 64),
                ExternalFile("null", "f" * 64),
            ],
        ),
        _env(),
        _full_settings(),
        _layers(NAMES[:12]),
        precision=_plan(NAMES, 1e20),
    )
    floats = {
        "precision_floats_small": 1e-05,
        "precision_floats_inf": float("inf"),
        "precision_floats_plain": 256.0,
        "precision_floats_long": 0.1 + 0.2,
    }
    out = {"minimal": minimal, "names": names, "full": full}
    for name, value in floats.items():
        lock = Lock(ModelInfo("m.onnx", sha), _env(), BuildSettings(), _layers(NAMES[:3]))
        lock.precision = _plan(NAMES[:2], value)
        out[name] = lock
    empty_plan = Lock(
        ModelInfo("m.onnx", sha), _env(), BuildSettings(), _layers(["a"], kernels=False)
    )
    empty_plan.precision = PrecisionPlan(mode="observed")
    out["precision_empty"] = empty_plan
    big = Lock(
        ModelInfo("big.onnx", sha),
        _env(),
        BuildSettings(),
        _layers([f"/l{i}/Conv" for i in range(300)]),
    )
    out["many_layers"] = big
    return out


def recorded(tmp: Path) -> dict[str, Path]:
    rb = [sys.executable, "-m", "reprobuild"]
    runs = {
        "recorded_mlp": ("mlp.onnx", []),
        "recorded_cnn": ("cnn.onnx", []),
        "recorded_fp16_middle": ("fp16_middle.onnx", ["--precision", "fp16"]),
    }
    out = {}
    for name, (model, extra) in runs.items():
        lock = tmp / f"{name}.lock"
        cmd = [*rb, "build", str(EXAMPLES / model), "--lock", str(lock), "--backend", "reference"]
        cmd += ["--cache-dir", str(tmp / "caches"), "-o", str(tmp / f"{name}.engine"), "-q", *extra]
        subprocess.run(cmd, check=True)
        out[name] = lock
    data = load_lock(out["recorded_cnn"])
    entry = next(e for e in data.layers if len(e.candidates) > 1)
    other = next(c for c in entry.candidates if c.tactic != entry.tactic)
    pin = [*rb, "pin", f"key={entry.key}", f"tactic=0x{other.tactic:x}"]
    subprocess.run([*pin, "--lock", str(out["recorded_cnn"])], check=True, capture_output=True)
    return out


def main() -> None:
    dest = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "fixtures" / "locks"
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in recorded(Path(tmp)).items():
            shutil.copyfile(path, dest / f"{name}.lock")
    for name, lock in constructed().items():
        save_lock(lock, dest / f"{name}.lock")
    for path in dest.glob("*.lock"):
        # What the old loader made of it, so the new loader can be held to the same objects.
        path.with_suffix(".repr").write_text(repr(load_lock(path)) + "\n", encoding="utf-8")
    print(f"wrote {len(list(dest.glob('*.lock')))} golden locks to {dest}")


if __name__ == "__main__":
    main()
