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
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from reprobuild.backends.reference import ReferenceBackend
from reprobuild.lock.plandiff import diff_plans
from reprobuild.lock.yamlio import load_lock, save_lock
from reprobuild.precision.calibration import load_calibration
from reprobuild.precision.ops import MATRIX_OPS
from reprobuild.precision.rules import derive_plan
from reprobuild.types import Environment
from reprobuild.workflow.outputs import load_inputs

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


def _build(
    cli,
    tmp: Path,
    model: Path,
    *extra: str,
    lock: str,
    out: str,
    cache: str = "caches",
    timing: str = "",
):
    """``reprobuild build`` with the lock ``tmp/<lock>.lock`` and outputs ``tmp/<out>.*``;
    ``timing`` is the reference backend's timing knob (hidden ``--ref-timing``)."""
    if timing:
        extra = (*extra, "--ref-timing", timing)
    return cli(
        "build",
        str(model),
        "--backend",
        "reference",
        "--lock",
        str(tmp / f"{lock}.lock"),
        "--out",
        str(tmp / f"{out}.engine"),
        "--cache-dir",
        str(tmp / cache),
        "--report",
        str(tmp / f"{out}.report.json"),
        "--quiet",
        *extra,
    )


def _run(engine: Path, model: Path = CNN) -> dict[str, np.ndarray]:
    feeds = load_inputs(None, model, 0).feeds
    return ReferenceBackend().run(engine.read_bytes(), feeds)


def _rows(plan) -> list[tuple[str, str, str, str]]:
    return [(n.node, n.op, n.precision, n.rule) for n in plan.nodes]


def _kernels(engine: Path) -> dict[str, str]:
    """The kernel each autotuned layer runs (a Conv has two keys in the lock, one per format
    combination, and runs one of them)."""
    meta = ReferenceBackend().engine_metadata(engine.read_bytes())
    return {layer["name"]: layer["kernel"] for layer in meta["layers"]}


def _same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    assert sorted(a) == sorted(b)
    return all(a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a)


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ------------------------------------------------------------------ the plan in the lock


def test_build_records_per_node_rules_and_show_prints_them(cli, tmp: Path) -> None:
    r = _build(cli, tmp, CNN, *RULE_OPTS, lock="a", out="a")
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
    kernels = _kernels(tmp / "a.engine")
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
    assert lines[1].split() == ["node", "op", "precision", "rule", "why"]
    assert [tuple(line.split()[:4]) for line in lines[3:-1]] == RULE_PLAN
    # every node's deciding rule in words, with what the rule measured or matched
    why = {line.split()[0]: line.split(None, 4)[4] for line in lines[3:-1]}
    assert why["conv2"] == "runs in FP16: no rule kept it in FP32"
    assert why["gap"] == "kept FP32: GlobalAveragePool is in --keep-fp32-op"
    assert why["fc"] == "kept FP32: name matches --keep-fp32 '^fc$'"
    # the seeded input has the model's static batch of 2
    words = re.fullmatch(
        r"kept FP32: \|output\| max (\S+) > 1 on 2 calibration samples", why["conv1"]
    )
    assert words is not None and float(words.group(1)) > 1.0
    assert (
        next(n for n in plan.nodes if n.node == "conv1").why == why["conv1"][len("kept FP32: ") :]
    )
    counts = {p: sum(1 for row in RULE_PLAN if row[2] == p) for p in ("fp16", "fp32")}
    assert lines[-1] == f"{len(RULE_PLAN)} nodes: {counts['fp16']} fp16, {counts['fp32']} fp32"

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
    r = _build(cli, tmp, CNN, *RULE_OPTS, "--json", lock="a", out="a")
    assert r.code == 0, r
    summary = {"mode": "fp16", "nodes": 8, "low_precision": 3}  # conv2, relu2, flatten
    assert json.loads(r.out)["precision"] == summary
    report = json.loads((tmp / "a.report.json").read_text())
    assert report["precision"] == summary
    # A plain FP32 build has no plan, and says so in the report.
    r = _build(cli, tmp, CNN, lock="plain", out="plain")
    assert r.code == 0, r
    assert json.loads((tmp / "plain.report.json").read_text())["precision"] is None
    assert load_lock(tmp / "plain.lock").precision is None


def test_without_onnx_runtime_the_report_says_why_it_has_no_precision_error(
    cli, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ONNX Runtime made unimportable here: a locked FP16 build still builds, and its report
    and its warnings say why the plan's error was not measured; a recording, which needs ONNX
    Runtime to derive the plan, refuses in one line (exit 3), not with a crash."""
    assert _build(cli, tmp, FP16_MIDDLE, "--precision", "fp16", lock="h", out="h").code == 0
    measured = json.loads((tmp / "h.report.json").read_text())["precision_error"]
    assert {"max_abs", "cosine", "runtime"} <= measured.keys()
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now fails
    why = "ONNX Runtime cannot be imported (ModuleNotFoundError: "
    r = _build(cli, tmp, FP16_MIDDLE, lock="h", out="h2")
    assert r.code == 0, r
    error = json.loads((tmp / "h2.report.json").read_text())["precision_error"]
    assert error["error"].startswith(why) and error["inputs"] == measured["inputs"]
    assert error["error"].endswith("reinstall it: pip install --force-reinstall onnxruntime")
    assert f"precision error not measured: {why}" in r.err
    r = _build(cli, tmp, FP16_MIDDLE, "--precision", "fp16", lock="new", out="new")
    assert r.code == 3, r
    assert r.err.startswith(f"error: {why}") and len(r.err.strip().splitlines()) == 1
    assert not (tmp / "new.lock").exists()


def test_show_precision_without_plan(cli, tmp: Path) -> None:
    assert _build(cli, tmp, CNN, lock="plain", out="plain").code == 0
    r = cli("show", "--precision", "--lock", str(tmp / "plain.lock"))
    assert r.code == 0, r
    assert "no precision plan" in r.out
    r = cli("show", "--precision", "--lock", str(tmp / "plain.lock"), "--json")
    assert json.loads(r.out)["precision"] is None


# ------------------------------------------------------- a lock's plan is never re-derived


def test_new_calibration_with_lock_keeps_plan_and_bits(
    cli, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _build(cli, tmp, CNN, *RULE_OPTS, lock="a", out="first").code == 0
    lock_bytes = (tmp / "a.lock").read_bytes()
    first = _run(tmp / "first.engine")

    # Calibration data on which the rules decide differently: half the seeded inputs keep
    # every magnitude below 1.0, so conv1/relu1/pool1 would no longer be kept in FP32.
    feeds = load_inputs(None, CNN, 0).feeds
    np.savez(
        tmp / "new.npz", **{k: (v * np.float32(0.5)).astype(v.dtype) for k, v in feeds.items()}
    )
    model = onnx.load(str(CNN))
    locked = load_lock(tmp / "a.lock").precision
    new_feeds, desc = load_calibration(str(tmp / "new.npz"), model)
    rederived = derive_plan(model, "fp16", locked.settings, new_feeds, desc)
    changed = diff_plans(locked, rederived)
    assert "node conv1: fp32/magnitude -> fp16/default" in changed
    assert "node pool1: fp32/magnitude -> fp16/default" in changed

    # The same precision options plus the new calibration: workflow._prepare_model compares
    # mode and settings only, so the calibration is accepted and the lock's plan applied
    # verbatim. Reversed timings and a fresh cache directory make the recording step that
    # creates the keys choose other tactics; the pins must still win.
    r = _build(
        cli,
        tmp,
        CNN,
        *RULE_OPTS,
        "--calibration",
        str(tmp / "new.npz"),
        lock="a",
        out="second",
        cache="fresh",
        timing="reverse",
    )
    assert r.code == 0, r
    assert "locked build" in r.out and "(unchanged)" in r.out
    assert (tmp / "a.lock").read_bytes() == lock_bytes
    assert load_lock(tmp / "a.lock").precision.calibration == "seeded:0"
    second = _run(tmp / "second.engine")
    assert _same_bits(first, second)

    # Without the lock, the same reversed timings choose other kernels: the pins mattered.
    r = _build(
        cli, tmp, CNN, *RULE_OPTS, lock="unlocked", out="unlocked", cache="fresh2", timing="reverse"
    )
    assert r.code == 0, r
    assert _kernels(tmp / "unlocked.engine") != _kernels(tmp / "first.engine")

    # verify rebuilds from the lock (its plan, not re-derived) and agrees bit for bit.
    r = cli(
        "verify",
        "--lock",
        str(tmp / "a.lock"),
        "--backend",
        "reference",
        "--cache-dir",
        str(tmp / "caches"),
        "--rebuilds",
        "2",
        "--json",
    )
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert doc["reproducible"] is True and doc["power"] is True
    assert doc["inputs"] == "seeded:0"
    assert doc["differing_outputs"] == []
    assert len({b["output_sha256"]["output"] for b in doc["builds"]}) == 1


def test_locked_build_without_options_uses_lock_plan(cli, tmp: Path) -> None:
    assert _build(cli, tmp, CNN, *RULE_OPTS, lock="a", out="first").code == 0
    lock_bytes = (tmp / "a.lock").read_bytes()
    r = _build(cli, tmp, CNN, "--frozen", lock="a", out="second")
    assert r.code == 0, r
    assert (tmp / "a.lock").read_bytes() == lock_bytes
    assert _same_bits(_run(tmp / "first.engine"), _run(tmp / "second.engine"))


# ---------------------------------------------------------------- FP32 accumulation


def test_fp32_accumulate_changes_only_matrix_layers(
    cli, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kernels whose name contains "f16acc" (ref_*_splitk4_f16_f16acc, ref_*_k16_f16_f16acc)
    # round every partial sum to FP16; prefer them wherever a layer has one.
    knob = "prefer:f16acc"
    assert (
        _build(cli, tmp, CNN, "--precision", "fp16", lock="f16", out="f16", timing=knob).code == 0
    )
    r = _build(
        cli,
        tmp,
        CNN,
        "--precision",
        "fp16",
        "--fp32-accumulate",
        lock="acc32",
        out="acc32",
        timing=knob,
    )
    assert r.code == 0, r
    plan16 = load_lock(tmp / "f16.lock").precision
    plan32 = load_lock(tmp / "acc32.lock").precision

    # The plans differ in the setting and in the accumulate field of matrix nodes only.
    assert diff_plans(plan16, plan32) == [
        "settings.fp32_accumulate: False -> True",
        "node conv1: fp16/default -> fp16/default (acc fp32)",
        "node conv2: fp16/default -> fp16/default (acc fp32)",
        "node fc: fp16/default -> fp16/default (acc fp32)",
    ]
    for a, b in zip(plan16.nodes, plan32.nodes, strict=True):
        assert (a.node, a.op, a.precision, a.rule) == (b.node, b.op, b.precision, b.rule)
        assert a.accumulate is None
        assert b.accumulate == ("fp32" if a.op in MATRIX_OPS else None)
    assert {n.op for n in plan16.nodes if n.op in MATRIX_OPS} == {"Conv", "Gemm"}

    # The FP16 plan got FP16-accumulating kernels; FP32 accumulation runs FP32 kernels.
    k16, k32 = _kernels(tmp / "f16.engine"), _kernels(tmp / "acc32.engine")
    assert set(k16) == set(k32) == {"conv1", "conv2", "fc"}
    assert all(k.endswith("_f16_f16acc") for k in k16.values()), k16
    assert all(k.endswith("_f32") for k in k32.values()), k32
    assert not _same_bits(_run(tmp / "f16.engine"), _run(tmp / "acc32.engine"))

    # Only the matrix layers change: an FP16 plan whose matrix layers use the FP32-
    # accumulating BLAS kernel (exact upcast, FP32 sums, one rounding) and the
    # --fp32-accumulate plan on the FP32 BLAS kernel (Cast up, FP32, Cast down) agree bit for
    # bit, so every other node computes the same in both graphs.
    knob = "prefer:blas_f16_f32acc"
    assert (
        _build(cli, tmp, CNN, "--precision", "fp16", lock="f16b", out="f16b", timing=knob).code == 0
    )
    r = _build(
        cli,
        tmp,
        CNN,
        "--precision",
        "fp16",
        "--fp32-accumulate",
        lock="acc32b",
        out="acc32b",
        timing="prefer:blas_f32",
    )
    assert r.code == 0, r
    assert set(_kernels(tmp / "f16b.engine").values()) == {
        "ref_conv_im2col_blas_f16_f32acc",
        "ref_gemm_blas_f16_f32acc",
    }
    assert set(_kernels(tmp / "acc32b.engine").values()) == {
        "ref_conv_im2col_blas_f32",
        "ref_gemm_blas_f32",
    }
    assert _same_bits(_run(tmp / "f16b.engine"), _run(tmp / "acc32b.engine"))


# ---------------------------------------------------------------- option changes vs lock


def test_changed_precision_options_against_lock(cli, tmp: Path) -> None:
    assert _build(cli, tmp, CNN, "--precision", "fp16", lock="a", out="a").code == 0
    lock_bytes = (tmp / "a.lock").read_bytes()
    before = sorted(p.name for p in tmp.iterdir())

    for extra in (("--precision", "fp16", "--fp32-accumulate"), ("--precision", "bf16")):
        r = _build(cli, tmp, CNN, *extra, "--frozen", lock="a", out="b")
        assert r.code == 1, r
        assert r.err.count("\n") == 1 and r.err.startswith("error: ")
        assert "the precision options differ from the lock's plan" in r.err
        assert "--frozen refuses to change the plan" in r.err
        assert (tmp / "a.lock").read_bytes() == lock_bytes
        assert sorted(p.name for p in tmp.iterdir()) == before  # no engine, report, cache

    r = _build(cli, tmp, CNN, "--precision", "fp16", "--fp32-accumulate", lock="a", out="b")
    assert r.code == 2, r
    assert r.err.count("\n") == 1
    assert "fp32_accumulate" in r.err
    assert "drop the options, or delete the lock to re-plan" in r.err
    assert (tmp / "a.lock").read_bytes() == lock_bytes
    assert sorted(p.name for p in tmp.iterdir()) == before

    # The same options as the lock pass under --frozen: the exit 1 above was the mismatch.
    r = _build(cli, tmp, CNN, "--precision", "fp16", "--frozen", lock="a", out="b")
    assert r.code == 0, r
    assert (tmp / "a.lock").read_bytes() == lock_bytes


def test_precision_on_lock_without_plan(cli, tmp: Path) -> None:
    assert _build(cli, tmp, CNN, lock="a", out="a").code == 0
    lock_bytes = (tmp / "a.lock").read_bytes()
    r = _build(cli, tmp, CNN, "--precision", "fp16", "--frozen", lock="a", out="b")
    assert r.code == 1, r
    assert "has no precision plan; --frozen refuses to add one" in r.err
    r = _build(cli, tmp, CNN, "--precision", "fp16", lock="a", out="b")
    assert r.code == 2, r
    assert "recorded without a precision plan; delete it to re-record" in r.err
    assert (tmp / "a.lock").read_bytes() == lock_bytes
    assert not (tmp / "b.engine").exists()


def test_another_target_keeps_the_precision_plan(cli, tmp: Path) -> None:
    """The plan is decided on the CPU and shared by every target: a machine of another
    target records its own section and builds with the same plan."""
    assert _build(cli, tmp, CNN, *RULE_OPTS, lock="a", out="a").code == 0
    lock = load_lock(tmp / "a.lock")
    plan = lock.precision
    env = lock.environment
    lock.environment = Environment.make(
        env.backend, {**env.identity_dict(), "blas_kernels": "Elsewhere"}, env.advisory_dict()
    )
    save_lock(lock, tmp / "a.lock")
    r = _build(cli, tmp, CNN, "--frozen", lock="a", out="b")
    assert r.code == 3, r
    r = _build(cli, tmp, CNN, lock="a", out="b")
    assert r.code == 0, r
    after = load_lock(tmp / "a.lock")
    assert after.precision == plan and len(after.targets()) == 2
    assert "_f16_" in _kernels(tmp / "b.engine")["conv2"]


@pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")
def test_out_of_range_input_is_not_cast_to_fp16(cli, tmp: Path) -> None:
    # logits up to ~1e5 (kept in FP32 by the magnitude rule) feed a Softmax whose outputs
    # are <= 1: converting the Softmax casts 1e5 to FP16, which overflows.
    w = np.full((4, 8), 3.0e4, np.float32) * np.linspace(0.5, 1.5, 8, dtype=np.float32)
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("MatMul", ["x", "w"], ["logits"], name="fc"),
            onnx.helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
        ],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 8])],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp / "logits.onnx")
    assert _build(cli, tmp, tmp / "logits.onnx", "--precision", "fp16", lock="s", out="s").code == 0
    plan = load_lock(tmp / "s.lock").precision
    assert _rows(plan)[0] == ("fc", "MatMul", "fp32", "magnitude")
    out = _run(tmp / "s.engine", tmp / "logits.onnx")["y"]
    assert np.isfinite(out).all(), out
    assert _rows(plan)[1][:3] == ("softmax", "Softmax", "fp32")


# ---------------------------------------------------------------- invalid options


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--precision", "fp16", "--keep-fp32", "conv("), "--keep-fp32 'conv(': bad regular"),
        (("--precision", "fp16", "--keep-fp32-op", "Matmul"), "did you mean 'MatMul'?"),
        (("--precision", "fp16", "--max-output", "-1"), "--max-output -1.0: must be a positive"),
        (("--precision", "fp16", "--max-output", "inf"), "--max-output inf: must be a positive"),
        (
            ("--precision", "fp16", "--max-reduction-depth", "0"),
            "--max-reduction-depth 0: must be a positive integer",
        ),
        (("--precision", "fp8"), "--precision 'fp8': unknown precision; use fp16, bf16 or int8"),
        (("--keep-fp32", "fc"), "precision options need --precision fp16, bf16 or int8"),
        (("--fp32-accumulate",), "precision options need --precision"),
    ],
)
def test_invalid_precision_options(cli, tmp: Path, extra: tuple[str, ...], needle: str) -> None:
    r = _build(cli, tmp, CNN, *extra, lock="a", out="a")
    assert r.code == 2, r
    assert r.err.startswith("error: ") and r.err.count("\n") == 1, r.err
    assert needle in r.err
    assert list(tmp.iterdir()) == []  # no lock, engine, report or cache directory


def test_max_output_without_precision_is_rejected(cli, tmp: Path) -> None:
    r = _build(cli, tmp, CNN, "--max-output", "-1", lock="a", out="a")
    assert r.code == 2, r
    assert "precision options need --precision" in r.err
    assert list(tmp.iterdir()) == []


# ---------------------------------------------------------------- already mixed precision

OBSERVED = [
    ("fc1", "Gemm", "fp32", "observed"),
    ("to_fp16", "Cast", "other", "observed"),
    ("fc2", "Gemm", "fp16", "observed"),
    ("to_fp32", "Cast", "other", "observed"),
    ("fc3", "Gemm", "fp32", "observed"),
]


def test_mixed_precision_model_records_observed_plan(cli, tmp: Path) -> None:
    r = _build(cli, tmp, FP16_MIDDLE, "--json", lock="m", out="m")
    assert r.code == 0, r
    assert json.loads(r.out)["precision"] == {"mode": "observed", "nodes": 5, "low_precision": 1}
    report = json.loads((tmp / "m.report.json").read_text())
    assert report["precision"] == {"mode": "observed", "nodes": 5, "low_precision": 1}
    plan = load_lock(tmp / "m.lock").precision
    assert plan is not None and plan.mode == "observed"
    assert plan.calibration is None
    assert _rows(plan) == OBSERVED
    kernels = _kernels(tmp / "m.engine")
    assert "_f16_" in kernels["fc2"]
    assert kernels["fc1"].endswith("_f32") and kernels["fc3"].endswith("_f32")

    shown = cli("show", "--precision", "--lock", str(tmp / "m.lock"))
    assert shown.code == 0, shown
    assert shown.out.splitlines()[0].split()[:2] == ["mode:", "observed"]
    assert [tuple(line.split()[:4]) for line in shown.out.splitlines()[3:-1]] == OBSERVED
    assert shown.out.splitlines()[-1].startswith(f"{len(OBSERVED)} nodes: ")

    # Rebuilding from the lock checks the model against the observed plan and changes nothing.
    lock_bytes = (tmp / "m.lock").read_bytes()
    r = _build(cli, tmp, FP16_MIDDLE, "--frozen", lock="m", out="m2")
    assert r.code == 0, r
    assert (tmp / "m.lock").read_bytes() == lock_bytes
    assert _same_bits(_run(tmp / "m.engine", FP16_MIDDLE), _run(tmp / "m2.engine", FP16_MIDDLE))

    # Asking for a conversion on top of the observed plan is an option mismatch.
    r = _build(cli, tmp, FP16_MIDDLE, "--precision", "fp16", lock="m", out="m3")
    assert r.code == 2, r
    assert "the precision options differ from the lock's plan (mode: 'observed' -> 'fp16'" in r.err
    assert (tmp / "m.lock").read_bytes() == lock_bytes
