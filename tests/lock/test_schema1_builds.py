"""Schema-1 reference locks of the test corpus: verified with their own keys, and upgraded
by the first build.

Before targets, a reference lock's keys hashed the flat environment of that time (CPU name,
numerics versions) and gave a Conv one key for all its kernels. Today's keys hash the
target's identity and split a Conv by format, so a schema-1 target keeps its own key scheme
(``ReferenceBackend.for_target``) where it is only read (``verify``). Its one section has no
identity, so it would claim its tactics and bits for every machine: a plain build records
this machine's target in its place (today's keys, its pins kept, its expected bits), and
``--frozen``, which never writes, refuses (exit 2) naming that fix.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import reprobuild
from reprobuild.backends.reference import ReferenceBackend
from reprobuild.errors import DriftError, UsageError
from reprobuild.lock.yamlio import load_lock
from tests.conftest import EXAMPLES

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "locks"
RECORDED = ["mlp", "cnn", "fp16_middle"]


def _engine_tactics(engine: str) -> dict[str, int]:
    info = json.loads(Path(f"{engine}.layers.json").read_text())
    return {
        layer["Name"]: int(layer["TacticValue"], 16)
        for layer in info["Layers"]
        if "TacticValue" in layer
    }


@pytest.mark.parametrize("name", RECORDED)
def test_a_schema_1_reference_lock_verifies_with_its_own_keys_and_frozen_refuses(
    name: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(GOLDEN / f"recorded_{name}.lock", "old.lock")
    before = Path("old.lock").read_bytes()
    old = load_lock("old.lock")
    assert old.schema == 1 and old.layers
    kw = {"backend": "reference", "cache_dir": tmp_path / "caches"}
    model = EXAMPLES / f"{name}.onnx"
    with pytest.raises(UsageError, match="has no identity .* build once without --frozen"):
        reprobuild.build(model, lock="old.lock", out="e.engine", frozen=True, **kw)
    assert not Path("e.engine").exists()
    result = reprobuild.verify(model, lock="old.lock", rebuilds=1, control=False, **kw)
    assert result.reproducible and not result.builds[0].problems
    assert Path("old.lock").read_bytes() == before  # neither writes


def test_a_plain_build_records_this_machines_target_in_place_keeping_pins(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(GOLDEN / "recorded_cnn.lock", "old.lock")
    old = load_lock("old.lock")
    kw = {"backend": "reference", "cache_dir": tmp_path / "caches"}
    model = EXAMPLES / "cnn.onnx"
    pinned = {e.layer: e.tactic for e in old.layers if e.pinned}
    assert pinned  # the corpus lock pins conv1: the upgrade must keep it
    plain = reprobuild.build(model, lock="old.lock", out="c.engine", **kw)
    assert any("recorded anew as this machine's target" in w for w in plain.warnings)
    new = load_lock("old.lock")
    assert new.schema == 2 and not new.others, "the old target is replaced, not kept beside"
    assert new.environment == ReferenceBackend().environment()
    assert set(new.tactic_map()) != set(old.tactic_map())  # today's keys
    assert [o.inputs for o in new.outputs] == ["seeded:0"]  # bits, now for one identity
    assert {e.layer: e.tactic for e in new.layers if e.pinned} == pinned
    # conv1 now has two keys; the pin went to the one holding its tactic (hwc: direct), and
    # that key must be the one conv1 runs, here and in every build of the upgraded lock
    assert _engine_tactics("c.engine")["conv1"] == pinned["conv1"]
    reprobuild.build(model, lock="old.lock", out="d.engine", frozen=True, **kw)
    assert Path("d.engine").read_bytes() == Path("c.engine").read_bytes()


def test_a_lock_whose_keys_match_neither_scheme_does_not_verify(
    tmp_path: Path, monkeypatch
) -> None:
    """The old scheme is taken from the lock's own advisory fields: a hand-edited CPU name
    gives other keys, and verify says the build is off the lock rather than agreeing blind."""
    monkeypatch.chdir(tmp_path)
    text = (GOLDEN / "recorded_cnn.lock").read_text().replace('gpu: "AMD EPYC"', 'gpu: "Other"')
    Path("old.lock").write_text(text)
    with pytest.raises(DriftError, match="keys are not the lock's"):
        reprobuild.verify(
            EXAMPLES / "cnn.onnx", lock="old.lock", rebuilds=1, control=False,
            backend="reference", cache_dir=tmp_path / "caches",
        )  # fmt: skip
