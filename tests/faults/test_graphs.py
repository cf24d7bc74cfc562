"""Models that build with nothing to compute: an output no node produces, and an input with
a 0-sized (or negative) fixed dimension. Both once built with exit 0 (the reference engine
then failed on its own seeded inputs, or timed kernels on empty tensors); each is now one
line naming the model file and the fix, before anything is hashed or built."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from .helpers import assert_clean, snapshot


def _dangling_output(model: onnx.ModelProto) -> None:
    model.graph.output.append(helper.make_tensor_value_info("ghost", TensorProto.FLOAT, [8, 10]))


def _dim(value: int):
    def edit(model: onnx.ModelProto) -> None:
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = value

    return edit


def _negative_output(model: onnx.ModelProto) -> None:
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = -2


CASES = {
    "negative-dim-output": (_negative_output, "output 'output' has the shape -2x"),
    "dangling-output": (_dangling_output, "graph output 'ghost' is produced by no node"),
    "zero-dim-input": (_dim(0), "input 'input' has the shape 0x1024"),
    "negative-dim-input": (_dim(-3), "input 'input' has the shape -3x1024"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", ["build", "verify"])
def test_nothing_to_compute_is_refused(proj: Path, cli, case: str, command: str) -> None:
    edit, words = CASES[case]
    model = onnx.load(str(proj / "mlp.onnx"))
    edit(model)
    onnx.save(model, str(proj / "bad.onnx"))
    before = snapshot(proj)
    if command == "build":
        r = cli("build", "bad.onnx", "--lock", "n.lock", "--backend", "reference", "-q")
    else:  # the lock's model replaced by the bad one: refused before the model hash check
        r = cli("verify", "--lock", "t.lock", "bad.onnx", "-n", "1")
    assert r.code == 2, r
    line = r.err.splitlines()[-1]  # after verify's progress lines
    assert line.startswith("error: bad.onnx: ") and words in line, r
    assert "re-export the model" in line, r
    assert_clean(r, proj, before)


def test_an_output_that_is_an_input_or_initializer_still_builds(proj: Path, cli) -> None:
    """Passing a graph input or a weight straight through is a real (if odd) output."""
    model = onnx.load(str(proj / "mlp.onnx"))
    model.graph.output.append(helper.make_tensor_value_info("fc2.bias", TensorProto.FLOAT, [10]))
    onnx.save(model, str(proj / "pass.onnx"))
    r = cli("build", "pass.onnx", "--lock", "p.lock", "--backend", "reference", "-q")
    assert "produced by no node" not in r.err, r
