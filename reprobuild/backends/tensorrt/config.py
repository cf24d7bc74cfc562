"""Builder configuration: every candidate-changing setting applied by name.

Settings are stored and compared by TensorRT member *names*, never enum integers (they
changed between 10.x and 11.x); a name this version lacks is a one-line usage error.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from reprobuild.errors import UsageError
from reprobuild.types import BuildSettings


def trt_enum_member(version: str, trt_enum: Any, name: str, what: str) -> Any:
    trt_members = trt_enum.__members__
    if name not in trt_members:
        choices = ", ".join(sorted(str(trt_name) for trt_name in trt_members))
        raise UsageError(f"unknown {what} {name!r} for TensorRT {version}; choose one of {choices}")
    return trt_members[name]


def trt_distributive_independence(trt: ModuleType, version: str) -> Any:
    """``BuilderFlag.DISTRIBUTIVE_INDEPENDENCE`` (the 10.13 and 11.4 bindings carry it), or a
    one-line refusal on a version whose bindings lack it: a build that silently went
    without it would record a lock that claims batch independence it does not have."""
    trt_flag = getattr(trt.BuilderFlag, "DISTRIBUTIVE_INDEPENDENCE", None)
    if trt_flag is None:
        raise UsageError(
            f"TensorRT {version} has no BuilderFlag.DISTRIBUTIVE_INDEPENDENCE; drop "
            "--distributive-independence (distributive_independence in the lock's settings) "
            "or build with a TensorRT whose bindings have it (10.13 and 11.4 do)"
        )
    return trt_flag


def configure(
    trt: ModuleType,
    version: str,
    trt_builder: Any,
    trt_network: Any,
    trt_config: Any,
    settings: BuildSettings,
) -> dict[str, Any]:
    """Apply every candidate-changing setting; return what was applied, by name."""
    trt_config.set_flag(trt.BuilderFlag.EDITABLE_TIMING_CACHE)
    if hasattr(trt.BuilderFlag, "DISABLE_COMPILATION_CACHE"):
        trt_config.set_flag(trt.BuilderFlag.DISABLE_COMPILATION_CACHE)
    trt_config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    trt_config.builder_optimization_level = int(settings.optimization_level)
    if settings.workspace is not None:
        trt_config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(settings.workspace))
    if settings.tactic_sources is not None:
        mask = 0
        for source in settings.tactic_sources:
            trt_source = trt_enum_member(version, trt.TacticSource, source, "tactic source")
            mask |= 1 << int(trt_source)
        if not bool(trt_config.set_tactic_sources(mask)):
            raise UsageError(
                f"TensorRT rejected tactic sources {list(settings.tactic_sources)}; "
                "fix tactic_sources in the build settings"
            )
    if settings.tf32:
        trt_config.set_flag(trt.BuilderFlag.TF32)
    else:
        trt_config.clear_flag(trt.BuilderFlag.TF32)
    if settings.distributive_independence:
        trt_config.set_flag(trt_distributive_independence(trt, version))
    if settings.max_num_tactics is not None:
        trt_config.max_num_tactics = int(settings.max_num_tactics)
    if settings.avg_timing_iterations is not None:
        trt_config.avg_timing_iterations = int(settings.avg_timing_iterations)
    if settings.tiling_optimization_level is not None:
        if not hasattr(trt, "TilingOptimizationLevel"):
            raise UsageError(
                f"TensorRT {version} has no tiling optimization level; "
                "remove tiling_optimization_level from the build settings"
            )
        trt_config.tiling_optimization_level = trt_enum_member(
            version,
            trt.TilingOptimizationLevel,
            settings.tiling_optimization_level,
            "tiling optimization level",
        )
    if settings.max_aux_streams is not None:
        trt_config.max_aux_streams = int(settings.max_aux_streams)
    if settings.hardware_compatibility_level is not None:
        trt_config.hardware_compatibility_level = trt_enum_member(
            version,
            trt.HardwareCompatibilityLevel,
            settings.hardware_compatibility_level,
            "hardware compatibility level",
        )
    if settings.input_shapes:
        add_profile(trt_builder, trt_network, trt_config, settings)
    trt_flags = trt.BuilderFlag.__members__
    applied: dict[str, Any] = {
        "tensorrt_version": version,
        # Names, never integers: flag values changed between 10.x and 11.x.
        "builder_flags": [
            name
            for name in sorted(str(trt_name) for trt_name in trt_flags)
            if bool(trt_config.get_flag(trt_flags[name]))
        ],
        "strongly_typed": True,
    }
    if hasattr(trt_config, "build_route"):
        # 11.1+: a candidate-changing setting; recorded so a change is visible.
        applied["build_route"] = str(trt_config.build_route)
    return applied


def add_profile(
    trt_builder: Any, trt_network: Any, trt_config: Any, settings: BuildSettings
) -> None:
    inputs = {str(trt_network.get_input(i).name) for i in range(int(trt_network.num_inputs))}
    trt_profile = trt_builder.create_optimization_profile()
    for name, mn, opt, mx in settings.input_shapes:
        if name not in inputs:
            raise UsageError(
                f"input_shapes names {name!r}, which is not a network input "
                f"(inputs: {', '.join(sorted(inputs))}); fix the build settings"
            )
        trt_profile.set_shape(name, tuple(mn), tuple(opt), tuple(mx))
    if int(trt_config.add_optimization_profile(trt_profile)) < 0:
        raise UsageError(
            "TensorRT rejected the optimization profile from input_shapes "
            "(each needs min <= opt <= max and the input's rank); fix the build settings"
        )
