"""The reference engine's compiled program: numpy elementwise paths, buffer reuse, and the
engine-bytes shortcut, each held to the generic (``onnx.reference``) path bit for bit."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from reprobuild.backends.base import BuildSettings
from reprobuild.backends.reference import (
    ReferenceBackend,
    avgpool,
    chain,
    concats,
    convstep,
    elementwise,
    engine,
    ops,
    pools,
    program,
)
from reprobuild.backends.reference.prepared import PreparedModel


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _reference(op: str, inputs: list[np.ndarray], **attrs) -> np.ndarray:
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_empty_tensor_value_info(n) for n in names],
        [helper.make_empty_tensor_value_info("y")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs, strict=True)))[0]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# -- elementwise paths ------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize(
    ("shape_a", "shape_b"), [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (1, 3, 1, 1)), ((3,), ())]
)
def test_binary_matches_onnx_reference_and_writes_into_a_dying_input(op, shape_a, shape_b):
    g = _rng(1)
    a = g.standard_normal(shape_a).astype(np.float32)
    b = np.asarray(g.standard_normal(shape_b) + 3.0, dtype=np.float32)
    want = _reference(op, [a, b])
    assert _same_bits(elementwise.binary(op, [a, b]), want)
    mine = a.copy()
    got = elementwise.binary(op, [mine, b.copy()], donate=(True, False))
    assert _same_bits(got, want) and got is mine  # the dying input's buffer was reused
    # a broadcast input is never written into: the result has another shape
    if shape_b != shape_a:
        small = b.copy()
        got = elementwise.binary(op, [a, small], donate=(False, True))
        assert _same_bits(got, want) and got is not small and _same_bits(small, b)


def test_relu_sum_concat_match_onnx_reference() -> None:
    g = _rng(2)
    x, y, z = (g.standard_normal((2, 4, 3, 3)).astype(np.float32) for _ in range(3))
    x[0, 0, 0, 0] = np.nan
    assert _same_bits(elementwise.relu([x]), _reference("Relu", [x]))
    mine = x.copy()
    assert elementwise.relu([mine], donate=(True,)) is mine
    assert _same_bits(mine, _reference("Relu", [x]))
    assert _same_bits(elementwise.total([x, y, z]), _reference("Sum", [x, y, z]))
    assert _same_bits(elementwise.total([x, y[:1, :1]]), _reference("Sum", [x, y[:1, :1]]))
    assert _same_bits(elementwise.concat([x, y], {"axis": 1}), _reference("Concat", [x, y], axis=1))
    # what the paths do not cover goes back to onnx.reference
    ints = np.arange(6, dtype=np.int64)
    assert elementwise.binary("Div", [ints, ints + 1]) is None
    assert elementwise.binary("Add", [x, x.astype(np.float64)]) is None
    assert ops.run_fast("Add", "", [x, y], {}, 1, 6) is None  # opset 6: the broadcast attribute


def test_a_chains_relu_gives_the_bits_of_relu() -> None:
    """Relu inside a chain gives the bits of ``maximum(x, 0)`` for signed zeros, NaNs
    (with payloads), subnormals and infinities."""
    x = _rng(10).standard_normal((2, 5, 4, 3)).astype(np.float32)
    bits = [0x80000000, 0x7FC00001, 0xFFC00123, 0x7F800001, 0xFF800000, 0x80000001, 0x00000001]
    x.reshape(-1).view(np.uint32)[: len(bits)] = bits
    x[1, 2] = -0.0
    want = _reference("Relu", [x])
    assert _same_bits(chain.ChainStep([chain.RELU], donate=False)(x), want)
    mine = x.copy()
    assert chain.ChainStep([chain.RELU, chain.RELU], donate=True)(mine) is mine
    assert _same_bits(mine, want)


@pytest.mark.parametrize("donate", [False, True])
def test_a_chain_writes_its_output_into_the_place_it_is_given(donate):
    """Into another array's interior (the next Conv's padded buffer), with the same bits;
    the input is left as it was unless it was donated."""
    g = _rng(11)
    x = g.standard_normal((2, 5, 4, 3)).astype(np.float32)
    scale = chain.ElementOp(np.multiply, g.standard_normal(5).astype(np.float32), channels=True)
    ops_ = [scale, chain.RELU, chain.ElementOp(np.add, np.float32([0.5]))]
    want = chain.ChainStep(ops_, donate=False)(x)
    padded = np.full((2, 5, 6, 5), 7.0, np.float32)
    inner = padded[:, :, 1:5, 1:4]
    given = x.copy()
    got = chain.ChainStep(ops_, donate=donate)(given, lambda _x: inner)
    assert got is inner and _same_bits(np.ascontiguousarray(inner), want)
    assert (padded[:, :, 0] == 7).all() and (padded[:, :, 5] == 7).all()
    if not donate:
        assert _same_bits(given, x)


# -- the compiled program ---------------------------------------------------------------------
def _residual_model(tmp_path: Path) -> Path:
    """Conv -> BN -> Relu, a Reshape view of the Relu output kept as a graph output while the
    Relu output is also read by Mul/Add/Sum: in-place steps must not write through the view."""
    g = _rng(3)
    w = numpy_helper.from_array(g.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    bn = [
        numpy_helper.from_array(v.astype(np.float32), n)
        for v, n in (
            (g.random(4) + 0.5, "scale"),
            (g.standard_normal(4), "bias"),
            (g.standard_normal(4), "mean"),
            (g.random(4) + 0.5, "var"),
        )
    ]
    k = numpy_helper.from_array(g.standard_normal((1, 4, 1, 1)).astype(np.float32), "k")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "flat")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("Reshape", ["r", "flat"], ["view"]),
        helper.make_node("Mul", ["r", "k"], ["m"]),
        helper.make_node("Relu", ["m"], ["m2"]),
        helper.make_node("Add", ["m2", "k"], ["a"]),
        helper.make_node("Sum", ["a", "c", "m2"], ["s"]),
        helper.make_node("Concat", ["s", "a"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("view", TensorProto.FLOAT, None),
        ],
        [w, *bn, k, shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "residual.onnx"
    onnx.save(model, str(path))
    return path


def _generic(prepared: PreparedModel, feeds, plan) -> dict[str, np.ndarray]:
    """The engine's execution before the program: every layer by ``run_layer``, new arrays."""
    values = dict(prepared.constants)
    values.update(feeds)
    for layer in prepared.layers:
        outs = prepared.run_layer(layer, prepared.gather(layer, values), plan.get(layer.index))
        values.update(zip((o for o in layer.node.output if o), outs, strict=False))
    return {n: values[n] for n in prepared.output_names}


def _built(path: Path, feeds) -> tuple[ReferenceBackend, bytes, engine.LoadedEngine, dict]:
    """(backend, engine, its loaded form, the layer-by-layer outputs for ``feeds``)."""
    backend = ReferenceBackend()
    out = backend.build(str(path), BuildSettings(), backend.create_timing_cache(), lambda _: None)
    loaded = engine.load_engine(out.engine, backend.environment())
    return backend, out.engine, loaded, _generic(loaded.prepared, feeds, loaded.plan)


_SPECIAL = [0x80000000, 0x7FC00001, 0xFFC00123, 0x7F800000, 0xFF800000, 0x80000001, 0x1, 0x0]


@pytest.mark.parametrize("shape", [(2, 3), (1, 4, 17), (2, 3, 4, 5), (1, 3, 7, 7), (1, 2, 3, 2, 4)])
@pytest.mark.parametrize("seed", range(4))
def test_a_chain_gives_the_bits_of_its_layers_run_one_by_one(shape, seed) -> None:
    """Every op, with the constant on either side, one value per channel (in each layout a
    model gives it) or one in all, special values in the input and the constants: the
    compiled chain gives the bits of the numpy ufuncs applied one after the other."""
    g = _rng(100 + seed)
    x = g.standard_normal(shape).astype(np.float32) * 3
    flat = x.reshape(-1).view(np.uint32)
    flat[g.choice(flat.size, min(flat.size, len(_SPECIAL)), replace=False)] = _SPECIAL[: flat.size]
    channels = shape[1]
    layouts = [
        (channels,),
        (channels,) + (1,) * (len(shape) - 2),
        (1, channels) + (1,) * (len(shape) - 2),
        (),
        (1,),
    ]
    ops_ = []
    for _ in range(6):
        ufunc = [np.add, np.subtract, np.multiply, np.divide][g.integers(4)]
        layout = layouts[g.integers(len(layouts))]
        value = g.standard_normal(layout).astype(np.float32)
        if value.size and g.random() < 0.3:
            value.reshape(-1).view(np.uint32)[0] = _SPECIAL[g.integers(len(_SPECIAL))]
        first = bool(g.integers(2))
        ops_.append(chain.ElementOp(ufunc, value, first, channels=layout == (channels,)))
        if g.random() < 0.4:
            ops_.append(chain.RELU)
    want = x.copy()
    with np.errstate(all="ignore"):
        for op in ops_:
            c = op.constant
            if op.channels:
                c = c.reshape((1, channels) + (1,) * (len(shape) - 2))
            want = op.ufunc(want, c) if op.first else op.ufunc(c, want)
    got = chain.ChainStep(ops_, donate=False)(x)
    assert got is not None and _same_bits(got, want.astype(np.float32))


def _init(g: np.random.Generator, name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array(g.standard_normal(shape).astype(np.float32), name)


def test_program_matches_layer_by_layer_run_and_reuses_buffers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _residual_model(tmp_path)
    backend = ReferenceBackend()
    out = backend.build(str(path), BuildSettings(), backend.create_timing_cache(), lambda _: None)
    feeds = {"x": _rng(4).standard_normal((1, 3, 6, 6)).astype(np.float32)}
    given = feeds["x"].copy()
    got = backend.run(out.engine, feeds)
    loaded = engine.load_engine(out.engine, backend.environment())
    want = _generic(loaded.prepared, feeds, loaded.plan)
    assert set(got) == {"y", "view"}
    for name in want:
        assert _same_bits(got[name], want[name]), name
    assert _same_bits(feeds["x"], given)  # the caller's input is never written into
    # which buffers are reused: the Conv output feeds BN, but Sum reads it later, so the
    # BN -> Relu chain allocates; Relu's output is seen through the Reshape view, so the
    # Mul -> Relu chain allocates (and Add reuses nothing: Sum reads m2 later)
    compiled = program.compile_program(loaded.prepared, loaded.plan, convstep.Scratch())
    steps = {step.outputs[0]: step for step in compiled.steps}
    assert list(steps) == ["c", "r", "view", "m2", "a", "s", "y"]  # n and m: inside chains
    ownable = program._ownable(loaded.prepared, loaded.plan)
    assert {"c", "n", "m", "m2", "a", "s"} <= ownable
    assert "r" not in ownable and "view" not in ownable and "y" not in ownable
    assert steps["m2"].free == ("r", "m") and "c" in steps["s"].free


def _biased_conv_model(tmp_path: Path) -> Path:
    """Conv(+bias) -> Relu, Conv(+bias) -> BatchNormalization -> Relu, and a Conv(+bias)
    whose output a later layer reads too (no chain may write into it); the first chain's
    output is the padded second Conv's input."""
    g = _rng(8)

    bn = [_init(g, n, (4,)) for n in ("scale", "bias", "mean")]
    bn.append(numpy_helper.from_array((g.random(4) + 0.5).astype(np.float32), "var"))
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], pads=[1, 0, 0, 1]),
        helper.make_node("BatchNormalization", ["c2", "scale", "bias", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Add", ["r3", "c3"], ["y"]),
    ]
    inits = [_init(g, "w1", (4, 3, 3, 3)), _init(g, "b1", (4,)), _init(g, "w2", (4, 4, 2, 2))]
    inits += [_init(g, "b2", (4,)), _init(g, "w3", (4, 4, 1, 1)), _init(g, "b3", (4,)), *bn]
    graph = helper.make_graph(
        nodes,
        "biased",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    path = tmp_path / "biased.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_conv_bias_is_added_in_the_pass_of_the_layers_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    feeds = {"x": _rng(9).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    backend, built, loaded, want = _built(_biased_conv_model(tmp_path), feeds)
    padded = []
    real = convstep.ConvStep._padded
    monkeypatch.setattr(
        convstep.ConvStep,
        "_padded",
        lambda self, x, params: padded.append(self.spec.scheme) or real(self, x, params),
    )
    for _ in range(2):
        assert _same_bits(backend.run(built, feeds)["y"], want["y"])
    # an im2col kernel reads its 2-D input unpadded (the zeros written as it unfolds)
    assert all(scheme == "direct" for scheme in padded)
    compiled = program.compile_program(loaded.prepared, loaded.plan, convstep.Scratch())
    # c1 and c2 die in their chains; c3 is read by Add too, so Conv 3 adds its own bias
    assert [step.outputs[0] for step in compiled.steps] == ["r1", "r2", "c3", "r3", "y"]


@pytest.mark.parametrize("scheme", ["direct", "blas"])
def test_a_direct_conv_takes_its_input_in_its_padded_buffer(
    scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step before a padded ``direct`` Conv writes its output into the Conv's padded
    buffer (:meth:`.ConvStep.input_buffer`), which is then not copied; an im2col Conv
    pads a 2-D input as it unfolds it and asks for no such buffer."""
    from reprobuild.backends.reference import kernels

    g = _rng(10)
    x = g.standard_normal((1, 4, 7, 6)).astype(np.float32)
    w = g.standard_normal((5, 4, 3, 3)).astype(np.float32)
    attrs = {"pads": [1, 2, 0, 1]}
    (spec,) = [
        s
        for s in kernels.kernels_for("Conv", "f32")
        if convstep.supported(s) and s.scheme == scheme
    ][:1]
    step = convstep.ConvStep(spec, attrs, convstep.Scratch())
    inner = step.input_buffer(x, w)
    if scheme != "direct":
        assert inner is None
        return
    assert inner is not None
    inner[...] = x
    in_place = []
    real = convstep.same_memory
    monkeypatch.setattr(
        convstep, "same_memory", lambda a, b: in_place.append(real(a, b)) or in_place[-1]
    )
    assert _same_bits(step([inner, w]), kernels.execute(spec, [x, w], attrs))
    assert in_place == [True]  # found where the step before wrote it: not copied


def _dense_model(tmp_path: Path) -> Path:
    """DenseNet's pattern: each Concat appends new channels to the previous Concat's output,
    which a Relu reads before (the third Concat outgrows the first buffer)."""
    g = _rng(13)

    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Conv", ["a", "w1"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "b"], ["c1"], axis=1),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["e"]),
        helper.make_node("Concat", ["c1", "e"], ["c2"], axis=-3),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["f"]),
        helper.make_node("Concat", ["c2", "f", "f"], ["c3"], axis=1),
        helper.make_node("Relu", ["c3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [_init(g, "w1", (2, 3, 3, 3)), _init(g, "w2", (2, 5, 1, 1)), _init(g, "w3", (2, 7, 1, 1))],
    )
    path = tmp_path / "dense.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("batch", [1, 2])
def test_concats_append_to_the_previous_concats_buffer(tmp_path: Path, batch: int) -> None:
    feeds = {"x": _rng(14).standard_normal((batch, 3, 5, 5)).astype(np.float32)}
    backend, built, loaded, want = _built(_dense_model(tmp_path), feeds)
    for _ in range(2):
        assert _same_bits(backend.run(built, feeds)["y"], want["y"])
    ownable = program._ownable(loaded.prepared, loaded.plan)
    assert concats.growth(loaded.prepared, ownable) == {2: "", 5: "c1", 8: "c2"}
    # c2 grows c1 in place; c3 (13 channels) outgrows their buffer (10) and moves to a new one
    buffers = concats.ConcatBuffers()
    a, b = (np.full((1, n, 2, 2), n, np.float32) for n in (3, 2))
    c1 = buffers.grow([a, b], {"axis": 1}, "", "c1")
    c2 = buffers.grow([c1, b], {"axis": 1}, "c1", "c2")
    assert np.shares_memory(c1, c2) and c2.flags.c_contiguous
    c3 = buffers.grow([c2, a, a], {"axis": 1}, "c2", "c3")
    assert not np.shares_memory(c2, c3) and _same_bits(c3, np.concatenate([a, b, b, a, a], 1))
    # an input that is not the view this object handed out starts a new buffer
    c4 = buffers.grow([c1.copy(), b], {"axis": 1}, "c3", "c4")
    assert not np.shares_memory(c4, c3) and _same_bits(c4, np.concatenate([a, b, b], 1))


def _record_joins(monkeypatch) -> list[bool]:
    """For each Concat joined by :meth:`.ConcatBuffers.join`, whether it gave its buffer
    (every input written into it) rather than a copy."""
    joins: list[bool] = []
    real = concats.ConcatBuffers.join

    def join(self, name, inputs, attrs, layouts):
        buf = self._slots.get(name)
        out = real(self, name, inputs, attrs, layouts)
        joins.append(out is buf)
        return out

    monkeypatch.setattr(concats.ConcatBuffers, "join", join)
    return joins


def _fire_model(
    tmp_path: Path, g, size: int, batch: int = 1, axis: int = 1, pooled: bool = False
) -> Path:
    """SqueezeNet's fire module on ``size`` x ``size`` images: two Conv -> Relu chains
    joined by a Concat along ``axis`` (``y``; ``pooled``: ``j``, then a 3x3 stride-2
    MaxPool ``y``)."""
    joined = "j" if pooled else "y"
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Concat", ["r1", "r2"], [joined], axis=axis),
    ]
    if pooled:
        nodes.append(helper.make_node("MaxPool", ["j"], ["y"], kernel_shape=[3, 3], strides=[2, 2]))
    shape = (3, 3, 1, 1) if axis % 4 != 1 else (2, 3, 1, 1)  # other axes: equal channels
    inits = [_init(g, "w1", shape), _init(g, "b1", shape[:1]), _init(g, "w2", (3, 3, 3, 3))]
    graph = helper.make_graph(
        nodes,
        "fire",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [*inits, _init(g, "b2", (3,))],
    )
    path = tmp_path / "fire.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("batch", [1, 2])
def test_chains_write_into_their_channels_of_the_concat_after_them(
    tmp_path, monkeypatch, batch
) -> None:
    """SqueezeNet's fire module: two Conv -> Relu chains joined by a Concat."""
    g = _rng(15)
    joins = _record_joins(monkeypatch)
    path = _fire_model(tmp_path, g, 5)
    feeds = {"x": g.standard_normal((batch, 3, 5, 5)).astype(np.float32)}
    backend, built, loaded, want = _built(path, feeds)
    for _ in range(2):
        assert _same_bits(backend.run(built, feeds)["y"], want["y"])
    assert joins == [True, True]  # both chains wrote into the Concat's buffer
    chains = {"r1": 2, "r2": 3}
    assert concats.slots(loaded.prepared, chains, set()) == {4: [(0, 2, 5), (2, 3, 5)]}
    assert concats.slots(loaded.prepared, chains, {4}) == {}
    # a chain that ran layer by layer made its own array: the Concat copies it
    buffers = concats.ConcatBuffers()
    x = feeds["x"][:, :2]
    first = buffers.slot("y", (0, 2, 5), 1, x.shape)
    assert first is not None
    first[...] = x
    other = g.standard_normal((batch, 3, 5, 5)).astype(np.float32)
    joined = buffers.join("y", [first, other], {"axis": 1}, [(0, 2, 5), (2, 3, 5)])
    assert _same_bits(joined, np.concatenate([x, other], axis=1))


def test_engine_bytes_checked_once_per_object_and_dropped_by_a_build(tmp_path, monkeypatch):
    path = _residual_model(tmp_path)
    backend = ReferenceBackend()
    out = backend.build(str(path), BuildSettings(), backend.create_timing_cache(), lambda _: None)
    feeds = {"x": np.ones((1, 3, 6, 6), np.float32)}
    first = backend.run(out.engine, feeds)
    calls = []
    real = engine.split_engine
    monkeypatch.setattr(engine, "split_engine", lambda data: calls.append(1) or real(data))
    again = backend.run(out.engine, feeds)
    assert calls == [] and _same_bits(first["y"], again["y"])
    backend.run(bytes(bytearray(out.engine)), feeds)  # equal bytes, another object: checked
    assert calls == [1]
    corrupt = bytearray(out.engine)
    corrupt[40] ^= 1
    with pytest.raises(engine.EngineError, match="corrupted|unreadable"):
        backend.run(bytes(corrupt), feeds)
    backend.run(out.engine, feeds)
    assert engine._LAST_BYTES and engine._LAST_BYTES[0][0] is out.engine
    prepared = engine._LAST_BYTES[0][1].prepared
    # the Conv's kept buffer: its padded input (direct) or its columns (im2col); which one
    # follows the kernel the build picked, and the injected costs are seeded per key, whose
    # environment part differs from machine to machine
    assert {"pad", "cols"} & set(prepared._scratch._buffers)
    backend.build(str(path), BuildSettings(), backend.create_timing_cache(), lambda _: None)
    assert not engine._LAST_BYTES  # the build does not keep the caller's engine alive
    assert prepared._scratch._buffers == {}  # nor the buffers of its runs


# -- Conv kernels with kept buffers -----------------------------------------------------------
def test_conv_step_computes_every_float32_conv_kernel_bit_for_bit() -> None:
    """Each case runs twice through one shared scratch, after a larger layer: buffers that
    hold another layer's values (and a border another layer wrote) must change nothing."""
    from reprobuild.backends.reference import kernels
    from tests.test_reference_kernels import CONV_CASES

    g = _rng(5)
    scratch = convstep.Scratch()
    big_x = g.standard_normal((1, 8, 20, 20)).astype(np.float32)
    big_w = g.standard_normal((4, 8, 3, 3)).astype(np.float32)
    specs = [s for s in kernels.kernels_for("Conv", "f32") if convstep.supported(s)]
    assert {s.scheme for s in specs} == {"blas", "splitk", "tree", "direct"}
    for x_shape, w_shape, attrs in CONV_CASES:
        x = g.standard_normal(x_shape).astype(np.float32)
        w = g.standard_normal(w_shape).astype(np.float32)
        b = g.standard_normal(w_shape[0]).astype(np.float32)
        for spec in specs:
            big = convstep.ConvStep(spec, {"pads": [2, 2, 2, 2]}, scratch)
            big([big_x, big_w])
            step = convstep.ConvStep(spec, attrs, scratch)
            for inputs in ([x, w, b], [x, w]):
                want = kernels.execute(spec, inputs, attrs)
                for _ in range(2):
                    assert _same_bits(step(inputs), want), (spec.name, x_shape, attrs)
    scratch.clear()
    assert scratch._buffers == {}
    # a float16 layer is not this step's: the kernel itself runs
    assert not convstep.supported(kernels.KERNELS["ref_conv_im2col_blas_f16_f32acc"])


def test_building_and_running_an_mlp_never_imports_onnx_reference(tmp_path: Path) -> None:
    """Every op of the example MLP (MatMul, Add, Relu) has a numpy path, so the build path
    does not pay for importing onnx.reference (its op table imports ~200 modules)."""
    import subprocess
    import sys

    from tests.conftest import child_env

    root = Path(__file__).resolve().parent.parent
    model = root / "reprobuild" / "examples" / "mlp.onnx"
    env = child_env([root])  # this checkout first, whatever the cwd
    code = (
        "import sys, numpy as np\n"
        "from reprobuild.backends.reference import ReferenceBackend\n"
        "from reprobuild.backends.base import BuildSettings\n"
        "b = ReferenceBackend()\n"
        f"out = b.build({str(model)!r}, BuildSettings(), b.create_timing_cache(), print)\n"
        "meta = b.engine_metadata(out.engine)\n"
        "feeds = {i['name']: np.ones(i['shape'], np.float32) for i in meta['inputs']}\n"
        "b.run(out.engine, feeds)\n"
        "print(sorted(m for m in sys.modules if m.startswith('onnx.reference')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
    )
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout[-500:]


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]},
        {"kernel_shape": [2, 2], "strides": [2, 2]},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        {"kernel_shape": [1, 1]},
    ],
)
@pytest.mark.parametrize("block", [pools.POOL_BLOCK_ELEMENTS, 100, 1])
def test_pools_sum_taps_in_the_order_they_always_did(attrs, block, monkeypatch) -> None:
    """AveragePool adds the taps one by one in row-major order and divides once (the counts
    now kept between runs): the same bits as a copy of tap 0 plus each later tap; also a few
    channels, or one, at a time."""
    monkeypatch.setattr(pools, "POOL_BLOCK_ELEMENTS", block)
    g = _rng(6)
    x = g.standard_normal((2, 3, 9, 8)).astype(np.float32)
    kernel, strides, dilations, pads, out = pools.pool_geometry(x, attrs)
    nd = len(kernel)
    width = [(0, 0), (0, 0)] + [(pads[i], pads[nd + i]) for i in range(nd)]
    views = list(pools.windows(np.pad(x, width), kernel, strides, dilations, out))
    total = views[0].copy()
    for v in views[1:]:
        total += v
    ones = np.pad(np.ones((1, 1, 9, 8), np.float32), width)
    counts = list(pools.windows(ones, kernel, strides, dilations, out))
    count = sum(counts[1:], counts[0].copy())
    if attrs.get("count_include_pad") or not any(pads):
        count = np.float32(math.prod(kernel))
    for _ in range(2):  # the second call divides by the kept counts
        assert _same_bits(avgpool.average_pool(x, attrs), total / count)
    max_attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    assert _same_bits(pools.max_pool(x, max_attrs), _reference("MaxPool", [x], **max_attrs))
    # the maximum of each window's taps in the order they always were, NaN and -0.0 kept
    x.reshape(-1)[::5] = -0.0
    x.reshape(-1)[::7] = np.nan
    kernel, strides, dilations, pads, out = pools.pool_geometry(x, max_attrs)
    width = [(0, 0), (0, 0)] + [(pads[i], pads[nd + i]) for i in range(nd)]
    xp = np.pad(x, width, constant_values=-np.inf)
    cols = pools.fold(
        pools.windows(xp, (1, kernel[1]), (1, strides[1]), dilations, (xp.shape[2], out[1])),
        np.maximum,
    )
    want = pools.fold(
        pools.windows(cols, (kernel[0], 1), (strides[0], 1), dilations, out), np.maximum
    )
    assert _same_bits(pools.max_pool(x, max_attrs), want)


@pytest.mark.parametrize("shape", [(2, 5, 4, 3), (1, 3, 7), (1, 2, 3, 2, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_global_average_pool_gives_onnx_references_bits(shape, dtype) -> None:
    x = _rng(12).standard_normal(shape).astype(dtype)
    (got,) = ops.run_fast("GlobalAveragePool", "", [x], {}, 1, 17)
    assert _same_bits(got, _reference("GlobalAveragePool", [x]))


@pytest.mark.parametrize("size", [1, 2, 5])
def test_lrn_in_place_gives_the_bits_of_its_padded_formula(size) -> None:
    g = _rng(7)
    x = g.standard_normal((2, 7, 3, 4)).astype(np.float32)
    below, above = (size - 1) // 2, -(-(size - 1) // 2)
    padded = np.pad(x * x, [(0, 0), (below, above), (0, 0), (0, 0)])
    total = np.zeros_like(x)
    for offset in range(size):
        total += padded[:, offset : offset + 7]
    a, b, k = 1e-3, 0.75, 2.0
    want = x / (np.float32(k) + np.float32(a / size) * total) ** np.float32(b)
    attrs = {"size": size, "alpha": a, "beta": b, "bias": k}
    assert _same_bits(ops.lrn([x], attrs, 1)[0], want)


def test_a_released_model_is_freed_at_once_not_by_the_cycle_collector(tmp_path) -> None:
    """The compiled program lives on the folded model; if it pointed back at the model, the
    weights would outlive ``release()`` until a garbage collection (verify's memory peak)."""
    import gc
    import weakref

    path = _residual_model(tmp_path)
    backend = ReferenceBackend()
    out = backend.build(str(path), BuildSettings(), backend.create_timing_cache(), lambda _: None)
    backend.run(out.engine, {"x": np.ones((1, 3, 6, 6), np.float32)})
    model = weakref.ref(engine.load_engine(out.engine, backend.environment()).prepared)
    assert model() is not None and model()._programs
    gc.disable()
    try:
        backend.release()
        assert model() is None
    finally:
        gc.enable()


def test_scratch_keeps_small_buffers_between_runs_and_frees_large_ones() -> None:
    scratch = convstep.Scratch()
    small = scratch.get("pad", (4, 4))
    scratch.get("cols", (1 << 20,))  # 4 MB
    scratch.trim(1 << 20)
    assert set(scratch._buffers) == {"pad"}
    assert np.shares_memory(scratch.get("pad", (2, 8)), small)  # reused, not reallocated
    assert program.KEEP_SCRATCH_BYTES == 32 << 20


@pytest.mark.parametrize("seed", range(24))
def test_stride_one_average_pool_sums_the_taps_as_the_tap_fold_does(seed: int, monkeypatch) -> None:
    """The flat-row path of a 2-D stride-1 AveragePool (images stacked, one or several at a
    time; the 3x3 kernel compiled with its constants) gives the tap-by-tap fold's bytes,
    NaN, inf and -0.0 included, with and without padding counted."""
    g = _rng(100 + seed)
    monkeypatch.setattr(avgpool, "MEAN_STACK_ELEMENTS", int(g.choice([1, 150, 4096])))
    k = (int(g.integers(1, 4)), int(g.integers(1, 4)))
    dil = (int(g.integers(1, 3)), int(g.integers(1, 3)))
    if seed % 3 == 1:  # the kernel compiled with its constants (avgpool._mean_rows_3x3)
        k, dil = (3, 3), (1, 1)
    pads = [int(g.integers(0, k[0])), int(g.integers(0, k[1]))]
    pads += [int(g.integers(0, k[0])), int(g.integers(0, k[1]))]
    if seed % 4 == 0:
        pads = [0, 0, 0, 0]
    shape = (1 + seed % 2, 3, int(g.integers(5, 12)), int(g.integers(5, 12)))
    x = g.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[g.integers(0, x.size, 6)] = [np.nan, np.inf, -np.inf, -0.0, 3e38, -3e38]
    attrs = {"kernel_shape": list(k), "dilations": list(dil), "pads": pads}
    attrs["count_include_pad"] = seed % 5 == 2
    got = avgpool.average_pool(x, attrs)
    geo = pools.pool_geometry(x, attrs)
    assert got is not None and geo is not None
    width = [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])]
    with np.errstate(invalid="ignore"):  # inf + -inf: NaN, as the pool gives
        want = pools.fold(pools.windows(np.pad(x, width), k, (1, 1), dil, geo[4]), np.add)
    if attrs["count_include_pad"] or not any(pads):
        np.divide(want, np.float32(k[0] * k[1]), out=want)
    else:
        np.divide(want, avgpool._pad_counts(tuple(x.shape[2:]), geo, width), out=want)
    assert got.flags.c_contiguous and _same_bits(got, want)


@pytest.mark.parametrize("seed", range(24))
def test_compiled_max_pool_gives_the_per_axis_folds_bits(seed: int) -> None:
    """The one-pass 2-D MaxPool (padding inside, rows folded per output row or as one flat
    row) gives the bytes of the per-axis folds it replaced, NaN and -0.0 included."""
    g = _rng(300 + seed)
    k = (int(g.integers(1, 4)), int(g.integers(1, 4)))
    strides = (int(g.integers(1, 4)), int(g.integers(1, 3)))
    dil = (int(g.integers(1, 3)), int(g.integers(1, 3)))
    if seed % 3 == 1:  # the kernel compiled with its constants (pools._max_rows_3x3)
        k, dil = (3, 3), (1, 1)
    pads = [int(g.integers(0, k[0])), int(g.integers(0, k[1]))]
    pads += [int(g.integers(0, k[0])), int(g.integers(0, k[1]))]
    wide = seed % 2 == 0  # rows of at least ROW_SPAN_MIN: folded one output row at a time
    shape = (2, 3, int(g.integers(7, 12)), int(g.integers(150, 160) if wide else g.integers(7, 12)))
    x = g.standard_normal(shape).astype(np.float64 if seed % 3 == 0 else np.float32)
    x.reshape(-1)[:: int(g.integers(3, 7))] = -0.0
    x.reshape(-1)[:: int(g.integers(5, 11))] = 0.0
    x.reshape(-1)[:: int(g.integers(7, 13))] = np.nan
    attrs = {"kernel_shape": list(k), "strides": list(strides), "dilations": list(dil)}
    attrs["pads"] = pads
    kernel, strides, dilations, _, out = pools.pool_geometry(x, attrs)
    block = np.pad(
        x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])], constant_values=-np.inf
    )
    for axis in (1, 0):
        block = pools._axis_max(block, 2 + axis, k[axis], strides[axis], dil[axis], out[axis])
    assert wide == ((out[1] - 1) * strides[1] + 1 >= pools.ROW_SPAN_MIN)
    assert _same_bits(pools.max_pool(x, attrs), block)


@pytest.mark.parametrize("seed", range(12))
def test_a_max_pool_fed_by_a_chain_gives_the_bits_of_the_chain_then_the_pool(seed: int) -> None:
    """The pool that takes a chain's output image by image (never written out whole) gives
    the bytes of the chain run whole and then pooled, for any geometry, special values in
    the input and the constants, and a batch (images cycle through the channels)."""
    g = _rng(500 + seed)
    k = (3, 3) if seed % 3 == 1 else (int(g.integers(1, 4)), int(g.integers(1, 4)))
    pads = [int(g.integers(0, k[0])), int(g.integers(0, k[1]))]
    pads += [int(g.integers(0, k[0])), int(g.integers(0, k[1]))]
    attrs = {
        "kernel_shape": list(k),
        "strides": [int(g.integers(1, 4)), int(g.integers(1, 3))],
        "dilations": [1, 1] if seed % 3 == 1 else [int(g.integers(1, 3)), int(g.integers(1, 3))],
        "pads": pads,
    }
    wide = seed % 2 == 0  # rows folded one output row at a time (pools.ROW_SPAN_MIN)
    shape = (
        int(g.integers(1, 3)),
        3,
        int(g.integers(7, 12)),
        int(g.integers(150, 160) if wide else g.integers(7, 12)),
    )
    x = g.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1).view(np.uint32)
    flat[g.choice(flat.size, len(_SPECIAL), replace=False)] = _SPECIAL
    bias = g.standard_normal(3).astype(np.float32)
    bias[0] = np.nan if seed % 3 == 0 else -0.0
    ops_ = [chain.ElementOp(np.add, bias, channels=True)]
    if seed % 4 < 2:
        ops_ += [
            chain.ElementOp(np.multiply, g.standard_normal(3).astype(np.float32), channels=True)
        ]
    ops_.append(chain.RELU)
    step = chain.ChainStep(ops_, donate=False)
    got = pools.chained_max_pool(x, attrs, step)
    assert got is not None and _same_bits(got, pools.max_pool(step(x), attrs))


def _pooled_model(tmp_path: Path) -> Path:
    """Conv(+bias) -> Relu -> MaxPool (padded), Conv -> BatchNormalization -> Relu -> MaxPool
    with its Indices, and a Relu -> MaxPool whose Relu output is a graph output too: the
    first chain hands its output to the pool image by image, the others may not."""
    g = _rng(11)
    bn = [_init(g, n, (4,)) for n in ("scale", "bias", "mean")]
    bn.append(numpy_helper.from_array((g.random(4) + 0.5).astype(np.float32), "var"))
    pool = {"kernel_shape": [3, 3], "strides": [2, 2]}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], pads=[0, 0, 1, 1], **pool),
        helper.make_node("Conv", ["p1", "w2"], ["c2"]),
        helper.make_node("BatchNormalization", ["c2", "scale", "bias", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2", "i2"], **pool),
        helper.make_node("Conv", ["p2", "w3", "b3"], ["c3"]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("MaxPool", ["r3"], ["y"], kernel_shape=[2, 2]),
    ]
    inits = [_init(g, "w1", (4, 3, 3, 3)), _init(g, "b1", (4,)), _init(g, "w2", (4, 4, 1, 1))]
    inits += [_init(g, "w3", (4, 4, 1, 1)), _init(g, "b3", (4,)), *bn]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "r3")]
    outputs.append(helper.make_tensor_value_info("i2", TensorProto.INT64, None))
    graph = helper.make_graph(
        nodes,
        "pooled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 20, 20])],
        outputs,
        inits,
    )
    path = tmp_path / "pooled.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_chain_hands_its_output_to_the_max_pool_after_it(tmp_path: Path) -> None:
    feeds = {"x": _rng(12).standard_normal((1, 3, 20, 20)).astype(np.float32)}
    backend, built, loaded, want = _built(_pooled_model(tmp_path), feeds)
    for _ in range(2):
        got = backend.run(built, feeds)
        assert all(_same_bits(got[name], want[name]) for name in want)
    compiled = program.compile_program(loaded.prepared, loaded.plan, convstep.Scratch())
    # r1 is never made: its chain pools it; p2 comes with Indices and r3 is a graph output
    outputs = [step.outputs for step in compiled.steps]
    assert outputs == [("p1",), ("c2",), ("r2",), ("p2", "i2"), ("r3",), ("y",)]


@pytest.mark.parametrize(("axis", "batch"), [(1, 1), (1, 2), (-3, 1), (2, 1)])
def test_chains_pool_into_their_channels_of_a_concat_before_a_max_pool(
    tmp_path: Path, monkeypatch, axis: int, batch: int
) -> None:
    """A fire module's Concat read only by a MaxPool (SqueezeNet's): each chain pools its
    output into its channels of the pooled buffer and the Concat's step gives the pool's
    output, the bits of the Concat pooled; batch 2 (channels not contiguous) pools into
    new arrays, which the step joins. Joined along another axis, the pool runs as before."""
    g = _rng(16)
    path = _fire_model(tmp_path, g, 9, batch, axis=axis, pooled=True)
    feeds = {"x": g.standard_normal((batch, 3, 9, 9)).astype(np.float32)}
    backend, built, loaded, want = _built(path, feeds)
    joins = _record_joins(monkeypatch)
    for _ in range(2):
        assert _same_bits(backend.run(built, feeds)["y"], want["y"])
    # batch 1 along the channels: both chains pooled into the buffer the step gives
    assert joins == [batch == 1 and axis != 2] * 2
    compiled = program.compile_program(loaded.prepared, loaded.plan, convstep.Scratch())
    outputs = [step.outputs for step in compiled.steps]
    pooled = [("r1",), ("r2",), ("y",)]
    assert outputs == (pooled if axis in (1, -3) else [("r1",), ("r2",), ("j",), ("y",)])


@pytest.mark.parametrize("seed", range(16))
def test_im2col_padding_on_the_fly_gives_the_padded_copys_columns(seed: int) -> None:
    """The compiled im2col, reading the unpadded input (zeros written where the padding
    is) or the padded copy, gives numpy's copy of the padded copy's strided view, for any
    strides, dilations and pads."""
    from reprobuild.backends.reference import convparams

    g = _rng(400 + seed)
    kernel = (int(g.integers(1, 4)), int(g.integers(1, 4)))
    x = g.standard_normal((2, 3, int(g.integers(4, 12)), int(g.integers(4, 40))))
    x = x.astype(np.float32)
    w = np.zeros((4, 3, *kernel), np.float32)
    attrs = {
        "strides": [int(g.integers(1, 4)), int(g.integers(1, 4))],
        "dilations": [int(g.integers(1, 3)), int(g.integers(1, 3))],
        "pads": [int(g.integers(0, 4)) for _ in range(4)],
    }
    params = convparams.conv_params(x, w, attrs)
    assert params is not None and convparams.pads_itself(x, params)
    xp = convparams.padded(x, params)
    want = np.ascontiguousarray(convparams._taps_view(xp, params))  # numpy's strided copy
    got = np.full(want.shape, np.nan, np.float32)
    convparams.unfold(x, params, got, pads=tuple(attrs["pads"][:2]))
    assert _same_bits(got, want)
    again = np.full(want.shape, np.nan, np.float32)
    convparams.unfold(xp, params, again)  # the padded copy itself, as before
    assert _same_bits(again, want)
