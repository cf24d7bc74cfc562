"""Numpy and compiled paths for MaxPool, and the window folds AveragePool shares
(:mod:`.avgpool`): ``onnx.reference`` runs pools as a Python loop over output pixels
(seconds per layer on ImageNet shapes). Each computes the same results, tap by tap in the
same order; a function returns None for a configuration it does not cover, and
:func:`.ops.run_fast`'s caller then falls back to ``onnx.reference``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numba
import numpy as np

from reprobuild.backends.reference.chain import ChainStep, apply_ops
from reprobuild.backends.reference.convparams import (
    flat_image,
    pad_constant,
    pad_width,
    window_geometry,
)
from reprobuild.backends.reference.jit import compiled, maximum


def pool_geometry(
    x: np.ndarray, attrs: Mapping[str, Any]
) -> (
    tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]
    | None
):
    nd = x.ndim - 2
    kernel = tuple(int(v) for v in attrs.get("kernel_shape", ()))
    if nd < 1 or len(kernel) != nd or int(attrs.get("ceil_mode", 0)):
        return None
    geo = window_geometry(x.shape[2:], kernel, attrs)
    return None if geo is None else (kernel, *geo)


def windows(
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


def by_channel_blocks(
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
    passes instead of k1 * k2 - 1. 2-D float32/float64: one compiled pass per image
    (:func:`_image_max`); else :func:`_axis_max`, a block of channels at a time."""
    if not np.issubdtype(x.dtype, np.floating):
        return None
    geo = pool_geometry(x, attrs)
    if geo is None:
        return None
    if len(geo[0]) == 2 and x.dtype in _COMPILED_FLOATS:
        return _image_max(x, geo)
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
    return by_channel_blocks(x, out, x.dtype, pool, blocked=overlap)


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
        return fold(views, np.maximum)
    inner = math.prod(x.shape[axis + 1 :])
    flat = x.reshape(-1)
    shift = d * inner
    length = flat.size - (k - 1) * shift  # > 0: the padded axis spans the kernel
    acc = np.empty_like(flat)
    if x.dtype == np.float16:  # numba has no float16: numpy's passes, one per tap
        acc[:length] = fold((flat[t * shift : t * shift + length] for t in range(k)), np.maximum)
    else:
        _fold_flat(flat, 1, k, 0, shift, acc[:length], True)
    picked = acc.reshape(x.shape)[(slice(None),) * axis + (slice(0, (o - 1) * s + 1, s),)]
    return np.ascontiguousarray(picked)


_COMPILED_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
"""The float types numba compiles (not float16)."""

_NO_OPS = np.zeros(0, np.int64)
_NO_TABLE = np.zeros((0, 1), np.float32)
"""No chain before the pool (:func:`_max_rows`)."""

ROW_SPAN_MIN = 64
"""Image rows at least this wide are folded one output row at a time by :func:`_max_rows`;
narrower ones as one flat row over the whole image (every row, half of them not needed
with stride 2, but no loop too short to vectorize)."""


def _image_max(
    x: np.ndarray,
    geo: tuple[tuple[int, ...], ...],
    chain: tuple[np.ndarray, np.ndarray] = (_NO_OPS, _NO_TABLE),
    result: np.ndarray | None = None,
) -> np.ndarray:
    """2-D MaxPool of ``geo`` (``pool_geometry``'s kernel, strides, dilations, pads and
    output shape), each image in one compiled pass (:func:`_max_rows`): the bits of
    :func:`_axis_max` over the columns, then the rows, of the image padded with -inf.
    ``chain``: the codes and per-channel constants of elementwise ops that make the
    pool's input from ``x`` (:func:`chained_max_pool`); ``result``: a C-contiguous array
    of the output's shape and dtype to write into, else a new one."""
    kernel, strides, dilations, pads, out = geo
    n, c, h, w = x.shape
    if result is None:
        result = np.empty((n, c, *out), x.dtype)
    images = np.ascontiguousarray(x).reshape(n * c, h, w)
    rows = result.reshape(n * c, *out)
    if kernel == (3, 3) and dilations == (1, 1):
        _max_rows_3x3(images, rows, *chain, *strides, *pads)
    else:
        _max_rows(images, rows, *chain, *kernel, *strides, *dilations, *pads)
    return result


def chained_max_pool(
    x: np.ndarray,
    attrs: Mapping[str, Any],
    chain: ChainStep,
    into: Callable[[tuple[int, ...]], np.ndarray | None] | None = None,
) -> np.ndarray | None:
    """MaxPool of ``chain(x)``, each image going through the chain's ops in the cache just
    before it is pooled: the chain's output, as large as the pool's input, is never
    written out (on a stem's 64 x 112 x 112 output, a third of the chain and pool's time).
    The bits of the chain's output pooled by :func:`max_pool`. Written where ``into(shape)``
    says when it names a C-contiguous array, else into a new one. None where the pool is
    not a 2-D float32 one or the chain does not cover ``x``."""
    geo = pool_geometry(x, attrs) if x.dtype == np.float32 and x.ndim == 4 else None
    found = None if geo is None or len(geo[0]) != 2 else chain.operands(x)
    if found is None:
        return None
    dst = None if into is None else into((*x.shape[:2], *geo[-1]))
    if dst is not None and not dst.flags.c_contiguous:
        dst = None
    return _image_max(x, geo, (chain.codes, found[1]), dst)


@compiled
def _max_rows(x, out, codes, table, kh, kw, sh, sw, dh, dw, top, left, bottom, right):  # noqa: ANN001, ANN202, PLR0913
    """:func:`_max_rows_of` for any kernel."""
    _max_rows_of(x, out, codes, table, kh, kw, sh, sw, dh, dw, top, left, bottom, right)


@compiled
def _max_rows_3x3(x, out, codes, table, sh, sw, top, left, bottom, right):  # noqa: ANN001, ANN202, PLR0913
    """:func:`_max_rows_of` for the common 3x3 kernel without dilation, compiled with those
    constants (a third faster than with them as arguments)."""
    _max_rows_of(x, out, codes, table, 3, 3, sh, sw, 1, 1, top, left, bottom, right)


@numba.njit(inline="always", error_model="numpy", boundscheck=False)
def _max_rows_of(x, out, codes, table, kh, kw, sh, sw, dh, dw, top, left, bottom, right):  # noqa: ANN001, ANN202, PLR0913
    """Per image of ``x``, padded with -inf into a buffer (in the L1/L2 cache) where ``top``,
    ``left``, ``bottom`` or ``right`` say: each position's maximum over the ``kw`` column
    taps, the whole image as one flat row (positions whose window crosses a row end are
    computed, never read); then each output position's maximum over the ``kh`` row taps of
    those, at every column; then every ``sw``-th column picked. Contiguous operands make
    vectorized loops (strided taps indexed directly do not vectorize). Taps combine in
    order, ``((t0 max t1) max t2) ...``, columns first, as :func:`_axis_max` combines them.
    Rows narrower than :data:`ROW_SPAN_MIN` fold all image rows as one flat row. With
    ``codes``, an image first goes through those ops (:func:`.chain.apply_ops`; ``table``
    has a column per channel, images cycle through the channels) into a row in the cache."""
    images, h, w = x.shape
    ho, wo = out.shape[1], out.shape[2]
    hp, wp = h + top + bottom, w + left + right
    padded = np.full(hp * wp, -np.inf, x.dtype)
    n_cols = hp * wp - (kw - 1) * dw
    span = (wo - 1) * sw + 1
    per_row = span >= ROW_SPAN_MIN
    n_rows = span if per_row else (ho - 1) * sh * wp + span
    cols = np.empty(n_cols, x.dtype)
    rows = np.empty(n_rows, x.dtype)
    staged = np.empty((1, h, w) if codes.size else (1, 0, 0), x.dtype)
    for image in range(images):
        if codes.size:
            flat = staged.reshape(h * w)
            apply_ops(
                codes, table, image % table.shape[1], x[image].reshape(h * w), flat, codes.size
            )
            src = flat_image(staged, 0, padded, top, left, bottom, right)
        else:
            src = flat_image(x, image, padded, top, left, bottom, right)
        fold_flat_of(src, 1, kw, 0, dw, cols, True)
        for i in range(ho if per_row else 1):
            base = cols[i * sh * wp :]
            fold_flat_of(base, 1, kh, 0, dh * wp, rows, True)
            for o in range(i, i + 1 if per_row else ho):
                picked = rows[0 if per_row else o * sh * wp :]
                dst = out[image, o]
                if sw == 2:  # a constant stride: a faster loop
                    for j in range(wo):
                        dst[j] = picked[2 * j]
                else:
                    for j in range(wo):
                        dst[j] = picked[sw * j]


def fold(views: Iterator[np.ndarray], ufunc: Any) -> np.ndarray:
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


@numba.njit(inline="always")
def _combine(a, b, is_max):  # noqa: ANN001, ANN202 (numba types it)
    """numpy's ``maximum(a, b)`` or ``a + b`` (the branch is hoisted out of the loops)."""
    return maximum(a, b) if is_max else a + b


@compiled
def _fold_flat(flat, kh, kw, rstep, cstep, out, is_max):  # noqa: ANN001, ANN202, PLR0913
    """:func:`fold_flat_of` for any kernel."""
    fold_flat_of(flat, kh, kw, rstep, cstep, out, is_max)


@numba.njit(inline="always", error_model="numpy", boundscheck=False)
def fold_flat_of(flat, kh, kw, rstep, cstep, out, is_max):  # noqa: ANN001, ANN202, PLR0913
    """``out[p] = ((flat[p + o0] . flat[p + o1]) . flat[p + o2]) ...``, with ``.`` numpy's
    ``maximum`` or ``+`` and the taps' offsets ``i * rstep + j * cstep`` in row-major order
    over ``kh`` rows and ``kw`` columns: what :func:`fold` gives over the slices
    ``flat[o:o + out.size]``, the same operations in the same order for each position, a
    chunk of positions at a time, up to three taps per pass over it (a pass per tap cost a
    fifth more on 3x3 AveragePools); each tap a slice, as a loop over slices vectorizes
    and one over index arithmetic does not."""
    n, k = out.size, kh * kw
    for start in range(0, n, _CHUNK):
        acc = out[start : min(start + _CHUNK, n)]
        a = flat[start:]
        b = flat[start + _tap_offset(min(1, k - 1), kw, rstep, cstep) :]
        c = flat[start + _tap_offset(min(2, k - 1), kw, rstep, cstep) :]
        if k == 1:
            for j in range(acc.size):
                acc[j] = a[j]
        elif k == 2:
            for j in range(acc.size):
                acc[j] = _combine(a[j], b[j], is_max)
        else:
            for j in range(acc.size):
                acc[j] = _combine(_combine(a[j], b[j], is_max), c[j], is_max)
        for t in range(3, k, 3):
            a = flat[start + _tap_offset(t, kw, rstep, cstep) :]
            if t + 2 < k:
                b = flat[start + _tap_offset(t + 1, kw, rstep, cstep) :]
                c = flat[start + _tap_offset(t + 2, kw, rstep, cstep) :]
                for j in range(acc.size):
                    acc[j] = _combine(
                        _combine(_combine(acc[j], a[j], is_max), b[j], is_max), c[j], is_max
                    )
            else:
                for j in range(acc.size):
                    acc[j] = _combine(acc[j], a[j], is_max)
                if t + 1 < k:
                    b = flat[start + _tap_offset(t + 1, kw, rstep, cstep) :]
                    for j in range(acc.size):
                        acc[j] = _combine(acc[j], b[j], is_max)


@numba.njit(inline="always")
def _tap_offset(t, kw, rstep, cstep):  # noqa: ANN001, ANN202 (numba types it)
    """Where tap ``t`` (row-major over ``kw`` columns) starts in the flat row."""
    return (t // kw) * rstep + (t % kw) * cstep
