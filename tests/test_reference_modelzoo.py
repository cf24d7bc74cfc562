"""The onnx package's light model-zoo models build and run on the reference backend.

Inputs follow onnx's own test runner (``np.arange(n).reshape(shape) / n`` for each
non-initializer input). The light models' weights are constants: their softmax is flat, and
whether it comes out exactly flat depends on every output channel being summed with the same
rounding, which some BLAS kernel families do and others do not (the expected outputs
shipped beside the models hold on one CPU and fail on another). So the models are
re-weighted first (``tests.models.zoo``), and the outputs and every intermediate tensor are
compared with ONNX Runtime.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from reprobuild.backends.base import BuildSettings
from reprobuild.backends.reference import ReferenceBackend
from tests.models import zoo

# (rtol, atol) used by onnx's own backend tests for these models
TOLERANCE = {"resnet50": (1e-3, 1e-7), "squeezenet": (1e-3, 1e-7), "shufflenet": (1e-3, 1e-7)}


def with_all_outputs(model: onnx.ModelProto, path: Path) -> list[str]:
    """Expose every node output as a graph output (Dropout masks aside) and save."""
    names = [o.name for o in model.graph.output]
    for node in model.graph.node:
        if node.op_type in ("ConstantOfShape", "Constant"):
            continue
        outs = node.output[:1] if node.op_type == "Dropout" else node.output
        for out in outs:
            if out and out not in names:
                names.append(out)
                model.graph.output.append(onnx.ValueInfoProto(name=out))
    onnx.save(model, path)
    return names


def check_model(name: str, tmp_path: Path) -> None:
    backend = ReferenceBackend()
    src = zoo.reweighted_path(name, tmp_path)
    model = onnx.load(src)
    feeds = zoo.runner_inputs(model)
    rtol, atol = TOLERANCE[name]

    # the re-weighted model against ONNX Runtime
    cache = backend.create_timing_cache()
    lines: list[str] = []
    out = backend.build(str(src), BuildSettings(), cache, lines.append)
    ours = backend.run(out.engine, feeds)
    (output_name,) = [o.name for o in model.graph.output]
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(ours[output_name], sess.run(None, feeds)[0], rtol=rtol, atol=atol)
    n_conv = sum(1 for node in model.graph.node if node.op_type in ("Conv", "Gemm", "MatMul"))
    # one key per format combination: a Conv with a kernel larger than 1x1 has two
    n_keys = n_conv + sum(1 for layer in out.extra["layers"] if len(layer["keys"]) == 2)
    assert all(len(layer["keys"]) in (1, 2) for layer in out.extra["layers"])
    assert out.extra["timed_layers"] == n_conv and len(cache) == n_keys > n_conv
    assert sum(1 for ln in lines if "] Autotuning op " in ln) == n_keys

    # every intermediate tensor against ONNX Runtime
    probe = tmp_path / f"{name}_all.onnx"
    names = with_all_outputs(onnx.load(src), probe)
    # extra graph outputs do not change any layer's identity: the keys are the same
    probe_cache = backend.create_timing_cache(cache.serialize())
    probe_out = backend.build(str(probe), BuildSettings(), probe_cache, lambda _: None)
    assert probe_out.extra["timed_layers"] == 0 and probe_cache.tactic_map() == cache.tactic_map()
    ours_all = backend.run(probe_out.engine, feeds)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    theirs = ort.InferenceSession(str(probe), so, providers=["CPUExecutionProvider"]).run(
        names, feeds
    )
    for tensor, ref in zip(names, theirs, strict=True):
        got = ours_all[tensor]
        scale = float(np.abs(ref).max()) or 1.0
        assert got.shape == ref.shape, tensor
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4 * scale, err_msg=tensor)

    # a build from the full timing cache times nothing and keeps every choice
    lines2: list[str] = []
    cache2 = backend.create_timing_cache(cache.serialize())
    again = backend.build(str(src), BuildSettings(), cache2, lines2.append)
    assert not any("] Autotuning op " in ln for ln in lines2)
    assert sum(1 for ln in lines2 if re.search(r"got cached result: ref_", ln)) == n_keys
    assert again.extra["tactic_map"] == out.extra["tactic_map"] == cache.tactic_map()
    again_out = backend.run(again.engine, feeds)
    assert np.array_equal(again_out[output_name], ours[output_name])


@pytest.mark.slow
def test_resnet50(tmp_path: Path) -> None:
    check_model("resnet50", tmp_path)


def test_squeezenet(tmp_path: Path) -> None:
    check_model("squeezenet", tmp_path)


def test_shufflenet_grouped_convolutions(tmp_path: Path) -> None:
    check_model("shufflenet", tmp_path)
