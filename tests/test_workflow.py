"""End-to-end: build --lock, verify and bisect on the reference backend.

The reference backend really times its kernels; its ``timing`` knob forces different
choices deterministically, standing in for the machine noise of a real GPU build.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from reprobuild.backends.reference import ReferenceBackend
from reprobuild.errors import DriftError, EnvironmentMismatch, UsageError
from reprobuild.lock.yamlio import load_lock, save_lock
from reprobuild.types import Environment
from reprobuild.workflow.bisect import bisect
from reprobuild.workflow.build import build
from reprobuild.workflow.verify import verify

from .conftest import EXAMPLES


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh project folder holding copies of the bundled examples, as cwd."""
    for name in ("mlp.onnx", "cnn.onnx"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _engine_layers(path: Path) -> dict[str, str]:
    meta = ReferenceBackend().engine_metadata(path.read_bytes())
    return {layer["name"]: layer["kernel"] for layer in meta["layers"]}


def _running_entry(lock: str, engine: str):
    """The lock entry of the key a Conv runs in ``engine``, for a Conv that runs an im2col
    key (a direct key has no other candidate to switch to)."""
    meta = ReferenceBackend().engine_metadata(Path(engine).read_bytes())
    entries = {e.key: e for e in load_lock(lock).layers}
    running = [entries[m["key"]] for m in meta["layers"] if m["op"] == "Conv"]
    return next(e for e in running if len(e.candidates) > 1)


def _outputs(engine: Path, seed: int = 0) -> np.ndarray:
    (inp,) = ReferenceBackend().engine_metadata(engine.read_bytes())["inputs"]
    shape = tuple(inp["shape"])
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return ReferenceBackend().run(engine.read_bytes(), {"input": x})["output"]


def _build(model: str, lock: str, out: str, timing: str = "", **kw):
    be = ReferenceBackend(timing=timing)
    return build(model, lock=lock, out=out, backend=be, cache_dir="caches", **kw)


def test_record_writes_lock_report_and_cache(work: Path) -> None:
    r = _build("cnn.onnx", "t.lock", "cnn.engine")
    # each 3x3 Conv has two keys (im2col and direct formats), the Gemm one
    assert r.recorded and r.lock_written and r.layers == 5 and r.timed == 5
    lock = load_lock("t.lock")
    assert sorted(e.layer for e in lock.layers) == ["conv1", "conv1", "conv2", "conv2", "fc"]
    assert all(e.candidate(e.tactic) for e in lock.layers)
    direct = [e for e in lock.layers if e.kernel == "ref_conv_direct_f32"]
    assert sorted(e.layer for e in direct) == ["conv1", "conv2"]
    assert all(len(e.candidates) >= 4 for e in lock.layers if e not in direct)
    assert lock.model.path == "cnn.onnx" and lock.environment.backend == "reference"
    report = json.loads(Path(r.report_path).read_text())
    assert sorted(rec["layer"] for rec in report["records"]) == sorted(e.layer for e in lock.layers)
    # the Gemm's six: four orders, the run-to-run and the batch-dependent kernel
    assert sorted(rec["num_candidates"] for rec in report["records"]) == [1, 1, 4, 4, 6]
    assert len(list(Path("caches").glob("reference-*.cache"))) == 1
    # the engine runs one of each layer's locked kernels: the one of its cheapest key
    engine = _engine_layers(Path("cnn.engine"))
    for name, kernel in engine.items():
        keys = [e for e in lock.layers if e.layer == name]
        assert kernel in {e.kernel for e in keys}


def test_lock_reproduces_under_different_timings(work: Path) -> None:
    _build("mlp.onnx", "t.lock", "a.engine", timing="seed:1")
    lock_bytes = Path("t.lock").read_bytes()
    shutil.rmtree("caches")  # no warm cache: the recording step runs under other timings
    r = _build("mlp.onnx", "t.lock", "b.engine", timing="reverse")
    assert not r.recorded and r.timed == 0 and r.cache_hits == 2
    assert Path("t.lock").read_bytes() == lock_bytes
    assert _engine_layers(Path("a.engine")) == _engine_layers(Path("b.engine"))
    assert _outputs(Path("a.engine")).tobytes() == _outputs(Path("b.engine")).tobytes()


def test_without_a_lock_timings_change_the_bits(work: Path) -> None:
    """The problem reprobuild solves: noise picks other kernels, other bits come out.

    Each build's timings prefer another of fc1's candidates, so the kernels differ by
    construction; seeded timings would not do: their choices follow the keys, which name the
    machine's BLAS, and two seeds gave the same kernels on another machine."""
    _build("mlp.onnx", "t.lock", "t.engine")
    fc1 = next(e for e in load_lock("t.lock").layers if e.layer == "fc1")
    assert len(fc1.candidates) > 1
    outs = []
    for i, c in enumerate(fc1.candidates):
        _build("mlp.onnx", f"{i}.lock", f"{i}.engine", timing=f"prefer:{c.kernel}")
        assert _engine_layers(Path(f"{i}.engine"))["fc1"] == c.kernel
        outs.append(_outputs(Path(f"{i}.engine")))
    assert len({o.tobytes() for o in outs}) > 1  # other kernels, other bits ...
    for o in outs[1:]:
        np.testing.assert_allclose(o, outs[0], rtol=1e-4, atol=1e-5)  # ... same maths


def test_pin_then_build_uses_the_pinned_kernel(work: Path, cli) -> None:
    _build("mlp.onnx", "t.lock", "a.engine")
    fc1 = next(e for e in load_lock("t.lock").layers if e.layer == "fc1")
    other = next(c for c in fc1.candidates if c.tactic != fc1.tactic)
    r = cli("pin", "layer=fc1", f"tactic={other.kernel}", "--lock", "t.lock")
    assert r.code == 0, r
    r = cli(
        "build", "mlp.onnx", "--lock", "t.lock", "-o", "b.engine", "--backend", "reference", "-q"
    )
    assert r.code == 0, r
    assert "1 pinned" in r.out
    assert _engine_layers(Path("b.engine"))["fc1"] == other.kernel
    assert _outputs(Path("a.engine")).tobytes() != _outputs(Path("b.engine")).tobytes()


def test_frozen_with_stale_lock_fails_and_writes_nothing(work: Path, cli) -> None:
    _build("cnn.onnx", "t.lock", "cnn.engine")
    lock = load_lock("t.lock")
    lock.layers = [e for e in lock.layers if e.layer != "conv2"]  # both of its keys
    save_lock(lock, "t.lock")
    before = Path("t.lock").read_bytes()
    engine_before = Path("cnn.engine").read_bytes()
    r = cli(
        "build",
        "cnn.onnx",
        "--lock",
        "t.lock",
        "--backend",
        "reference",
        "--frozen",
        "-q",
        "-o",
        "cnn.engine",
    )
    assert r.code == 1, r
    assert "stale: 2 layers missing from the lock" in r.err and "--frozen" in r.err
    assert Path("t.lock").read_bytes() == before
    assert Path("cnn.engine").read_bytes() == engine_before
    # Without --frozen the lock is brought up to date, like `cargo build` does.
    r = cli("build", "cnn.onnx", "--lock", "t.lock", "--backend", "reference", "-q")
    assert r.code == 0, r
    names = sorted(e.layer for e in load_lock("t.lock").layers)
    assert names == ["conv1", "conv1", "conv2", "conv2", "fc"]


def test_frozen_without_lock_is_usage_error(work: Path, cli) -> None:
    r = cli("build", "cnn.onnx", "--lock", "none.lock", "--backend", "reference", "--frozen")
    assert r.code == 2 and "--frozen never creates one" in r.err
    assert not Path("none.lock").exists()


def test_lock_for_another_model_is_exit_2(work: Path, cli) -> None:
    _build("cnn.onnx", "t.lock", "cnn.engine")
    before = Path("t.lock").read_bytes()
    r = cli("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q")
    assert r.code == 2
    assert "recorded for model cnn.onnx" in r.err and "delete the lock to re-record" in r.err
    assert Path("t.lock").read_bytes() == before


def test_changed_setting_is_exit_2(work: Path, cli) -> None:
    _build("cnn.onnx", "t.lock", "cnn.engine")
    r = cli("build", "cnn.onnx", "--lock", "t.lock", "--backend", "reference", "--opt-level", "4")
    assert r.code == 2 and "optimization_level: 3 -> 4" in r.err


def test_lock_from_another_environment_is_exit_3_with_frozen(work: Path, cli) -> None:
    """A lock whose only target is another machine's: --frozen and verify refuse (exit 3,
    naming the target and the difference); a plain build records this machine's target
    beside it and leaves the other section as it was."""
    _build("cnn.onnx", "t.lock", "cnn.engine")
    lock = load_lock("t.lock")
    env = lock.environment
    lock.environment = Environment.make(
        env.backend, {**env.identity_dict(), "blas_kernels": "Elsewhere"}, env.advisory_dict()
    )
    other = lock.target_name
    save_lock(lock, "t.lock")
    before = Path("t.lock").read_bytes()
    r = cli("build", "cnn.onnx", "--lock", "t.lock", "--backend", "reference", "-q", "--frozen")
    assert r.code == 3
    assert f"no target for this machine ({ReferenceBackend().environment().name})" in r.err
    assert f"{other}: blas_kernels: lock 'Elsewhere', here " in r.err
    assert "--frozen never adds one" in r.err
    r = cli("verify", "--lock", "t.lock", "--backend", "reference", "-q", "-n", "1")
    assert r.code == 3 and other in r.err
    assert Path("t.lock").read_bytes() == before
    r = cli("build", "cnn.onnx", "--lock", "t.lock", "--backend", "reference", "-q")
    assert r.code == 0, r
    after = load_lock("t.lock")
    assert sorted(after.target_names()) == sorted([other, ReferenceBackend().environment().name])
    assert next(t for t in after.targets() if t.name == other).layers == lock.layers


def test_lock_from_another_backend_is_exit_3(work: Path) -> None:
    _build("cnn.onnx", "t.lock", "cnn.engine")
    lock = load_lock("t.lock")
    lock.environment = Environment.make("tensorrt", {"tensorrt_version": "10.13.3"})
    save_lock(lock, "t.lock")
    with pytest.raises(EnvironmentMismatch, match="pass --backend tensorrt"):
        _build("cnn.onnx", "t.lock", "cnn.engine")


def test_corrupted_cache_is_rerecorded_not_trusted(work: Path) -> None:
    _build("cnn.onnx", "t.lock", "a.engine")
    (cache_file,) = Path("caches").glob("*.cache")
    data = bytearray(cache_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cache_file.write_bytes(bytes(data))
    r = _build("cnn.onnx", "t.lock", "b.engine", timing="reverse")
    assert any("ignored timing cache" in w and "re-recording" in w for w in r.warnings), r.warnings
    assert _engine_layers(Path("a.engine")) == _engine_layers(Path("b.engine"))
    # The re-recorded cache replaced the corrupted one and loads again.
    ReferenceBackend().create_timing_cache(cache_file.read_bytes())


def test_verify_passes_on_a_good_lock(work: Path, cli) -> None:
    _build("cnn.onnx", "t.lock", "cnn.engine")
    r = cli(
        "verify",
        "--lock",
        "t.lock",
        "--backend",
        "reference",
        "--rebuilds",
        "2",
        "--report",
        "v.json",
        "-q",
    )
    assert r.code == 0, r
    assert "REPRODUCIBLE: 2 rebuilds of 5 layers" in r.out and "the check has power" in r.out
    report = json.loads(Path("v.json").read_text())
    assert report["reproducible"] is True and report["power"] is True
    hashes = {b["output_sha256"]["output"] for b in report["builds"]}
    assert len(hashes) == 1
    assert report["accuracy"]["max_abs"] < 1e-5


def test_verify_with_npz_inputs(work: Path) -> None:
    _build("cnn.onnx", "t.lock", "cnn.engine")
    x = np.random.default_rng(5).standard_normal((2, 3, 32, 32)).astype(np.float32)
    np.savez("inputs.npz", input=x)
    r = verify(lock="t.lock", backend="reference", rebuilds=1, inputs="inputs.npz")
    assert r.reproducible and r.power and r.inputs.startswith("sha256:")
    want = ReferenceBackend().run(Path("cnn.engine").read_bytes(), {"input": x})["output"]
    assert r.builds[0].output_sha256["output"] == _hash(want)


def _hash(arr: np.ndarray) -> str:
    from reprobuild.workflow.outputs import output_hashes

    return output_hashes({"o": arr})["o"]


class _SneakyBackend(ReferenceBackend):
    """Changes one layer's tactic in the cache right before a pinned build."""

    def __init__(self, layer_key: str, tactic: int) -> None:
        super().__init__()
        self.layer_key, self.sneaky_tactic = layer_key, tactic

    def build(self, model_path, settings, cache, log, **kwargs):
        if self.layer_key in cache.tactic_map():
            cache.update(self.layer_key, self.sneaky_tactic, 0.001)
        return super().build(model_path, settings, cache, log, **kwargs)


def test_verify_fails_naming_the_layer_changed_behind_its_back(work: Path) -> None:
    _build("mlp.onnx", "t.lock", "mlp.engine")
    fc1 = next(e for e in load_lock("t.lock").layers if e.layer == "fc1")
    other = next(c.tactic for c in fc1.candidates if c.tactic != fc1.tactic)
    r = verify(lock="t.lock", backend=_SneakyBackend(fc1.key, other), rebuilds=2)
    assert not r.reproducible
    drift = r.builds[0].drift
    assert drift == [
        {"layer": "fc1", "key": fc1.key, "locked": f"0x{fc1.tactic:x}", "built": f"0x{other:x}"}
    ]
    with pytest.raises(DriftError, match=r"fc1"):
        build(
            "mlp.onnx",
            lock="t.lock",
            out="x.engine",
            cache_dir="caches",
            backend=_SneakyBackend(fc1.key, other),
        )
    assert not Path("x.engine").exists()


def test_bisect_finds_a_planted_layer(work: Path, cli) -> None:
    # the Convs run their im2col keys, which have other candidates to plant
    _build("cnn.onnx", "a.lock", "cnn.engine", timing="prefer:im2col")
    shutil.copy("a.lock", "b.lock")
    conv = _running_entry("a.lock", "cnn.engine")
    other = next(c for c in conv.candidates if c.tactic != conv.tactic)
    # the Conv has two keys: a pin by name asks which one, unless the tactic is a candidate
    # of one of them only (the im2col key's, here)
    r = cli("pin", f"layer={conv.layer}", "tactic=0x1", "--lock", "b.lock")
    assert r.code == 2 and "is ambiguous" in r.err and "key=0x" in r.err
    r = cli("pin", f"layer={conv.layer}", f"tactic=0x{other.tactic:x}", "--lock", "b.lock")
    assert r.code == 0 and f"[{conv.key}]" in r.out, r
    r = bisect(lock="a.lock", against="b.lock", backend="reference")
    assert r.outputs_differ
    assert [(c["layer"], c["key"]) for c in r.culprits] == [(conv.layer, conv.key)]
    assert r.culprits[0]["tactic_b"] == f"0x{other.tactic:x}"
    out = cli(
        "bisect",
        "--lock",
        "a.lock",
        "--against",
        "b.lock",
        "--backend",
        "reference",
        "--json",
        "-q",
    )
    assert out.code == 1 and json.loads(out.out)["culprits"][0]["layer"] == conv.layer


def test_bisect_of_identical_locks(work: Path) -> None:
    _build("cnn.onnx", "a.lock", "cnn.engine")
    r = bisect(lock="a.lock", against="a.lock", backend="reference")
    assert not r.outputs_differ and r.culprits == [] and r.builds == 0


def test_bad_inputs_give_clear_errors(work: Path, cli) -> None:
    r = cli("build", "missing.onnx", "--backend", "reference")
    assert r.code == 2 and "missing.onnx: no such model file" in r.err
    Path("junk.onnx").write_bytes(b"not a model")
    r = cli("build", "junk.onnx", "--backend", "reference", "--lock", "j.lock")
    assert r.code == 2 and "junk.onnx: not a readable ONNX model" in r.err
    assert not Path("j.lock").exists()
    r = cli("build", "cnn.onnx", "--backend", "nope")
    assert r.code == 2 and "unknown backend 'nope'" in r.err
    r = cli("build", "cnn.onnx", "--backend", "tensorrt")
    assert r.code == 3 and "backend 'tensorrt' cannot run here" in r.err
    r = cli("build", "cnn.onnx", "--shapes", "input:2xfoo")
    assert r.code == 2 and "expected NAME:DxDxD" in r.err
    with pytest.raises(UsageError, match="--rebuilds must be at least 1"):
        verify(lock="t.lock", rebuilds=0, backend="reference")


def test_build_options_reach_the_workflow(work: Path, cli, monkeypatch) -> None:
    """What ``build`` hands the workflow for its options: defaults, paths, numbers, repeated
    options and flags, as the user wrote them."""
    import reprobuild.workflow.build as workflow_build

    calls: list[tuple[str, dict]] = []

    def record(model, **kwargs):
        calls.append((model, kwargs))
        raise UsageError("stopped before the build")

    monkeypatch.setattr(workflow_build, "build", record)
    r = cli(
        *("build", "mlp.onnx", "--backend", "reference", "--threads", "3", "--no-tf32"),
        *("--shapes", "x:1x4", "--shapes=y:2,z:1", "--opt-level", "0", "--workspace", "2G"),
        *("--precision", "fp16", "--keep-fp32", "a.*", "--keep-fp32", "b", "--max-output", "2.5"),
    )
    assert (r.code, r.err) == (2, "error: stopped before the build\n")
    [(model, kw)] = calls
    assert model == Path("mlp.onnx") and kw["lock"] == Path("tactics.lock")
    assert kw["cache_dir"] is None and kw["out"] is None and kw["frozen"] is False
    assert kw["backend"].threads == 3 and kw["held_out"] is None
    settings = kw["settings"]
    assert (settings.optimization_level, settings.workspace, settings.tf32) == (0, 2 << 30, False)
    assert settings.input_shapes == (
        ("x", (1, 4), (1, 4), (1, 4)),
        ("y", (2,), (2,), (2,)),
        ("z", (1,), (1,), (1,)),
    )
    request = kw["precision"]
    assert request.mode == "fp16" and request.settings.keep_fp32 == ("a.*", "b")
    assert request.settings.max_output == 2.5
    r = cli("build", "--help")
    assert r.code == 0 and "Build an engine" in r.out and "--min-shapes" in r.out
    assert "--ref-timing" not in r.out  # hidden


def test_auto_backend_says_which(work: Path, cli) -> None:
    r = cli("build", "cnn.onnx", "--lock", "t.lock", "--json")
    assert r.code == 0, r
    assert json.loads(r.out)["backend"] == "reference"


def test_accuracy_counts_non_finite_outputs_as_infinite_error(work: Path) -> None:
    from reprobuild.workflow.outputs import engine_accuracy as _accuracy
    from reprobuild.workflow.verify import VerifyResult

    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    import onnxruntime as ort

    want = ort.InferenceSession("cnn.onnx").run(None, {"input": x})[0]
    good = _accuracy(Path("cnn.onnx"), {"input": x}, {"output": want + 1e-3})
    assert good["max_abs"] == pytest.approx(1e-3, rel=1e-3) and good["non_finite_outputs"] == []
    bad_out = want.copy()
    bad_out[0, 0] = np.nan
    bad = _accuracy(Path("cnn.onnx"), {"input": x}, {"output": bad_out})
    assert bad["max_abs"] == float("inf") and bad["non_finite_outputs"] == ["output"]
    result = VerifyResult(False, "l", "m", "reference", 1, "seeded:0", [], [], bad)
    text = json.dumps(result.to_json(), allow_nan=False)  # strict JSON, no Infinity
    assert '"max_abs": "inf"' in text


def test_model_zoo_squeezenet_through_the_cli(work: Path, cli) -> None:
    """A real model nobody here wrote: record, frozen rebuild, verify, all via the CLI.

    Its logits spread by ~1e5, so the softmax is saturated (one-hot) for any input and any
    kernel's last bits: no tactic reaches the output, and verify must say its identical
    outputs prove nothing (exit 0, no power)."""
    from tests.models import zoo

    shutil.copy(zoo.reweighted_path("squeezenet", "zoo", logit_std=1e5), "sq.onnx")
    r = cli("build", "sq.onnx", "--lock", "sq.lock", "--backend", "reference", "-q", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["layers"] == 35 and data["recorded"] is True  # 26 layers, 9 with 2 keys
    r = cli("build", "sq.onnx", "--lock", "sq.lock", "--backend", "reference", "-q", "--frozen")
    assert r.code == 0, r
    assert "35 cache hits, 0 timed" in r.out
    r = cli("verify", "--lock", "sq.lock", "--backend", "reference", "-n", "2", "-q", "--json")
    assert r.code == 0, r
    report = json.loads(r.out)
    assert report["reproducible"] and report["layers"] == 35
    assert len({b["output_sha256"]["softmaxout_1"] for b in report["builds"]}) == 1
    assert report["power"] is False
    # 26 keys have another candidate (the 9 direct keys have none): by default the control
    # tries each one's most different candidate, then others, two builds per such key
    assert report["control"]["layers_switchable"] == 26
    assert len(report["control"]["probes"]) == 52
    assert not any(p["changed"] for p in report["control"]["probes"])


def test_python_api_matches_the_readme(work: Path) -> None:
    import reprobuild

    result = reprobuild.build("mlp.onnx", lock="tactics.lock", backend="reference")
    report = reprobuild.verify(lock="tactics.lock", rebuilds=2, backend="reference")
    assert result.layers == 2 and report.reproducible and report.power
    assert reprobuild.load_lock("tactics.lock").tactic_map() == result.tactic_map
    with pytest.raises(AttributeError):
        reprobuild.no_such_name  # noqa: B018
