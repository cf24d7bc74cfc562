"""Checking the user's precision options before any model is loaded.

The CLI calls :func:`validate_options` first so that a typo fails with exit 2 in
milliseconds, not after a model has been analysed; onnx is imported only to list the known
op types, and only when ``--keep-fp32-op`` is given.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Sequence

from reprobuild.errors import UsageError
from reprobuild.lock.plan import PrecisionSettings
from reprobuild.precision.ops import LOW_TYPES

_KNOWN_OPS: frozenset[str] | None = None


def validate_options(
    mode: str,
    keep_fp32: list[str],
    keep_fp32_ops: list[str],
    max_output: float,
    max_reduction_depth: int | None,
    fp32_accumulate: bool,
    keep_io_types: bool = True,
    *,
    nodes_to_include: Sequence[str] = (),
    op_types_to_include: Sequence[str] = (),
    init_max: float | None = None,
    init_conversion_max_bytes: int | None = None,
    magnitude_io: bool = False,
    opset: int | None = None,
) -> PrecisionSettings:
    """Check the user's options before any model work, so mistakes fail fast with exit 2."""
    check_mode(mode)
    _check_patterns("--keep-fp32", keep_fp32)
    _check_patterns("--nodes-to-include", nodes_to_include)
    _check_ops("--keep-fp32-op", keep_fp32_ops)
    _check_ops("--op-types-to-include", op_types_to_include)
    if init_max is not None and (
        isinstance(init_max, bool)
        or not isinstance(init_max, (int, float))
        or math.isnan(init_max)
        or init_max <= 0
    ):
        raise UsageError(
            f"--init-max {init_max}: must be a positive number such as 65504 (weights with a "
            "larger magnitude keep their node in FP32)"
        )
    for name, value, low in (
        ("--init-conversion-max-bytes", init_conversion_max_bytes, 0),
        ("--opset", opset, 1),
    ):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < low
        ):
            raise UsageError(f"{name} {value}: must be an integer >= {low}")
    if opset is not None and mode == "int8":
        raise UsageError(
            f"--opset {opset} is an fp16/bf16 option; INT8 converts an older model to opset "
            "13 itself"
        )
    if isinstance(max_output, bool) or not isinstance(max_output, (int, float)):
        raise UsageError(f"--max-output {max_output!r}: expected a number such as 512")
    if not math.isfinite(max_output) or max_output <= 0:
        raise UsageError(
            f"--max-output {max_output}: must be a positive finite number; pass a limit such "
            "as 512 (outputs with a larger magnitude stay in FP32)"
        )
    if max_reduction_depth is not None and (
        isinstance(max_reduction_depth, bool)
        or not isinstance(max_reduction_depth, int)
        or max_reduction_depth < 1
    ):
        raise UsageError(
            f"--max-reduction-depth {max_reduction_depth}: must be a positive integer; pass "
            "e.g. 4096, or omit it to disable the rule"
        )
    return PrecisionSettings(
        keep_fp32=tuple(keep_fp32),
        keep_fp32_ops=tuple(keep_fp32_ops),
        max_output=float(max_output),
        max_reduction_depth=max_reduction_depth,
        fp32_accumulate=bool(fp32_accumulate),
        keep_io_types=bool(keep_io_types),
        nodes_to_include=tuple(nodes_to_include),
        op_types_to_include=tuple(op_types_to_include),
        init_max=None if init_max is None else float(init_max),
        init_conversion_max_bytes=init_conversion_max_bytes,
        magnitude_io=bool(magnitude_io),
        opset=opset,
    )


def _check_patterns(option: str, patterns: Sequence[str]) -> None:
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as err:
            raise UsageError(
                f"{option} {pattern!r}: bad regular expression ({err}); fix the pattern "
                "(it is a Python regex matched anywhere in the node name)"
            ) from None


def _check_ops(option: str, ops: Sequence[str]) -> None:
    if not ops:
        return
    known = known_op_types()
    for op in ops:
        if op not in known:
            close = difflib.get_close_matches(op, sorted(known), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "use an ONNX op type such as MatMul"
            raise UsageError(
                f"{option} {op!r}: not an ONNX operator type (op types are case sensitive); {hint}"
            )


def check_mode(mode: str) -> None:
    """One message for an unknown mode, whether it comes from the CLI or the Python API."""
    if mode not in LOW_TYPES and mode != "int8":
        raise UsageError(f"--precision {mode!r}: unknown precision; use fp16, bf16 or int8")


def known_op_types() -> frozenset[str]:
    """Every op type any ONNX opset defines; cached because listing every schema is slow."""
    global _KNOWN_OPS
    if _KNOWN_OPS is None:
        import onnx

        _KNOWN_OPS = frozenset(s.name for s in onnx.defs.get_all_schemas_with_history())
    return _KNOWN_OPS
