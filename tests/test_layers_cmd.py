"""``reprobuild layers``, the layer file a build writes, and the precision-plan check in
``build`` and ``verify``: what the engine really runs, against what the lock planned."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import reprobuild
from reprobuild.backends.reference import ReferenceBackend

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "reprobuild" / "examples"
TRT = ROOT / "tests" / "fixtures" / "trt-logs"
REF = ("--backend", "reference")


class OffPlanBackend(ReferenceBackend):
    """A backend that quietly runs ``fc2`` in FP32 although the graph says FP16, the way a
    weakly typed TensorRT build may: only the layer information tells."""

    def build(self, model_path: str, settings: Any, cache: Any, log: Any, **kw: Any) -> Any:
        out = super().build(model_path, settings, cache, log, **kw)
        data = json.loads(out.layer_info)
        for layer in data["Layers"]:
            if layer["Name"] == "fc2":
                for t in (*layer["Inputs"], *layer["Outputs"]):
                    t["Format/Datatype"] = "Row major linear FP32"
        out.layer_info = json.dumps(data)
        return out


@pytest.fixture
def island(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """fp16_middle.onnx (Gemm -> Cast -> FP16 Gemm -> Cast -> Gemm) built and locked."""
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "fp16_middle.onnx"
    shutil.copy(EXAMPLES / "fp16_middle.onnx", model)
    reprobuild.build(model, lock=tmp_path / "t.lock", backend="reference")
    return tmp_path


def by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in data["layers"]}


def test_fp16_island_shows_in_fp16_and_the_rest_in_fp32(island: Path, cli) -> None:
    engine = island / "fp16_middle.engine"
    side = island / "fp16_middle.engine.layers.json"
    assert side.is_file()  # written with the engine, TensorRT's inspector shape
    assert json.loads(side.read_text())["Bindings"] == ["input", "output"]
    r = cli("layers", str(engine), "--json")
    assert r.code == 0, r
    rows = by_name(json.loads(r.out))
    assert [rows[n]["precision"] for n in ("fc1", "fc2", "fc3")] == ["FP32", "FP16", "FP32"]
    assert [t["precision"] for t in rows["fc2"]["inputs"]] == ["FP16"] * 3
    assert rows["fc2"]["kernel"].startswith("ref_gemm_") and "f16" in rows["fc2"]["kernel"]
    assert rows["to_fp16"]["onnx_nodes"] == ["to_fp16"]
    assert json.loads(r.out)["summary"]["by_precision"] == {"FP32": 3, "FP16": 2}
    table = cli("layers", str(side), "--lock", str(island / "t.lock"))
    assert table.code == 0, table
    fc2 = next(line for line in table.out.splitlines() if line.startswith("fc2 "))
    acc = "FP16" if rows["fc2"]["kernel"].endswith("_f16acc") else "FP32"
    assert fc2.split()[:6] == ["fc2", "RefGemm", "FP16", acc, "FP16", "linear"]
    assert "5 layers: FP32 3, FP16 2; 0 reformat layers" in table.out
    assert "precision plan: follows the plan: 3 layers follow, 0 differ" in table.out
    report = json.loads((island / "fp16_middle.engine.report.json").read_text())
    assert report["engine_layers"]["by_precision"] == {"FP32": 3, "FP16": 2}
    assert report["plan_check"]["counts"] == {
        "follows": 3,
        "differs": 0,
        "unmapped": 0,
        "unchecked": 2,
    }


def test_verify_names_the_layer_that_left_the_plan(
    island: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok = reprobuild.verify(lock=island / "t.lock", rebuilds=1, backend="reference", control=False)
    assert ok.follows_plan and ok.plan_check["follows"]
    import reprobuild.backends as backends

    monkeypatch.setattr(backends, "get_backend", lambda name, **kw: OffPlanBackend())
    r = cli("verify", "--lock", str(island / "t.lock"), "-n", "1", "--no-control", *REF)
    assert r.code == 1, r
    assert (
        "build 1: layer 'fc2' runs in FP32 but the precision plan says fp16 (ONNX nodes: fc2)"
        in r.out
    )
    assert "PRECISION PLAN NOT FOLLOWED" in r.out
    j = cli("verify", "--lock", str(island / "t.lock"), "-n", "1", "--no-control", "--json", *REF)
    data = json.loads(j.out)
    assert j.code == 1 and data["follows_plan"] is False and data["reproducible"] is True
    (bad,) = [v for v in data["plan_check"]["layers"] if v["status"] == "differs"]
    assert (bad["layer"], bad["planned"], bad["engine"]) == ("fc2", "fp16", "FP32")


def test_a_locked_build_off_the_plan_fails_and_writes_nothing(island: Path, cli) -> None:
    engine = island / "fp16_middle.engine"
    before = engine.read_bytes()
    (island / "fp16_middle.engine.layers.json").unlink()
    with pytest.raises(reprobuild.errors.DriftError, match=r"layer 'fc2' runs in FP32"):
        reprobuild.build(
            island / "fp16_middle.onnx", lock=island / "t.lock", backend=OffPlanBackend()
        )
    assert engine.read_bytes() == before
    assert not (island / "fp16_middle.engine.layers.json").exists()


def test_layers_diff_of_two_engines(island: Path, cli) -> None:
    engine = island / "fp16_middle.engine"
    same = cli("layers", "diff", str(engine), str(island / "fp16_middle.engine.layers.json"))
    assert same.code == 0 and same.out.startswith("same: 5 layer(s) compared"), same
    other = island / "other.engine"
    reprobuild.build(
        island / "fp16_middle.onnx",
        lock=island / "other.lock",
        out=other,
        backend=ReferenceBackend(timing="prefer:splitk2"),
        cache_dir=island / "other-caches",
    )
    r = cli("layers", "diff", str(engine), str(other), "--json")
    data = json.loads(r.out)
    assert r.code == 1 and not data["same"]
    assert {c["name"] for c in data["changed"]} <= {"fc1", "fc2", "fc3"}
    assert all(set(c["changed"]) == {"kernel", "tactic"} for c in data["changed"])
    assert any("splitk2" in c["b"]["kernel"] for c in data["changed"])


def test_every_fixture_shape_on_the_command_line(cli) -> None:
    r = cli("layers", str(TRT / "trt84_trex_resnet_a100_fp16_exportLayerInfo.json"))
    assert r.code == 0, r
    conv = next(line for line in r.out.splitlines() if line.startswith("Conv_0 + Relu_1 "))
    assert conv.split()[-2:] == ["0xe2222883a6602489", "-"]
    assert r.out.splitlines()[-1] == "36 layers: FP16 23; 13 reformat layers"
    one = cli("layers", str(TRT / "trt1016_cookbook_engineinspector_oneline.log"), "--json")
    rows = by_name(json.loads(one.out))
    assert rows["node_linear_myl5_2"]["tactic"] is None
    assert json.loads(one.out)["bindings"] == ["x", "y", "z"]


def test_log_points_to_layers_for_layer_information(cli) -> None:
    path = TRT / "trt84_trex_resnet_a100_fp16_exportLayerInfo.json"
    r = cli("log", str(path))
    assert r.code == 2 and r.out == ""
    assert f"read it with `reprobuild layers {path}`" in r.err
    assert "Traceback" not in r.err
    one = TRT / "trt1016_cookbook_engineinspector_oneline.log"
    r = cli("log", str(one))
    assert r.code == 0 and "26 engine layer(s)" in r.out
    assert f"`reprobuild layers {one}` prints" in r.err


def test_bad_inputs_are_one_line_exit_2(tmp_path: Path, cli) -> None:
    missing = cli("layers", str(tmp_path / "nope.json"))
    assert missing.code == 2 and "nope.json: cannot read" in missing.err
    engine = tmp_path / "model.engine"
    engine.write_bytes(b"\x00\x01binary TensorRT engine")
    r = cli("layers", str(engine))
    assert r.code == 2 and "model.engine.layers.json" in r.err and "--exportLayerInfo" in r.err
    bad = tmp_path / "bad.json"
    bad.write_text('{"Layers": [3]}')
    assert cli("layers", str(bad)).code == 2
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    r = cli("layers", str(text))
    assert r.code == 2 and "no engine layer information" in r.err
    assert all(len(x.err.strip().splitlines()) == 1 for x in (missing, r))


def test_unnamed_nodes_of_a_converted_plan_map_like_onnx_tensorrt(tmp_path: Path) -> None:
    """Unnamed nodes are ``node_of_<output>`` in the plan and in the engine's Metadata (the
    name onnx-tensorrt gives them), and the conversion's Casts are known, not unmapped."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from reprobuild.lock.plan import PrecisionSettings
    from reprobuild.workflow.request import PrecisionRequest

    w = numpy_helper.from_array(np.full((4, 3), 0.25, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "unnamed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [w],
    )
    model = tmp_path / "unnamed.onnx"
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8  # what opset 17 needs: make_model stamps the installed onnx's newest
    onnx.save(proto, model)
    result = reprobuild.build(
        model,
        lock=tmp_path / "t.lock",
        out=tmp_path / "unnamed.engine",
        backend="reference",
        cache_dir=tmp_path / "caches",
        precision=PrecisionRequest("fp16", PrecisionSettings()),
    )
    report = json.loads(Path(result.report_path).read_text())
    check = report["plan_check"]
    assert check["counts"]["differs"] == 0 and check["counts"]["unmapped"] == 0
    follows = {v["layer"]: v["nodes"] for v in check["layers"] if v["status"] == "follows"}
    assert follows["MatMul_1"] == ["node_of_h"]  # after the inserted input Cast
    assert follows["Relu_2"] == ["node_of_y__fp16"]  # its output renamed by the conversion
    assert {v["planned"] for v in check["layers"]} == {"fp16"}


def test_a_difference_seen_at_recording_fails_only_when_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorRT may fuse a Cast without listing it in Metadata, so the recording itself can
    differ from the plan: that verdict goes into the lock, and later builds fail only on
    a change from it."""
    from reprobuild.lock.yamlio import load_lock

    monkeypatch.chdir(tmp_path)
    model = tmp_path / "fp16_middle.onnx"
    shutil.copy(EXAMPLES / "fp16_middle.onnx", model)
    rec = reprobuild.build(model, lock=tmp_path / "t.lock", backend=OffPlanBackend())
    assert any("layer 'fc2' runs in FP32" in w for w in rec.warnings)
    assert load_lock(tmp_path / "t.lock").precision.engine_differs == ("fc2",)
    locked = reprobuild.build(model, lock=tmp_path / "t.lock", backend=OffPlanBackend())
    assert any("(as at recording)" in w for w in locked.warnings)
    report = reprobuild.verify(
        lock=tmp_path / "t.lock", rebuilds=1, backend=OffPlanBackend(), control=False
    )
    assert report.follows_plan
    # the engine following the plan now is a change for the better: a warning, not drift
    better = reprobuild.build(model, lock=tmp_path / "t.lock", backend="reference")
    assert any("differed from the precision plan at recording" in w for w in better.warnings)
