"""Plain bad input that once gave a traceback (exit 4, or exit 1): each is now one line
with a documented code. Inputs are generated here; none is a stored fixture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import run_cli
from .helpers import assert_clean, snapshot


def _files(proj: Path) -> None:
    lock = (proj / "t.lock").read_text()
    first_tactic = next(ln for ln in lock.splitlines() if ln.strip().startswith("tactic: "))
    (proj / "big.lock").write_text(lock.replace(first_tactic, "        tactic: " + "9" * 5000))
    (proj / "deep.lock").write_text(lock + "extra: " + "[" * 990 + "]" * 990 + "\n")
    (proj / "merge.lock").write_text(
        "base: &b " + "{a: " * 200 + "1" + "}" * 200 + "\nx:\n  <<: *b\n" + lock
    )
    (proj / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (proj / "deep-report.json").write_text('{"a": ' * 200_000 + "1" + "}" * 200_000)
    layers = {"Layers": [{"Name": "a", "LayerType": "x", "TacticValue": "0x" + "f" * 5000}]}
    (proj / "tv.json").write_text(json.dumps(layers))


CASES = {
    "enormous-integer-in-lock": ("show", "--lock", "big.lock"),
    "990-deep-nesting-in-lock": ("show", "--lock", "deep.lock"),
    "yaml-merge-key-deep": ("show", "--lock", "merge.lock"),
    "verify-negative-seed": ("verify", "--lock", "t.lock", "--seed", "-5", "-n", "1"),
    "build-negative-calibration-seed": ("build", "mlp.onnx", "--lock", "n.lock",
                                        "--precision", "fp16", "--calibration-seed", "-1"),
    "200k-deep-json-inputs": ("verify", "--lock", "t.lock", "--inputs", "deep.json", "-n", "1"),
    "200k-deep-fleet-report": ("fleet", "deep-report.json", "deep-report.json"),
    "5000-digit-tactic-value": ("layers", "tv.json"),
    "lock-name-over-255-bytes": ("build", "mlp.onnx", "--lock", "a" * 300 + ".lock"),
    "out-name-over-255-bytes": ("build", "mlp.onnx", "--lock", "t.lock", "--out", "b" * 300),
    "report-name-over-255-bytes": ("verify", "--lock", "t.lock", "--report", "c" * 300),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_line_refusal(proj: Path, cli, case: str) -> None:
    _files(proj)
    before = snapshot(proj)
    r = cli(*CASES[case], *(("--backend", "reference") if CASES[case][0] == "build" else ()))
    assert r.code in (0, 2), (case, r)  # 0: accepted as the documented right behaviour
    assert "Traceback" not in r.err and "internal error" not in r.err, (case, r)
    assert_clean(r, proj, before)


def test_external_data_outside_the_model_folder(tmp_path: Path, cli, monkeypatch) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    (tmp_path / "m").mkdir()
    monkeypatch.chdir(tmp_path / "m")
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    w.external_data.add(key="location", value="../outside.bin")
    (tmp_path / "outside.bin").write_bytes(np.ones((4, 4), np.float32).tobytes())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "m.onnx")
    r = cli("build", "m.onnx", "--lock", "t.lock", "--backend", "reference")
    assert r.code == 2 and "outside the model's folder" in r.err, r
    assert sorted(p.name for p in Path(".").iterdir()) == ["m.onnx"]


def test_error_with_stdout_full_or_closed(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "reprobuild", "show", "--lock", "nope.lock", "--json"]
    with open("/dev/full", "w") as full:
        p = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert json.loads(p.stderr)["error"]["code"] == 2
    p = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       cwd=tmp_path, pass_fds=(), close_fds=True)  # fmt: skip
    assert p.returncode == 2 and "Traceback" not in p.stderr
    p = subprocess.run(" ".join(args) + " >&-", shell=True, capture_output=True, text=True,
                       cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr


def test_broken_pipe_is_141_not_1(tmp_path: Path) -> None:
    """``| head`` closing early: exit 1 would read as "a difference"."""
    log = tmp_path / "big.log"
    log.write_text("[TRT] [V] start\n" * 200_000)
    proc = subprocess.Popen([sys.executable, "-m", "reprobuild", "log", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert proc.returncode in (0, 141) and "Traceback" not in err, (proc.returncode, err)


def test_bad_override_in_a_real_process(tmp_path: Path) -> None:
    (tmp_path / "t.lock").write_text("schema: 2\n")
    p = run_cli("show", "--lock", "t.lock", cwd=tmp_path, env={"REPROBUILD_MAX_LOCK_BYTES": "abc"})
    assert p.returncode == 2 and p.stderr.startswith("error: REPROBUILD_MAX_LOCK_BYTES"), p
