"""Where an engine's layer information lives, and reading it from whatever file a user has.

Every build writes ``ENGINE.layers.json`` (the inspector JSON, TensorRT's own shape on both
backends) next to the engine: a TensorRT engine cannot be inspected without TensorRT and the
GPU it was built for, and that file is what ``reprobuild layers``, trex and a reviewer can
read anywhere. A reference engine also carries the same JSON inside itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reprobuild.errors import UsageError
from reprobuild.logs.layerinfo import LayerInfo, build_layer_info, load_layer_info, parse_layer_info

__all__ = ["layers_path", "read_layer_info", "summary_of"]

LAYERS_SUFFIX = ".layers.json"
_REFERENCE_MAGIC = b"RBREFENG"  # reprobuild.backends.reference.engine.ENGINE_MAGIC


def layers_path(engine_path: str | os.PathLike[str]) -> Path:
    """``model.engine`` -> ``model.engine.layers.json``."""
    return Path(f"{engine_path}{LAYERS_SUFFIX}")


def _is_binary(head: bytes) -> bool:
    return b"\0" in head


def read_layer_info(path: str | os.PathLike[str]) -> LayerInfo:
    """Layer information from an inspector/trtexec JSON file, a log with layer lines, a
    reference engine, or an engine that has its ``.layers.json`` beside it."""
    from reprobuild.fileio import open_regular

    p = Path(path)
    try:
        with open_regular(
            p,
            "layer information, log or engine",
            missing="cannot read (no such file); pass a layer-information JSON "
            "(trtexec --exportLayerInfo), a builder log or an engine built by reprobuild",
        ) as fh:
            head = fh.read(4096)
    except OSError as err:
        raise UsageError(
            f"{p}: cannot read ({err.strerror or err}); pass a layer-information JSON "
            "(trtexec --exportLayerInfo), a builder log or an engine built by reprobuild"
        ) from None
    if head.startswith(_REFERENCE_MAGIC):
        return _reference_engine(p)
    if _is_binary(head):
        side = layers_path(p)
        if side.is_file():
            info = load_layer_info(side)
            return LayerInfo(info.layers, info.bindings, info.detailed, source=str(side))
        raise UsageError(
            f"{p}: a binary engine without {side.name} beside it; reprobuild writes that "
            "file when it builds an engine; for another engine run trtexec "
            f"--loadEngine={p} --profilingVerbosity=detailed --exportLayerInfo=layers.json "
            "(the engine must have been built with detailed profiling verbosity)"
        )
    return load_layer_info(p)


def _reference_engine(p: Path) -> LayerInfo:
    from reprobuild.backends import engine_layer_info
    from reprobuild.fileio import read_input

    inspector = engine_layer_info(read_input(p, "engine", "engine"))
    if inspector is None:
        side = layers_path(p)
        if side.is_file():
            return load_layer_info(side)
        raise UsageError(
            f"{p}: this reference engine predates stored layer information; rebuild it "
            "with reprobuild build"
        )
    return parse_layer_info(inspector, source=str(p))


def summary_of(layer_info: str) -> dict[str, Any]:
    """The build report's ``engine_layers``: counts per precision and reformat layers."""
    from reprobuild.errors import LogParseError
    from reprobuild.logs.layertable import summarize

    try:
        info = build_layer_info(layer_info)
    except LogParseError as err:
        return {"error": str(err)}
    return summarize(info).to_json()


def check_against_lock_kernels(
    info: LayerInfo, lock: str | os.PathLike[str], target: str | None
) -> tuple[Any, bool]:
    """``reprobuild layers FILE --lock LOCK``: does the engine run the lock's tactics (any
    lock, FP32 too)? Returns the kernel check and whether the lock has a precision plan to
    check as well. Engine layers are matched to locked layers as a locked build does."""
    from reprobuild.lock.targets import choose
    from reprobuild.lock.yamlio import load_lock
    from reprobuild.pinning import cross_check_kernels

    data = choose(load_lock(lock), os.fspath(lock), target)
    return cross_check_kernels(info, data.layers), data.precision is not None
