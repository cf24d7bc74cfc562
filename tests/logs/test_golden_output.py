"""``reprobuild log`` prints the same bytes as the goldens captured before the parser was
rewritten for speed (tests/fixtures/log-goldens/README.md says how they were made).

The JSON document and the summary table are what users and scripts read; a parser change
that moves one byte of them on a real TensorRT log is a behaviour change, not a refactor.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import ROOT

FIX = ROOT / "tests" / "fixtures"
GOLDEN = FIX / "log-goldens"
LOGS = sorted((FIX / "trt-logs").glob("*.log")) + sorted((FIX / "logparse").glob("*.log"))


def _rel(path: Path) -> str:
    """The path as the goldens were captured with: relative to the repository root."""
    return path.relative_to(ROOT).as_posix()


def test_every_log_fixture_has_goldens() -> None:
    assert len(LOGS) >= 11
    names = {p.name for p in GOLDEN.iterdir()} - {"README.md"}
    assert names == {f"{p.name}{ext}" for p in LOGS for ext in (".json", ".txt")}


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_log_json_bytes_unchanged(path: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    r = cli("log", _rel(path), "--json")
    assert r.code == 0, r
    assert r.out.encode("utf-8") == (GOLDEN / f"{path.name}.json").read_bytes()
    assert r.err == ""


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_log_summary_bytes_unchanged(path: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    r = cli("log", _rel(path))
    assert r.code == 0, r
    got = (r.out + "--- stderr ---\n" + r.err).encode("utf-8")
    assert got == (GOLDEN / f"{path.name}.txt").read_bytes()


def test_log_json_bytes_through_a_real_process() -> None:
    """The in-process runs above see text; a user's pipe sees bytes: the same ones."""
    path = max(LOGS, key=lambda p: p.stat().st_size)
    proc = subprocess.run(
        [sys.executable, "-m", "reprobuild", "log", _rel(path), "--json"],
        cwd=ROOT,
        capture_output=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (GOLDEN / f"{path.name}.json").read_bytes()
