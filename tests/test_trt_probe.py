"""``reprobuild doctor --probe`` against the stand-in: exit codes, answers and the bundle."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

import pytest

from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.workflow.probe import BUNDLE_FILES, DEFAULT_MODELS, MODEL_FILES, QUESTIONS
from tests.test_trt_variants import install_standin
from tests.trt_standin import BEHAVIOURS


def _members(bundle: Path) -> set[str]:
    with tarfile.open(bundle) as tf:
        return {m.name for m in tf.getmembers() if m.isfile()}


def test_probe_without_tensorrt_is_one_line_and_exit_3(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setattr(cuda_probe, "probe_cuda", lambda: cuda_probe.CudaInfo())
    res = cli("doctor", "--probe", "--bundle", str(tmp_path / "p.tar.gz"))
    assert res.code == 3, res
    assert res.err.count("\n") == 1 and "doctor --probe needs TensorRT and a GPU" in res.err
    assert "TensorRT is not installed" in res.err and "Traceback" not in res.err
    assert not (tmp_path / "p.tar.gz").exists()


def test_probe_on_the_default_standin_works_and_bundles_everything(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    install_standin(monkeypatch)
    monkeypatch.chdir(tmp_path)
    bundle = tmp_path / "probe.tar.gz"
    res = cli("doctor", "--probe", "--bundle", str(bundle), "--json")
    assert res.code == 0, res
    report = json.loads(res.out)
    assert report["ok"] is True
    assert [a["question"] for a in report["answers"]] == list(QUESTIONS)
    by_q = {a["question"]: a for a in report["answers"]}
    assert all(by_q[q]["result"] == "pass" for q in QUESTIONS if q != "trtexec")
    assert by_q["trtexec"]["result"] == "skipped"  # no trtexec on PATH here
    assert all(a["observed"] == ["default"] for a in report["answers"])
    assert by_q["run"]["detail"] == "host memory (test stand-in)"
    names = _members(bundle)
    expected = {f"probe/{f}" for f in BUNDLE_FILES} | {
        f"probe/{Path(m).stem}/{f}" for m in DEFAULT_MODELS for f in MODEL_FILES
    }
    assert expected <= names, expected - names
    timings = report["timings"]["cnn"]
    assert timings["plain_build_s"] > 0 and timings["reprobuild_overhead_s"] >= 0
    assert not any(n.endswith((".onnx", ".engine")) for n in names)


def test_probe_reports_every_behaviour_it_sees(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    install_standin(monkeypatch, BEHAVIOURS)
    monkeypatch.chdir(tmp_path)
    res = cli("doctor", "--probe", "--bundle", "b.tar.gz")
    assert res.code == 0, res
    for name in BEHAVIOURS:
        assert name in res.out, name
    assert "cycle: works" in res.out
    assert (tmp_path / "b.tar.gz").is_file()


def test_probe_exits_1_naming_the_failed_step(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    trt = install_standin(monkeypatch)
    trt._standin.rekey_ops.add("fc")  # cnn's fc misses the cache on every build
    monkeypatch.chdir(tmp_path)
    res = cli("doctor", "--probe", "--bundle", "b.tar.gz")
    assert res.code == 1, res
    assert "doctor --probe: step 'locked rebuild' failed for cnn" in res.err
    assert "a timing-cache miss" in res.err and "attach b.tar.gz" in res.err
    assert "cycle: FAILED" in res.out and (tmp_path / "b.tar.gz").is_file()


def test_probe_records_an_unexpected_exception_as_a_failed_step(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    from tests.trt_standin import _impl

    install_standin(monkeypatch)

    def broken(self, stream_handle):
        raise RuntimeError("CUDA error 700: an illegal memory access was encountered")

    monkeypatch.setattr(_impl.IExecutionContext, "execute_async_v3", broken)
    monkeypatch.chdir(tmp_path)
    res = cli("doctor", "--probe", "--bundle", "b.tar.gz", "--json")
    assert res.code == 1, res
    report = json.loads(res.out)
    failed = [s for s in report["steps"] if s["ok"] is False]
    # the recording build's run of the engine (the target's expected bits) becomes a
    # warning there; verify needs the outputs, so its step fails with the message
    assert {s["name"] for s in failed} == {"verify"}
    assert "TensorRT failed to run the engine (RuntimeError: CUDA error 700" in failed[0]["detail"]
    assert "Traceback" not in res.err and (tmp_path / "b.tar.gz").is_file()
