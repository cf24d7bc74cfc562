"""Is an edited tactic honoured? The probe's ``edits`` question, both ways, its stored
answer, and the one policy a recording takes from it (``probe_store.edit_policy``).

Nothing unproven is on by default: a TensorRT recording writes the tie rule's choices with
``update()`` only with ``--apply-tie-rule`` or a stored ``doctor --probe`` answer that
showed edits honoured on exactly this TensorRT version and GPU.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

import reprobuild
from reprobuild.errors import DriftError
from reprobuild.lock.edit import edit_lock
from reprobuild.lock.yamlio import load_lock
from reprobuild.workflow.probe_edits import KINDS
from reprobuild.workflow.probe_store import ANSWERS, probe_dir, store_answer, stored_answer
from tests.conftest import EXAMPLES
from tests.test_tiebreak_trt import _record, _spy_updates
from tests.test_trt_variants import install_standin


def _identity() -> dict:
    from reprobuild.backends.tensorrt.backend import TensorRTBackend

    return TensorRTBackend().environment().identity_dict()


def _probe(cli, tmp_path: Path) -> tuple[int, dict, Path]:
    bundle = tmp_path / "b.tar.gz"
    res = cli("doctor", "--probe", "--bundle", str(bundle), "--json")
    report = json.loads(res.out)
    return res.code, {a["question"]: a for a in report["answers"]}, bundle


@pytest.mark.parametrize(
    ("behaviours", "observed", "stored"),
    [
        ((), ["default"], "honoured"),
        (("cask-edits-ignored",), ["cask-edits-ignored"], "not-honoured"),
        (("myelin-edits-ignored",), ["myelin-edits-ignored"], "not-honoured"),
        (("keyless-cask", "cask-edits-ignored"), ["cask-edits-ignored"], "not-honoured"),
    ],
)
def test_the_probe_asks_whether_an_edit_is_honoured_for_cask_and_myelin(
    monkeypatch: pytest.MonkeyPatch,
    cli,
    tmp_path: Path,
    behaviours: tuple[str, ...],
    observed: list[str],
    stored: str,
) -> None:
    install_standin(monkeypatch, behaviours)
    monkeypatch.chdir(tmp_path)
    code, answers, bundle = _probe(cli, tmp_path)
    # (an edit not honoured also fails the cycle's own pinned build where that pin is of
    # the kind: true drift, exit 1)
    assert code == 0 or stored == "not-honoured"
    edits = answers["edits"]
    assert edits["result"] == "pass" and edits["observed"] == observed, edits
    for kind in ("cask", "myelin"):  # each kind asked on cnn, with its negative control
        assert f"cnn {kind}: " in edits["detail"]
    assert edits["detail"].count("the unchanged cache ran 0x") >= 2
    for kind in ("cask", "myelin"):
        verdict = "ignored" if f"{kind}-edits-ignored" in behaviours else "honoured"
        assert f"cnn {kind}: {verdict} (" in edits["detail"], (kind, edits["detail"])
    entry = stored_answer(_identity())
    assert entry is not None and entry["edits"] == stored and entry["bundle"] == str(bundle)
    with tarfile.open(bundle) as tf:
        report = json.load(tf.extractfile("probe/report.json"))
        # the engines compared: the unchanged cache's and each edited one's inspector JSON
        engines = {n: json.load(tf.extractfile(f"probe/cnn/edits_{n}.json")) for n in KINDS}
        control = json.load(tf.extractfile("probe/cnn/edits_control.json"))
    assert {a["question"]: a for a in report["answers"]}["edits"]["detail"] == edits["detail"]
    assert all(e["Layers"] for e in (control, *engines.values()))


def test_the_bundle_records_what_a_strict_miss_printed(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    """(d): the strict build's own lines, as TensorRT printed them, not a pattern's guess."""
    install_standin(monkeypatch)
    monkeypatch.chdir(tmp_path)
    code, answers, bundle = _probe(cli, tmp_path)
    assert code == 0
    with tarfile.open(bundle) as tf:
        printed = tf.extractfile("probe/cnn/strict_miss.log").read().decode()
    (error,) = [line for line in printed.splitlines() if "[E]" in line]
    # the stand-in's (invented) wording, passed through whole
    assert error.endswith("Timing cache miss for node " + error.split("for node ")[1])
    assert "Timing cache miss for node" in answers["miss-fails"]["detail"]


def test_no_stored_answer_keeps_the_builders_choices_and_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trt = install_standin(monkeypatch)
    updates = _spy_updates(trt, monkeypatch)
    lock, report = _record(tmp_path, "n")
    ties = report["tie_break"]
    assert updates == [] and ties["written_back"] == 0 and ties["held_back"] > 0
    assert ties["edit_policy"].startswith("no `reprobuild doctor --probe` answer for TensorRT")
    assert str(probe_dir() / ANSWERS) in ties["edit_policy"]
    assert any(ties["edit_policy"] in w for w in report["warnings"])


def test_a_stored_honoured_answer_for_this_target_applies_the_rule(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trt = install_standin(monkeypatch)
    store_answer(_identity(), "honoured", {"cask": "honoured", "myelin": "honoured"}, "b")
    updates = _spy_updates(trt, monkeypatch)
    lock, report = _record(tmp_path, "h")
    ties = report["tie_break"]
    assert updates and ties["written_back"] == ties["changed_from_fastest"] > 0
    assert ties["rebuilt_from_cache"] is True and ties["held_back"] == 0
    assert ties["edit_policy"].startswith("`doctor --probe` showed edited tactics honoured")


@pytest.mark.parametrize("other", ["10.13.3.8", None])
def test_an_answer_for_another_version_or_a_not_honoured_one_is_not_taken(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, other: str | None
) -> None:
    trt = install_standin(monkeypatch)
    if other is None:  # this target, edits found not honoured
        store_answer(_identity(), "not-honoured", {"cask": "ignored", "myelin": "honoured"}, "b")
    else:
        store_answer({**_identity(), "tensorrt_version": other}, "honoured", {}, "b")
    updates = _spy_updates(trt, monkeypatch)
    lock, report = _record(tmp_path, "o")
    ties = report["tie_break"]
    assert updates == [] and ties["written_back"] == 0 and ties["held_back"] > 0
    why = "found edits not-honoured" if other is None else "no `reprobuild doctor --probe`"
    assert why in ties["edit_policy"]


def test_a_probe_that_saw_edits_honoured_turns_the_rule_on_for_its_target(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    trt = install_standin(monkeypatch)
    monkeypatch.chdir(tmp_path)
    res = cli("doctor", "--probe", "--bundle", "b.tar.gz")
    assert res.code == 0 and "note: edits honoured stored in " in res.out, res
    updates = _spy_updates(trt, monkeypatch)
    lock, report = _record(tmp_path, "p")
    assert updates and report["tie_break"]["written_back"] > 0


@pytest.mark.parametrize(
    ("behaviour", "layer"), [("cask-edits-ignored", "conv1"), ("myelin-edits-ignored", "fc")]
)
def test_a_pin_the_builder_does_not_honour_is_drift_naming_the_layer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, behaviour: str, layer: str
) -> None:
    """The cache map still holds the edit; the engine inspector shows the other tactic."""
    install_standin(monkeypatch, (behaviour,))
    model, lock = tmp_path / "cnn.onnx", tmp_path / "t.lock"
    shutil.copy(EXAMPLES / "cnn.onnx", model)
    kw = {"backend": "tensorrt", "cache_dir": tmp_path / "caches"}
    reprobuild.build(model, lock=lock, out=tmp_path / "a.engine", **kw)
    entry = next(e for e in load_lock(lock).layers if e.layer == layer)
    other = next(c for c in entry.candidates if c.tactic != entry.tactic)
    edit_lock(lock, [f"key={entry.key}", f"tactic=0x{other.tactic:x}"])
    before = lock.read_bytes()
    with pytest.raises(DriftError, match=f"layer '{layer}'"):
        reprobuild.build(model, lock=lock, out=tmp_path / "b.engine", **kw)
    assert lock.read_bytes() == before


def test_the_rules_rebuild_falls_back_where_an_edit_is_not_honoured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--apply-tie-rule where MatMul edits are ignored: the rebuild's kernel check fails,
    and the recording keeps the builder's choices with a warning, never a failed recording."""
    install_standin(monkeypatch, ("myelin-edits-ignored",))
    lock, report = _record(tmp_path, "c", apply_tie_rule=True)
    ties = report["tie_break"]
    moved = [x for x in ties["layers"] if x["chosen"] != x["fastest"]]
    assert [x["layer"] for x in moved] == ["fc"], moved
    assert "layer 'fc'" in ties["fallback"] and ties["written_back"] == 0
    assert any("the tie rule's rebuild failed" in w for w in report["warnings"])


def test_verify_never_blames_the_inputs_for_switches_the_builder_did_not_run(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    """Where no edit is honoured, each control build keeps the switch in its cache map but
    runs the locked tactic (the inspector shows it): those changes test nothing, so the
    verdict says the power is unknown, never that the inputs hide the kernels."""
    install_standin(monkeypatch, ("cask-edits-ignored", "myelin-edits-ignored"))
    monkeypatch.chdir(tmp_path)
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    kw = ("--backend", "tensorrt", "--cache-dir", "caches", "-q")
    assert cli("build", "cnn.onnx", "--lock", "t.lock", *kw).code == 0
    res = cli("verify", "--lock", "t.lock", "-n", "1", *kw, "--report", "v.json")
    assert res.code == 0, res
    verdict = [x for x in res.out.splitlines() if x.startswith("REPRODUCIBLE")][0]
    assert verdict.startswith("REPRODUCIBLE BUT UNPROVEN:") and "could be checked" in verdict
    assert "the engine did not run the switched tactic" in verdict
    assert "no power on these inputs" not in verdict
    control = json.loads((tmp_path / "v.json").read_text())["control"]
    assert control["power"] is False and control["probes"]
    assert all(p["error"] and not p["changed"] for p in control["probes"])
    res = cli("verify", "--lock", "t.lock", "-n", "1", *kw, "--require-power")
    assert res.code == 1 and "power is unknown" in res.err, res


def test_doctor_says_what_a_recording_here_does_with_the_tie_rules_choices(
    monkeypatch: pytest.MonkeyPatch, cli
) -> None:
    """Before anything is recorded: kept off without a stored answer, written back with an
    ``honoured`` one for exactly this target; text and JSON say the same."""
    install_standin(monkeypatch)
    res = cli("doctor", "--json")
    edits = json.loads(res.out)["tie_rule_edits"]
    assert res.code == 0 and edits["write"] is False
    assert edits["why"].startswith("no `reprobuild doctor --probe` answer for TensorRT")
    store_answer(_identity(), "honoured", {"cask": "honoured", "myelin": "honoured"}, "b")
    res = cli("doctor")
    assert res.code == 0
    assert "tie rule edits on TensorRT: written back: `doctor --probe` showed" in res.out
