"""Two recordings of the same model with different key sets (the ``varying-keys`` stand-in).

The whole flow under it runs in ``test_trt_variants.py`` (the recording cache under
``caches/`` carries the lock's keys). Here: a machine without that cache records keys that
are not the lock's, and every command that applies the lock says which keys are new and
which are missing, exits 1, names the fix, and writes nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import reprobuild
from reprobuild.errors import EXIT_DIFFERENT, DriftError
from reprobuild.lock.yamlio import load_lock
from tests.conftest import EXAMPLES
from tests.test_trt_variants import _pin_second_candidate, install_standin


def _convs_with_two_keys(lock_path: Path) -> list[str]:
    names = [e.layer for e in load_lock(lock_path).layers]
    return sorted({n for n in names if n.startswith("conv") and names.count(n) == 2})


def test_a_recording_with_other_keys_is_drift_naming_new_and_missing_keys(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    trt = install_standin(monkeypatch, ("varying-keys",))
    monkeypatch.chdir(tmp_path)
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    base = ("build", "cnn.onnx", "--backend", "tensorrt", "--lock", "t.lock")
    assert cli(*base).code == 0
    assert trt._standin.recordings == 1
    two = _convs_with_two_keys(tmp_path / "t.lock")
    assert len(two) == 1  # one Conv had its second format combination timed
    pinned = _pin_second_candidate(tmp_path / "t.lock")
    locked_keys = set(load_lock(tmp_path / "t.lock").tactic_map())
    # the same machine, with the recording cache: the lock applies, its pin holds
    assert cli(*base, "-o", "same.engine").code == 0
    assert set(load_lock(tmp_path / "t.lock").tactic_map()) == locked_keys
    assert trt._standin.recordings == 1  # from the stored recording cache: no recording
    before = (tmp_path / "t.lock").read_bytes()

    shutil.move(tmp_path / "caches", tmp_path / "kept")  # a fresh machine: lock and model only
    for extra in ((), ("--frozen",)):
        trt._standin.recordings = 1  # the next recording is the second: other keys
        res = cli(*base, "-o", "fresh.engine", *extra)
        assert trt._standin.recordings == 2  # it really recorded again
        assert res.code == EXIT_DIFFERENT, res
        (line,) = res.err.strip().splitlines()[-1:]
        assert "this build's timing-cache keys are not the lock's" in line
        gone = next(k for k in locked_keys if f"missing: {k} (" in line)
        other = "conv1" if two == ["conv2"] else "conv2"
        assert f"1 locked key missing: {gone} ({two[0]})" in line
        assert "1 new key: 0x" in line and f"({other})" in line
        assert "caches/" in line and "--re-record" in line
        assert "Traceback" not in res.err
        assert (tmp_path / "t.lock").read_bytes() == before
        assert not (tmp_path / "fresh.engine").exists()
        assert not any((tmp_path / "caches").glob("*.cache"))  # no cache written either

    # verify on the fresh machine: the same line, from the pinned build
    trt._standin.recordings = 1
    with pytest.raises(DriftError, match="1 locked key missing: ") as err:
        reprobuild.verify(lock="t.lock", rebuilds=1, backend="tensorrt", cache_dir="none")
    assert err.value.exit_code == EXIT_DIFFERENT and "1 new key" in str(err.value)

    # the fix it names: the recording cache back beside the lock
    shutil.rmtree(tmp_path / "caches", ignore_errors=True)
    shutil.move(tmp_path / "kept", tmp_path / "caches")
    assert cli(*base, "-o", "fresh.engine", "--frozen").code == 0
    lock = load_lock(tmp_path / "t.lock")
    assert any(e.pinned and e.layer == pinned for e in lock.layers)


def test_re_record_on_a_machine_with_other_keys_keeps_the_pins(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    """The other fix the line names: re-recording here takes this machine's keys and
    carries the pins whose layer still exists."""
    trt = install_standin(monkeypatch, ("varying-keys",))
    monkeypatch.chdir(tmp_path)
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    base = ("build", "cnn.onnx", "--backend", "tensorrt", "--lock", "t.lock")
    assert cli(*base).code == 0
    pinned = _pin_second_candidate(tmp_path / "t.lock")
    first = set(load_lock(tmp_path / "t.lock").tactic_map())
    shutil.rmtree(tmp_path / "caches")
    trt._standin.recordings = 1
    res = cli(*base, "--re-record")
    assert res.code == 0, res
    lock = load_lock(tmp_path / "t.lock")
    assert set(lock.tactic_map()) != first and trt._standin.recordings == 2
    assert [e.layer for e in lock.layers if e.pinned] == [pinned]
    assert cli(*base, "--frozen", "-o", "again.engine").code == 0


def test_a_replay_that_times_a_key_the_recording_did_not_make_settles_into_the_lock(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    """``replay-adds-combination``: the recording's replay times each Conv's second format
    combination (a miss the strict replay stops). The recording locks those keys from the
    replay's cache once a second replay from it matches; later builds follow that cache.
    The negative control: the same model without the behaviour adds no key."""
    import json

    install_standin(monkeypatch)
    monkeypatch.chdir(tmp_path)
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    base = ("build", "cnn.onnx", "--backend", "tensorrt")
    assert cli(*base, "--lock", "plain.lock", "-o", "plain.engine").code == 0
    plain = json.loads((tmp_path / "plain.engine.report.json").read_text())
    assert plain["replay_added_keys"] == [] and not _convs_with_two_keys(tmp_path / "plain.lock")

    install_standin(monkeypatch, ("replay-adds-combination",))
    shutil.rmtree(tmp_path / "caches")
    res = cli(*base, "--lock", "t.lock", "-o", "t.engine")
    assert res.code == 0, res
    report = json.loads((tmp_path / "t.engine.report.json").read_text())
    added = report["replay_added_keys"]
    assert len(added) == 2 and _convs_with_two_keys(tmp_path / "t.lock") == ["conv1", "conv2"]
    assert set(added) <= set(load_lock(tmp_path / "t.lock").tactic_map())
    assert "the replay of the recording timed 2 keys the recording had not made" in res.err
    (cache_file,) = (tmp_path / "caches").iterdir()  # the replay's cache, with the keys
    from reprobuild.backends.tensorrt.backend import TensorRTBackend

    stored = TensorRTBackend().create_timing_cache(cache_file.read_bytes()).tactic_map()
    assert set(added) <= set(stored)
    before = (tmp_path / "t.lock").read_bytes()
    assert cli(*base, "--lock", "t.lock", "-o", "again.engine", "--frozen").code == 0
    assert (tmp_path / "t.lock").read_bytes() == before
    res = cli("verify", "cnn.onnx", "--lock", "t.lock", "--backend", "tensorrt", "--json")
    assert res.code == 0, res
