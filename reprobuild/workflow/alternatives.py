"""Which recorded candidates of a layer to try first when looking for a change that shows.

Two kernels of one family that accumulate in the same precision often give the same bits:
an FP16 layer's FP32-accumulating kernels each round once to FP16, so summing in another
order rarely moves the result, while a kernel that rounds every partial sum to FP16 does.
So the positive control and ``--sensitivity`` try, per layer, the candidates whose kernel
name says another accumulation precision first, then another algorithm family, then the
rest in the lock's order. Only the names are read (the reference backend's
``ref_conv_im2col_splitk4_f16_f16acc``, TensorRT's ``sm80_xmma_..._f16f16_f16f32_f16``), so
the ranking works for any backend whose candidates carry kernel names; without names it is
the lock's order.
"""

from __future__ import annotations

import re

from reprobuild.lock.model import LayerEntry

# Precision words in kernel names; longest first so "bf16" is not read as "f16".
_PRECISION = re.compile(r"bf16|tf32|fp16|fp32|fp8|int8|f16|f32|f8|i8|s8|int32|s32|i32")


def precision_words(kernel: str | None) -> tuple[str, ...]:
    """The precision words of a kernel name in order (input, accumulation, output types)."""
    return tuple(_PRECISION.findall((kernel or "").lower()))


def family(kernel: str | None) -> frozenset[str]:
    """The kernel's algorithm family: the words of its name without precisions and numbers,
    so tile sizes and split counts (``splitk2``/``splitk4``, ``128x64``) stay one family."""
    text = _PRECISION.sub("_", (kernel or "").lower())
    return frozenset(w for w in re.split(r"[^a-z]+", re.sub(r"\d+", "", text)) if len(w) > 1)


def difference(locked: str | None, other: str | None) -> int:
    """How likely switching ``locked`` to ``other`` is to change the bits: 2 for another
    accumulation precision, plus 1 for another algorithm family; 0 without names."""
    if not locked or not other:
        return 0
    score = 2 if precision_words(locked) != precision_words(other) else 0
    return score + (1 if family(locked) != family(other) else 0)


def ranked_alternatives(entry: LayerEntry) -> list[tuple[int, str | None]]:
    """Every other recorded candidate of the layer as ``(tactic, kernel)``, the ones most
    likely to change the outputs first (ties keep the lock's order)."""
    others = [(c.tactic, c.kernel) for c in entry.candidates if c.tactic != entry.tactic]
    return sorted(others, key=lambda alt: -difference(entry.kernel, alt[1]))
