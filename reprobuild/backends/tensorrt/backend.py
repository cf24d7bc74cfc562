"""The ``tensorrt`` backend: editable-timing-cache builds with TensorRT 10.8 to 11.x.

Written to the real Python bindings (checked name by name against the 10.13 and 11.4 wheels
by ``tests/test_trt_conformance.py``). Conventions that the conformance test relies on:

- The ``tensorrt`` module is obtained only through :func:`_trt` and bound to a name ``trt``
  (or an attribute ``_trt_module``); tests inject a stand-in by putting it in
  ``sys.modules["tensorrt"]``.
- Every variable, attribute or function that holds or returns a TensorRT object is named
  ``trt``/``trt_*``/``_trt_*``; plain values taken from TensorRT are wrapped in ``str()``,
  ``int()``, ``float()``, ``bool()`` or ``bytes()``. So every attribute read on a TensorRT
  object is visible to an AST scan (see ``tests.tools.trt_names``).
- Names that exist in only one supported TensorRT version are used only behind
  ``hasattr``/``getattr(..., default)``.

Build recipe: ONNX parser -> strongly typed network (the creation flag on 10.x, the default
on 11.x) -> builder config with ``EDITABLE_TIMING_CACHE``, ``ProfilingVerbosity.DETAILED``,
``DISABLE_COMPILATION_CACHE`` and every candidate-changing setting from ``BuildSettings`` ->
the caller's timing cache attached with ``set_timing_cache(cache, ignore_mismatch=True)`` ->
``build_serialized_network`` -> engine inspector JSON. The verbose log goes to the caller's
sink with trtexec's prefix.

Why these choices (NVIDIA's own use of the editable cache at scale, TensorRT-Model-Connect):
- ``DISABLE_COMPILATION_CACHE`` on every build: JIT-compiled (Myelin) code is otherwise
  stored in and reused from the timing cache, and a reused compilation can carry the
  recording's kernel past a pin.
- ``ignore_mismatch=True``: a cache attached strictly was refused on a second GPU of the
  same SKU. Foreign caches cannot slip in: cache files are named by the environment, a
  cache that lacks the lock's keys is re-recorded, and the caller replays every locked
  tactic with ``update()`` and compares the cache map before and after.
- pinned builds also set ``ERROR_ON_TIMING_CACHE_MISS`` (where the version has it). When
  such a build fails, it is run once more without the flag, so a miss becomes a cache-map
  difference that names the key (drift, exit 1) and any other failure keeps its message.

``run`` goes through TensorRT's own execution API (``create_execution_context``,
``set_tensor_address``, ``execute_async_v3``) with device memory from :mod:`.device`
(``libcudart`` where the pip wheels put it, else cuda-python or cupy); only when none of
those exists does it fall back to Polygraphy's ``TrtRunner``, which searches system paths.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from reprobuild.backends.base import BuildOutput, BuildSettings, Environment, LogSink, TimingCache
from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.backends.tensorrt.cache import TrtTimingCache
from reprobuild.backends.tensorrt.config import configure
from reprobuild.backends.tensorrt.logger import LogRouter, trt_make_logger
from reprobuild.errors import (
    BackendUnavailable,
    BuildError,
    CacheError,
    EngineError,
    UsageError,
)

__all__ = [
    "MIN_VERSION",
    "TensorRTBackend",
    "TensorRTInfo",
    "TensorRTNotInstalled",
    "TrtTimingCache",
    "creation_problem",
    "is_usable",
    "machine_environment",
    "probe_tensorrt",
    "trt_create",
    "unusable_reason",
]

MIN_VERSION = (10, 8)
INSTALL_HINT = (
    "pip install --extra-index-url https://pypi.nvidia.com 'tensorrt-cu12>=10.8' "
    "(or tensorrt-cu13 for CUDA 13)"
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
    "the GPU driver may be too old for this TensorRT (TensorRT 11 for CUDA 13 needs a "
    "CUDA 13 driver; `pip install 'tensorrt-cu12>=10.8'` works with CUDA 12 drivers), or "
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


def tensorrt_cuda_major() -> str | None:
    """The CUDA major version of the installed TensorRT flavour, from its distribution's
    name (``tensorrt-cu12``, ``tensorrt_cu13_bindings``, ...): what its kernels were built
    against, whichever ``libcudart`` the loader would find first."""
    import re
    from importlib import metadata

    try:
        dists = metadata.packages_distributions().get("tensorrt", [])
    except Exception:  # a broken site-packages: unknown, not fatal
        return None
    majors = sorted({m.group(1) for d in dists if (m := re.search(r"cu(\d+)", d.lower()))})
    return majors[0] if len(majors) == 1 else None


def _check_settings(settings: BuildSettings) -> None:
    level = settings.optimization_level
    if level == 0:
        raise UsageError(
            "builder optimization level 0 ignores the timing cache, so tactics cannot be "
            "locked; use a level from 1 to 5 (default 3)"
        )
    if level < 0:
        raise UsageError(f"builder optimization level {level} is invalid; use 1 to 5 (default 3)")
    for field_name in ("workspace", "max_num_tactics", "avg_timing_iterations", "max_aux_streams"):
        value = getattr(settings, field_name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise UsageError(f"setting {field_name}={value!r} must be an integer")
    if settings.workspace is not None and settings.workspace <= 0:
        raise UsageError(f"workspace={settings.workspace} must be a positive number of bytes")


class TensorRTBackend:
    """Builds and runs engines with the real TensorRT; one builder and logger per instance."""

    name = "tensorrt"

    def __init__(self, *, strongly_typed: bool = True) -> None:
        trt = _trt()
        refusal = _editable_cache_refusal(trt)
        if refusal:
            raise BackendUnavailable(refusal)
        if not strongly_typed:
            weak = hasattr(trt.BuilderFlag, "FP16")
            raise UsageError(
                "weak typing lets TensorRT pick precisions and formats per build even with "
                "the same timing cache, so it cannot be locked; "
                + (
                    "reprobuild builds strongly typed networks: put precision in the ONNX "
                    "graph (Cast nodes, tensor types)"
                    if weak
                    else f"TensorRT {_version(trt)} is always strongly typed anyway"
                )
            )
        self._cuda = cuda_probe.probe_cuda()
        reason = self._cuda.no_gpu_reason
        if reason:
            raise BackendUnavailable(f"backend 'tensorrt' cannot run here: {reason}")
        self._trt_module = trt
        self._router = LogRouter()
        self._trt_logger = trt_make_logger(trt, self._router)
        self._trt_builder_obj: Any = None
        self.last_run_path: str | None = None

    def check_settings(self, settings: BuildSettings) -> None:
        """Refuse settings that cannot be locked here (level 0 ignores the timing cache)."""
        _check_settings(settings)

    # ------------------------------------------------------------------ environment

    @property
    def version(self) -> str:
        return _version(self._trt_module)

    def environment(self) -> Environment:
        return machine_environment(self._cuda)

    def _trt_builder(self) -> Any:
        if self._trt_builder_obj is None:
            mark = self._router.error_mark()
            self._trt_builder_obj = trt_create(
                self._trt_module.Builder,
                "a builder",
                self._trt_logger,
                errors=lambda: self._router.errors_since(mark),
            )
        return self._trt_builder_obj

    # ------------------------------------------------------------------ timing caches

    def create_timing_cache(self, data: bytes = b"") -> TrtTimingCache:
        trt_config = self._trt_builder().create_builder_config()
        mark = self._router.error_mark()
        try:
            trt_cache = trt_config.create_timing_cache(bytes(data))
        except (RuntimeError, TypeError, ValueError) as err:
            raise CacheError(
                f"TensorRT {self.version} cannot load this timing cache ({err}); "
                "delete the cache file so a recording build re-creates it"
            ) from None
        errors = self._router.errors_since(mark)
        if trt_cache is None or errors:
            detail = f" ({errors[-1]})" if errors else ""
            raise CacheError(
                f"timing cache is corrupted or from another TensorRT version{detail}; "
                "delete the cache file so a recording build re-creates it"
            )
        return TrtTimingCache(self._trt_module, trt_cache, trt_config, self.create_timing_cache)

    def strict_attach_accepted(self, data: bytes) -> bool:
        """Whether ``set_timing_cache(cache, ignore_mismatch=False)`` takes a cache loaded
        from ``data`` (``doctor --probe`` asks; builds always attach leniently)."""
        trt_config = self._trt_builder().create_builder_config()
        trt_cache = trt_config.create_timing_cache(bytes(data))
        return bool(trt_config.set_timing_cache(trt_cache, ignore_mismatch=False))

    def _trt_cache_of(self, cache: TimingCache) -> Any:
        if isinstance(cache, TrtTimingCache):
            return cache.trt_cache
        raise UsageError(
            "the timing cache was not created by the tensorrt backend; "
            "create it with TensorRTBackend.create_timing_cache()"
        )

    # ------------------------------------------------------------------ building

    def network_flags(self) -> int:
        """Creation flags for a strongly typed network on this TensorRT version."""
        trt = self._trt_module
        if hasattr(trt.BuilderFlag, "FP16"):
            # 10.x still has weak typing (precision builder flags): ask for strong typing.
            return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        # 11.x: always strongly typed; the old flag is deprecated and ignored.
        return 0

    def _trt_parse(self, trt_network: Any, path: Path) -> Any:
        trt_parser = trt_create(
            self._trt_module.OnnxParser, "an ONNX parser", trt_network, self._trt_logger
        )
        if bool(trt_parser.parse_from_file(str(path))):
            return trt_parser
        problems = []
        for i in range(int(trt_parser.num_errors)):
            trt_error = trt_parser.get_error(i)
            node = int(trt_error.node())
            where = ""
            if node >= 0:
                where = f" at node {node} {str(trt_error.node_name())!r} "
                where += f"({str(trt_error.node_operator())})"
            problems.append(f"{str(trt_error.desc())}{where}")
        detail = "; ".join(problems) if problems else "no error description"
        raise BuildError(f"{path}: the TensorRT ONNX parser failed: {detail}")

    def build(
        self,
        model_path: str,
        settings: BuildSettings,
        cache: TimingCache,
        log: LogSink,
        *,
        pinned: bool = False,
    ) -> BuildOutput:
        _check_settings(settings)
        path = Path(model_path)
        if not path.is_file():
            raise UsageError(f"{path}: no such ONNX model file; check the path")
        trt = self._trt_module
        trt_cache = self._trt_cache_of(cache)
        self._router.start(log)
        try:
            trt_builder = self._trt_builder()
            trt_network = trt_builder.create_network(self.network_flags())
            # The parser owns the weights the network points to: keep it until the build ends.
            trt_parser = self._trt_parse(trt_network, path)
            trt_config = trt_builder.create_builder_config()
            applied = configure(trt, self.version, trt_builder, trt_network, trt_config, settings)
            if not bool(trt_config.set_timing_cache(trt_cache, ignore_mismatch=True)):
                raise CacheError(
                    "TensorRT refused the timing cache even with ignore_mismatch; delete the "
                    "cache file so a recording build re-creates it"
                )
            strict = pinned and hasattr(trt.BuilderFlag, "ERROR_ON_TIMING_CACHE_MISS")
            if strict:
                trt_config.set_flag(trt.BuilderFlag.ERROR_ON_TIMING_CACHE_MISS)
                applied["builder_flags"] = sorted(
                    [*applied["builder_flags"], "ERROR_ON_TIMING_CACHE_MISS"]
                )
            mark = self._router.error_mark()
            trt_serialized = trt_builder.build_serialized_network(trt_network, trt_config)
            if trt_serialized is None and strict:
                # A miss or another failure: without the flag a miss lands in the cache,
                # where the caller's map check names the key; other failures fail again.
                # The caller warns about the retry and reports it (``strict_failure``).
                first = self._router.errors_since(mark)
                applied["retried_without_error_on_miss"] = True
                applied["strict_failure"] = first[-1] if first else "no error was logged"
                trt_config.clear_flag(trt.BuilderFlag.ERROR_ON_TIMING_CACHE_MISS)
                mark = self._router.error_mark()
                trt_serialized = trt_builder.build_serialized_network(trt_network, trt_config)
            if trt_serialized is None:
                errors = self._router.errors_since(mark)
                detail = " | ".join(errors[-3:]) if errors else "no error was logged"
                raise BuildError(
                    f"{path}: TensorRT failed to build the engine: {detail}; if a pinned tactic "
                    "is named, unpin it or pin one of the layer's recorded candidates"
                )
            engine = bytes(trt_serialized)
            del trt_serialized, trt_parser
            layer_info = self._layer_info(engine)
        finally:
            lines = self._router.stop()
        return BuildOutput(engine=engine, layer_info=layer_info, log_lines=lines, extra=applied)

    def _layer_info(self, engine: bytes) -> str:
        trt = self._trt_module
        trt_runtime = trt_create(trt.Runtime, "a runtime", self._trt_logger)
        trt_engine = trt_runtime.deserialize_cuda_engine(engine)
        if trt_engine is None:
            raise BuildError("TensorRT could not load the engine it just built; see the log")
        trt_inspector = trt_engine.create_engine_inspector()
        info = str(trt_inspector.get_engine_information(trt.LayerInformationFormat.JSON))
        del trt_inspector, trt_engine  # before the runtime that created them
        return info

    # ------------------------------------------------------------------ running

    def _trt_load_engine(self, engine: bytes) -> tuple[Any, Any]:
        mark = self._router.error_mark()
        trt_runtime = trt_create(
            self._trt_module.Runtime,
            "a runtime",
            self._trt_logger,
            errors=lambda: self._router.errors_since(mark),
        )
        trt_engine = trt_runtime.deserialize_cuda_engine(bytes(engine))
        if trt_engine is None:
            errors = self._router.errors_since(mark)
            detail = f" ({errors[-1]})" if errors else ""
            raise EngineError(
                f"the engine is not a TensorRT {self.version} engine for this GPU{detail}; "
                "rebuild it with `reprobuild build` on this machine"
            )
        return trt_runtime, trt_engine

    def run(self, engine: bytes, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Run on the GPU with TensorRT's own API; Polygraphy only when no CUDA runtime is
        found (see :mod:`.device`). ``last_run_path`` says which ran."""
        from reprobuild.backends.tensorrt import device as device_mod
        from reprobuild.backends.tensorrt import execute

        device, how = device_mod.find_device()
        trt_runtime, trt_engine = self._trt_load_engine(engine)
        try:
            if device is not None:
                self.last_run_path = how
                return execute.run_engine(self._trt_module, trt_engine, inputs, device)
            self.last_run_path = "polygraphy TrtRunner"
            return execute.run_polygraphy(trt_engine, inputs, how)
        finally:
            del trt_engine, trt_runtime
