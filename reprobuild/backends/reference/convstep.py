"""A Conv layer's locked im2col kernel, run by the engine with its layout work done once.

Why: a float32 im2col kernel (:func:`.kernels.execute`) spends 15-25% of its time around
its GEMMs on every run: it re-derives the layer geometry, pads the input into a new array,
copies the im2col matrix into another new array (for a large layer, a hundred MB the
system must map and zero anew), adds the bias into a third and copies the result once more
to cast float32 to float32. :class:`ConvStep` keeps the geometry per input shape and writes
the padded input and the im2col matrix into buffers kept between runs, then hands the same
operands, in the same memory layout, to the same reduction (:func:`.kernels.reduce_gemm`),
so the kernel's bits do not change: ``tests/test_reference_program.py`` compares every
float32 Conv kernel with :func:`.kernels.execute` bit for bit. Anything else (other
precisions, the ``direct`` kernel, shapes the kernel refuses) runs :func:`.kernels.execute`.

The buffers live in a :class:`Scratch` owned by the engine's program (the largest layer's
padded input and im2col matrix); the engine drops them when a build starts or the backend
releases its memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reprobuild.backends.reference import kernels

_F32 = np.dtype(np.float32)
_SCHEMES = ("blas", "splitk", "tree")


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


def supported(spec: kernels.KernelSpec) -> bool:
    """Whether :class:`ConvStep` runs this kernel itself (float32 im2col kernels)."""
    return spec.op == "Conv" and spec.precision == "f32" and spec.scheme in _SCHEMES


class ConvStep:
    """Run one Conv layer with one float32 im2col kernel (module docstring)."""

    def __init__(
        self, spec: kernels.KernelSpec, attrs: Mapping[str, Any], scratch: Scratch
    ) -> None:
        self.spec, self.attrs, self.scratch = spec, attrs, scratch
        self._params: dict[tuple[tuple[int, ...], tuple[int, ...]], dict[str, Any] | None] = {}

    def __call__(self, inputs: Sequence[Any]) -> np.ndarray:
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        if not _all_f32(x, w, bias):
            return kernels.execute(self.spec, inputs, self.attrs)
        key = (x.shape, w.shape)
        if key not in self._params:
            self._params[key] = kernels._conv_params(x, w, self.attrs)
        params = self._params[key]
        if params is None:
            return kernels.execute(self.spec, inputs, self.attrs)  # raises its own error
        group, out = params["group"], params["out"]
        n_batch, m_out = x.shape[0], w.shape[0]
        cols = self._columns(self._padded(x, params), params)
        result = kernels.reduce_gemm(w.reshape(group, m_out // group, -1), cols, self.spec)
        result = result.reshape(n_batch, m_out, *out)
        if bias is not None:
            result += bias.reshape((1, m_out) + (1,) * params["nd"])
        return result

    def _padded(self, x: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
        """``np.pad(x)`` with zeros, as :func:`.kernels._padded`, in the kept buffer: the
        border slabs are zeroed and the interior copied."""
        nd, pads = params["nd"], params["pads"]
        if not any(pads):
            return x
        shape = x.shape[:2] + tuple(x.shape[2 + i] + pads[i] + pads[nd + i] for i in range(nd))
        buf = self.scratch.get("pad", shape)
        for i in range(nd):
            slab = [slice(None)] * (2 + nd)
            slab[2 + i] = slice(0, pads[i])
            buf[tuple(slab)] = 0
            slab[2 + i] = slice(pads[i] + x.shape[2 + i], None)
            buf[tuple(slab)] = 0
        inner = tuple(slice(pads[i], pads[i] + x.shape[2 + i]) for i in range(nd))
        buf[(slice(None), slice(None), *inner)] = x
        return buf

    def _columns(self, xp: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
        """The im2col matrix of :func:`.kernels._columns`, copied into a kept buffer."""
        nd, group, kernel, out = params["nd"], params["group"], params["kernel"], params["out"]
        n_batch, channels = xp.shape[0], xp.shape[1]
        positions = math.prod(out)
        rows = (channels // group) * math.prod(kernel)
        if kernels._is_pointwise(params):
            return xp.reshape(n_batch, group, channels // group, positions)
        st = xp.strides
        view = np.lib.stride_tricks.as_strided(
            xp,
            shape=(n_batch, channels, *kernel, *out),
            strides=(
                st[0],
                st[1],
                *(st[2 + i] * params["dilations"][i] for i in range(nd)),
                *(st[2 + i] * params["strides"][i] for i in range(nd)),
            ),
            writeable=False,
        )
        buf = self.scratch.get("cols", view.shape)
        np.copyto(buf, view)
        return buf.reshape(n_batch, group, rows, positions)


def _all_f32(*arrays: Any) -> bool:
    return all(a is None or (type(a) is np.ndarray and a.dtype == _F32) for a in arrays)
