"""Schema-1 reference locks of the test corpus build the engines they lock.

Before targets, a reference lock's keys hashed the flat environment of that time (CPU name,
numerics versions) and gave a Conv one key for all its kernels. Today's keys hash the
target's identity and split a Conv by format, so a schema-1 target keeps its own key scheme
(``ReferenceBackend.for_target``): ``--frozen`` builds it unchanged, a plain build writes no
expected bits (bits need an identity to be claimed for), and ``--re-record`` moves it to
today's keys keeping its pins.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import reprobuild
from reprobuild.errors import DriftError
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
def test_a_schema_1_reference_lock_builds_its_engine_frozen(
    name: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(GOLDEN / f"recorded_{name}.lock", "old.lock")
    before = Path("old.lock").read_bytes()
    old = load_lock("old.lock")
    assert old.schema == 1 and old.layers
    result = reprobuild.build(
        EXAMPLES / f"{name}.onnx", lock="old.lock", out="e.engine", frozen=True,
        backend="reference", cache_dir=tmp_path / "caches",
    )  # fmt: skip
    assert Path("old.lock").read_bytes() == before  # --frozen never rewrites
    assert not result.recorded and result.tactic_map == old.tactic_map()
    engine = _engine_tactics("e.engine")
    assert {e.layer: engine[e.layer] for e in old.layers} == {e.layer: e.tactic for e in old.layers}


def test_a_schema_1_reference_lock_keeps_its_keys_until_re_recorded(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(GOLDEN / "recorded_cnn.lock", "old.lock")
    old = load_lock("old.lock")
    kw = {"backend": "reference", "cache_dir": tmp_path / "caches"}
    model = EXAMPLES / "cnn.onnx"
    plain = reprobuild.build(model, lock="old.lock", out="a.engine", **kw)
    written = load_lock("old.lock")  # a section without identity never receives a digest
    assert not written.outputs and any("has no identity" in w for w in plain.warnings)
    assert written.tactic_map() == old.tactic_map() and not written.others
    again = reprobuild.build(model, lock="old.lock", out="b.engine", frozen=True, **kw)
    assert again.tactic_map == old.tactic_map()
    assert Path("a.engine").read_bytes() == Path("b.engine").read_bytes()
    pinned = {e.layer: e.tactic for e in old.layers if e.pinned}
    assert pinned  # the corpus lock pins conv1: --re-record must keep it
    reprobuild.build(model, lock="old.lock", out="c.engine", re_record=True, **kw)
    new = load_lock("old.lock")
    assert not new.others, "the old target is replaced, not kept beside today's"
    assert new.environment.identity and set(new.tactic_map()) != set(old.tactic_map())
    assert {e.layer: e.tactic for e in new.layers if e.pinned} == pinned
    # conv1 now has two keys; the pin went to the one holding its tactic (hwc: direct), and
    # that key must be the one conv1 runs, here and in every build of the re-recorded lock
    assert _engine_tactics("c.engine")["conv1"] == pinned["conv1"]
    reprobuild.build(model, lock="old.lock", out="d.engine", frozen=True, **kw)
    assert Path("d.engine").read_bytes() == Path("c.engine").read_bytes()


def test_a_lock_whose_keys_match_neither_scheme_is_stale(tmp_path: Path, monkeypatch) -> None:
    """The old scheme is taken from the lock's own advisory fields: a hand-edited CPU name
    gives other keys, and --frozen says the lock is stale rather than building blind."""
    monkeypatch.chdir(tmp_path)
    text = (GOLDEN / "recorded_cnn.lock").read_text().replace('gpu: "AMD EPYC"', 'gpu: "Other"')
    Path("old.lock").write_text(text)
    with pytest.raises(DriftError, match="stale"):
        reprobuild.build(
            EXAMPLES / "cnn.onnx", lock="old.lock", out="e.engine", frozen=True,
            backend="reference", cache_dir=tmp_path / "caches",
        )  # fmt: skip
