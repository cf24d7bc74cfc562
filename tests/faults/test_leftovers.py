"""A failed or interrupted command leaves no folder it created, and never removes one that
was there before: ``--out sub/dir/x.engine`` where ``sub/dir`` did not exist, a ``--log``
folder (made when the build starts, since the log is written while it runs) and the cache
folder all go again when the build fails; a folder that existed stays, even when empty.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from .helpers import assert_clean, snapshot


def _drift(monkeypatch: pytest.MonkeyPatch) -> None:
    """The locked build fails after its log was staged (the log's folder exists by then)."""
    import reprobuild.workflow.build as build_mod
    from reprobuild.errors import DriftError

    def drift(*_a, **_k):
        raise DriftError("planted drift after the recording build")

    monkeypatch.setattr(build_mod, "pinned_build", drift)


def _fail_first_replace(monkeypatch: pytest.MonkeyPatch, error) -> None:
    """The commit's first rename fails (a full disk) or is interrupted (Ctrl-C): every
    output was staged, so every folder an output needed was made."""
    real = os.replace

    def replace(*args, **kwargs):
        monkeypatch.setattr(os, "replace", real)
        raise error()

    monkeypatch.setattr(os, "replace", replace)


def _disk_full() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


BUILD = ("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q")


def test_failed_build_removes_the_log_folders_it_made(proj: Path, cli, monkeypatch) -> None:
    _drift(monkeypatch)
    before = snapshot(proj)
    r = cli(*BUILD, "--log", "logs/deep/b.log", "--out", "sub/dir/x.engine")
    assert r.code == 1 and "planted drift" in r.err, r
    assert not (proj / "logs").exists() and not (proj / "sub").exists()
    assert_clean(r, proj, before)


@pytest.mark.parametrize("error", [_disk_full, KeyboardInterrupt], ids=["disk-full", "ctrl-c"])
def test_failed_commit_removes_output_and_cache_folders(
    proj: Path, cli, monkeypatch, error
) -> None:
    for f in (proj / "caches").iterdir():
        f.unlink()
    (proj / "caches").rmdir()  # the recording cache's folder is made by this build
    (proj / "keep").mkdir()  # was there before: stays, though empty
    before = snapshot(proj)
    _fail_first_replace(monkeypatch, error)
    r = cli(*BUILD, "--out", "sub/dir/x.engine", "--report", "keep/new/r.json")
    assert r.code == (130 if error is KeyboardInterrupt else 2), r
    assert sorted(p.name for p in proj.iterdir() if p.is_dir()) == ["keep"], r
    assert list((proj / "keep").iterdir()) == []
    assert snapshot(proj) == before


def test_successful_build_keeps_the_folders_it_made(proj: Path, cli) -> None:
    r = cli(*BUILD, "--out", "sub/dir/x.engine", "--log", "logs/b.log")
    assert r.code == 0, r
    assert (proj / "sub/dir/x.engine").is_file() and (proj / "logs/b.log").is_file()


def test_a_folder_filled_meanwhile_is_not_removed(tmp_path: Path) -> None:
    """Only empty folders go: another process's file keeps the folder it put it in."""
    from reprobuild.transaction import Outputs

    with Outputs() as out:
        out.stage_text(tmp_path / "a/b/c.txt", "x", "file")
        (tmp_path / "a/other.txt").write_text("someone else's")
    assert (tmp_path / "a/other.txt").is_file() and not (tmp_path / "a/b").exists()
