"""``run`` with a shape-tensor input and an output whose shape depends on the data.

The stand-in (tests/trt_standin/dynamic_io.py, which cites TensorRT's documentation) reports
the shape tensor through ``is_shape_inference_io`` and refuses it in device memory, and
gives the ``NonZero`` output a ``-1`` shape until an ``IOutputAllocator`` receives it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import reprobuild
from tests.test_trt_variants import install_standin


def _model(path: Path) -> Path:
    """x [2, 3] -> MatMul -> h [2, 4]; y = Reshape(h, s) with s a shape-tensor input;
    idx = NonZero(Relu(h)) (int64, [2, data-dependent])."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
            helper.make_node("Reshape", ["h", "s"], ["y"], name="reshape"),
            helper.make_node("Relu", ["h"], ["r"], name="relu"),
            helper.make_node("NonZero", ["r"], ["idx"], name="nonzero"),
        ],
        "dynamic_io",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [2, None]),
        ],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _built(tmp_path: Path):
    """The stand-in's backend and its engine of the model above (the stand-in installed)."""
    from reprobuild.backends.tensorrt.backend import TensorRTBackend

    be = TensorRTBackend()
    model = _model(tmp_path / "dyn.onnx")
    return be, be.build(
        str(model), reprobuild.BuildSettings(), be.create_timing_cache(), lambda line: None
    ).engine


def test_shape_tensor_inputs_and_data_dependent_outputs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trt = install_standin(monkeypatch)
    be, engine = _built(tmp_path)
    w = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    seen = []
    for x, s in (
        (np.ones((2, 3), np.float32), (4, 2)),  # 4 positive elements
        (np.array([[0, 0, 1], [0, 0, 3]], np.float32), (8, 1)),  # 8
        (np.array([[1, 0, 0], [0, 0, 0]], np.float32), (1, 8)),  # none: an empty output
    ):
        out = be.run(engine, {"x": x, "s": np.array(s, np.int64)})
        h = x @ w
        assert out["y"].shape == s  # shaped by the shape tensor's values
        assert np.allclose(out["y"], h.reshape(s), rtol=1e-5)
        assert out["idx"].dtype == np.int64
        assert np.array_equal(out["idx"], np.stack(np.nonzero(np.maximum(h, 0))))
        seen.append(out["idx"].shape)
    assert seen == [(2, 4), (2, 8), (2, 0)]  # the output's shape followed the data
    assert trt._test_device.live == {}  # the allocator's buffers were freed too


def test_a_shape_tensor_is_passed_in_host_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without the host-memory branch (every input copied to the device) the stand-in, like
    TensorRT, cannot read the shape: the run fails as one EngineError line."""
    from reprobuild.errors import EngineError

    trt = install_standin(monkeypatch)
    be, engine = _built(tmp_path)
    feeds = {"x": np.ones((2, 3), np.float32), "s": np.array((4, 2), np.int64)}
    assert be.run(engine, feeds)["y"].shape == (4, 2)
    monkeypatch.setattr(trt.ICudaEngine, "is_shape_inference_io", lambda self, name: False)
    with pytest.raises(EngineError, match="execute_async_v3 returned False"):
        be.run(engine, feeds)
    assert trt._test_device.live == {}


def _shape_output_model(path: Path) -> Path:
    """x [2, 3] -> MatMul -> y [2, 4]; n = Shape(y), an INT64 shape-tensor output."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.ones((3, 4), np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["y"], name="fc"),
            helper.make_node("Shape", ["y"], ["n"], name="shape"),
        ],
        "shape_output",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("n", TensorProto.INT64, [2]),
        ],
        [numpy_helper.from_array(w, "w")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_shape_tensor_output_lives_in_host_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """TensorRT writes a shape-tensor output to host memory; given a device buffer (the
    host branch disabled) the stand-in, like TensorRT, fails the run."""
    from reprobuild.backends.tensorrt.backend import TensorRTBackend
    from reprobuild.errors import EngineError

    trt = install_standin(monkeypatch)
    be = TensorRTBackend()
    model = _shape_output_model(tmp_path / "shape.onnx")
    engine = be.build(
        str(model), reprobuild.BuildSettings(), be.create_timing_cache(), lambda line: None
    ).engine
    feeds = {"x": np.ones((2, 3), np.float32)}
    out = be.run(engine, feeds)
    assert out["n"].dtype == np.int64 and out["n"].tolist() == [2, 4]
    assert out["y"].shape == (2, 4)
    assert trt._test_device.live == {}
    monkeypatch.setattr(trt.ICudaEngine, "is_shape_inference_io", lambda self, name: False)
    with pytest.raises(EngineError, match="execute_async_v3 returned False"):
        be.run(engine, feeds)
    assert trt._test_device.live == {}
