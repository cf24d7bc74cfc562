"""The crash file's folder in the shared temporary directory cannot be planted: another user
may create the name first (a symlink to their folder, or a folder of their own or open to
all), and the traceback (command line, working directory) must never be written through
it. The folder is private (0700, owned by this user, not a link), or a fresh ``mkdtemp``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reprobuild.cli import crash


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for ``$TMPDIR``, with the user's own crash folders unwritable (the cache
    home is a file), so the temporary directory is where the crash file must go."""
    import tempfile

    tmp = tmp_path / "shared-tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)  # like /tmp: anyone may create names in it
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.delenv("REPROBUILD_CRASH_DIR", raising=False)
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-folder"))
    return tmp


def _save() -> Path:
    try:
        raise RuntimeError("planted bug")
    except RuntimeError as err:
        saved = crash.save_traceback(err, ["show"])
    assert saved is not None and "planted bug" in saved.read_text()
    return saved


def _private(folder: Path) -> bool:
    st = os.lstat(folder)
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.geteuid()
        and stat.S_IMODE(st.st_mode) & 0o077 == 0
    )


def test_a_fresh_folder_is_private(shared: Path) -> None:
    saved = _save()
    assert saved.parent == shared / f"reprobuild-crashes-{os.geteuid()}"
    assert _private(saved.parent)


def test_a_planted_symlink_is_not_followed(shared: Path, tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (shared / f"reprobuild-crashes-{os.geteuid()}").symlink_to(theirs)
    saved = _save()
    assert list(theirs.iterdir()) == [], "the traceback went through the planted link"
    assert saved.parent.parent == shared and _private(saved.parent)


def test_a_folder_open_to_others_is_not_used(shared: Path) -> None:
    planted = shared / f"reprobuild-crashes-{os.geteuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    saved = _save()
    assert list(planted.iterdir()) == [] and _private(saved.parent)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_folder_of_another_user_is_not_used(shared: Path) -> None:
    planted = shared / f"reprobuild-crashes-{os.geteuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, 12345, 12345)
    saved = _save()
    assert list(planted.iterdir()) == [] and _private(saved.parent)


def test_the_shared_folder_is_made_only_when_needed(tmp_path: Path, monkeypatch) -> None:
    """With a writable crash folder of the user's own, nothing is created in $TMPDIR."""
    import tempfile

    tmp = tmp_path / "shared-tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("REPROBUILD_CRASH_DIR", str(tmp_path / "mine"))
    saved = _save()
    assert saved.parent == tmp_path / "mine" and list(tmp.iterdir()) == []
