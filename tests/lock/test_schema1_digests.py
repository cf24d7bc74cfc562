"""A section without identity (a schema-1 lock's one target) never receives a digest: its
bits would be claimed for every machine, so the first machine of a kernel family to build
or verify would make every other fail. ``merge`` refuses such a section rather than spread
it into a fleet lock.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from reprobuild.lock.yamlio import load_lock
from tests.conftest import EXAMPLES

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "locks"


def _old(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(GOLDEN / "recorded_cnn.lock", "old.lock")
    shutil.copy(EXAMPLES / "cnn.onnx", "cnn.onnx")


def test_merge_refuses_a_section_without_identity(tmp_path: Path, cli, monkeypatch) -> None:
    _old(tmp_path, monkeypatch)
    before = Path("old.lock").read_bytes()
    r = cli("merge", "old.lock", "--out", "m.lock")
    assert r.code == 2 and "without identity" in r.err, r
    assert "reprobuild build MODEL --lock old.lock (records that machine's target" in r.err
    assert not Path("m.lock").exists() and Path("old.lock").read_bytes() == before


def test_verify_records_no_digest_without_identity(tmp_path: Path, cli, monkeypatch) -> None:
    _old(tmp_path, monkeypatch)
    r = cli(
        "verify", "cnn.onnx", "--lock", "old.lock", "--backend", "reference",
        "-n", "1", "--no-control", "--seed", "3", "--record-digests",
    )  # fmt: skip
    assert "has no identity" in r.err, r
    assert not load_lock("old.lock").outputs
