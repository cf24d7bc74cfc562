"""Numbers out of range: no raw numpy warning reaches a user, and a hand-edited INT8 scale
that no engine could use is refused at its file:line.

numpy's ``RuntimeWarning: overflow encountered in cast`` (a float16 engine fed values above
65504) printed a line of reprobuild's or onnx's source under ``-q``; the fact is now one
``warning:`` line in the product's words, and other library warnings are dropped.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from reprobuild.cli.numwarn import describe

from .helpers import assert_clean, snapshot


def test_overflowing_inputs_give_one_worded_line(proj: Path, cli) -> None:
    r = cli("build", "mlp.onnx", "--lock", "f.lock", "--precision", "fp16", "--backend",
            "reference", "-q", "--out", "f.engine")  # fmt: skip
    assert r.code == 0 and "Warning" not in r.err, r
    x = np.random.default_rng(0).standard_normal((4, 1024)).astype(np.float32)
    x[0, :10] = 3e38  # far past float16's 65504
    np.savez(proj / "huge.npz", input=x)
    r = cli("verify", "--lock", "f.lock", "--inputs", "huge.npz", "-n", "2", "-q")
    assert r.code == 0, r
    assert "RuntimeWarning" not in r.err and ".py:" not in r.err, r
    worded = [ln for ln in r.err.splitlines() if ln.startswith("warning: the computation met")]
    assert len(worded) == 1 and "too large for their data type" in worded[0], r
    assert "65504" in worded[0]
    # a real process: Python's own warning printer is what once showed the raw lines
    from ..conftest import run_cli

    p = run_cli("verify", "--lock", "f.lock", "--inputs", "huge.npz", "-n", "2", "-q", cwd=proj)
    assert p.returncode == 0 and "RuntimeWarning" not in p.stderr, p.stderr
    assert p.stderr.count("warning: the computation met") == 1, p.stderr


def test_describe_keeps_only_numeric_warnings() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("old API", DeprecationWarning, stacklevel=1)
        assert describe(caught) is None
        with np.errstate(divide="warn"):
            np.float32(1) / np.float32(0)
    line = describe(caught)
    assert line is not None and "divisions by zero" in line and "old API" not in line


# ---------------------------------------------------------------- INT8 scales in a lock

SCALES = {
    "subnormal": ("0x1p-140", "is subnormal"),
    "zero": ("0x0.0p+0", "is zero"),
    "negative": ("-0x1.8p-4", "is negative"),
    "nan": ("nan", "is not finite"),
    "inf": ("inf", "is not finite"),
    "huge": ("0x1p+200", "is too large"),
    "beyond-float64": ("0x1p+2000", "is too large"),
    "float32-max": ("0x1.fffffep+127", "is too large"),
    "not-float32": ("0x1.0000000000001p-6", "is not a float32 value"),
}


@pytest.fixture(scope="module")
def int8_lock(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One INT8 lock recorded through the CLI (calibrated on seeded samples)."""
    import shutil

    from ..conftest import EXAMPLES, run_cli

    root = tmp_path_factory.mktemp("int8")
    shutil.copy(EXAMPLES / "mlp.onnx", root / "mlp.onnx")
    samples = np.random.default_rng(0).standard_normal((8, 1024)).astype(np.float32)
    np.savez(root / "cal.npz", input=samples)
    p = run_cli("build", "mlp.onnx", "--lock", "i8.lock", "--precision", "int8",
                "--calibration", "cal.npz", "--calib-method", "minmax", "--backend",
                "reference", "-q", cwd=root)  # fmt: skip
    assert p.returncode == 0, p.stderr
    return (root / "i8.lock").read_text()


@pytest.mark.parametrize("case", sorted(SCALES))
def test_bad_int8_scale_is_refused_at_its_line(proj: Path, cli, int8_lock: str, case: str):
    value, words = SCALES[case]
    lines = int8_lock.splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if re.search(r"scale: \"0x", ln))
    lines[at] = re.sub(r'scale: "[^"]*"', f'scale: "{value}"', lines[at])
    (proj / "h.lock").write_text("".join(lines))
    before = snapshot(proj)
    r = cli("show", "--lock", "h.lock")
    assert r.code == 2, r
    (line,) = r.err.splitlines()
    assert line.startswith(f"error: h.lock:{at + 1}:") and f"scale {value} {words}" in line, r
    assert "restore the recorded value or re-record the lock" in line, r
    assert_clean(r, proj, before)


def test_recorded_scales_load(proj: Path, cli, int8_lock: str) -> None:
    (proj / "i8.lock").write_text(int8_lock)
    assert cli("show", "--lock", "i8.lock").code == 0
