"""The reference backend's tactics: GEMM and convolution kernels that sum in different orders.

Every kernel computes the same mathematical result; they differ only in the order (and, for
FP16/BF16 layers, the precision) of the accumulation, so their outputs differ in the last
bits, exactly like two TensorRT kernels for the same layer. Families (``S`` = split count):

- ``blas``: one call to the BLAS library, which blocks K internally.
- ``splitkS``: K cut into S contiguous chunks, one BLAS call each, partials added in order.
  The chunk length is rounded up to an odd number: OpenBLAS splits K at even, unroll-aligned
  points, and a split that coincides with its own would be bit-identical to ``blas``.
- ``tree8``: K cut into 8 chunks whose partial products are added as a balanced tree.
- ``k16`` (FP16/BF16 only): K in chunks of 16 with the running sum rounded to the layer's
  precision after every chunk, like a tensor-core MMA accumulating in FP16.
- ``direct`` (Conv only): one GEMM per kernel tap over the channels, taps added in order,
  instead of one GEMM over the im2col matrix.
- ``atomic4`` (FP32 MatMul/Gemm only): K in 4 chunks whose partials are added in an
  order that changes with every run of the engine (:func:`engine_run`), as split-K partial
  sums added with atomics on a GPU land in whichever order the thread blocks finish: the
  same engine on the same inputs gives other bits on the next run.
- ``rowsplit`` (FP32 MatMul/Gemm only): K split into a count of chunks that depends on
  the number of rows (the batch), as cuBLAS-style heuristics pick split-K from the problem
  size: a sample's bits depend on how many samples share its batch.

These two stand for the kernels ``verify --runs`` and ``verify --batch-invariance`` catch;
the tie rule (:mod:`reprobuild.tiebreak`) ranks them last within a band.

``*_f32acc`` kernels of FP16/BF16 layers upcast exactly, accumulate in FP32 and round once;
``*_f16acc``/``*_bf16acc`` kernels round every partial sum to the layer's precision.

Determinism: every BLAS call goes through :func:`_mm`, which never hands BLAS a vector
operand. OpenBLAS's threaded GEMV splits the reduction across threads, so its bits depend on
the thread count; its GEMM only partitions the output, so its bits do not.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from reprobuild.backends.reference.convparams import columns, conv_params, is_pointwise, padded

AUTOTUNED_OPS = ("MatMul", "Gemm", "Conv")

_PRECISION_DTYPES: dict[str, Any] = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
}


@functools.lru_cache(maxsize=4096)
def tactic_hash(name: str) -> int:
    """A stable 64-bit hash of a kernel name (never TensorRT's 'no tactic' 2**64-1); cached,
    as ``KernelSpec.tactic_hash`` is read several times per layer and candidate."""
    digest = hashlib.sha256(b"reprobuild-reference-tactic\0" + name.encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


@dataclass(frozen=True)
class KernelSpec:
    """One tactic: how a layer's reduction is ordered and in which precision it accumulates."""

    name: str
    op: str
    precision: str  # "f32" | "f16" | "bf16": the layer's input type
    scheme: str  # "blas" | "splitk" | "tree" | "chunk" | "direct" | "atomic" | "rows"
    parts: int = 1  # splits for splitk/tree, chunk length for chunk
    low_acc: bool = False  # accumulate in the layer's precision instead of FP32
    # INT8 kernels (precision "i8", :mod:`.int8`): how the int32 accumulator is requantized
    requant: str = ""  # "fscale" | "fxmul" | "deq" | "ibias"
    rounding: str = ""  # "rne" | "rna" ("" when nothing is rounded to an integer)
    epilogue: str = ""  # "f32" | "f16"

    @property
    def tactic_hash(self) -> int:
        return tactic_hash(self.name)

    def min_k(self) -> int:
        """Smallest reduction length for which the scheme is a real, distinct kernel."""
        if self.scheme == "rows":
            return 2 * ROW_SPLITS
        return 0 if self.scheme in ("blas", "direct") else 2 * self.parts


def _family(op: str, precision: str) -> list[KernelSpec]:
    prefix = {"MatMul": "ref_matmul", "Gemm": "ref_gemm", "Conv": "ref_conv_im2col"}[op]
    if precision == "f32":
        specs = [
            KernelSpec(f"{prefix}_blas_f32", op, precision, "blas"),
            KernelSpec(f"{prefix}_splitk2_f32", op, precision, "splitk", 2),
            KernelSpec(f"{prefix}_splitk4_f32", op, precision, "splitk", 4),
            KernelSpec(f"{prefix}_tree8_f32", op, precision, "tree", 8),
        ]
        if op == "Conv":
            specs.append(KernelSpec("ref_conv_direct_f32", op, precision, "direct"))
        else:  # the run-to-run and batch-dependent kernels (module docstring)
            specs.append(KernelSpec(f"{prefix}_atomic4_f32", op, precision, "atomic", 4))
            specs.append(KernelSpec(f"{prefix}_rowsplit_f32", op, precision, "rows"))
        return specs
    p = precision
    specs = [
        KernelSpec(f"{prefix}_blas_{p}_f32acc", op, p, "blas"),
        KernelSpec(f"{prefix}_splitk2_{p}_f32acc", op, p, "splitk", 2),
        KernelSpec(f"{prefix}_splitk4_{p}_{p}acc", op, p, "splitk", 4, low_acc=True),
        KernelSpec(f"{prefix}_k16_{p}_{p}acc", op, p, "chunk", 16, low_acc=True),
    ]
    if op == "Conv":
        specs.append(KernelSpec(f"ref_conv_direct_{p}_f32acc", op, p, "direct"))
    return specs


KERNELS: dict[str, KernelSpec] = {
    spec.name: spec
    for op in AUTOTUNED_OPS
    for prec in _PRECISION_DTYPES
    for spec in _family(op, prec)
}


def kernels_for(op: str, precision: str) -> list[KernelSpec]:
    """All kernels of an op family in declaration order (the order of ``tactic_id``)."""
    return [s for s in KERNELS.values() if s.op == op and s.precision == precision]


ROW_SPLITS = 6
"""``rowsplit`` cuts K into ``max(3, ROW_SPLITS // rows)`` chunks: one row (a single
sample) 6, more rows 3 (counts no ``splitkN`` kernel uses, so its bits are its own)."""

_RUN = [0]  # the engine run in progress (:func:`engine_run`); 0 while building


class engine_run:
    """Within this context, ``atomic`` kernels run as the ``index``-th run of their engine.

    Why a run number rather than the clock or a random draw: the reference backend must be
    able to fail the run-to-run check on every machine and in every test alike; the order
    of the partial sums follows the run number, so run 0 of any engine gives the same bits
    (rebuilt engines run once agree) and the next run of the same engine does not."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __enter__(self) -> None:
        self.saved = _RUN[0]
        _RUN[0] = self.index

    def __exit__(self, *exc: object) -> None:
        _RUN[0] = self.saved


# -- primitives -------------------------------------------------------------------------------
def _mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` through BLAS GEMM only (see the module docstring on thread determinism)."""
    m, n = a.shape[-2], b.shape[-1]
    if m == 1:
        a = np.concatenate([a, np.zeros_like(a)], axis=-2)
    if n == 1:
        b = np.concatenate([b, np.zeros_like(b)], axis=-1)
    if a.ndim == 2 and b.ndim == 2 and _rows_of_transposed(b):
        # ``b`` is the transpose of a row-major matrix (a Gemm transB=1 weight): BLAS repacks
        # such an operand on every call (alexnet's FC layers: 45% of the engine). The same
        # GEMM with the operands' roles swapped reads it in place. Its bits are this BLAS
        # kernel family's, like any GEMM's: on some (SkylakeX) they equal the plain order's,
        # on others (Haswell) an edge tile rounds differently; timing and engine both come
        # here, so a tactic's bits never depend on which of the two ran it.
        out = np.matmul(b.T, a.T).T
    else:
        out = np.matmul(a, b)
    if m == 1 or n == 1 or not out.flags.c_contiguous:
        out = np.ascontiguousarray(out[..., :m, :n])
    return out


def _rows_of_transposed(b: np.ndarray) -> bool:
    """True when ``b.T`` is row-major (unit column stride, rows at least a row apart)."""
    item = b.itemsize
    return b.strides[0] == item and b.strides[1] >= b.shape[0] * item and not b.flags.c_contiguous


def _chunks(k: int, parts: int) -> list[tuple[int, int]]:
    size = max(1, math.ceil(k / parts))
    if size % 2 == 0:
        size += 1
    return [(start, min(start + size, k)) for start in range(0, k, size)]


def _rounder(low: np.dtype | None):
    if low is None:
        return lambda x: x
    return lambda x: x.astype(low).astype(np.float32)


def reduce_gemm(a: np.ndarray, b: np.ndarray, spec: KernelSpec) -> np.ndarray:
    """``a @ b`` (float32 operands, broadcasting leading dims) in the order ``spec`` says.

    Returns float32; for low-precision accumulation the values are already rounded.
    """
    low = _PRECISION_DTYPES[spec.precision] if spec.low_acc else None
    rnd = _rounder(low)
    k = a.shape[-1]
    if spec.scheme == "blas" or k == 0:
        return rnd(_mm(a, b))
    if spec.scheme == "chunk":
        ranges = [(s, min(s + spec.parts, k)) for s in range(0, k, spec.parts)]
    elif spec.scheme == "rows":
        ranges = _chunks(k, max(3, ROW_SPLITS // max(1, math.prod(a.shape[:-1]))))
    else:
        ranges = _chunks(k, spec.parts)
    if spec.scheme == "atomic":  # last chunk first, then rotated by the run number
        turn = _RUN[0] % len(ranges)
        ranges = ranges[::-1]
        ranges = ranges[turn:] + ranges[:turn]
    partials = (rnd(_mm(a[..., s:e], b[..., s:e, :])) for s, e in ranges)
    if spec.scheme == "tree":
        level = list(partials)
        while len(level) > 1:
            nxt = [rnd(level[i] + level[i + 1]) for i in range(0, len(level) - 1, 2)]
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        return level[0]
    acc = next(partials)
    for p in partials:
        acc += p
        if low is not None:
            acc = rnd(acc)
    return acc


# -- layer analysis ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Geometry:
    """What candidate filtering needs to know about a layer on its real shapes."""

    op: str
    precision: str
    k: int  # reduction length of one GEMM
    taps: int  # Conv kernel points (1 for MatMul/Gemm)
    out_bytes: int  # FP32 bytes of one full-size partial result
    im2col_bytes: int  # Conv column matrix (0 when no copy is needed)
    direct_bytes: int  # Conv: one shifted input slice

    def scratch_bytes(self, spec: KernelSpec) -> int:
        """Temporary memory the kernel needs: compared against ``BuildSettings.workspace``."""
        if spec.scheme == "direct":
            return self.direct_bytes + self.out_bytes
        per_scheme = {
            "blas": 0,
            "splitk": self.out_bytes,
            "chunk": self.out_bytes,
            "atomic": self.out_bytes,
            "rows": self.out_bytes,
        }
        extra = per_scheme.get(spec.scheme, spec.parts * self.out_bytes)
        return self.im2col_bytes + extra


def inputs_precision(arrays: Sequence[np.ndarray]) -> str | None:
    """The layer's precision when all float inputs share one supported type (strong typing)."""
    dtypes = {np.asarray(a).dtype for a in arrays}
    if len(dtypes) != 1:
        return None
    (dtype,) = dtypes
    for name, candidate in _PRECISION_DTYPES.items():
        if dtype == candidate:
            return name
    return None


def geometry(op: str, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> Geometry | None:
    """The layer's GEMM shape, or None when the layer is not autotuned (onnx.reference runs it)."""
    arrays = [a for a in inputs if a is not None]
    if op not in AUTOTUNED_OPS or not all(isinstance(a, np.ndarray) for a in arrays):
        return None
    if op == "MatMul":
        if len(arrays) != 2 or arrays[0].ndim == 0 or arrays[1].ndim == 0:
            return None
        prec = inputs_precision(arrays)
        a, b = arrays
        k = a.shape[-1]
        if prec is None or (b.shape[-2] if b.ndim > 1 else b.shape[0]) != k:
            return None
        try:
            out_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            return None
        m = a.shape[-2] if a.ndim > 1 else 1
        n = b.shape[-1] if b.ndim > 1 else 1
        out_bytes = 4 * m * n * math.prod(out_shape)
        return Geometry(op, prec, k, 1, out_bytes, 0, 0)
    if op == "Gemm":
        if len(arrays) < 2 or arrays[0].ndim != 2 or arrays[1].ndim != 2:
            return None
        prec = inputs_precision(arrays)
        a, b = arrays[0], arrays[1]
        ta, tb = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
        m, k = (a.shape[1], a.shape[0]) if ta else a.shape
        k2, n = (b.shape[1], b.shape[0]) if tb else b.shape
        if prec is None or k != k2:
            return None
        return Geometry(op, prec, k, 1, 4 * m * n, 0, 0)
    # Conv
    if len(arrays) < 2:
        return None
    x, w = arrays[0], arrays[1]
    prec = inputs_precision(arrays)
    params = conv_params(x, w, attrs) if prec is not None else None
    if params is None:
        return None
    n_batch, channels = x.shape[0], x.shape[1]
    taps = math.prod(params["kernel"])
    positions = math.prod(params["out"])
    k = (channels // params["group"]) * taps
    out_bytes = 4 * n_batch * w.shape[0] * positions
    im2col = 0 if is_pointwise(params) else 4 * n_batch * channels * taps * positions
    return Geometry(op, prec, k, taps, out_bytes, im2col, 4 * n_batch * channels * positions)


def candidates(geo: Geometry) -> list[KernelSpec]:
    """The layer's candidate kernels in declaration order (before workspace/max filtering)."""
    return [
        spec
        for spec in kernels_for(geo.op, geo.precision)
        if geo.k >= spec.min_k() and (spec.scheme != "direct" or geo.taps > 1)
    ]


# -- execution --------------------------------------------------------------------------------
def execute(spec: KernelSpec, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    """Run the layer with kernel ``spec``; the result has the layer's (input) dtype."""
    if spec.op == "MatMul":
        return _matmul(spec, inputs[0], inputs[1])
    if spec.op == "Gemm":
        return _gemm(spec, inputs, attrs)
    return _conv(spec, inputs, attrs)


def _f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32, copy=False)


def _matmul(spec: KernelSpec, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out_dtype = a.dtype
    return np.asarray(_by_sample(_matmul_f32, _f32(a), _f32(b), spec)).astype(out_dtype)


def _matmul_f32(af: np.ndarray, bf: np.ndarray, spec: KernelSpec) -> np.ndarray:
    a_vec, b_vec = af.ndim == 1, bf.ndim == 1
    if a_vec:
        af = af[None, :]
    if b_vec:
        bf = bf[:, None]
    if bf.ndim == 2 and af.ndim > 2:
        lead = af.shape[:-1]
        r = reduce_gemm(af.reshape(-1, af.shape[-1]), bf, spec).reshape(*lead, bf.shape[-1])
    else:
        r = reduce_gemm(af, bf, spec)
    if b_vec:
        r = r[..., 0]
    if a_vec:
        r = r[..., 0] if b_vec else r[..., 0, :]
    return r


def _by_sample(
    fn: Callable[[np.ndarray, np.ndarray, KernelSpec], np.ndarray],
    a: np.ndarray,
    b: np.ndarray,
    spec: KernelSpec,
) -> np.ndarray:
    """``fn`` on each sample alone, the first dimension of ``a`` being the batch (a Gemm's
    rows, a MatMul's leading dimension), joined: a sample gets the same BLAS calls, with
    the same shapes, in a batch of any size as alone, so its bits never depend on the
    batch (BLAS itself is not batch invariant: OpenBLAS gives a row other bits in a
    4-row GEMM than alone). ``rowsplit`` sees the whole batch: it stands for the kernels
    that are not batch invariant."""
    if spec.scheme == "rows" or a.ndim < 2 or a.shape[0] <= 1 or b.ndim > a.ndim:
        return fn(a, b, spec)
    batched_b = b.ndim == a.ndim > 2 and b.shape[0] == a.shape[0]
    parts = [fn(a[i : i + 1], b[i : i + 1] if batched_b else b, spec) for i in range(len(a))]
    return np.concatenate(parts)


def _gemm(spec: KernelSpec, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    out_dtype = a.dtype
    af = _f32(a).T if int(attrs.get("transA", 0)) else _f32(a)
    bf = _f32(b).T if int(attrs.get("transB", 0)) else _f32(b)
    r = _by_sample(reduce_gemm, af, bf, spec)
    alpha = float(attrs.get("alpha", 1.0))
    beta = float(attrs.get("beta", 1.0))
    if alpha != 1.0:
        r = r * np.float32(alpha)
    if c is not None and beta != 0.0:
        cf = _f32(c)
        r = r + (cf if beta == 1.0 else cf * np.float32(beta))
    return r.astype(out_dtype)


def _conv(spec: KernelSpec, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    return run_conv(spec, conv_operands(inputs, attrs))


@dataclass
class ConvOperands:
    """A Conv layer's operands, made once and shared by all its candidate kernels.

    Why: autotuning runs every candidate several times on the same inputs; the FP32 copies,
    the padding and the im2col matrix are the same for all of them (pure copies, never
    written by a kernel), so the builder makes them once per layer (``cols`` on first use:
    ``direct`` does not need it). Any kernel gives the same bits as from fresh operands.
    """

    params: dict[str, Any]
    padded: np.ndarray  # FP32 input, padded
    weights: np.ndarray  # FP32
    bias: Any
    out_dtype: np.dtype
    cols: np.ndarray | None = None

    def columns(self) -> np.ndarray:
        if self.cols is None:
            self.cols = columns(self.padded, self.params)
        return self.cols


def conv_operands(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> ConvOperands:
    x, w = inputs[0], inputs[1]
    params = conv_params(x, w, attrs)
    if params is None:
        raise ValueError("unsupported Conv configuration")
    bias = inputs[2] if len(inputs) > 2 else None
    return ConvOperands(params, padded(_f32(x), params), _f32(w), bias, x.dtype)


def run_conv(spec: KernelSpec, ops: ConvOperands) -> np.ndarray:
    """Run a Conv with kernel ``spec`` on prepared operands; the result has the input dtype."""
    params, xf, wf = ops.params, ops.padded, ops.weights
    nd, group, kernel = params["nd"], params["group"], params["kernel"]
    strides, dilations, out = params["strides"], params["dilations"], params["out"]
    n_batch, channels = xf.shape[0], xf.shape[1]
    m_out = wf.shape[0]
    cg, mg = channels // group, m_out // group
    positions = math.prod(out)
    if spec.scheme == "direct":
        acc: np.ndarray | None = None
        for taps in itertools.product(*(range(k) for k in kernel)):
            window = tuple(
                slice(t * d, t * d + (o - 1) * s + 1, s)
                for t, d, o, s in zip(taps, dilations, out, strides, strict=True)
            )
            xs = np.ascontiguousarray(xf[(slice(None), slice(None), *window)])
            w_tap = np.ascontiguousarray(wf[(slice(None), slice(None), *taps)])
            part = _mm(w_tap.reshape(group, mg, cg), xs.reshape(n_batch, group, cg, positions))
            acc = part if acc is None else acc + part
        assert acc is not None
        result = acc
    else:
        result = reduce_gemm(wf.reshape(group, mg, -1), ops.columns(), spec)
    result = result.reshape(n_batch, m_out, *out)
    if ops.bias is not None:
        result = result + _f32(ops.bias).reshape((1, m_out) + (1,) * nd)
    return result.astype(ops.out_dtype)
