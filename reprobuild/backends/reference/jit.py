"""The reference engine's compiled loops: one place for how they are compiled, and numpy's
``maximum`` rule, which they share.

Why compiled loops: numpy runs a chain of elementwise layers, or the taps of a pooling
window, as one pass over the tensor per operation; a loop compiled by numba applies them
all while the data is in the L1 cache. Why these options: without fast-math, nothing is
reassociated or contracted into a fused multiply-add, so each element gets the IEEE float
operations numpy gives it, in the same order (the bits tests of
``tests/test_reference_program.py``); ``error_model="numpy"`` makes a division by zero
give inf or NaN as numpy does, not raise; ``cache=True`` keeps the machine code next to
this package (``__pycache__``, else numba's folder in the user's cache), so each loop is
compiled once per machine (about a second), not once per process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba

_OPTIONS = {"nogil": True, "error_model": "numpy", "boundscheck": False}


def compiled(func: Callable[..., Any]) -> Callable[..., Any]:
    """``numba.njit`` with the options above (the module docstring says why). Where no
    folder for the machine code can be written (a read-only install and no writable home
    or ``NUMBA_CACHE_DIR``), numba refuses ``cache=True`` when the module is imported: the
    loop is then compiled in each process instead, and reprobuild still imports."""
    try:
        return numba.njit(cache=True, **_OPTIONS)(func)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(cache=False, **_OPTIONS)(func)


@numba.njit(inline="always")
def maximum(a, b):  # noqa: ANN001, ANN201 (numba types it)
    """numpy's ``maximum(a, b)``: a NaN ``a`` is kept, else a NaN ``b``; a tie (+0.0 and
    -0.0 included) gives ``b``, as numpy's vector and scalar loops both do."""
    return a if (a > b or a != a) else b
