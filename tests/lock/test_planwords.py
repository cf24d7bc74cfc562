"""Each node's decision in words: the recorded ``why`` when a build wrote one, otherwise the
rule read with the plan's settings, so locks written before the words existed read the same
way in ``show --precision`` and ``diff``."""

from __future__ import annotations

from pathlib import Path

import pytest

from reprobuild.lock.plan import NodePrecision, PrecisionPlan, PrecisionSettings
from reprobuild.lock.plandiff import plan_changes
from reprobuild.lock.planwords import sentence
from reprobuild.lock.yamlio import load_lock

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "locks"
SETTINGS = PrecisionSettings(keep_fp32=("^head$", "attn"), max_output=256.0, max_reduction_depth=64)


@pytest.mark.parametrize(
    ("node", "words"),
    [
        (NodePrecision("a", "Conv", "fp16", "default"), "runs in FP16: no rule kept it in FP32"),
        (
            NodePrecision("a", "Conv", "fp16", "default", "fp32"),
            "runs in FP16: no rule kept it in FP32; accumulates in FP32",
        ),
        (
            NodePrecision("a", "Conv", "fp32", "name"),
            "kept FP32: name matches --keep-fp32 '^head$' or 'attn'",
        ),
        (NodePrecision("a", "Softmax", "fp32", "op"), "kept FP32: Softmax is in --keep-fp32-op"),
        (
            NodePrecision("a", "Mul", "fp32", "initializer-range"),
            "kept FP32: a weight does not fit fp16 (overflow, or values that flush to zero)",
        ),
        (
            NodePrecision("a", "MatMul", "fp32", "reduction-depth"),
            "kept FP32: reduces more than 64 elements",
        ),
        (
            NodePrecision("a", "Add", "fp32", "magnitude"),
            "kept FP32: |output| > 256 on the calibration inputs, or an input beyond the fp16 "
            "range",
        ),
        (
            NodePrecision("a", "Constant", "fp16", "constant"),
            "runs in FP16: constant data; every consumer takes it in fp16",
        ),
        (
            NodePrecision("a", "Constant", "fp32", "constant"),
            "kept FP32: constant data a consumer takes in FP32",
        ),
        (
            NodePrecision("a", "Gemm", "fp16", "observed"),
            "runs in FP16: fp16 in the model as given",
        ),
        (
            NodePrecision("a", "Shape", "other", "unsupported"),
            "left as is: no float computation to convert",
        ),
        (
            NodePrecision("a", "ArgMax", "fp32", "unsupported"),
            "kept FP32: ArgMax has no fp16 form in this model",
        ),
        (
            NodePrecision("a", "Upsample", "fp32", "always-fp32"),
            "kept FP32: Upsample is on the always-FP32 list",
        ),
        (
            NodePrecision(
                "a",
                "Add",
                "fp32",
                "magnitude",
                why="|output| max 1.3e3 > 256 on 32 calibration samples",
            ),
            "kept FP32: |output| max 1.3e3 > 256 on 32 calibration samples",
        ),
        (
            NodePrecision(
                "a",
                "Add",
                "fp16",
                "include",
                why="--op-types-to-include Add overrides op: Add is in --keep-fp32-op",
            ),
            "forced to FP16: --op-types-to-include Add overrides op: Add is in --keep-fp32-op",
        ),
    ],
)
def test_every_rule_reads_as_a_sentence(node: NodePrecision, words: str) -> None:
    plan = PrecisionPlan(mode="fp16", settings=SETTINGS, nodes=[node])
    assert sentence(plan, node) == words


def test_a_lock_from_before_the_words_reads_in_words(cli) -> None:
    lock = GOLDEN / "recorded_fp16_middle.lock"
    plan = load_lock(lock).precision
    assert plan is not None and all(n.why is None for n in plan.nodes)
    r = cli("show", "--precision", "--lock", str(lock))
    assert r.code == 0, r
    rows = {line.split()[0]: line.split(None, 4)[4] for line in r.out.splitlines()[3:-1]}
    assert rows == {
        "fc1": "runs in FP16: no rule kept it in FP32",
        "to_fp16": "left as is: no float computation to convert",
        "fc2": "runs in FP16: fp16 in the model as given",
        "to_fp32": "left as is: no float computation to convert",
        "fc3": "runs in FP16: no rule kept it in FP32",
    }


def test_a_changed_decision_names_both_rules() -> None:
    a = PrecisionPlan("fp16", SETTINGS, nodes=[NodePrecision("n", "Add", "fp16", "default")])
    b = PrecisionPlan(
        "fp16",
        SETTINGS,
        nodes=[
            NodePrecision(
                "n",
                "Add",
                "fp32",
                "magnitude",
                why="|output| max 300 > 256 on 1 calibration sample",
            )
        ],
    )
    (change,) = plan_changes(a, b)
    assert change.line() == "node n: fp16/default -> fp32/magnitude"
    assert change.detail == (
        "decided by magnitude (kept FP32: |output| max 300 > 256 on 1 calibration sample), "
        "was default (runs in FP16: no rule kept it in FP32)"
    )
    assert change.to_json()["detail"] == change.detail
    # the words alone changing is no plan change: the decision is the same
    c = PrecisionPlan(
        "fp16", SETTINGS, nodes=[NodePrecision("n", "Add", "fp16", "default", why="x")]
    )
    assert plan_changes(a, c) == []
