"""With ModelOpt AutoCast's defaults, reprobuild classifies three re-weighted zoo models
node for node as ModelOpt does.

ModelOpt's defaults in reprobuild's options: ``--precision fp16 --init-max 65504
--magnitude-io --no-keep-io-types`` (data_max is ``--max-output``'s default, 512). Two
references, on the same model bytes and calibration data:

- ModelOpt 0.47.0 itself: ``tests/fixtures/precision/modelopt_classes.json``, recorded by
  ``scripts/modelopt_classes.py`` in an environment with ``nvidia-modelopt`` installed (it
  brings torch and its own onnx, so it is not a test dependency);
- ModelOpt's documented rules, written out below from its AutoCast guide (not its code): a
  node stays FP32 when an input or output magnitude on the reference run exceeds data_max,
  or a float32 initializer it reads exceeds init_max, or it is one of Upsample,
  NonMaxSuppression, Celu, or its op has no float16 form at the model's opset.

Every node of these models computes in float, so every node is compared.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from reprobuild.precision.rules import derive_plan

from .helpers import _opts

ROOT = Path(__file__).resolve().parents[2]
RECORDED = json.loads((ROOT / "tests/fixtures/precision/modelopt_classes.json").read_text())
MODELOPT_DEFAULTS = {"init_max": 65504.0, "magnitude_io": True, "keep_io_types": False}


def _generator():
    spec = importlib.util.spec_from_file_location(
        "modelopt_classes", ROOT / "scripts" / "modelopt_classes.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


def documented_rules(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, str]:
    """Each node (by first output) on the side ModelOpt's guide says: fp32 or fp16."""
    from tests.models import zoo

    names = [o for node in model.graph.node for o in node.output if o]
    values = dict(zip(names, zoo.run_onnxruntime(model, feeds, names), strict=True))
    values.update(feeds)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    out = {}
    for node in model.graph.node:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
        has_fp16 = any("tensor(float16)" in c.allowed_type_strs for c in schema.type_constraints)
        io = [values[t] for t in (*node.input, *node.output) if t in values]
        high = (
            any(a.size and float(np.abs(a).max()) > 512 for a in io)
            or any(
                inits[t].dtype == np.float32 and float(np.abs(inits[t]).max()) > 65504
                for t in node.input
                if t in inits
            )
            or node.op_type in ("Upsample", "NonMaxSuppression", "Celu")
            or not has_fp16
        )
        out[node.output[0]] = "fp32" if high else "fp16"
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", GEN.MODELS)
def test_modelopt_defaults_classify_every_node_as_modelopt(name: str) -> None:
    model = GEN.case_model(name)
    recorded = RECORDED["models"][name]
    # the same bytes ModelOpt classified (a changed zoo or onnx re-records the fixture)
    assert hashlib.sha256(model.SerializeToString()).hexdigest() == recorded["sha256"]
    feeds = GEN.case_feeds(name, model)
    plan = derive_plan(model, "fp16", _opts(**MODELOPT_DEFAULTS), feeds, "case", explain=True)
    by_output = {node.output[0]: n for node, n in zip(model.graph.node, plan.nodes, strict=True)}
    ours = {o: n.precision for o, n in by_output.items() if n.precision != "other"}
    as_is = sorted(n.op for n in by_output.values() if n.precision == "other")
    assert as_is == (["Shape"] if name == "squeezenet" else [])
    assert len(ours) + len(as_is) == len(recorded["nodes"])
    assert ours == {o: side for o, side in recorded["nodes"].items() if o in ours}
    documented = documented_rules(model, feeds)
    assert ours == {o: side for o, side in documented.items() if o in ours}
    # both sides occur, decided by the rules ModelOpt's defaults have (and constant data,
    # which follows its consumers in reprobuild and lands on the same side here)
    rules = {n.rule for n in plan.nodes if n.precision != "other"}
    assert {"default", "magnitude"} <= rules <= {"default", "magnitude", "constant"}
