"""The package's shape: importing it is light, and the names other code reads still resolve."""

from __future__ import annotations

import subprocess
import sys

import reprobuild.precision as precision_pkg
from reprobuild.precision import apply, calibration, measure, options, report, rules


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


def test_compat_names_resolve_to_their_modules() -> None:
    assert precision_pkg.apply_plan is apply.apply_plan
    assert precision_pkg.derive_plan is rules.derive_plan
    assert precision_pkg.load_calibration is calibration.load_calibration
    assert precision_pkg.plan_error is measure.plan_error
    assert precision_pkg.validate_options is options.validate_options
    assert precision_pkg.diff_plans is report.diff_plans
    assert {"MATRIX_OPS", "observe_plan", "run_model", "ort_session"} <= set(dir(precision_pkg))


def test_element_type_constants_are_onnx_values() -> None:
    from onnx import TensorProto

    from reprobuild.precision import ops

    assert (ops.FLOAT, ops.FLOAT16, ops.BFLOAT16, ops.DOUBLE) == (
        TensorProto.FLOAT,
        TensorProto.FLOAT16,
        TensorProto.BFLOAT16,
        TensorProto.DOUBLE,
    )
