"""The hostile suite's shared fixture: a small project (a model, a recorded lock, caches)
in its own folder, the current directory, with crash files kept out of the user's cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import project


@pytest.fixture
def proj(tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "p"
    root.mkdir()
    monkeypatch.chdir(root)
    monkeypatch.setenv("REPROBUILD_CRASH_DIR", str(tmp_path / "crashes"))
    return project(root, cli)
