"""Bits from a replay: the engine a recording leaves and the bits its lock expects come from
a build of the serialized recording cache, as every later locked build is made; the report
says when the recording engine itself gave other bits (the stand-in's ``recording-bits``;
the default stand-in is the negative control)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import reprobuild
from reprobuild.lock.yamlio import load_lock
from tests.conftest import EXAMPLES
from tests.test_trt_variants import install_standin


@pytest.mark.parametrize("behaviours", [(), ("recording-bits",)])
def test_the_locks_bits_come_from_a_replay_of_the_recording_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviours: tuple[str, ...]
) -> None:
    install_standin(monkeypatch, behaviours)
    shutil.copy(EXAMPLES / "mlp.onnx", tmp_path / "mlp.onnx")
    lock, engine = tmp_path / "t.lock", tmp_path / "t.engine"
    kw = {"backend": "tensorrt", "cache_dir": tmp_path / "caches"}
    result = reprobuild.build(tmp_path / "mlp.onnx", lock=lock, out=engine, **kw)
    report = json.loads(Path(f"{engine}.report.json").read_text())
    check = report["recording_vs_replay"]
    (recorded,) = [o.sha256 for o in load_lock(lock).outputs if o.inputs == "seeded:0"]
    assert recorded == check["replay_sha256"]
    differs = any("the recording engine gives other bits" in w for w in result.warnings)
    assert check["same"] is (not behaviours) and differs is bool(behaviours)
    # a later verify (replays only) gives the recorded bits either way
    verified = reprobuild.verify(lock=lock, rebuilds=2, control=False, **kw)
    assert verified.reproducible and verified.matches_recorded is True


def test_a_recording_engine_that_cannot_run_keeps_the_replays_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recording engine's run only compares: when it fails, the lock still records the
    replay's bits and the report says the comparison was not made."""
    from reprobuild.errors import EngineError
    from reprobuild.workflow import build as build_mod

    install_standin(monkeypatch)
    real, runs = build_mod.expected_bits, []

    def second_fails(be, engine, model_path):  # noqa: ANN001, ANN202
        runs.append(engine)
        if len(runs) == 2:  # the recording engine's run, after the replay's
            raise EngineError("no device memory left")
        return real(be, engine, model_path)

    monkeypatch.setattr(build_mod, "expected_bits", second_fails)
    shutil.copy(EXAMPLES / "mlp.onnx", tmp_path / "mlp.onnx")
    lock, engine = tmp_path / "t.lock", tmp_path / "t.engine"
    result = reprobuild.build(
        tmp_path / "mlp.onnx", lock=lock, out=engine, backend="tensorrt", cache_dir=tmp_path / "c"
    )
    check = json.loads(Path(f"{engine}.report.json").read_text())["recording_vs_replay"]
    (recorded,) = [o.sha256 for o in load_lock(lock).outputs if o.inputs == "seeded:0"]
    assert len(runs) == 2 and check["same"] is None and recorded == check["replay_sha256"]
    assert any("could not be run to compare" in w for w in result.warnings)
    assert not any("no expected bits" in w for w in result.warnings)
