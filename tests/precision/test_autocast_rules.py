"""One model per rule, each decided by that rule and only it: with the rule's option the
node gets the rule (and its words), without it the same node runs in FP16 by ``default``.

These are the rules a user of ModelOpt AutoCast or Torch-TensorRT's autocast knows (include
beside exclude, initializer magnitude, I/O magnitude, the always-FP32 ops, the opset a
precision needs) and what the plan records about each.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from reprobuild.errors import UsageError
from reprobuild.lock.plan import PrecisionPlan
from reprobuild.lock.planwords import sentence
from reprobuild.precision.analysis import analyze
from reprobuild.precision.apply import apply_plan
from reprobuild.precision.calibration import load_calibration
from reprobuild.precision.opset import convert_for_float, model_opset
from reprobuild.precision.rules import derive_plan

from .helpers import FLOAT, FP16, _check, _init, _lock_round_trip, _model, _opts, _run, _types, _vi

F32 = np.float32


def _chain(w_scale: float = 1.0, k: int = 8) -> onnx.ModelProto:
    """x [2, k] -> MatMul ``mm`` (w uniform [0, 0.5) x w_scale) -> Relu ``relu`` -> y."""
    rng = np.random.default_rng(3)
    w = (rng.uniform(0.0, 0.5, (k, 4)) * w_scale).astype(F32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    return _model(nodes, [_vi("x", [2, k])], [_vi("y", [2, 4])], [_init("w", w)])


def _feeds(model: onnx.ModelProto, scale: float = 1.0) -> dict[str, np.ndarray]:
    feeds, _ = load_calibration(None, model)
    return {k: (v * F32(scale)).astype(v.dtype) for k, v in feeds.items()}


def _plan(model: onnx.ModelProto, feeds=None, mode: str = "fp16", **kw) -> PrecisionPlan:
    feeds = _feeds(model) if feeds is None else feeds
    return derive_plan(model, mode, _opts(mode=mode, **kw), feeds, "seeded:0", explain=True)


def _node(plan: PrecisionPlan, name: str) -> tuple[str, str, str | None]:
    n = plan.by_node()[name]
    return n.precision, n.rule, n.why


# (case, model, feed scale, options with the rule, node, expected (precision, rule, why))
CASES = [
    (
        "name",
        _chain,
        1.0,
        {"keep_fp32": ["^mm$"]},
        "mm",
        ("fp32", "name", "name matches --keep-fp32 '^mm$'"),
    ),
    (
        "op",
        _chain,
        1.0,
        {"keep_fp32_ops": ["Relu"]},
        "relu",
        ("fp32", "op", "Relu is in --keep-fp32-op"),
    ),
    (
        "init-max",  # ModelOpt's init_max: a weight beyond it keeps its node in FP32
        lambda: _chain(w_scale=200.0),  # |w| up to ~100, far inside FP16's 65504
        1.0,
        {"init_max": 50.0},
        "mm",
        ("fp32", "initializer-range", "weight 'w': max |w| 97 > 50 (--init-max)"),
    ),
    (
        "reduction-depth",
        lambda: _chain(k=64),
        1.0,
        {"max_reduction_depth": 32},
        "mm",
        ("fp32", "reduction-depth", "reduces 64 elements > 32"),
    ),
    (
        "magnitude-output",  # data_max / autocast_max_output_threshold on outputs
        _chain,
        1.0,
        {"max_output": 1.0},
        "mm",
        ("fp32", "magnitude", "|output| max 1.3 > 1 on 2 calibration samples"),
    ),
    (
        "magnitude-input",  # ModelOpt's data_max reads inputs too: --magnitude-io
        lambda: _model(
            [helper.make_node("Sigmoid", ["x"], ["y"], name="sig")],
            [_vi("x", [2, 8])],
            [_vi("y", [2, 8])],
            [],
        ),
        2000.0,  # x up to 2000, Sigmoid's output at most 1
        {"magnitude_io": True},
        "sig",
        ("fp32", "magnitude", "|input| 'x' max 1.9e3 > 512 on 2 calibration samples"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_rule_alone_decides_its_node(case) -> None:
    name, make, scale, options, node, expected = case
    model = make()
    feeds = _feeds(model, scale)
    baseline = _plan(model, feeds)
    assert _node(baseline, node) == ("fp16", "default", None)  # no other rule decides it
    plan = _plan(model, feeds, **options)
    got = _node(plan, node)
    assert got[:2] == expected[:2]
    assert got[2] == expected[2]
    # every node the option moved is decided by this rule: it, and only it, moved them
    moved = {n.node: n.rule for n in plan.nodes if n.rule != baseline.by_node()[n.node].rule}
    assert node in moved and set(moved.values()) == {expected[1]}
    # the words survive the lock and read as the sentence show --precision prints
    loaded = _lock_round_trip(plan)
    assert loaded.by_node()[node].why == expected[2]
    assert sentence(loaded, loaded.by_node()[node]) == f"kept FP32: {expected[2]}"


def test_nodes_to_include_overrides_the_rule_that_kept_a_node() -> None:
    model = _chain()
    feeds = _feeds(model)
    kept = _plan(model, feeds, max_output=1.0)
    assert _node(kept, "mm")[:2] == ("fp32", "magnitude")
    plan = _plan(model, feeds, max_output=1.0, nodes_to_include=["^mm$"])
    precision, rule, why = _node(plan, "mm")
    assert (precision, rule) == ("fp16", "include")
    assert why == (
        "--nodes-to-include '^mm$' overrides magnitude: |output| max 1.3 > 1 on 2 "
        "calibration samples"
    )
    assert sentence(plan, plan.by_node()["mm"]).startswith("forced to FP16: --nodes-to-include")
    # an include that matches a node no rule keeps changes nothing
    assert _node(_plan(model, feeds, nodes_to_include=["^mm$"]), "mm")[:2] == ("fp16", "default")
    # and the converted graph runs mm in FP16
    assert _types(apply_plan(model, plan))["h"] == FP16


def test_op_types_to_include_overrides_an_op_exclusion() -> None:
    model = _chain()
    plan = _plan(model, keep_fp32_ops=["Relu", "MatMul"], op_types_to_include=["Relu"])
    assert _node(plan, "relu") == (
        "fp16",
        "include",
        "--op-types-to-include Relu overrides op: Relu is in --keep-fp32-op",
    )
    assert _node(plan, "mm")[:2] == ("fp32", "op")


def test_include_never_forces_an_overflow() -> None:
    """A weight beyond FP16's 65504 would become inf: no include option converts it."""
    model = _chain(w_scale=2e5)
    plan = _plan(model, nodes_to_include=["^mm$"], op_types_to_include=["MatMul"])
    precision, rule, why = _node(plan, "mm")
    assert (precision, rule) == ("fp32", "initializer-range")
    assert why is not None and why.startswith("weight 'w': max |w| ") and "> 65504" in why


def test_always_fp32_ops_stay_fp32_even_when_convertible() -> None:
    """Upsample (opset 9) has a float16 form, so only the always-FP32 list keeps it."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Upsample", ["r", "scales"], ["y"], name="up", mode="nearest"),
    ]
    model = _model(
        nodes,
        [_vi("x", [1, 1, 2, 2])],
        [_vi("y", [1, 1, 4, 4])],
        [_init("scales", np.array([1, 1, 2, 2], F32))],
        opset=9,
    )
    up = analyze(model).infos[1]
    assert up.convertible(FP16)  # the schema would allow FP16: no other rule keeps it
    plan = _plan(model, op_types_to_include=["Upsample"], nodes_to_include=["up"])
    assert _node(plan, "up") == (
        "fp32",
        "always-fp32",
        "Upsample is on the always-FP32 list (Celu, NonMaxSuppression, Upsample)",
    )
    assert _node(plan, "relu")[:2] == ("fp16", "default")
    mixed = apply_plan(model, plan)
    _check(mixed)
    assert _types(mixed)["y"] == FLOAT


def test_unsupported_says_why_and_which_opset_adds_the_type() -> None:
    """BF16 with the model's own opset kept (--opset 17): Conv has no bfloat16 form."""
    from tests.models import digits

    model = onnx.load(str(digits.model_path("cnn")))
    plan = _plan(model, mode="bf16", opset=17)
    assert _node(plan, "conv1") == (
        "fp32",
        "unsupported",
        "ONNX Conv has no bfloat16 form at opset 17 (opset 22 adds one)",
    )
    assert _node(plan, "relu1")[:2] == ("bf16", "default")


def test_bf16_cnn_converts_to_opset_22_and_runs_its_convs_in_bf16() -> None:
    from tests.models import digits

    path = digits.model_path("cnn")
    model = onnx.load(str(path))
    assert model_opset(model) == 17
    converted, conv, notes = convert_for_float(model, path, "bf16", None)
    assert conv is not None and (conv.source, conv.target) == (17, 22)
    assert conv.reason == "bf16 Conv needs opset 22"
    assert notes == [
        f"digits_cnn.onnx: ONNX opset 17 converted to 22 with onnx.version_converter (onnx "
        f"{onnx.__version__}; deterministic): bf16 Conv needs opset 22; the lock records it"
    ]
    plan = _plan(converted, mode="bf16")
    assert {n.node: (n.precision, n.rule) for n in plan.nodes} == {
        n: ("bf16", "default") for n in ("conv1", "relu1", "conv2", "relu2", "flatten", "fc")
    }
    assert model_opset(model) == 17  # the caller's model is not changed
    # --opset equal to the model's turns the conversion off; an older one is refused
    assert convert_for_float(model, path, "bf16", 17) == (model, None, [])
    with pytest.raises(UsageError, match="only converts forward"):
        convert_for_float(model, path, "bf16", 13)
    # FP16 needs nothing newer for this CNN: no conversion
    assert convert_for_float(model, path, "fp16", None)[1] is None


def test_init_conversion_max_bytes_casts_large_weights_at_run_time() -> None:
    model = _chain(k=64)  # w: 64 x 4 floats = 1024 bytes as FP32
    plan = _plan(model, init_conversion_max_bytes=1000)
    assert _node(plan, "mm")[:2] == ("fp16", "default")
    mixed = apply_plan(model, plan)
    _check(mixed)
    inits = {t.name: t.data_type for t in mixed.graph.initializer}
    assert inits == {"w": FLOAT}  # stored as it was
    casts = [n for n in mixed.graph.node if n.op_type == "Cast" and n.input[0] == "w"]
    mm = next(n for n in mixed.graph.node if n.name == "mm")
    assert len(casts) == 1 and list(mm.input) == ["x__fp16", casts[0].output[0]]
    # at the limit the weight is stored converted, as without the option
    stored = apply_plan(model, _plan(model, init_conversion_max_bytes=1024))
    assert stored == apply_plan(model, _plan(model))
    assert {t.name: t.data_type for t in stored.graph.initializer} == {"w": FP16}
    feeds = _feeds(model)
    np.testing.assert_array_equal(_run(mixed, feeds)[0], _run(stored, feeds)[0])


def test_keep_io_types_off_gives_low_precision_graph_io() -> None:
    model = _chain()
    kept = apply_plan(model, _plan(model))
    assert (_types(kept)["x"], _types(kept)["y"]) == (FLOAT, FLOAT)
    plan = _plan(model, keep_io_types=False)
    mixed = apply_plan(model, plan)
    _check(mixed)
    assert (_types(mixed)["x"], _types(mixed)["y"]) == (FP16, FP16)


def test_random_reference_inputs_are_seeded_and_the_seed_is_recorded() -> None:
    model = _chain()
    a, desc_a = load_calibration(None, model, seed=3)
    b, desc_b = load_calibration(None, model, seed=3)
    c, _ = load_calibration(None, model, seed=4)
    assert desc_a == desc_b == "seeded:3"
    np.testing.assert_array_equal(a["x"], b["x"])
    assert not np.array_equal(a["x"], c["x"])


def test_new_settings_are_written_only_when_set() -> None:
    """A plan with the old options only has the old settings keys: older locks keep their
    bytes; a set option appears in the lock and reads back."""
    model = _chain()
    old = _plan(model)
    assert list(old.settings.to_dict()) == [
        "keep_fp32",
        "keep_fp32_ops",
        "max_output",
        "max_reduction_depth",
        "fp32_accumulate",
        "keep_io_types",
    ]
    options = {
        "nodes_to_include": ["^mm$"],
        "op_types_to_include": ["Relu"],
        "init_max": 65504.0,
        "init_conversion_max_bytes": 4096,
        "magnitude_io": True,
        "opset": 17,
    }
    new = _plan(model, **options)
    d = new.settings.to_dict()
    assert {k: d[k] for k in options} == options
    assert _lock_round_trip(new).settings == new.settings
