"""Plans through the lock: round trips re-apply bytewise, diffs, stale plans, FP32
accumulation end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from reprobuild.backends.base import BuildSettings
from reprobuild.errors import UsageError
from reprobuild.lock.plan import NodePrecision, PrecisionPlan
from reprobuild.lock.plandiff import diff_plans
from reprobuild.precision.apply import apply_plan
from reprobuild.precision.calibration import load_calibration
from reprobuild.precision.measure import plan_error
from reprobuild.precision.rules import derive_plan

from ..conftest import EXAMPLES
from .helpers import (
    FLOAT,
    FP16,
    RULES_OPTS,
    _check,
    _lock_round_trip,
    _opts,
    _run,
    _table,
    _types,
    matrix_model,
)

# ---------------------------------------------------------------------------- lock round trip


def test_plan_round_trips_through_the_lock_and_reapplies_bytewise(rules) -> None:
    model, feeds, plan = rules
    loaded = _lock_round_trip(plan)
    assert loaded.to_dict() == plan.to_dict()
    first = apply_plan(model, plan).SerializeToString()
    assert apply_plan(model, loaded).SerializeToString() == first
    # new calibration data changes what derive_plan would decide ...
    zeros = {k: np.zeros_like(v) for k, v in feeds.items()}
    rederived = derive_plan(model, "fp16", plan.settings, zeros, "zeros")
    assert _table(rederived) != _table(plan)
    assert apply_plan(model, rederived).SerializeToString() != first
    # ... but a locked build applies the stored plan, so its model is unchanged
    assert apply_plan(model, _lock_round_trip(loaded)).SerializeToString() == first


def test_diff_plans_names_each_changed_node(rules) -> None:
    model, feeds, plan = rules
    assert diff_plans(plan, _lock_round_trip(plan)) == []
    zeros = {k: np.zeros_like(v) for k, v in feeds.items()}
    other = derive_plan(model, "fp16", _opts(**RULES_OPTS, max_output=600.0), zeros, "z")
    assert diff_plans(plan, other) == [
        "settings.max_output: 512.0 -> 600.0",
        "node scale_big: fp32/magnitude -> fp16/default",
    ]


def test_plan_for_another_model_is_rejected(rules) -> None:
    model, _, plan = rules
    cnn = onnx.load(EXAMPLES / "cnn.onnx")
    with pytest.raises(UsageError, match="different model") as exc:
        apply_plan(cnn, plan)
    assert "mm1" in str(exc.value) and "\n" not in str(exc.value)
    missing = PrecisionPlan(plan.mode, plan.settings, plan.calibration, plan.nodes[:-1])
    with pytest.raises(UsageError, match="'keep_me_add' .* missing from the precision plan"):
        apply_plan(model, missing)
    wrong_op = [
        NodePrecision(n.node, "Gemm" if n.node == "mm1" else n.op, n.precision, n.rule)
        for n in plan.nodes
    ]
    with pytest.raises(UsageError, match="'mm1' is a MatMul in the model but a Gemm"):
        apply_plan(model, PrecisionPlan("fp16", plan.settings, None, wrong_op))
    impossible = [
        NodePrecision(n.node, n.op, "fp16" if n.node == "argmax" else n.precision, n.rule)
        for n in plan.nodes
    ]
    with pytest.raises(UsageError, match="'argmax' .* cannot run in fp16"):
        apply_plan(model, PrecisionPlan("fp16", plan.settings, None, impossible))


# ---------------------------------------------------------------------------- fp32 accumulate


def test_fp32_accumulate_changes_only_matrix_nodes() -> None:
    model = matrix_model()
    feeds, desc = load_calibration(None, model, seed=0)
    plain = derive_plan(model, "fp16", _opts(), feeds, desc)
    acc = derive_plan(model, "fp16", _opts(fp32_accumulate=True), feeds, desc)
    assert {n.node for n in acc.nodes if n.accumulate == "fp32"} == {"conv", "gemm", "matmul"}
    for a, b in zip(plain.nodes, acc.nodes, strict=True):
        assert (a.node, a.op, a.precision, a.rule) == (b.node, b.op, b.precision, b.rule)

    m_plain, m_acc = apply_plan(model, plain), apply_plan(model, acc)
    _check(m_acc)
    plain_nodes = {n.name: n for n in m_plain.graph.node}
    acc_nodes = {n.name: n for n in m_acc.graph.node}
    matrix = {"conv", "gemm", "matmul"}
    # every non-Cast node is the same, except the matrix nodes' input/output names
    for name, node in plain_nodes.items():
        if node.op_type == "Cast":
            continue
        other = acc_nodes[name]
        assert other.op_type == node.op_type
        if name not in matrix:
            assert list(other.input) == list(node.input)
            assert list(other.output) == list(node.output)
    # the added Casts sit right around the matrix nodes, and the matrix nodes compute in FP32
    added = [n for name, n in acc_nodes.items() if name not in plain_nodes]
    assert added and all(n.op_type == "Cast" for n in added)
    feeds_matrix = {x for m in matrix for x in acc_nodes[m].input}
    from_matrix = {x for m in matrix for x in acc_nodes[m].output}
    for cast in added:
        assert cast.output[0] in feeds_matrix or cast.input[0] in from_matrix, cast
    types = _types(m_acc)
    for m in matrix:
        assert {types[x] for x in acc_nodes[m].input} == {FLOAT}
        assert {types[x] for x in acc_nodes[m].output} == {FLOAT}
        assert types[plain_nodes[m].output[0]] == FP16
    # weights are rounded to FP16 (stored as FP16, cast up), inputs too
    assert types["cw"] == FP16 and types["gw"] == FP16 and types["mw"] == FP16
    assert len(added) == 3 * 2 + 1 + 3 + 1  # conv x,w,b + out; gemm a,w,b + out; matmul a,w + out
    err = plan_error(model, m_acc, feeds)
    assert err["max_rel"] < 5e-3, err
    # the accumulate field survives the lock and re-applies to the same bytes
    loaded = _lock_round_trip(acc)
    assert loaded.to_dict() == acc.to_dict()
    assert apply_plan(model, loaded).SerializeToString() == m_acc.SerializeToString()


def test_reference_backend_fp32_accumulate_changes_matrix_bits(tmp_path: Path) -> None:
    """End to end: the converted models built by the reference backend.

    FP16-accumulating tactics are preferred (the backend's test knob), so the plain FP16
    plan runs its matrix layers with FP16 accumulation, while the ``--fp32-accumulate``
    plan's matrix layers are FP32 in the graph and can only take FP32 kernels.
    """
    from reprobuild.backends.reference import ReferenceBackend

    model = matrix_model()
    feeds, desc = load_calibration(None, model, seed=0)
    backend = ReferenceBackend(timing="prefer:f16acc")

    def build(plan: PrecisionPlan, name: str, cache_bytes: bytes = b""):
        path = tmp_path / f"{name}.onnx"
        onnx.save(apply_plan(model, plan), path)
        cache = backend.create_timing_cache(cache_bytes)
        out = backend.build(str(path), BuildSettings(), cache, lambda _line: None)
        layers = backend.engine_metadata(out.engine)["layers"]
        kernels = {x["name"]: x["kernel"] for x in layers}
        return backend.run(out.engine, feeds)["y"], kernels, cache.serialize()

    plain_plan = derive_plan(model, "fp16", _opts(), feeds, desc)
    acc_plan = derive_plan(model, "fp16", _opts(fp32_accumulate=True), feeds, desc)
    plain, plain_k, _ = build(plain_plan, "plain")
    acc, acc_k, acc_cache = build(acc_plan, "acc")
    assert set(plain_k) == set(acc_k) == {"conv", "gemm", "matmul"}
    assert all(k.endswith("_f16_f16acc") for k in plain_k.values()), plain_k
    assert all(k.endswith("_f32") for k in acc_k.values()), acc_k
    assert not np.array_equal(plain, acc)
    (ref,) = _run(model, feeds)
    assert np.abs(acc - ref).max() < 5e-3 and np.abs(plain - ref).max() < 5e-3
    # the plan re-read from the lock, with the recorded timing cache, builds the same bits
    again, again_k, _ = build(_lock_round_trip(acc_plan), "again", acc_cache)
    assert again_k == acc_k and np.array_equal(again.view(np.uint32), acc.view(np.uint32))
