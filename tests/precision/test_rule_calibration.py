"""The fp16/bf16 rules read every calibration sample, from every source INT8 reads.

ModelOpt AutoCast measures every batch of its calibration data, Torch-TensorRT every batch
of its DataLoader: a node is kept FP32 when *any* sample overflows the threshold. Here only
the last of four samples is large, so a rule that read one sample would convert the node.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import reprobuild
from reprobuild.errors import UsageError
from reprobuild.lock.plan import PrecisionSettings
from reprobuild.lock.yamlio import load_lock
from reprobuild.workflow.request import PrecisionRequest

from .helpers import _init, _model, _vi

F32 = np.float32


def _chain(path: Path) -> Path:
    """x [1, 8] -> MatMul ``mm`` (w 0.25) -> Relu ``relu`` -> y [1, 4]; batch fixed at 1."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    w = np.full((8, 4), 0.25, F32)
    onnx.save(_model(nodes, [_vi("x", [1, 8])], [_vi("y", [1, 4])], [_init("w", w)]), path)
    return path


def _samples(big_last: bool) -> np.ndarray:
    x = np.full((4, 1, 8), 0.5, F32)  # four samples of the model's [1, 8]: mm gives 1.0
    if big_last:
        x[3] *= 1e3  # mm gives 1000 > 512 on the fourth sample only
    return x.reshape(4, 8)  # first axis = samples (of the model's batch of 1)


def _rule(tmp_path: Path, calibration: str) -> tuple[str, str, str]:
    model = _chain(tmp_path / "chain.onnx")
    request = PrecisionRequest("fp16", PrecisionSettings(), calibration=calibration)
    reprobuild.build(
        model, lock=tmp_path / "t.lock", out=tmp_path / "e.engine", backend="reference",
        cache_dir=tmp_path / "caches", precision=request,
    )  # fmt: skip
    plan = load_lock(tmp_path / "t.lock").precision
    node = plan.by_node()["mm"]
    return node.precision, node.rule, plan.calibration


@pytest.mark.parametrize("source", ["npz", "folder", "json"])
def test_a_large_value_in_any_sample_keeps_the_node_fp32(source: str, tmp_path: Path) -> None:
    x = _samples(big_last=True)
    if source == "npz":
        spec = tmp_path / "calib.npz"
        np.savez(spec, x=x)
    elif source == "folder":
        spec = tmp_path / "calib"
        spec.mkdir()
        for i, row in enumerate(x):
            np.save(spec / f"{i:02d}.npy", row[None])  # one sample each, name order
    else:
        from polygraphy.json import save_json

        spec = tmp_path / "calib.json"  # Polygraphy's own writer: one feed dict per sample
        save_json([{"x": row[None]} for row in x], str(spec))
    precision, rule, label = _rule(tmp_path, str(spec))
    assert (precision, rule) == ("fp32", "magnitude"), (precision, rule)
    assert label.startswith("sha256:")


def test_the_same_samples_without_the_large_one_convert_the_node(tmp_path: Path) -> None:
    spec = tmp_path / "calib.npz"
    np.savez(spec, x=_samples(big_last=False))
    precision, rule, _ = _rule(tmp_path, str(spec))
    assert precision == "fp16", rule


def test_fewer_samples_than_the_models_batch_is_refused(tmp_path: Path) -> None:
    from reprobuild.precision.calibdata import rule_batches

    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    model = _model(nodes, [_vi("x", [4, 8])], [_vi("y", [4, 8])], [])
    spec = tmp_path / "calib.npz"
    np.savez(spec, x=np.ones((3, 8), F32))
    with pytest.raises(UsageError, match="fewer than the model's batch of 4"):
        rule_batches(str(spec), model)
