"""Numpy paths for the few non-autotuned ops that ``onnx.reference`` runs too slowly or wrongly.

Too slowly: ``onnx.reference`` loops over output pixels in Python for pooling, which costs
seconds per layer on ImageNet shapes; these paths compute the same results with one
vectorized step per kernel tap (GlobalAveragePool: the same numpy call, without the
evaluator around it).

Wrongly (onnx 1.23), for opsets the model zoo still uses: BatchNormalization before opset 14
takes the schema's default ``momentum`` as a request for training mode and normalizes with
the batch's own statistics; Softmax/LogSoftmax/Hardmax before opset 13 reduce over one axis
instead of coercing the input to 2-D at ``axis``; Dropout 7-9 returns a bool mask where the
schema types it like the input; LRN sums squares for channel 0 only (its loop runs over the
batch dimension). These paths implement the opset's own semantics.

Each function returns None for a configuration it does not cover, and the caller then falls
back to ``onnx.reference``; tests compare the paths with ONNX Runtime and onnx.reference.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from reprobuild.backends.reference.convparams import pad_constant, pad_width
from reprobuild.backends.reference.elementwise import ELEMENTWISE_OPS, run_elementwise
from reprobuild.backends.reference.jit import compiled, maximum
from reprobuild.backends.reference.qdq import run_qdq


def _pool_geometry(
    x: np.ndarray, attrs: Mapping[str, Any]
) -> (
    tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]
    | None
):
    nd = x.ndim - 2
    kernel = tuple(int(v) for v in attrs.get("kernel_shape", ()))
    if nd < 1 or len(kernel) != nd or int(attrs.get("ceil_mode", 0)):
        return None
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    strides = tuple(int(v) for v in attrs.get("strides", [1] * nd))
    dilations = tuple(int(v) for v in attrs.get("dilations", [1] * nd))
    if auto_pad == "VALID":
        pads = (0,) * (2 * nd)
    elif auto_pad in ("NOTSET", ""):
        pads = tuple(int(v) for v in attrs.get("pads", [0] * (2 * nd)))
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER") and len(strides) == nd == len(dilations):
        begins, ends = [], []
        for size, k, s, d in zip(x.shape[2:], kernel, strides, dilations, strict=True):
            total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else large)
            ends.append(large if auto_pad == "SAME_UPPER" else small)
        pads = (*begins, *ends)
    else:
        return None
    if len(pads) != 2 * nd or len(strides) != nd or len(dilations) != nd:
        return None
    out = []
    for i in range(nd):
        span = (kernel[i] - 1) * dilations[i] + 1
        o = (x.shape[2 + i] + pads[i] + pads[nd + i] - span) // strides[i] + 1
        if o < 1:
            return None
        out.append(o)
    return kernel, strides, dilations, pads, tuple(out)


def _windows(
    xp: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out: Sequence[int],
):
    """Yield, for each kernel tap, the strided view of every window's element at that tap."""
    for taps in itertools.product(*(range(k) for k in kernel)):
        window = tuple(
            slice(t * d, t * d + (o - 1) * s + 1, s)
            for t, d, o, s in zip(taps, dilations, out, strides, strict=True)
        )
        yield xp[(slice(None), slice(None), *window)]


POOL_BLOCK_ELEMENTS = 1 << 16
"""Input elements per block of channels that a pool works through at once (256 KB of
float32): its passes over a block stay in the CPU's L2 cache instead of main memory."""


def _by_channel_blocks(
    x: np.ndarray, out: tuple[int, ...], dtype: Any, pool: Any, blocked: bool
) -> np.ndarray:
    """``pool`` (a block of ``x``'s channels -> its pooled block) over every block of
    channels, into one new ``(N, C, *out)`` array: pools treat channels independently, so
    each element gets the same operations as from one call on the whole tensor. Not
    ``blocked``: one call (passes over strided views gain less than the blocks cost)."""
    if not blocked:
        return pool(x).astype(dtype, copy=False)
    n, c = x.shape[:2]
    result = np.empty((n, c, *out), dtype)
    step = max(1, POOL_BLOCK_ELEMENTS // max(1, n * math.prod(x.shape[2:])))
    for start in range(0, c, step):
        result[:, start : start + step] = pool(x[:, start : start + step])
    return result


def max_pool(x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray | None:
    """MaxPool (single output), reduced one spatial axis at a time, last axis first: the
    maximum over a box is the maximum over its rows of the maxima over its columns, k1 + k2 - 2
    passes instead of k1 * k2 - 1 (:func:`_axis_max`), a block of channels at a time."""
    if not np.issubdtype(x.dtype, np.floating):
        return None
    geo = _pool_geometry(x, attrs)
    if geo is None:
        return None
    kernel, strides, dilations, pads, out = geo
    nd = len(kernel)
    width = pad_width(pads)

    def pool(block: np.ndarray) -> np.ndarray:
        if any(pads):
            block = pad_constant(block, width, -np.inf)
        else:
            block = np.ascontiguousarray(block)
        for axis in reversed(range(nd)):
            k, s, d, o = kernel[axis], strides[axis], dilations[axis], out[axis]
            block = _axis_max(block, 2 + axis, k, s, d, o)
        return block

    overlap = any(k > s for k, s in zip(kernel, strides, strict=True))
    return _by_channel_blocks(x, out, x.dtype, pool, blocked=overlap)


def _axis_max(x: np.ndarray, axis: int, k: int, s: int, d: int, o: int) -> np.ndarray:
    """The maxima of ``k`` taps (dilation ``d``) along ``axis`` of C-contiguous ``x`` at ``o``
    positions ``s`` apart, taps combined in order, ``((t0 max t1) max t2) ...``.

    Where windows overlap (``k > s``), each pass runs over the block as one flat row
    (contiguous operands: numpy's vector loop, not a strided element-by-element one) and
    positions whose window crosses a row end are computed, never selected; otherwise the
    taps' strided views are combined directly (fewer elements)."""
    if k <= s:
        lead = (slice(None),) * axis
        views = (x[(*lead, slice(t * d, t * d + (o - 1) * s + 1, s))] for t in range(k))
        return _fold(views, np.maximum)
    inner = math.prod(x.shape[axis + 1 :])
    flat = x.reshape(-1)
    shift = d * inner
    length = flat.size - (k - 1) * shift  # > 0: the padded axis spans the kernel
    acc = np.empty_like(flat)
    if x.dtype == np.float16:  # numba has no float16: numpy's passes, one per tap
        acc[:length] = _fold((flat[t * shift : t * shift + length] for t in range(k)), np.maximum)
    else:
        _fold_flat(flat, np.arange(k, dtype=np.int64) * shift, acc[:length], True)
    picked = acc.reshape(x.shape)[(slice(None),) * axis + (slice(0, (o - 1) * s + 1, s),)]
    return np.ascontiguousarray(picked)


def _fold(views: Iterator[np.ndarray], ufunc: Any) -> np.ndarray:
    """``ufunc`` over the taps in order, ``((t0 . t1) . t2) ...``, into one new array (the
    first two taps combined directly: no pass copying the first one)."""
    first = next(views)
    second = next(views, None)
    if second is None:
        return first.copy()
    acc = ufunc(first, second)
    for view in views:
        ufunc(acc, view, out=acc)
    return acc


_CHUNK = 1024
"""Positions :func:`_fold_flat` folds at once: every tap's pass over them stays in L1."""


@compiled
def _fold_flat(flat, offsets, out, is_max):  # noqa: ANN001, ANN202 (numba types it)
    """``out[p] = ((flat[p + o0] . flat[p + o1]) . flat[p + o2]) ...``, with ``.`` numpy's
    ``maximum`` or ``+``: what :func:`_fold` gives over the slices ``flat[o:o + out.size]``,
    the same operations in the same order for each position, a chunk of positions at a
    time instead of one pass over all of them per tap."""
    n = out.size
    for start in range(0, n, _CHUNK):
        acc = out[start : min(start + _CHUNK, n)]
        src = flat[start + offsets[0] :]
        for j in range(acc.size):
            acc[j] = src[j]
        for t in range(1, offsets.size):
            src = flat[start + offsets[t] :]
            if is_max:
                for j in range(acc.size):
                    acc[j] = maximum(acc[j], src[j])
            else:
                for j in range(acc.size):
                    acc[j] = acc[j] + src[j]


_COUNTS: dict[tuple[Any, ...], np.ndarray] = {}
"""AveragePool divisors without padding, by spatial shape and geometry: a constant of the
layer, computed once instead of once per run (a handful of entries per model)."""


def _pad_counts(
    spatial: tuple[int, ...], geo: tuple[tuple[int, ...], ...], width: list[tuple[int, int]]
) -> np.ndarray:
    key = (spatial, *geo)
    count = _COUNTS.get(key)
    if count is None:
        kernel, strides, dilations, _, out = geo
        ones = pad_constant(np.ones((1, 1, *spatial), np.float32), width)
        count = _fold(_windows(ones, kernel, strides, dilations, out), np.add)
        if len(_COUNTS) >= 256:
            _COUNTS.clear()
        _COUNTS[key] = count
    return count


def _flat_sum(
    x: np.ndarray,
    width: list[tuple[int, int]],
    kernel: tuple[int, ...],
    dilations: tuple[int, ...],
    out: tuple[int, ...],
) -> np.ndarray:
    """The taps of a 2-D, stride-1 window summed as :func:`_fold` sums them (same order,
    same operands per output element), over the padded images of all channels taken as one
    row: a tap is then one contiguous slice, not one short slice per image row (a 14x14
    image made numpy loop 14 elements at a time). The positions in the padding rows and
    columns are computed and dropped; a tail of zeros keeps the last tap's slice in bounds.
    """
    n, c = x.shape[:2]
    hp, wp = (x.shape[2 + i] + width[2 + i][0] + width[2 + i][1] for i in range(2))
    size = n * c * hp * wp
    tail = (kernel[0] - 1) * dilations[0] * wp + (kernel[1] - 1) * dilations[1]
    flat = np.zeros(size + tail, np.float32)
    image = flat[:size].reshape(n, c, hp, wp)
    image[:, :, width[2][0] : width[2][0] + x.shape[2], width[3][0] : width[3][0] + x.shape[3]] = x
    starts = (
        i * dilations[0] * wp + j * dilations[1] for i in range(kernel[0]) for j in range(kernel[1])
    )
    total = np.empty(size, np.float32)
    _fold_flat(flat, np.fromiter(starts, np.int64), total, False)
    return np.ascontiguousarray(total.reshape(n, c, hp, wp)[:, :, : out[0], : out[1]])


def average_pool(x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray | None:
    """AveragePool with ONNX's ``count_include_pad`` rule, summed tap by tap in float32."""
    if x.dtype not in (np.float32, np.float16) or int(attrs.get("ceil_mode", 0)):
        return None
    geo = _pool_geometry(x, attrs)
    if geo is None:
        return None
    kernel, strides, dilations, pads, out = geo
    nd = len(kernel)
    width = pad_width(pads)
    if int(attrs.get("count_include_pad", 0)) or not any(pads):
        count: Any = np.float32(math.prod(kernel))
    else:
        count = _pad_counts(tuple(x.shape[2:]), geo, width)

    def pool(block: np.ndarray) -> np.ndarray:
        xf = block.astype(np.float32, copy=False)
        if nd == 2 and strides == (1, 1):
            total = _flat_sum(xf, width, kernel, dilations, out)
        else:
            xp = pad_constant(xf, width) if any(pads) else xf
            total = _fold(_windows(xp, kernel, strides, dilations, out), np.add)
        return np.divide(total, count, out=total)

    return _by_channel_blocks(x, out, x.dtype, pool, blocked=nd == 2 and strides == (1, 1))


def global_average_pool(x: np.ndarray, _attrs: Mapping[str, Any]) -> np.ndarray | None:
    """``onnx.reference``'s own formula (``np.average`` over the spatial axes, cast back),
    without the evaluator's per-call checks, which cost more than the average itself."""
    if not np.issubdtype(x.dtype, np.floating):
        return None
    y = np.average(x, axis=tuple(range(2, x.ndim)))
    return y.reshape(y.shape + (1,) * (x.ndim - 2)).astype(x.dtype)


def batch_norm(
    inputs: Sequence[Any], attrs: Mapping[str, Any], opset: int, n_outputs: int
) -> list[np.ndarray] | None:
    """Inference-mode BatchNormalization as a per-channel scale and shift, in float32."""
    if n_outputs != 1 or len(inputs) != 5 or any(not isinstance(a, np.ndarray) for a in inputs):
        return None
    if opset >= 14 and int(attrs.get("training_mode", 0)):
        return None
    if opset < 9 and int(attrs.get("spatial", 1)) != 1:
        return None
    x, scale, bias, mean, var = inputs
    if x.dtype not in (np.float32, np.float16) or x.ndim < 2:
        return None
    if any(a.shape != (x.shape[1],) for a in (scale, bias, mean, var)):
        return None
    eps = np.float32(attrs.get("epsilon", 1e-5))
    f32 = np.float32
    inv = scale.astype(f32) / np.sqrt(var.astype(f32) + eps)
    shift = bias.astype(f32) - mean.astype(f32) * inv
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    y = x.astype(f32, copy=False) * inv.reshape(shape) + shift.reshape(shape)
    return [y.astype(x.dtype, copy=False)]


def _coerced_softmax(op: str, x: np.ndarray, axis: int) -> np.ndarray:
    """Softmax family before opset 13: flatten to 2-D at ``axis``, reduce over dimension 1."""
    axis = axis + x.ndim if axis < 0 else axis
    rows = math.prod(x.shape[:axis])
    flat = x.reshape(rows, -1)
    if op == "Hardmax":
        out = np.zeros_like(flat)
        if flat.shape[1]:
            out[np.arange(rows), np.argmax(flat, axis=1)] = 1
        return out.reshape(x.shape)
    shifted = flat - flat.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    total = exp.sum(axis=1, keepdims=True)
    out = shifted - np.log(total) if op == "LogSoftmax" else exp / total
    return out.astype(x.dtype).reshape(x.shape)


def softmax_legacy(
    op: str, inputs: Sequence[Any], attrs: Mapping[str, Any], opset: int, n_outputs: int
) -> list[np.ndarray] | None:
    if opset >= 13 or n_outputs != 1 or len(inputs) != 1:
        return None
    x = inputs[0]
    if not isinstance(x, np.ndarray) or x.ndim == 0 or not np.issubdtype(x.dtype, np.floating):
        return None
    if x.size == 0:
        return [x.copy()]
    return [_coerced_softmax(op, x, int(attrs.get("axis", 1)))]


def dropout_inference(
    inputs: Sequence[Any], attrs: Mapping[str, Any], opset: int, n_outputs: int
) -> list[np.ndarray] | None:
    """Inference Dropout: identity, and an all-kept mask typed as the opset's schema says."""
    x = inputs[0] if inputs else None
    if not isinstance(x, np.ndarray):
        return None
    if opset >= 12 and len(inputs) > 2 and inputs[2] is not None and bool(np.asarray(inputs[2])):
        return None  # training_mode = true: let onnx.reference apply the random mask
    if opset < 7 and int(attrs.get("is_test", 0)) == 0:
        return None
    outputs = [x.copy()]
    if n_outputs > 1:
        outputs.append(np.ones(x.shape, dtype=x.dtype if opset < 10 else np.bool_))
    return outputs


def lrn(inputs: Sequence[Any], attrs: Mapping[str, Any], n_outputs: int) -> list[np.ndarray] | None:
    """LRN across channels: ``x / (bias + alpha / size * sum of squares) ** beta``."""
    x = inputs[0] if len(inputs) == 1 else None
    if n_outputs != 1 or not isinstance(x, np.ndarray) or x.ndim < 3:
        return None
    if x.dtype not in (np.float32, np.float16):
        return None
    size = int(attrs["size"])
    alpha = float(attrs.get("alpha", 1e-4))
    beta = float(attrs.get("beta", 0.75))
    bias = float(attrs.get("bias", 1.0))
    below, above = (size - 1) // 2, -(-(size - 1) // 2)
    xf = x.astype(np.float32, copy=False)
    squares = xf * xf
    channels = x.shape[1]
    # the window's squares added in channel order; the zero channels outside the tensor are
    # skipped (adding +0.0 to a sum of squares changes no bit)
    total = np.zeros_like(squares)
    for shift in range(-below, above + 1):
        lo, hi = max(0, -shift), min(channels, channels - shift)
        if lo < hi:
            total[:, lo:hi] += squares[:, lo + shift : hi + shift]
    # x / (bias + alpha / size * total) ** beta, one operation at a time in place
    np.multiply(total, np.float32(alpha / size), out=total)
    np.add(total, np.float32(bias), out=total)
    np.power(total, np.float32(beta), out=total)
    np.divide(xf, total, out=total)
    return [total.astype(x.dtype, copy=False)]


def run_fast(
    op: str,
    domain: str,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any],
    n_outputs: int,
    opset: int,
) -> list[np.ndarray] | None:
    """The numpy path's outputs, or None when onnx.reference must run the node."""
    if domain not in ("", "ai.onnx"):
        return None
    if op == "BatchNormalization":
        return batch_norm(inputs, attrs, opset, n_outputs)
    if op in ("Softmax", "LogSoftmax", "Hardmax"):
        return softmax_legacy(op, inputs, attrs, opset, n_outputs)
    if op == "Dropout":
        return dropout_inference(inputs, attrs, opset, n_outputs)
    if op == "LRN":
        return lrn(inputs, attrs, n_outputs)
    if op in ("QuantizeLinear", "DequantizeLinear") and n_outputs == 1:
        return run_qdq(op, inputs, attrs)
    if n_outputs == 1 and op in ELEMENTWISE_OPS:
        result = run_elementwise(op, inputs, attrs, opset)
        return None if result is None else [result]
    pool = {
        "MaxPool": max_pool,
        "AveragePool": average_pool,
        "GlobalAveragePool": global_average_pool,
    }.get(op)
    if pool is None or n_outputs != 1 or len(inputs) != 1:
        return None
    x = inputs[0]
    if not isinstance(x, np.ndarray) or x.ndim < 3:
        return None
    result = pool(x, attrs)
    return None if result is None else [result]
