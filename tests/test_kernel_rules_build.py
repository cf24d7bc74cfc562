"""Kernel rules at work on the reference backend (injected timings): a recording never
keeps a denied candidate, a locked build refuses a lock that runs one, and a rule survives
``--re-record``, ``--frozen`` and ``merge``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import reprobuild
from reprobuild.errors import BuildError, DriftError, UsageError
from reprobuild.lock.edit import edit_lock
from reprobuild.lock.rules import edit_rules
from reprobuild.lock.yamlio import load_lock
from reprobuild.types import BuildSettings, KernelRule
from reprobuild.workflow.fleet import merge_locks

from .conftest import EXAMPLES


def _build(tmp: Path, lock: str, **kw):
    model = tmp / "cnn.onnx"
    if not model.exists():
        shutil.copy(EXAMPLES / "cnn.onnx", model)
    return reprobuild.build(
        model, lock=tmp / lock, out=tmp / f"{lock}.engine", backend="reference",
        cache_dir=tmp / "caches", **kw,
    )  # fmt: skip


def _fc(lock: Path):
    return next(e for e in load_lock(lock).layers if e.layer == "fc")


def test_a_recording_never_keeps_a_denied_candidate(tmp_path: Path) -> None:
    _build(tmp_path, "free.lock")
    chosen = _fc(tmp_path / "free.lock").kernel
    assert chosen is not None
    rule = KernelRule(chosen, "fc")
    _build(tmp_path, "ruled.lock", settings=BuildSettings(deny=(rule,)))
    fc = _fc(tmp_path / "ruled.lock")
    assert fc.kernel != chosen
    assert chosen not in {c.kernel for c in fc.candidates}  # never timed on this backend
    assert load_lock(tmp_path / "ruled.lock").settings.deny == (rule,)
    text = (tmp_path / "ruled.lock").read_text()
    assert f"    - {{kernel: {chosen}, layer: fc}}" in text
    # the other layers were free to choose as before
    free = {e.key: e.tactic for e in load_lock(tmp_path / "free.lock").layers if e.layer != "fc"}
    ruled = load_lock(tmp_path / "ruled.lock").tactic_map()
    assert all(ruled[k] == t for k, t in free.items())


def test_every_candidate_denied_is_a_refusal_naming_the_rule(tmp_path: Path) -> None:
    deny = (KernelRule("ref_gemm_*", "fc"),)
    with pytest.raises(BuildError, match=r"layer 'fc': every one of its \d+ candidates is denied"):
        _build(tmp_path, "none.lock", settings=BuildSettings(deny=deny))
    assert not (tmp_path / "none.lock").exists()


def test_a_locked_build_refuses_a_denied_tactic_until_pinned_or_re_recorded(
    tmp_path: Path,
) -> None:
    lock = tmp_path / "t.lock"
    _build(tmp_path, "t.lock")
    fc = _fc(lock)
    edit_rules(lock, [f"kernel={fc.kernel}", "layer=fc"])
    before = lock.read_bytes()
    for frozen in (False, True):
        with pytest.raises(DriftError) as err:
            _build(tmp_path, "t.lock", frozen=frozen)
        msg = str(err.value)
        assert f"layer 'fc' ({fc.key}) runs tactic 0x{fc.tactic:x}" in msg
        assert f"the rule kernel={fc.kernel} layer=fc denies" in msg
        assert "--re-record" in msg and f"reprobuild pin --lock {lock} key={fc.key}" in msg
        assert err.value.exit_code == 1 and lock.read_bytes() == before
    # verify's rebuilds are locked builds too: refused before any build
    with pytest.raises(DriftError, match=f"the rule kernel={fc.kernel} layer=fc denies"):
        reprobuild.verify(
            tmp_path / "cnn.onnx", lock=lock, backend="reference", rebuilds=1,
            cache_dir=tmp_path / "caches",
        )  # fmt: skip
    assert lock.read_bytes() == before

    # the printed pin is an allowed candidate: the locked build then passes, rule kept
    other = msg.split("tactic=")[-1].split("`")[0]
    edit_lock(lock, [f"key={fc.key}", f"tactic={other}"])
    _build(tmp_path, "t.lock")
    assert _fc(lock).tactic == int(other, 16) and load_lock(lock).settings.deny

    # a pin of the denied tactic: refused by a locked build, dropped by a re-recording
    edit_lock(lock, [f"key={fc.key}", f"tactic=0x{fc.tactic:x}"])
    with pytest.raises(DriftError, match="is pinned to tactic"):
        _build(tmp_path, "t.lock")
    done = _build(tmp_path, "t.lock", re_record=True)
    assert any("pins dropped by a kernel rule" in w for w in done.warnings)
    after = _fc(lock)
    assert after.kernel != fc.kernel and not after.pinned
    assert load_lock(lock).settings.deny == (KernelRule(fc.kernel, "fc"),)

    # --frozen builds it and keeps every byte, the rule included
    kept = lock.read_bytes()
    _build(tmp_path, "t.lock", frozen=True)
    assert lock.read_bytes() == kept


def test_merge_keeps_rules_and_refuses_locks_that_differ_in_them(tmp_path: Path) -> None:
    lock = tmp_path / "t.lock"
    _build(tmp_path, "t.lock", settings=BuildSettings(deny=(KernelRule("*tree8*"),)))
    merged = merge_locks([lock, lock], tmp_path / "m.lock")
    assert merged.settings.deny == (KernelRule("*tree8*"),)
    assert load_lock(tmp_path / "m.lock").settings.deny == merged.settings.deny
    bare = tmp_path / "bare.lock"
    _build(tmp_path, "bare.lock")
    with pytest.raises(UsageError, match="other builder settings"):
        merge_locks([lock, bare], tmp_path / "n.lock")
    assert not (tmp_path / "n.lock").exists()


def test_distributive_independence_is_refused_on_the_reference_backend(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a TensorRT builder flag; the reference backend"):
        _build(tmp_path, "d.lock", settings=BuildSettings(distributive_independence=True))
    assert not (tmp_path / "d.lock").exists()


def test_a_rule_that_empties_one_format_combination_drops_that_key(tmp_path: Path) -> None:
    """conv1's direct key has one candidate: denying it leaves the layer its im2col key
    (the reference builder times none of a denied key's kernels, so the key is not made)."""
    lock = tmp_path / "t.lock"
    _build(tmp_path, "t.lock")
    assert len([e for e in load_lock(lock).layers if e.layer == "conv1"]) == 2
    edit_rules(lock, ["kernel=ref_conv_direct_*", "layer=conv1"])  # per layer: accepted
    with pytest.raises(DriftError, match="ref_conv_direct_"):
        _build(tmp_path, "t.lock")  # the idle key still locks a denied tactic
    _build(tmp_path, "t.lock", re_record=True)
    conv1 = [e for e in load_lock(lock).layers if e.layer == "conv1"]
    assert len(conv1) == 1 and "direct" not in (conv1[0].kernel or "")
    _build(tmp_path, "t.lock", frozen=True)
