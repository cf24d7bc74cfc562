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
- ``ignore_mismatch=True``: the cache header carries the physical GPU's UUID, so a cache
  attached strictly from another card of the same model fails the header check (NVIDIA's
  own replays attach strictly, on the card that recorded). Foreign caches cannot slip in:
  cache files are named by the environment, a cache that lacks the lock's keys is
  re-recorded, and the caller replays every locked tactic with ``update()`` and compares
  the cache map before and after.
- pinned builds also set ``ERROR_ON_TIMING_CACHE_MISS`` (where the version has it). When
  such a build fails, it is run once more without the flag, only to name what missed: the
  caller's map check and the retried build's timed keys name the keys, and the caller fails
  the build (exit 1) unless the user allowed the retry (``allow_miss_retry``,
  ``--allow-cache-miss-retry``); any other failure keeps TensorRT's message.

``run`` goes through TensorRT's own execution API (``create_execution_context``,
``set_tensor_address``, ``execute_async_v3``) with device memory from :mod:`.device`
(``libcudart`` where the pip wheels put it, else cuda-python or cupy); only when none of
those exists does it fall back to Polygraphy's ``TrtRunner``, which searches system paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reprobuild.backends.base import BuildOutput, BuildSettings, Environment, LogSink, TimingCache
from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.backends.tensorrt.cache import TrtTimingCache
from reprobuild.backends.tensorrt.config import configure, trt_distributive_independence
from reprobuild.backends.tensorrt.install import (
    MIN_VERSION,
    TensorRTInfo,
    TensorRTNotInstalled,
    _editable_cache_refusal,
    _trt,
    _version,
    creation_problem,
    is_usable,
    machine_environment,
    probe_tensorrt,
    trt_create,
    unusable_reason,
)
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


_BF16 = 16  # TensorProto.BFLOAT16


def _bf16_refusal(path: Path, cuda: cuda_probe.CudaInfo) -> str | None:
    """Why a model with bfloat16 tensors cannot build on this GPU, or None.

    TensorRT has no bfloat16 kernels before compute capability 8.0 (Ampere), and a strongly
    typed network cannot fall back to another type, so such a build fails only after the
    recording's work; this says so first. The model is read only on such a GPU."""
    gpu = cuda.gpus[0] if cuda.gpus else None
    if gpu is None or _cc(gpu.compute_capability) >= (8, 0):
        return None
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    typed = [*graph.input, *graph.output, *graph.value_info]
    uses = any(v.type.tensor_type.elem_type == _BF16 for v in typed)
    uses = uses or any(t.data_type == _BF16 for t in graph.initializer)
    uses = uses or any(
        a.name == "to" and a.i == _BF16
        for n in graph.node
        if n.op_type == "Cast"
        for a in n.attribute
    )
    if not uses:
        return None
    return (
        f"{path}: the model has bfloat16 tensors, and {gpu.name} (compute capability "
        f"{gpu.compute_capability}) has no bfloat16 kernels (TensorRT needs 8.0 or later); "
        "use fp16 (--precision fp16, or --float fp16 for INT8) on this GPU"
    )


def _cc(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return (int(major), int(minor or 0)) if major.isdigit() and minor.isdigit() else (99, 0)


class TensorRTBackend:
    """Builds and runs engines with the real TensorRT; one builder and logger per instance."""

    name = "tensorrt"
    key_rule = False  # TensorRT runs the key with the lowest cached time: recorded, checked
    # Whether a build honours a tactic written with update() that the builder did not choose:
    # shown by NVIDIA only for single-key Myelin layers edited in the same config, so the tie
    # rule's choices are reported, not written, unless the user opts in (--apply-tie-rule) or
    # `doctor --probe` showed edits honoured on this target (workflow/probe_store.py).
    edits_proven = False

    def __init__(self, *, strongly_typed: bool = True, allow_miss_retry: bool = False) -> None:
        """``allow_miss_retry``: a pinned build that failed with ERROR_ON_TIMING_CACHE_MISS
        and was built again without it is accepted (with a warning) when the cache map
        matches; by default it is a failure."""
        trt = _trt()
        self.allow_miss_retry = allow_miss_retry
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
        """Refuse settings that cannot be locked here (level 0 ignores the timing cache; a
        flag these bindings lack), before any work."""
        _check_settings(settings)
        if settings.distributive_independence:
            trt_distributive_independence(self._trt_module, self.version)

    # ------------------------------------------------------------------ environment

    @property
    def version(self) -> str:
        return _version(self._trt_module)

    def environment(self) -> Environment:
        return machine_environment(self._cuda)

    def for_target(self, target: Environment) -> TensorRTBackend:
        """TensorRT computes its keys itself: every target's keys are read back as recorded."""
        return self

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

    def check_recording(self) -> None:
        """A recording needs a CUDA runtime for its expected bits (:func:`.device.check_recording`);
        ``build`` asks before any work when it would record."""
        from reprobuild.backends.tensorrt import device as device_mod

        device_mod.check_recording(self.version)

    def strict_attach_accepted(self, data: bytes) -> bool:
        """Whether ``set_timing_cache(cache, ignore_mismatch=False)`` takes a cache loaded
        from ``data`` (``doctor --probe`` asks; builds always attach leniently). TensorRT
        raising on the way answers nothing: a ``CacheError`` naming the call and its error."""
        trt_config = self._trt_builder().create_builder_config()
        step = "create_timing_cache"
        try:
            trt_cache = trt_config.create_timing_cache(bytes(data))
            step = "set_timing_cache(ignore_mismatch=False)"
            return bool(trt_config.set_timing_cache(trt_cache, ignore_mismatch=False))
        except (RuntimeError, TypeError, ValueError) as err:
            raise CacheError(
                f"TensorRT {self.version} raised in {step} ({type(err).__name__}: {err})"
            ) from None

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
        editable: bool = True,
    ) -> BuildOutput:
        """``editable=False`` builds without ``EDITABLE_TIMING_CACHE``, as trtexec and
        Torch-TensorRT do: only ``doctor --probe`` asks for it, to compare the keys."""
        _check_settings(settings)
        path = Path(model_path)
        if not path.is_file():
            raise UsageError(f"{path}: no such ONNX model file; check the path")
        if (refusal := _bf16_refusal(path, self._cuda)) is not None:
            raise UsageError(refusal)
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
            if not editable:
                trt_config.clear_flag(trt.BuilderFlag.EDITABLE_TIMING_CACHE)
                applied["builder_flags"] = [
                    f for f in applied["builder_flags"] if f != "EDITABLE_TIMING_CACHE"
                ]
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
                # The caller fails the build unless ``retry_accepted`` (then it warns).
                first = self._router.errors_since(mark)
                applied["retried_without_error_on_miss"] = True
                applied["strict_failure"] = first[-1] if first else "no error was logged"
                applied["retry_accepted"] = self.allow_miss_retry
                trt_config.clear_flag(trt.BuilderFlag.ERROR_ON_TIMING_CACHE_MISS)
                mark = self._router.error_mark()
                trt_serialized = trt_builder.build_serialized_network(trt_network, trt_config)
            if trt_serialized is None:
                errors = self._router.errors_since(mark)
                detail = " | ".join(errors[-3:]) if errors else "no error was logged"
                # no pin is blamed here: the workflow adds the hint where the lock has pins
                raise BuildError(f"{path}: TensorRT failed to build the engine: {detail}")
            engine = bytes(trt_serialized)
            del trt_serialized, trt_parser
            layer_info = self._layer_info(engine)
        except BaseException:
            self._router.stop(raise_pending=False)  # the build's own failure is the one told
            raise
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
