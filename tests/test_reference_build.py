"""End-to-end reference builds on small real models: autotuning, pinning, logs, engines."""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from reprobuild.backends import get_backend
from reprobuild.backends.base import Backend, BuildOutput, BuildSettings, Environment
from reprobuild.backends.reference import ReferenceBackend, kernels
from reprobuild.backends.reference.engine import read_engine, write_engine
from reprobuild.backends.reference.knob import key_factor, parse_timing_knob
from reprobuild.errors import BuildError, EngineError, UsageError
from tests.conftest import child_env

PREFIX = r"\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] \[V\] \[REF\] "
AUTOTUNE_RE = re.compile(
    PREFIX + r"Autotuning op (.+)\(key: (0x[0-9a-f]{32})\): \[ONNX Layer: (.+)\]$"
)
ROW_RE = re.compile(
    PREFIX + r"\s*(\d+), (\d+\.\d{7}), (\d+\.\d{5}), (\d+\.\d{5}), (\S+), 0x([0-9a-f]+),$"
)
SELECTED_RE = re.compile(
    PREFIX + r"The selected tactic is \(tactic hash, cost\(in ms\)\):0x([0-9a-f]+), (\S+)$"
)
WRITING_RE = re.compile(PREFIX + r"Writing the best tactic \(0x([0-9a-f]+)\) to cache$")
CACHED_RE = re.compile(
    PREFIX + r"(.+) \[(\w+)\(([\d,]*)\) -> (\w+)\(([\d,]*)\)\] got cached result: (\S+), "
    r"tactic 0x([0-9a-f]+), (\S+) ms$"
)


# -- small models -----------------------------------------------------------------------------
def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def _save(tmp_path: Path, graph: onnx.GraphProto, name: str, opset: int = 17) -> str:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return str(path)


def mlp_model(tmp_path: Path) -> str:
    g = np.random.default_rng(11)
    w1 = g.standard_normal((96, 128), dtype=np.float32) / 8
    w2 = g.standard_normal((128, 24), dtype=np.float32) / 8
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
        helper.make_node("Relu", ["hb"], ["r"]),  # unnamed: gets a generated name
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 96])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 24])],
        [_init("w1", w1), _init("b1", g.standard_normal(128, dtype=np.float32)), _init("w2", w2)],
    )
    return _save(tmp_path, graph, "mlp")


def gemm_model(tmp_path: Path) -> str:
    g = np.random.default_rng(12)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="gemm1", transB=1, alpha=0.5),
    ]
    graph = helper.make_graph(
        nodes,
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 200])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 30])],
        [
            _init("w", g.standard_normal((30, 200), dtype=np.float32)),
            _init("b", g.standard_normal(30, dtype=np.float32)),
        ],
    )
    return _save(tmp_path, graph, "gemm")


def cnn_model(tmp_path: Path) -> str:
    g = np.random.default_rng(13)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node(
            "MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], group=2),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [
            _init("w1", g.standard_normal((16, 3, 3, 3), dtype=np.float32) / 4),
            _init("b1", g.standard_normal(16, dtype=np.float32) / 4),
            _init("w2", g.standard_normal((32, 8, 3, 3), dtype=np.float32) / 8),
            _init("wf", g.standard_normal((10, 32), dtype=np.float32) / 4),
            _init("bf", g.standard_normal(10, dtype=np.float32)),
        ],
    )
    return _save(tmp_path, graph, "cnn")


def lowp_model(tmp_path: Path, elem: int = TensorProto.FLOAT16) -> str:
    """FP32 in and out, with a Cast -> low-precision MatMul -> Cast middle layer."""
    g = np.random.default_rng(14)
    w = g.standard_normal((256, 48), dtype=np.float32) / 16
    w_tensor = helper.make_tensor(
        "w",
        elem,
        w.shape,
        w.astype(
            np.float16 if elem == TensorProto.FLOAT16 else kernels._PRECISION_DTYPES["bf16"]
        ).tobytes(),
        raw=True,
    )
    nodes = [
        helper.make_node("Cast", ["x"], ["xl"], name="to_low", to=elem),
        helper.make_node("MatMul", ["xl", "w"], ["yl"], name="mm_low"),
        helper.make_node("Cast", ["yl"], ["y"], name="to_fp32", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "lowp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 48])],
        [w_tensor],
    )
    return _save(tmp_path, graph, "fp16" if elem == TensorProto.FLOAT16 else "bf16")


def dynamic_model(tmp_path: Path) -> str:
    g = np.random.default_rng(15)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [_init("w", g.standard_normal((64, 8), dtype=np.float32))],
    )
    return _save(tmp_path, graph, "dyn")


def inputs_for(path: str, seed: int = 0) -> dict[str, np.ndarray]:
    model = onnx.load(path)
    g = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value or 5 for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = g.standard_normal(shape, dtype=np.float32)
    return feeds


# -- helpers ----------------------------------------------------------------------------------
@pytest.fixture
def backend() -> ReferenceBackend:
    return ReferenceBackend()


def build(
    backend: ReferenceBackend,
    path: str,
    cache=None,
    settings: BuildSettings | None = None,
) -> tuple[BuildOutput, list[str], object]:
    cache = backend.create_timing_cache() if cache is None else cache
    lines: list[str] = []
    out = backend.build(path, settings or BuildSettings(), cache, lines.append)
    return out, lines, cache


def parse_blocks(lines: list[str]) -> dict[str, dict]:
    """Parse the editable-cache autotuning blocks: {key: {layer, rows, selected}}."""
    blocks: dict[str, dict] = {}
    current = None
    for line in lines:
        if m := AUTOTUNE_RE.match(line):
            assert m.group(1) == m.group(3)
            current = {"layer": m.group(1), "rows": [], "selected": None, "written": None}
            blocks[m.group(2)] = current
        elif m := ROW_RE.match(line):
            assert current is not None
            current["rows"].append(
                (
                    int(m.group(1)),
                    float(m.group(2)),
                    float(m.group(3)),
                    m.group(5),
                    int(m.group(6), 16),
                )
            )
        elif m := SELECTED_RE.match(line):
            current["selected"] = (int(m.group(1), 16), float(m.group(2)))
        elif m := WRITING_RE.match(line):
            current["written"] = int(m.group(1), 16)
    return blocks


def tactic_names(out: BuildOutput) -> dict[str, str]:
    return {layer["name"]: layer["kernel"] for layer in out.extra["layers"]}


def digest(outputs: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(outputs):
        h.update(name.encode() + np.ascontiguousarray(outputs[name]).tobytes())
    return h.hexdigest()


def _other_kernels(env: Environment) -> Environment:
    """The same machine with another BLAS kernel family: another target."""
    return Environment.make(
        env.backend, {**env.identity_dict(), "blas_kernels": "Other"}, env.advisory_dict()
    )


# -- tests ------------------------------------------------------------------------------------
def test_get_backend_and_environment() -> None:
    backend = get_backend("reference")
    assert isinstance(backend, ReferenceBackend) and backend.name == "reference"
    env = backend.environment()
    identity, advisory = env.identity_dict(), env.advisory_dict()
    assert env.backend == "reference" and advisory["numpy"] == np.__version__
    assert {"machine", "blas", "blas_kernels", "blas_threads", "numpy_simd"} <= set(identity)
    assert identity["blas_threads"] == "1" and advisory["cpu"]
    assert ReferenceBackend().environment().fingerprint() == env.fingerprint()
    # the thread count decides bits, so it is identity; advisory fields never change a target
    assert ReferenceBackend(threads=2).environment().name != env.name
    renamed = Environment.make("reference", identity, {**advisory, "cpu": "Another CPU"})
    assert renamed.fingerprint() == env.fingerprint() and renamed.matches(env)
    _typed: Backend = backend  # the protocol is satisfied structurally


def test_build_log_is_trt_editable_cache_format(backend, tmp_path) -> None:
    path = mlp_model(tmp_path)
    out, lines, cache = build(backend, path)
    blocks = parse_blocks(lines)
    assert {b["layer"] for b in blocks.values()} == {"fc1", "fc2"}
    assert sorted(blocks) == cache.query_keys()
    for key, block in blocks.items():
        rows = block["rows"]
        # blas, splitk2, splitk4, tree8, atomic4, rowsplit for K=96 and K=128
        assert len(rows) == 6
        costs = [r[1] for r in rows]
        assert costs == sorted(costs) and rows[0][2] == 1.0
        for _tid, _cost, _ratio, name, thash in rows:
            assert kernels.KERNELS[name].tactic_hash == thash
        assert sorted(r[0] for r in rows) == [0, 1, 2, 3, 4, 5]
        assert block["selected"][0] == rows[0][4] == block["written"]
        assert cache.query(key).tactic_hash == rows[0][4]
        assert math.isclose(cache.query(key).time_ms, rows[0][1], rel_tol=1e-5)
    # every autotune line carries the TensorRT prefix; cache bookkeeping lines are present
    assert any(re.search(r"\[I\] \[REF\] Serialized 2 timing cache entries$", ln) for ln in lines)
    assert out.log_lines == len(lines)
    assert out.extra["timing_cache"] == cache.serialize()


def test_layer_info_is_engine_inspector_json(backend, tmp_path) -> None:
    out, _, cache = build(backend, cnn_model(tmp_path))
    info = json.loads(out.layer_info)
    assert info["Bindings"] == ["x", "y"]
    layers = {entry["Name"]: entry for entry in info["Layers"]}
    assert {"conv1", "conv2", "fc", "relu1", "pool1"} <= set(layers)
    for choice in out.extra["layers"]:
        value = int(layers[choice["name"]]["TacticValue"], 16)
        assert value == cache.query(choice["key"]).tactic_hash
    conv1 = layers["conv1"]
    assert conv1["LayerType"] == "RefConvolution" and conv1["StreamId"] == 0
    assert conv1["Metadata"] == "[ONNX Layer: conv1]"
    assert conv1["TacticName"] == tactic_names(out)["conv1"]
    assert re.fullmatch(r"0x[0-9a-f]{16}", conv1["TacticValue"])
    assert conv1["Inputs"][0] == {
        "Name": "x",
        "Location": "Device",
        "Dimensions": [1, 3, 24, 24],
        "Format/Datatype": "Row major linear FP32",
    }
    assert conv1["Outputs"][0]["Dimensions"] == [1, 16, 24, 24]
    assert layers["pool1"]["TacticValue"] == "0x0000000000000000"


@pytest.mark.parametrize("factory", [mlp_model, gemm_model, cnn_model])
def test_outputs_match_onnxruntime(backend, tmp_path, factory: Callable[[Path], str]) -> None:
    path = factory(tmp_path)
    out, _, _ = build(backend, path)
    feeds = inputs_for(path)
    ours = backend.run(out.engine, feeds)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    theirs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    assert set(ours) == set(theirs)
    for name in theirs:
        assert ours[name].dtype == theirs[name].dtype
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-4, atol=1e-5)


def test_fp16_layer_is_autotuned_with_both_accumulations(backend, tmp_path, monkeypatch) -> None:
    path = lowp_model(tmp_path)
    feeds = inputs_for(path)
    results = {}
    for prefer in ("f32acc", "f16acc"):
        backend = ReferenceBackend(timing=f"prefer:{prefer}")
        out, lines, _ = build(backend, path)
        (block,) = parse_blocks(lines).values()
        names = {r[3] for r in block["rows"]}
        assert "ref_matmul_blas_f16_f32acc" in names and "ref_matmul_k16_f16_f16acc" in names
        assert prefer in tactic_names(out)["mm_low"]
        results[prefer] = backend.run(out.engine, feeds)["y"]
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)[0]
    for value in results.values():
        np.testing.assert_allclose(value, expected, rtol=2e-2, atol=2e-2)
    assert np.count_nonzero(results["f32acc"] != results["f16acc"]) > 0


def test_bf16_layer_builds_and_runs(backend, tmp_path) -> None:
    path = lowp_model(tmp_path, TensorProto.BFLOAT16)
    out, lines, _ = build(backend, path)
    assert "bf16" in tactic_names(out)["mm_low"]
    feeds = inputs_for(path)
    y = backend.run(out.engine, feeds)["y"]
    bf16 = kernels._PRECISION_DTYPES["bf16"]
    w = numpy_helper.to_array(onnx.load(path).graph.initializer[0]).astype(np.float64)
    expected = feeds["x"].astype(bf16).astype(np.float64) @ w
    np.testing.assert_allclose(y, expected, rtol=5e-2, atol=0.1)


def test_two_tactics_of_one_layer_give_different_bits(backend, tmp_path, monkeypatch) -> None:
    path = cnn_model(tmp_path)
    feeds = inputs_for(path)
    runs = {}
    for prefer in ("im2col_blas", "splitk4"):
        backend = ReferenceBackend(timing=f"prefer:{prefer}")
        out, _, cache = build(backend, path)
        runs[prefer] = (tactic_names(out), backend.run(out.engine, feeds)["y"], cache.tactic_map())
    (t1, y1, m1), (t2, y2, m2) = runs.values()
    assert (
        t1["conv1"] == "ref_conv_im2col_blas_f32" and t2["conv1"] == "ref_conv_im2col_splitk4_f32"
    )
    assert m1.keys() == m2.keys() and m1 != m2
    assert not np.array_equal(y1, y2)  # different summation order, different last bits
    np.testing.assert_allclose(y1, y2, rtol=1e-5, atol=1e-5)


def test_forced_timings_change_engines_deterministically(backend, tmp_path, monkeypatch) -> None:
    path = cnn_model(tmp_path)
    maps = {}
    for seed in (1, 2, 3, 1):
        backend = ReferenceBackend(timing=f"seed:{seed}")
        out, lines, cache = build(backend, path)
        assert any(f"timing knob seed:{seed}" in ln for ln in lines)
        if seed in maps:
            assert cache.tactic_map() == maps[seed]  # the same seed decides the same way
        maps[seed] = cache.tactic_map()
    assert len({tuple(sorted(m.items())) for m in maps.values()}) == 3
    assert len({tuple(sorted(m)) for m in maps.values()}) == 1  # the keys never change
    backend = ReferenceBackend(timing="reverse")
    _, lines, _ = build(backend, path)
    for block in parse_blocks(lines).values():
        assert block["selected"][0] == block["rows"][0][4]


@pytest.mark.measured_timing
def test_timing_knob_semantics() -> None:
    names = ["k_blas", "k_split2", "k_tree"]
    measured = [1.0, 2.0, 5.0]
    assert parse_timing_knob("").apply("0xk", names, measured) == measured
    # an active knob ignores the measurement: the same costs for any measured ones
    for text in ("reverse", "prefer:tree", "seed:4"):
        knob = parse_timing_knob(text)
        injected = knob.apply("0xk", names, measured)
        for noisy in ([9.0, 1.0, 1.0], [1.0, 1.0, 30.0], [1e9, 1e-9, 5.0]):
            assert knob.apply("0xk", names, noisy) == injected, text
    seeded = parse_timing_knob("seed:4").apply("0xk", names, measured)
    factor = key_factor("0xk")  # the key's factor, in [1, 2): it ranks a layer's keys
    assert 1.0 <= factor < 2.0
    assert sorted(seeded) == [factor, factor * 1000.0, factor * 1000.0**2]
    seed0 = parse_timing_knob("seed:0").apply("0xk", names, measured)
    reverse = parse_timing_knob("reverse").apply("0xk", names, measured)
    assert [seed0.index(c) for c in sorted(seed0)] == [reverse.index(c) for c in sorted(reverse)][
        ::-1
    ]
    preferred = parse_timing_knob("prefer:tree").apply("0xk", names, measured)
    assert preferred[2] == min(preferred)  # the preferred kernel first, the others in seed 0's
    assert sorted(range(2), key=preferred.__getitem__) == sorted(range(2), key=seed0.__getitem__)
    # between keys: every knob ranks keys by their factor alone (a re-recording under
    # another knob runs the same keys), except that a key with a preferred kernel beats
    # any key without one
    keys = [f"0x{i:032x}" for i in range(8)]
    best = {
        text: [min(parse_timing_knob(text).apply(k, names, measured)) for k in keys]
        for text in ("seed:0", "seed:1", "reverse", "prefer:k_")
    }
    assert best["seed:0"] == best["seed:1"] == best["reverse"] == best["prefer:k_"]
    assert best["seed:0"] == [key_factor(k) for k in keys] and len(set(best["seed:0"])) == 8
    without = min(parse_timing_knob("prefer:tree").apply("0xj", ["k_blas", "k_split2"], [1, 1]))
    assert min(preferred) < 2.0 < 1000.0 <= without
    # candidates in another order keep their costs: the rule follows names, not positions
    perm = [2, 0, 1]
    shuffled = parse_timing_knob("seed:4").apply("0xk", [names[i] for i in perm], measured)
    assert shuffled == [seeded[i] for i in perm]
    # seeds disagree somewhere, and keys are ranked independently
    picks = {
        (seed, key): min(
            range(3), key=parse_timing_knob(f"seed:{seed}").apply(key, names, measured).__getitem__
        )
        for seed in range(8)
        for key in ("0xk", "0xj")
    }
    assert len(set(picks.values())) > 1
    for bad in ("seed:x", "prefer:", "fastest"):
        with pytest.raises(UsageError, match="timing knob"):
            parse_timing_knob(bad)


def test_cached_build_times_nothing_and_reproduces(backend, tmp_path, monkeypatch) -> None:
    path = cnn_model(tmp_path)
    feeds = inputs_for(path)
    backend = ReferenceBackend(timing="seed:7")
    first, _, cache = build(backend, path)
    recorded = cache.tactic_map()
    # another machine state: timings that would choose differently
    backend = ReferenceBackend(timing="seed:8")
    fresh = backend.create_timing_cache(cache.serialize())
    second, lines, cache2 = build(backend, path, cache=fresh)
    assert not any("Autotuning op" in ln or "Sorted table" in ln for ln in lines)
    cached = [m for ln in lines if (m := CACHED_RE.match(ln))]
    assert {m.group(1) for m in cached} == {"conv1", "conv2", "fc"}
    for m in cached:
        assert kernels.KERNELS[m.group(6)].tactic_hash == int(m.group(7), 16)
    conv1 = next(m for m in cached if m.group(1) == "conv1")
    assert conv1.group(2) == "Float" and conv1.group(3) == "1728,576,24,1"
    assert conv1.group(5) == "9216,576,24,1"
    assert cache2.tactic_map() == recorded
    assert second.extra["tactic_map"] == recorded and second.extra["timed_layers"] == 0
    assert digest(backend.run(first.engine, feeds)) == digest(backend.run(second.engine, feeds))


def test_partial_cache_times_only_missing_layers(backend, tmp_path) -> None:
    path = cnn_model(tmp_path)
    first, _, cache = build(backend, path)
    conv2_key = next(c["key"] for c in first.extra["layers"] if c["name"] == "conv2")
    assert cache.update(conv2_key, 0, math.nan) is True
    _, lines, cache = build(backend, path, cache=cache)
    assert [b["layer"] for b in parse_blocks(lines).values()] == ["conv2"]
    assert conv2_key in cache.query_keys()


def test_pinned_tactic_is_used_and_a_bad_pin_fails(backend, tmp_path) -> None:
    path = cnn_model(tmp_path)
    first, _, cache = build(backend, path)
    conv1 = next(c for c in first.extra["layers"] if c["name"] == "conv1")
    # the im2col (linear) key has several candidates; a time below every other key's (the
    # injected costs are at least 1 ms) makes the layer run it
    linear = next(k for k in conv1["keys"] if k["format"] == "linear")
    other = next(n for n in kernels.KERNELS if "conv_im2col" in n and n.endswith("_f32"))
    if other == linear["kernel"]:
        other = "ref_conv_im2col_splitk4_f32"
    conv1 = {**conv1, "key": linear["key"]}
    assert cache.update(conv1["key"], kernels.KERNELS[other].tactic_hash, 0.5) is True
    assert cache.update("0x" + "0" * 32, 1, 1.0) is False  # TensorRT: only existing keys
    pinned, lines, _ = build(backend, path, cache=cache)
    assert tactic_names(pinned)["conv1"] == other
    assert any("conv1 [" in ln and f"got cached result: {other}," in ln for ln in lines)
    # a tactic the layer cannot use: a MatMul kernel on a Conv layer
    bad = kernels.KERNELS["ref_matmul_blas_f32"].tactic_hash
    assert cache.update(conv1["key"], bad, 1.0) is True  # update accepts it ...
    with pytest.raises(BuildError) as err:  # ... the next build refuses it
        build(backend, path, cache=cache)
    message = str(err.value)
    assert "'conv1'" in message and conv1["key"] in message and f"0x{bad:x}" in message
    assert "\n" not in message


def test_optimization_level_0_ignores_the_cache(backend, tmp_path) -> None:
    path = mlp_model(tmp_path)
    settings = BuildSettings(optimization_level=0)
    out, lines, cache = build(backend, path, settings=settings)
    assert len(cache) == 0 and not parse_blocks(lines)
    assert set(tactic_names(out).values()) == {"ref_matmul_blas_f32"}
    assert any("[W] [REF] Builder optimization level 0" in ln for ln in lines)


def test_settings_shape_candidates_and_keys(backend, tmp_path) -> None:
    path = mlp_model(tmp_path)
    _, _, base = build(backend, path)
    _, lines, limited = build(backend, path, settings=BuildSettings(max_num_tactics=2))
    assert all(len(b["rows"]) == 2 for b in parse_blocks(lines).values())
    assert set(base.query_keys()).isdisjoint(limited.query_keys())  # settings are in the key
    out, lines, _ = build(backend, path, settings=BuildSettings(workspace=0))
    assert set(tactic_names(out).values()) == {"ref_matmul_blas_f32"}
    assert any("skipped. Scratch requested" in ln for ln in lines)
    with pytest.raises(BuildError, match="workspace"):
        build(backend, cnn_model(tmp_path), settings=BuildSettings(workspace=0))
    with pytest.raises(UsageError, match="optimization_level"):
        build(backend, path, settings=BuildSettings(optimization_level=9))


def test_dynamic_inputs_need_profile_shapes(backend, tmp_path) -> None:
    path = dynamic_model(tmp_path)
    with pytest.raises(UsageError, match="'x' has a dynamic shape"):
        build(backend, path)
    settings = BuildSettings(input_shapes=(("x", (1, 64), (4, 64), (8, 64)),))
    out, lines, _ = build(backend, path, settings=settings)
    assert len(parse_blocks(lines)) == 1
    y = backend.run(out.engine, {"x": np.ones((6, 64), np.float32)})["y"]
    w = numpy_helper.to_array(onnx.load(path).graph.initializer[0])
    np.testing.assert_allclose(y, np.ones((6, 64)) @ w, rtol=1e-5, atol=1e-5)


def test_bad_timing_knob_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="timing knob 'fastest-please' is not understood"):
        ReferenceBackend(timing="fastest-please")


def test_bad_model_paths_are_usage_errors(backend, tmp_path) -> None:
    with pytest.raises(UsageError, match="cannot read model"):
        build(backend, str(tmp_path / "missing.onnx"))
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\x00 not a protobuf at all")
    with pytest.raises(UsageError, match="not an ONNX model"):
        build(backend, str(junk))


def test_run_is_bit_deterministic_across_processes_and_threads(backend, tmp_path) -> None:
    path = cnn_model(tmp_path)
    out, _, _ = build(backend, path)
    feeds = inputs_for(path)
    here = digest(backend.run(out.engine, feeds))
    assert digest(backend.run(out.engine, feeds)) == here
    engine_file = tmp_path / "cnn.engine"
    engine_file.write_bytes(out.engine)
    np.save(tmp_path / "x.npy", feeds["x"])
    script = (
        "import sys, hashlib, numpy as np\n"
        "from reprobuild.backends.reference import ReferenceBackend\n"
        "engine = open(sys.argv[1], 'rb').read()\n"
        "out = ReferenceBackend().run(engine, {'x': np.load(sys.argv[2])})\n"
        "h = hashlib.sha256()\n"
        "[h.update(k.encode() + np.ascontiguousarray(out[k]).tobytes()) for k in sorted(out)]\n"
        "print(h.hexdigest())\n"
    )
    for threads in ("1", "3"):
        env = child_env(OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads)
        proc = subprocess.run(
            [sys.executable, "-c", script, str(engine_file), str(tmp_path / "x.npy")],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == here, f"OPENBLAS_NUM_THREADS={threads}"


def test_run_validates_inputs(backend, tmp_path) -> None:
    out, _, _ = build(backend, mlp_model(tmp_path))
    with pytest.raises(UsageError, match="missing engine input 'x'"):
        backend.run(out.engine, {})
    with pytest.raises(UsageError, match="dtype float64"):
        backend.run(out.engine, {"x": np.zeros((16, 96))})
    with pytest.raises(UsageError, match="unknown engine input"):
        backend.run(out.engine, {"x": np.zeros((16, 96), np.float32), "z": np.zeros(1)})


def test_corrupted_and_foreign_engines_raise_engine_errors(backend, tmp_path) -> None:
    out, _, _ = build(backend, mlp_model(tmp_path))
    feeds = inputs_for(mlp_model(tmp_path))
    meta, model_bytes = read_engine(out.engine)
    assert {layer["name"] for layer in meta["layers"]} == {"fc1", "fc2"}
    assert meta["environment"] == backend.environment().to_dict()
    damaged = bytearray(out.engine)
    damaged[len(damaged) // 2] ^= 0x40
    with pytest.raises(EngineError, match="corrupted"):
        backend.run(bytes(damaged), feeds)
    with pytest.raises(EngineError, match="truncated"):
        backend.run(out.engine[:-7], feeds)
    with pytest.raises(EngineError, match="not written by the reference backend"):
        backend.run(b"\x00\x01TRT-plan-file-bytes" * 10, feeds)
    foreign_env = _other_kernels(backend.environment())
    foreign = write_engine({**meta, "environment": foreign_env.to_dict()}, model_bytes)
    with pytest.raises(EngineError, match="engine was built for target reference-Other-"):
        backend.run(foreign, feeds)
    tampered = json.loads(json.dumps(meta))
    tampered["layers"][0]["kernel"] = "ref_conv_direct_f32"
    with pytest.raises(EngineError, match="does not have for it"):
        backend.run(write_engine(tampered, model_bytes), feeds)


def test_build_rejects_a_cache_of_another_backend(backend, tmp_path) -> None:
    class FakeCache:
        def query_keys(self) -> list[str]:
            return []

    with pytest.raises(BuildError, match="cannot build with a FakeCache"):
        backend.build(mlp_model(tmp_path), BuildSettings(), FakeCache(), print)  # type: ignore[arg-type]
