"""Two precision plans compared (``lock/plandiff.py``), on plans built in code: every kind of
change, its line and its JSON, and a lock diff that differs by a scale alone."""

from __future__ import annotations

import dataclasses

from reprobuild.lock.diff import diff_locks
from reprobuild.lock.plan import NodePrecision, PrecisionPlan
from reprobuild.lock.plandiff import PlanChange, diff_plans, plan_changes
from reprobuild.lock.qplan import ActivationScale, QuantPlan, WeightScale
from tests.conftest import sample_lock


def _plan(scale: float = 0.25, *, conv: str = "int8", weight: str = "a" * 64) -> PrecisionPlan:
    quant = QuantPlan(
        method="entropy",
        batch_size=8,
        samples=64,
        data_sha256="d" * 64,
        onnxruntime="1.32.0",
        activations=[ActivationScale("x", scale), ActivationScale("y", 0.5)],
        weights=[WeightScale("w", 0, weight)],
    )
    nodes = [
        NodePrecision("conv", "Conv", conv, "default" if conv == "int8" else "name"),
        NodePrecision("relu", "Relu", "fp32", "unsupported"),
    ]
    return PrecisionPlan("int8", calibration="x", nodes=nodes, quantization=quant)


def test_same_plans_have_no_changes() -> None:
    assert plan_changes(_plan(), _plan()) == [] and plan_changes(None, None) == []


def test_each_kind_of_change_as_a_line_and_as_json() -> None:
    a = _plan()
    b = _plan(0.1875, conv="fp32", weight="b" * 64)
    b.quantization.batch_size = 16  # type: ignore[union-attr]
    b.nodes.append(NodePrecision("fc", "Gemm", "int8", "default"))
    assert diff_plans(a, b) == [
        "node conv: int8/default -> fp32/name",
        "node fc: added (int8/default)",
        "quantization.batch_size: 8 -> 16",
        "scale x: 0x1.0000000000000p-2 (0.25) -> 0x1.8000000000000p-3 (0.1875)",
        f"weight scales w: sha256 {'a' * 12} -> sha256 {'b' * 12}",
    ]
    scale = plan_changes(a, b)[3]
    assert scale.to_json() == {
        "kind": "scale",
        "name": "x",
        "a": "0x1.0000000000000p-2",
        "b": "0x1.8000000000000p-3",
        "a_decimal": 0.25,
        "b_decimal": 0.1875,
    }
    assert plan_changes(b, a)[1] == PlanChange("node", "fc", "int8/default", None)
    assert PlanChange("node", "fc", "int8/default", None).line() == "node fc: removed"


def test_a_scale_only_on_one_side_and_a_plan_only_on_one_side() -> None:
    a, b = _plan(), _plan()
    b.quantization.activations.pop(0)  # type: ignore[union-attr]
    assert diff_plans(a, b) == ["scale x: 0x1.0000000000000p-2 (0.25) -> -"]
    assert plan_changes(a, b)[0].to_json()["b_decimal"] is None
    assert diff_plans(None, a) == ["precision plan: none -> int8"]
    assert diff_plans(a, None) == ["precision plan: int8 -> none"]


def test_locks_with_the_same_tactics_and_another_scale_differ() -> None:
    one = dataclasses.replace(sample_lock(), precision=_plan())
    two = dataclasses.replace(sample_lock(), precision=_plan(0.125))
    d = diff_locks(one, two)
    assert d.changed == [] and d.added == [] and d.settings_changed == []
    assert d.differs and [c.line() for c in d.precision_changed] == [
        "scale x: 0x1.0000000000000p-2 (0.25) -> 0x1.0000000000000p-3 (0.125)"
    ]
    assert d.to_json()["precision_changed"][0]["b_decimal"] == 0.125
    assert not diff_locks(one, dataclasses.replace(sample_lock(), precision=_plan())).differs
