"""The tensorrt backend's control flow, against the stand-in ``tensorrt`` module (no GPU).

The stand-in (tests/trt_standin) is injected with ``monkeypatch.setitem(sys.modules, ...)``
and only offers names that exist in the real bindings (test_trt_conformance.py checks).
The GPU probe is replaced by a fake ``CudaInfo``. Tests that need a real GPU and TensorRT
are marked ``tensorrt`` and skip here.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import onnx
import pytest
from onnx import TensorProto, helper

from reprobuild.backends.base import BuildSettings, Environment, TimingValue
from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.backends.tensorrt.logger import LogRouter, trt_make_logger
from reprobuild.errors import (
    EXIT_DIFFERENT,
    EXIT_ENV,
    EXIT_USAGE,
    BackendUnavailable,
    BuildError,
    CacheError,
    DriftError,
    EngineError,
    UsageError,
)
from reprobuild.lock.model import LayerEntry, Lock, LockCandidate, ModelInfo
from reprobuild.lock.yamlio import load_lock, save_lock
from tests import fake_cuda
from tests.conftest import EXAMPLES, ROOT, trt_env
from tests.test_trt_variants import A100, install_standin

NO_GPU = cuda_probe.CudaInfo(problems=("cuInit failed: CUDA_ERROR_NO_DEVICE",))
PREFIX_RE = re.compile(r"^\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] \[([FEWIV])\] \[TRT\] ")
MLP = EXAMPLES / "mlp.onnx"
CNN = EXAMPLES / "cnn.onnx"
KEY_RE = re.compile(r"0x[0-9a-f]{32}")


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Callable[..., ModuleType]:
    """Inject a stand-in TensorRT of some version, a fake GPU probe and the stand-in's
    device memory (``install_standin``)."""

    def _install(
        version: str = "10.13.3.9",
        *,
        cuda: cuda_probe.CudaInfo = A100,
        device: str = "NVIDIA A100-SXM4-80GB",
    ) -> ModuleType:
        return install_standin(monkeypatch, version=version, cuda=cuda, gpu=device)

    return _install


@pytest.fixture
def trt(install: Callable[..., ModuleType]) -> ModuleType:
    return install()


@pytest.fixture
def no_tensorrt(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import tensorrt` raise ImportError(name="tensorrt").
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setattr(cuda_probe, "probe_cuda", lambda: NO_GPU)


def backend():
    from reprobuild.backends.tensorrt.backend import TensorRTBackend

    return TensorRTBackend()


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def twin_matmul_model(path: Path, batch: int | str = 4) -> Path:
    """Two identical MatMul layers (same shapes, same weights shape) and a Relu."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 16], [0.01 * i for i in range(256)])
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["a"], name="mm_a"),
            helper.make_node("Relu", ["a"], ["r"], name="relu"),
            helper.make_node("MatMul", ["r", "w"], ["y"], name="mm_b"),
        ],
        "twin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 16])],
        [w],
    )
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def unsupported_op_model(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Einsum", ["x", "x"], ["y"], name="weird", equation="ij,ij->ij")],
        "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
    )
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


class Record:
    def __init__(self, op: str, key: str) -> None:
        self.op, self.key = op, key
        self.rows: list[tuple[int, str]] = []  # (tactic hash, kernel), fastest first
        self.selected: int | None = None


def parse_log(lines: list[str]) -> dict[str, Record]:
    """Just enough of the documented editable-cache format to build locks in these tests."""
    records: dict[str, Record] = {}
    current: Record | None = None
    for line in lines:
        text = PREFIX_RE.sub("", line).strip()
        text = text.removeprefix("(foreignNode)").strip()
        m = re.match(r"Autotuning op (.+?)\(key: (0x[0-9a-f]{32})\):", text)
        if m:
            current = records[m.group(2)] = Record(m.group(1), m.group(2))
            continue
        if current is None:
            continue
        row = re.match(r"\d+, [\d.]+, [\d.]+, [\d.]+, (\S+), (0x[0-9a-f]+),$", text)
        if row:
            current.rows.append((int(row.group(2), 16), row.group(1)))
        sel = re.match(
            r"The selected tactic is \(tactic hash, cost\(in ms\)\):(0x[0-9a-f]+),", text
        )
        if sel:
            current.selected = int(sel.group(1), 16)
    return records


def entries_from(records: dict[str, Record], pick: int = 0) -> list[LayerEntry]:
    """Lock entries choosing the ``pick``-th fastest candidate of each layer."""
    out = []
    for rec in records.values():
        tactic, kernel = rec.rows[min(pick, len(rec.rows) - 1)]
        out.append(
            LayerEntry(
                key=rec.key,
                layer=rec.op,
                tactic=tactic,
                kernel=kernel,
                pinned=True,
                candidates=[LockCandidate(h, k) for h, k in rec.rows],
            )
        )
    return out


def record(be, model: Path, settings: BuildSettings | None = None):
    cache = be.create_timing_cache()
    lines: list[str] = []
    out = be.build(str(model), settings or BuildSettings(), cache, lines.append)
    return cache, lines, out


def tactic_names(layer_info: str) -> dict[str, str]:
    return {r["Name"]: r.get("TacticName") for r in json.loads(layer_info)["Layers"]}


# ---------------------------------------------------------------------------- recording


def test_recording_build_creates_one_key_per_autotuned_layer(trt: ModuleType) -> None:
    be = backend()
    cache, lines, out = record(be, MLP)
    keys = cache.query_keys()
    assert len(keys) == 2 and all(KEY_RE.fullmatch(k) for k in keys)
    records = parse_log(lines)
    assert sorted(r.op for r in records.values()) == ["fc1", "fc2"]
    assert set(records) == set(keys)
    for key, rec in records.items():
        # The cache holds exactly what the log says was selected: the fastest row.
        assert cache.query(key) is not None
        assert cache.query(key).tactic_hash == rec.selected == rec.rows[0][0]
    assert out.log_lines == len(lines)
    assert all(PREFIX_RE.match(line) for line in lines)
    assert out.extra["builder_flags"] == [
        "DISABLE_COMPILATION_CACHE",
        "EDITABLE_TIMING_CACHE",
        "TF32",
    ]
    assert out.engine.startswith(b"STANDIN-TRT-ENGINE")


def test_identical_layers_get_their_own_keys(trt: ModuleType, tmp_path: Path) -> None:
    be = backend()
    cache, lines, _ = record(be, twin_matmul_model(tmp_path / "twin.onnx"))
    ops = sorted(r.op for r in parse_log(lines).values())
    assert ops == ["mm_a", "mm_b"]
    assert len(set(cache.query_keys())) == 2


def test_layer_info_is_inspector_json_with_selected_kernels(trt: ModuleType) -> None:
    from reprobuild.pinning import cross_check_kernels

    be = backend()
    _, lines, out = record(be, MLP)
    names = tactic_names(out.layer_info)
    records = parse_log(lines)
    by_op = {r.op: dict(r.rows)[r.selected] for r in records.values()}
    assert names["fc1_myl0_0"] == by_op["fc1"]
    assert names["fc2_myl0_3"] == by_op["fc2"]
    assert "Bindings" in json.loads(out.layer_info)
    check = cross_check_kernels(out.layer_info, entries_from(records, pick=0))
    assert (check.problems, check.warnings) == ([], [])


def test_layer_info_uses_io_tensors_on_11x(install: Callable[..., ModuleType]) -> None:
    install("11.4.0.106")
    _, _, out = record(backend(), MLP)
    data = json.loads(out.layer_info)
    assert "I/O Tensors" in data and "Bindings" not in data


# ---------------------------------------------------------------------------- pins


def test_pins_survive_a_pinned_build_and_change_the_kernels(trt: ModuleType) -> None:
    from reprobuild.pinning import check_no_drift, cross_check_kernels, update_tactics

    be = backend()
    cache, lines, _ = record(be, MLP)
    recorded = cache.tactic_map()
    entries = entries_from(parse_log(lines), pick=2)  # the third-fastest: not the winner
    assert all(recorded[e.key] != e.tactic for e in entries)
    results = update_tactics(cache, entries)
    assert [(r.key, r.previous) for r in results] == [(e.key, recorded[e.key]) for e in entries]
    before = cache.tactic_map()
    assert before == {e.key: e.tactic for e in entries}
    pinned_lines: list[str] = []
    out = be.build(str(MLP), BuildSettings(), cache, pinned_lines.append)
    after = cache.tactic_map()
    check_no_drift(before, after)
    assert after == before
    assert not any("Autotuning op" in line for line in pinned_lines)  # every key was a hit
    names = tactic_names(out.layer_info)
    kernels = {e.layer: e.kernel for e in entries}
    assert names["fc1_myl0_0"] == kernels["fc1"] and names["fc2_myl0_3"] == kernels["fc2"]
    assert cross_check_kernels(out.layer_info, entries).problems == []
    # Against the recording's own choices the cross-check must now complain: each engine
    # layer runs another recorded candidate of its layer.
    winners = entries_from(parse_log(lines), pick=0)
    problems = cross_check_kernels(out.layer_info, winners).problems
    assert len(problems) == 2 and all("the lock says" in p for p in problems)


def test_two_recordings_differ_but_the_lock_makes_builds_identical(trt: ModuleType) -> None:
    from reprobuild.pinning import update_tactics

    be = backend()
    selections = []
    for _ in range(6):
        cache, lines, out = record(be, MLP)
        selections.append(tuple(sorted(cache.tactic_map().values())))
    assert len(set(selections)) > 1, "the stand-in should time with run-to-run noise"
    entries = entries_from(parse_log(lines), pick=1)
    pinned = []
    for _ in range(3):
        cache, _, _ = record(be, MLP)
        update_tactics(cache, entries)
        out = be.build(str(MLP), BuildSettings(), cache, lambda line: None)
        pinned.append(tactic_names(out.layer_info))
    assert pinned[0] == pinned[1] == pinned[2]


def test_update_of_a_missing_key_is_a_build_error_naming_layer_and_key(trt: ModuleType) -> None:
    from reprobuild.pinning import update_tactics

    be = backend()
    cache, lines, _ = record(be, MLP)
    entry = entries_from(parse_log(lines))[0]
    missing = LayerEntry(key="0x" + "ab" * 16, layer="fc9", tactic=entry.tactic, pinned=True)
    assert cache.update(missing.key, missing.tactic, 0.01) is False
    with pytest.raises(BuildError) as err:
        update_tactics(cache, [entry, missing])
    msg = str(err.value)
    assert "'fc9'" in msg and missing.key in msg and "not in the recording" in msg
    assert err.value.exit_code == EXIT_USAGE
    assert cache.query(entry.key).tactic_hash == entry.tactic  # the first pin was applied


def test_update_with_an_invalid_value_is_a_build_error(trt: ModuleType) -> None:
    from reprobuild.pinning import update_tactics

    be = backend()
    cache, lines, _ = record(be, MLP)
    entry = entries_from(parse_log(lines))[0]
    before = cache.query(entry.key)
    assert cache.update(entry.key, 2**64 - 1, 0.01) is False  # the "invalid" marker
    assert cache.update(entry.key, entry.tactic, math.inf) is False
    assert cache.query(entry.key) == before
    bad = LayerEntry(key=entry.key, layer=entry.layer, tactic=2**64 - 1, pinned=True)
    with pytest.raises(BuildError, match=r"layer 'fc[12]' \(key 0x[0-9a-f]{32}\).*rejected"):
        update_tactics(cache, [bad])


def test_update_nan_deletes_and_query_of_missing_key_is_none(trt: ModuleType) -> None:
    be = backend()
    cache, _, _ = record(be, MLP)
    key = cache.query_keys()[0]
    assert isinstance(cache.query(key), TimingValue)
    assert cache.update(key, 0x1234, math.nan) is True
    assert cache.query(key) is None
    assert key not in cache.tactic_map() and len(cache.query_keys()) == 1
    assert cache.update(key, 0x1234, 0.5) is False  # update never creates keys


def test_malformed_keys_and_hashes_are_usage_errors(trt: ModuleType) -> None:
    cache = backend().create_timing_cache()
    with pytest.raises(UsageError, match="32 hex digits"):
        cache.query("0x1234")
    with pytest.raises(UsageError, match="64 bits"):
        cache.update("0x" + "0" * 32, 2**64, 1.0)
    with pytest.raises(UsageError, match="not an integer"):
        cache.update("0x" + "0" * 32, "0x12", 1.0)  # type: ignore[arg-type]


def test_a_tactic_the_layer_cannot_use_fails_at_the_next_build(trt: ModuleType) -> None:
    be = backend()
    cache, lines, _ = record(be, MLP)
    rec = next(r for r in parse_log(lines).values() if r.op == "fc2")
    assert cache.update(rec.key, 0xDEADBEEF, 0.01) is True  # accepted now...
    with pytest.raises(BuildError) as err:  # ...refused by the build
        be.build(str(MLP), BuildSettings(), cache, lambda line: None)
    assert "fc2" in str(err.value) and "0xdeadbeef" in str(err.value)


def test_a_timing_cache_miss_in_the_pinned_build_is_drift(trt: ModuleType) -> None:
    from reprobuild.pinning import check_no_drift, tactic_map_drift

    be = backend()
    cache, lines, _ = record(be, MLP)
    trt._standin.rekey_ops.add("fc2")  # fc2 now gets a new key: a miss
    before = cache.tactic_map()
    be.build(str(MLP), BuildSettings(), cache, lambda line: None)
    after = cache.tactic_map()
    problems = tactic_map_drift(before, after)
    assert len(problems) == 1 and "added" in problems[0]
    names = {r.key: r.op for r in parse_log(lines).values()}
    with pytest.raises(DriftError) as err:
        check_no_drift(before, after, names=names)
    assert err.value.exit_code == EXIT_DIFFERENT


def test_tactic_map_drift_reports_removed_and_changed_keys() -> None:
    from reprobuild.pinning import tactic_map_drift

    a, b, c = ("0x" + d * 32 for d in "abc")
    problems = tactic_map_drift({a: 1, b: 2}, {a: 3, c: 4})
    assert problems == [
        f"key {c} was added by the build (tactic 0x4): a timing-cache miss",
        f"key {b} (tactic 0x2) disappeared from the cache",
        f"key {a} changed from tactic 0x1 to 0x3",
    ]
    assert tactic_map_drift({a: 1}, {a: 1}) == []


# ---------------------------------------------------------------------------- refusals


def test_refuses_without_tensorrt(no_tensorrt: None) -> None:
    from reprobuild.backends import get_backend
    from reprobuild.backends.tensorrt import backend as tensorrt_backend

    with pytest.raises(BackendUnavailable, match="TensorRT is not installed") as err:
        backend()
    assert err.value.exit_code == EXIT_ENV
    assert not tensorrt_backend.is_usable()
    assert "not installed" in (tensorrt_backend.unusable_reason() or "")
    with pytest.raises(BackendUnavailable, match="backend 'tensorrt' cannot run here"):
        get_backend("tensorrt")
    info = tensorrt_backend.probe_tensorrt()
    assert (info.installed, info.version, info.editable_timing_cache) == (False, None, False)


def test_refuses_tensorrt_older_than_10_8(install: Callable[..., ModuleType]) -> None:
    from reprobuild.backends.tensorrt import backend as tensorrt_backend

    install("10.7.0.23")
    expected = (
        "TensorRT 10.7.0.23 has no editable timing cache; upgrade to >= 10.8; "
        "`reprobuild log` still parses its logs"
    )
    with pytest.raises(BackendUnavailable) as err:
        backend()
    assert str(err.value) == expected
    assert tensorrt_backend.unusable_reason() == expected
    info = tensorrt_backend.probe_tensorrt()
    assert info.installed and info.version == "10.7.0.23" and not info.editable_timing_cache


def test_accepts_10_8(install: Callable[..., ModuleType]) -> None:
    from reprobuild.backends.tensorrt import backend as tensorrt_backend

    install("10.8.0.43")
    assert tensorrt_backend.is_usable()
    cache, _, _ = record(backend(), MLP)
    assert len(cache.query_keys()) == 2


def test_refuses_optimization_level_0(trt: ModuleType) -> None:
    be = backend()
    cache = be.create_timing_cache()
    with pytest.raises(UsageError, match="level 0 ignores the timing cache") as err:
        be.build(str(MLP), BuildSettings(optimization_level=0), cache, lambda line: None)
    assert err.value.exit_code == EXIT_USAGE
    assert cache.query_keys() == []  # refused before building
    with pytest.raises(UsageError, match="level -1 is invalid"):
        be.build(str(MLP), BuildSettings(optimization_level=-1), cache, lambda line: None)


def test_refuses_weak_typing(install: Callable[..., ModuleType]) -> None:
    from reprobuild.backends.tensorrt.backend import TensorRTBackend

    install("10.13.3.9")
    with pytest.raises(UsageError, match="weak typing .* put precision in the ONNX graph"):
        TensorRTBackend(strongly_typed=False)
    install("11.4.0.106")
    with pytest.raises(UsageError, match="always strongly typed"):
        TensorRTBackend(strongly_typed=False)


def test_refuses_without_a_gpu(install: Callable[..., ModuleType]) -> None:
    from reprobuild.backends.tensorrt import backend as tensorrt_backend

    install(cuda=NO_GPU)
    with pytest.raises(BackendUnavailable, match="no NVIDIA GPU visible .*CUDA_ERROR_NO_DEVICE"):
        backend()
    assert "no NVIDIA GPU visible" in (tensorrt_backend.unusable_reason() or "")


def test_auto_picks_tensorrt_only_where_it_can_run(
    install: Callable[..., ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    from reprobuild.backends import _tensorrt_findable, get_backend
    from reprobuild.backends.tensorrt.backend import TensorRTBackend

    install("10.8.0.43")
    assert isinstance(get_backend("auto"), TensorRTBackend)
    install(cuda=NO_GPU)
    assert get_backend("auto").name == "reference"
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # blocked: as if not installed
    assert not _tensorrt_findable()
    assert get_backend("auto").name == "reference"
    monkeypatch.delitem(sys.modules, "tensorrt")
    import importlib.util

    for spec, findable in [(None, False), (object(), True)]:
        monkeypatch.setattr(importlib.util, "find_spec", lambda _name, s=spec: s)
        assert _tensorrt_findable() is findable

    def broken(_name: str) -> None:
        raise ValueError("tensorrt.__spec__ is None")

    monkeypatch.setattr(importlib.util, "find_spec", broken)
    assert _tensorrt_findable(), "a broken install goes to the backend, which names the fault"


def test_auto_without_tensorrt_does_not_import_its_backend(tmp_path: Path) -> None:
    """``auto`` on a machine without TensorRT: no import of the backend nor the CUDA probe
    (a tenth of a small locked rebuild's imports)."""
    import subprocess

    code = (
        "import sys; sys.modules['tensorrt'] = None\n"
        "from reprobuild.backends import get_backend\n"
        "print(get_backend('auto').name, 'reprobuild.backends.tensorrt.backend' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.split() == ["reference", "False"]


# ---------------------------------------------------------------------------- versions


def test_strongly_typed_flag_on_10x_default_on_11x(install: Callable[..., ModuleType]) -> None:
    install("10.13.3.9")
    assert backend().network_flags() == 1 << 1
    _, lines10, out10 = record(backend(), MLP)
    install("11.4.0.106")
    assert backend().network_flags() == 0
    _, lines11, out11 = record(backend(), MLP)
    assert not any("deprecated" in line for line in lines10 + lines11)
    # Recorded by name: the integer of EDITABLE_TIMING_CACHE is 27 on 10.x, 26 on 11.x.
    assert out10.extra["builder_flags"] == out11.extra["builder_flags"]
    assert "build_route" in out11.extra and "build_route" not in out10.extra


def test_environment_fingerprint(install: Callable[..., ModuleType]) -> None:
    install("11.4.0.106")
    env = backend().environment()
    assert env.identity_dict() == {
        "tensorrt_version": "11.4.0.106",
        "gpu": "NVIDIA A100-SXM4-80GB",
        "compute_capability": "8.0",
    }  # no SM count or CUDA major known to the fake probe and the stand-in module
    assert env.advisory_dict() == {
        "driver_version": "550.54.14",
        "cuda_runtime": "12.4",
        "card": "0",
    }
    h100 = cuda_probe.CudaInfo(
        gpus=(cuda_probe.GpuInfo(0, "NVIDIA H100 80GB HBM3", "9.0"),),
        driver_version="550.54.14",
        runtime_version="12.4",
    )
    install("11.4.0.106", cuda=h100)
    assert backend().environment().fingerprint() != env.fingerprint()


# ---------------------------------------------------------------------------- settings


def test_settings_are_applied_and_change_the_candidates(trt: ModuleType) -> None:
    be = backend()
    base_cache, base_lines, _ = record(be, CNN)
    settings = BuildSettings(
        tf32=False,
        max_num_tactics=2,
        workspace=1 << 28,
        tactic_sources=("EDGE_MASK_CONVOLUTIONS",),
        tiling_optimization_level="FAST",
        hardware_compatibility_level="AMPERE_PLUS",
        max_aux_streams=0,
        avg_timing_iterations=4,
    )
    cache, lines, out = record(be, CNN, settings)
    records = parse_log(lines)
    assert all(1 <= len(r.rows) <= 2 for r in records.values())
    kernels = [k for r in records.values() for _, k in r.rows]
    assert kernels and not any("tf32" in k or "jit" in k for k in kernels)
    assert "TF32" not in out.extra["builder_flags"]
    assert not set(cache.query_keys()) & set(base_cache.query_keys())
    assert any("tf32" in k for r in parse_log(base_lines).values() for _, k in r.rows)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("tactic_sources", ("CUDNN",), "unknown tactic source 'CUDNN' for TensorRT 11.4.0.106"),
        ("tiling_optimization_level", "TURBO", "unknown tiling optimization level 'TURBO'"),
        ("hardware_compatibility_level", "ANY", "unknown hardware compatibility level 'ANY'"),
        ("workspace", 0, "workspace=0 must be a positive number of bytes"),
        ("max_num_tactics", 2.5, "max_num_tactics=2.5 must be an integer"),
    ],
)
def test_bad_settings_are_usage_errors(
    install: Callable[..., ModuleType], field: str, value: object, message: str
) -> None:
    install("11.4.0.106")
    be = backend()
    settings = BuildSettings(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=re.escape(message)):
        be.build(str(CNN), settings, be.create_timing_cache(), lambda line: None)


def test_cudnn_is_a_valid_tactic_source_on_10x(trt: ModuleType) -> None:
    be = backend()
    settings = BuildSettings(tactic_sources=("CUBLAS", "CUDNN", "JIT_CONVOLUTIONS"))
    _, lines, _ = record(be, CNN, settings)
    conv = [r for r in parse_log(lines).values() if r.op.startswith("conv")]
    assert conv and all(any("jit" in k for _, k in r.rows) for r in conv)
    assert not any("edge_mask" in k for r in conv for _, k in r.rows)


def test_optimization_profiles_from_input_shapes(trt: ModuleType, tmp_path: Path) -> None:
    model = twin_matmul_model(tmp_path / "dyn.onnx", batch="N")
    be = backend()
    with pytest.raises(BuildError, match="no optimization profile"):
        record(be, model)
    shapes = (("x", (1, 16), (4, 16), (8, 16)),)
    cache, _, _ = record(be, model, BuildSettings(input_shapes=shapes))
    assert len(cache.query_keys()) == 2
    other, _, _ = record(be, model, BuildSettings(input_shapes=(("x", (1, 16), (2, 16), (8, 16)),)))
    assert not set(cache.query_keys()) & set(other.query_keys())  # profiles are in the keys
    with pytest.raises(UsageError, match="'y', which is not a network input"):
        record(be, model, BuildSettings(input_shapes=(("y", (1, 16), (4, 16), (8, 16)),)))
    with pytest.raises(UsageError, match="rejected the optimization profile"):
        record(be, model, BuildSettings(input_shapes=(("x", (8, 16), (4, 16), (1, 16)),)))


# ---------------------------------------------------------------------------- parser


def test_parser_errors_are_reported_with_descriptions(trt: ModuleType, tmp_path: Path) -> None:
    be = backend()
    with pytest.raises(BuildError) as err:
        record(be, unsupported_op_model(tmp_path / "bad.onnx"))
    msg = str(err.value)
    assert "the TensorRT ONNX parser failed" in msg
    assert "No importer registered for op: Einsum" in msg and "'weird' (Einsum)" in msg
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00not an onnx file")
    with pytest.raises(BuildError, match="Failed to parse ONNX model"):
        record(be, garbage)
    with pytest.raises(UsageError, match="no such ONNX model"):
        record(be, tmp_path / "missing.onnx")


# ---------------------------------------------------------------------------- caches


def test_cache_round_trips_through_bytes(trt: ModuleType) -> None:
    be = backend()
    cache, _, _ = record(be, MLP)
    again = be.create_timing_cache(cache.serialize())
    assert again.tactic_map() == cache.tactic_map() and len(again.tactic_map()) == 2
    lines: list[str] = []
    be.build(str(MLP), BuildSettings(), again, lines.append)
    assert not any("Autotuning op" in line for line in lines)


def test_corrupted_or_foreign_cache_bytes_are_cache_errors(
    install: Callable[..., ModuleType],
) -> None:
    install("10.13.3.9")
    cache, _, _ = record(backend(), MLP)
    data = cache.serialize()
    be = backend()
    with pytest.raises(CacheError, match="corrupted or from another TensorRT version"):
        be.create_timing_cache(b"garbage" + data)
    install("11.4.0.106")
    with pytest.raises(CacheError, match="created by TensorRT 10.13.3.9"):
        backend().create_timing_cache(data)


def test_cache_from_another_gpu_is_attached_but_never_used(
    install: Callable[..., ModuleType],
) -> None:
    """Attached with ignore_mismatch=True (same-SKU GPUs need it); another GPU model's keys
    simply differ, so its entries serve nothing and the build records its own keys."""
    install(device="NVIDIA A100-SXM4-80GB")
    data = record(backend(), MLP)[0].serialize()
    install(device="NVIDIA H100 80GB HBM3")
    be = backend()
    cache = be.create_timing_cache(data)
    foreign = cache.tactic_map()
    lines: list[str] = []
    be.build(str(MLP), BuildSettings(), cache, lines.append)
    assert len(cache.tactic_map()) == 2 * len(foreign)  # two new keys, none reused
    assert sum("Writing the best tactic" in line for line in lines) == 2


def test_combine_never_overrides_and_reset_empties(trt: ModuleType) -> None:
    be = backend()
    a, _, _ = record(be, MLP)
    b, _, _ = record(be, MLP)
    key = a.query_keys()[0]
    assert a.update(key, 0x1111, 0.5) and b.update(key, 0x2222, 0.5)
    c, _, _ = record(be, CNN)
    assert a.combine(b) is True
    assert a.query(key).tactic_hash == 0x1111
    assert a.combine(c) is True
    assert set(a.query_keys()) == set(b.query_keys()) | set(c.query_keys())
    a.reset()
    assert a.query_keys() == [] and a.tactic_map() == {}


def test_build_rejects_a_cache_from_another_backend(trt: ModuleType) -> None:
    class Foreign:
        def serialize(self) -> bytes:
            return b""

    be = backend()
    with pytest.raises(UsageError, match="not created by the tensorrt backend"):
        be.build(str(MLP), BuildSettings(), Foreign(), lambda line: None)  # type: ignore[arg-type]


def test_run_refuses_bytes_that_are_not_an_engine(trt: ModuleType) -> None:
    be = backend()
    with pytest.raises(EngineError, match="not a TensorRT 10.13.3.9 engine for this GPU"):
        be.run(b"not an engine", {})


# ---------------------------------------------------------------------------- logger


def test_a_sinks_error_is_held_and_never_hides_the_builds_own_failure(trt: ModuleType) -> None:
    """The sink's exception comes back from stop() after a build that worked; while the build
    itself fails, its error is told (a Ctrl-C from the sink always comes back)."""
    router = LogRouter()
    logger = trt_make_logger(trt, router)

    def broken(_line: str) -> None:
        raise ValueError("parser bug")

    router.start(broken)
    logger.log(trt.ILogger.Severity.WARNING, "x")
    with pytest.raises(ValueError, match="parser bug"):
        router.stop()
    router.start(broken)
    logger.log(trt.ILogger.Severity.WARNING, "x")
    assert router.stop(raise_pending=False) == 0

    def interrupted(_line: str) -> None:
        raise KeyboardInterrupt

    router.start(interrupted)
    logger.log(trt.ILogger.Severity.WARNING, "x")
    with pytest.raises(KeyboardInterrupt):
        router.stop(raise_pending=False)


def test_logger_prefixes_like_trtexec_and_keeps_errors(trt: ModuleType) -> None:
    router = LogRouter()
    logger = trt_make_logger(trt, router)
    lines: list[str] = []
    router.start(lines.append)
    logger.log(trt.ILogger.Severity.WARNING, "first\nsecond")
    logger.log(trt.ILogger.Severity.INTERNAL_ERROR, "boom")
    logger.log(trt.ILogger.Severity.VERBOSE, "Autotuning op x(key: 0x" + "0" * 32 + "):")
    assert router.stop() == 4
    assert PREFIX_RE.match(lines[0]).group(1) == "W" and lines[0].endswith("] first")
    assert lines[1] == "second"
    assert PREFIX_RE.match(lines[2]).group(1) == "F"
    assert PREFIX_RE.match(lines[3]).group(1) == "V"
    assert router.errors_since(0) == ["boom"]


def test_sink_exceptions_surface_after_the_build(trt: ModuleType) -> None:
    be = backend()

    seen: list[str] = []

    def sink(line: str) -> None:
        if "Autotuning op fc2" in line:
            raise KeyboardInterrupt
        seen.append(line)

    cache = be.create_timing_cache()
    with pytest.raises(KeyboardInterrupt):
        be.build(str(MLP), BuildSettings(), cache, sink)
    # The C++ side never saw the exception: the build finished, then it surfaced.
    assert len(cache.query_keys()) == 2
    assert not any("fc2" in line for line in seen)  # nothing forwarded after the failure


def test_a_log_parser_failure_is_a_warning_and_the_build_stands(
    trt: ModuleType, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log line the parser raises on (a form never seen) fails no build: the cache map and
    the engine inspector decide, the report warns naming the line, the rest goes unparsed.
    Ctrl-C from the parser still stops the build."""
    from reprobuild.logs.parser import LogParser
    from reprobuild.workflow.pinned import LogCollector

    feed = LogParser.feed
    trigger = ["Autotuning op fc2"]  # the recording's second table
    fed: list[str] = []

    def fragile(self: LogParser, line: str) -> list:
        if trigger[0] in line:
            raise ValueError("unexpected form")
        fed.append(line)
        return feed(self, line)

    monkeypatch.setattr(LogParser, "feed", fragile)
    lock, out = tmp_path / "t.lock", tmp_path / "mlp.engine"
    args = ("build", str(MLP), "--backend", "tensorrt", "--lock", str(lock), "-o", str(out),
            "--cache-dir", str(tmp_path / "c"), "--json")  # fmt: skip
    res = cli(*args)
    assert res.code == 0, res
    warnings = json.loads(res.out)["warnings"]
    assert (
        "log line 11: the log parser failed at this line of the recording log (ValueError: "
        "unexpected form): the log's remaining lines were not parsed" in "\n".join(warnings)
    )
    assert not any("fc2" in line for line in fed)  # nothing after the failure
    assert len(load_lock(lock).layers) == 2  # fc2's key locked from the cache map
    trigger[0] = "Global timing cache in use"  # a locked build: the pinned build's first line
    res = cli(*args)
    assert res.code == 0, res
    assert "log line 1: the log parser failed at this line of the pinned build log" in res.out

    def interrupted(self: LogParser, line: str) -> list:
        raise KeyboardInterrupt

    monkeypatch.setattr(LogParser, "feed", interrupted)
    with pytest.raises(KeyboardInterrupt):
        LogCollector(lambda _e: None, "pinned build")("a line")


# ---------------------------------------------------------------------------- kernel cross-check


def test_cross_check_matches_myelin_fused_and_profile_names() -> None:
    from reprobuild.pinning import cross_check_kernels, engine_layer_matches

    assert engine_layer_matches("matMul1", "matMul1_myl0_0")
    assert engine_layer_matches("matMul1", "matMul1_myl11_3 [profile 1]")
    assert engine_layer_matches("node_relu_1", "node_conv2d_1 + node_relu_1")
    assert not engine_layer_matches("matMul1", "matMul12_myl0_0")
    assert not engine_layer_matches("matMul1", "matMul1_extra")
    info = json.dumps(
        {
            "Layers": [
                {"Name": "matMul1_myl0_0", "TacticName": "k_a"},
                {"Name": "matMul1_myl1_0 [profile 1]", "TacticName": "k_b"},
                {"Name": "__myl_TraMaxSubExpSum_myl0_1", "TacticName": "__myl_x"},
            ]
        }
    )
    lock = [
        LayerEntry("0x" + "1" * 32, "matMul1", 1, "k_a", True),
        LayerEntry("0x" + "2" * 32, "matMul1", 2, "k_b", True),
    ]
    assert engine_layer_matches("/fc1/MatMul", "_fc1_MatMul_myl0_2")
    assert engine_layer_matches("node_linear", "node_linear [profile 1]_myl11_2")
    check = cross_check_kernels(info, lock)
    assert (check.problems, check.warnings) == ([], [])
    # k_b is another recorded candidate of matMul1: the profile-1 copy drifted.
    with_cands = [
        LayerEntry(
            "0x" + "1" * 32,
            "matMul1",
            1,
            "k_a",
            True,
            [LockCandidate(1, "k_a"), LockCandidate(2, "k_b")],
        )
    ]
    assert cross_check_kernels(info, with_cands).problems == [
        "layer 'matMul1': engine layer 'matMul1_myl1_0 [profile 1]' uses kernel 'k_b', "
        "the lock says 'k_a'"
    ]
    # A kernel that is none of the layer's candidates (split/fused Myelin): a warning only.
    unknown = cross_check_kernels(info, lock[:1])
    assert unknown.problems == [] and len(unknown.warnings) == 1
    assert "none of the layer's recorded candidates" in unknown.warnings[0]
    missing = cross_check_kernels(info, [LayerEntry("0x" + "3" * 32, "matMul2", 3, "k", True)])
    assert missing.problems == [] and len(missing.warnings) == 1
    assert "layer 'matMul2': no engine layer is named after it" in missing.warnings[0]
    names_only = json.dumps({"Layers": ["matMul1_myl0_0"], "Bindings": []})
    assert "ProfilingVerbosity.DETAILED" in cross_check_kernels(names_only, lock).warnings[0]
    none = cross_check_kernels(info, [LayerEntry("0x" + "4" * 32, "x", 4, None, True)])
    assert (none.problems, none.warnings) == ([], [])


def test_cross_check_on_a_real_exported_layer_info_file() -> None:
    from reprobuild.pinning import cross_check_kernels

    path = ROOT / "tests/fixtures/trt-logs/trt84_trex_resnet_a100_fp16_exportLayerInfo.json"
    if not path.exists():
        pytest.skip("shared TensorRT fixtures are not available in this checkout")
    text = path.read_text().split("\n", 1)[1]  # line 1 is the collector's '# source:' note
    layers = {r["Name"]: r for r in json.loads(text)["Layers"]}
    conv5 = layers["Conv_5 + Add_6 + Relu_7"]["TacticName"]
    value = int(layers["Conv_5 + Add_6 + Relu_7"]["TacticValue"], 16)
    assert conv5
    ok = [
        LayerEntry("0x" + "5" * 32, "Conv_5", value, conv5, True),
        LayerEntry("0x" + "6" * 32, "Add_6", value, conv5, True),  # not the Reformat feeding it
    ]
    assert cross_check_kernels(text, ok).problems == []
    other = LockCandidate(5, "sm80_other_kernel")
    wrong = [LayerEntry("0x" + "5" * 32, "Conv_5", 5, "sm80_other_kernel", True, [other])]
    assert len(cross_check_kernels(text, wrong).problems) == 0  # the real one is unknown here
    # the engine runs another recorded candidate: its TacticValue (the hash) says so, even
    # when the candidates' kernel names are the same
    drifted = [
        LayerEntry(
            "0x" + "5" * 32,
            "Conv_5",
            5,
            conv5,
            True,
            [LockCandidate(5, conv5), LockCandidate(value, conv5)],
        )
    ]
    assert len(cross_check_kernels(text, drifted).problems) == 1


# ---------------------------------------------------------------------------- cachedir


def test_cache_dir_layout_and_atomic_round_trip(tmp_path: Path) -> None:
    from reprobuild.cachedir import cache_path, load_cache_bytes, save_cache_bytes

    env = trt_env(gpu="A100")
    settings = BuildSettings()
    path = cache_path(tmp_path / "caches", env, settings, "AB" * 32)
    assert path == tmp_path / "caches" / (
        f"tensorrt-{env.fingerprint()}-{settings.fingerprint()}-{'ab' * 8}.cache"
    )
    assert load_cache_bytes(path) is None
    save_cache_bytes(path, b"\x00cache")
    assert load_cache_bytes(path) == b"\x00cache"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp files left
    other = cache_path(tmp_path / "caches", env, BuildSettings(tf32=False), "ab" * 32)
    assert other != path
    with pytest.raises(UsageError, match="not a hex digest"):
        cache_path(tmp_path, env, settings, "model.onnx")


def test_the_default_cache_dir_is_beside_the_lock_from_any_folder(
    trt: ModuleType, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build run from another folder reuses the recording cache beside the lock (another
    recording could make other keys); an explicit --cache-dir is relative to the current
    folder, as given."""
    here, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (here / "sub").mkdir(parents=True), elsewhere.mkdir()
    monkeypatch.chdir(here)
    assert cli("build", str(MLP), "--backend", "tensorrt", "--lock", "sub/t.lock", "-q").code == 0
    (cached,) = (here / "sub" / "caches").iterdir()
    recorded, stored = trt._standin.recordings, cached.read_bytes()
    monkeypatch.chdir(elsewhere)
    lock = str(here / "sub" / "t.lock")
    res = cli("build", str(MLP), "--backend", "tensorrt", "--lock", lock, "--frozen", "-q")
    assert res.code == 0, res
    assert trt._standin.recordings == recorded  # the stored recording, not a new one
    assert cached.read_bytes() == stored and sorted(elsewhere.iterdir()) == [
        elsewhere / "mlp.engine",
        elsewhere / "mlp.engine.layers.json",
        elsewhere / "mlp.engine.report.json",
    ]
    res = cli("build", str(MLP), "--backend", "tensorrt", "--lock", lock, "--cache-dir", "c")
    assert res.code == 0, res
    assert trt._standin.recordings == recorded + 1 and len(list(Path("c").iterdir())) == 1


# ---------------------------------------------------------------------------- CLI


def _with_identity(env: Environment, **fields: str) -> Environment:
    return Environment.make(env.backend, {**env.identity_dict(), **fields}, env.advisory_dict())


def _trt_lock(path: Path, model: Path, entries: list[LayerEntry], env: Environment) -> Path:
    import hashlib

    lock = Lock(
        model=ModelInfo(path=str(model), sha256=hashlib.sha256(model.read_bytes()).hexdigest()),
        environment=env,
        settings=BuildSettings(),
        layers=entries,
    )
    save_lock(lock, path)
    return path


def test_doctor_without_tensorrt(no_tensorrt: None, cli, tmp_path: Path) -> None:
    res = cli("doctor", "--json")
    assert res.code == 0, res
    report = json.loads(res.out)
    assert report["tensorrt"]["installed"] is False
    assert report["backends"]["tensorrt"]["available"] is False
    assert report["cuda"]["gpus"] == []
    res = cli("doctor")
    assert "TensorRT: not installed" in res.out and "GPUs: none visible" in res.out
    lock = _trt_lock(tmp_path / "t.lock", MLP, [], trt_env(gpu="NVIDIA A100"))
    res = cli("doctor", "--lock", str(lock))
    assert res.code == EXIT_ENV, res
    assert "tensorrt_version: lock '10.13.3.9', here None" in res.out + res.err


def test_doctor_with_tensorrt_and_a_matching_lock(trt: ModuleType, cli, tmp_path: Path) -> None:
    env = backend().environment()
    lock = _trt_lock(tmp_path / "t.lock", MLP, [], env)
    res = cli("doctor", "--lock", str(lock), "--json")
    assert res.code == 0, res
    report = json.loads(res.out)
    assert report["tensorrt"]["version"] == "10.13.3.9"
    assert report["tensorrt"]["editable_timing_cache"] is True
    assert report["lock"]["matches"] is True
    assert report["cuda"]["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    other = _trt_lock(tmp_path / "o.lock", MLP, [], _with_identity(env, gpu="NVIDIA H100"))
    res = cli("doctor", "--lock", str(other))
    assert (
        res.code == EXIT_ENV and "gpu: lock 'NVIDIA H100', here 'NVIDIA A100-SXM4-80GB'" in res.out
    )


def test_export_cache_without_tensorrt_exits_3(no_tensorrt: None, cli, tmp_path: Path) -> None:
    lock = _trt_lock(tmp_path / "t.lock", MLP, [], trt_env(gpu=None, cc=None))
    res = cli("export-cache", "--lock", str(lock), "-o", str(tmp_path / "p.cache"))
    assert res.code == EXIT_ENV and "TensorRT is not installed" in res.err
    assert not (tmp_path / "p.cache").exists()


def test_export_cache_writes_a_cache_holding_the_lock(trt: ModuleType, cli, tmp_path: Path) -> None:
    be = backend()
    _, lines, _ = record(be, MLP)
    entries = entries_from(parse_log(lines), pick=1)
    lock = _trt_lock(tmp_path / "t.lock", MLP, entries, be.environment())
    out = tmp_path / "pinned.cache"
    caches = tmp_path / "caches"
    res = cli("export-cache", "--lock", str(lock), "-o", str(out), "--cache-dir", str(caches))
    assert res.code == 0, res
    assert "recording cache recorded now" in res.out
    exported = be.create_timing_cache(out.read_bytes())
    assert exported.tactic_map() == {e.key: e.tactic for e in entries}
    # A build from the exported file (what trtexec --timingCacheFile does) uses the lock.
    built = be.build(str(MLP), BuildSettings(), exported, lambda line: None)
    names = tactic_names(built.layer_info)
    assert names["fc1_myl0_0"] == next(e.kernel for e in entries if e.layer == "fc1")
    assert len(list(caches.iterdir())) == 1
    res = cli(
        "export-cache", "--lock", str(lock), "-o", str(out), "--cache-dir", str(caches), "--json"
    )
    assert res.code == 0 and json.loads(res.out)["recorded_now"] is False


def test_export_cache_refusals(trt: ModuleType, cli, tmp_path: Path) -> None:
    be = backend()
    env = be.environment()
    ref = _trt_lock(tmp_path / "r.lock", MLP, [], Environment.make("reference", {}, {"cpu": "cpu"}))
    res = cli("export-cache", "--lock", str(ref), "-o", str(tmp_path / "x.cache"))
    assert res.code == EXIT_USAGE and "'reference' backend" in res.err
    other = _trt_lock(tmp_path / "o.lock", MLP, [], _with_identity(env, gpu="H100"))
    res = cli("export-cache", "--lock", str(other), "-o", str(tmp_path / "x.cache"))
    assert res.code == EXIT_ENV and "gpu: lock 'H100'" in res.err
    stale = LayerEntry("0x" + "f" * 32, "fc1", 0x1234, None, True)
    bad = _trt_lock(tmp_path / "b.lock", MLP, [stale], env)
    res = cli(
        "export-cache",
        "--lock",
        str(bad),
        "-o",
        str(tmp_path / "x.cache"),
        "--cache-dir",
        str(tmp_path / "c"),
    )
    assert res.code == EXIT_USAGE and "layer 'fc1'" in res.err and stale.key in res.err
    assert not (tmp_path / "x.cache").exists()


# ---------------------------------------------------------------------------- real GPU


@pytest.mark.tensorrt
def test_real_tensorrt_records_and_pins(tmp_path: Path) -> None:
    from reprobuild import pinning
    from reprobuild.backends.tensorrt import backend as tensorrt_backend

    reason = tensorrt_backend.unusable_reason()
    if reason:
        pytest.skip(reason)
    import numpy as np

    be = tensorrt_backend.TensorRTBackend()
    cache, lines, out = record(be, MLP)
    records = parse_log(lines)
    assert records and set(records) <= set(cache.query_keys())
    entries = entries_from(records, pick=1)
    pinning.update_tactics(cache, entries)
    before = cache.tactic_map()
    pinned = be.build(str(MLP), BuildSettings(), cache, lambda line: None)
    pinning.check_no_drift(before, cache.tactic_map())
    assert pinning.cross_check_kernels(pinned.layer_info, entries).problems == []
    x = np.random.default_rng(0).standard_normal((8, 1024)).astype(np.float32)
    a = be.run(pinned.engine, {"input": x})
    b = be.run(pinned.engine, {"input": x})
    assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    ("libraries", "problem"),
    [
        ({}, "the CUDA driver library (libcuda) is not installed or not loadable"),
        ({"libcuda.so.1": fake_cuda.driver(init=100)}, "cuInit failed: CUDA_ERROR_NO_DEVICE"),
        ({"libcuda.so.1": fake_cuda.driver()}, None),  # a driver that counts 0 devices
    ],
    ids=["no-driver", "no-device", "zero-devices"],
)
def test_cuda_probe_never_raises_and_explains_a_missing_gpu(
    monkeypatch: pytest.MonkeyPatch, libraries: dict, problem: str | None
) -> None:
    """No GPU, made so here (the driver libraries the probe loads are injected), whatever
    the machine running the tests has."""
    monkeypatch.setattr(cuda_probe, "ctypes", fake_cuda.loader(libraries))
    info = cuda_probe.probe_cuda()
    assert info.gpus == () and info.runtime_version is None
    assert info.no_gpu_reason is not None
    assert info.no_gpu_reason.startswith("no NVIDIA GPU visible (")
    if problem is None:
        assert "0 devices" in info.no_gpu_reason and info.problems == ()
    else:
        assert info.problems == (problem,) and problem in info.no_gpu_reason
    assert json.loads(json.dumps(info.to_dict()))["gpus"] == []


def test_cuda_probe_reads_each_gpu_from_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU, made so here: name, compute capability, SM count and UUID per device, the
    driver API version (no NVML: it stands for the driver version) and the runtime's."""
    libraries = {
        "libcuda.so.1": fake_cuda.driver(("NVIDIA H200", 9, 0, 132), ("NVIDIA A100", 8, 0, 108)),
        "libcudart.so.13": fake_cuda.cudart(),
    }
    monkeypatch.setattr(cuda_probe, "ctypes", fake_cuda.loader(libraries))
    info = cuda_probe.probe_cuda()
    uuid = "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert json.loads(json.dumps(info.to_dict())) == {
        "gpus": [
            {"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132,
             "uuid": uuid},
            {"index": 1, "name": "NVIDIA A100", "compute_capability": "8.0", "sm_count": 108,
             "uuid": uuid},
        ],
        "driver_version": "13.0",
        "cuda_driver_api_version": "13.0",
        "cuda_runtime_version": "13.0",
        "problems": [],
    }  # fmt: skip
    assert info.no_gpu_reason is None


# ---------------------------------------------------------------- constructors that fail


@pytest.mark.parametrize("failing", ["Builder", "Runtime", "OnnxParser"])
def test_a_constructor_that_fails_is_an_environment_error_not_a_crash(
    trt: ModuleType, cli, tmp_path: Path, failing: str
) -> None:
    """The real bindings raise TypeError("... factory function returned nullptr") when the
    driver cannot serve this TensorRT (tests/test_trt_real_bindings.py): exit 3, one line."""
    trt._standin.fail_create.add(failing)
    out = tmp_path / "mlp.engine"
    res = cli(
        "build",
        str(MLP),
        "--backend",
        "tensorrt",
        "--lock",
        str(tmp_path / "t.lock"),
        "-o",
        str(out),
    )
    assert res.code == EXIT_ENV, res
    assert "factory function returned nullptr" in res.err and "driver" in res.err
    errors = [line for line in res.err.splitlines() if line.startswith("error:")]
    assert "Traceback" not in res.err and len(errors) == 1
    assert not out.exists() and not (tmp_path / "t.lock").exists()


def test_doctor_creates_a_builder_and_a_runtime_before_calling_tensorrt_available(
    trt: ModuleType, cli
) -> None:
    res = cli("doctor", "--json")
    assert json.loads(res.out)["backends"]["tensorrt"]["available"] is True
    trt._standin.fail_create.add("Runtime")
    res = cli("doctor", "--json")
    state = json.loads(res.out)["backends"]["tensorrt"]
    assert state["available"] is False
    assert "could not create a runtime" in state["problem"]
    assert "factory function returned nullptr" in state["problem"]


def test_a_strict_build_that_fails_is_retried_loudly(trt: ModuleType, cli, tmp_path: Path) -> None:
    """ERROR_ON_TIMING_CACHE_MISS fails the pinned build on a missing key; the retry
    without it is named in the drift message, never silent."""
    lock, out = tmp_path / "t.lock", tmp_path / "mlp.engine"
    args = ("build", str(MLP), "--backend", "tensorrt", "--lock", str(lock), "-o", str(out))
    assert cli(*args).code == 0
    trt._standin.rekey_ops.add("fc2")  # fc2 gets a new key: a miss the flag stops
    res = cli(*args)
    assert res.code == EXIT_DIFFERENT, res
    assert "was added by the build" in res.err
    assert "failed with ERROR_ON_TIMING_CACHE_MISS (Timing cache miss for node fc2" in res.err
