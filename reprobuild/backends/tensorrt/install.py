"""What TensorRT is installed here and whether it can run: the one place that imports the
``tensorrt`` module (:func:`_trt`), reads its version, creates its factories' objects
(:func:`trt_create`, whose failure is an environment error) and describes the machine's
``tensorrt`` environment. ``doctor`` and backend selection ask only this module, so they
work without TensorRT; :mod:`.backend` builds on it.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from reprobuild.backends.base import Environment
from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.backends.tensorrt.logger import LogRouter, trt_make_logger
from reprobuild.errors import BackendUnavailable

MIN_VERSION = (10, 8)
INSTALL_HINT = (
    "pip install --extra-index-url https://pypi.nvidia.com 'reprobuild[tensorrt-cu13]' for a "
    "CUDA 13 driver (nvidia-smi: CUDA Version 13.x), 'reprobuild[tensorrt-cu12]' for CUDA 12"
)


class TensorRTNotInstalled(BackendUnavailable):
    """No ``tensorrt`` module at all (as opposed to one that fails to load)."""


def _trt() -> ModuleType:
    """The ``tensorrt`` module (or the test stand-in in ``sys.modules``); imported lazily."""
    try:
        return importlib.import_module("tensorrt")
    except ImportError as err:
        if getattr(err, "name", None) == "tensorrt":
            raise TensorRTNotInstalled(f"TensorRT is not installed: {INSTALL_HINT}") from None
        raise BackendUnavailable(
            f"TensorRT is installed but cannot be loaded ({err}); reinstall it: {INSTALL_HINT}"
        ) from None
    except Exception as err:  # e.g. OSError for missing libnvinfer, CUDA init failures
        raise BackendUnavailable(
            f"TensorRT is installed but cannot be loaded ({type(err).__name__}: {err}); "
            f"reinstall it: {INSTALL_HINT}"
        ) from None


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", version)
    return tuple(int(p) for p in parts[:4])


def _version(trt: ModuleType) -> str:
    if hasattr(trt, "__version__"):
        return str(trt.__version__)
    from importlib import metadata

    for dist in ("tensorrt", "tensorrt-cu13", "tensorrt-cu12"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def _editable_cache_refusal(trt: ModuleType) -> str | None:
    version = _version(trt)
    parts = _version_tuple(version)
    too_old = bool(parts) and parts[:2] < MIN_VERSION  # unparsable: trust the flag check
    if too_old or not hasattr(trt.BuilderFlag, "EDITABLE_TIMING_CACHE"):
        return (
            f"TensorRT {version} has no editable timing cache; upgrade to >= 10.8; "
            "`reprobuild log` still parses its logs"
        )
    return None


@dataclass(frozen=True)
class TensorRTInfo:
    """What ``doctor`` reports about the TensorRT install (works without TensorRT)."""

    installed: bool
    version: str | None
    editable_timing_cache: bool
    weak_typing_available: bool
    problem: str | None

    def to_dict(self) -> dict[str, object]:
        return {
            "installed": self.installed,
            "version": self.version,
            "editable_timing_cache": self.editable_timing_cache,
            "weak_typing_available": self.weak_typing_available,
            "problem": self.problem,
        }


def probe_tensorrt() -> TensorRTInfo:
    try:
        trt = _trt()
    except BackendUnavailable as err:
        installed = not isinstance(err, TensorRTNotInstalled)
        return TensorRTInfo(installed, None, False, False, str(err))
    refusal = _editable_cache_refusal(trt)
    return TensorRTInfo(
        installed=True,
        version=_version(trt),
        editable_timing_cache=refusal is None,
        weak_typing_available=hasattr(trt.BuilderFlag, "FP16"),
        problem=refusal,
    )


def unusable_reason() -> str | None:
    """Why the backend cannot run here (one line), or None when it can."""
    try:
        trt = _trt()
    except BackendUnavailable as err:
        return str(err)
    refusal = _editable_cache_refusal(trt)
    if refusal:
        return refusal
    return cuda_probe.probe_cuda().no_gpu_reason


CREATE_HINT = (
    "the GPU driver may be too old for this TensorRT (the CUDA 13 build, which the plain "
    "`tensorrt` package is since 10.13.3, needs a CUDA 13 driver; "
    "`pip install 'reprobuild[tensorrt-cu12]'` works with CUDA 12 drivers), or "
    "its libraries are broken: reinstall TensorRT"
)


def trt_create(
    trt_factory: Any, what: str, *args: Any, errors: Callable[[], list[str]] | None = None
) -> Any:
    """``trt.Builder(logger)``, ``trt.Runtime(logger)`` or ``trt.OnnxParser(net, logger)``.

    The real bindings raise ``TypeError("... factory function returned nullptr")`` when
    TensorRT cannot create the object (no usable driver, a broken install); stand-ins and
    older versions may return None. Both become one environment error (exit 3) naming the
    object, the last error TensorRT logged (``errors``) and the likely fix.
    """
    try:
        trt_obj = trt_factory(*args)
    except (TypeError, RuntimeError) as err:
        problem = f"{type(err).__name__}: {err}"
    else:
        if trt_obj is not None:
            return trt_obj
        problem = "it returned None"
    logged_errors = errors() if errors is not None else []
    logged = f"; TensorRT logged: {logged_errors[-1]}" if logged_errors else ""
    raise BackendUnavailable(
        f"TensorRT could not create {what} ({problem}){logged}; {CREATE_HINT}; "
        "check with `reprobuild doctor`"
    )


def creation_problem() -> str | None:
    """Whether TensorRT can create a builder and a runtime here (what ``doctor`` asks before
    calling the machine usable): None when it can, else the one-line reason. Importing the
    module and finding a GPU is not enough: a driver too old for the installed TensorRT
    fails only here."""
    reason = unusable_reason()
    if reason is not None:
        return reason
    trt = _trt()
    router = LogRouter()
    trt_logger = trt_make_logger(trt, router)
    router.start(lambda line: None)
    try:
        trt_builder = trt_create(
            trt.Builder, "a builder", trt_logger, errors=lambda: router.errors_since(0)
        )
        trt_runtime = trt_create(
            trt.Runtime, "a runtime", trt_logger, errors=lambda: router.errors_since(0)
        )
        del trt_runtime, trt_builder
    except BackendUnavailable as err:
        return str(err)
    finally:
        router.stop()
    return None


def is_usable() -> bool:
    return unusable_reason() is None


def machine_environment(cuda: cuda_probe.CudaInfo | None = None) -> Environment:
    """This machine's ``tensorrt`` environment; fields are None where unknown (no GPU/TRT)."""
    info = cuda if cuda is not None else cuda_probe.probe_cuda()
    try:
        version: str | None = _version(_trt())
    except BackendUnavailable:
        version = None
    gpu = info.gpus[0] if info.gpus else None
    # Identity: what decides which kernels exist and which TensorRT may pick (its full
    # version, the GPU model: name, compute capability and SM count, and the CUDA major
    # version TensorRT was built for). Advisory: the driver (an update changes neither keys
    # nor tactics), the first libcudart the loader finds (not necessarily TensorRT's) and
    # which card of the model this is.
    identity = {
        "tensorrt_version": version,
        "gpu": gpu.name if gpu else None,
        "compute_capability": gpu.compute_capability if gpu else None,
        "sm_count": gpu.sm_count if gpu else None,
        "cuda_major": tensorrt_cuda_major(),
    }
    advisory = {
        "driver_version": info.driver_version,
        "cuda_runtime": info.runtime_version,
        "card": f"{gpu.index} {gpu.uuid or ''}".strip() if gpu else None,
    }
    return Environment.make("tensorrt", identity, advisory)


@functools.lru_cache(maxsize=1)
def tensorrt_cuda_major() -> str | None:
    """The CUDA major version of the installed TensorRT flavour, from its distribution's
    name (``tensorrt-cu12``, ``tensorrt_cu13_bindings``, ...): what its kernels were built
    against, whichever ``libcudart`` the loader would find first. Read once per process:
    the installed distributions do not change while it runs, and reading them walks every
    distribution's file list (a sixth of a second in a typical venv, and a probe asks for
    the environment some twenty times)."""
    from importlib import metadata

    try:
        dists = metadata.packages_distributions().get("tensorrt", [])
    except Exception:  # a broken site-packages: unknown, not fatal
        return None
    majors = sorted({m.group(1) for d in dists if (m := re.search(r"cu(\d+)", d.lower()))})
    return majors[0] if len(majors) == 1 else None


# The oldest Linux driver of each CUDA major (NVIDIA's CUDA toolkit release notes).
_MIN_DRIVER = {"12": "525", "13": "580"}


def driver_problem(cuda: cuda_probe.CudaInfo, built_for: str | None) -> str | None:
    """Why this driver cannot run the installed TensorRT wheel: the CUDA version the driver
    supports (``cuDriverGetVersion``) is older than the CUDA major the wheel was built for
    (``built_for``: :func:`tensorrt_cuda_major`; tensorrt-cu13 and TensorRT 11 need CUDA 13,
    driver 580+). None when it can, or either version is unknown: ``doctor`` says it before
    TensorRT fails obscurely when it creates a builder."""
    driver = cuda.driver_api_version
    try:
        have, need = int((driver or "").split(".")[0]), int(built_for or "")
    except ValueError:
        return None
    if have >= need:
        return None
    oldest = _MIN_DRIVER.get(str(need))
    fix = (
        f"update the driver ({oldest} or later for CUDA {need})" if oldest else "update the driver"
    )
    if have == 12:
        fix += ", or pip install tensorrt-cu12 (TensorRT for this driver's CUDA 12)"
    return (
        f"the driver supports CUDA {driver}, older than the CUDA {need} the installed TensorRT "
        f"wheel (tensorrt-cu{need}) was built for: {fix}"
    )
