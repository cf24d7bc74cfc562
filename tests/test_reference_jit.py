"""The reference engine's compiled loops (``backends/reference/jit.py``): numpy's
``maximum`` rule, and an import that survives a machine where no cache folder is writable."""

from __future__ import annotations

import numpy as np
import pytest
from numba.core import caching

from reprobuild.backends.reference import jit

_BITS = [0x00000000, 0x80000000, 0x7FC00001, 0xFFC00123, 0x7F800000, 0xFF800000, 0x1, 0x3F800000]


@jit.compiled
def _pairwise(a, b, out):  # noqa: ANN001, ANN202
    for i in range(out.size):
        out[i] = jit.maximum(a[i], b[i])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_maximum_gives_numpys_bits_for_nans_signed_zeros_and_infinities(dtype) -> None:
    bits = np.array(_BITS, np.uint32).view(np.float32).astype(dtype)
    a, b = np.repeat(bits, len(bits)), np.tile(bits, len(bits))  # every pair, both orders
    got = np.empty_like(a)
    _pairwise(a, b, got)
    assert got.tobytes() == np.maximum(a, b).tobytes()


def test_no_writable_cache_folder_compiles_in_each_process(monkeypatch) -> None:
    """numba raises at decoration when no locator can write its cache: the loop is
    compiled without a cache instead of reprobuild failing to import."""
    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])

    def twice(x):  # noqa: ANN001, ANN202
        return x * 2

    with pytest.raises(RuntimeError, match="no locator"):
        jit.numba.njit(cache=True)(twice)
    assert jit.compiled(twice)(np.float32(3)) == 6
