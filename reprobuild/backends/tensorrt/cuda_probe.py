"""What GPU and CUDA versions this machine has, read with ctypes from the driver libraries.

TensorRT's Python API has no device query, and cuda-python is not a dependency, so the
environment fingerprint asks the CUDA driver (``libcuda``), NVML and the CUDA runtime
directly. Every step degrades to ``None``: ``reprobuild doctor`` must run on machines with no
GPU at all and say so instead of crashing.

Fields and their sources:
- GPUs: CUDA driver API (``cuDeviceGetName`` / compute-capability attributes 75 and 76), so
  ``CUDA_VISIBLE_DEVICES`` is respected and index 0 is the device TensorRT builds on.
- ``driver_version``: NVML's driver string (``"550.54.14"``); if NVML is missing, the CUDA
  driver API version (``"12.4"``).
- ``runtime_version``: ``cudaRuntimeGetVersion`` of the first ``libcudart`` found (pip
  ``nvidia-cuda-runtime`` wheels first, then the loader path); None when there is none.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from dataclasses import dataclass, field

_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_capability: str
    sm_count: int | None = None  # one name can cover parts with other SM counts
    uuid: str | None = None  # which card: advisory, never part of a target


@dataclass(frozen=True)
class CudaInfo:
    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str | None = None
    driver_api_version: str | None = None
    runtime_version: str | None = None
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def no_gpu_reason(self) -> str | None:
        """None when a GPU is visible, else why not (for a one-line refusal)."""
        if self.gpus:
            return None
        detail = "; ".join(self.problems) if self.problems else "the CUDA driver reports 0 devices"
        return f"no NVIDIA GPU visible ({detail})"

    def to_dict(self) -> dict[str, object]:
        return {
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "compute_capability": g.compute_capability,
                    "sm_count": g.sm_count,
                    "uuid": g.uuid,
                }
                for g in self.gpus
            ],
            "driver_version": self.driver_version,
            "cuda_driver_api_version": self.driver_api_version,
            "cuda_runtime_version": self.runtime_version,
            "problems": list(self.problems),
        }


def _version_from_int(value: int) -> str:
    return f"{value // 1000}.{(value % 1000) // 10}"


def _load(names: list[str]) -> ctypes.CDLL | None:
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _driver_library_names() -> list[str]:
    if sys.platform.startswith("win"):
        return ["nvcuda.dll"]
    return ["libcuda.so.1", "libcuda.so"]


def _nvml_library_names() -> list[str]:
    if sys.platform.startswith("win"):
        return ["nvml.dll"]
    return ["libnvidia-ml.so.1", "libnvidia-ml.so"]


def cudart_candidates() -> list[str]:
    """pip-installed CUDA runtimes first (what TensorRT wheels pull in), then the loader."""
    found: list[str] = []
    pattern = "cudart64_*.dll" if sys.platform.startswith("win") else "libcudart.so*"
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        for sub in ("nvidia/cuda_runtime/lib", "nvidia/cuda_runtime/bin", "nvidia/cu13/lib"):
            found.extend(sorted(glob.glob(os.path.join(entry, sub, pattern)), reverse=True))
    if sys.platform.startswith("win"):
        return found
    return [*found, "libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"]


def _driver_error(lib: ctypes.CDLL, code: int) -> str:
    name = ctypes.c_char_p()
    try:
        if lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
            return name.value.decode("ascii", "replace")
    except (AttributeError, OSError):
        pass
    return f"CUresult {code}"


def _probe_driver(problems: list[str]) -> tuple[list[GpuInfo], str | None]:
    lib = _load(_driver_library_names())
    if lib is None:
        problems.append("the CUDA driver library (libcuda) is not installed or not loadable")
        return [], None
    try:
        version = ctypes.c_int(0)
        api_version = None
        if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value:
            api_version = _version_from_int(version.value)
        code = lib.cuInit(0)
        if code != 0:
            problems.append(f"cuInit failed: {_driver_error(lib, code)}")
            return [], api_version
        count = ctypes.c_int(0)
        code = lib.cuDeviceGetCount(ctypes.byref(count))
        if code != 0:
            problems.append(f"cuDeviceGetCount failed: {_driver_error(lib, code)}")
            return [], api_version
        gpus: list[GpuInfo] = []
        for ordinal in range(count.value):
            device = ctypes.c_int(0)
            if lib.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
                continue
            buf = ctypes.create_string_buffer(256)
            lib.cuDeviceGetName(buf, 256, device)
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            lib.cuDeviceGetAttribute(
                ctypes.byref(major), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device
            )
            lib.cuDeviceGetAttribute(
                ctypes.byref(minor), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device
            )
            sms = ctypes.c_int(0)
            got_sms = lib.cuDeviceGetAttribute(
                ctypes.byref(sms), _CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device
            )
            gpus.append(
                GpuInfo(
                    index=ordinal,
                    name=buf.value.decode("utf-8", "replace"),
                    compute_capability=f"{major.value}.{minor.value}",
                    sm_count=sms.value if got_sms == 0 and sms.value > 0 else None,
                    uuid=_device_uuid(lib, device),
                )
            )
        return gpus, api_version
    except (AttributeError, OSError) as err:
        problems.append(f"the CUDA driver library is unusable ({err})")
        return [], None


def _device_uuid(lib: ctypes.CDLL, device: ctypes.c_int) -> str | None:
    """``GPU-xxxxxxxx-xxxx-...`` as nvidia-smi prints it, or None where the driver has no
    ``cuDeviceGetUuid`` (it is advisory: which card, not which kind of card)."""
    raw = ctypes.create_string_buffer(16)
    for name in ("cuDeviceGetUuid_v2", "cuDeviceGetUuid"):
        fn = getattr(lib, name, None)
        if fn is None:
            continue
        try:
            if fn(raw, device) != 0:
                return None
        except OSError:
            return None
        h = raw.raw.hex()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return None


def _probe_nvml() -> str | None:
    lib = _load(_nvml_library_names())
    if lib is None:
        return None
    try:
        init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
        if init() != 0:
            return None
        try:
            buf = ctypes.create_string_buffer(96)
            if lib.nvmlSystemGetDriverVersion(buf, 96) != 0:
                return None
            return buf.value.decode("ascii", "replace") or None
        finally:
            lib.nvmlShutdown()
    except (AttributeError, OSError):
        return None


def _probe_runtime() -> str | None:
    for candidate in cudart_candidates():
        lib = _load([candidate])
        if lib is None:
            continue
        try:
            version = ctypes.c_int(0)
            if lib.cudaRuntimeGetVersion(ctypes.byref(version)) == 0 and version.value:
                return _version_from_int(version.value)
        except (AttributeError, OSError):
            continue
    return None


def probe_cuda() -> CudaInfo:
    """Query the machine; never raises (problems are reported in ``CudaInfo.problems``)."""
    problems: list[str] = []
    gpus, api_version = _probe_driver(problems)
    nvml_version = _probe_nvml()
    return CudaInfo(
        gpus=tuple(gpus),
        driver_version=nvml_version or api_version,
        driver_api_version=api_version,
        runtime_version=_probe_runtime(),
        problems=tuple(problems),
    )
