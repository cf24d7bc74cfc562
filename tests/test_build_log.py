"""``build --log FILE``: the builder's own log, saved so ``reprobuild log FILE`` reads it.

The log is one of the build's outputs: staged while the build runs, moved into place with
the lock and engine, never written over the model or lock, and absent after a failed build.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import reprobuild
from reprobuild.errors import UsageError
from reprobuild.lock.yamlio import load_lock, save_lock
from reprobuild.transaction import Outputs
from tests.conftest import EXAMPLES


def _model(tmp_path: Path, name: str = "cnn.onnx") -> Path:
    model = tmp_path / name
    shutil.copy(EXAMPLES / name, model)
    return model


def _records(cli, log: Path) -> list[dict]:
    res = cli("log", str(log), "--json")
    assert res.code == 0, res
    return json.loads(res.out)["records"]


def test_reference_build_log_is_read_by_the_log_command(cli, tmp_path: Path) -> None:
    model = _model(tmp_path)
    lock, log = tmp_path / "t.lock", tmp_path / "build.log"
    res = cli("build", str(model), "--lock", str(lock), "--out", str(tmp_path / "m.engine"),
              "--backend", "reference", "--cache-dir", str(tmp_path / "c"), "--log", str(log),
              "-q")  # fmt: skip
    assert res.code == 0, res
    assert f"builder log: {log}" in res.out
    recorded = load_lock(lock).tactic_map()
    records = _records(cli, log)
    # every locked key, with the tactic the lock holds, timed (not from a cache)
    assert {r["key"]: int(r["chosen"], 16) for r in records} == recorded
    assert not any(r["from_cache"] for r in records)
    report = json.loads((tmp_path / "m.engine.report.json").read_text())
    assert report["log_path"] == str(log)

    # A locked build saves the pinned build's log: every key served from the cache.
    again = tmp_path / "locked.log"
    res = cli("build", str(model), "--lock", str(lock), "--out", str(tmp_path / "m.engine"),
              "--backend", "reference", "--cache-dir", str(tmp_path / "c"), "--log", str(again),
              "-q")  # fmt: skip
    assert res.code == 0, res
    cached = _records(cli, again)
    assert cached and all(r["from_cache"] for r in cached)
    assert {int(r["chosen"], 16) for r in cached} <= set(recorded.values())


@pytest.mark.parametrize("target", ["lock", "model", "engine"])
def test_log_over_an_input_or_output_is_refused_and_nothing_changes(
    cli, tmp_path: Path, target: str
) -> None:
    model = _model(tmp_path)
    lock, engine = tmp_path / "t.lock", tmp_path / "m.engine"
    base = ("build", str(model), "--lock", str(lock), "--out", str(engine), "--backend",
            "reference", "--cache-dir", str(tmp_path / "c"), "-q")  # fmt: skip
    assert cli(*base).code == 0
    path = {"lock": lock, "model": model, "engine": engine}[target]
    before = {p: p.read_bytes() for p in (lock, model, engine)}
    res = cli(*base, "--log", str(path))
    assert res.code == 2, res
    lines = res.err.strip().splitlines()
    # outputs are compared in order (lock, engine, ..., log), inputs after them
    pair = {
        "lock": "lock would overwrite the builder log",
        "model": "builder log would overwrite the model",
        "engine": "engine would overwrite the builder log",
    }[target]
    assert lines == [f"error: {path}: the {pair} ({path}); give the outputs paths of their "
                     "own"]  # fmt: skip
    assert {p: p.read_bytes() for p in before} == before


def test_a_failed_build_leaves_no_log(cli, tmp_path: Path) -> None:
    """The log is written with the other outputs: a build that fails writes none of them."""
    model = _model(tmp_path)
    lock, log = tmp_path / "t.lock", tmp_path / "build.log"
    base = ("build", str(model), "--lock", str(lock), "--backend", "reference", "-q",
            "--out", str(tmp_path / "m.engine"), "--cache-dir", str(tmp_path / "c"))  # fmt: skip
    assert cli(*base).code == 0
    edited = load_lock(lock)
    edited.layers = edited.layers[1:]  # the lock no longer lists a layer the model has
    save_lock(edited, lock)
    res = cli(*base, "--frozen", "--log", str(log))
    assert res.code == 1, res
    assert not log.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".build.log")]


def test_staged_lines_are_moved_on_commit_and_removed_on_abort(tmp_path: Path) -> None:
    target = tmp_path / "x.log"
    with Outputs() as out:
        lines = out.stage_lines(target, "builder log")
        lines("first build")
        lines.restart()  # a later build's log replaces the earlier one
        lines("second build")
        assert not target.exists()
        out.commit()
    assert target.read_text() == "second build\n"
    with Outputs() as out:
        out.stage_lines(tmp_path / "y.log", "builder log")("never committed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.log"]


def test_a_write_error_in_the_log_is_one_line_at_commit(tmp_path: Path) -> None:
    class Full:
        """A file whose disk filled up while the builder was logging."""

        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

        def close(self) -> None:
            pass

    target = tmp_path / "x.log"
    with Outputs() as out:
        lines = out.stage_lines(target, "builder log")
        lines._fh.close()
        lines._fh = Full()  # type: ignore[assignment]
        lines("a line")  # held, not raised into the builder's callback
        with pytest.raises(UsageError, match="x.log: cannot write the builder log .No space"):
            out.commit()
    assert list(tmp_path.iterdir()) == []


def test_tensorrt_standin_build_log_is_read_by_the_log_command(
    cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The TensorRT backend's logger writes trtexec-prefixed lines (backends/tensorrt/
    logger.py); the saved file parses like a user's ``trtexec --verbose`` log."""
    from tests.test_trt_variants import install_standin

    install_standin(monkeypatch)
    monkeypatch.chdir(tmp_path)
    model = _model(tmp_path)
    lock, log = tmp_path / "t.lock", tmp_path / "trt.log"
    # band 0: the builder's choice stands, so the log's choices are the lock's (with the
    # tie rule a moved key's log line shows the builder's fastest; docs/stability.md)
    result = reprobuild.build(model, lock=lock, out=tmp_path / "a.engine", backend="tensorrt",
                              cache_dir=tmp_path / "c", log=log,
                              settings=reprobuild.BuildSettings(tie_band=0.0))  # fmt: skip
    assert result.log_path == str(log)
    text = log.read_text()
    assert "] [V] [TRT] Autotuning op " in text
    records = _records(cli, log)
    assert {r["key"]: int(r["chosen"], 16) for r in records if r["key"]} == result.tactic_map
