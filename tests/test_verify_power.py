"""verify proves that its check could have failed: the positive control and --sensitivity.

The bundled MLP and CNN have outputs that depend on every layer's kernel (the last bits
move), so a single switched tactic shows; a SqueezeNet whose logits spread by ~1e5 has a
saturated softmax (exactly one-hot for any input and any kernel's last bits), so nothing
does, and verify must say so instead of claiming a reproducibility it never tested.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from reprobuild.backends.reference import ReferenceBackend
from reprobuild.lock.yamlio import load_lock
from reprobuild.workflow.build import build
from reprobuild.workflow.control import alternative, bit_difference
from reprobuild.workflow.verify import verify

from .conftest import EXAMPLES

LIGHT = Path(onnx.__file__).parent / "backend/test/data/light"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("mlp.onnx", "cnn.onnx"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    from tests.models import zoo

    saturated = zoo.reweighted_path("squeezenet", tmp_path / "zoo", logit_std=1e5)
    shutil.copy(saturated, tmp_path / "sq.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _record(model: str, lock: str) -> None:
    build(model, lock=lock, out=f"{lock}.engine", backend=ReferenceBackend(), cache_dir="caches")


def test_bit_difference_counts_bits_and_names_outputs() -> None:
    a = {"x": np.array([1.0, 2.0], np.float32), "y": np.zeros(3, np.float32)}
    b = {"x": np.array([1.0, 2.0], np.float32), "y": np.zeros(3, np.float32)}
    assert bit_difference(a, b) == (0, 5 * 32, [])
    b["y"] = np.array([0.0, np.float32(1.401298e-45), 0.0], np.float32)  # lowest bit set
    assert bit_difference(a, b) == (1, 5 * 32, ["y"])
    b["x"] = np.array([1.0, 2.0], np.float64)  # another dtype: every bit counts as changed
    assert bit_difference(a, b) == (2 * 32 + 1, 5 * 32, ["x", "y"])


def test_control_switches_one_layer_and_reports_power(work: Path) -> None:
    _record("cnn.onnx", "t.lock")
    lock = load_lock("t.lock")
    r = verify(lock="t.lock", backend="reference", rebuilds=2)
    assert r.reproducible and r.power is True
    # the first key in lock order that has another candidate and that the engine runs (a
    # Conv runs one of its two keys) already reaches the output
    (probe,) = r.control.probes
    meta = ReferenceBackend().engine_metadata(Path("t.lock.engine").read_bytes())
    running = {m["key"] for m in meta["layers"]}
    first = next(e for e in lock.layers if alternative(e) and e.key in running)
    assert probe.key == first.key and probe.tried == alternative(first)[0] != first.tactic
    assert probe.changed and 0 < probe.bits_flipped < probe.bits_total
    assert 0 < probe.max_abs < 1e-4  # other rounding, same maths
    doc = r.to_json()
    assert doc["power"] is True and doc["control"]["probes"][0]["changed"] is True
    assert "the check has power" in doc["control"]["message"]


def test_sensitivity_maps_every_layer(work: Path, cli) -> None:
    _record("cnn.onnx", "t.lock")
    r = cli(
        "verify", "--lock", "t.lock", "--backend", "reference", "-n", "1", "-q", "--sensitivity"
    )
    assert r.code == 0, r
    # every key with another candidate is switched: the three the engine runs reach the
    # outputs; a Conv's key that the engine does not run cannot
    meta = ReferenceBackend().engine_metadata(Path("t.lock.engine").read_bytes())
    running = {m["key"] for m in meta["layers"]}
    lock = load_lock("t.lock")
    switchable = [e for e in lock.layers if len(e.candidates) > 1]
    idle = [e for e in switchable if e.key not in running]
    n = len(switchable)
    assert f"sensitivity: {n - len(idle)} of {n} layers reach the outputs" in r.out
    r = cli(
        "verify", "--lock", "t.lock", "--backend", "reference", "-n", "1", "-q", "--json",
        "--sensitivity", "--no-control",
    )  # fmt: skip
    doc = json.loads(r.out)
    assert doc["power"] is None and doc["control"] is None
    rows = {p["key"]: p for p in doc["sensitivity"]}
    assert set(rows) == {e.key for e in switchable}
    for e in switchable:
        p = rows[e.key]
        assert p["layer"] == e.layer and p["locked"] == f"0x{e.tactic:x}" and p["error"] is None
        assert p["changed"] == (p["bits_flipped"] > 0) == (e.key in running)


def test_flat_model_has_no_power_and_says_so(work: Path, cli) -> None:
    r = cli("build", "sq.onnx", "--lock", "sq.lock", "--backend", "reference", "-q")
    assert r.code == 0, r
    # One full control (52 builds of SqueezeNet) serves the text verdict and, through
    # --report (the same document --json prints), the JSON fields.
    r = cli(
        "verify", "--lock", "sq.lock", "--backend", "reference", "-n", "1", "-q",
        "--report", "sq.json",
    )  # fmt: skip
    assert r.code == 0, r  # the rebuilds agree: not a failure, but not a proof either
    *_, verdict, where = r.out.strip().splitlines()  # the verdict, then the report's path
    assert where == "report: sq.json", r.out
    assert verdict.startswith("REPRODUCIBLE BUT UNPROVEN:"), r.out
    assert "the check has no power on these inputs" in verdict
    # 26 layers have another candidate: each one's most different candidate, then others,
    # up to the default limit of two builds per layer; the verdict says so
    doc = json.loads(Path("sq.json").read_text())
    possible = sum(len(e.candidates) - 1 for e in load_lock("sq.lock").layers)
    assert doc["power"] is False
    assert doc["control"]["layers_switchable"] == 26 and doc["control"]["changes_tried"] == 52
    assert doc["control"]["changes_possible"] == possible > 52
    assert (
        f"none of the 52 single-tactic changes tried (of {possible} possible) changed the "
        "outputs" in r.out
    )
    assert f"(none of the 52 single-tactic changes tried (of {possible} possible)" in verdict
    assert "the limit of 52 builds (--control-limit) stopped the search" in r.out
    # --require-power fails on a control without power whatever its limit; a limit of 3
    # shows it without another 52 builds (the JSON says the 3 probes found nothing)
    r = cli(
        "verify", "--lock", "sq.lock", "--backend", "reference", "-n", "1", "-q",
        "--require-power", "--control-limit", "3",
    )  # fmt: skip
    assert r.code == 1 and "--require-power: the check has no power" in r.err, r
    r = cli(
        "verify", "--lock", "sq.lock", "--backend", "reference", "-n", "1", "-q",
        "--control-limit", "3", "--json",
    )  # fmt: skip
    doc = json.loads(r.out)
    assert doc["power"] is False and len(doc["control"]["probes"]) == 3


def test_control_is_skipped_when_asked_and_refuses_conflicting_options(work: Path, cli) -> None:
    _record("mlp.onnx", "t.lock")
    r = cli("verify", "--lock", "t.lock", "--backend", "reference", "-n", "1", "-q", "--no-control")
    assert r.code == 0 and "control skipped" in r.out, r
    r = cli(
        "verify", "--lock", "t.lock", "--backend", "reference", "--no-control", "--require-power"
    )
    assert r.code == 2 and "--require-power needs the control" in r.err, r
    r = cli("verify", "--lock", "t.lock", "--backend", "reference", "--control-limit", "0")
    assert r.code == 2 and "--control-limit must be at least 1" in r.err, r


def test_reweighted_squeezenet_has_power_and_bisect_finds_culprits(work: Path, cli) -> None:
    """The same architecture with well-scaled weights: tactics reach the softmax, so verify
    proves something and bisect between two locks names the layers that matter."""
    from tests.models import zoo

    model = zoo.reweighted_path("squeezenet", work)
    base = ("--backend", "reference", "-q")
    assert cli("build", str(model), "--lock", "a.lock", "--ref-timing", "seed:1", *base).code == 0
    r = cli("build", str(model), "--lock", "b.lock", "--ref-timing", "reverse", *base)
    assert r.code == 0, r
    a, b = load_lock("a.lock").tactic_map(), load_lock("b.lock").tactic_map()
    # injected timings: the same layers differ on every run (17 of 26 with these knobs)
    assert a.keys() == b.keys() and sum(a[k] != b[k] for k in a) >= 10
    r = cli("verify", "--lock", "a.lock", "-n", "2", "--json", "--require-power", *base)
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert doc["reproducible"] and doc["power"] is True
    assert doc["control"]["probes"][-1]["bits_flipped"] > 0
    r = cli("bisect", "--lock", "a.lock", "--against", "b.lock", "--json", *base)
    assert r.code == 1, r  # the locks' outputs differ
    doc = json.loads(r.out)
    assert doc["outputs_differ"] and doc["search"] == "all"
    assert doc["message"].startswith("all culprits (every differing layer searched)")
    names = {e.layer for e in load_lock("a.lock").layers}
    assert all(c["layer"] in names and c["tactic_a"] != c["tactic_b"] for c in doc["culprits"])
    every = {c["key"] for c in doc["culprits"]}
    assert len(every) > 1  # several of the differing layers reach the softmax
    r = cli("bisect", "--lock", "a.lock", "--against", "b.lock", "--json", "--first", *base)
    assert r.code == 1, r
    first = json.loads(r.out)
    assert first["search"] == "first" and first["message"].startswith("first culprit only")
    assert {c["key"] for c in first["culprits"]} < every and first["builds"] < doc["builds"]
    r = cli("bisect", "--lock", "a.lock", "--against", "b.lock", *base)
    assert r.code == 1 and "all culprits" in r.out and f"{len(every)} layers" in r.out, r


def test_ranked_alternatives_try_another_accumulation_precision_first() -> None:
    from reprobuild.lock.model import LayerEntry, LockCandidate
    from reprobuild.workflow.alternatives import difference, ranked_alternatives

    names = [
        "ref_conv_im2col_splitk4_f16_f32acc",  # one family with the locked splitk2
        "ref_conv_im2col_splitk2_f16_f32acc",  # locked
        "ref_conv_direct_f16_f32acc",
        "ref_conv_im2col_k16_f16_f16acc",
    ]
    cands = [LockCandidate(i + 1, n) for i, n in enumerate(names)]
    entry = LayerEntry("k", "conv1", 2, names[1], candidates=cands)
    # another accumulation precision (and family) first, then another family, then the rest
    assert [k for _, k in ranked_alternatives(entry)] == [names[3], names[2], names[0]]
    assert difference(names[1], names[0]) == 0
    assert difference(names[1], "ref_conv_im2col_blas_f16_f32acc") == 1  # another scheme
    # TensorRT-style names: the accumulation type sits in the precision words
    a = "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f16_nhwckrsc_tilesize128x128x32"
    b = "sm80_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_tilesize64x64x32"
    assert difference(a, b) == 2 and difference(a, a.replace("128x128", "64x128")) == 0
    no_names = LayerEntry("k", "l", 1, None, candidates=[LockCandidate(t) for t in (3, 1, 2)])
    assert [t for t, _ in ranked_alternatives(no_names)] == [3, 2]  # the lock's order


def test_fp16_cnn_control_tries_fp16_accumulation_first(work: Path, cli) -> None:
    """A random-weight CNN without a dense head in FP16, every layer locked to an FP32-
    accumulating kernel: another FP32-accumulating kernel of conv1 rounds to the same bits
    (the only change an earlier control tried there), one accumulating in FP16 does not."""
    from tests.models.small import conv_only_cnn

    conv_only_cnn(work / "co.onnx")
    base = ("--backend", "reference", "-q")
    r = cli("build", "co.onnx", "--precision", "fp16", "--lock", "co.lock",
            "--ref-timing", "prefer:blas", *base)  # fmt: skip
    assert r.code == 0, r
    lock = load_lock("co.lock")
    conv1 = next(e for e in lock.layers if e.layer == "conv1" and len(e.candidates) > 1)
    assert conv1.kernel.endswith("_f32acc")
    r = cli("verify", "--lock", "co.lock", "-n", "1", "--json", "--sensitivity",
            "--control-limit", "1", "--require-power", *base)  # fmt: skip
    assert r.code == 0, r
    doc = json.loads(r.out)
    (probe,) = doc["control"]["probes"]
    assert probe["layer"] == "conv1" and probe["kernel"].endswith("_f16acc") and probe["changed"]
    assert "the check has power (1 of" in doc["control"]["message"]
    # --sensitivity reuses the control's build of conv1 (same probe) and adds only conv2's
    rows = {p["key"]: p for p in doc["sensitivity"]}
    assert rows[conv1.key] == probe
    assert {p["layer"] for p in doc["sensitivity"]} == {"conv1", "conv2"}
    # the change an earlier control tried (the first other candidate in lock order, FP32
    # accumulation) pinned by hand gives the locked bits: it could not have shown
    first = next(c for c in conv1.candidates if c.tactic != conv1.tactic)
    assert first.kernel.endswith("_f32acc")
    r = cli("pin", f"key={conv1.key}", f"tactic=0x{first.tactic:x}", "--lock", "co.lock")
    assert r.code == 0, r
    r = cli("verify", "--lock", "co.lock", "-n", "1", "--no-control", "--json", *base)
    assert json.loads(r.out)["outputs_sha256"] == doc["outputs_sha256"], r


def test_empty_lock_says_nothing_is_locked(work: Path, cli) -> None:
    from tests.models.small import conv_transpose_only

    conv_transpose_only(work / "ct.onnx")
    base = ("--backend", "reference", "-q")
    r = cli("build", "ct.onnx", "--lock", "ct.lock", *base)
    assert r.code == 0, r
    assert (
        "warning: the lock records 0 layers: the reference backend times only MatMul, Gemm, "
        "Conv layers, and this model's ops (ConvTranspose) are not among them" in r.err
    ), r
    r = cli("verify", "--lock", "ct.lock", "-n", "1", *base)
    assert r.code == 0, r
    verdict = r.out.strip().splitlines()[-1]
    assert verdict.startswith("NOTHING LOCKED:") and "no power" not in r.out, r.out
    r = cli("verify", "--lock", "ct.lock", "-n", "1", "--require-power", *base)
    assert r.code == 1 and "--require-power: nothing is locked" in r.err, r
    doc = json.loads(cli("verify", "--lock", "ct.lock", "-n", "1", "--json", *base).out)
    assert doc["nothing_locked"] is True and doc["power"] is False


def testgroup_testing_finds_every_culprit_or_the_first() -> None:
    """The search on a stand-in for "do these swapped layers change the outputs": layers
    that change them alone are all found; a pair that only changes them together is one
    group; --first stops at the first."""
    from reprobuild.workflow.bisect import group_test

    keys = [f"k{i:02d}" for i in range(16)]
    builds: list[frozenset[str]] = []

    def changes_with(culprits: set[str], pair: set[str]):
        def changes(subset: list[str]) -> bool:
            builds.append(frozenset(subset))
            return bool(culprits & set(subset)) or bool(pair) and pair <= set(subset)

        return changes

    found = group_test(keys, changes_with({"k03", "k07", "k11"}, set()), False, [])
    assert sorted(found) == [["k03"], ["k07"], ["k11"]]
    found = group_test(keys, changes_with({"k13"}, {"k02", "k05"}), False, [])
    assert sorted(found) == [["k02", "k05"], ["k13"]]
    # dense culprits (every layer but two): tested layer by layer once both halves changed
    # the outputs two levels in a row, in fewer builds than splitting down to every layer
    dense = set(keys) - {"k04", "k09"}
    builds.clear()
    found = group_test(keys, changes_with(dense, set()), False, [])
    assert sorted(found) == [[k] for k in sorted(dense)]
    assert len(set(builds)) < 2 * len(keys) - 2
    builds.clear()
    found = group_test(keys, changes_with({"k03", "k07", "k11"}, set()), True, [])
    assert found == [["k03"]] and len(builds) == 8  # two halves at each of 4 levels


def test_a_switched_build_that_raises_is_listed_not_built(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception of the builder itself (not one of reprobuild's errors: a binding that
    throws on an edited tactic, say) in a control build is evidence missing, listed with
    its reason; the rebuilds' verdict stands."""
    from reprobuild.workflow import control

    _record("cnn.onnx", "t.lock")

    def thrown(*_a: object, **_k: object) -> None:
        raise RuntimeError("[TRT] an edited tactic threw")

    monkeypatch.setattr(control, "switched_build", thrown)
    r = verify(lock="t.lock", backend="reference", rebuilds=2)
    assert r.reproducible and r.power is False
    assert r.control.untestable
    assert all(p.error == "RuntimeError: [TRT] an edited tactic threw" for p in r.control.probes)
