"""The test corpus has power: its outputs depend on the inputs and on the tactics.

A reproducibility check can only fail if a tactic change reaches the outputs. The shipped
light model-zoo models cannot show that (constant weights, flat outputs); the re-weighted
architectures of :mod:`tests.models.zoo` and the trained digits models of
:mod:`tests.models.digits` can, and the digits models also have an accuracy to keep.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from reprobuild.backends.base import BuildSettings
from reprobuild.backends.reference import ReferenceBackend
from tests.models import digits, zoo

BIG_ZOO = ["bvlc_alexnet", "vgg19", "zfnet512"]
"""Architectures with 60-140 M weights (10-30 s each here): the ``slow`` marker alone does
not deselect anything, so they run only when ``REPROBUILD_TEST_BIG_ZOO=1`` is set."""
ZOO_CASES = [name for name in zoo.MODELS if name not in BIG_ZOO] + [
    pytest.param(
        name,
        marks=[
            pytest.mark.slow,
            pytest.mark.skipif(
                not os.environ.get("REPROBUILD_TEST_BIG_ZOO"),
                reason="big model: set REPROBUILD_TEST_BIG_ZOO=1 to run it",
            ),
        ],
    )
    for name in BIG_ZOO
]
TACTIC_SEEDS = ("seed:1", "seed:2")


def build_and_run(
    model_path: Path, feeds: dict[str, np.ndarray], timing: str = ""
) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """One reference-backend build (fresh timing cache) with ``timing``; its tactic map and
    outputs."""
    backend = ReferenceBackend(timing=timing)
    cache = backend.create_timing_cache()
    out = backend.build(str(model_path), BuildSettings(), cache, lambda _line: None)
    return out.extra["tactic_map"], backend.run(out.engine, feeds)


def differing_bits(a: np.ndarray, b: np.ndarray) -> int:
    """How many elements of two float32 arrays differ in their bits."""
    return int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))


# -- the model zoo ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ZOO_CASES)
def test_reweighted_outputs_depend_on_the_input(name: str, record_property) -> None:
    start = time.perf_counter()
    model = zoo.reweighted(name)
    record_property("generate_s", round(time.perf_counter() - start, 3))
    stats = zoo.output_stats(model)
    for field in ("output_std", "logit_std", "softmax_max", "input_change"):
        record_property(field, getattr(stats, field))
    assert stats.finite
    assert stats.logit_std > 0.5, "the output vector is (nearly) one value"
    assert stats.softmax_max < 0.5, "the softmax is saturated"
    assert stats.input_change > 1e-4, "two different inputs give the same output"
    # the same architecture: every compute node kept, by name, op and wiring
    shipped = [
        (n.name, n.op_type, list(n.input), list(n.output))
        for n in zoo.light_model(name).graph.node
        if n.op_type != "ConstantOfShape"
    ]
    assert [(n.name, n.op_type, list(n.input), list(n.output)) for n in model.graph.node] == (
        shipped
    )

    # ...whereas the shipped model's output is one value, whatever the input
    light = zoo.light_model(name)
    assert zoo.output_stats(light).output_std < 1e-6


def test_reweighting_is_deterministic_and_cached(tmp_path: Path) -> None:
    first = zoo.reweighted("squeezenet").SerializeToString()
    assert zoo.reweighted("squeezenet").SerializeToString() == first
    assert zoo.reweighted("squeezenet", seed=1).SerializeToString() != first
    path = zoo.reweighted_path("squeezenet", tmp_path)
    assert path.read_bytes() == first
    stamp = path.stat().st_mtime_ns
    assert zoo.reweighted_path("squeezenet", tmp_path) == path
    assert path.stat().st_mtime_ns == stamp  # written once, then reused


def test_int8_variants_keep_the_architecture_and_its_outputs() -> None:
    """The variants the INT8 tests and bench use: ``opset=13`` computes the same outputs
    (onnx's version converter), ``bias_std`` gives Conv biases, ``side`` a smaller input,
    and :func:`zoo.free_batch` lets shufflenet run at any batch with the same outputs."""
    base = zoo.reweighted("squeezenet", side=64)
    conv = zoo.reweighted("squeezenet", side=64, opset=13)
    assert conv.opset_import[0].version == 13 and zoo.data_input(conv)[1] == (1, 3, 64, 64)
    assert [vi.name for vi in conv.graph.input] == ["data_0"]  # weights: initializers only
    feeds = zoo.seeded_feeds(base, 1)
    out = base.graph.output[0].name
    (a,), (b,) = zoo.run_onnxruntime(base, feeds, [out]), zoo.run_onnxruntime(conv, feeds, [out])
    assert a.tobytes() == b.tobytes()
    biased = zoo.reweighted("squeezenet", side=64, bias_std=0.1)
    bias = {t.name: onnx.numpy_helper.to_array(t) for t in biased.graph.initializer}
    assert 0.08 < float(np.std(bias["conv1_b_0"])) < 0.12
    assert {t.name for t in base.graph.initializer} == set(bias)

    shuffle = zoo.reweighted("shufflenet", opset=13)
    out = shuffle.graph.output[0].name
    x = np.random.default_rng(1).random((2, 3, 224, 224), np.float32)
    with pytest.raises(Exception, match="Reshape"):  # a batch of 2 meets Reshape [1, ...]
        zoo.run_onnxruntime(_any_batch(shuffle), {"gpu_0/data_0": x}, [out])
    (one,) = zoo.run_onnxruntime(shuffle, {"gpu_0/data_0": x[1:]}, [out])
    assert zoo.free_batch(shuffle) == 33
    (two,) = zoo.run_onnxruntime(_any_batch(shuffle), {"gpu_0/data_0": x}, [out])
    assert two.shape == (2, 1000)
    np.testing.assert_allclose(two[1], one[0], rtol=1e-5, atol=1e-7)


def _any_batch(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto.FromString(model.SerializeToString())
    for vi in [*copy.graph.input, *copy.graph.output]:
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    return copy


def test_tactics_reach_the_reweighted_outputs_but_not_the_light_ones(tmp_path: Path) -> None:
    model = zoo.reweighted_path("squeezenet", tmp_path)
    feeds = zoo.seeded_feeds(onnx.load(str(model)))
    (out_name,) = [o.name for o in onnx.load(str(model)).graph.output]
    map1, out1 = build_and_run(model, feeds, TACTIC_SEEDS[0])
    map2, out2 = build_and_run(model, feeds, TACTIC_SEEDS[1])
    assert map1.keys() == map2.keys() and map1 != map2
    assert differing_bits(out1[out_name], out2[out_name]) > 0

    # The light model's constant weights hide the order of the im2col BLAS and tree sums;
    # not every kernel's (a Conv's direct key, one GEMM per tap, shows), so the two builds
    # pick those kernels on purpose rather than by seed.
    light = zoo.light_path("squeezenet")
    lmap1, lout1 = build_and_run(light, feeds, "prefer:im2col_blas")
    lmap2, lout2 = build_and_run(light, feeds, "prefer:im2col_tree8")
    assert lmap1 != lmap2  # other kernels were chosen...
    assert differing_bits(lout1[out_name], lout2[out_name]) == 0  # ...and nothing shows


# -- the trained digits models ---------------------------------------------------------------
@pytest.mark.parametrize("kind", digits.KINDS)
def test_digits_fp32_accuracy(kind: str, record_property) -> None:
    images, labels = digits.held_out_split()
    assert images.shape == (len(labels), 1, 8, 8) and set(labels.tolist()) == set(range(10))
    model = onnx.load(str(digits.model_path(kind)))
    (ort_out,) = zoo.run_onnxruntime(model, digits.held_out_feeds(), [digits.OUTPUT])
    ort_acc = digits.accuracy(ort_out, labels)
    _, ref_out = build_and_run(digits.model_path(kind), digits.held_out_feeds())
    ref_acc = digits.accuracy(ref_out[digits.OUTPUT], labels)
    record_property("accuracy_fp32_onnxruntime", ort_acc)
    record_property("accuracy_fp32_reference", ref_acc)
    print(f"digits_{kind}: FP32 accuracy {ort_acc:.4f} (ONNX Runtime), {ref_acc:.4f} (reference)")
    assert ort_acc >= digits.FP32_FLOOR[kind]
    assert ref_acc >= digits.FP32_FLOOR[kind]
    assert abs(ref_acc - ort_acc) <= 2 / len(labels)  # kernels differ only in rounding


@pytest.mark.parametrize("kind", digits.KINDS)
def test_digits_fp16_accuracy(kind: str, tmp_path: Path, record_property) -> None:
    from reprobuild.precision.options import validate_options
    from reprobuild.workflow.build import PrecisionRequest, build

    backend = ReferenceBackend()
    engine = tmp_path / f"{kind}.engine"
    result = build(
        digits.model_path(kind),
        lock=tmp_path / "tactics.lock",
        out=engine,
        backend=backend,
        cache_dir=tmp_path / "caches",
        precision=PrecisionRequest("fp16", validate_options("fp16", [], [], 512.0, None, False)),
    )
    plan = result.precision or {}
    images, labels = digits.held_out_split()
    outputs = backend.run(engine.read_bytes(), digits.held_out_feeds())
    acc16 = digits.accuracy(outputs[digits.OUTPUT], labels)
    model = onnx.load(str(digits.model_path(kind)))
    (ort_out,) = zoo.run_onnxruntime(model, digits.held_out_feeds(), [digits.OUTPUT])
    acc32 = digits.accuracy(ort_out, labels)
    record_property("accuracy_fp16_reference", acc16)
    print(f"digits_{kind}: FP16 accuracy {acc16:.4f} (FP32 {acc32:.4f}); plan {plan}")
    assert abs(acc16 - acc32) <= 0.02


@pytest.mark.parametrize("kind", digits.KINDS)
def test_tactics_reach_the_digits_outputs(kind: str) -> None:
    feeds = digits.held_out_feeds()
    map1, out1 = build_and_run(digits.model_path(kind), feeds, TACTIC_SEEDS[0])
    map2, out2 = build_and_run(digits.model_path(kind), feeds, TACTIC_SEEDS[1])
    assert map1 != map2
    assert differing_bits(out1[digits.OUTPUT], out2[digits.OUTPUT]) > 0
    # the same build twice gives the same bits: the difference is the tactics'
    _, again = build_and_run(digits.model_path(kind), feeds, TACTIC_SEEDS[0])
    assert differing_bits(out1[digits.OUTPUT], again[digits.OUTPUT]) == 0
