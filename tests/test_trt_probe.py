"""``reprobuild doctor --probe`` against the stand-in: exit codes, answers and the bundle."""

from __future__ import annotations

import json
import os
import sys
import tarfile
from pathlib import Path

import pytest

from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.workflow.probe import BUNDLE_FILES, DEFAULT_MODELS, MODEL_FILES, QUESTIONS
from tests.test_trt_variants import install_standin
from tests.trt_standin import BEHAVIOURS, EDITS_IGNORED


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
    in_process = ("trtexec", "stable-keys", "key-times")
    assert all(by_q[q]["result"] == "pass" for q in QUESTIONS if q not in in_process)
    assert by_q["trtexec"]["result"] == "skipped"  # no trtexec on PATH here
    assert by_q["key-times"]["result"] == "skipped"  # no layer with several keys here
    # the stand-in lives in this process only: another process cannot build with it
    assert by_q["stable-keys"]["result"] == "skipped"
    assert all(a["action"] for a in report["answers"])
    # the stand-in shares keys between identical layers without the editable flag
    assert "0 of 2 keys shared (1 without the flag)" in by_q["editable-keys"]["detail"]
    assert by_q["miss-fails"]["detail"].startswith("cnn: fails (key 0x")
    assert by_q["tactic-value"]["detail"] == "cnn: 2/2 TacticValues are cache hashes"
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
    # an edit not honoured fails the cycle's pinned build (true drift): tests/test_trt_edits.py
    shown = tuple(b for b in BEHAVIOURS if b not in EDITS_IGNORED)
    install_standin(monkeypatch, shown)
    monkeypatch.chdir(tmp_path)
    res = cli("doctor", "--probe", "--bundle", "b.tar.gz")
    assert res.code == 0, res
    # fixed-format is seen only where a layer's keys are named alike: with keyless-cask and
    # varying-keys they are not, and key-times is skipped (its own test shows it)
    for name in shown:
        assert name in res.out or name == "fixed-format", name
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
    # the recording's replay of its own cache (what the lock's bits come from) misses first
    assert "doctor --probe: step 'record' failed for cnn" in res.err
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


def test_a_strict_attach_tensorrt_raises_on_is_could_not_tell_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    from tests.trt_standin import _impl

    install_standin(monkeypatch)
    attach = _impl.IBuilderConfig.set_timing_cache

    def raising(self, cache, ignore_mismatch):
        if not ignore_mismatch:
            raise RuntimeError("strict attach exploded")
        return attach(self, cache, ignore_mismatch)

    monkeypatch.setattr(_impl.IBuilderConfig, "set_timing_cache", raising)
    monkeypatch.chdir(tmp_path)
    res = cli("doctor", "--probe", "--bundle", "b.tar.gz", "--json")
    assert res.code == 0, res
    (answer,) = [a for a in json.loads(res.out)["answers"] if a["question"] == "strict-attach"]
    assert answer["result"] == "skipped"
    assert answer["detail"].startswith("could not tell (")
    assert (
        "raised in set_timing_cache(ignore_mismatch=False) (RuntimeError: strict attach "
        "exploded)" in answer["detail"]
    )
    assert "Traceback" not in res.err


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_probe_writes_only_its_bundle_and_prints_one_table(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    install_standin(monkeypatch)
    work = tmp_path / "work"
    work.mkdir()
    (work / "mlp.engine").write_bytes(b"the user's own engine")
    (work / "mlp.onnx").write_bytes(b"the user's own model")
    before = _snapshot(work)
    monkeypatch.chdir(work)
    bundle = tmp_path / "b.tar.gz"
    res = cli("doctor", "--probe", "--bundle", str(bundle))
    assert res.code == 0, res
    assert _snapshot(work) == before and sorted(p.name for p in work.iterdir()) == [
        "mlp.engine",
        "mlp.onnx",
    ]
    assert "question" in res.out and "what reprobuild does with it" in res.out
    header = next(line for line in res.out.splitlines() if line.startswith("question"))
    assert header.split(" | ")[1].strip() == "answer"
    assert bundle.is_file()


_FAKE_TRTEXEC = """#!{python}
import json, sys
magic = b"STANDIN-TRT-TIMING-CACHE\\x00"
args = sys.argv[1:]
if {fails_always} or "--errorOnTimingCacheMiss" in args:
    print("[E] [TRT] some wording trtexec prints")
    sys.exit(1)
# without the flag: a build that misses adds its own key to the cache file it writes back
path = next(a.split("=", 1)[1] for a in args if a.startswith("--timingCacheFile="))
data = open(path, "rb").read()
header = json.loads(data[len(magic):].decode())
header["entries"]["0x" + "ab" * 16] = [1, 0.5]
open(path, "wb").write(magic + json.dumps(header).encode())
"""


def _fake_trtexec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails_always: bool) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "trtexec"
    fake.write_text(_FAKE_TRTEXEC.format(python=sys.executable, fails_always=fails_always))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_an_expected_trtexec_miss_is_an_answer_not_a_failure(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    """trtexec cannot set the editable flag, so its keys may differ and
    --errorOnTimingCacheMiss stops it: found structurally (the same build without the flag
    adds keys to the cache), never by its wording, which is recorded: exit 0."""
    install_standin(monkeypatch)
    _fake_trtexec(tmp_path, monkeypatch, fails_always=False)
    monkeypatch.chdir(tmp_path)
    res = cli("doctor", "--probe", "--bundle", "b.tar.gz", "--json")
    assert res.code == 0, res
    by_q = {a["question"]: a for a in json.loads(res.out)["answers"]}
    detail = by_q["trtexec"]["detail"]
    assert "expected: trtexec cannot set EDITABLE_TIMING_CACHE" in detail
    assert "added 1 keys to the cache (0xabab" in detail
    assert "some wording trtexec prints" in detail  # recorded as printed
    members = _members(tmp_path / "b.tar.gz")
    assert "probe/cnn/trtexec.log" in members and "probe/cnn/trtexec_nostrict.log" in members


def test_a_strict_trtexec_failure_that_is_no_miss_fails_the_step(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    """The negative control: trtexec fails with and without the flag, so no key was missed
    (whatever it printed): a failed step, exit 1."""
    install_standin(monkeypatch)
    _fake_trtexec(tmp_path, monkeypatch, fails_always=True)
    monkeypatch.chdir(tmp_path)
    res = cli("doctor", "--probe", "--bundle", "b.tar.gz")
    assert res.code == 1, res
    assert "step 'trtexec --errorOnTimingCacheMiss' failed for cnn" in res.err


def test_a_failed_recording_keeps_its_raw_log_in_the_bundle(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    trt = install_standin(monkeypatch)
    trt._standin.fail_create.add("Runtime")  # the build logs, then the inspector step fails
    monkeypatch.chdir(tmp_path)
    res = cli("doctor", "--probe", "--bundle", "b.tar.gz")
    assert res.code == 1, res
    assert "step 'plain build' failed for cnn" in res.err  # the first failed step
    assert "step cnn: record: FAILED" in res.out
    with tarfile.open(tmp_path / "b.tar.gz") as tf:
        log = tf.extractfile("probe/cnn/recording.log").read().decode()
    assert (
        "Autotuning op" in log and "# the build failed: TensorRT could not create a runtime" in log
    )


def test_the_default_bundle_goes_under_the_cache_folder_never_the_current_one(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    install_standin(monkeypatch)
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.chdir(work)
    res = cli("doctor", "--probe")
    assert res.code == 0, res
    assert list(work.iterdir()) == []  # the current folder is left as it was
    (bundle,) = (cache / "reprobuild" / "probe").glob("reprobuild-probe-*.tar.gz")
    assert f"bundle: {bundle}" in res.out
    first = res.out.splitlines()[0]
    assert first.startswith("TensorRT 10.13.3.9 on NVIDIA A100-SXM4-80GB (compute capability 8.0")
    assert "None" not in first


def test_a_bundle_path_that_cannot_be_written_is_refused_before_any_work(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    trt = install_standin(monkeypatch)
    built = []
    real = trt.Builder.build_serialized_network
    monkeypatch.setattr(
        trt.Builder, "build_serialized_network", lambda *a: built.append(1) or real(*a)
    )
    (tmp_path / "file").write_text("x")
    res = cli("doctor", "--probe", "--bundle", str(tmp_path / "file" / "b.tar.gz"))
    assert res.code == 2 and res.err.strip().count("\n") == 0, res
    assert "cannot write the probe bundle" in res.err and built == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_the_header_names_what_is_unknown() -> None:
    from reprobuild.cli.probe_cmds import header

    line = header({"identity": {"tensorrt_version": "11.4.0.106", "gpu": None}, "advisory": {}})
    assert line.startswith("TensorRT 11.4.0.106 on unknown GPU (compute capability unknown")
    assert "None" not in line and "driver unknown version" in line


@pytest.mark.parametrize(
    ("behaviours", "verdict", "observed"),
    [
        ((), "skipped", ["default"]),  # no layer has two keys: nothing to ask
        (("multi-key",), "pass", ["multi-key"]),  # the engine follows the cached times
        (("multi-key", "fixed-format"), "pass", ["fixed-format"]),  # it does not
    ],
)
def test_the_probe_asks_whether_cached_times_choose_between_a_layers_keys(
    monkeypatch: pytest.MonkeyPatch,
    cli,
    tmp_path: Path,
    behaviours: tuple[str, ...],
    verdict: str,
    observed: list[str],
) -> None:
    install_standin(monkeypatch, behaviours)
    monkeypatch.chdir(tmp_path)
    res = cli("doctor", "--probe", "--bundle", "b.tar.gz", "--json")
    assert res.code == 0, res
    answer = {a["question"]: a for a in json.loads(res.out)["answers"]}["key-times"]
    assert answer["result"] == verdict and answer["observed"] == observed, answer
    if behaviours:  # the unchanged cache (the negative control) ran the other key
        assert "the unchanged cache ran 0x" in answer["detail"]
        moved = "fixed-format" not in behaviours
        assert ("the engine runs 0x" in answer["detail"]) and (
            (answer["detail"].split("the engine runs ")[1][:8])
            != (answer["detail"].split("the unchanged cache ran ")[1][:8])
        ) is moved
