"""The ModelOpt / Torch-TensorRT precision options end to end: ``reprobuild build`` records
them in the lock's plan settings, a locked build honours them (same engine, no option
needed), ``show --precision`` says why each node runs where it does, ``diff`` which rule's
decision changed; and BF16 on an opset-17 CNN converts the model to opset 22 so that its
Convs run in BF16 on the reference backend.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reprobuild.lock.yamlio import load_lock
from tests.models import digits

from .conftest import EXAMPLES

CNN = EXAMPLES / "cnn.onnx"
DIGITS_CNN = digits.model_path("cnn")


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _build(cli, tmp: Path, model: Path, *extra: str, lock: str, out: str):
    return cli(
        "build", str(model), "--backend", "reference", "--lock", str(tmp / f"{lock}.lock"),
        "--out", str(tmp / f"{out}.engine"), "--cache-dir", str(tmp / "caches"), *extra,
    )  # fmt: skip


def _layer_types(tmp: Path, out: str) -> dict[str, str]:
    """Each engine layer's first input type, from the layer information the build wrote."""
    doc = json.loads((tmp / f"{out}.engine.layers.json").read_text())
    return {
        layer["Name"]: layer["Inputs"][0]["Format/Datatype"].rsplit(" ", 1)[-1]
        for layer in doc["Layers"]
    }


def test_bf16_on_an_opset_17_cnn_converts_and_runs_its_convs_in_bf16(cli, tmp: Path) -> None:
    r = _build(cli, tmp, DIGITS_CNN, "--precision", "bf16", lock="a", out="a")
    assert r.code == 0, r
    assert (
        "digits_cnn.onnx: ONNX opset 17 converted to 22 with onnx.version_converter" in r.err
        and "bf16 Conv needs opset 22; the lock records it" in r.err
    )
    plan = load_lock(tmp / "a.lock").precision
    assert plan is not None and plan.opset is not None
    assert (plan.opset.source, plan.opset.target, plan.opset.reason) == (
        17,
        22,
        "bf16 Conv needs opset 22",
    )
    assert {n.node: n.precision for n in plan.nodes if n.op == "Conv"} == {
        "conv1": "bf16",
        "conv2": "bf16",
    }
    # the reference backend ran both Convs on BF16 data with BF16 kernels
    kernels = {e.layer: e.kernel for e in load_lock(tmp / "a.lock").layers}
    assert "_bf16_" in kernels["conv1"] and "_bf16_" in kernels["conv2"]
    types = _layer_types(tmp, "a")
    assert types["conv1"] == types["conv2"] == "BF16"
    shown = cli("show", "--precision", "--lock", str(tmp / "a.lock"))
    assert shown.code == 0, shown
    assert f"opset: 17 -> 22 (onnx {plan.opset.onnx}): bf16 Conv needs opset 22" in shown.out

    # A locked build converts again and builds the same engine (the lock is not rewritten).
    before = (tmp / "a.lock").read_bytes()
    again = _build(cli, tmp, DIGITS_CNN, "--frozen", lock="a", out="b")
    assert again.code == 0, again
    assert (tmp / "a.lock").read_bytes() == before
    assert (tmp / "b.engine").read_bytes() == (tmp / "a.engine").read_bytes()

    # --opset 17 keeps the model's opset: the Convs stay FP32 and say why
    kept = _build(cli, tmp, DIGITS_CNN, "--precision", "bf16", "--opset", "17", lock="k", out="k")
    assert kept.code == 0, kept
    shown = cli("show", "--precision", "--lock", str(tmp / "k.lock"))
    row = next(line for line in shown.out.splitlines() if line.startswith("conv1 "))
    assert row.split()[:4] == ["conv1", "Conv", "fp32", "unsupported"]
    assert row.endswith("kept FP32: ONNX Conv has no bfloat16 form at opset 17 (opset 22 adds one)")
    assert _layer_types(tmp, "k")["conv1"] == "FP32"

    # diff names the rule that decides each changed node now, and the one that did
    d = cli("diff", str(tmp / "k.lock"), str(tmp / "a.lock"))
    assert d.code == 1
    assert "  settings.opset: 17 -> None\n" in d.out
    assert "  opset conversion: none -> 17 to 22 (bf16 Conv needs opset 22)\n" in d.out
    assert (
        "  node conv1: fp32/unsupported -> bf16/default\n"
        "      decided by default (runs in BF16: no rule kept it in FP32), was unsupported "
        "(kept FP32: ONNX Conv has no bfloat16 form at opset 17 (opset 22 adds one))\n"
    ) in d.out
    js = json.loads(cli("diff", str(tmp / "k.lock"), str(tmp / "a.lock"), "--json").out)
    node = next(c for c in js["precision_changed"] if c["name"] == "conv1")
    assert node["detail"].startswith("decided by default (runs in BF16")


OPTIONS = (
    "--precision", "fp16", "--data-max", "1.0", "--nodes-to-include", "^conv1$",
    "--op-types-to-include", "MaxPool", "--magnitude-io", "--init-max", "60000",
    "--init-conversion-max-bytes", "256", "--no-keep-io-types", "--calibration-seed", "3",
)  # fmt: skip


def test_options_are_recorded_and_a_locked_build_honours_them(cli, tmp: Path) -> None:
    r = _build(cli, tmp, CNN, *OPTIONS, lock="a", out="a")
    assert r.code == 0, r
    plan = load_lock(tmp / "a.lock").precision
    assert plan is not None and plan.calibration == "seeded:3"
    settings = plan.settings.to_dict()
    assert {k: settings[k] for k in list(settings)[-6:]} == {
        "keep_io_types": False,
        "nodes_to_include": ["^conv1$"],
        "op_types_to_include": ["MaxPool"],
        "init_max": 60000.0,
        "init_conversion_max_bytes": 256,
        "magnitude_io": True,
    }
    rules = {n.node: (n.precision, n.rule) for n in plan.nodes}
    assert rules["conv1"] == ("fp16", "include")  # over the 1.0 output limit
    assert rules["pool1"] == ("fp16", "include")
    assert rules["relu1"] == ("fp32", "magnitude")
    # keep_io_types off: the engine reads its input in FP16 (no Cast layer in front)
    assert _layer_types(tmp, "a")["conv1"] == "FP16"
    shown = cli("show", "--precision", "--lock", str(tmp / "a.lock"))
    assert (
        "settings: keep_io_types: False  nodes_to_include: ['^conv1$']  "
        "op_types_to_include: ['MaxPool']  init_max: 60000.0  init_conversion_max_bytes: 256  "
        "magnitude_io: True\n"
    ) in shown.out
    assert "forced to FP16: --nodes-to-include '^conv1$' overrides magnitude: |output| max" in (
        shown.out
    )

    # without options, and with the same options, a locked build applies the plan as recorded
    lock_bytes = (tmp / "a.lock").read_bytes()
    for extra, out in (((), "b"), (OPTIONS, "c")):
        again = _build(cli, tmp, CNN, *extra, "--frozen", lock="a", out=out)
        assert again.code == 0, again
        assert (tmp / f"{out}.engine").read_bytes() == (tmp / "a.engine").read_bytes()
    assert (tmp / "a.lock").read_bytes() == lock_bytes

    # another value of a new option is refused, naming the setting
    other = [*OPTIONS[:-2], "--init-conversion-max-bytes", "512"]
    changed = _build(cli, tmp, CNN, *other, lock="a", out="d")
    assert changed.code == 2
    assert "init_conversion_max_bytes: 256 -> 512" in changed.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--nodes-to-include", "^x"), "precision options need --precision"),
        (("--opset", "22"), "precision options need --precision"),
        (("--no-keep-io-types",), "precision options need --precision"),
        (("--precision", "fp16", "--nodes-to-include", "("), "--nodes-to-include '('"),
        (("--precision", "fp16", "--op-types-to-include", "Relux"), "did you mean 'Relu'?"),
        (("--precision", "fp16", "--init-max", "0"), "--init-max 0.0: must be a positive"),
        (("--precision", "fp16", "--opset", "13"), "--opset 13: the model is already opset"),
        (("--precision", "int8", "--opset", "13"), "--opset 13 is an fp16/bf16 option"),
        (
            ("--precision", "fp16", "--calibration", "x.npz", "--calibration-seed", "1"),
            "--calibration-seed 1: the seed is for random reference inputs",
        ),
    ],
)
def test_bad_option_combinations_are_one_line_exit_2(cli, tmp: Path, args, message) -> None:
    r = _build(cli, tmp, CNN, *args, lock="x", out="x")
    assert r.code == 2, r
    assert message in r.err
    assert "Traceback" not in r.err
