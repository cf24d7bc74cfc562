"""The package's shape: importing it, its options and its report loads nothing heavy."""

from __future__ import annotations

import subprocess
import sys


def _loaded_after(code: str) -> set[str]:
    """Heavy modules present in a fresh interpreter after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout.split()
    return {m for m in out if m.split(".")[0] in {"numpy", "onnx", "onnxruntime", "polygraphy"}}


def test_importing_the_package_options_and_report_loads_nothing_heavy() -> None:
    code = (
        "import reprobuild.precision, reprobuild.precision.report, reprobuild.precision.ops\n"
        "from reprobuild.precision.options import validate_options\n"
        "validate_options('fp16', ['^head'], [], 512.0, None, False)"
    )
    assert _loaded_after(code) == set()


def test_element_type_constants_are_onnx_values() -> None:
    from onnx import TensorProto

    from reprobuild.precision import ops

    assert (ops.FLOAT, ops.FLOAT16, ops.BFLOAT16, ops.DOUBLE) == (
        TensorProto.FLOAT,
        TensorProto.FLOAT16,
        TensorProto.BFLOAT16,
        TensorProto.DOUBLE,
    )
