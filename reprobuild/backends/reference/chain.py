"""Runs of elementwise layers executed together, in one compiled pass over the tensor.

Why: after a Conv, Inception and DenseNet run BatchNormalization, a per-channel Mul and Add
and a Relu, ResNet BatchNormalization and Relu. Run by numpy, each is a pass of its own over
the tensor, and numpy runs a per-channel operand (stride 0 along the image) through its
buffered iterator, three times slower than a plain array: DenseNet's chains took a quarter
of its engine time. A :class:`ChainStep` runs such a run of layers as one compiled loop
(numba): each channel's image is read once into a row that stays in the L1 cache, every
layer's operation is applied to the row in layer order, and the row is written where the
output goes (the next Conv's padded buffer, or the chain's channels of a Concat).

Bits: each element goes through the same IEEE float32 operations, with the same operands in
the same order, as when the layers run one by one through numpy (:mod:`.elementwise`,
BatchNormalization's folded scale and shift): :mod:`.jit` says how the loop is compiled,
and Relu keeps numpy's ``maximum`` rules for NaN and signed zeros.
``tests/test_reference_program.py`` holds the two to the same bytes, special values
included. A chain covers constants that are one value per channel or one value in all;
other inputs (another dtype, a constant varying along the image) run the layers one by
one, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from reprobuild.backends.reference.elementwise import BINARY
from reprobuild.backends.reference.jit import compiled, maximum

_F32 = np.dtype(np.float32)
_ADD, _SUB, _MUL, _DIV, _RELU = range(5)
_CODES = {np.add: _ADD, np.subtract: _SUB, np.multiply: _MUL, np.divide: _DIV}
_SWAPPED = 8  # added to a code whose constant is the first operand (``c - x``, ``c / x``)


@dataclass(frozen=True)
class ElementOp:
    """One elementwise operation: ``ufunc(x, constant)`` (or ``ufunc(constant, x)`` when
    ``first`` is False); Relu is ``maximum(x, 0)``, as :func:`.elementwise.relu` runs it."""

    ufunc: Any
    constant: Any  # np.ndarray, or the int 0 of Relu
    first: bool = True  # x is the ufunc's first operand
    channels: bool = False  # constant is a vector over axis 1 (BatchNormalization's)

    def per_channel(self, shape: tuple[int, ...]) -> np.ndarray | None:
        """The constant as one float32 value per channel of an input of ``shape`` (None: it
        varies along another axis, or would change the output's shape or dtype)."""
        c = self.constant
        if not isinstance(c, np.ndarray):
            return np.zeros(shape[1], _F32)  # Relu's 0
        if c.dtype != _F32:
            return None
        if self.channels:
            return c if c.shape == (shape[1],) else None
        if c.ndim > len(shape):
            return None
        aligned = (1,) * (len(shape) - c.ndim) + c.shape
        if any(n != 1 for i, n in enumerate(aligned) if i != 1) or aligned[1] not in (1, shape[1]):
            return None
        return np.ascontiguousarray(np.broadcast_to(c.reshape(-1), (shape[1],)))

    @property
    def code(self) -> int:
        if self.ufunc is np.maximum:
            return _RELU
        return _CODES[self.ufunc] + (0 if self.first else _SWAPPED)


def binary_op(op: str, inputs: Sequence[str], constants: Mapping[str, Any]) -> ElementOp | None:
    """The op of a two-input Add/Sub/Mul/Div layer with one float32 constant, or None."""
    if op not in BINARY or len(inputs) != 2:
        return None
    known = [n in constants for n in inputs]
    if known.count(True) != 1:
        return None
    constant = constants[inputs[known.index(True)]]
    if type(constant) is not np.ndarray or constant.dtype != _F32:
        return None
    return ElementOp(BINARY[op], constant, first=not known[0])


RELU = ElementOp(np.maximum, 0)


class ChainStep:
    """Run ``ops`` (every layer's, in layer order) on one input, in one compiled pass.

    ``donate``: the input dies here and nothing else sees it, so the result may be written
    into it. Returns None for an input the chain does not cover (the caller then runs the
    layers one by one)."""

    def __init__(self, ops: Sequence[ElementOp], donate: bool) -> None:
        self.ops, self.donate = tuple(ops), donate
        self.codes = np.array([op.code for op in self.ops], np.int64)
        self._tables: dict[tuple[int, ...], np.ndarray | None] = {}

    def __call__(
        self, x: Any, into: Callable[[np.ndarray], Any] | None = None
    ) -> np.ndarray | None:
        """The chain's output; written where ``into(x)`` says when it names a place (an
        array of ``x``'s shape that nothing else uses: the next Conv's padded buffer, or
        the chain's channels of the Concat after it)."""
        found = self.operands(x)
        if found is None:
            return None
        src, table = found
        out = into(x) if into is not None else None
        dst = None if out is None else _four_d(out)
        if dst is None:  # contiguous: a view of four axes always exists
            out = x if self.donate and x.flags.c_contiguous else np.empty(x.shape, _F32)
            dst = _four_d(out)
        _run(src, dst, self.codes, table)
        return out

    def operands(self, x: Any) -> tuple[np.ndarray, np.ndarray] | None:
        """(``x`` as ``(N, C, H*W)``, each op's constant for each channel) for an input the
        chain covers, else None: what :func:`_run`, or a loop that takes the chain's
        output image by image (:func:`apply_ops`), needs."""
        if type(x) is not np.ndarray or x.dtype != _F32 or x.ndim < 2:
            return None
        table = self._tables.get(x.shape, False)
        if table is False:
            table = self._tables[x.shape] = self._table(x.shape)
        if table is None:
            return None
        return x.reshape(x.shape[0], x.shape[1], -1), table  # a copy only if x is not contiguous

    def _table(self, shape: tuple[int, ...]) -> np.ndarray | None:
        """Each op's constant for each channel, ``(ops, channels)`` (None: not covered)."""
        rows = [op.per_channel(shape) for op in self.ops]
        if any(r is None for r in rows):
            return None
        return np.stack(rows).astype(_F32, copy=False)


def _four_d(a: np.ndarray) -> np.ndarray | None:
    """A view of ``a`` as ``(N, C, H, W)``: fewer image axes padded with ones, more merged
    where memory allows; a C-contiguous ``a`` (a new tensor, or a channel slice of a batch-1
    Concat's buffer) as ``(N, C, 1, H*W)``, each image one row, which :func:`_run`'s last op
    then writes directly (None where no view exists: never a copy, the chain writes
    through it)."""
    if a.flags.c_contiguous:
        return a.reshape(a.shape[0], a.shape[1], 1, -1)
    if a.ndim == 4:
        return a
    if a.ndim < 4:
        return a.reshape(a.shape[:2] + (1,) * (4 - a.ndim) + a.shape[2:])
    return None


@numba.njit(inline="always", error_model="numpy", boundscheck=False)
def _apply_row(code, src, dst, v):  # noqa: ANN001, ANN202 (numba types it)
    """``dst = op(src, v)`` for one op (``code`` as :attr:`ElementOp.code`) on a row (``dst``
    may be ``src``): the test is made once per row, so each branch is one loop that the
    compiler vectorizes."""
    if code == _ADD:
        for j in range(dst.size):
            dst[j] = src[j] + v
    elif code == _SUB:
        for j in range(dst.size):
            dst[j] = src[j] - v
    elif code == _MUL:
        for j in range(dst.size):
            dst[j] = src[j] * v
    elif code == _DIV:
        for j in range(dst.size):
            dst[j] = src[j] / v
    elif code == _RELU:  # Relu: numpy's maximum(a, 0)
        zero = np.float32(0.0)
        for j in range(dst.size):
            dst[j] = maximum(src[j], zero)
    elif code == _ADD + _SWAPPED:
        for j in range(dst.size):
            dst[j] = v + src[j]
    elif code == _SUB + _SWAPPED:
        for j in range(dst.size):
            dst[j] = v - src[j]
    elif code == _MUL + _SWAPPED:
        for j in range(dst.size):
            dst[j] = v * src[j]
    else:  # _DIV + _SWAPPED
        for j in range(dst.size):
            dst[j] = v / src[j]


@numba.njit(inline="always", error_model="numpy", boundscheck=False)
def apply_ops(codes, table, channel, src, row, count):  # noqa: ANN001, ANN202, PLR0913
    """``row = ops(src)`` for the first ``count`` ops (``count`` >= 1) on one image of
    channel ``channel``: the first reads ``src``, the others work in ``row``."""
    _apply_row(codes[0], src, row, table[0, channel])
    for k in range(1, count):
        _apply_row(codes[k], row, row, table[k, channel])


@compiled
def _run(x, out, codes, table):  # noqa: ANN001, ANN202 (numba types it)
    """``out[n, c] = ops(x[n, c])`` over ``x`` as ``(N, C, H*W)``: the first op reads the
    channel's image into a row (in the L1 cache), the others apply to the row in order;
    where ``out`` holds each image as one row (:func:`_four_d`), the last op writes it
    there, else the row is written out image row by image row (``out`` may be another
    array's interior). Each branch passes arrays, not a choice between two: a loop
    writing into an array chosen at run time did not vectorize."""
    n_batch, channels, size = x.shape
    height, width = out.shape[2], out.shape[3]
    row = np.empty(size, np.float32)
    last = codes.size - 1
    for n in range(n_batch):
        for c in range(channels):
            if height == 1 and last == 0:
                _apply_row(codes[0], x[n, c], out[n, c, 0], table[0, c])
            elif height == 1:
                apply_ops(codes, table, c, x[n, c], row, last)
                _apply_row(codes[last], row, out[n, c, 0], table[last, c])
            else:
                apply_ops(codes, table, c, x[n, c], row, last + 1)
                for i in range(height):
                    dst = out[n, c, i]
                    src = row[i * width :]
                    for j in range(width):
                        dst[j] = src[j]
