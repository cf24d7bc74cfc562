"""``ReferenceBackend``: the CPU implementation of the :class:`~reprobuild.backends.base.Backend`
contract. Heavy modules (numpy, onnx) are imported inside the methods so that choosing the
backend stays cheap."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import platform
from collections.abc import Mapping
from typing import Any

from reprobuild.backends.base import BuildOutput, BuildSettings, Environment, LogSink, TimingCache
from reprobuild.backends.reference.timingcache import ReferenceTimingCache, deserialize_cache
from reprobuild.errors import BuildError, EngineError, UsageError


def _cpu_model() -> str:
    """The CPU model name: BLAS picks its kernels (and so its summation order) per CPU."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def _blas() -> tuple[str | None, str | None]:
    """numpy's BLAS library with its version, and the kernel family it dispatched to
    (threadpoolctl's ``architecture``; ``OPENBLAS_CORETYPE`` changes it): the family
    decides every GEMM's summation order, so it is identity."""
    from threadpoolctl import threadpool_info

    for info in threadpool_info():
        if info.get("user_api") == "blas":
            name = f"{info.get('internal_api', 'blas')} {info.get('version', '')}".strip()
            return name, info.get("architecture")
    return None, None


def _numpy_simd() -> str | None:
    """The SIMD targets numpy dispatches its loops to here (``NPY_DISABLE_CPU_FEATURES``
    changes them, and with them the last bits of elementwise ops)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy < 2 keeps them in numpy.core
        try:
            from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
        except ImportError:
            return None
    enabled = [name for name in __cpu_dispatch__ if __cpu_features__.get(name)]
    return " ".join(sorted(enabled)) or "baseline"


def legacy_key_scheme(target: Environment) -> str | None:
    """The environment fingerprint a schema-1 reference target's keys were hashed with, or
    None for a target of today's scheme. Such a target records no identity (schema 1 had
    none); its flat environment survives as the advisory CPU name and numerics versions,
    which are exactly what that fingerprint hashed."""
    if target.backend != "reference" or target.identity_dict():
        return None
    advisory = target.advisory_dict()
    flat = {
        "backend": "reference",
        "tensorrt_version": None,
        "gpu": advisory.get("cpu"),
        "compute_capability": None,
        "cuda_version": None,
        "driver_version": advisory.get("numerics"),
    }
    return hashlib.sha256(json.dumps(flat, sort_keys=True).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=8)
def machine_environment(threads: int = 1) -> Environment:
    """This machine's reference-backend target with ``threads`` BLAS threads (0: the BLAS
    default). Identity is what was seen to change the kernels' bits on one machine: the
    BLAS kernel family (``OPENBLAS_CORETYPE``), the thread count (2 threads split
    SqueezeNet's GEMMs differently) and numpy's SIMD dispatch
    (``NPY_DISABLE_CPU_FEATURES=X86_V3``), plus the BLAS library and the machine's
    architecture. The CPU's name and the numpy and onnx versions are advisory: recorded
    digests catch any bit they change (``scripts/identity_bits.py`` measures all of it)."""
    import numpy as np
    import onnx

    from reprobuild.backends.reference.threads import effective

    blas, kernels = _blas()
    identity = {
        "machine": platform.machine() or None,
        "blas": blas,
        "blas_kernels": kernels,
        "blas_threads": effective(threads),
        "numpy_simd": _numpy_simd(),
    }
    advisory = {"cpu": _cpu_model(), "numpy": np.__version__, "onnx": onnx.__version__}
    return Environment.make("reference", identity, advisory)


class ReferenceBackend:
    """Builds "engines" on the CPU by really timing numerically different kernels."""

    name = "reference"
    key_rule = True  # layertune chooses between a layer's keys by the tie rule

    @property
    def timed_ops(self) -> tuple[str, ...]:
        """The ONNX ops whose layers have tactics to time (and lock); the rest run untimed."""
        from reprobuild.backends.reference.kernels import AUTOTUNED_OPS

        return AUTOTUNED_OPS

    def __init__(self, *, timing: str = "", threads: int | None = None) -> None:
        """``timing`` injects costs in place of measured ones (tests and demos; see the package
        docs).

        ``threads`` caps the BLAS threads of timing and engine runs (:mod:`.threads`):
        None takes the default, 1; 0 leaves the BLAS default (every
        core). The knob is not part of keys or fingerprints, so caches from knobbed builds
        stay interchangeable with the others; the thread count is part of the target's
        identity (it changes bits, :mod:`.threads`).
        """
        from reprobuild.backends.reference.knob import parse_timing_knob
        from reprobuild.backends.reference.threads import resolve

        self.timing = parse_timing_knob(timing)
        self.threads = resolve(threads)
        self.legacy_keys: str | None = None

    def for_target(self, target: Environment) -> ReferenceBackend:
        """This backend building the keys ``target`` was recorded with. A target from a
        schema-1 lock (no identity recorded) was keyed by the flat environment of that time,
        with one key per Conv: building it with today's keys would re-time every layer and
        could give another engine, so such a target keeps its scheme (:func:`legacy_key_scheme`)
        until ``build --re-record`` moves it to today's."""
        scheme = legacy_key_scheme(target)
        if scheme is None:
            return self
        twin = copy.copy(self)
        twin.legacy_keys = scheme
        return twin

    def environment(self) -> Environment:
        return machine_environment(self.threads)

    def create_timing_cache(
        self, data: bytes = b"", *, ignore_mismatch: bool = False
    ) -> ReferenceTimingCache:
        """An empty cache, or ``data`` deserialized (``CacheError`` if corrupted or foreign)."""
        if not data:
            return ReferenceTimingCache(self.environment())
        return deserialize_cache(bytes(data), self.environment(), ignore_mismatch=ignore_mismatch)

    def build(
        self,
        model_path: str,
        settings: BuildSettings,
        cache: TimingCache,
        log: LogSink,
        *,
        pinned: bool = False,
    ) -> BuildOutput:
        """``pinned`` changes nothing here: the reference builder has no compilation cache,
        and a miss shows in the caller's cache-map check."""
        from reprobuild.backends.reference.builder import build_engine

        if not isinstance(cache, ReferenceTimingCache):
            raise BuildError(
                f"the reference backend cannot build with a {type(cache).__name__}: create the "
                "cache with this backend's create_timing_cache"
            )
        if cache.environment.fingerprint() != self.environment().fingerprint():
            raise BuildError(
                "the timing cache belongs to another environment: create it on this machine"
            )
        from reprobuild.backends.reference.engine import forget_engine_bytes
        from reprobuild.backends.reference.threads import limited

        forget_engine_bytes()  # an engine the caller dropped must not live through the build
        with limited(self.threads) as used:
            out = build_engine(
                str(model_path),
                settings,
                cache,
                log,
                self.environment(),
                self.timing,
                legacy_keys=self.legacy_keys,
            )
        out.extra["blas_threads"] = used
        return out

    def check_settings(self, settings: BuildSettings) -> None:
        """Refuse what cannot be locked. Level 0 builds with default tactics, as TensorRT's,
        and never consults the timing cache: a lock recorded with it holds no layer."""
        if settings.optimization_level == 0:
            raise UsageError(
                "builder optimization level 0 ignores the timing cache, so tactics cannot be "
                "locked; use a level from 1 to 5 (default 3)"
            )
        from reprobuild.backends.reference.builder import check_settings

        check_settings(settings)

    def run(self, engine: bytes, inputs: Mapping[str, Any]) -> dict[str, Any]:
        from reprobuild.backends.reference.engine import check_inputs, load_engine, run_number
        from reprobuild.backends.reference.kernels import engine_run
        from reprobuild.backends.reference.program import run_compiled
        from reprobuild.backends.reference.threads import limited
        from reprobuild.errors import ReprobuildError

        loaded = load_engine(engine, self.environment())
        feeds = check_inputs(loaded.prepared, inputs)
        try:
            run = run_number(feeds) if loaded.counts_runs else 0
            with limited(self.threads), engine_run(run):
                return run_compiled(loaded.prepared, feeds, loaded.plan)
        except ReprobuildError:
            raise
        except Exception as exc:
            raise UsageError(
                f"the engine failed on these inputs ({type(exc).__name__}: {exc}); check their "
                "shapes against the model"
            ) from exc

    def release(self) -> None:
        """Drop the folded model and the loaded engine kept for the next build or run.

        ``verify`` calls it before ONNX Runtime loads the model, so that the two copies of
        the weights are not alive at once (optional: backends without it keep nothing).
        """
        from reprobuild.backends.reference import engine, modelcache

        modelcache.clear()
        engine.clear_loaded()

    def engine_metadata(self, engine: bytes) -> dict[str, Any]:
        """The engine's JSON metadata (environment, settings, per-layer tactics)."""
        from reprobuild.backends.reference.engine import read_engine

        meta, _ = read_engine(engine)
        return meta


__all__ = ["EngineError", "ReferenceBackend", "machine_environment"]
