"""Memory: an INT8 calibration over the memory limit is refused before the work, with the
figure and a sample count that fits; the histogram calibrators stream batch by batch yet
give exactly ONNX Runtime's all-at-once ranges. The limit is injected
(``REPROBUILD_MAX_MEMORY_BYTES``); nothing here measures memory or time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from reprobuild.precision.calibmemory import estimate

from .helpers import assert_clean, snapshot

N = 64
BATCH = 8


def _samples(proj: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    arrays = {"input": rng.standard_normal((N, 1024), dtype=np.float32)}
    np.savez(proj / "calib.npz", **arrays)
    return arrays


def _int8(cli, *extra: str):
    return cli("build", "mlp.onnx", "--lock", "q.lock", "--backend", "reference",
               "--precision", "int8", "--calibration", "calib.npz",
               "--calib-batch-size", str(BATCH), *extra)  # fmt: skip


def test_calibration_over_the_limit_is_refused_with_what_fits(proj: Path, cli, monkeypatch):
    arrays = _samples(proj)
    need = estimate(onnx.load(str(proj / "mlp.onnx")), arrays, BATCH)
    fits = 20  # room for 20 samples: the advice rounds down to whole batches, 16
    monkeypatch.setenv("REPROBUILD_MAX_MEMORY_BYTES", str(need.fixed + fits * need.per_sample))
    before = snapshot(proj)
    r = _int8(cli)
    assert r.code == 2, r
    line = r.err.splitlines()[-1]
    gib = need.total(N) / (1 << 30)
    assert line.startswith(
        f"error: calib.npz: INT8 calibration on {N} samples in batches of {BATCH} needs about "
        f"{gib:,.2f} GiB, over the "
    ), r
    assert "(REPROBUILD_MAX_MEMORY_BYTES); use --calib-samples 16 (or fewer)" in line, r
    assert_clean(r, proj, before)
    # the advice is taken under the same limit
    r = _int8(cli, "--calib-samples", "16", "-q")
    assert r.code == 0, r
    assert "16 samples" in (proj / "q.lock").read_text()


def test_no_room_for_one_batch_names_the_batch_size(proj: Path, cli, monkeypatch) -> None:
    arrays = _samples(proj)
    need = estimate(onnx.load(str(proj / "mlp.onnx")), arrays, BATCH)
    monkeypatch.setenv("REPROBUILD_MAX_MEMORY_BYTES", str(need.fixed + 3 * need.per_sample))
    before = snapshot(proj)
    r = _int8(cli)
    assert r.code == 2 and "use a smaller --calib-batch-size" in r.err.splitlines()[-1], r
    assert_clean(r, proj, before)


def test_estimate_follows_the_activations() -> None:
    """One batch's activations are in the fixed part, three times: a model whose hidden
    layer is 4x wider needs 3x the extra activation bytes more, per batch."""
    from onnx import TensorProto, helper, numpy_helper

    def mlp(hidden: int) -> onnx.ModelProto:
        w = numpy_helper.from_array(np.zeros((16, hidden), np.float32), "w")
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
            "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
            [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", hidden])], [w],
        )  # fmt: skip
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    sample = {"x": np.zeros((1, 16), np.float32)}
    small, big = estimate(mlp(64), sample, 4), estimate(mlp(256), sample, 4)
    weights = 3 * 16 * (256 - 64) * 4
    activations = 3 * 2 * 4 * (256 - 64) * 4  # y and z, 4 samples, float32
    assert big.fixed - small.fixed == weights + activations
    assert big.per_sample - small.per_sample == 6 * (256 - 64) * 4  # the outputs


@pytest.mark.parametrize("method", ["entropy", "percentile"])
@pytest.mark.parametrize("batch", [1, 5])
def test_streamed_histograms_are_onnxruntimes(tmp_path: Path, method: str, batch: int) -> None:
    """ONNX Runtime's calibrator fed every batch at once (what reprobuild ran before it
    streamed) and the batch-by-batch collection give the same float32 ranges."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        create_calibrator,
    )

    from reprobuild.precision import calibstream
    from reprobuild.precision.entropy import entropy_threshold
    from reprobuild.precision.quantize import QUANT_OPS, _dynamic_batch

    src = tmp_path / "m.onnx"
    proto = onnx.load(str(Path(__file__).parents[2] / "reprobuild" / "examples" / "mlp.onnx"))
    onnx.save(_dynamic_batch(proto), str(src))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((30, 1024), dtype=np.float32) * rng.uniform(0.1, 4, (30, 1))
    batches = [{"input": x[i : i + batch].astype(np.float32)} for i in range(0, 30, batch)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    options = (
        {"num_bins": calibstream.ENTROPY_BINS, "num_quantized_bins": 128}
        if method == "entropy"
        else {"num_bins": calibstream.PERCENTILE_BINS, "percentile": calibstream.PERCENTILE}
    )
    (tmp_path / "ort").mkdir()
    ort = create_calibrator(
        src, list(QUANT_OPS), augmented_model_path=str(tmp_path / "ort" / "aug.onnx"),
        calibrate_method=getattr(CalibrationMethod, method.capitalize()),
        extra_options={"symmetric": True, **options},
    )  # fmt: skip
    ort.collect_data(Reader())
    if method == "entropy":
        ort.collector.get_entropy_threshold = entropy_threshold
    want = {
        k: [float(v) for v in ort.compute_data()[k].range_value] for k in ort.tensors_to_calibrate
    }
    got = calibstream.histogram_ranges(
        src, tmp_path, list(QUANT_OPS), method, lambda: iter(batches)
    )
    assert {k: [float(v[0]["rmin"]), float(v[0]["rmax"])] for k, v in got.items()} == want
    assert len(want) == 4 and all(hi > 0 for _, hi in want.values())


def test_a_lock_not_in_the_writers_form_is_bounded_before_composing(proj: Path, cli, monkeypatch):
    """The writer's form is read from the parse events; anything else is composed into a
    node tree (about 45x the text), so it is checked against the limit first."""
    from reprobuild.lock.yamlparse import COMPOSE_BYTES_PER_CHAR

    text = (proj / "t.lock").read_text()
    tagged = text.replace("schema: 2", "schema: !!int 2", 1)
    (proj / "tagged.lock").write_text(tagged)
    limit = COMPOSE_BYTES_PER_CHAR * len(tagged) - 1
    monkeypatch.setenv("REPROBUILD_MAX_MEMORY_BYTES", str(limit))
    before = snapshot(proj)
    r = cli("show", "--lock", "tagged.lock")
    assert r.code == 2, r
    assert r.err.splitlines()[-1].startswith(
        "error: tagged.lock: this lock is not in the form reprobuild writes, and reading it "
        "that way needs about "
    ), r
    assert_clean(r, proj, before)
    assert cli("show", "--lock", "t.lock").code == 0  # the writer's form, same limit
    monkeypatch.setenv("REPROBUILD_MAX_MEMORY_BYTES", str(limit + 1))
    assert cli("show", "--lock", "tagged.lock").code == 0
