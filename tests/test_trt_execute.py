"""``run``'s tensor types and error paths (reprobuild/backends/tensorrt/execute.py, device.py)."""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np
import pytest

from reprobuild.backends.tensorrt import device as device_mod
from reprobuild.backends.tensorrt.execute import np_dtype, pack, run_polygraphy, unpack
from reprobuild.errors import EXIT_ENV, BackendUnavailable


class DataType(enum.Enum):
    """TensorRT's DataType member names (10.13 and 11.4 bindings: FLOAT ... FP4, E8M0)."""

    FLOAT = 0
    HALF = 1
    BF16 = 7
    FP8 = 6
    INT4 = 9
    FP4 = 10


class _Trt:
    @staticmethod
    def nptype(trt_type):  # the real one raises for the narrow types
        return {DataType.FLOAT: np.float32, DataType.HALF: np.float16}[trt_type]


@pytest.mark.parametrize(
    ("member", "want"),
    [
        (DataType.FLOAT, np.float32),
        (DataType.HALF, np.float16),
        (DataType.BF16, ml_dtypes.bfloat16),
        (DataType.FP8, ml_dtypes.float8_e4m3fn),
        (DataType.INT4, ml_dtypes.int4),
    ],
)
def test_every_tensor_type_has_a_numpy_dtype(member, want) -> None:
    assert np_dtype(_Trt, member) == np.dtype(want)


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, getattr(ml_dtypes, "float4_e2m1fn", None)])
def test_four_bit_tensors_pack_two_to_a_byte_and_back(dtype) -> None:
    if dtype is None:
        pytest.skip("this ml_dtypes has no float4_e2m1fn")
    values = np.array([[-3, 1, 0], [2, -1, 1]], np.float32).astype(dtype)
    packed = pack(values)
    assert packed.dtype == np.uint8 and packed.size == 3
    assert (unpack(packed, np.dtype(dtype), values.shape) == values).all()


def test_a_cuda_error_is_an_environment_error_naming_it() -> None:
    with pytest.raises(BackendUnavailable) as err:
        device_mod._check(35, "cudaStreamCreate")
    assert err.value.exit_code == EXIT_ENV
    assert "cudaStreamCreate failed with CUDA error 35 (cudaErrorInsufficientDriver" in str(
        err.value
    )
    device_mod._check((0, 1), "cudaMalloc")  # cuda-python's (status, value): fine


def test_the_install_hint_names_the_cuda_13_runtime_wheel(monkeypatch) -> None:
    import sys

    monkeypatch.setattr(device_mod.cuda_probe, "cudart_candidates", lambda: [])
    for name in ("cuda", "cuda.bindings", "cupy", "cupy.cuda"):  # even if imported already
        monkeypatch.setitem(sys.modules, name, None)
    _, why = device_mod.find_device()
    assert "nvidia-cuda-runtime (CUDA 13)" in why and "-cu13" not in why


def test_a_polygraphy_that_fails_to_import_is_one_line(monkeypatch) -> None:
    import sys

    class Broken:
        def __getattr__(self, name):
            raise RuntimeError("polygraphy lazy import failed: no libcudart")

    monkeypatch.setitem(sys.modules, "polygraphy.backend.trt", Broken())
    with pytest.raises(BackendUnavailable) as err:
        run_polygraphy(object(), {}, "no CUDA runtime found")
    assert "no CUDA runtime found (Polygraphy: polygraphy lazy import failed" in str(err.value)
