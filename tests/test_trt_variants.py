"""The whole workflow under every stand-in behaviour TensorRT may plausibly show.

record -> pin a non-fastest candidate -> locked rebuild -> verify (with its positive
control) -> bisect -> export-cache, on the stand-in with each named behaviour
(tests/trt_standin/__init__.py) and the default. None of them may produce false drift; each
also shows that its behaviour really happened, so a stand-in that silently ignored a
behaviour would fail here.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

import reprobuild
from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.backends.tensorrt import device as device_mod
from reprobuild.lock.edit import edit_lock
from reprobuild.lock.yamlio import load_lock
from tests.conftest import EXAMPLES
from tests.trt_standin import BEHAVIOURS, EDITS_IGNORED, make_module
from tests.trt_standin.host_device import host_device

A100 = cuda_probe.CudaInfo(
    gpus=(cuda_probe.GpuInfo(0, "NVIDIA A100-SXM4-80GB", "8.0"),),
    driver_version="550.54.14",
    driver_api_version="12.4",
    runtime_version="12.4",
)


def install_standin(
    monkeypatch: pytest.MonkeyPatch,
    behaviours: tuple[str, ...] = (),
    version: str = "10.13.3.9",
    *,
    cuda: cuda_probe.CudaInfo = A100,
    gpu: str = "NVIDIA A100-SXM4-80GB",
) -> ModuleType:
    """The stand-in as ``tensorrt``, a fake GPU probe, and the stand-in's host memory as the
    backend's device: chosen here, never what the machine has (a real ``libcudart`` would
    hand out device pointers the stand-in cannot read; see ``host_device``)."""
    module = make_module(version, device=gpu, behaviours=behaviours)
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    monkeypatch.setattr(cuda_probe, "probe_cuda", lambda: cuda)
    device = host_device()
    monkeypatch.setattr(device_mod, "find_device", lambda: (device, device.how))
    module._test_device = device
    return module


def _pin_second_candidate(lock_path: Path) -> str:
    """Pin a candidate other than the locked tactic of the first switchable layer with one
    key (with several keys, e.g. format combinations, the engine may use only one)."""
    lock = load_lock(lock_path)
    names = [e.layer for e in lock.layers]
    entry = next(e for e in lock.layers if len(e.candidates) > 1 and names.count(e.layer) == 1)
    other = next(c for c in entry.candidates if c.tactic != entry.tactic)
    edit_lock(lock_path, [f"key={entry.key}", f"tactic=0x{other.tactic:x}"])
    return entry.layer


def run_flow(tmp_path: Path, model_name: str) -> dict:
    """The full flow in ``tmp_path`` on a bundled example; returns what each step produced."""
    model = tmp_path / model_name
    shutil.copy(EXAMPLES / model_name, model)
    return run_flow_on(tmp_path, model)


def run_flow_on(tmp_path: Path, model: Path) -> dict:
    """Record, pin a non-fastest candidate, locked, frozen, verify (with its control),
    bisect against a lock pinning another tactic, export-cache."""
    lock, caches = tmp_path / "t.lock", tmp_path / "caches"
    kw = {"backend": "tensorrt", "cache_dir": caches}
    recorded = reprobuild.build(model, lock=lock, out=tmp_path / "a.engine", **kw)
    pinned_layer = _pin_second_candidate(lock)
    locked = reprobuild.build(model, lock=lock, out=tmp_path / "b.engine", **kw)
    frozen = reprobuild.build(model, lock=lock, out=tmp_path / "c.engine", frozen=True, **kw)
    report = reprobuild.verify(lock=lock, rebuilds=2, **kw)
    other = tmp_path / "other.lock"
    shutil.copy(lock, other)
    culprit = _pin_second_candidate(other)  # the same layer, now another tactic
    from reprobuild.workflow.bisect import bisect

    bis = bisect(lock=lock, against=other, **kw)
    from reprobuild.workflow.export import export_pinned_cache

    exported = export_pinned_cache(lock, tmp_path / "pinned.cache", caches)
    return {
        "recorded": recorded,
        "locked": locked,
        "frozen": frozen,
        "verify": report,
        "bisect": bis,
        "export": exported,
        "pinned_layer": pinned_layer,
        "culprit": culprit,
        "lock": load_lock(lock),
    }


# under EDITS_IGNORED a pin of that layer kind is not honoured: true drift (tested in
# tests/test_trt_edits.py), so the whole flow cannot work there
FLOW = ["default", *(b for b in BEHAVIOURS if b not in EDITS_IGNORED)]


@pytest.mark.parametrize("variant", FLOW)
def test_the_whole_flow_never_drifts_falsely(
    variant: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trt = install_standin(monkeypatch, () if variant == "default" else (variant,))
    monkeypatch.chdir(tmp_path)
    out = run_flow(tmp_path, "cnn.onnx")
    lock = out["lock"]
    assert out["recorded"].recorded and not out["locked"].recorded
    assert out["locked"].tactic_map == lock.tactic_map() == out["frozen"].tactic_map
    assert any(e.pinned for e in lock.layers)
    report = out["verify"]
    assert report.reproducible, report.to_json()
    assert report.power is True, report.control.to_json()
    assert out["bisect"].culprits and out["bisect"].culprits[0]["layer"] == out["culprit"]
    exported = out["export"]
    assert exported.locked == len(lock.layers) and exported.entries == len(lock.layers)
    assert not any(e.layer.startswith("<unlogged") for e in lock.layers)
    assert trt._test_device.live == {}  # every device buffer was freed
    _behaviour_was_seen(variant, trt, out, tmp_path)


def _behaviour_was_seen(variant: str, trt: ModuleType, out: dict, tmp_path: Path) -> None:
    """Proof that the stand-in really behaved as the variant says (else the test is empty)."""
    lock = out["lock"]
    names = [e.layer for e in lock.layers]
    report = json.loads((tmp_path / "b.engine.report.json").read_text())
    if variant == "default":
        assert sorted(names) == ["conv1", "conv2", "fc"]
    elif variant == "hit-headers":
        hits = [r for r in report["records"] if r["key"]]
        assert len(hits) == 3  # the pinned build printed a header for every locked key
    elif variant == "multi-key":
        assert names.count("conv1") == 2 and names.count("conv2") == 2
        reformat = [n for n in names if n.startswith("Reformatting ")]
        assert len(reformat) == 1 and len(lock.layers) == 6
        # each Conv runs the tactic of its key with the lowest cached time
        from reprobuild.backends.tensorrt.backend import TensorRTBackend

        cache_file = next((tmp_path / "caches").iterdir())
        cache = TensorRTBackend().create_timing_cache(cache_file.read_bytes())
        info = json.loads((tmp_path / "b.engine.layers.json").read_text())
        shown = {
            e["Metadata"]: int(e["TacticValue"], 16) for e in info["Layers"] if "TacticValue" in e
        }
        for conv in ("conv1", "conv2"):
            values = [cache.query(e.key) for e in lock.layers if e.layer == conv]
            fastest = min(values, key=lambda v: v.time_ms)
            assert shown[f"[ONNX Layer: {conv}]"] == fastest.tactic_hash
    elif variant == "keyless-cask":
        # Named from the Cask tables (or "<one of conv1, conv2>" when both chose one kernel).
        assert len(names) == 3 and not any(n.startswith("<cache-only") for n in names)
        assert all(e.kernel and len(e.candidates) >= 2 for e in lock.layers)
        assert not any(r["key"] for r in report["records"] if r["layer"].startswith("conv"))
    elif variant == "myelin-names":
        info = json.loads(reprobuild_layer_info(tmp_path))
        assert any("[profile 1]" in layer["Name"] for layer in info["Layers"])
    elif variant == "strict-attach":
        cache_file = next((tmp_path / "caches").iterdir())
        trt_mod = sys.modules["tensorrt"]
        logger = _Quiet(trt_mod)
        trt_config = trt_mod.Builder(logger).create_builder_config()
        loaded = trt_config.create_timing_cache(cache_file.read_bytes())
        assert trt_config.set_timing_cache(loaded, False) is False
        assert trt_config.set_timing_cache(loaded, True) is True
    elif variant == "inf-nan":
        cache_file = next((tmp_path / "caches").iterdir())
        assert b"Infinity" in cache_file.read_bytes()
    elif variant == "varying-keys":  # one Conv's second format combination was recorded
        assert sorted(names) in (
            ["conv1", "conv1", "conv2", "fc"],
            ["conv1", "conv2", "conv2", "fc"],
        )
        assert trt._standin.recordings >= 1 and set(lock.tactic_map()) == set(
            out["locked"].tactic_map
        )
    elif variant == "recording-bits":  # the lock's bits are a replay's, and it says so
        recording = json.loads((tmp_path / "a.engine.report.json").read_text())
        check = recording["recording_vs_replay"]
        assert check["same"] is False and check["recording_sha256"] != check["replay_sha256"]
        assert any("the recording engine gives other bits" in w for w in recording["warnings"])
    elif variant == "shuffled-keys":
        cache = trt.Builder(_Quiet(trt)).create_builder_config().create_timing_cache(b"")
        cache._entries = {f"0x{i:032x}": (i, 1.0) for i in range(20)}
        orders = {tuple(str(k) for k in cache.queryKeys()) for _ in range(5)}
        assert len(orders) > 1


def reprobuild_layer_info(tmp_path: Path) -> str:
    from reprobuild.backends.tensorrt.backend import TensorRTBackend

    be = TensorRTBackend()
    cache = be.create_timing_cache()
    return be.build(str(tmp_path / "cnn.onnx"), reprobuild.BuildSettings(), cache, print).layer_info


class _Quiet:
    def __new__(cls, trt: ModuleType):  # a minimal ILogger subclass instance
        class L(trt.ILogger):
            def __init__(self) -> None:
                trt.ILogger.__init__(self)

            def log(self, severity, msg) -> None:
                pass

        return L()


def test_myelin_profile_sanitised_and_fused_names_warn_but_never_drift(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Three Gemms named three ways (profile copies, fused with the next Cast, plain): the
    fused one cannot be matched, which is a warning naming the layer, not drift."""
    install_standin(monkeypatch, ("myelin-names",))
    monkeypatch.chdir(tmp_path)
    out = run_flow(tmp_path, "fp16_middle.onnx")
    assert out["verify"].reproducible and out["verify"].power
    warnings = out["locked"].warnings
    assert any("layer 'fc2': no engine layer is named after it" in w for w in warnings), warnings
    assert not any("'fc1'" in w or "'fc3'" in w for w in warnings)


@pytest.mark.parametrize("variant", ["default", "hit-headers", "keyless-cask"])
def test_a_real_cache_miss_is_still_drift(
    variant: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The negative control: headers or keyless tables never hide a real miss."""
    from reprobuild.errors import EXIT_DIFFERENT, DriftError

    trt = install_standin(monkeypatch, () if variant == "default" else (variant,))
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "cnn.onnx"
    shutil.copy(EXAMPLES / "cnn.onnx", model)
    reprobuild.build(model, lock="t.lock", backend="tensorrt")
    before = (tmp_path / "t.lock").read_bytes()
    trt._standin.rekey_ops.add("fc")  # fc's key changes from build to build: a miss
    with pytest.raises(DriftError) as err:
        reprobuild.build(model, lock="t.lock", backend="tensorrt", frozen=True)
    assert err.value.exit_code == EXIT_DIFFERENT
    assert "was added by the build" in str(err.value) and "a timing-cache miss" in str(err.value)
    assert (tmp_path / "t.lock").read_bytes() == before


def test_without_disable_compilation_cache_a_reused_kernel_defeats_the_pin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Why pinned builds set DISABLE_COMPILATION_CACHE: the stand-in reuses a JIT-compiled
    Myelin kernel kept with the cache, as NVIDIA saw, and the inspector check catches it."""
    from reprobuild.backends.tensorrt.backend import TensorRTBackend
    from reprobuild.lock.model import LayerEntry, LockCandidate
    from reprobuild.pinning import cross_check_kernels

    trt = install_standin(monkeypatch)
    logger = _Quiet(trt)
    builder = trt.Builder(logger)

    def build(cache, disable: bool) -> dict:
        network = builder.create_network(0)
        trt.OnnxParser(network, logger).parse_from_file(str(EXAMPLES / "cnn.onnx"))
        config = builder.create_builder_config()
        config.set_flag(trt.BuilderFlag.EDITABLE_TIMING_CACHE)
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
        if disable:
            config.set_flag(trt.BuilderFlag.DISABLE_COMPILATION_CACHE)
        config.set_timing_cache(cache, True)
        engine = trt.Runtime(logger).deserialize_cuda_engine(
            builder.build_serialized_network(network, config)
        )
        info = engine.create_engine_inspector().get_engine_information(
            trt.LayerInformationFormat.JSON
        )
        return info

    cache = builder.create_builder_config().create_timing_cache(b"")
    build(cache, disable=False)  # records, keeping fc's compiled kernel with the cache
    (key,) = [k for k in cache._entries if cache._compiled.get(k)]
    chosen = cache._entries[key][0]
    kernels = [c for c in trt_candidates(trt, "Gemm") if c.tactic_hash != chosen]
    other = kernels[0]
    assert cache.update(trt.TimingCacheKey.parse(key), trt.TimingCacheValue(other.tactic_hash, 1.0))
    entry = LayerEntry(
        key,
        "fc",
        other.tactic_hash,
        other.kernel,
        True,
        [LockCandidate(c.tactic_hash, c.kernel) for c in trt_candidates(trt, "Gemm")],
    )
    reused = cross_check_kernels(build(cache, disable=False), [entry])
    assert len(reused.problems) == 1 and "the lock says" in reused.problems[0]
    fresh = cross_check_kernels(build(cache, disable=True), [entry])
    assert fresh.problems == [] and fresh.warnings == []
    be = TensorRTBackend()
    recording = be.create_timing_cache()
    settings = reprobuild.BuildSettings()
    assert (
        "DISABLE_COMPILATION_CACHE"
        in be.build(str(EXAMPLES / "cnn.onnx"), settings, recording, lambda line: None).extra[
            "builder_flags"
        ]
    )
    # A pinned build sets ERROR_ON_TIMING_CACHE_MISS; with every key present, no retry.
    lines: list[str] = []
    pinned = be.build(str(EXAMPLES / "cnn.onnx"), settings, recording, lines.append, pinned=True)
    assert "ERROR_ON_TIMING_CACHE_MISS" in pinned.extra["builder_flags"]
    assert "retried_without_error_on_miss" not in pinned.extra


def trt_candidates(trt: ModuleType, op: str) -> list:
    from tests.trt_standin import _impl

    config = trt.Builder(_Quiet(trt)).create_builder_config()
    return _impl._candidates(trt._standin, op, config)


def test_keyless_keys_are_named_by_what_the_log_and_inspector_know() -> None:
    """Unit rules of workflow/keyless.py: one layer, several layers, inspector, nothing."""
    from reprobuild.logs.records import Candidate, TacticRecord
    from reprobuild.workflow.keyless import attribute_keyless

    def rec(layer: str, chosen: int) -> TacticRecord:
        cands = [Candidate(None, 1, "k1", 0.1), Candidate(None, 2, "k2", 0.2)]
        return TacticRecord(layer, None, (), cands, chosen, None, None, False, "R", 1, "runner")

    info = json.dumps(
        {
            "Layers": [
                {"Name": "Reformatting CopyNode for x", "TacticValue": "0x9", "TacticName": "copy"}
            ]
        }
    )
    keys = {"0x" + c * 32: t for c, t in zip("abcd", (1, 2, 9, 77), strict=True)}
    named = attribute_keyless(keys, [rec("c1", 1), rec("c1", 2), rec("c2", 2)], info)
    got = {k[2]: (e.layer, e.kernel, len(e.candidates)) for k, e in named.items()}
    assert got == {
        "a": ("c1", "k1", 2),
        "b": ("<one of c1, c2>", "k2", 2),
        "c": ("Reformatting CopyNode for x", "copy", 0),
        "d": ("<cache-only 0xdddddddd>", None, 0),
    }


def test_find_device_searches_pip_libcudart_then_cuda_python_then_cupy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Nothing loadable: one line that says what to install; an unloadable file under
    site-packages/nvidia is skipped, not fatal."""
    fake = tmp_path / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12"
    fake.parent.mkdir(parents=True)
    fake.write_bytes(b"not a library")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert cuda_probe.cudart_candidates()[0] == str(fake)
    monkeypatch.setattr(cuda_probe, "cudart_candidates", lambda: [str(fake)])
    for name in ("cuda", "cuda.bindings", "cupy", "cupy.cuda"):
        monkeypatch.setitem(sys.modules, name, None)
    device, why = device_mod.find_device()
    assert device is None
    assert "no CUDA runtime found" in why and "nvidia-cuda-runtime-cu12" in why


def test_run_without_a_cuda_runtime_or_polygraphy_is_exit_3(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from reprobuild.backends.tensorrt.backend import TensorRTBackend
    from reprobuild.errors import EXIT_ENV, BackendUnavailable

    install_standin(monkeypatch)
    monkeypatch.setattr(device_mod, "find_device", lambda: (None, "no CUDA runtime found: x"))
    monkeypatch.setitem(sys.modules, "polygraphy", None)
    monkeypatch.setitem(sys.modules, "polygraphy.backend.trt", None)
    be = TensorRTBackend()
    engine = be.build(
        str(EXAMPLES / "cnn.onnx"), reprobuild.BuildSettings(), be.create_timing_cache(), print
    ).engine
    with pytest.raises(BackendUnavailable, match="cannot run engines: no CUDA runtime") as err:
        be.run(engine, {})
    assert err.value.exit_code == EXIT_ENV


def test_run_through_tensorrts_api_gives_tactic_dependent_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two engines with the same tactics give the same bits; another tactic flips some;
    a missing input is a usage error; every buffer is freed either way."""
    import numpy as np

    from reprobuild.backends.tensorrt.backend import TensorRTBackend
    from reprobuild.errors import UsageError
    from reprobuild.lock.model import LayerEntry
    from reprobuild.pinning import update_tactics

    trt = install_standin(monkeypatch)
    be = TensorRTBackend()
    settings = reprobuild.BuildSettings()
    cache = be.create_timing_cache()
    model = str(EXAMPLES / "cnn.onnx")
    first = be.build(model, settings, cache, lambda line: None).engine
    again = be.build(model, settings, cache, lambda line: None, pinned=True).engine
    x = {"input": np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)}
    a, b = be.run(first, x), be.run(again, x)
    assert be.last_run_path == "host memory (test stand-in)"
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    key, tactic = next(iter(cache.tactic_map().items()))
    other = next(c.tactic_hash for c in trt_candidates(trt, "Conv") if c.tactic_hash != tactic)
    update_tactics(cache, [LayerEntry(key, "x", other)])
    switched = be.run(be.build(model, settings, cache, lambda line: None).engine, x)
    assert any(not np.array_equal(a[k], switched[k]) for k in a)
    with pytest.raises(UsageError, match="the engine needs inputs"):
        be.run(first, {})
    with pytest.raises(UsageError, match="optimization profile does not allow"):
        be.run(first, {"input": np.zeros((1, 3, 16, 16), np.float32)})
    assert trt._test_device.live == {}


def test_a_miss_under_error_on_timing_cache_miss_is_retried_so_the_map_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ERROR_ON_TIMING_CACHE_MISS the stand-in fails the build on a miss; the backend
    builds once more without it, so the new key lands in the cache for the drift check.
    A failure that is not a miss (a tactic the layer cannot use) still fails."""
    from reprobuild.backends.tensorrt.backend import TensorRTBackend
    from reprobuild.errors import BuildError
    from reprobuild.lock.model import LayerEntry
    from reprobuild.pinning import update_tactics

    trt = install_standin(monkeypatch)
    be = TensorRTBackend()
    settings, model = reprobuild.BuildSettings(), str(EXAMPLES / "cnn.onnx")
    cache = be.create_timing_cache()
    be.build(model, settings, cache, lambda line: None)
    before = cache.tactic_map()
    trt._standin.rekey_ops.add("fc")
    lines: list[str] = []
    out = be.build(model, settings, cache, lines.append, pinned=True)
    assert out.extra["retried_without_error_on_miss"] is True
    assert any("Timing cache miss for node fc" in line for line in lines)
    assert len(set(cache.tactic_map()) - set(before)) == 1
    trt._standin.rekey_ops.clear()
    key = next(iter(before))
    update_tactics(cache, [LayerEntry(key, "x", 0x1234)])  # no layer can use this tactic
    with pytest.raises(BuildError, match="TensorRT failed to build the engine"):
        be.build(model, settings, cache, lambda line: None, pinned=True)


@pytest.mark.parametrize("precision", [None, "fp16", "int8"])
def test_export_cache_names_the_cache_by_the_converted_model(
    precision: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A lock with a precision plan builds a converted model, and its recording cache is
    named by that model's hash: export-cache finds the one `build` wrote (no re-recording)
    and writes a cache holding the lock's tactics, for FP32, FP16 and INT8 locks alike."""
    from reprobuild.lock.plan import PrecisionSettings
    from reprobuild.workflow.export import export_pinned_cache
    from reprobuild.workflow.request import PrecisionRequest

    install_standin(monkeypatch)
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "mlp.onnx"
    shutil.copy(EXAMPLES / "mlp.onnx", model)
    lock, caches = tmp_path / "t.lock", tmp_path / "caches"
    request = None
    if precision is not None:
        calibration = None
        if precision == "int8":
            import numpy as np
            import onnx

            (inp,) = onnx.load(str(model)).graph.input
            dims = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
            calibration = str(tmp_path / "calib.npz")
            rng = np.random.default_rng(0)
            np.savez(calibration, **{inp.name: rng.random([4, *dims[1:]], np.float32)})
        request = PrecisionRequest(precision, PrecisionSettings(), calibration=calibration)
    reprobuild.build(model, lock=lock, backend="tensorrt", cache_dir=caches, precision=request)
    written = sorted(caches.iterdir())
    assert len(written) == 1
    result = export_pinned_cache(lock, tmp_path / "pinned.cache", caches)
    assert result.recorded_now is False and result.recording_cache == str(written[0])
    be = __import__("reprobuild.backends", fromlist=["get_backend"]).get_backend("tensorrt")
    exported = be.create_timing_cache((tmp_path / "pinned.cache").read_bytes())
    assert load_lock(lock).tactic_map().items() <= exported.tactic_map().items()
    # without the model the converted hash cannot be known: one clear line, nothing written
    if precision is not None:
        model.unlink()
        with pytest.raises(reprobuild.errors.UsageError, match="pass --model"):
            export_pinned_cache(lock, tmp_path / "other.cache", caches)
        assert not (tmp_path / "other.cache").exists()


def _half_io_model(path: Path) -> Path:
    """A Gemm -> Relu -> Gemm network whose input, weights and output are FLOAT16."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float16), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float16), "w2")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
            helper.make_node("Relu", ["h"], ["r"], name="relu1"),
            helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2"),
        ],
        "half_io",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 4])],
        [w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_the_whole_flow_with_half_inputs_and_outputs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Non-FLOAT engine I/O: ``get_tensor_dtype`` says HALF, ``run`` moves FP16 bytes."""
    import numpy as np

    install_standin(monkeypatch)
    monkeypatch.chdir(tmp_path)
    model = _half_io_model(tmp_path / "half.onnx")
    out = run_flow_on(tmp_path, model)
    assert out["recorded"].recorded and out["verify"].reproducible
    assert out["verify"].power is True
    assert out["bisect"].culprits and out["export"].locked >= 2
    from reprobuild.backends import get_backend

    be = get_backend("tensorrt")
    engine = (tmp_path / "b.engine").read_bytes()
    result = be.run(engine, {"x": np.ones((2, 8), np.float16)})
    assert result["y"].dtype == np.float16 and result["y"].shape == (2, 4)
    want = np.maximum(np.ones((2, 8), np.float16) @ _weights(model, "w1"), 0) @ _weights(
        model, "w2"
    )
    assert np.allclose(result["y"].astype(np.float32), want.astype(np.float32), rtol=1e-2)


def _weights(model: Path, name: str):
    import onnx
    from onnx import numpy_helper

    init = {t.name: t for t in onnx.load(str(model)).graph.initializer}
    return numpy_helper.to_array(init[name])


def test_update_refusing_a_key_matters_only_where_the_lock_changes_it(
    monkeypatch: pytest.MonkeyPatch, cli, tmp_path: Path
) -> None:
    """``update()`` may return False for an existing key. A key the lock leaves as recorded
    is only written back with its own value, so its refusal changes nothing and never stops
    a build; one the lock must change is one line naming the layer and key (exit 2),
    nothing written."""
    trt = install_standin(monkeypatch)
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "mlp.onnx"
    shutil.copy(EXAMPLES / "mlp.onnx", model)
    # band 0: the lock holds the builder's own choices, so the recording cache already has
    # every locked tactic (the tie rule would move some, and moving one is a change)
    args = ("build", str(model), "--backend", "tensorrt", "--lock", "t.lock", "--tie-band", "0")
    assert cli(*args).code == 0
    lock = load_lock(tmp_path / "t.lock")
    trt._standin.refuse_update.update(e.key for e in lock.layers)
    assert cli(*args, "-o", "locked.engine").code == 0  # nothing to change: no edit
    layer = _pin_second_candidate(tmp_path / "t.lock")
    before = (tmp_path / "t.lock").read_bytes()
    res = cli(*args, "-o", "pinned.engine")
    assert res.code == 2, res
    assert f"layer '{layer}' (key 0x" in res.err and "cannot pin tactic" in res.err
    assert (tmp_path / "t.lock").read_bytes() == before
    assert not (tmp_path / "pinned.engine").exists()
