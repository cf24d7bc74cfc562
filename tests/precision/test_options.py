"""Option checks that fail fast with exit 2, and the settings they record."""

from __future__ import annotations

import pytest

from reprobuild.errors import UsageError

from .helpers import (
    _opts,
)

# ---------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"keep_fp32": ["conv(["]}, r"--keep-fp32 'conv\(\[': bad regular expression"),
        ({"keep_fp32_ops": ["Matmul"]}, r"--keep-fp32-op 'Matmul': not an ONNX operator.*'MatMul'"),
        ({"keep_fp32_ops": ["Frobnicate"]}, "--keep-fp32-op 'Frobnicate': not an ONNX operator"),
        ({"max_output": -1.0}, "--max-output -1.0: must be a positive finite number"),
        ({"max_output": 0.0}, "--max-output 0.0: must be a positive"),
        ({"max_output": float("nan")}, "--max-output nan: must be a positive"),
        ({"max_reduction_depth": -5}, "--max-reduction-depth -5: must be a positive integer"),
        ({"max_reduction_depth": 0}, "--max-reduction-depth 0: must be a positive integer"),
        ({"mode": "int4"}, "--precision 'int4': unknown precision; use fp16, bf16 or int8"),
    ],
)
def test_invalid_options(kw: dict, match: str) -> None:
    with pytest.raises(UsageError, match=match) as exc:
        _opts(**kw)
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value)


def test_valid_options_are_recorded() -> None:
    s = _opts(
        keep_fp32=["^head"],
        keep_fp32_ops=["Softmax", "LayerNormalization"],
        max_output=100,
        max_reduction_depth=4096,
        fp32_accumulate=True,
    )
    assert s.to_dict() == {
        "keep_fp32": ["^head"],
        "keep_fp32_ops": ["Softmax", "LayerNormalization"],
        "max_output": 100.0,
        "max_reduction_depth": 4096,
        "fp32_accumulate": True,
        "keep_io_types": True,
    }
