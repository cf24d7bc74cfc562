"""Running models on the CPU: the one ONNX Runtime session helper and what is measured with it.

Every session here disables ONNX Runtime's graph optimizations, so what is measured is the
graph's own ops (nothing fused away) and the figures do not change with ORT's optimizer.
``onnxruntime`` is imported when a session is made, never at import time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from reprobuild.errors import BackendUnavailable, UsageError
from reprobuild.precision.analysis import Analysis, np_dtype, real_inputs, round_to
from reprobuild.precision.ops import BFLOAT16, FLOAT16

_MEASURE_BUDGET_BYTES = 512 * 1024 * 1024  # per ONNX Runtime run while measuring
_UNKNOWN_TENSOR_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Stat:
    """What the magnitude and reduction-depth rules read from one tensor."""

    shape: tuple[int, ...]
    max_abs: float  # inf when any value is NaN or Inf; integers too; 0.0 for other types


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def import_onnxruntime() -> Any:
    """The ``onnxruntime`` module; where it cannot be imported (not installed, or a wheel
    built for another numpy or Python), an environment error (exit 3) that says why, so a
    build report can carry the reason and a command that needs it refuses in one line."""
    try:
        import onnxruntime
    except Exception as err:  # noqa: BLE001 - ImportError, or a broken install failing inside
        raise BackendUnavailable(
            f"ONNX Runtime cannot be imported ({type(err).__name__}: {_first_line(err)[:200]}); "
            "reinstall it: pip install --force-reinstall onnxruntime"
        ) from None
    return onnxruntime


def ort_session(model: bytes | str | os.PathLike[str], what: str) -> Any:
    """A CPU ``InferenceSession`` with graph optimizations off; a load failure is exit 2.

    ``model`` is serialized model bytes or a path; ``what`` names it in the error message.
    """
    ort = import_onnxruntime()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    # Idle worker threads sleep instead of spinning: on a shared machine a spinning pool
    # fights the neighbours (DenseNet121's measuring run took 1.5x as long under load). It
    # changes no value: the work is split across the same number of threads either way.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    src = model if isinstance(model, bytes) else os.fspath(model)
    try:
        return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 - ORT raises several unrelated types
        raise UsageError(
            f"ONNX Runtime {ort.__version__} cannot load the {what} on the CPU "
            f"({_first_line(err)[:300]}); {_load_fix(src)}"
        ) from None


def _load_fix(src: bytes | str) -> str:
    """What to do about a model ONNX Runtime refused: a too-new IR version, or the checker.

    ``onnx.helper.make_model`` stamps the installed onnx's newest IR version whatever the
    opsets need, and an ONNX Runtime older than that onnx refuses it with a bare
    "Unsupported"; the fix is the IR version the opsets need, which every runtime reads.
    """
    try:
        if isinstance(src, bytes):
            model = onnx.ModelProto.FromString(src)
        else:
            model = onnx.load(src, load_external_data=False)
        need = onnx.helper.find_min_ir_version_for(list(model.opset_import), True)
    except Exception:  # noqa: BLE001 - only a hint; the runtime's own error is already said
        return "check the model with onnx.checker"
    if model.ir_version > need:
        return (
            f"its IR version {model.ir_version} may be newer than this onnxruntime reads: save "
            f"it with ir_version = {need} (what its opsets need) or upgrade onnxruntime"
        )
    return "check the model with onnx.checker"


def _tensor_bytes(an: Analysis, name: str) -> int:
    shape = an.shapes.get(name)
    t = an.types.get(name)
    if shape is None or t is None:
        return _UNKNOWN_TENSOR_BYTES
    n = 1
    for d in shape.dim:
        if not d.HasField("dim_value"):
            return _UNKNOWN_TENSOR_BYTES
        n *= d.dim_value
    try:
        return n * np_dtype(t).itemsize
    except (TypeError, KeyError, ValueError):
        return _UNKNOWN_TENSOR_BYTES


def _run_in_place(sess: Any, names: list[str], feeds: dict[str, np.ndarray]) -> list[Any]:
    """The outputs as ONNX Runtime ``OrtValue`` objects, read where ORT wrote them.

    Why not ``sess.run``: it copies every output into a new array. With every intermediate
    exposed that is hundreds of MB for a large model (DenseNet121: 350 MB, which took longer
    than the run itself), and only a maximum is read from most of them.
    """
    from onnxruntime import OrtValue

    ort_feeds = {k: OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)) for k, v in feeds.items()}
    return list(sess.run_with_ort_values(names, ort_feeds))


def _max_abs(v: np.ndarray) -> float:
    """max |x| of a float tensor (inf when any value is NaN or Inf) or an integer one (what
    ``--magnitude-io`` reads, as ModelOpt's data_max does); 0.0 for other types.

    Read as max(max x, -min x): two passes over the data and no |x| temporary as large as
    the tensor. Exactly ``np.max(np.abs(v))`` (``+ 0.0`` turns a -0.0 into 0.0).
    """
    if v.dtype.kind not in "fiu" or not v.size:
        return 0.0
    hi, lo = float(v.max()), float(v.min())
    mag = max(hi, -lo) + 0.0
    return mag if math.isfinite(mag) and math.isfinite(hi) and math.isfinite(lo) else math.inf


def measure(
    an: Analysis,
    feeds: dict[str, np.ndarray],
    keep: set[str],
    more_feeds: Sequence[dict[str, np.ndarray]] = (),
) -> tuple[dict[str, Stat], dict[str, np.ndarray]]:
    """Shape and max |x| of every node output on ``feeds``; full values only for ``keep``.

    All intermediates become graph outputs (so ONNX Runtime computes exactly the graph's
    ops, nothing fused away); big models run in several passes to bound memory. With
    ``more_feeds`` (further calibration batches) each pass's session also runs on those:
    max |x| is over every batch, shapes and values are the first batch's.
    """
    names: list[str] = []
    seen = set(an.input_names)
    for info in an.infos:
        for o in info.node.output:
            if o and o not in seen:
                seen.add(o)
                names.append(o)
    batches: list[list[str]] = []
    size = 0
    for n in names:
        b = _tensor_bytes(an, n)
        if not batches or size + b > _MEASURE_BUDGET_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(n)
        size += b
    work = onnx.ModelProto()
    work.CopyFrom(an.model)
    del work.graph.value_info[:]
    stats: dict[str, Stat] = {}
    values: dict[str, np.ndarray] = {}
    for batch in batches:
        del work.graph.output[:]
        for n in batch:
            work.graph.output.add().name = n
        sess = ort_session(work.SerializeToString(), "model")
        for k, f in enumerate((feeds, *more_feeds)):
            try:
                outs = _run_in_place(sess, batch, f)
            except Exception as err:  # noqa: BLE001 - ORT raises several unrelated types
                raise UsageError(
                    f"ONNX Runtime failed to run the model on the calibration inputs "
                    f"({_first_line(err)[:300]}); check that the inputs fit the model"
                ) from None
            with np.errstate(all="ignore"):
                for n, out in zip(batch, outs, strict=True):
                    if not (out.has_value() and out.is_tensor()):
                        continue  # sequences, maps, absent optionals: nothing to measure
                    # numeric tensors: a view of ORT's buffer, which the array's base keeps
                    v = out.numpy()
                    mag = _max_abs(v)
                    if k == 0:
                        stats[n] = Stat(tuple(int(d) for d in v.shape), mag)
                        if n in keep:
                            # one pass: keep the view (the session's memory goes when derive
                            # ends); several: a copy, so no pass keeps its session's memory
                            values[n] = v if len(batches) == 1 else np.array(v, copy=True)
                    elif n in stats and mag > stats[n].max_abs:
                        stats[n] = Stat(stats[n].shape, mag)
            del outs
    return stats, values


def run_model(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], what: str
) -> tuple[list[str], list[np.ndarray], str]:
    """Outputs in ONNX Runtime; the ONNX reference evaluator where ORT has no CPU kernel
    (bf16 Conv, for one), so every plan can be judged on this machine.

    Float32 feeds for float16/bfloat16 graph inputs are rounded first, so one set of inputs
    serves the FP32 model and a converted one. Returns the output names, their values and
    the runtime that produced them (``onnxruntime`` or ``onnx.reference``).
    """
    return model_runner(model, what)(feeds)


def model_runner(
    model: onnx.ModelProto, what: str
) -> Callable[[dict[str, np.ndarray]], tuple[list[str], list[np.ndarray], str]]:
    """:func:`run_model` for many feeds: the session is made once, on the first call.

    Each output is copied out of ONNX Runtime's buffer: an output array that is a view
    keeps its block of the session's memory arena, so holding the outputs of thousands of
    sample batches (accuracy on a calibration set) held thousands of blocks."""
    inputs = {vi.name: vi for vi in real_inputs(model)}
    out_names = [o.name for o in model.graph.output]
    state: dict[str, Any] = {}

    def run(feeds: dict[str, np.ndarray]) -> tuple[list[str], list[np.ndarray], str]:
        cast_feeds: dict[str, np.ndarray] = {}
        for name, arr in feeds.items():
            t = inputs[name].type.tensor_type.elem_type if name in inputs else 0
            low_input = t in (FLOAT16, BFLOAT16) and arr.dtype == np.float32
            cast_feeds[name] = round_to(arr, t) if low_input else arr
        if "reference" not in state:
            try:
                if "session" not in state:
                    state["session"] = ort_session(model.SerializeToString(), what)
                outs = state["session"].run(out_names, cast_feeds)
                return out_names, [np.array(o, copy=True) for o in outs], "onnxruntime"
            except Exception as err:  # noqa: BLE001 - fall back only for missing kernels
                text = str(err)
                if "NOT_IMPLEMENTED" not in text and "Could not find an implementation" not in text:
                    raise
            from onnx.reference import ReferenceEvaluator

            state["reference"] = ReferenceEvaluator(model, new_ops=_qdq_ops())
        outs = state["reference"].run(out_names, cast_feeds)
        return out_names, [np.asarray(o) for o in outs], "onnx.reference"

    return run


def _qdq_ops() -> list[type]:
    """QuantizeLinear/DequantizeLinear for onnx.reference at any opset: it implements them
    from opset 19 only, and an INT8 graph (opset >= 13) whose float side runs in BF16 falls
    back to it. Later opsets only added types and attributes whose defaults keep the
    opset-13 meaning, so the newest implementation computes the INT8 nodes exactly (its
    class, as for any custom op, takes every attribute the newest schema has)."""
    from onnx.reference.ops import op_dequantize_linear, op_quantize_linear

    def newest(module: object, op: str) -> type:
        found = [(int(n.rsplit("_", 1)[1]), n) for n in vars(module) if n.startswith(op + "_")]
        base = getattr(module, max(found)[1])
        return type(op, (base,), {"op_domain": ""})

    return [
        newest(op_dequantize_linear, "DequantizeLinear"),
        newest(op_quantize_linear, "QuantizeLinear"),
    ]


def plan_error(
    model_fp32: onnx.ModelProto, model_mixed: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> dict[str, Any]:
    """Error of the mixed model's outputs against FP32 (the metric of
    :mod:`reprobuild.accuracy`), for the build report.

    Caveat: ONNX Runtime's CPU provider has FP16 kernels only for data-movement ops; it runs
    FP16 Conv/MatMul/Add/... in FP32 between inserted casts. The figure therefore measures
    FP16 *storage* of weights and activations, not FP16 arithmetic or accumulation (the
    reference backend's FP16 tactics measure those).
    """
    from reprobuild.accuracy import compare_outputs

    names, ref, _ = run_model(model_fp32, feeds, "FP32 model")
    names2, got, runtime = run_model(model_mixed, feeds, "mixed-precision model")
    got_by = dict(zip(names2, got, strict=True))
    missing = [n for n in names if n not in got_by]
    if missing:
        raise UsageError(f"the mixed-precision model has no output {missing[0]!r}; re-convert it")
    try:
        result = compare_outputs(got_by, dict(zip(names, ref, strict=True)))
    except ValueError as err:
        raise UsageError(f"the mixed model's outputs do not match FP32's: {err}") from None
    return {**result, "runtime": runtime}
