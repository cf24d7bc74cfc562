"""The backend against the *real* TensorRT pybind11 layer: the bindings wheels of 10.13.3.9
and 11.4.0.106, loaded against empty stub libraries compiled here (tests/real_bindings).

Nothing is stood in for on the Python side: key parsing and printing, ``TimingCacheValue``,
enum names and values, the logger subclass and the constructors' failure are TensorRT's own.
Skips cleanly without a C compiler, off CPython 3.11 on x86-64 Linux (the wheels' only
platform), or when the package index cannot be reached to fetch a wheel.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import ROOT, child_env
from tests.real_bindings import stubs
from tests.tools import trt_names

pytestmark = pytest.mark.skipif(
    not (
        sys.platform == "linux"
        and platform.machine() == "x86_64"
        and sys.version_info[:2] == (3, 11)
    ),
    reason="the TensorRT bindings wheels are CPython 3.11, x86-64 Linux only",
)

SPECS = {spec.version: spec for spec in trt_names.WHEELS}


@pytest.fixture(scope="module", params=sorted(SPECS))
def observed(request, tmp_path_factory) -> dict:
    """What the real bindings of one version did, from a subprocess (see probe_script)."""
    if stubs.compiler() is None:
        pytest.skip("no C compiler (cc) to build the stub TensorRT libraries")
    spec = SPECS[request.param]
    try:
        wheel = trt_names.fetch_wheel(spec, trt_names.default_wheel_cache())
    except trt_names.IndexUnreachable as err:
        pytest.skip(f"package index unreachable, cannot fetch {spec.dist}: {err}")
    root = tmp_path_factory.mktemp(f"trt-{spec.version}")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(root / "site")
    major = int(spec.version.split(".")[0])
    libs = stubs.build_stubs(root / "libs", major)
    env = child_env([root / "site", ROOT])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs), env.get("LD_LIBRARY_PATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.real_bindings.probe_script"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"spec": spec.version, **json.loads(proc.stdout.strip().splitlines()[-1])}


def test_the_real_bindings_load_with_the_stub_libraries(observed: dict) -> None:
    assert observed["version"] == observed["spec"]


def test_keys_parse_and_print_lowercase_and_values_are_positional(observed: dict) -> None:
    assert observed["key_str"] == "0x" + "ab" * 16
    assert observed["cache_wrapper_key"] == "0x" + "cd" * 16
    assert observed["short_key"] != "accepted"
    assert observed["value"] == [0x665DED9ABBF88, pytest.approx(0.011264)]
    assert observed["value_keywords"] == "TypeError"


def test_enum_names_and_the_values_that_moved(observed: dict) -> None:
    flags = observed["flags"]
    ten = observed["spec"].startswith("10.")
    assert flags["EDITABLE_TIMING_CACHE"] == (27 if ten else 26)
    assert observed["strongly_typed"] == (1 if ten else 0)
    assert "ERROR_ON_TIMING_CACHE_MISS" in flags
    # build --distributive-independence sets it (both wheels carry it)
    assert flags["DISTRIBUTIVE_INDEPENDENCE"] == (28 if ten else 27)
    assert ("FP16" in flags) is ten  # weak typing is gone in 11.x
    assert observed["datatypes"] == {
        "FLOAT": "float32",
        "HALF": "float16",
        "BF16": "bfloat16",
        "FP8": "float8_e4m3fn",
        "INT4": "int4",
    }


def test_the_logger_subclass_receives_messages(observed: dict) -> None:
    lines = observed["logger"]["lines"]
    assert len(lines) == 2 and lines[0].endswith("[E] [TRT] stub error")
    assert observed["logger"]["errors"] == ["stub error"]


@pytest.mark.parametrize("what", ["a builder", "a runtime"])
def test_a_constructor_that_fails_raises_typeerror_and_reprobuild_says_so(
    observed: dict, what: str
) -> None:
    seen = observed["create"][what]
    assert seen["raw"] == "TypeError: pybind11::init(): factory function returned nullptr"
    assert seen["reprobuild"].startswith(f"exit 3: TensorRT could not create {what} (TypeError")
