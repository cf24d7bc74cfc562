#!/usr/bin/env python3
"""Record how ModelOpt AutoCast classifies three re-weighted zoo models, for
tests/precision/test_modelopt_parity.py to hold reprobuild's plan to, node for node.

Why a recorded file: ``nvidia-modelopt`` pulls in torch and its own onnx pin, so it lives in
a virtual environment of its own, never in the project's. The models are written by the
project's environment (its onnx converts them to opset 13, so ModelOpt, whose FP16 minimum
is opset 13, converts nothing) and classified by ModelOpt's::

    .venv/bin/python scripts/modelopt_classes.py write /tmp/mo-cases
    /path/to/modelopt-venv/bin/python scripts/modelopt_classes.py classify /tmp/mo-cases \\
        tests/fixtures/precision/modelopt_classes.json

(ModelOpt logs to stdout, hence a file.)

``classify`` runs ``modelopt.onnx.autocast.convert_to_mixed_precision`` with its defaults
(fp16, data_max 512, init_max 65504, keep_io_types off) on each model with the calibration
``.npz`` written beside it, and records each node's side (fp16 or fp32) as ModelOpt decided
it: the lists its precision converter receives, after its always-FP32 filter. Nodes are
named by their first output (ModelOpt names unnamed nodes itself), with each model's sha256,
so the test knows it compares the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODELS = ("squeezenet", "shufflenet", "resnet50")
OPSET = 13
INPUT_RANGE = {"squeezenet": 255.0, "shufflenet": 16.0, "resnet50": 90.0}
"""Calibration inputs are uniform in [0, INPUT_RANGE): unnormalized images, scaled per model
so that the magnitude rule (data_max 512) keeps some nodes in FP32 and converts others
(37, 48 and 95 of 70, 203 and 176 nodes see a magnitude above 512)."""


def case_model(name: str):
    """The re-weighted zoo model ``name`` at opset 13 (the project's onnx converts it)."""
    sys.path.append(str(ROOT))
    from tests.models import zoo

    return zoo.reweighted(name, opset=OPSET)


def case_feeds(name: str, model) -> dict:
    """The calibration feed: uniform [0, INPUT_RANGE) in the data input's shape, seed 0."""
    import numpy as np

    sys.path.append(str(ROOT))
    from tests.models import zoo

    data, shape = zoo.data_input(model)
    rng = np.random.default_rng(0)
    return {data: (rng.random(shape, dtype=np.float32) * np.float32(INPUT_RANGE[name]))}


def write(directory: Path) -> None:
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        model = case_model(name)
        (directory / f"{name}.onnx").write_bytes(model.SerializeToString())
        np.savez(directory / f"{name}.npz", **case_feeds(name, model))


def classify(directory: Path) -> dict:
    import modelopt
    from modelopt.onnx.autocast import convert_to_mixed_precision
    from modelopt.onnx.autocast.precisionconverter import PrecisionConverter

    seen: dict = {}
    original = PrecisionConverter._filter_unsupported_op_types

    def spy(self, high, low):
        high, low = original(self, high, low)
        outputs = {n.name: n.output[0] for n in self.model.graph.node}
        seen["nodes"] = {outputs[n]: "fp32" for n in high} | {outputs[n]: "fp16" for n in low}
        return high, low

    PrecisionConverter._filter_unsupported_op_types = spy
    out: dict = {"modelopt": modelopt.__version__, "models": {}}
    for name in MODELS:
        path = directory / f"{name}.onnx"
        seen.clear()
        convert_to_mixed_precision(
            onnx_path=str(path),
            low_precision_type="fp16",
            calibration_data=str(directory / f"{name}.npz"),
        )
        out["models"][name] = {
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "nodes": seen["nodes"],
        }
    return out


def main() -> None:
    args = sys.argv[1:]
    if not (
        args[:1] == ["write"] and len(args) == 2 or args[:1] == ["classify"] and len(args) == 3
    ):
        sys.exit(f"usage: {sys.argv[0]} write DIR | classify DIR OUT.json")
    directory = Path(args[1])
    if args[0] == "write":
        write(directory)
    else:
        text = json.dumps(classify(directory), indent=1, sort_keys=True) + "\n"
        Path(args[2]).write_text(text)


if __name__ == "__main__":
    main()
