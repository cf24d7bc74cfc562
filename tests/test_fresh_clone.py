"""A fresh clone (no ``caches/``) rebuilds every lock to the bits its target recorded.

The lock alone must carry what the backend uses to choose (tactics, and each key's time so
the choice between a layer's keys is the recorded one): the recording cache is deleted
before the rebuild, so any choice the lock does not carry is made again from new timings,
and ``verify`` compares the rebuilt engine's outputs with the digest recorded in the lock.
Runs on the reference backend (the example models and a re-weighted zoo model, with
injected timings) and under every TensorRT stand-in behaviour.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import reprobuild
from reprobuild.lock.yamlio import load_lock
from tests.conftest import EXAMPLES
from tests.trt_standin import BEHAVIOURS


def _record_then_fresh_verify(
    model: Path, tmp_path: Path, backend, fresh_backend=None
) -> tuple[str, object]:
    """Record with ``backend``; delete the caches; verify with ``fresh_backend`` (another
    machine's timings: for the reference backend, other injected costs)."""
    lock, caches = tmp_path / "t.lock", tmp_path / "caches"
    reprobuild.build(model, lock=lock, out=tmp_path / "a.engine", cache_dir=caches, backend=backend)
    (recorded,) = [o.sha256 for o in load_lock(lock).outputs if o.inputs == "seeded:0"]
    shutil.rmtree(caches)  # what a fresh clone has: the lock and the model only
    fresh = tmp_path / "fresh-caches"
    report = reprobuild.verify(
        lock=lock, rebuilds=1, control=False, cache_dir=fresh, backend=fresh_backend or backend
    )
    assert load_lock(lock).outputs[0].sha256 == recorded  # verify wrote nothing
    return recorded, report


@pytest.mark.parametrize("name", ["mlp.onnx", "cnn.onnx", "fp16_middle.onnx"])
def test_reference_example_locks(name: str, tmp_path: Path) -> None:
    from reprobuild.backends.reference import ReferenceBackend

    model = tmp_path / name
    shutil.copy(EXAMPLES / name, model)
    here, there = ReferenceBackend(timing="seed:5"), ReferenceBackend(timing="seed:6")
    recorded, report = _record_then_fresh_verify(model, tmp_path, here, there)
    assert report.reproducible and report.matches_recorded is True, report.to_json()
    assert report.recorded_sha256 == recorded


def test_a_reweighted_zoo_lock(tmp_path: Path) -> None:
    """SqueezeNet: 26 Conv layers, each with two keys chosen between by time."""
    from reprobuild.backends.reference import ReferenceBackend
    from tests.models import zoo

    model = zoo.reweighted_path("squeezenet", tmp_path)
    here, there = ReferenceBackend(timing="seed:5"), ReferenceBackend(timing="seed:6")
    recorded, report = _record_then_fresh_verify(model, tmp_path, here, there)
    assert report.reproducible and report.matches_recorded is True, report.to_json()
    # The fresh machine's own timings choose otherwise: only the lock made it agree.
    alone = reprobuild.build(
        model, lock=tmp_path / "alone.lock", out=tmp_path / "x.engine",
        cache_dir=tmp_path / "alone", backend=there,
    )  # fmt: skip
    assert alone.tactic_map != load_lock(tmp_path / "t.lock").tactic_map()
    assert load_lock(tmp_path / "alone.lock").outputs[0].sha256 != recorded


# ``varying-keys`` and ``replay-adds-combination``: a fresh recording makes other keys than
# the lock's, so a clone needs the recording cache beside the lock; without it every command
# says so (tests/test_trt_keysets.py).
OTHER_KEYS = ("varying-keys", "replay-adds-combination")


@pytest.mark.parametrize("variant", ["default", *(b for b in BEHAVIOURS if b not in OTHER_KEYS)])
def test_every_standin_behaviour(variant: str, monkeypatch, tmp_path: Path) -> None:
    from tests.test_trt_variants import install_standin

    install_standin(monkeypatch, () if variant == "default" else (variant,))
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "cnn.onnx"
    shutil.copy(EXAMPLES / "cnn.onnx", model)
    recorded, report = _record_then_fresh_verify(model, tmp_path, "tensorrt")
    assert report.reproducible and report.matches_recorded is True, report.to_json()
