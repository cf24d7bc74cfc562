"""Reads go in chunks up to the cap: memory follows the file's size, never the cap's.

A 4 GiB inputs cap read with ``fh.read(cap + 1)`` reserved 4 GiB up front, so under
``ulimit -v`` a 24 KB file failed with MemoryError (exit 4). The child process here runs
under a 1 GiB address-space limit, far below the inputs cap.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHILD = """
import resource, sys
from reprobuild.fileio import read_input, read_regular
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
data = read_input(sys.argv[1], "inputs", "inputs file")
assert len(data) == 24_000, len(data)
assert read_regular(sys.argv[1], 8 << 30, "inputs file") == data
print("ok")
"""


def test_a_small_file_reads_under_an_address_space_limit_below_the_cap(tmp_path: Path) -> None:
    small = tmp_path / "in.npz"
    small.write_bytes(b"x" * 24_000)
    r = subprocess.run([sys.executable, "-c", CHILD, str(small)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_the_cap_still_holds(tmp_path: Path, monkeypatch) -> None:
    import pytest

    from reprobuild import fileio
    from reprobuild.errors import UsageError

    monkeypatch.setattr(fileio, "READ_CHUNK", 7)
    big = tmp_path / "big"
    big.write_bytes(b"y" * 100)
    with big.open("rb") as fh:
        assert fileio.read_upto(fh, 100) == b"y" * 100
    with big.open("rb") as fh, pytest.raises(UsageError, match="over the 99-byte limit"):
        fileio.read_capped(fh, 99, big, "inputs")


def test_merge_refuses_an_output_over_the_lock_cap(proj: Path, cli, monkeypatch) -> None:
    from reprobuild.workflow import fleet

    from .helpers import assert_clean, snapshot

    size = (proj / "t.lock").stat().st_size
    monkeypatch.setattr(fleet, "cap", lambda kind: size - 1)  # the output's check only
    before = snapshot(proj)
    r = cli("merge", "t.lock", "--out", "m.lock")
    assert r.code == 2 and "over the" in r.err and "lock limit" in r.err, r
    assert_clean(r, proj, before)


def test_stability_records_share_builds_bound(proj: Path, cli) -> None:
    r = cli("stability", "mlp.onnx", "--records", "51", "-q")
    assert r.code == 2 and "2 to 50 recordings" in r.err, r


def test_stability_deletes_each_recording_when_read(proj: Path, cli, monkeypatch) -> None:
    import shutil

    from reprobuild.workflow import stability

    seen: list[Path] = []
    real = shutil.rmtree

    def rmtree(path, *a, **k):
        seen.append(Path(path))
        return real(path, *a, **k)

    monkeypatch.setattr(stability.shutil, "rmtree", rmtree)
    r = cli("stability", "mlp.onnx", "--records", "3", "-q", "--backend", "reference")
    assert r.code == 0, r
    recordings = [p.name for p in seen if p.parent.name.startswith("reprobuild-stability-")]
    assert recordings == ["r0", "r1", "r2"], seen
