"""Reference-backend kernels: every tactic is correct, and tactics differ in their last bits.

Also checks the numpy op paths against ONNX Runtime, since they replace onnx.reference
where it is too slow or implements an old opset's semantics wrongly.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from reprobuild.backends.reference import kernels, ops

BF16 = kernels._PRECISION_DTYPES["bf16"]


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def single_node_eval(op: str, inputs: dict[str, np.ndarray], opset: int = 17, **attrs):
    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_empty_tensor_value_info(n) for n in inputs],
        [helper.make_empty_tensor_value_info("y")],
    )
    return ReferenceEvaluator(graph, opsets={"": opset}).run(None, inputs)[0]


def ort_single_node(
    op: str, inputs: dict[str, np.ndarray], opset: int, n_out: int = 1, **attrs
) -> list[np.ndarray]:
    outs = ["y"] + [f"y{i}" for i in range(1, n_out)]
    node = helper.make_node(op, list(inputs), outs, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape))
            for n, v in inputs.items()
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


CONV_CASES = [
    ((1, 8, 10, 10), (6, 8, 3, 3), {}),
    (
        (2, 8, 11, 9),
        (8, 2, 3, 2),
        {"group": 4, "strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]},
    ),
    ((1, 16, 7, 7), (16, 1, 3, 3), {"group": 16, "auto_pad": "SAME_UPPER"}),
    ((1, 5, 8, 7), (4, 5, 2, 2), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((1, 32, 5, 5), (7, 32, 1, 1), {}),
    ((1, 4, 9), (5, 4, 3), {"pads": [1, 1]}),
    ((1, 2, 4, 5, 5), (3, 2, 2, 3, 3), {"pads": [0, 1, 1, 1, 1, 1]}),
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONV_CASES)
def test_every_conv_tactic_matches_onnx_reference(x_shape, w_shape, attrs) -> None:
    g = rng(1)
    x = g.standard_normal(x_shape, dtype=np.float32)
    w = g.standard_normal(w_shape, dtype=np.float32)
    b = g.standard_normal(w_shape[0], dtype=np.float32)
    expected = single_node_eval(
        "Conv",
        {"x": x.astype(np.float64), "w": w.astype(np.float64), "b": b.astype(np.float64)},
        **attrs,
    )
    geo = kernels.geometry("Conv", [x, w, b], attrs)
    assert geo is not None
    specs = kernels.candidates(geo)
    assert len(specs) >= 3
    for spec in specs:
        out = kernels.execute(spec, [x, w, b], attrs)
        assert out.dtype == np.float32 and out.shape == expected.shape, spec.name
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4, err_msg=spec.name)


def test_conv_has_five_distinct_tactics_on_a_3x3_layer() -> None:
    g = rng(2)
    x = g.standard_normal((1, 64, 14, 14), dtype=np.float32)
    w = g.standard_normal((32, 64, 3, 3), dtype=np.float32)
    attrs = {"pads": [1, 1, 1, 1]}
    specs = kernels.candidates(kernels.geometry("Conv", [x, w], attrs))
    assert [s.scheme for s in specs] == ["blas", "splitk", "splitk", "tree", "direct"]
    outs = {s.name: kernels.execute(s, [x, w], attrs) for s in specs}
    digests = {hashlib.sha256(o.tobytes()).hexdigest() for o in outs.values()}
    assert len(digests) == len(specs), "every summation order should give its own bits"
    base = outs["ref_conv_im2col_blas_f32"]
    for name, out in outs.items():
        np.testing.assert_allclose(out, base, rtol=1e-5, atol=1e-4, err_msg=name)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((3, 4, 64), (64, 5)),
        ((64,), (64, 7)),
        ((2, 1, 5, 33), (3, 33, 4)),
        ((40,), (40,)),
        ((1, 100), (100, 1)),
        ((6, 40), (40,)),
    ],
)
def test_every_matmul_tactic_matches_numpy(a_shape, b_shape) -> None:
    g = rng(3)
    a = g.standard_normal(a_shape, dtype=np.float32)
    b = g.standard_normal(b_shape, dtype=np.float32)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    specs = kernels.candidates(kernels.geometry("MatMul", [a, b], {}))
    assert [s.name for s in specs] == [
        "ref_matmul_blas_f32",
        "ref_matmul_splitk2_f32",
        "ref_matmul_splitk4_f32",
        "ref_matmul_tree8_f32",
        "ref_matmul_atomic4_f32",
        "ref_matmul_rowsplit_f32",
    ]
    for spec in specs:
        out = kernels.execute(spec, [a, b], {})
        assert out.shape == expected.shape, spec.name
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4, err_msg=spec.name)


def test_short_reductions_drop_split_kernels() -> None:
    a = np.ones((4, 3), np.float32)
    b = np.ones((3, 5), np.float32)
    names = [s.name for s in kernels.candidates(kernels.geometry("MatMul", [a, b], {}))]
    assert names == ["ref_matmul_blas_f32"]  # K=3 < 2*2: no real split exists
    a = np.ones((4, 9), np.float32)
    b = np.ones((9, 3), np.float32)
    names = [s.name for s in kernels.candidates(kernels.geometry("MatMul", [a, b], {}))]
    assert names == [
        "ref_matmul_blas_f32",
        "ref_matmul_splitk2_f32",
        "ref_matmul_splitk4_f32",
        "ref_matmul_atomic4_f32",  # K=9 >= 2*4; rowsplit needs 2*6
    ]


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_atomic_kernel_changes_bits_from_run_to_run(op) -> None:
    """The same inputs, run 0 and run 1 of an engine: other bits; run 0 again: the same."""
    g = rng(7)
    a = g.standard_normal((8, 256), dtype=np.float32)
    b = g.standard_normal((256, 16), dtype=np.float32)
    spec = kernels.KERNELS[f"ref_{op.lower()}_atomic4_f32"]
    runs = []
    for index in (0, 1, 0):
        with kernels.engine_run(index):
            runs.append(kernels.execute(spec, [a, b], {}))
    assert runs[0].tobytes() != runs[1].tobytes()
    assert runs[0].tobytes() == runs[2].tobytes()
    with kernels.engine_run(5):
        pass
    assert kernels._RUN[0] == 0  # the run number is restored: builds run as run 0


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_rows_kernel_splits_by_the_batch(op) -> None:
    """``rowsplit`` sums a row computed alone in 6 chunks and inside a batch of 8 rows in
    3: the split-K kernels of those counts, so its bits depend on the batch."""
    g = rng(8)
    a = g.standard_normal((8, 256), dtype=np.float32)
    b = g.standard_normal((256, 16), dtype=np.float32)
    spec = kernels.KERNELS[f"ref_{op.lower()}_rowsplit_f32"]
    full = kernels.execute(spec, [a, b], {})
    alone = kernels.execute(spec, [a[2:3], b], {})
    split = kernels.KernelSpec("x", op, "f32", "splitk", 6)
    assert alone.tobytes() == kernels.execute(split, [a[2:3], b], {}).tobytes()
    # the whole batch in one split-K GEMM of 3 chunks (reduce_gemm: no per-sample calls)
    whole = kernels.reduce_gemm(a, b, dataclasses.replace(split, parts=3))
    assert full.tobytes() == whole.tobytes()
    assert full[2:3].tobytes() != alone.tobytes()


@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_tactics_honour_transposes_alpha_beta(trans) -> None:
    g = rng(4)
    ta, tb = trans
    a = g.standard_normal((50, 7) if ta else (7, 50), dtype=np.float32)
    b = g.standard_normal((9, 50) if tb else (50, 9), dtype=np.float32)
    c = g.standard_normal((9,), dtype=np.float32)
    attrs = {"transA": ta, "transB": tb, "alpha": 0.5, "beta": 2.0}
    a64 = a.T.astype(np.float64) if ta else a.astype(np.float64)
    b64 = b.T.astype(np.float64) if tb else b.astype(np.float64)
    expected = 0.5 * a64 @ b64 + 2.0 * c
    for spec in kernels.candidates(kernels.geometry("Gemm", [a, b, c], attrs)):
        out = kernels.execute(spec, [a, b, c], attrs)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4, err_msg=spec.name)


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(1, 9216, 64), (2, 1152, 512), (1, 1000, 37), (3, 513, 129), (17, 33, 5), (64, 257, 100)],
)
def test_transposed_weights_run_in_place_with_the_same_bits(m, k, n, monkeypatch) -> None:
    """A transB=1 weight is multiplied with the operands swapped (no repacking per call):
    every kernel, whole or split along K, gives the same bits on every call and the plain
    ``a @ b`` order's values. Whether it also gives the plain order's *bits* depends on the
    BLAS kernel family (equal under SkylakeX, an edge tile differs under Haswell), so that
    is not asserted: the engine and the timing run take the same path either way."""
    g = rng(7)
    a = g.standard_normal((m, k), dtype=np.float32)
    w = g.standard_normal((n, k), dtype=np.float32)
    attrs = {"transB": 1}
    geo = kernels.geometry("Gemm", [a, w], attrs)
    assert kernels._rows_of_transposed(w.T) and not kernels._rows_of_transposed(w)
    swapped = {s.name: kernels.execute(s, [a, w], attrs) for s in kernels.candidates(geo)}
    for spec in kernels.candidates(geo):
        again = kernels.execute(spec, [a, w], attrs)
        assert again.tobytes() == swapped[spec.name].tobytes(), spec.name
    monkeypatch.setattr(kernels, "_rows_of_transposed", lambda b: False)
    for spec in kernels.candidates(geo):
        plain = kernels.execute(spec, [a, w], attrs)
        assert swapped[spec.name].flags.c_contiguous
        tol = 2e-2 if "f16" in spec.name else 1e-4
        np.testing.assert_allclose(swapped[spec.name], plain, rtol=tol, atol=tol, err_msg=spec.name)


@pytest.mark.parametrize(
    ("precision", "dtype", "tol"), [("f16", np.float16, 0.05), ("bf16", BF16, 0.5)]
)
def test_low_precision_layers_accumulate_in_two_precisions(precision, dtype, tol) -> None:
    g = rng(5)
    a = g.standard_normal((32, 256), dtype=np.float32).astype(dtype)
    b = g.standard_normal((256, 24), dtype=np.float32).astype(dtype)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    geo = kernels.geometry("MatMul", [a, b], {})
    assert geo is not None and geo.precision == precision
    specs = kernels.candidates(geo)
    names = [s.name for s in specs]
    assert f"ref_matmul_blas_{precision}_f32acc" in names
    assert f"ref_matmul_k16_{precision}_{precision}acc" in names
    outs = {}
    for spec in specs:
        out = kernels.execute(spec, [a, b], {})
        assert out.dtype == np.dtype(dtype), spec.name
        np.testing.assert_allclose(
            out.astype(np.float64), expected, rtol=tol, atol=tol * 4, err_msg=spec.name
        )
        outs[spec.name] = out.astype(np.float32)
    f32acc = outs[f"ref_matmul_blas_{precision}_f32acc"]
    lowacc = outs[f"ref_matmul_k16_{precision}_{precision}acc"]
    assert np.count_nonzero(f32acc != lowacc) > 0
    # accumulating in the low precision loses accuracy against FP32 accumulation
    err_f32 = np.abs(f32acc - expected).mean()
    err_low = np.abs(lowacc - expected).mean()
    assert err_low > err_f32


def test_tactic_hashes_are_stable_and_unique() -> None:
    hashes = [spec.tactic_hash for spec in kernels.KERNELS.values()]
    assert len(set(hashes)) == len(hashes)
    assert all(0 < h < 2**64 - 1 for h in hashes)
    # A lock stores these hashes: changing the hashing scheme would invalidate every lock.
    assert kernels.tactic_hash("ref_conv_im2col_blas_f32") == 0x74E160CF1455D0B7
    assert kernels.KERNELS["ref_conv_im2col_blas_f32"].tactic_hash == 0x74E160CF1455D0B7


def test_families_have_at_least_four_kernels() -> None:
    for op in kernels.AUTOTUNED_OPS:
        for precision in ("f32", "f16", "bf16"):
            assert len(kernels.kernels_for(op, precision)) >= 4, (op, precision)


def test_integer_matmul_is_not_autotuned() -> None:
    a = np.ones((2, 3), np.int64)
    assert kernels.geometry("MatMul", [a, a.T.copy()], {}) is None
    assert (
        kernels.geometry("MatMul", [np.ones((2, 3), np.float32), np.ones((3, 2), np.float16)], {})
        is None
    )


# -- numpy op paths ---------------------------------------------------------------------------
POOL_CASES = [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [1, 2]},
    {"kernel_shape": [3, 3], "pads": [0, 1, 2, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 0},
    {"kernel_shape": [3, 3], "auto_pad": "VALID"},
    {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 2], "strides": [2, 1], "auto_pad": "SAME_LOWER"},
]


@pytest.mark.parametrize("attrs", POOL_CASES)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_paths_match_onnxruntime(op, attrs) -> None:
    # ONNX Runtime, not onnx.reference: the latter mis-shapes MaxPool with asymmetric pads.
    x = rng(6).standard_normal((2, 3, 9, 8), dtype=np.float32)
    attrs = dict(attrs)
    if op == "MaxPool":
        attrs.pop("count_include_pad", None)
    fast = ops.run_fast(op, "", [x], attrs, 1, 17)
    assert fast is not None
    expected = ort_single_node(op, {"x": x}, 17, **attrs)[0]
    np.testing.assert_allclose(fast[0], expected, rtol=1e-6, atol=1e-6)


def test_pool_path_declines_ceil_mode() -> None:
    x = np.zeros((1, 1, 5, 5), np.float32)
    assert ops.run_fast("MaxPool", "", [x], {"kernel_shape": [2, 2], "ceil_mode": 1}, 1, 17) is None


def test_batchnorm_opset9_is_inference_mode_like_onnxruntime() -> None:
    g = rng(7)
    x = g.standard_normal((1, 4, 5, 5), dtype=np.float32) * 3 + 1
    scale, bias = g.standard_normal(4, dtype=np.float32), g.standard_normal(4, dtype=np.float32)
    mean, var = g.standard_normal(4, dtype=np.float32), g.uniform(0.5, 2, 4).astype(np.float32)
    feeds = {"x": x, "s": scale, "b": bias, "m": mean, "v": var}
    ours = ops.run_fast("BatchNormalization", "", list(feeds.values()), {"epsilon": 1e-5}, 1, 9)
    expected = ort_single_node("BatchNormalization", feeds, 9, epsilon=1e-5)[0]
    np.testing.assert_allclose(ours[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_before_opset13_coerces_to_2d(op) -> None:
    x = rng(8).standard_normal((2, 3, 4, 1), dtype=np.float32)
    ours = ops.run_fast(op, "", [x], {"axis": 1}, 1, 11)
    expected = ort_single_node(op, {"x": x}, 11, axis=1)[0]
    np.testing.assert_allclose(ours[0], expected, rtol=1e-5, atol=1e-6)
    assert ops.run_fast(op, "", [x], {}, 1, 13) is None  # onnx.reference is right from 13


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_matches_onnxruntime(size) -> None:
    x = rng(9).standard_normal((2, 7, 4, 3), dtype=np.float32)
    attrs = {"size": size, "alpha": 1e-3, "beta": 0.75, "bias": 2.0}
    ours = ops.run_fast("LRN", "", [x], attrs, 1, 9)
    expected = ort_single_node("LRN", {"x": x}, 9, **attrs)[0]
    np.testing.assert_allclose(ours[0], expected, rtol=1e-5, atol=1e-6)


def test_dropout_inference_is_identity_with_typed_mask() -> None:
    x = rng(10).standard_normal((3, 4), dtype=np.float32)
    y, mask = ops.run_fast("Dropout", "", [x], {"ratio": 0.5}, 2, 9)
    assert np.array_equal(y, x) and mask.dtype == np.float32 and mask.all()
    y, mask = ops.run_fast("Dropout", "", [x], {}, 2, 13)
    assert mask.dtype == np.bool_ and mask.all()


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_a_sample_gets_its_bits_alone_or_in_a_batch_but_with_rowsplit(op: str) -> None:
    """Every float32 MatMul/Gemm kernel but ``rowsplit`` is batch invariant by
    construction (each sample's own BLAS calls), whatever the BLAS library does with a
    4-row GEMM (OpenBLAS gives a row other bits there than alone); ``rowsplit`` is not,
    which is what it is for."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 1000)).astype(np.float32)
    b = rng.standard_normal((100, 1000)).astype(np.float32)
    operands, attrs = ([a, b], {"transB": 1}) if op == "Gemm" else ([a, b.T.copy()], {})
    varying = []
    for spec in kernels.kernels_for(op, "f32"):
        full = kernels.execute(spec, operands, attrs)
        alone = [kernels.execute(spec, [a[i : i + 1], operands[1]], attrs) for i in range(4)]
        if not all(np.array_equal(x, full[i : i + 1]) for i, x in enumerate(alone)):
            varying.append(spec.name)
    assert varying == [f"ref_{op.lower()}_rowsplit_f32"]
