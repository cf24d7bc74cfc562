"""Kernel rules in the lock: ``deny`` / ``undeny``, what ``show`` and ``diff`` say of them,
and that a lock without rules keeps its bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reprobuild.errors import UsageError
from reprobuild.lock.diff import diff_locks
from reprobuild.lock.rules import parse_option, parse_rule
from reprobuild.lock.yamlio import dumps_lock, load_lock, loads_lock
from reprobuild.types import BuildSettings, KernelRule

from .conftest import sample_lock


def test_rules_match_whole_names_as_globs() -> None:
    rule = KernelRule("*splitk*", "conv?")
    assert rule.denies("conv1", "gemm_splitk4_x", 1)
    assert not rule.denies("conv12", "gemm_splitk4_x", 1)  # ? is one character
    assert not rule.denies("conv1", "GEMM_SPLITK4", 1)  # case-sensitive
    assert KernelRule("0x1a").denies("any", None, 0x1A)  # a hash where no name is known
    assert parse_option("kernel=k*,layer=fc") == KernelRule("k*", "fc")
    assert parse_rule(["kernel=k"]) == KernelRule("k", "*")
    for bad in (["layer=x"], ["kernel="], ["kernel=a", "kernel=b"], ["tactic=1"]):
        with pytest.raises(UsageError):
            parse_rule(bad)


def test_rules_are_not_in_the_fingerprint_and_absent_when_none() -> None:
    """Keys and caches stay when a rule is added; a lock without rules keeps its bytes."""
    ruled = BuildSettings(deny=(KernelRule("k"),))
    assert ruled.fingerprint() == BuildSettings().fingerprint()
    assert "deny" not in BuildSettings().to_dict()
    assert "distributive_independence" not in BuildSettings().to_dict()
    lock = sample_lock()
    text = dumps_lock(lock)
    assert "deny" not in text and dumps_lock(loads_lock(text)) == text


def test_deny_show_diff_undeny(cli, lock_path: Path, tmp_path: Path) -> None:
    before = lock_path.read_bytes()
    r = cli("deny", "--lock", str(lock_path), "kernel=kern_0", "layer=layer1")
    assert r.code == 0, r
    assert "added rule: deny kernel=kern_0 layer=layer1" in r.out
    # the layer runs the denied kernel now: named, with both fixes
    assert "layer 'layer1'" in r.out and "--re-record" in r.out and "tactic=0x1011" in r.out
    lock = load_lock(lock_path)
    assert lock.settings.deny == (KernelRule("kern_0", "layer1"),)
    assert [e.tactic for e in lock.layers] == [e.tactic for e in load_lock_bytes(before).layers]

    r = cli("show", "--lock", str(lock_path))
    assert "rule: deny kernel=kern_0 layer=layer1" in r.out and "1 denied by a rule" in r.out
    rows = json.loads(cli("show", "--lock", str(lock_path), "--json").out)["layers"]
    assert [row.get("denied") for row in rows] == [None, "kernel=kern_0 layer=layer1", None]
    cands = json.loads(cli("show", "--lock", str(lock_path), "--candidates", "--json").out)
    marked = [(e["layer"], c["kernel"]) for e in cands["layers"] for c in e["candidates"]
              if "denied" in c]  # fmt: skip
    assert marked == [("layer1", "kern_0")]

    old = tmp_path / "old.lock"
    old.write_bytes(before)
    r = cli("diff", str(old), str(lock_path))
    assert r.code == 1 and "rule + deny kernel=kern_0 layer=layer1" in r.out
    d = json.loads(cli("diff", str(old), str(lock_path), "--json").out)
    assert d["rules_added"] == [{"kernel": "kern_0", "layer": "layer1"}]
    assert d["settings_changed"] == ["deny"] and d["differs"]

    again = cli("deny", "--lock", str(lock_path), "kernel=kern_0", "layer=layer1", "--json")
    assert again.code == 0 and json.loads(again.out)["changed"] is False

    r = cli("undeny", "--lock", str(lock_path), "kernel=kern_0")  # layer=* is another rule
    assert r.code == 2 and "no rule kernel=kern_0 layer=* to remove" in r.err
    assert r.err.count("\n") == 1
    r = cli("undeny", "--lock", str(lock_path), "kernel=kern_0", "layer=layer1")
    assert r.code == 0, r
    assert lock_path.read_bytes() == before  # byte for byte: no rules, no section


def load_lock_bytes(data: bytes):
    return loads_lock(data.decode())


def test_deny_refuses_a_rule_that_leaves_a_layer_nothing(cli, lock_path: Path) -> None:
    before = lock_path.read_bytes()
    r = cli("deny", "--lock", str(lock_path), "kernel=kern_*", "layer=layer2")
    assert r.code == 2
    assert "layer 'layer2': every one of its 3 candidates is denied" in r.err
    assert "kernel=kern_* layer=layer2" in r.err and str(lock_path) in r.err
    assert lock_path.read_bytes() == before


def test_a_malformed_rule_in_the_lock_is_one_line(tmp_path: Path) -> None:
    text = dumps_lock(sample_lock()).replace(
        "  input_shapes: {}\n", "  input_shapes: {}\n  deny:\n    - {layer: x}\n"
    )
    with pytest.raises(UsageError, match=r"settings\.deny\[0\]: missing field 'kernel'"):
        loads_lock(text, "bad.lock")


def test_same_lock_counts_rules() -> None:
    """diff's one definition of sameness (merge's too) sees a rule."""
    a, b = sample_lock(), sample_lock()
    b.settings = BuildSettings(deny=(KernelRule("kern_2"),))
    d = diff_locks(a, b)
    assert d.differs and d.rules_added == [KernelRule("kern_2")] and not d.rules_removed
    assert not diff_locks(b, b).differs


def test_build_deny_option_records_rules_and_a_locked_build_keeps_them(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from .conftest import EXAMPLES

    monkeypatch.chdir(tmp_path)
    shutil.copy(EXAMPLES / "mlp.onnx", "m.onnx")
    args = ("build", "m.onnx", "--lock", "t.lock", "--backend", "reference", "-q")
    r = cli(*args, "--deny", "kernel=*tree8*", "--deny", "kernel=*splitk4*,layer=fc*")
    assert r.code == 0, r
    rules = load_lock(tmp_path / "t.lock").settings.deny
    assert rules == (KernelRule("*splitk4*", "fc*"), KernelRule("*tree8*", "*"))
    kept = (tmp_path / "t.lock").read_bytes()
    assert cli(*args).code == 0  # no options: the lock's settings, rules included
    assert cli(*args, "--frozen").code == 0 and (tmp_path / "t.lock").read_bytes() == kept
    # other rules on a locked build are other settings: exit 2, the lock untouched
    r = cli(*args, "--deny", "kernel=*blas*")
    assert r.code == 2 and "builder settings differ from the lock (deny:" in r.err
    r = cli(*args, "--deny", "kernel=a,tactic=b")
    assert r.code == 2 and "--deny: cannot read 'tactic=b'" in r.err
    assert (tmp_path / "t.lock").read_bytes() == kept


def test_the_printed_deny_line_names_exactly_one_kernel(cli, lock_path: Path) -> None:
    from reprobuild.lock.rules import deny_command

    assert deny_command("t.lock", "ref_gemm_splitk4_f32", "fc") == (
        "reprobuild deny --lock t.lock kernel=ref_gemm_splitk4_f32 layer=fc"
    )
    rule = KernelRule.exact("k[1]*", "/a b/MatMul")
    assert rule.denies("/a b/MatMul", "k[1]*", 0) and not rule.denies("/a b/MatMul", "k1x", 0)
    line = deny_command(lock_path, "kern_1", "layer0")
    import shlex

    args = shlex.split(line)[1:]
    assert cli(*args).code == 0
    assert load_lock(lock_path).settings.deny == (KernelRule("kern_1", "layer0"),)
