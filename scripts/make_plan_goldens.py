#!/usr/bin/env python3
"""Write the derived-plan goldens that tests/precision/test_plan_goldens.py holds the
precision pass to: per case, sha256 of the derived plan (``PrecisionPlan.to_dict`` as sorted
JSON) and of the model ``apply_plan`` makes from it (deterministic serialization).

Why: the precision pass was made faster; a plan or converted model that changed
by one byte would change every lock and recording-cache key made from it. Generate the
goldens from the code *before* a change, never from the tree under test::

    git -C /path/to/repo worktree add /tmp/base main   # or git archive main | tar -x -C /tmp/base
    PYTHONPATH=/tmp/base python scripts/make_plan_goldens.py > tests/fixtures/plan_goldens.json

The cases (model, mode, options) live in :data:`CASES`; the test imports them from here.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# (case name, model source, model name, validate_options keyword arguments)
CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    (f"light_{m}_fp16", "light", m, {})
    for m in ("densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet")
] + [
    (
        "light_densenet121_fp16_options",  # light models are opset 9: no bf16 Cast
        "light",
        "densenet121",
        {
            "keep_fp32": ["^n90[0-4]$", "conv5_8/x1/bn_w"],
            "keep_fp32_ops": ["Concat", "AveragePool"],
            "max_output": 64.0,
            "max_reduction_depth": 1000,
            "fp32_accumulate": True,
            "keep_io_types": False,
        },
    ),
    ("reweighted_resnet50_fp16", "reweighted", "resnet50", {}),
    ("reweighted_squeezenet_fp16", "reweighted", "squeezenet", {"max_reduction_depth": 512}),
]


def _options(kw: dict[str, Any]) -> Any:
    from reprobuild.precision.options import validate_options

    args: dict[str, Any] = {
        "mode": "fp16",
        "keep_fp32": [],
        "keep_fp32_ops": [],
        "max_output": 512.0,
        "max_reduction_depth": None,
        "fp32_accumulate": False,
    }
    args.update(kw)
    return validate_options(**args)


def digests(source: str, name: str, kw: dict[str, Any], tmp: str) -> dict[str, str]:
    """sha256 of the derived plan and of the converted model for one case."""
    import numpy as np
    import onnx

    from reprobuild.precision.apply import apply_plan
    from reprobuild.precision.rules import derive_plan

    sys.path.append(str(ROOT))  # tests/models (after PYTHONPATH: the code under test wins)
    from tests.models import zoo

    path = zoo.light_path(name) if source == "light" else zoo.reweighted_path(name, tmp)
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name not in inits:
            shape = tuple(d.dim_value or 1 for d in vi.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    settings = _options(kw)
    plan = derive_plan(model, kw.get("mode", "fp16"), settings, feeds, "arange")
    mixed = apply_plan(model, plan)
    plan_json = json.dumps(plan.to_dict(), sort_keys=True).encode()
    return {
        "plan": hashlib.sha256(plan_json).hexdigest(),
        "model": hashlib.sha256(mixed.SerializeToString(deterministic=True)).hexdigest(),
    }


def main() -> None:
    out = {}
    with tempfile.TemporaryDirectory(prefix="plan-goldens-") as tmp:
        for case, source, name, kw in CASES:
            out[case] = digests(source, name, kw, tmp)
            print(case, out[case], file=sys.stderr)
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
