"""INT8 with FP16/BF16 for what stays float (``--float``), and INT8 on old-opset models:
decisions and rules in the lock, graphs that really compute in FP16, locked
rebuilds without the calibration data, ``--frozen`` against another ``--float``.

Calibration: the first 256 digits test images in batches of 32, as in test_int8.py. On
them the CNN's ``relu1`` output peaks at 4.74 and ``relu2``/``flat`` at 12.02, so
``--max-output 8`` keeps exactly the last two in FP32.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from reprobuild.backends import get_backend
from reprobuild.errors import UsageError
from reprobuild.lock import load_lock
from reprobuild.lock.plan import NodePrecision, PrecisionSettings
from reprobuild.lock.plandiff import diff_plans
from reprobuild.logs.layerinfo import load_layer_info
from reprobuild.precision.calibdata import CalibData, samples_hash
from reprobuild.precision.int8float import apply_int8_plan, combine
from reprobuild.precision.opset import convert_for_int8
from reprobuild.precision.quantize import calibrate
from tests.models import digits, zoo
from tests.precision.helpers import build_digits as _build

CALIB = 256


def _calib(tmp: Path) -> Path:
    np.savez(tmp / "c.npz", input=digits.held_out_split()[0][:CALIB])
    return tmp / "c.npz"


def _int8(tmp: Path, *extra: str) -> tuple[str, ...]:
    calib = tmp / "c.npz" if (tmp / "c.npz").exists() else _calib(tmp)
    return ("--precision", "int8", "--calibration", str(calib), "--calib-batch-size", "32", *extra)


def _outputs(engine: Path) -> np.ndarray:
    out = get_backend("reference").run(engine.read_bytes(), digits.held_out_feeds())
    return np.asarray(out[digits.OUTPUT])


def _layer_precisions(engine: Path) -> dict[str, str | None]:
    info = load_layer_info(Path(f"{engine}.layers.json"))
    return {layer.name: layer.precision for layer in info.layers}


def test_float_fp16_runs_what_stays_float_in_fp16(cli, tmp_path: Path) -> None:
    assert _build(cli, tmp_path, "cnn", *_int8(tmp_path), lock="f32", out="f32").code == 0
    r = _build(cli, tmp_path, "cnn", *_int8(tmp_path, "--float", "fp16"), lock="f16", out="f16")
    assert r.code == 0, r
    p32 = load_lock(tmp_path / "f32.lock").precision
    p16 = load_lock(tmp_path / "f16.lock").precision
    assert p32 is not None and p16 is not None and p32.quantization and p16.quantization
    assert p16.quantization.float_precision == "fp16"
    assert "    float: fp16\n" in (tmp_path / "f16.lock").read_text()
    assert "float:" not in (tmp_path / "f32.lock").read_text()  # fp32: as older locks
    assert {n.node: (n.precision, n.rule) for n in p16.nodes} == {
        "conv1": ("int8", "default"),
        "relu1": ("fp16", "default"),
        "conv2": ("int8", "default"),
        "relu2": ("fp16", "default"),
        "flatten": ("fp16", "default"),
        "fc": ("int8", "default"),
    }
    assert [(n.precision, n.rule) for n in p32.nodes if n.op != "Conv" and n.op != "Gemm"] == [
        ("fp32", "unsupported")
    ] * 3
    # the float side changes no scale: the same calibration, bit for bit
    assert p16.quantization.activations == p32.quantization.activations
    assert p16.quantization.weights == p32.quantization.weights
    assert diff_plans(p32, p16) == [
        "node relu1: fp32/unsupported -> fp16/default",
        "node relu2: fp32/unsupported -> fp16/default",
        "node flatten: fp32/unsupported -> fp16/default",
        "quantization.float: 'fp32' -> 'fp16'",
    ]

    # the engine computes those nodes in FP16, between Casts; the INT8 kernels stay
    layers = _layer_precisions(tmp_path / "f16.engine")
    assert layers["relu1"] == layers["relu2"] == layers["flatten"] == "FP16"
    assert layers["conv1_out__fp16"] == "FP16" and layers["flat__fp32"] == "FP32"
    assert _layer_precisions(tmp_path / "f32.engine")["relu1"] == "FP32"
    a32, a16 = _outputs(tmp_path / "f32.engine"), _outputs(tmp_path / "f16.engine")
    assert not np.array_equal(a32, a16)  # FP16 rounding reached the logits
    assert float(np.abs(a32 - a16).max()) < 0.5
    assert float((a32.argmax(-1) == a16.argmax(-1)).mean()) >= 0.98

    # the built graph: Q/DQ with FP32 scales, the float side typed FP16
    model = onnx.load(str(digits.model_path("cnn")))
    built = apply_int8_plan(model, p16)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in built.graph.value_info}
    assert types["relu1_out"] == types["conv1_out__fp16"] == TensorProto.FLOAT16
    assert types["relu1_out__fp32"] == TensorProto.FLOAT  # what QuantizeLinear reads
    scales = [i for i in built.graph.initializer if i.name.endswith("_int8_scale")]
    assert scales and all(i.data_type == TensorProto.FLOAT for i in scales)
    assert [n.op_type for n in built.graph.node].count("Cast") == 4


def test_locked_fp16_rebuild_without_data_and_frozen_float(cli, tmp_path: Path) -> None:
    assert _build(cli, tmp_path, "cnn", *_int8(tmp_path, "--float", "fp16")).code == 0
    before = (tmp_path / "t.lock").read_bytes()
    (tmp_path / "c.npz").unlink()
    r = _build(cli, tmp_path, "cnn", "--frozen", out="b")
    assert r.code == 0, r
    assert (tmp_path / "a.engine").read_bytes() == (tmp_path / "b.engine").read_bytes()
    assert _outputs(tmp_path / "a.engine").tobytes() == _outputs(tmp_path / "b.engine").tobytes()
    # the same --float again is fine; another is exit 1 with --frozen, exit 2 without
    same = ("--precision", "int8", "--calib-batch-size", "32", "--float")
    assert _build(cli, tmp_path, "cnn", *same, "fp16", "--frozen", out="c").code == 0
    r = _build(cli, tmp_path, "cnn", *same, "fp32", "--frozen", out="d")
    assert r.code == 1 and "float: 'fp16' -> 'fp32'" in r.err and r.err.count("\n") == 1, r
    r = _build(cli, tmp_path, "cnn", *same, "bf16", out="d")
    assert r.code == 2 and "float: 'fp16' -> 'bf16'" in r.err, r
    assert not (tmp_path / "d.engine").exists()
    assert (tmp_path / "t.lock").read_bytes() == before


def test_float_side_follows_the_fp16_rules(cli, tmp_path: Path) -> None:
    r = _build(cli, tmp_path, "cnn", *_int8(tmp_path, "--float", "fp16", "--max-output", "8"))
    assert r.code == 0, r
    plan = load_lock(tmp_path / "t.lock").precision
    assert plan is not None and plan.settings.max_output == 8.0
    rules = {n.node: (n.precision, n.rule) for n in plan.nodes}
    assert rules["relu1"] == ("fp16", "default")  # peaks at 4.74
    assert rules["relu2"] == rules["flatten"] == ("fp32", "magnitude")  # 12.02 > 8
    # --keep-fp32 keeps a node out of INT8 and out of FP16 alike
    r = _build(
        cli, tmp_path, "cnn", *_int8(tmp_path, "--float", "fp16", "--keep-fp32", "^relu1$|^fc$"),
        lock="k",
    )  # fmt: skip
    assert r.code == 0, r
    k = {n.node: (n.precision, n.rule) for n in load_lock(tmp_path / "k.lock").precision.nodes}  # type: ignore[union-attr]
    assert k["relu1"] == k["fc"] == ("fp32", "name") and k["relu2"] == ("fp16", "default")


def test_magnitude_is_measured_over_every_calibration_batch() -> None:
    """relu1 peaks at 4.686 in the first batch of 32 images and at 4.740 in the seventh:
    --max-output 4.7 keeps it in FP32 only if every batch is measured."""
    model = onnx.load(str(digits.model_path("cnn")))
    x = digits.held_out_split()[0]

    def rule(n: int) -> tuple[str, str]:
        data = CalibData({"input": x[:n]}, n, samples_hash({"input": x[:n]}), "x")
        settings = PrecisionSettings(max_output=4.7)
        plan, _ = calibrate(model, settings, "minmax", 32, data, "fp16")
        return next((p.precision, p.rule) for p in plan.nodes if p.node == "relu1")

    assert rule(32) == ("fp16", "default")
    assert rule(CALIB) == ("fp32", "magnitude")


def test_float_bf16_on_the_mlp(cli, tmp_path: Path) -> None:
    r = _build(cli, tmp_path, "mlp", *_int8(tmp_path, "--float", "bf16"))
    assert r.code == 0, r
    plan = load_lock(tmp_path / "t.lock").precision
    assert plan is not None
    assert [(n.node, n.precision) for n in plan.nodes] == [
        ("flatten", "bf16"),
        ("fc1", "int8"),
        ("relu1", "bf16"),
        ("fc2", "int8"),
    ]
    assert _layer_precisions(tmp_path / "a.engine")["relu1"] == "BF16"
    out = _outputs(tmp_path / "a.engine")
    labels = digits.held_out_split()[1]
    assert digits.accuracy(out, labels) >= digits.FP32_FLOOR["mlp"] - 0.03


def test_edited_lock_with_an_fp16_node_but_fp32_float_is_refused(cli, tmp_path: Path) -> None:
    assert _build(cli, tmp_path, "cnn", *_int8(tmp_path, "--float", "fp16")).code == 0
    lock = tmp_path / "t.lock"
    lock.write_text(lock.read_text().replace("    float: fp16\n", ""))
    r = _build(cli, tmp_path, "cnn", out="b")
    assert r.code == 2 and "runs node 'relu1' in fp16, but its float precision is fp32" in r.err
    lock.write_text(lock.read_text().replace("onnxruntime:", "float: fp8\n    onnxruntime:"))
    r = cli("show", "--lock", str(lock), "--precision")
    assert r.code == 2 and "quantization.float" in r.err and "'fp8'" in r.err, r


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--float", "fp16"), "--float fp16 is an INT8 option"),
        (("--precision", "fp16", "--float", "fp16"), "--float fp16 is an INT8 option"),
        (("--precision", "int8", "--calibration", "c.npz", "--float", "fp8"), "--float 'fp8'"),
    ],
)
def test_bad_float_is_one_line_exit_2(cli, tmp_path: Path, monkeypatch, extra, needle) -> None:
    monkeypatch.chdir(tmp_path)
    _calib(tmp_path)
    r = _build(cli, tmp_path, "cnn", *extra)
    assert r.code == 2 and r.err.count("\n") == 1 and needle in r.err, r
    assert not (tmp_path / "t.lock").exists()


def test_constants_feeding_int8_nodes_stay_fp32() -> None:
    """A constant producer is FP16 only while every consumer is: once its MatMul is INT8
    (which reads FP32), the fp16 rules' ``constant`` decision turns to FP32."""
    c = helper.make_node(
        "Constant", [], ["w"], name="c", value=helper.make_tensor("v", 1, [2], [1, 2])
    )
    mm = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    add = helper.make_node("Add", ["y", "w"], ["z"], name="add")
    graph = helper.make_graph(
        [c, mm, add], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
    )  # fmt: skip
    model = helper.make_model(graph)
    ruled = [
        NodePrecision("c", "Constant", "fp16", "constant"),
        NodePrecision("mm", "MatMul", "fp16", "default"),
        NodePrecision("add", "Add", "fp16", "default"),
    ]
    int8 = [
        NodePrecision("c", "Constant", "fp32", "unsupported"),
        NodePrecision("mm", "MatMul", "int8", "default"),
        NodePrecision("add", "Add", "fp32", "unsupported"),
    ]
    assert combine(model, int8, ruled, "fp16") == [
        NodePrecision("c", "Constant", "fp32", "constant"),
        NodePrecision("mm", "MatMul", "int8", "default"),
        NodePrecision("add", "Add", "fp16", "default"),
    ]
    only_add = [int8[0], NodePrecision("mm", "MatMul", "fp32", "op"), int8[2]]
    assert combine(model, only_add, [ruled[0], only_add[1], ruled[2]], "fp16")[0].precision == (
        "fp32"
    )
    assert combine(model, int8, [ruled[0], ruled[1], ruled[2]], "fp16")[2].precision == "fp16"


# --------------------------------------------------------------------- old opsets


def test_opset9_zoo_model_is_converted_recorded_and_rebuilt_bit_identical(
    cli, tmp_path: Path
) -> None:
    model = zoo.reweighted_path("squeezenet", tmp_path)
    proto = onnx.load(str(model))
    name, shape = zoo.data_input(proto)
    x = np.random.default_rng(0).random((3, *shape[1:]), dtype=np.float32)
    np.savez(tmp_path / "sq.npz", **{name: x})

    def build(*extra: str, out: str):
        return cli(
            "build", str(model), "--backend", "reference", "--lock", str(tmp_path / "sq.lock"),
            "--out", str(tmp_path / f"{out}.engine"), "--cache-dir", str(tmp_path / "caches"),
            "-q", *extra,
        )  # fmt: skip

    r = build("--precision", "int8", "--calibration", str(tmp_path / "sq.npz"), "--float",
              "fp16", "--calib-method", "minmax", out="a")  # fmt: skip
    assert r.code == 0, r
    note = f"{model.name}: ONNX opset 9 converted to 13 with onnx.version_converter"
    assert note in r.err
    text = (tmp_path / "sq.lock").read_text()
    assert f'    opset:\n      from: 9\n      to: 13\n      onnx: "{onnx.__version__}"\n' in text
    plan = load_lock(tmp_path / "sq.lock").precision
    assert plan is not None and plan.quantization is not None
    q = plan.quantization
    assert q.opset is not None and (q.opset.source, q.opset.target) == (9, 13)
    counts = {p: sum(n.precision == p for n in plan.nodes) for p in ("int8", "fp16", "fp32")}
    assert counts["int8"] == 26 and counts["fp16"] > 20  # every Conv; Relu/Concat/Pool...
    assert len(q.activations) > 0 and len(q.weights) == 26

    (tmp_path / "sq.npz").unlink()
    r = build("--frozen", out="b")
    assert r.code == 0 and note in r.err, r
    assert (tmp_path / "a.engine").read_bytes() == (tmp_path / "b.engine").read_bytes()
    feeds = {name: x[:1]}
    be = get_backend("reference")
    first = be.run((tmp_path / "a.engine").read_bytes(), feeds)
    again = be.run((tmp_path / "b.engine").read_bytes(), feeds)
    assert all(np.asarray(first[k]).tobytes() == np.asarray(again[k]).tobytes() for k in first)
    # a lock whose plan says no conversion does not fit this opset-9 model
    lock = tmp_path / "sq.lock"
    block = f'    opset:\n      from: 9\n      to: 13\n      onnx: "{onnx.__version__}"\n'
    lock.write_text(text.replace(block, ""))
    r = build(out="c")
    assert r.code == 2 and r.err.count("\n") == 1, r
    assert "recorded on an opset >= 13 model, but the model is opset 9" in r.err


def test_a_failing_opset_conversion_is_one_line_exit_2(monkeypatch) -> None:
    from onnx import version_converter

    model = zoo.light_model("squeezenet")
    assert convert_for_int8(onnx.load(str(digits.model_path("cnn"))), "cnn.onnx")[1] is None

    def fail(*_args, **_kwargs):
        raise RuntimeError("No Adapter For Current Version\nsecond line")

    monkeypatch.setattr(version_converter, "convert_version", fail)
    with pytest.raises(UsageError) as err:
        convert_for_int8(model, "zoo/squeezenet.onnx")
    msg = str(err.value)
    assert msg.startswith("zoo/squeezenet.onnx: INT8 needs ONNX opset >= 13")
    assert "opset 9 model (No Adapter For Current Version)" in msg and "by hand" in msg
    assert "\n" not in msg
