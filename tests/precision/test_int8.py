"""INT8 by calibration: scales locked to the bit, locked rebuilds without the
calibration data, ``--frozen`` against other data, and accuracy on the digits models.

Calibration data: the first 256 images of the digits test split (the only digits data in
the repository), so accuracy is reported on all 540 images and, held apart from
calibration, on the last 284.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from reprobuild.backends import get_backend
from reprobuild.lock import load_lock
from reprobuild.lock.plan import PrecisionSettings
from reprobuild.precision.calibdata import CalibData, samples_hash
from reprobuild.precision.qdq import apply_quant_plan, quantize_weight
from reprobuild.precision.quantize import calibrate
from tests.models import digits
from tests.precision.helpers import build_digits as _build

CALIB = 256


def _calib_npz(path: Path, order: np.ndarray | None = None, n: int = CALIB) -> Path:
    x = digits.held_out_split()[0][:n]
    np.savez(path, input=x if order is None else x[order])
    return path


def _int8(calib: Path, batch: int = 32) -> tuple[str, ...]:
    return ("--precision", "int8", "--calibration", str(calib), "--calib-batch-size", str(batch))


def _outputs(engine: Path) -> np.ndarray:
    out = get_backend("reference").run(engine.read_bytes(), digits.held_out_feeds())
    return np.asarray(out[digits.OUTPUT])


def test_lock_scales_equal_the_built_graph_to_the_bit(cli, tmp_path: Path) -> None:
    r = _build(cli, tmp_path, "cnn", *_int8(_calib_npz(tmp_path / "c.npz")))
    assert r.code == 0, r
    plan = load_lock(tmp_path / "t.lock").precision
    assert plan is not None and plan.mode == "int8" and plan.quantization is not None
    q = plan.quantization
    assert (q.method, q.batch_size, q.samples) == ("entropy", 32, CALIB)
    assert [n.node for n in plan.nodes if n.precision == "int8"] == ["conv1", "conv2", "fc"]
    assert {a.tensor for a in q.activations} == {"input", "relu1_out", "flat"}
    text = (tmp_path / "t.lock").read_text()
    built = apply_quant_plan(onnx.load(str(digits.model_path("cnn"))), plan)
    inits = {i.name: numpy_helper.to_array(i) for i in built.graph.initializer}
    for a in q.activations:
        assert f'scale: "{a.scale.hex()}"' in text  # written as a hex float
        in_graph = inits[f"{a.tensor}_int8_scale"]
        assert in_graph.dtype == np.float32
        assert in_graph.view(np.uint32) == np.float32(a.scale).view(np.uint32)
    # the input is [0, 1]: its symmetric scale is 1/127 rounded to float32
    assert np.float32(q.scales()["input"]) == np.float32(1.0) / np.float32(127.0)
    # per-channel weights: int8 values within +-127, scales max|w| / 127
    w = numpy_helper.to_array(
        next(
            i
            for i in onnx.load(str(digits.model_path("cnn"))).graph.initializer
            if i.name == "conv1.w"
        )
    )
    qw, scale = quantize_weight(w, 0)
    assert np.array_equal(inits["conv1.w_int8"], qw) and np.abs(qw).max() == 127
    assert np.array_equal(inits["conv1.w_int8_scale"], scale)


def test_locked_rebuild_without_data_gives_the_same_bits(cli, tmp_path: Path) -> None:
    calib = _calib_npz(tmp_path / "c.npz")
    assert _build(cli, tmp_path, "cnn", *_int8(calib), out="a").code == 0
    before = (tmp_path / "t.lock").read_bytes()
    calib.unlink()  # the data is gone: the lock alone must rebuild the same graph
    r = _build(cli, tmp_path, "cnn", "--frozen", out="b")
    assert r.code == 0, r
    assert (tmp_path / "t.lock").read_bytes() == before
    assert (tmp_path / "a.engine").read_bytes() == (tmp_path / "b.engine").read_bytes()
    a, b = _outputs(tmp_path / "a.engine"), _outputs(tmp_path / "b.engine")
    assert a.tobytes() == b.tobytes()
    # and the INT8 outputs really differ from FP32 (the Q/DQ graph is what ran)
    fp32 = _build(cli, tmp_path, "cnn", lock="f", out="f")
    assert fp32.code == 0, fp32
    assert not np.array_equal(a, _outputs(tmp_path / "f.engine"))


def test_reordered_data_is_caught_by_frozen(cli, tmp_path: Path) -> None:
    assert _build(cli, tmp_path, "cnn", *_int8(_calib_npz(tmp_path / "c.npz"))).code == 0
    before = (tmp_path / "t.lock").read_bytes()
    order = np.random.default_rng(1).permutation(CALIB)
    other = _calib_npz(tmp_path / "r.npz", order)
    r = _build(cli, tmp_path, "cnn", *_int8(other), "--frozen", out="b")
    assert r.code == 1, r
    assert "r.npz" in r.err and "another order" in r.err and "--frozen refuses" in r.err
    assert r.err.count("\n") == 1
    assert not (tmp_path / "b.engine").exists()
    assert (tmp_path / "t.lock").read_bytes() == before
    # the same data again passes; another batch size is refused
    assert _build(cli, tmp_path, "cnn", *_int8(tmp_path / "c.npz"), "--frozen").code == 0
    r = _build(cli, tmp_path, "cnn", *_int8(tmp_path / "c.npz", 16), "--frozen")
    assert r.code == 1 and "batch_size: 32 -> 16" in r.err, r


def test_calibration_data_decides_the_scales() -> None:
    """Other samples give other scales. Reordering the same samples does not, with ONNX
    Runtime's calibrators on this model (a measured fact, not an assumption): the lock's
    data hash is what catches a reordered set."""
    model = onnx.load(str(digits.model_path("cnn")))
    x = digits.held_out_split()[0]

    def scales(xx: np.ndarray, method: str, batch: int) -> dict[str, float]:
        data = CalibData({"input": xx}, len(xx), samples_hash({"input": xx}), "x")
        plan, _ = calibrate(model, PrecisionSettings(), method, batch, data)
        assert plan.quantization is not None and plan.quantization.data_sha256 == data.sha256
        return plan.quantization.scales()

    few, many = scales(x[:32], "minmax", 32), scales(x[:CALIB], "minmax", 32)
    assert few["relu1_out"] != many["relu1_out"]
    shuffled = x[:CALIB][np.random.default_rng(1).permutation(CALIB)]
    assert samples_hash({"input": shuffled}) != samples_hash({"input": x[:CALIB]})
    assert scales(shuffled, "entropy", 8) == scales(x[:CALIB], "entropy", 8)
    assert scales(x[:CALIB], "percentile", 32)["input"] < many["input"]


@pytest.mark.parametrize("kind", digits.KINDS)
def test_int8_accuracy_against_fp32_and_labels(cli, tmp_path: Path, kind: str) -> None:
    _, labels = digits.held_out_split()
    assert _build(cli, tmp_path, kind, lock="f", out="f").code == 0
    assert _build(cli, tmp_path, kind, *_int8(_calib_npz(tmp_path / "c.npz"))).code == 0
    fp32, int8 = _outputs(tmp_path / "f.engine"), _outputs(tmp_path / "a.engine")
    acc32, acc8 = digits.accuracy(fp32, labels), digits.accuracy(int8, labels)
    agree = float((fp32.argmax(-1) == int8.argmax(-1)).mean())
    # images CALIB.. were not calibrated on: the held-apart figure
    apart32 = digits.accuracy(fp32[CALIB:], labels[CALIB:])
    apart8 = digits.accuracy(int8[CALIB:], labels[CALIB:])
    print(
        f"{kind}: top-1 FP32 {acc32:.3f}, INT8 {acc8:.3f}, agreement {agree:.3f}; "
        f"on the {len(labels) - CALIB} images not calibrated on: FP32 {apart32:.3f}, "
        f"INT8 {apart8:.3f}"
    )
    assert acc32 >= digits.FP32_FLOOR[kind]
    assert acc8 >= acc32 - 0.03 and apart8 >= apart32 - 0.03 and agree >= 0.95


def test_keep_fp32_leaves_nodes_unquantized(cli, tmp_path: Path) -> None:
    extra = (
        *_int8(_calib_npz(tmp_path / "c.npz")),
        "--keep-fp32",
        "^fc$",
        "--keep-fp32-op",
        "Conv",
    )
    assert _build(cli, tmp_path, "cnn", *extra).code == 0
    plan = load_lock(tmp_path / "t.lock").precision
    assert plan is not None and plan.quantization is not None
    rules = {n.node: (n.precision, n.rule) for n in plan.nodes}
    assert rules["fc"] == ("fp32", "name") and rules["conv1"] == ("fp32", "op")
    assert plan.quantization.activations == [] and plan.quantization.weights == []


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (
            ("--precision", "int8", "--calibration", "MISSING.npz"),
            "MISSING.npz: no such calibration",
        ),
        (
            ("--precision", "int8", "--calibration", "c.npz", "--calib-method", "mse"),
            "--calib-method 'mse'",
        ),
        (
            ("--precision", "int8", "--calibration", "c.npz", "--calib-samples", "999"),
            "holds 256 samples",
        ),
        (
            ("--precision", "int8", "--calibration", "c.npz", "--calib-batch-size", "512"),
            "do not fill one batch",
        ),
        (("--precision", "fp16", "--calib-batch-size", "4"), "--calib-batch-size is an INT8"),
    ],
)
def test_bad_int8_input_is_one_line_exit_2(cli, tmp_path: Path, monkeypatch, extra, needle) -> None:
    monkeypatch.chdir(tmp_path)
    _calib_npz(tmp_path / "c.npz")
    r = _build(cli, tmp_path, "cnn", *extra)
    assert r.code == 2, r
    assert r.err.startswith("error: ") and r.err.count("\n") == 1 and needle in r.err, r.err


def test_bad_npz_shape_names_the_file(cli, tmp_path: Path) -> None:
    np.savez(tmp_path / "bad.npz", input=np.zeros((4, 64), np.float32))
    r = _build(cli, tmp_path, "cnn", *_int8(tmp_path / "bad.npz", 2))
    assert r.code == 2 and "bad.npz: array 'input' has shape [4, 64]" in r.err, r


def test_lock_scale_that_is_not_a_hex_float_is_refused(cli, tmp_path: Path) -> None:
    assert _build(cli, tmp_path, "cnn", *_int8(_calib_npz(tmp_path / "c.npz"))).code == 0
    lock = tmp_path / "t.lock"
    text = lock.read_text()
    first = load_lock(lock).precision.quantization.activations[0].scale.hex()  # type: ignore[union-attr]
    lock.write_text(text.replace(f'"{first}"', '"0.0123"', 1))
    r = cli("show", "--lock", str(lock), "--precision")
    assert r.code == 2 and "is not a hex float" in r.err and "t.lock:" in r.err, r


def test_plan_diff_shows_scale_changes() -> None:
    from reprobuild.lock.plandiff import diff_plans

    model = onnx.load(str(digits.model_path("cnn")))
    x = digits.held_out_split()[0]

    def plan(n: int):
        data = CalibData({"input": x[:n]}, n, samples_hash({"input": x[:n]}), "x")
        return calibrate(model, PrecisionSettings(), "minmax", 32, data)[0]

    a, b = plan(32), plan(CALIB)
    lines = diff_plans(a, b)
    assert "quantization.samples: 32 -> 256" in lines
    relu = [ln for ln in lines if ln.startswith("scale relu1_out: ")]
    sa = a.quantization.scales()["relu1_out"]  # type: ignore[union-attr]
    sb = b.quantization.scales()["relu1_out"]  # type: ignore[union-attr]
    assert relu == [f"scale relu1_out: {sa.hex()} ({sa:.6g}) -> {sb.hex()} ({sb:.6g})"]
    assert sa < sb  # more samples, a larger max: minmax can only widen the range
    assert diff_plans(b, b) == []


def test_weights_listed_as_graph_inputs_leave_the_inputs_with_their_initializer() -> None:
    """Old exporters list every initializer as a graph input too (the model zoo's files do):
    the quantized graph must not keep an input whose weight became an INT8 copy."""
    import onnxruntime as ort

    model = onnx.load(str(digits.model_path("mlp")))
    x = digits.held_out_split()[0][:64]
    data = CalibData({"input": x}, len(x), samples_hash({"input": x}), "x")
    plan, _ = calibrate(model, PrecisionSettings(), "minmax", 32, data)
    for init in model.graph.initializer:  # the old-style listing
        model.graph.input.append(
            onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
        )
    built = apply_quant_plan(model, plan)
    inits = {i.name for i in built.graph.initializer}
    listed = [vi.name for vi in built.graph.input]
    assert "input" in listed and all(n == "input" or n in inits for n in listed)
    assert len(listed) > 1  # the weights still in use stay listed, as the exporter had them
    onnx.checker.check_model(built)
    sess = ort.InferenceSession(built.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = sess.run(None, {"input": digits.held_out_split()[0]})
    assert out.shape == (540, 10) and np.isfinite(out).all()


def _flat_absmax(x: np.ndarray) -> float:
    """max |flat| (the fc layer's input) over the samples ``x``, by ONNX Runtime in FP32."""
    import onnxruntime as ort

    model = onnx.load(str(digits.model_path("cnn")))
    model.graph.output.append(onnx.ValueInfoProto(name="flat"))
    pad = np.zeros((540 - len(x), *x.shape[1:]), np.float32)  # the model's static batch
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (flat,) = sess.run(["flat"], {"input": np.concatenate([x, pad])})
    return float(np.abs(flat[: len(x)]).max())


def test_batch_order_changes_scales_when_it_decides_which_samples_are_used(
    cli, tmp_path: Path
) -> None:
    """ONNX Runtime's calibrators see the whole set at once (one histogram or min/max over
    every batch), so reordering *all* samples keeps every scale (test above). Order decides
    the scales when it decides which samples are calibrated on: ``--calib-samples N`` takes
    the first N, and a batch size that does not divide the count drops the last ones."""
    x = digits.held_out_split()[0][:CALIB]
    order = np.random.default_rng(1).permutation(CALIB)
    calib, other = _calib_npz(tmp_path / "c.npz"), _calib_npz(tmp_path / "r.npz", order)
    first64 = ("--calib-samples", "64", "--calib-method", "minmax")
    assert _build(cli, tmp_path, "cnn", *_int8(calib, 8), *first64, lock="a").code == 0
    assert _build(cli, tmp_path, "cnn", *_int8(other, 8), *first64, lock="b", out="b").code == 0
    qa = load_lock(tmp_path / "a.lock").precision.quantization  # type: ignore[union-attr]
    qb = load_lock(tmp_path / "b.lock").precision.quantization  # type: ignore[union-attr]
    assert qa is not None and qb is not None and qa.samples == qb.samples == 64
    sa, sb = qa.scales(), qb.scales()
    assert sa["input"] == sb["input"]  # both subsets reach 1.0: the same range
    # minmax: the scale is max|x| / 127 over the 64 samples used (ONNX Runtime's float32
    # arithmetic may differ in the last bit from this float64 reference)
    assert sa["flat"] == pytest.approx(_flat_absmax(x[:64]) / 127, rel=1e-6)
    assert sb["flat"] == pytest.approx(_flat_absmax(x[order][:64]) / 127, rel=1e-6)
    assert sb["flat"] / sa["flat"] == pytest.approx(1.088, abs=0.001)  # 12.02 / 11.04
    # the lock catches it: --frozen with the reordered file refuses, nothing written
    before = (tmp_path / "a.lock").read_bytes()
    r = _build(cli, tmp_path, "cnn", *_int8(other, 8), *first64, "--frozen", lock="a", out="c")
    assert r.code == 1 and "another order" in r.err and "--frozen refuses" in r.err, r
    assert (tmp_path / "a.lock").read_bytes() == before and not (tmp_path / "c.engine").exists()
    # and diff shows the scale change, exact and in decimal, and exits 1
    r = cli("diff", str(tmp_path / "a.lock"), str(tmp_path / "b.lock"), "--json")
    assert r.code == 1, r
    changes = {(c["kind"], c["name"]): c for c in json.loads(r.out)["precision_changed"]}
    assert changes[("scale", "flat")] == {
        "kind": "scale",
        "name": "flat",
        "a": sa["flat"].hex(),
        "b": sb["flat"].hex(),
        "a_decimal": sa["flat"],
        "b_decimal": sb["flat"],
    }
    assert ("scale", "input") not in changes
    assert changes[("quantization", "data_sha256")]["a"] == repr(qa.data_sha256)


def test_a_batch_size_that_drops_other_samples_changes_the_scales() -> None:
    """256 samples in batches of 24: the last 16 are dropped, which ones depends on the
    order. With percentile calibration, relu1_out's scale moves (measured: 0x1.2e2cf8p-5
    vs 0x1.2f3882p-5); the recorded hash covers only the 240 used."""
    model = onnx.load(str(digits.model_path("cnn")))
    x = digits.held_out_split()[0][:CALIB]
    order = np.random.default_rng(1).permutation(CALIB)

    def quant(xx: np.ndarray):
        data = CalibData({"input": xx}, len(xx), samples_hash({"input": xx}), "x")
        plan, notes = calibrate(model, PrecisionSettings(), "percentile", 24, data)
        assert notes == [
            "calibration: the last 16 samples do not fill a batch of 24 and are not used"
        ]
        return plan.quantization

    qa, qb = quant(x), quant(x[order])
    assert qa.samples == qb.samples == 240
    assert qa.data_sha256 == samples_hash({"input": x[:240]})
    assert qb.data_sha256 == samples_hash({"input": x[order][:240]})
    sa, sb = qa.scales(), qb.scales()
    assert sa["relu1_out"] != sb["relu1_out"]
    assert abs(sa["relu1_out"] / sb["relu1_out"] - 1) < 0.01  # a small move, but other bits


def test_entropy_calibration_clips_where_minmax_takes_the_full_range() -> None:
    """Entropy is its own method: a 2048-bin KL threshold search (TensorRT's sizes) that
    clips long tails. ONNX Runtime's quantize_static passes no histogram size to its entropy
    calibrator, whose default 128 bins leave one threshold (the full range): entropy would
    silently be minmax. Measured on the digits CNN: ``flat`` 12.02 -> 9.78, ``relu1_out``
    4.74 -> 4.15 (as max |x| = scale * 127); the graph input (pixels in [0, 1]) keeps 1."""
    model = onnx.load(str(digits.model_path("cnn")))
    everything = digits.held_out_split()[0]  # the model's static batch
    x = everything[:CALIB]
    data = CalibData({"input": x}, len(x), samples_hash({"input": x}), "x")

    def ranges(method: str) -> dict[str, float]:
        plan, _ = calibrate(model, PrecisionSettings(), method, 32, data)
        return {k: v * 127 for k, v in plan.quantization.scales().items()}  # type: ignore[union-attr]

    full, ent = ranges("minmax"), ranges("entropy")
    flat = _flat(model, everything)[:CALIB]
    assert full["flat"] == pytest.approx(float(np.abs(flat).max()), rel=1e-6)
    assert 9.0 < ent["flat"] < 10.5 and 3.9 < ent["relu1_out"] < 4.4
    assert ent["input"] == pytest.approx(1.0, rel=1e-6) == full["input"]


def _flat(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The ``flat`` tensor of the digits CNN, by ONNX Runtime on the FP32 model."""
    import onnxruntime

    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.output.add().name = "flat"
    sess = onnxruntime.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["flat"], {"input": x})[0]


def test_int8_without_data_calibrates_on_seeded_samples_with_a_warning(cli, tmp_path) -> None:
    """As Polygraphy's default data loader: seeded random samples, recorded as ``seeded:N``,
    and a warning that such scales are for trying, not shipping."""
    r = _build(cli, tmp_path, "cnn", "--precision", "int8")
    assert r.code == 0, r
    assert "warning: --precision int8 without --calibration" in r.err
    assert "not for shipping" in r.err and "(seeded:0)" in r.err
    plan = load_lock(tmp_path / "t.lock").precision
    assert plan is not None and plan.calibration == "seeded:0"
    assert plan.quantization is not None and plan.quantization.samples == 8
    assert plan.quantization.activations  # real scales, from the seeded samples
    # the same seed gives the same plan; another seed is another plan
    r = _build(cli, tmp_path, "cnn", "--precision", "int8", lock="u", out="b")
    assert r.code == 0 and load_lock(tmp_path / "u.lock").precision == plan
    args = ("--precision", "int8", "--calibration-seed", "3")
    assert _build(cli, tmp_path, "cnn", *args, lock="v", out="c").code == 0
    other = load_lock(tmp_path / "v.lock").precision
    assert other is not None and other.calibration == "seeded:3"
    assert other.quantization.data_sha256 != plan.quantization.data_sha256
    # a locked build without data applies the plan as recorded
    assert _build(cli, tmp_path, "cnn", "--frozen", lock="t", out="d").code == 0
