"""Accuracy reported, not assumed: ``build`` and ``verify`` measure the INT8
digits CNN against FP32 on the calibration set and on held-apart images.

The figures are checked against an independent computation: the engine and ONNX Runtime on
the whole 540-image split in one run, rows cut afterwards. The engine takes exactly 540
images, so the 256 calibration and 284 held-apart images each run padded; equal figures show
the padding does not leak into them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx

from reprobuild.accuracy import compare_outputs
from reprobuild.backends import get_backend
from reprobuild.precision.measure import run_model
from tests.models import digits

CALIB = 256


def _sets(tmp: Path) -> tuple[Path, Path]:
    x = digits.held_out_split()[0]
    np.savez(tmp / "calib.npz", input=x[:CALIB])
    np.savez(tmp / "apart.npz", input=x[CALIB:])
    return tmp / "calib.npz", tmp / "apart.npz"


def test_build_and_verify_report_int8_error_on_both_sets(cli, tmp_path: Path) -> None:
    calib, apart = _sets(tmp_path)
    lock, engine = tmp_path / "t.lock", tmp_path / "cnn.engine"
    model = digits.model_path("cnn")
    r = cli(
        "build", str(model), "--backend", "reference", "--lock", str(lock), "--out",
        str(engine), "--cache-dir", str(tmp_path / "caches"), "--precision", "int8",
        "--calibration", str(calib), "--calib-batch-size", "32", "--held-out", str(apart),
        "--json",
    )  # fmt: skip
    assert r.code == 0, r
    acc = json.loads(r.out)["accuracy"]
    report = json.loads((tmp_path / "cnn.engine.report.json").read_text())
    assert report["accuracy"] == acc
    assert acc["calibration"]["samples"] == CALIB and acc["held_out"]["samples"] == 540 - CALIB

    # independent: engine and FP32 on the whole split at once, cut into the two sets
    feeds = digits.held_out_feeds()
    got = np.asarray(get_backend("reference").run(engine.read_bytes(), feeds)[digits.OUTPUT])
    _, ref, _ = run_model(onnx.load(str(model)), feeds, "FP32")
    want = np.asarray(ref[0])
    for label, rows in (("calibration", slice(0, CALIB)), ("held_out", slice(CALIB, None))):
        mine = compare_outputs({digits.OUTPUT: got[rows]}, {digits.OUTPUT: want[rows]})
        for key in ("max_abs", "cosine", "top1_agreement"):
            assert acc[label][key] == mine[key], (label, key)
        # INT8 is not FP32 (the error is real), yet nearly every decision holds
        assert acc[label]["max_abs"] > 0.01
        assert 0.999 < acc[label]["cosine"] < 1.0
        assert acc[label]["top1_agreement"] >= 0.98
    assert "top-1 agreement" in cli(
        "build", str(model), "--backend", "reference", "--lock", str(lock), "--out",
        str(engine), "--cache-dir", str(tmp_path / "caches"), "--held-out", str(apart), "-q",
        "--precision", "int8", "--calib-batch-size", "32",
    ).out  # fmt: skip

    v = cli(
        "verify", "--backend", "reference", "--lock", str(lock), "--rebuilds", "1",
        "--no-control", "--cache-dir", str(tmp_path / "caches"), "--calibration", str(calib),
        "--held-out", str(apart), "--json",
    )  # fmt: skip
    assert v.code == 0, v
    ver = json.loads(v.out)
    assert ver["sample_accuracy"] == acc  # the same locked engine bits, the same figures
    assert 0.99 < ver["accuracy"]["cosine"] < 1.0 and ver["accuracy"]["top1_agreement"] > 0.9


def test_held_out_data_that_does_not_fit_is_refused(cli, tmp_path: Path) -> None:
    np.savez(tmp_path / "bad.npz", input=np.zeros((3, 1, 4, 4), np.float32))
    r = cli(
        "build", str(digits.model_path("mlp")), "--backend", "reference", "--lock",
        str(tmp_path / "t.lock"), "--out", str(tmp_path / "e.engine"), "--cache-dir",
        str(tmp_path / "caches"), "--held-out", str(tmp_path / "bad.npz"), "-q",
    )  # fmt: skip
    assert r.code == 2 and "has shape [3, 1, 4, 4]" in r.err, r
    assert not (tmp_path / "e.engine").exists()


def test_an_engine_that_cannot_run_the_samples_is_reported_not_fatal(tmp_path: Path) -> None:
    """The accuracy section is reported, never deciding: an engine that fails on the sample
    sets (no CUDA runtime for ``run``, say) leaves the build standing, each set saying why."""
    import numpy as np

    from reprobuild.errors import BuildError
    from reprobuild.events import quiet
    from reprobuild.types import BuildSettings
    from reprobuild.workflow.sampleacc import engine_accuracy
    from tests.models import digits

    np.savez(tmp_path / "h.npz", input=digits.held_out_split()[0][:8])

    def run(_feeds: object) -> object:
        raise BuildError("no CUDA runtime: pip install nvidia-cuda-runtime")

    acc = engine_accuracy(
        run, None, digits.model_path("cnn"), None, tmp_path / "h.npz", BuildSettings(), quiet
    )
    assert acc == {
        "held_out": {
            "source": "h.npz",
            "samples": 8,
            "error": "the engine did not run on the samples: no CUDA runtime: pip install "
            "nvidia-cuda-runtime",
        }
    }
