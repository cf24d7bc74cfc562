"""A Conv layer's parameters read from its ONNX attributes and shapes (padding, strides,
dilations, groups, output size) and the im2col matrix they give, shared by the float
kernels (:mod:`.kernels`), their buffered steps (:mod:`.convstep`) and the INT8 kernels
(:mod:`.int8`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numba
import numpy as np

from reprobuild.backends.reference.jit import compiled


def conv_params(x: np.ndarray, w: np.ndarray, attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    nd = x.ndim - 2
    if nd < 1 or w.ndim != x.ndim:
        return None
    group = int(attrs.get("group", 1))
    kernel = tuple(int(v) for v in w.shape[2:])
    if "kernel_shape" in attrs and tuple(attrs["kernel_shape"]) != kernel:
        return None
    if group < 1 or x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        return None
    geo = window_geometry(x.shape[2:], kernel, attrs)
    if geo is None:
        return None
    strides, dilations, pads, out = geo
    return {
        "nd": nd,
        "group": group,
        "kernel": kernel,
        "strides": strides,
        "dilations": dilations,
        "pads": pads,
        "out": out,
    }


def window_geometry(
    spatial: Sequence[int], kernel: Sequence[int], attrs: Mapping[str, Any]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """(strides, dilations, pads, output size) of a window of ``kernel`` sliding over
    ``spatial`` as a Conv's or a pool's attributes say: ONNX ``pads`` (every begin, then
    every end) from ``auto_pad`` (SAME_UPPER/SAME_LOWER: the output ``ceil(size /
    stride)``, the odd padding after or before; VALID: none) or given. None where the
    attributes do not fit ``spatial`` or leave no output."""
    nd = len(spatial)
    strides = tuple(int(v) for v in attrs.get("strides", [1] * nd))
    dilations = tuple(int(v) for v in attrs.get("dilations", [1] * nd))
    if len(strides) != nd or len(dilations) != nd:
        return None
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
            total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else large)
            ends.append(large if auto_pad == "SAME_UPPER" else small)
        pads = (*begins, *ends)
    elif auto_pad == "VALID":
        pads = (0,) * (2 * nd)
    elif auto_pad in ("NOTSET", ""):
        pads = tuple(int(v) for v in attrs.get("pads", [0] * (2 * nd)))
    else:
        return None
    if len(pads) != 2 * nd:
        return None
    out = []
    for i in range(nd):
        span = (kernel[i] - 1) * dilations[i] + 1
        o = (spatial[i] + pads[i] + pads[nd + i] - span) // strides[i] + 1
        if o < 1:
            return None
        out.append(o)
    return strides, dilations, pads, tuple(out)


def is_pointwise(params: Mapping[str, Any]) -> bool:
    return (
        all(k == 1 for k in params["kernel"])
        and all(s == 1 for s in params["strides"])
        and not any(params["pads"])
    )


def padded(x: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    if not any(params["pads"]):
        return x
    return pad_constant(x, pad_width(params["pads"]))


def pad_width(pads: Sequence[int]) -> list[tuple[int, int]]:
    """ONNX ``pads`` (every begin, then every end; a Conv's or a pool's) as ``np.pad``'s
    width of each axis (none on batch and channels)."""
    nd = len(pads) // 2
    return [(0, 0), (0, 0)] + [(pads[i], pads[nd + i]) for i in range(nd)]


def pad_constant(x: np.ndarray, width: Sequence[tuple[int, int]], value: float = 0) -> np.ndarray:
    """``np.pad(x, width, constant_values=value)`` in a new array: the border filled, the
    interior copied (``np.pad`` costs more in Python than the copy on a pool's block)."""
    out = np.empty(tuple(n + a + b for n, (a, b) in zip(x.shape, width, strict=True)), x.dtype)
    fill_border(out, width, value)
    out[interior(x.shape, width)] = x
    return out


def fill_border(buf: np.ndarray, width: Sequence[tuple[int, int]], value: float) -> None:
    """Set the ``width`` border of every axis of ``buf`` to ``value`` (the interior untouched)."""
    for axis, (before, after) in enumerate(width):
        lead = (slice(None),) * axis
        if before:
            buf[(*lead, slice(0, before))] = value
        if after:
            buf[(*lead, slice(buf.shape[axis] - after, None))] = value


def interior(shape: Sequence[int], width: Sequence[tuple[int, int]]) -> tuple[slice, ...]:
    """The index of an array of ``shape`` inside its padded copy."""
    return tuple(slice(a, a + n) for n, (a, _) in zip(shape, width, strict=True))


def columns(xp: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    """The im2col matrix ``(N, group, C/group * taps, positions)`` of a padded input."""
    if is_pointwise(params):  # the input is already the matrix
        return xp.reshape(xp.shape[0], params["group"], xp.shape[1] // params["group"], -1)
    out = np.empty(unfolded_shape(xp, params), xp.dtype)
    unfold(xp, params, out)
    return out.reshape(column_shape(xp, params))


def unfolded_shape(xp: np.ndarray, params: Mapping[str, Any]) -> tuple[int, ...]:
    """``(N, C, *taps, *positions)``: the im2col matrix before its axes are merged."""
    return (xp.shape[0], xp.shape[1], *params["kernel"], *params["out"])


def pads_itself(x: np.ndarray, params: Mapping[str, Any]) -> bool:
    """Whether :func:`unfold` can read the unpadded ``x`` and pad it with zeros itself (a
    2-D float32 C-contiguous image): no padded copy of the input is then made."""
    return params["nd"] == 2 and x.dtype == np.float32 and x.flags.c_contiguous


def unfold(
    x: np.ndarray,
    params: Mapping[str, Any],
    out: np.ndarray,
    tap: tuple[int, ...] | None = None,
    pads: tuple[int, int] = (0, 0),
) -> None:
    """Copy the im2col matrix of ``x`` (:func:`unfolded_shape`; with ``tap``, only that
    tap's ``(N, C, *positions)``) into ``out``, C-contiguous of its shape. ``x`` is padded
    with ``pads`` (top, left: only where :func:`pads_itself`) zeros more than it has.

    A 2-D float32 image is copied by :func:`_unfold_rows`: numpy copies a strided view one
    output row (a few dozen elements) per inner-loop call, and that per-call cost was a
    sixth of the copy on 55x55 images, more on smaller ones; other shapes by numpy."""
    if not pads_itself(x, params):
        assert not any(pads)
        view = _taps_view(x, params)
        np.copyto(out, view if tap is None else view[(slice(None), slice(None), *tap)])
        return
    n, c, h, w = x.shape
    first = (0, 0) if tap is None else tap
    rows = out.reshape(n * c, *(params["kernel"] if tap is None else (1, 1)), *params["out"])
    steps = (*params["strides"], *params["dilations"])
    _unfold_rows(x.reshape(n * c, h, w), rows, *first, *steps, *pads)


@numba.njit(inline="always", error_model="numpy", boundscheck=False)
def flat_image(x, image, padded, top, left, bottom, right):  # noqa: ANN001, ANN202, PLR0913
    """Image ``image`` of ``x`` (images, height, width) as one flat row: itself, or copied
    into the interior of ``padded``, ``top`` rows and ``left`` columns in, where there is
    padding (the border, which the caller filled with the padding value, is untouched)."""
    h, w = x.shape[1], x.shape[2]
    if not (top or left or bottom or right):
        return x[image].reshape(h * w)
    wp = w + left + right
    for r in range(h):
        dst = padded[(top + r) * wp + left :]
        row = x[image, r]
        for j in range(w):
            dst[j] = row[j]
    return padded


@compiled
def _unfold_rows(x, out, i0, j0, sh, sw, dh, dw, top, left):  # noqa: ANN001, ANN202, PLR0913
    """``out[c, i, j, r, q] = xp[c, r * sh + (i0 + i) * dh, q * sw + (j0 + j) * dw]``, with
    ``xp`` ``x`` padded with ``top`` and ``left`` zeros (and as many after as the output
    needs). Each image is first copied into a zero-bordered flat buffer that stays in the
    cache (or read in place where no tap reaches past it), so every output row is one
    plain strided copy with no bounds to work out (:func:`_unfold_image`): on 14x14
    images, a third less time than clipping each row against the border. Stride 1 and 2
    are constants in their loops, which vectorize (index arithmetic on the whole array
    did not)."""
    images, h, w = x.shape
    kh, kw, oh, ow = out.shape[1:]
    hp = max(h + top, (oh - 1) * sh + (i0 + kh - 1) * dh + 1)
    wp = max(w + left, (ow - 1) * sw + (j0 + kw - 1) * dw + 1)
    bottom, right = hp - h - top, wp - w - left  # zeros as far as a tap reaches
    if not (top or left or bottom or right):
        for c in range(images):
            _unfold_image(x[c].reshape(h * w), out[c], i0, j0, sh, sw, dh, dw, wp)
        return
    padded = np.zeros(hp * wp, x.dtype)
    for c in range(images):
        image = flat_image(x, c, padded, top, left, bottom, right)
        _unfold_image(image, out[c], i0, j0, sh, sw, dh, dw, wp)


@numba.njit(inline="always", error_model="numpy", boundscheck=False)
def _unfold_image(image, out, i0, j0, sh, sw, dh, dw, wp):  # noqa: ANN001, ANN202, PLR0913
    """:func:`_unfold_rows` of one flat (padded) image ``wp`` wide into ``out`` (taps,
    positions): each output row one strided copy."""
    kh, kw, oh, ow = out.shape
    for i in range(kh):
        for j in range(kw):
            for r in range(oh):
                src = image[(r * sh + (i0 + i) * dh) * wp + (j0 + j) * dw :]
                dst = out[i, j, r]
                if sw == 1:
                    for q in range(ow):
                        dst[q] = src[q]
                elif sw == 2:
                    for q in range(ow):
                        dst[q] = src[2 * q]
                else:
                    for q in range(ow):
                        dst[q] = src[q * sw]


def _taps_view(xp: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    """The im2col matrix as a strided view ``(N, C, *taps, *positions)`` of a padded input,
    not yet copied."""
    nd = params["nd"]
    st = xp.strides
    return np.lib.stride_tricks.as_strided(
        xp,
        shape=unfolded_shape(xp, params),
        strides=(
            st[0],
            st[1],
            *(st[2 + i] * params["dilations"][i] for i in range(nd)),
            *(st[2 + i] * params["strides"][i] for i in range(nd)),
        ),
        writeable=False,
    )


def column_shape(xp: np.ndarray, params: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """``(N, group, C/group * taps, positions)``: the im2col matrix's shape."""
    group, channels = params["group"], xp.shape[1]
    rows = (channels // group) * math.prod(params["kernel"])
    return xp.shape[0], group, rows, math.prod(params["out"])
