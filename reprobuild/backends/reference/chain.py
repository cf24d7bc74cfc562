"""Runs of elementwise layers executed together, a block of channels at a time.

Why: after a Conv, Inception and DenseNet run BatchNormalization, a per-channel Mul and Add
and a Relu, ResNet BatchNormalization and Relu: four to five passes over a tensor larger
than the CPU's cache, each reading and writing main memory (a third of DenseNet's time
outside the GEMMs). A :class:`ChainStep` runs such a run of layers as one step: it applies
every layer's operation to a block of channels (a few hundred KB, which stays in cache)
before moving to the next block, in one buffer.

Bits: each element goes through the same numpy ufuncs, with the same operands in the same
order, as when the layers run one by one (:mod:`.elementwise`, :func:`.program` 's
BatchNormalization); only the order in which elements are visited changes, and these
operations are elementwise. ``tests/test_reference_program.py`` holds the two to the same
bytes. Inputs the chain does not cover (another dtype, a shape the constants do not fit)
run the layers one by one, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reprobuild.backends.reference.elementwise import BINARY

BLOCK_ELEMENTS = 1 << 16
"""Elements per block (256 KB of float32): the block and its constants stay in L2."""

_F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class ElementOp:
    """One elementwise operation: ``ufunc(x, constant)`` (or ``ufunc(constant, x)`` when
    ``first`` is False); Relu is ``maximum(x, 0)`` with the Python int 0, as
    :func:`.elementwise.relu` calls it."""

    ufunc: Any
    constant: Any  # np.ndarray, or the int 0 of Relu
    first: bool = True  # x is the ufunc's first operand
    channels: bool = False  # constant is a vector over axis 1 (BatchNormalization's)

    def operand(self, shape: tuple[int, ...]) -> Any:
        """The constant as it meets an input of ``shape`` (None: it does not fit)."""
        c = self.constant
        if not self.channels:
            return c
        if c.shape != (shape[1],):
            return None
        return c.reshape((1, shape[1]) + (1,) * (len(shape) - 2))


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
    """Run ``ops`` (every layer's, in layer order) on one input, block by block.

    ``donate``: the input dies here and nothing else sees it, so the result may be written
    into it. Returns None for an input the chain does not cover (the caller then runs the
    layers one by one)."""

    def __init__(self, ops: Sequence[ElementOp], donate: bool) -> None:
        self.ops, self.donate = tuple(ops), donate
        self._plans: dict[tuple[int, ...], list[tuple[Any, list[Any]]] | None] = {}

    def __call__(
        self, x: Any, into: Callable[[np.ndarray], Any] | None = None
    ) -> np.ndarray | None:
        """The chain's output; written where ``into(x)`` says when it names a place (an
        array of ``x``'s shape that nothing else uses: the next Conv's padded buffer, or
        the chain's channels of the Concat after it)."""
        if type(x) is not np.ndarray or x.dtype != _F32 or x.ndim < 2:
            return None
        plan = self._plans.get(x.shape, False)
        if plan is False:
            plan = self._plans[x.shape] = self._plan(x.shape)
        if plan is None:
            return None
        own = self.donate and x.flags.c_contiguous
        out = into(x) if into is not None else None
        # every op but the last writes into contiguous memory (numpy's vector loops): the
        # output itself, or, when the output is another array's interior, the input (when
        # it may be overwritten) or a block of scratch
        work: np.ndarray | None = x if own else None
        if out is None:
            out = work = x if own else np.empty_like(x)
        last = len(self.ops) - 1
        for index, constants in plan:
            src, dst = x[index], out[index]
            mid = _scratch(src.shape) if work is None else work[index]
            for i, (op, c) in enumerate(zip(self.ops, constants, strict=True)):
                target = dst if i == last else mid
                if op.first:
                    op.ufunc(src, c, out=target)
                else:
                    op.ufunc(c, src, out=target)
                src = target
        return out

    def _plan(self, shape: tuple[int, ...]) -> list[tuple[Any, list[Any]]] | None:
        """Per block of channels: its index and each op's constant for it (None: a constant
        would change the output's shape or dtype; the layers then run one by one)."""
        operands = [op.operand(shape) for op in self.ops]
        for c in operands:
            if c is None:
                return None
            if isinstance(c, np.ndarray):
                try:
                    if np.broadcast_shapes(shape, c.shape) != shape:
                        return None
                except ValueError:
                    return None
        per_channel = max(1, int(np.prod(shape[2:], dtype=np.int64)) * shape[0])
        step = max(1, BLOCK_ELEMENTS // per_channel)
        plan = []
        for start in range(0, shape[1], step):
            block = slice(start, min(start + step, shape[1]))
            plan.append(((slice(None), block), [_block(c, shape, block) for c in operands]))
        return plan


def _block(constant: Any, shape: tuple[int, ...], block: slice) -> Any:
    """The part of a broadcast ``constant`` that meets the channels ``block`` of ``shape``;
    Relu's 0 as zeros of the block's shape (:func:`_zeros`)."""
    if not isinstance(constant, np.ndarray):
        if constant == 0:
            return _zeros((shape[0], block.stop - block.start, *shape[2:]))
        return constant
    axis = constant.ndim - (len(shape) - 1)  # the constant's axis aligned with the channels
    if axis < 0 or constant.shape[axis] == 1:
        return constant
    index = [slice(None)] * constant.ndim
    index[axis] = block
    return constant[tuple(index)]


_ZEROS: list[np.ndarray] = [np.zeros(0, _F32)]
_SCRATCH: list[np.ndarray] = [np.zeros(0, _F32)]


def _scratch(shape: tuple[int, ...]) -> np.ndarray:
    """A float32 block of ``shape`` for a chain's intermediate values (contents undefined;
    one array shared by every chain: chains run one at a time)."""
    size = int(np.prod(shape, dtype=np.int64))
    if _SCRATCH[0].size < size:
        _SCRATCH[0] = np.empty(size, _F32)
    return _SCRATCH[0][:size].reshape(shape)


def _zeros(shape: tuple[int, ...]) -> np.ndarray:
    """Read-only float32 zeros of ``shape``, views of one array shared by every chain.

    Why: ``np.maximum(x, 0)`` runs numpy's element-by-element loop, ``np.maximum(x, zeros)``
    on contiguous operands its vector loop, twice as fast; both give the same bits (the
    maximum of each element and +0.0, NaN and -0.0 included)."""
    size = int(np.prod(shape, dtype=np.int64))
    if _ZEROS[0].size < size:
        _ZEROS[0] = np.zeros(size, _F32)
        _ZEROS[0].flags.writeable = False
    return _ZEROS[0][:size].reshape(shape)
