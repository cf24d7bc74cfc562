"""INT8 locks end to end, through the CLI on the reference backend, on models
whose outputs depend on their weights: two re-weighted model-zoo architectures and the
digits CNN trained on real data.

- squeezenet at 64 x 64 (it ends in a global pooling, so a smaller input is the same
  architecture; 16 seeded calibration images in batches of 8);
- shufflenet at its own 224 x 224, calibrated in batches of 1: its Reshapes hold the batch
  size 1 (8 seeded images);
- the digits CNN, calibrated on the first 256 images of its test split in batches of 32.

The zoo files are opset 9; per-channel Q/DQ needs 13, so the fixture converts them
(``zoo.reweighted(..., opset=13)``). Their Conv/Gemm biases are drawn from N(0, 0.1): on a
zero bias, the INT8 tactic that rounds the bias to the int32 grid gives the same bits as
the one that adds it in float, and a control or bisect switching between them sees nothing.

Per case, one recording build (module fixture), then:
a locked rebuild without the calibration data gives the same engine and output bits;
``--frozen`` passes with the same data and refuses other data; ``verify --rebuilds 3``
proves the rebuilds identical with a control that has power; ``bisect`` between the lock
and a copy with one INT8 layer pinned to another tactic names that layer; ``show
--precision`` and ``diff`` show quantized nodes and scale changes.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest

from reprobuild.backends import get_backend
from reprobuild.backends.reference import int8
from reprobuild.backends.reference.prepared import execute_spec, prepare
from reprobuild.lock import load_lock
from reprobuild.precision.qdq import apply_quant_plan
from tests.conftest import INJECTED_SEED, run_cli
from tests.models import digits, zoo


@dataclass(frozen=True)
class Case:
    name: str
    model: Path
    calib: Path  # calibration .npz
    other: Path  # other samples of the same shape (--frozen must refuse them)
    batch: int
    # the zoo cases calibrate by minmax: entropy's 2048-bin threshold search costs ~1 s per
    # tensor in ONNX Runtime, and what these tests lock does not depend on the method
    method: str = "entropy"


def _zoo_case(tmp: Path, name: str, side: int | None, count: int, batch: int) -> Case:
    path = zoo.reweighted_path(name, tmp / "zoo", side=side, opset=13, bias_std=0.1)
    inp, shape = zoo.data_input(onnx.load(str(path)))
    rng = np.random.default_rng(1)
    for file in ("calib", "other"):
        np.savez(tmp / f"{file}.npz", **{inp: rng.random((count, *shape[1:]), np.float32)})
    return Case(name, path, tmp / "calib.npz", tmp / "other.npz", batch, "minmax")


def _digits_case(tmp: Path) -> Case:
    x = digits.held_out_split()[0]
    np.savez(tmp / "calib.npz", input=x[:256])
    np.savez(tmp / "other.npz", input=x[284:540])
    return Case("digits", digits.model_path("cnn"), tmp / "calib.npz", tmp / "other.npz", 32)


def _build_args(case: Case, tmp: Path, lock: str, out: str, *extra: str) -> list[str]:
    return [
        *("build", str(case.model), "--backend", "reference"),
        *("--lock", str(tmp / f"{lock}.lock"), "--out", str(tmp / f"{out}.engine")),
        *("--cache-dir", str(tmp / "caches"), "-q", *extra),
    ]


def _int8(case: Case, calib: Path | None = None) -> tuple[str, ...]:
    data = ("--calibration", str(calib)) if calib is not None else ()
    return ("--precision", "int8", "--calib-batch-size", str(case.batch),
            "--calib-method", case.method, *data)  # fmt: skip


@pytest.fixture(scope="module", params=["squeezenet", "shufflenet", "digits"])
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(case, folder): ``a.lock`` and ``a.engine`` recorded from the calibration data."""
    tmp = tmp_path_factory.mktemp(f"int8-{request.param}")
    case = {
        "squeezenet": lambda: _zoo_case(tmp, "squeezenet", 64, 16, 8),
        "shufflenet": lambda: _zoo_case(tmp, "shufflenet", None, 8, 1),
        "digits": lambda: _digits_case(tmp),
    }[request.param]()
    # a subprocess escapes the suite's injected timings: inject the same ones by the knob
    knob = ("--ref-timing", f"seed:{INJECTED_SEED}")
    done = run_cli(*_build_args(case, tmp, "a", "a", *_int8(case, case.calib), *knob))
    assert done.returncode == 0, done.stderr
    return case, tmp


def _samples(path: Path) -> int:
    with np.load(path, allow_pickle=False) as npz:
        return len(npz[npz.files[0]])


def _feeds(case: Case) -> dict[str, np.ndarray]:
    """One model batch of the calibration data (the zoo models' batch is 1)."""
    data = dict(np.load(case.calib, allow_pickle=False))
    if case.name == "digits":
        return digits.held_out_feeds()
    return {k: v[:1] for k, v in data.items()}


def _run(engine_path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return get_backend("reference").run(engine_path.read_bytes(), feeds)


def test_locked_rebuild_without_calibration_data_gives_the_same_bits(recorded, cli) -> None:
    case, tmp = recorded
    lock = tmp / "a.lock"
    before = lock.read_bytes()
    plan = load_lock(lock).precision
    assert plan is not None and plan.mode == "int8" and plan.quantization is not None
    q = plan.quantization
    count = _samples(case.calib)
    assert (q.method, q.batch_size, q.samples) == (case.method, case.batch, count)
    quantized = [n for n in plan.nodes if n.precision == "int8"]
    assert quantized and all(n.op in ("Conv", "Gemm", "MatMul") for n in quantized)
    assert all(n.rule == "default" for n in quantized)
    # the recording's options without --calibration; and no precision options at all; the
    # data moved away meanwhile: the lock alone must give the graph
    away = case.calib.rename(case.calib.with_suffix(".away"))
    try:
        r = cli(*_build_args(case, tmp, "a", "b", *_int8(case), "--frozen"))
        assert r.code == 0, r
        r = cli(*_build_args(case, tmp, "a", "b2", "--frozen"))
        assert r.code == 0, r
    finally:
        away.rename(case.calib)
    assert lock.read_bytes() == before
    assert (tmp / "a.engine").read_bytes() == (tmp / "b.engine").read_bytes()
    assert (tmp / "b2.engine").read_bytes() == (tmp / "b.engine").read_bytes()
    feeds = _feeds(case)
    a, b = _run(tmp / "a.engine", feeds), _run(tmp / "b.engine", feeds)
    assert a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)
    # what ran is the Q/DQ graph: the outputs are not FP32's, but close to them
    model = onnx.load(str(case.model))
    names = [o.name for o in model.graph.output]
    fp32 = dict(zip(names, zoo.run_onnxruntime(model, feeds, names), strict=True))
    for k in names:
        x, y = a[k].reshape(len(a[k]), -1).astype(np.float64), fp32[k].reshape(len(a[k]), -1)
        assert not np.array_equal(x, y)
        cosine = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
        assert cosine.min() > 0.98, (k, cosine.min())


def test_frozen_passes_with_the_same_data_and_refuses_other_data(recorded, cli) -> None:
    case, tmp = recorded
    before = (tmp / "a.lock").read_bytes()
    r = cli(*_build_args(case, tmp, "a", "c", *_int8(case, case.calib), "--frozen"))
    assert r.code == 0, r
    assert (tmp / "c.engine").read_bytes() == (tmp / "a.engine").read_bytes()
    r = cli(*_build_args(case, tmp, "a", "d", *_int8(case, case.other), "--frozen"))
    assert r.code == 1, r
    assert "other.npz" in r.err and "--frozen refuses" in r.err and r.err.count("\n") == 1
    assert not (tmp / "d.engine").exists() and (tmp / "a.lock").read_bytes() == before


def test_verify_three_rebuilds_are_identical_and_the_control_has_power(recorded, cli) -> None:
    case, tmp = recorded
    r = cli(
        *("verify", "--lock", str(tmp / "a.lock"), "--rebuilds", "3", "--backend", "reference"),
        *("--cache-dir", str(tmp / "caches"), "--json"),
    )
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert doc["reproducible"] is True and doc["rebuilds"] == 3 and doc["differing_outputs"] == []
    shas = [b["output_sha256"] for b in doc["builds"]]
    assert len(shas) == 3 and shas[0] == shas[1] == shas[2]
    assert all(b["drift"] == [] and b["plan_differs"] == [] for b in doc["builds"])
    assert doc["control"]["power"] is True
    lock = load_lock(tmp / "a.lock")
    assert doc["layers"] == len(lock.layers)


def test_bisect_finds_the_int8_layer_whose_tactic_differs(recorded, cli) -> None:
    case, tmp = recorded
    lock = load_lock(tmp / "a.lock")
    # the last INT8 layer with another candidate: nearest the outputs, so it reaches them
    entry = [e for e in lock.layers if "_int8_" in (e.kernel or "") and len(e.candidates) > 1][-1]
    other = next(c for c in entry.candidates if c.tactic != entry.tactic)
    shutil.copy(tmp / "a.lock", tmp / "p.lock")
    pin = cli(
        "pin", f"key={entry.key}", f"tactic=0x{other.tactic:x}", "--lock", str(tmp / "p.lock")
    )
    assert pin.code == 0, pin
    r = cli(*_build_args(case, tmp, "p", "p", *_int8(case), "--frozen"))
    assert r.code == 0, r
    feeds = _feeds(case)
    a, p = _run(tmp / "a.engine", feeds), _run(tmp / "p.engine", feeds)
    assert any(a[k].tobytes() != p[k].tobytes() for k in a)
    r = cli(
        *("bisect", "--lock", str(tmp / "a.lock"), "--against", str(tmp / "p.lock")),
        *("--backend", "reference", "--cache-dir", str(tmp / "caches"), "--json", "-q"),
    )
    assert r.code == 1, r
    doc = json.loads(r.out)
    assert doc["differing_layers"] == 1 and doc["outputs_differ"] is True
    assert doc["culprits"] == [
        {
            "layer": entry.layer,
            "key": entry.key,
            "tactic_a": f"0x{entry.tactic:x}",
            "tactic_b": f"0x{other.tactic:x}",
            "group": 0,
            "alone": True,
        }
    ]
    # diff: one tactic changed, the precision plans the same
    d = cli("diff", str(tmp / "a.lock"), str(tmp / "p.lock"), "--json")
    assert d.code == 1, d
    dj = json.loads(d.out)
    assert [c["layer"] for c in dj["changed"]] == [entry.layer] and dj["precision_changed"] == []


def test_show_precision_lists_quantized_nodes_and_scales(recorded, cli) -> None:
    case, tmp = recorded
    plan = load_lock(tmp / "a.lock").precision
    assert plan is not None and plan.quantization is not None
    r = cli("show", "--lock", str(tmp / "a.lock"), "--precision")
    assert r.code == 0, r
    rows = [line.split()[:4] for line in r.out.splitlines()]
    for n in plan.nodes:
        assert [n.node, n.op, n.precision, n.rule] in rows
    assert "kept FP32: INT8 quantizes only Conv, Gemm and MatMul" in r.out
    q = plan.quantization
    for a in q.activations:
        assert [a.tensor, a.scale.hex(), f"{a.scale:.6g}"] in rows
    n8 = sum(1 for n in plan.nodes if n.precision == "int8")
    assert f"{len(plan.nodes)} nodes: {len(plan.nodes) - n8} fp32, {n8} int8" in r.out
    assert (
        f"int8: {case.method} calibration, batch size {q.batch_size}, {q.samples} samples" in r.out
    )


# not shufflenet: a second recording of it costs 12 s, and the other cases cover diff
@pytest.mark.parametrize("recorded", ["squeezenet", "digits"], indirect=True)
@pytest.mark.parametrize("kind", ["percentile", "keep"])
def test_diff_shows_scale_and_quantized_node_changes(recorded, cli, kind: str) -> None:
    """A second recording with other calibration settings: ``diff`` lists each changed
    scale (hex and decimal) or each node left unquantized, and exits 1."""
    case, tmp = recorded
    plan = load_lock(tmp / "a.lock").precision
    assert plan is not None and plan.quantization is not None
    if kind == "percentile":
        other, extra = dataclasses.replace(case, method="percentile"), ()
    else:
        first = next(n for n in plan.nodes if n.precision == "int8")
        other, extra = case, ("--keep-fp32", f"^{first.node}$")
    r = cli(*_build_args(case, tmp, kind, kind, *_int8(other, case.calib), *extra))
    assert r.code == 0, r
    new = load_lock(tmp / f"{kind}.lock").precision
    assert new is not None and new.quantization is not None
    d = cli("diff", str(tmp / "a.lock"), str(tmp / f"{kind}.lock"), "--json")
    assert d.code == 1, d
    changes = json.loads(d.out)["precision_changed"]
    text = cli("diff", str(tmp / "a.lock"), str(tmp / f"{kind}.lock"))
    assert text.code == 1
    if kind == "percentile":
        assert {
            "kind": "quantization",
            "name": "method",
            "a": repr(case.method),
            "b": "'percentile'",
        } in [{k: c[k] for k in ("kind", "name", "a", "b")} for c in changes]
        sa, sb = plan.quantization.scales(), new.quantization.scales()
        moved = sorted(t for t in sa if sa[t] != sb[t])
        assert moved and [c["name"] for c in changes if c["kind"] == "scale"] == moved
        t = moved[0]
        assert f"scale {t}: {sa[t].hex()} ({sa[t]:.6g}) -> {sb[t].hex()} ({sb[t]:.6g})" in text.out
        got = next(c for c in changes if c["kind"] == "scale" and c["name"] == t)
        assert (got["a_decimal"], got["b_decimal"]) == (sa[t], sb[t])
    else:
        node = [c for c in changes if c["kind"] == "node"]
        detail = (
            f"decided by name (kept FP32: name matches --keep-fp32 '^{first.node}$'), "
            "was default (runs in INT8: no rule kept it in float)"
        )
        assert node == [
            {
                "kind": "node",
                "name": first.node,
                "a": "int8/default",
                "b": "fp32/name",
                "detail": detail,
            }
        ]
        assert f"node {first.node}: int8/default -> fp32/name\n      {detail}\n" in text.out


@pytest.mark.parametrize("recorded", ["squeezenet"], indirect=True)
def test_each_int8_tactic_differs_on_a_zoo_layer(recorded) -> None:
    """Every INT8 tactic of a fused layer of the re-weighted squeezenet gives other bits on
    real data than every other one: the first layer that requantizes (Conv -> Relu -> Q)
    and the first with a float output (the digits layers: tests/test_reference_int8.py)."""
    case, tmp = recorded
    plan = load_lock(tmp / "a.lock").precision
    prepared = prepare(apply_quant_plan(onnx.load(str(case.model)), plan))
    values = dict(prepared.constants)
    values.update(_feeds(case))
    checked = {"requantize": 0, "float": 0}
    for layer in prepared.layers:
        inputs = prepared.gather(layer, values)
        outputs = prepared.run_layer(layer, inputs, None, values)
        values.update(zip(layer.node.output, outputs, strict=False))
        if layer.fusion is None:
            continue
        kind = "float" if layer.fusion.y_scale is None else "requantize"
        if checked[kind]:
            continue
        specs = int8.candidates(layer.op, layer.fusion, has_bias=len(layer.node.input) > 2)
        outs = {s.name: execute_spec(layer, s, inputs) for s in specs}
        names = list(outs)
        assert len(names) >= 3
        for i, x in enumerate(names):
            for y in names[i + 1 :]:
                assert (outs[x] != outs[y]).sum() > 0, (layer.name, x, y)
        checked[kind] += 1
    assert checked == {"requantize": 1, "float": 1}
