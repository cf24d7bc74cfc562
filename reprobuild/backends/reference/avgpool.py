"""AveragePool and GlobalAveragePool: numpy and compiled paths with the bits of
``onnx.reference``'s tap-by-tap sums (the window folds are :mod:`.pools`'). A function
returns None for a configuration it does not cover, and :func:`.ops.run_fast`'s caller then
falls back to ``onnx.reference``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numba
import numpy as np

from reprobuild.backends.reference.convparams import flat_image, pad_constant, pad_width
from reprobuild.backends.reference.jit import compiled
from reprobuild.backends.reference.pools import (
    by_channel_blocks,
    fold,
    fold_flat_of,
    pool_geometry,
    windows,
)

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
        count = fold(windows(ones, kernel, strides, dilations, out), np.add)
        if len(_COUNTS) >= 256:
            _COUNTS.clear()
        _COUNTS[key] = count
    return count


MEAN_STACK_ELEMENTS = 1024
"""Padded elements of the images :func:`_mean_rows` stacks into one flat row (4 KB, in L1,
one chunk of :func:`.pools.fold_flat_of`; at least one image): on 7x7 or 14x14 images a
pass per image was too short to vectorize well (a third faster stacked); larger stacks
were slower."""


def _image_mean(
    x: np.ndarray,
    kernel: tuple[int, ...],
    dilations: tuple[int, ...],
    pads: tuple[int, ...],
    counts: np.ndarray,
) -> np.ndarray:
    """2-D stride-1 AveragePool of float32 ``x`` divided by ``counts`` (one per output
    position), in one compiled pass (:func:`_mean_rows`)."""
    n, c, h, w = x.shape
    result = np.empty((n, c, *counts.shape), np.float32)
    images = np.ascontiguousarray(x).reshape(n * c, h, w)
    hp, wp = h + pads[0] + pads[2], w + pads[1] + pads[3]
    group = min(n * c, max(1, MEAN_STACK_ELEMENTS // (hp * wp)))
    rows = result.reshape(n * c, *counts.shape)
    if kernel == (3, 3) and dilations == (1, 1):
        _mean_rows_3x3(images, rows, counts, group, *pads)
    else:
        _mean_rows(images, rows, counts, group, *kernel, *dilations, *pads)
    return result


@compiled
def _mean_rows(x, out, counts, group, kh, kw, dh, dw, top, left, bottom, right):  # noqa: ANN001, ANN202, PLR0913
    """:func:`_mean_rows_of` for any kernel."""
    _mean_rows_of(x, out, counts, group, kh, kw, dh, dw, top, left, bottom, right)


@compiled
def _mean_rows_3x3(x, out, counts, group, top, left, bottom, right):  # noqa: ANN001, ANN202, PLR0913
    """:func:`_mean_rows_of` for the common 3x3 kernel without dilation, compiled with those
    constants (the taps' passes unrolled: a quarter faster on 28x28 images)."""
    _mean_rows_of(x, out, counts, group, 3, 3, 1, 1, top, left, bottom, right)


@numba.njit(inline="always", error_model="numpy", boundscheck=False)
def _mean_rows_of(x, out, counts, group, kh, kw, dh, dw, top, left, bottom, right):  # noqa: ANN001, ANN202, PLR0913
    """Each ``group`` of images of ``x`` as one flat row: stacked, each padded with zeros,
    into a buffer in the cache (or read in place where there is no padding); the
    ``kh`` x ``kw`` taps (dilations ``dh``, ``dw``) summed by :func:`fold_flat_of` (a tap
    is one contiguous slice, not one short slice per image row; positions whose window
    crosses a row or image end are computed and dropped), then each output row divided by
    its ``counts``."""
    images, h, w = x.shape
    ho, wo = out.shape[1], out.shape[2]
    hp, wp = h + top + bottom, w + left + right
    padded = top or left or bottom or right
    size = (ho - 1) * wp + wo
    stack = np.zeros(group * hp * wp if padded else 0, np.float32)
    total = np.empty((group - 1) * hp * wp + size, np.float32)
    for first in range(0, images, group):
        last = min(images, first + group)
        if padded:
            for image in range(first, last):
                slot = stack[(image - first) * hp * wp :]
                flat_image(x, image, slot, top, left, bottom, right)
            src = stack
        else:
            src = x[first:last].reshape((last - first) * h * w)
        span = total[: (last - first - 1) * hp * wp + size]
        fold_flat_of(src, kh, kw, dh * wp, dw, span, False)
        for image in range(first, last):
            for o in range(ho):
                dst = out[image, o]
                row = total[(image - first) * hp * wp + o * wp :]
                count = counts[o]
                for j in range(wo):
                    dst[j] = row[j] / count[j]


def average_pool(x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray | None:
    """AveragePool with ONNX's ``count_include_pad`` rule, summed tap by tap in float32."""
    if x.dtype not in (np.float32, np.float16) or int(attrs.get("ceil_mode", 0)):
        return None
    geo = pool_geometry(x, attrs)
    if geo is None:
        return None
    kernel, strides, dilations, pads, out = geo
    nd = len(kernel)
    width = pad_width(pads)
    if int(attrs.get("count_include_pad", 0)) or not any(pads):
        count: Any = np.float32(math.prod(kernel))
    else:
        count = _pad_counts(tuple(x.shape[2:]), geo, width)

    if nd == 2 and strides == (1, 1):
        counts = count.reshape(out) if isinstance(count, np.ndarray) else np.full(out, count)
        xf = x.astype(np.float32, copy=False)
        return _image_mean(xf, kernel, dilations, pads, counts).astype(x.dtype, copy=False)

    def pool(block: np.ndarray) -> np.ndarray:
        xf = block.astype(np.float32, copy=False)
        xp = pad_constant(xf, width) if any(pads) else xf
        total = fold(windows(xp, kernel, strides, dilations, out), np.add)
        return np.divide(total, count, out=total)

    return by_channel_blocks(x, out, x.dtype, pool, blocked=False)


def global_average_pool(x: np.ndarray, _attrs: Mapping[str, Any]) -> np.ndarray | None:
    """``onnx.reference``'s own formula (``np.average`` over the spatial axes, cast back),
    without the evaluator's per-call checks, which cost more than the average itself."""
    if not np.issubdtype(x.dtype, np.floating):
        return None
    y = np.average(x, axis=tuple(range(2, x.ndim)))
    return y.reshape(y.shape + (1,) * (x.ndim - 2)).astype(x.dtype)
