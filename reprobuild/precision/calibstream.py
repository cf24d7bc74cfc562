"""The histogram calibrators' ranges (entropy, percentile), collected one batch at a time.

Why not ONNX Runtime's own ``collect_data``: its ``HistogramCalibrater`` keeps every
calibrated activation of every batch until the end, then joins and flattens them (two
more copies of the largest tensor), so memory grows with the sample count times the
model's activations: 100,000 samples of 4 KB took 15.9 GB. Here the model runs on one
batch at a time and only each tensor's running minimum and maximum are kept (pass one);
pass two adds each batch to a histogram whose edges pass one fixed. Counting into fixed
edges is additive, and the edges are those ``np.histogram`` derives from the whole set's
range, so each histogram, its minimum, maximum and threshold are exactly what ONNX
Runtime's ``HistogramCollector`` computes from all batches at once (entropy:
``collect_value``; symmetric percentile: ``collect_absolute_value``). ONNX Runtime still
augments the graph, runs it, and searches the histograms (``compute_data``); the cost is
running the model twice instead of once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

ENTROPY_BINS = 2048
"""Histogram bins of the entropy calibrator: TensorRT's IInt8EntropyCalibrator2 uses 2048,
searched for the threshold whose 128-level quantization loses the least information."""

PERCENTILE_BINS = 2048  # ONNX Runtime's create_calibrator default for percentile
PERCENTILE = 99.999  # likewise


def histogram_ranges(
    src: Path,
    tmp: Path,
    op_types: list[str],
    method: str,
    batches: Callable[[], Iterable[dict[str, np.ndarray]]],
) -> dict[str, list[dict[str, np.float32]]]:
    """Each calibrated tensor's symmetric (rmin, rmax) by ``method`` (entropy or
    percentile), in ``TensorQuantOverrides`` form; ``batches()`` yields the batches afresh
    on each call (it is called twice)."""
    from reprobuild.precision.measure import import_onnxruntime

    import_onnxruntime()
    from onnxruntime.quantization import CalibrationMethod, create_calibrator

    if method == "entropy":
        kind = CalibrationMethod.Entropy
        options: dict[str, Any] = {"num_bins": ENTROPY_BINS, "num_quantized_bins": 128}
    else:
        kind = CalibrationMethod.Percentile
        options = {"num_bins": PERCENTILE_BINS, "percentile": PERCENTILE}
    calibrator = create_calibrator(
        src,
        op_types,
        augmented_model_path=str(tmp / "augmented.onnx"),
        calibrate_method=kind,
        extra_options={"symmetric": True, **options},
    )
    from onnxruntime.quantization.calibrate import HistogramCollector

    collector = HistogramCollector(
        method=calibrator.method,
        symmetric=calibrator.symmetric,
        num_bins=calibrator.num_bins,
        num_quantized_bins=calibrator.num_quantized_bins,
        percentile=calibrator.percentile,
        scenario=calibrator.scenario,
    )
    session = calibrator.infer_session
    names = [o.name for o in session.get_outputs() if o.name in calibrator.tensors_to_calibrate]
    absolute = method == "percentile"  # ORT: a symmetric percentile histograms |x|
    lows, highs, abs_lows, abs_highs = _extremes(session, names, batches(), absolute)
    hists: dict[str, np.ndarray] = {}
    edges: dict[str, np.ndarray] = {}
    ranges = {}
    for name in names:
        if absolute:
            ranges[name] = (abs_lows[name], abs_highs[name])
        else:
            threshold = np.array(max(abs(lows[name]), abs(highs[name])), dtype=lows[name].dtype)
            ranges[name] = (-threshold, threshold)
    for feeds in batches():
        for name, out in zip(names, session.run(names, feeds), strict=True):
            flat = out.reshape(-1)
            if absolute:
                flat = np.absolute(flat)
            hist, edge = np.histogram(flat, collector.num_bins, range=ranges[name])
            hists[name] = hist if name not in hists else hists[name] + hist
            edges[name] = edge
    for name in names:
        if absolute:
            collector.histogram_dict[name] = (
                hists[name],
                edges[name].astype(lows[name].dtype),
                lows[name],
                highs[name],
            )
        else:
            threshold = ranges[name][1]
            collector.histogram_dict[name] = (
                hists[name],
                edges[name],
                lows[name],
                highs[name],
                threshold,
            )
    if method == "entropy":
        from reprobuild.precision.entropy import entropy_threshold

        collector.get_entropy_threshold = entropy_threshold  # the same search, faster
    calibrator.collector = collector
    result = calibrator.compute_data()
    out_ranges: dict[str, list[dict[str, np.float32]]] = {}
    for name in result:
        lo, hi = result[name].range_value
        out_ranges[name] = [{"rmin": np.float32(lo), "rmax": np.float32(hi)}]
    return out_ranges


def _extremes(
    session: Any, names: list[str], batches: Iterable[dict[str, np.ndarray]], absolute: bool
) -> tuple[dict[str, Any], ...]:
    """Per tensor over every batch: nanmin and nanmax of the values (ORT's min/max), and
    min and max of |values| (NaN kept, as ``np.histogram`` sees them when it picks the
    range itself); one batch's outputs alive at a time."""
    lows: dict[str, Any] = {}
    highs: dict[str, Any] = {}
    abs_lows: dict[str, Any] = {}
    abs_highs: dict[str, Any] = {}
    seen = False
    for feeds in batches:
        seen = True
        for name, out in zip(names, session.run(names, feeds), strict=True):
            with np.errstate(invalid="ignore"):
                lo, hi = _nan_extreme(out, np.fmin), _nan_extreme(out, np.fmax)
            lows[name] = lo if name not in lows else np.fmin(lows[name], lo)
            highs[name] = hi if name not in highs else np.fmax(highs[name], hi)
            if absolute:
                a = np.absolute(out)
                alo, ahi = a.min(), a.max()
                abs_lows[name] = alo if name not in abs_lows else np.minimum(abs_lows[name], alo)
                abs_highs[name] = ahi if name not in abs_highs else np.maximum(abs_highs[name], ahi)
                del a
    if not seen:
        raise ValueError("No data is collected.")
    return lows, highs, abs_lows, abs_highs


def _nan_extreme(arr: np.ndarray, ufunc: Any) -> Any:
    """``np.nanmin``/``np.nanmax`` without the all-NaN warning: fmin/fmax skip NaN."""
    if arr.size == 0:
        return np.array(0, dtype=arr.dtype)
    return ufunc.reduce(arr.reshape(-1))
