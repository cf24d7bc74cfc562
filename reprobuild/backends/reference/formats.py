"""A layer's format combinations: one timing-cache key each, chosen between by the tie rule.

TensorRT times a layer once per *format combination* (the layouts its inputs and outputs
are read and written in: kLINEAR, kHWC, kCHW4, ...; a verbose log shows one ``Autotuning
format combination: Float(...) -> Float(...)`` block per combination). With the editable
timing cache every combination has its own key, its own ``Autotuning op NAME(key: K)``
table and its own cache entry, and the builder then keeps the combination whose time is
lowest. So a lock that fixes every key's tactic still leaves the choice *between* a
layer's keys to the recorded times: a rebuild with other times can run another key.

The reference backend mirrors this for float Conv layers, whose kernels split naturally by
the layout they read:

- ``linear`` (NCHW, row-major linear, TensorRT's kLINEAR): the im2col family (``blas``,
  ``splitk``, ``tree``, ``k16``), which unfolds the linear input into one GEMM;
- ``hwc`` (channels last, TensorRT's kHWC): ``direct``, one GEMM per kernel tap over the
  channels, the loop a channels-last layout makes contiguous.

MatMul, Gemm, INT8 layers and pointwise Convs (no ``direct`` kernel: it would be ``blas``)
have one format, ``linear``, and so one key, as before.

The rule (:func:`reprobuild.tiebreak.choose_key`, the same band and rule as within a key):
among the keys whose time is within ``tie_band`` x the best key's time, the key whose
kernel is numerically steadier (wide accumulation, then the fewest partial sums), then the
lowest key hash; with ``tie_band`` 0 the fastest, equal times going to the lowest key hash.
No step reads the order the keys were timed in. Times come from the cache when the key is
there (a locked build writes back the recorded times, so it runs the recorded key;
``update(key, tactic, time)`` with other times can flip the choice) and from timing
otherwise. When one key is cached and the other is not, the missing one is timed (a cache
miss, as TensorRT times a combination it has no entry for) and its fresh time is compared
with the other's cached one; a locked build reports that miss as drift, since the new key
is added to the cache.
"""

from __future__ import annotations

from collections.abc import Sequence

from reprobuild.backends.reference.kernels import KernelSpec

LINEAR = "linear"
HWC = "hwc"
FORMATS = (LINEAR, HWC)
"""Every format, in the order a layer's keys are timed (which never decides the choice)."""


def format_of(spec: KernelSpec) -> str:
    """The layout a kernel reads: ``hwc`` for the direct Conv kernels, else ``linear``."""
    return HWC if spec.scheme == "direct" else LINEAR


def by_format(specs: Sequence[KernelSpec]) -> list[tuple[str, list[KernelSpec]]]:
    """The candidates grouped by format, in :data:`FORMATS` order, empty formats left out;
    each group keeps the candidates' declaration order (their ``tactic_id``)."""
    groups = [(fmt, [s for s in specs if format_of(s) == fmt]) for fmt in FORMATS]
    return [(fmt, group) for fmt, group in groups if group]
