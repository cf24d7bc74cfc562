"""The reference engine's compiled loops: one place for how they are compiled, and numpy's
``maximum`` rule, which they share.

Why compiled loops: numpy runs a chain of elementwise layers, or the taps of a pooling
window, as one pass over the tensor per operation; a loop compiled by numba applies them
all while the data is in the L1 cache. Why these options: without fast-math, nothing is
reassociated or contracted into a fused multiply-add, so each element gets the IEEE float
operations numpy gives it, in the same order (the bits tests of
``tests/test_reference_program.py``); ``error_model="numpy"`` makes a division by zero
give inf or NaN as numpy does, not raise; ``cache=True`` keeps the machine code next to
this package (``__pycache__``), so a process compiles each loop once per machine, not once
per run.
"""

from __future__ import annotations

import functools

import numba

compiled = functools.partial(
    numba.njit, cache=True, nogil=True, error_model="numpy", boundscheck=False
)
"""``numba.njit`` with the options above (the module docstring says why)."""


@numba.njit(inline="always")
def maximum(a, b):  # noqa: ANN001, ANN201 (numba types it)
    """numpy's ``maximum(a, b)``: a NaN ``a`` is kept, else a NaN ``b``; a tie (+0.0 and
    -0.0 included) gives ``b``, as numpy's vector and scalar loops both do."""
    return a if (a > b or a != a) else b
