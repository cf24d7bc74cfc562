"""verify --inputs runs every sample of a batch file; --outputs chooses what is compared.

Polygraphy's data loaders iterate a batch file whose first axis holds samples; verify does
the same, in runs of the model's fixed batch, so a file of any sample count is checked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from reprobuild.backends.reference import ReferenceBackend
from reprobuild.workflow.outputs import output_hashes

from .conftest import EXAMPLES

BASE = ("--backend", "reference", "-q")


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    model = onnx.shape_inference.infer_shapes(onnx.load(str(EXAMPLES / "cnn.onnx")))
    gap = next(v for v in model.graph.value_info if v.name == "gap")
    model.graph.output.append(gap)  # a second output: the pooled features
    onnx.save(model, str(tmp_path / "two.onnx"))
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_inputs_file_runs_every_sample_in_model_batches(work: Path, cli) -> None:
    r = cli("build", "cnn.onnx", "--lock", "t.lock", "--out", "cnn.engine", *BASE)
    assert r.code == 0, r
    x = np.random.default_rng(3).standard_normal((5, 3, 32, 32)).astype(np.float32)
    np.savez("batch.npz", input=x)  # 5 samples; the model takes 2 per run
    r = cli("verify", "--lock", "t.lock", "-n", "1", "--inputs", "batch.npz", "--json", *BASE)
    assert r.code == 0, r
    doc = json.loads(r.out)
    engine = Path("cnn.engine").read_bytes()
    runs = [ReferenceBackend().run(engine, {"input": x[i : i + 2]})["output"] for i in (0, 2)]
    last = ReferenceBackend().run(engine, {"input": x[[4, 4]]})["output"][:1]  # padded run
    want = output_hashes({"output": np.concatenate([*runs, last])})
    assert doc["builds"][0]["output_sha256"] == want
    assert doc["inputs"].endswith("(batch.npz), 5 samples") and doc["power"] is True
    assert doc["accuracy"]["samples"] == 5 and doc["accuracy"]["max_abs"] < 1e-4
    # Polygraphy JSON of two feeds (3 and 2 samples): the same 5 samples, the same bits
    Path("batch.json").write_text(json.dumps([_feed(x[:3]), _feed(x[3:])]))
    r = cli("verify", "--lock", "t.lock", "-n", "1", "--inputs", "batch.json", "--json", *BASE)
    assert r.code == 0, r
    assert json.loads(r.out)["builds"][0]["output_sha256"] == want


def _feed(arr: np.ndarray) -> dict:
    """One feed as ``polygraphy run --save-inputs`` writes it: base64 ``np.save`` bytes."""
    import base64
    import io

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    data = base64.b64encode(buf.getvalue()).decode()
    return {"input": {"array": data, "polygraphy_class": "ndarray"}}


def test_outputs_chooses_what_is_compared(work: Path, cli) -> None:
    r = cli("build", "two.onnx", "--lock", "two.lock", *BASE)
    assert r.code == 0, r
    r = cli("verify", "--lock", "two.lock", "-n", "1", "--json", *BASE)
    assert set(json.loads(r.out)["builds"][0]["output_sha256"]) == {"output", "gap"}
    r = cli("verify", "--lock", "two.lock", "-n", "1", "--outputs", "gap", *BASE)
    assert r.code == 0, r
    assert "bits: digest" in r.out and "of gap only (--outputs)" in r.out
    assert "build 1: sha256 per output gap=" in r.out and "output=" not in r.out.split("\n")[0]
    r = cli("verify", "--lock", "two.lock", "-n", "1", "--outputs", "gpa", *BASE)
    assert r.code == 2 and r.err.count("\n") == 1, r
    assert "has no output 'gpa'; did you mean 'gap'?" in r.err
    r = cli("verify", "--lock", "two.lock", "--outputs", "gap", "--record-digests", *BASE)
    assert r.code == 2 and "drop --outputs" in r.err, r


def test_missing_inputs_file_is_called_an_inputs_file(work: Path, cli) -> None:
    r = cli("build", "cnn.onnx", "--lock", "t.lock", *BASE)
    assert r.code == 0, r
    before = Path("t.lock").read_bytes()
    r = cli("verify", "--lock", "t.lock", "--inputs", "nope.npz", *BASE)
    assert r.code == 2 and r.err.startswith("error: nope.npz: no such inputs file;"), r
    assert "calibration" not in r.err and Path("t.lock").read_bytes() == before
    np.savez("bad.npz", input=np.zeros((5, 3, 31, 32), np.float32))
    r = cli("verify", "--lock", "t.lock", "--inputs", "bad.npz", *BASE)
    assert r.code == 2 and "bad.npz: array 'input' has shape [5, 3, 31, 32]" in r.err, r
