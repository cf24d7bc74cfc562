"""The precision pass derives, and applies, byte for byte what it did before it was made faster.

``tests/fixtures/precision/plan_goldens.json`` holds, per case of
``scripts/make_plan_goldens.py`` (light model-zoo models with onnx's ``arange`` inputs, the
default options and a set that reaches the name, op, reduction-depth and FP32-accumulation
rules, and two re-weighted models whose weights are initializers), the sha256 of the
derived plan and of the converted model, written by the code before the change. A plan or a
converted model that moved by one byte would change every lock and recording-cache key made
from it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDENS = json.loads((ROOT / "tests/fixtures/precision/plan_goldens.json").read_text())


def _generator():
    spec = importlib.util.spec_from_file_location(
        "make_plan_goldens", ROOT / "scripts" / "make_plan_goldens.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


def test_every_case_has_a_golden() -> None:
    assert sorted(GOLDENS) == sorted(case for case, *_ in GEN.CASES)
    assert len({g["plan"] for g in GOLDENS.values()}) == len(GOLDENS)  # the cases differ


@pytest.mark.slow
@pytest.mark.parametrize("case", [c[0] for c in GEN.CASES])
def test_derived_plan_and_converted_model_are_unchanged(case: str, tmp_path: Path) -> None:
    _, source, name, kw = next(c for c in GEN.CASES if c[0] == case)
    assert GEN.digests(source, name, kw, str(tmp_path)) == GOLDENS[case]
