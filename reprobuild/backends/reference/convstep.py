"""A Conv layer's locked float32 kernel, run by the engine with its layout work done once.

Why: a float32 Conv kernel (:func:`.kernels.execute`) spends 15-25% of its time around its
GEMMs on every run: it re-derives the layer geometry, pads the input into a new array,
copies the im2col matrix (or, for ``direct``, each tap's input and weight slices) into new
arrays (for a large layer, a hundred MB the system must map and zero anew), adds the bias
into another and copies the result once more to cast float32 to float32. :class:`ConvStep`
keeps the geometry per input shape and the per-tap weights per weight tensor, writes the
padded input and the im2col matrix into buffers kept between runs, and hands the same
operands, in the same memory layout, to the same reductions (:func:`.kernels.reduce_gemm`,
:func:`.kernels._mm`) in the same order, so the kernel's bits do not change:
``tests/test_reference_program.py`` compares every float32 Conv kernel with
:func:`.kernels.execute` bit for bit. Other precisions and shapes the kernel refuses run
:func:`.kernels.execute`.

The buffers live in a :class:`Scratch` owned by the engine's program (the largest layer's
padded input and im2col matrix); the engine drops them when a build starts or the backend
releases its memory.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reprobuild.backends.reference import kernels
from reprobuild.backends.reference.convparams import (
    column_shape,
    columns,
    conv_params,
    fill_border,
    interior,
    is_pointwise,
    pad_width,
    pads_itself,
    unfold,
    unfolded_shape,
)

_F32 = np.dtype(np.float32)
_SCHEMES = ("blas", "splitk", "tree", "direct")


class Scratch:
    """One growing float32 buffer per purpose ("pad", "cols"), shared by every Conv layer of
    a program: layers run one at a time, so the memory kept is the largest layer's need,
    not the sum. Not re-entrant (nothing runs an engine from two threads)."""

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}

    def get(self, purpose: str, shape: tuple[int, ...]) -> np.ndarray:
        """A C-contiguous array of ``shape`` over the purpose's buffer (contents undefined)."""
        size = math.prod(shape)
        buf = self._buffers.get(purpose)
        if buf is None or buf.size < size:
            buf = self._buffers[purpose] = np.empty(size, _F32)
        return buf[:size].reshape(shape)

    def clear(self) -> None:
        self._buffers.clear()

    def trim(self, keep_bytes: int) -> None:
        """Free the buffers larger than ``keep_bytes``: a large model's im2col matrix (VGG19:
        115 MB) is made again at each run rather than held between runs, where it would add
        to the peak of whatever the caller does next (verify's)."""
        for purpose in [p for p, b in self._buffers.items() if b.nbytes > keep_bytes]:
            del self._buffers[purpose]


def supported(spec: kernels.KernelSpec) -> bool:
    """Whether :class:`ConvStep` runs this kernel itself (float32 Conv kernels)."""
    return spec.op == "Conv" and spec.precision == "f32" and spec.scheme in _SCHEMES


class ConvStep:
    """Run one Conv layer with one float32 im2col kernel (module docstring)."""

    def __init__(
        self, spec: kernels.KernelSpec, attrs: Mapping[str, Any], scratch: Scratch
    ) -> None:
        self.spec, self.attrs, self.scratch = spec, attrs, scratch
        self._params: dict[tuple[tuple[int, ...], tuple[int, ...]], dict[str, Any] | None] = {}
        self._taps: tuple[np.ndarray, list[np.ndarray]] | None = None  # (weights, per tap)

    def __call__(self, inputs: Sequence[Any]) -> np.ndarray:
        result = self.product(inputs)
        if result is None:
            return kernels.execute(self.spec, inputs, self.attrs)  # raises its own errors
        bias = inputs[2] if len(inputs) > 2 else None
        if bias is not None:
            result += bias.reshape((1, result.shape[1]) + (1,) * (result.ndim - 2))
        return result

    def product(self, inputs: Sequence[Any]) -> np.ndarray | None:
        """The layer's output before its bias is added, in a new array (the program adds the
        bias in the pass of the elementwise layers that follow, :mod:`.chain`); None where
        :func:`.kernels.execute` must run the layer."""
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        if not _all_f32(x, w, bias):
            return None
        params = self._geometry(x, w)
        if params is None:
            return None
        group, out = params["group"], params["out"]
        n_batch, m_out = x.shape[0], w.shape[0]
        if self.spec.scheme == "direct":
            result = self._direct(self._padded(x, params), w, params)
        else:
            cols = self._columns(x, params)
            result = kernels.reduce_gemm(w.reshape(group, m_out // group, -1), cols, self.spec)
        return result.reshape(n_batch, m_out, *out)

    def _geometry(self, x: np.ndarray, w: np.ndarray) -> dict[str, Any] | None:
        key = (x.shape, w.shape)
        if key not in self._params:
            self._params[key] = conv_params(x, w, self.attrs)
        return self._params[key]

    def input_buffer(self, x: np.ndarray, w: Any) -> np.ndarray | None:
        """Where :meth:`_padded` puts an input shaped like ``x`` inside the kept padded
        buffer, or None (no padding, an im2col that pads a new 2-D input itself, or not
        this step's float32 path). The step that makes this layer's input, run just before
        it, writes it there: the input is then not copied into the padded buffer (the
        program makes sure nothing else reads it)."""
        if not _all_f32(x, w):
            return None
        params = self._geometry(x, w)
        if params is None or not any(params["pads"]):
            return None
        if self.spec.scheme != "direct" and params["nd"] == 2:  # :meth:`_columns` pads it
            return None
        buf = self.scratch.get("pad", _padded_shape(x.shape, params))
        return buf[interior(x.shape, pad_width(params["pads"]))]

    def _direct(self, xp: np.ndarray, w: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
        """The ``direct`` kernel: one GEMM per tap, taps added in order, as the kernel does;
        the per-tap weight matrices are copied once per weight tensor, not once per run."""
        group, kernel, out = params["group"], params["kernel"], params["out"]
        n_batch, channels, m_out = xp.shape[0], xp.shape[1], w.shape[0]
        cg, mg, positions = channels // group, m_out // group, math.prod(out)
        taps = list(itertools.product(*(range(k) for k in kernel)))
        if self._taps is None or self._taps[0] is not w:
            mats = [
                np.ascontiguousarray(w[(slice(None), slice(None), *t)]).reshape(group, mg, cg)
                for t in taps
            ]
            self._taps = (w, mats)
        acc: np.ndarray | None = None
        for t, w_tap in zip(taps, self._taps[1], strict=True):
            xs = self.scratch.get("tap", (n_batch, channels, *out))
            unfold(xp, params, xs, t)
            part = kernels._mm(w_tap, xs.reshape(n_batch, group, cg, positions))
            if acc is None:
                acc = part
            else:
                acc += part
        assert acc is not None
        return acc

    def _padded(self, x: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
        """``np.pad(x)`` with zeros, as :func:`.convparams.padded`, in the kept buffer: the
        border slabs are zeroed and the interior copied."""
        if not any(params["pads"]):
            return x
        width = pad_width(params["pads"])
        buf = self.scratch.get("pad", _padded_shape(x.shape, params))
        fill_border(buf, width, 0)
        inner = buf[interior(x.shape, width)]
        if not same_memory(inner, x):  # else the step before wrote it there (input_buffer)
            inner[...] = x
        return buf

    def _columns(self, x: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
        """The im2col matrix of :func:`.convparams.columns`, copied into a kept buffer: from
        ``x`` padded on the fly where :func:`.convparams.pads_itself` (no padded copy), else
        from :meth:`_padded`."""
        if is_pointwise(params):
            return columns(x, params)
        buf = self.scratch.get("cols", unfolded_shape(x, params))
        if pads_itself(x, params):
            unfold(x, params, buf, pads=params["pads"][:2])
        else:
            unfold(self._padded(x, params), params, buf)
        return buf.reshape(column_shape(x, params))


def _padded_shape(shape: tuple[int, ...], params: Mapping[str, Any]) -> tuple[int, ...]:
    return tuple(n + a + b for n, (a, b) in zip(shape, pad_width(params["pads"]), strict=True))


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same elements of the same memory."""
    return (
        a.shape == b.shape
        and a.strides == b.strides
        and a.dtype == b.dtype
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


def _all_f32(*arrays: Any) -> bool:
    return all(a is None or (type(a) is np.ndarray and a.dtype == _F32) for a in arrays)
