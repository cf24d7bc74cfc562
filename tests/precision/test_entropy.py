"""The fast entropy threshold search is ONNX Runtime's, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnxruntime.quantization.calibrate import HistogramCollector

from reprobuild.precision.entropy import entropy_threshold

ORT = HistogramCollector("entropy", True, 2048, 128, None, None)


def _histogram(data: np.ndarray, bins: int) -> tuple[object, ...]:
    """As ONNX Runtime's symmetric collector makes it: range +-max|x|."""
    bound = float(np.abs(data).max()) or 1.0
    hist, edges = np.histogram(data, bins, range=(-bound, bound))
    return hist, edges, data.min(), data.max(), np.float32(bound)


@pytest.mark.parametrize(
    "name",
    ["normal", "relu_cubed", "exponential", "zeros", "constant"],
)
def test_same_threshold_as_onnxruntime_at_tensorrt_sizes(name: str) -> None:
    rng = np.random.default_rng(0)
    data = {
        "normal": rng.standard_normal(5000),
        "relu_cubed": np.maximum(rng.standard_normal(20000), 0) ** 3,
        "exponential": rng.exponential(size=3000),
        "zeros": np.zeros(100),
        "constant": np.full(100, 3.0),
    }[name].astype(np.float32)
    h = _histogram(data, 2048)
    want, got = ORT.get_entropy_threshold(h, 128), entropy_threshold(h, 128)
    assert (got[0].tobytes(), got[1].tobytes()) == (want[0].tobytes(), want[1].tobytes())
    if name == "relu_cubed":  # a long tail: the search clips it
        assert float(got[1]) < float(data.max()) / 2


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    bins=st.sampled_from([256, 300, 512, 517]),
    quantized=st.sampled_from([16, 64, 128]),
    tail=st.floats(0.5, 4.0),
)
def test_same_threshold_on_random_histograms(
    seed: int, bins: int, quantized: int, tail: float
) -> None:
    """Odd bin counts leave a remainder past the merged bins, which both treat alike."""
    rng = np.random.default_rng(seed)
    data = (np.sign(rng.standard_normal(2000)) * rng.pareto(tail, 2000)).astype(np.float32)
    h = _histogram(data, bins)
    want, got = ORT.get_entropy_threshold(h, quantized), entropy_threshold(h, quantized)
    assert (got[0].tobytes(), got[1].tobytes()) == (want[0].tobytes(), want[1].tobytes())
