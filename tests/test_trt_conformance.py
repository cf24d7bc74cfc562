"""The tensorrt backend and the stand-in use only names the real TensorRT bindings have.

How the names are collected (no hand-typed list): ``tests.tools.trt_names`` scans
the backend's source files with ``ast``. TensorRT objects live only in names spelled
``trt``/``trt_*``/``_trt_*`` (a convention the same scan enforces, see
``test_backend_follows_the_naming_convention``), so every attribute, method, enum member and
keyword argument used on them is visible. The stand-in's names are read from module objects
built for each emulated version.

The real names come from ``tensorrt_bindings/tensorrt.so`` inside the pinned
``tensorrt-cu12-bindings==10.13.3.9`` and ``tensorrt-cu13-bindings==11.4.0.106`` wheels,
downloaded with ``pip download --no-deps`` into ``~/.cache/reprobuild-trt-wheels`` (or
``$REPROBUILD_TRT_WHEELS``) and read as bytes, never imported. The wheel tests skip only when
pip cannot reach the package index.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.tools import trt_names as apinames
from tests.tools.trt_names import (
    WHEELS,
    BindingNames,
    IndexUnreachable,
    module_public_names,
    read_bindings_wheel,
    scan_sources,
    scanned_paths,
)
from tests.trt_standin import VARIANTS, make_module

# Names the backend uses that exist in only one of the two checked versions, and where.
# Each must be feature-detected (hasattr / getattr with a default) in the backend.
VERSION_SPECIFIC = {
    "FP16": "10.13.3.9",  # BuilderFlag.FP16: weak typing exists -> ask for STRONGLY_TYPED
    "build_route": "11.4.0.106",  # IBuilderConfig.build_route (11.1+), recorded when present
    # IOutputAllocator overrides (execute.py defines both; TensorRT calls the one it has).
    # 10.13's docstring shows both signatures, but only 11.4 carries them as bare names.
    "reallocate_output": "11.4.0.106",
    "reallocate_output_async": "11.4.0.106",
}
# Methods the backend *defines* on a TensorRT subclass: TensorRT looks them up, so there is
# nothing to guard (a version that does not call one never reads it).
OVERRIDES = {"reallocate_output", "reallocate_output_async"}


@pytest.fixture(scope="module")
def bindings() -> dict[str, BindingNames]:
    cache_dir = apinames.default_wheel_cache()
    result: dict[str, BindingNames] = {}
    for spec in WHEELS:
        try:
            path = apinames.fetch_wheel(spec, cache_dir)
        except IndexUnreachable as err:
            pytest.skip(f"package index unreachable, cannot check TensorRT names: {err}")
        result[spec.version] = read_bindings_wheel(path)
    return result


@pytest.fixture(scope="module")
def scan() -> apinames.ScanResult:
    return scan_sources(scanned_paths())


# ---------------------------------------------------------------------------- the collector


def test_backend_follows_the_naming_convention(scan: apinames.ScanResult) -> None:
    assert scan.violations == []


def test_the_scan_covers_the_backend_files() -> None:
    names = {p.name for p in scanned_paths()}
    assert {"backend.py", "cache.py", "logger.py", "cuda_probe.py", "trt_cmds.py"} <= names
    package = apinames.PACKAGE_ROOT / "backends" / "tensorrt"
    unscanned = {p.name for p in package.glob("*.py")} - names - {"__init__.py"}
    assert unscanned == set(), "new backend modules must be added to SCANNED_FILES"


def test_the_scan_finds_the_core_api(scan: apinames.ScanResult) -> None:
    # A floor, not the list: if the collector broke, these would vanish.
    core = {
        "EDITABLE_TIMING_CACHE", "STRONGLY_TYPED", "NetworkDefinitionCreationFlag",
        "queryKeys", "TimingCacheKey", "parse", "TimingCacheValue", "tacticHash",
        "timingMSec", "update", "create_timing_cache", "set_timing_cache", "ignore_mismatch",
        "build_serialized_network", "create_engine_inspector", "get_engine_information",
        "JSON", "DETAILED", "ILogger", "Severity", "log", "__init__", "parse_from_file",
        "num_errors", "get_error", "desc",
    }  # fmt: skip
    assert core <= scan.names()
    assert {"FP16", "build_route", "__version__"} <= scan.guarded_names()


def _scan_snippet(tmp_path: Path, code: str) -> apinames.ScanResult:
    path = tmp_path / "snippet.py"
    path.write_text(textwrap.dedent(code))
    return scan_sources([path], root=tmp_path)


def test_the_scanner_collects_and_rejects(tmp_path: Path) -> None:
    result = _scan_snippet(
        tmp_path,
        """
        def _trt_config(trt, logger):
            trt_builder = trt.Builder(logger)
            trt_config = trt_builder.create_builder_config()
            trt_config.max_aux_streams = 2
            if hasattr(trt.BuilderFlag, "FP16"):
                pass
            return trt_config

        def good(trt, trt_cache):
            keys = [str(trt_key) for trt_key in trt_cache.queryKeys()]
            trt_cache.combine(trt_cache, ignore_mismatch=True)
            return keys

        def bad(trt, trt_cache, name):
            builder = trt.Builder(None)
            for key in trt_cache.queryKeys():
                print(key.whatever)
            getattr(trt.BuilderFlag, name)
            helper(trt_cache)
            return trt.Runtime

        def helper(cache):
            return cache
        """,
    )
    assert {
        "Builder", "create_builder_config", "max_aux_streams", "FP16", "queryKeys",
        "combine", "ignore_mismatch", "Runtime",
    } <= result.names()  # fmt: skip
    assert "whatever" not in result.names()  # hidden behind a plain name: hence the rules
    assert result.guarded_names() == {"FP16"}
    problems = "\n".join(result.violations)
    assert "TensorRT object bound to 'builder'" in problems
    assert "TensorRT object bound to 'key'" in problems
    assert "getattr() on a TensorRT object with a computed name" in problems
    assert "TensorRT object passed to parameter 'cache'" in problems
    assert "function 'bad' returns a TensorRT object" in problems
    assert len(result.violations) == 5


def test_subclass_overrides_are_collected(tmp_path: Path) -> None:
    result = _scan_snippet(
        tmp_path,
        """
        def trt_logger(trt):
            class L(trt.ILogger):
                def __init__(self):
                    trt.ILogger.__init__(self)
                def log(self, trt_level, msg):
                    pass
                def extra_helper(self):
                    pass
            return L()
        """,
    )
    overrides = {u.name for u in result.uses if u.kind == "override"}
    assert overrides == {"__init__", "log", "extra_helper"}
    assert result.violations == []


# ---------------------------------------------------------------------------- the wheels


def test_wheel_reader_sees_real_differences(bindings: dict[str, BindingNames]) -> None:
    v10, v11 = bindings["10.13.3.9"], bindings["11.4.0.106"]
    assert (v10.version, v11.version) == ("10.13.3.9", "11.4.0.106")
    # Removed in 11.x (weak typing and legacy tactic sources), present in 10.13:
    for name in ("CUDNN", "CUBLAS_LT", "OBEY_PRECISION_CONSTRAINTS", "EXPLICIT_BATCH"):
        assert v10.has(name) and not v11.has(name), name
    for name in ("NoSuchTensorRTName", "queryKeysX", "EDITABLE_TIMING_CACHE2"):
        assert not v10.has(name) and not v11.has(name), name
    # A tail-merged string (stored only inside "get_num_errors") and a Python-level name:
    assert v10.lookup("num_errors") == "tail"
    assert v10.lookup("__version__") == "python" and v11.has("__version__")


def test_every_backend_name_exists_in_the_real_bindings(
    scan: apinames.ScanResult, bindings: dict[str, BindingNames]
) -> None:
    versions = sorted(bindings)
    absent = {
        name: scan.where(name)
        for name in sorted(scan.names())
        if not any(bindings[v].has(name) for v in versions)
    }
    assert absent == {}, f"names used by the backend that no checked TensorRT has: {absent}"
    only_one = {
        name: next(v for v in versions if bindings[v].has(name))
        for name in scan.names()
        if sum(bindings[v].has(name) for v in versions) == 1
    }
    assert only_one == VERSION_SPECIFIC
    unguarded = sorted(set(only_one) - scan.guarded_names() - OVERRIDES)
    assert unguarded == [], f"version-specific names used without hasattr/getattr: {unguarded}"
    both = [n for n in scan.names() if all(bindings[v].has(n) for v in versions)]
    print(
        f"\nchecked {len(scan.names())} backend names: "
        + ", ".join(
            f"{v}: {sum(bindings[v].has(n) for n in scan.names())} present" for v in versions
        )
        + f"; {len(both)} in both; version-specific: {sorted(only_one)}"
    )


@pytest.mark.parametrize("version", VARIANTS)
def test_standin_defines_only_real_names(version: str, bindings: dict[str, BindingNames]) -> None:
    real = bindings["10.13.3.9" if version.startswith("10.") else "11.4.0.106"]
    names = module_public_names(make_module(version))
    missing = {name: where for name, where in names.items() if not real.has(name)}
    assert missing == {}, f"stand-in {version} defines names {real.version} lacks: {missing}"
    assert len(names) > 80  # the stand-in really was inspected


def test_standin_versions_differ_like_the_real_ones() -> None:
    names = {v: set(module_public_names(make_module(v))) for v in VARIANTS}
    assert "EDITABLE_TIMING_CACHE" not in names["10.7.0.23"]
    assert "EDITABLE_TIMING_CACHE" in names["10.8.0.43"]
    assert {"FP16", "CUDNN", "EXPLICIT_BATCH"} <= names["10.13.3.9"] - names["11.4.0.106"]
    assert "build_route" in names["11.4.0.106"] and "build_route" not in names["11.0.0.114"]


def test_module_public_names_reads_classes_and_enums() -> None:
    module = make_module("11.4.0.106")
    names = module_public_names(module)
    assert names["queryKeys"] == "ITimingCache.queryKeys"
    assert names["VERBOSE"] == "ILogger.Severity.VERBOSE"
    assert names["__version__"] == "__version__"
    assert not any(n.startswith("_") and n != "__version__" for n in names)
