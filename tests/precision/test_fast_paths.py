"""The precision pass's fast paths give exactly what the direct definitions give.

A change made the pass faster: max |x| read as max(max x, -min x) from ONNX Runtime's own
buffers, the initializer-range rule rounding only values below the smallest normal, and one
analysis shared by deriving and applying a plan. Each is held here to the plain definition
it replaced (the plan goldens in test_plan_goldens.py hold whole plans to main's bytes).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import onnx
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from reprobuild.precision.analysis import analyze
from reprobuild.precision.measure import _max_abs
from reprobuild.precision.ops import BFLOAT16, FLOAT16, LOW_EPS, LOW_MAX
from reprobuild.precision.rules import range_problem

from .helpers import rules_model

SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 2.0**-14, 2.0**-24, 2.0**-25, -(2.0**-25)]
SPECIAL += [2.0**-26, 2.0**-149, 2.0**-126, 2.0**-133, 2.0**-134, 65504.0, 65520.0, 2.0**127]


def direct_range_problem(arr: np.ndarray, low: int) -> str | None:
    """The initializer-range rule as the rules module documents it, computed directly."""
    a = np.asarray(arr, dtype=np.float32)
    with np.errstate(all="ignore"):
        mag = np.abs(a[np.isfinite(a)])
    if mag.size == 0:
        return None
    top = float(mag.max())
    if top > LOW_MAX[low]:
        return f"max |w| {top:g} > {LOW_MAX[low]:g}"
    nonzero = mag[mag > 0]
    dtype = np.float16 if low == FLOAT16 else ml_dtypes.bfloat16
    flushed = nonzero[nonzero.astype(dtype).astype(np.float32) == 0]
    if flushed.size and float(flushed.max()) >= top * LOW_EPS[low]:
        return f"{flushed.size} values such as {float(flushed.max()):g} flush to zero"
    return None


floats32 = st.one_of(
    st.sampled_from(SPECIAL),
    st.floats(width=32, allow_nan=True, allow_infinity=True),
    st.floats(-(2.0**-17), 2.0**-17, width=32),
)
arrays = hnp.arrays(np.float32, st.integers(0, 30), elements=floats32)


@settings(max_examples=400, deadline=None)
@given(arrays, st.sampled_from([FLOAT16, BFLOAT16]))
def test_range_problem_is_the_direct_definition(arr: np.ndarray, low: int) -> None:
    assert range_problem(arr, low) == direct_range_problem(arr, low)


def test_range_problem_reports_both_kinds_of_problem() -> None:
    assert range_problem(np.array([1.0, 70000.0], np.float32), FLOAT16) == "max |w| 70000 > 65504"
    tiny = np.array([1.0, 2.0**-10, 2.0**-26], np.float32)  # 2**-26 flushes, but is negligible
    assert range_problem(tiny, FLOAT16) is None
    small = np.array([2.0**-20, 2.0**-26], np.float32)  # not negligible next to 2**-20
    assert range_problem(small, FLOAT16) == "1 values such as 1.49012e-08 flush to zero"


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        hnp.arrays(np.float32, st.integers(0, 20), elements=floats32),
        hnp.arrays(np.float16, st.integers(0, 20)),
        hnp.arrays(np.float64, st.integers(0, 20)),
        hnp.arrays(np.int64, st.integers(0, 20)),
        hnp.arrays(np.int8, st.integers(0, 20)),
        hnp.arrays(np.bool_, st.integers(0, 20)),
    )
)
def test_max_abs_is_max_of_abs_with_nonfinite_as_inf(v: np.ndarray) -> None:
    """Integers count too (``--magnitude-io`` reads them, as ModelOpt does), -128 as 128."""
    if v.dtype.kind not in "fi" or not v.size:
        expected = 0.0
    elif v.dtype.kind == "i":
        expected = float(max(abs(int(x)) for x in v.ravel()))
    else:
        with np.errstate(all="ignore"):
            expected = float(np.max(np.abs(v)))
        expected = expected if math.isfinite(expected) else math.inf
    got = _max_abs(v)
    assert got == expected and math.copysign(1.0, got) == 1.0  # never -0.0


def test_an_edited_model_is_analyzed_again() -> None:
    model = rules_model()
    first = analyze(model)
    assert analyze(model) is first  # derive then apply: read once
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    assert analyze(copy) is not first  # another object, even with equal bytes
    node = model.graph.node[0]
    node.name = node.name + "_renamed"
    again = analyze(model)
    assert again is not first and again.infos[0].key == node.name


def test_measuring_in_several_passes_gives_the_same_stats_and_values(monkeypatch) -> None:
    """Big models are measured in several ONNX Runtime passes (each keeps copies of the
    constant values it read); a model measured in one pass gives the same figures."""
    import reprobuild.precision.measure as measure_mod
    from reprobuild.precision.calibration import load_calibration

    model = rules_model()
    an = analyze(model)
    feeds, _ = load_calibration(None, model, seed=0)
    keep = set(an.constant) - set(an.inits)
    assert keep  # the model computes constants whose values the range rule reads
    one_stats, one_values = measure_mod.measure(an, feeds, keep)
    monkeypatch.setattr(measure_mod, "_MEASURE_BUDGET_BYTES", 1)  # one tensor per pass
    many_stats, many_values = measure_mod.measure(an, feeds, keep)
    assert one_stats == many_stats and len(one_stats) == len(model.graph.node) > 5
    assert one_values.keys() == many_values.keys() == keep & one_stats.keys()
    for name, value in one_values.items():
        assert value.tobytes() == many_values[name].tobytes() and many_values[name].flags.owndata
