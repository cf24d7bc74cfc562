"""A forced OpenBLAS kernel family the CPU cannot run is refused before numpy loads it.

The CPU's flags are injected: nothing here depends on this machine's CPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reprobuild.backends.reference import coretype
from reprobuild.errors import BackendUnavailable

from .conftest import EXAMPLES

NO_AVX512 = "processor\t: 0\nflags\t\t: fpu sse2 ssse3 sse4_1 sse4_2 avx avx2 fma\n"
OLD_CPU = "processor\t: 0\nflags\t\t: fpu sse2 ssse3 sse4_1 sse4_2\n"


@pytest.mark.parametrize("family", ["SkylakeX", "Cooperlake", "sapphirerapids"])
def test_avx512_families_need_avx512f(family: str) -> None:
    env = {"OPENBLAS_CORETYPE": family}
    with pytest.raises(BackendUnavailable) as err:
        coretype.check_coretype(env, NO_AVX512, "x86_64")
    msg = str(err.value)
    assert f"OPENBLAS_CORETYPE={family}" in msg and "needs avx512f" in msg
    assert ("SkylakeX kernels" in msg) == (family != "SkylakeX")  # a renamed family: both
    note = coretype.check_coretype(env, NO_AVX512.replace("fma", "fma avx512f"), "x86_64")
    assert (note is None) == (family == "SkylakeX")  # runs; a renamed family is said


def test_other_families_and_machines() -> None:
    with pytest.raises(BackendUnavailable, match="needs avx2"):
        coretype.check_coretype({"OPENBLAS_CORETYPE": "Haswell"}, OLD_CPU, "x86_64")
    assert coretype.check_coretype({"OPENBLAS_CORETYPE": "Haswell"}, NO_AVX512, "x86_64") is None
    note = coretype.check_coretype({"OPENBLAS_CORETYPE": "Prescott"}, OLD_CPU, "x86_64")
    assert note is not None and "Prescott" in note and "blas_kernels: Katmai" in note
    assert coretype.check_coretype({}, OLD_CPU, "x86_64") is None
    # another architecture's families, or no flags to read: nothing is checked
    assert coretype.check_coretype({"OPENBLAS_CORETYPE": "SkylakeX"}, OLD_CPU, "aarch64") is None
    assert coretype.check_coretype({"OPENBLAS_CORETYPE": "SkylakeX"}, "", "x86_64") is None


def test_build_is_refused_before_numpy_runs_leaving_nothing(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(EXAMPLES / "cnn.onnx", tmp_path / "cnn.onnx")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(coretype, "read_cpuinfo", lambda: NO_AVX512)
    monkeypatch.setattr(coretype.platform, "machine", lambda: "x86_64")
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Cooperlake")
    r = cli("build", "cnn.onnx", "--lock", "tactics.lock", "--backend", "reference")
    assert r.code == 3, r
    assert r.err.count("\n") == 1 and "OPENBLAS_CORETYPE=Cooperlake (OpenBLAS's SkylakeX" in r.err
    assert "needs avx512f" in r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cnn.onnx"]
    assert cli("build", "--help").code == 0  # help loads no OpenBLAS
