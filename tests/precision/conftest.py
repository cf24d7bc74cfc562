"""The rules model and its plan, derived once per test module."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from reprobuild.lock.plan import PrecisionPlan
from reprobuild.precision.calibration import load_calibration
from reprobuild.precision.rules import derive_plan

from .helpers import RULES_OPTS, _opts, rules_model


@pytest.fixture(scope="module")
def rules() -> tuple[onnx.ModelProto, dict[str, np.ndarray], PrecisionPlan]:
    model = rules_model()
    feeds, desc = load_calibration(None, model, seed=0)
    plan = derive_plan(model, "fp16", _opts(**RULES_OPTS), feeds, desc)
    return model, feeds, plan
