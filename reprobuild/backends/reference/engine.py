"""The reference engine: its file format, the check of its inputs, and loading it.

File format (version 1, integers little-endian; no pickle anywhere)::

    offset    size  field
    0         8     magic b"RBREFENG"
    8         4     u32 format version (1)
    12        4     u32 metadata length J
    16        8     u64 model length L
    24        J     metadata: UTF-8 JSON (see below)
    24+J      L     the ONNX model, serialized (ModelProto bytes)
    24+J+L    32    SHA-256 of every byte before it

Metadata: ``{"format": "reprobuild-reference-engine", "environment": {...},
"environment_fingerprint": "...", "settings": {...}, "model_sha256": "...",
"inputs": [{"name", "dtype", "shape"}], "outputs": [names], "layers": [{"index", "name",
"op", "key", "format", "kernel", "tactic": "0x<16 hex>", "time_ms", "keys": [{"format",
"key", "kernel", "tactic", "time_ms"}]}]}``; ``layers`` holds every autotuned layer,
``index`` being the node's position in the ONNX graph, ``key``/``kernel`` the key it runs
and ``keys`` every key of the layer (one per format combination) with its tactic and the
time that decided between them; ``layer_info`` is
the engine-inspector JSON of every layer (``{"Layers": [...], "Bindings": [...]}``), which
``reprobuild layers`` reads.

The engine stores the model rather than its folded weights: the light model-zoo models
describe 100 MB of weights with a few ``ConstantOfShape`` nodes, and folding is cheap and
deterministic, so it is redone when an engine is loaded (:mod:`.prepared`); a loaded
engine runs as a compiled :mod:`.program`.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from reprobuild.backends.base import Environment
from reprobuild.backends.reference import int8, kernels, modelcache
from reprobuild.backends.reference.prepared import PreparedModel, input_dtype, prepare
from reprobuild.errors import EngineError, UsageError

ENGINE_MAGIC = b"RBREFENG"
ENGINE_FORMAT_VERSION = 1
ENGINE_FORMAT_NAME = "reprobuild-reference-engine"
_PREFIX = struct.Struct("<8sIIQ")
_DIGEST_SIZE = 32


# -- file format ------------------------------------------------------------------------------
def write_engine(metadata: Mapping[str, Any], model_bytes: bytes) -> bytes:
    meta = json.dumps({"format": ENGINE_FORMAT_NAME, **metadata}, sort_keys=True).encode()
    head = _PREFIX.pack(ENGINE_MAGIC, ENGINE_FORMAT_VERSION, len(meta), len(model_bytes)) + meta
    digest = hashlib.sha256(head)
    digest.update(model_bytes)
    # one join: the model (the weights) is copied once, not once per concatenation
    return b"".join((head, model_bytes, digest.digest()))


def read_engine(data: bytes) -> tuple[dict[str, Any], bytes]:
    """Return (metadata, model bytes); raises ``EngineError`` for foreign or corrupted data."""
    meta, model, _ = split_engine(data)
    return meta, bytes(model)


def split_engine(data: bytes) -> tuple[dict[str, Any], memoryview, bytes]:
    """(metadata, a view of the model bytes, the checked SHA-256 of the body), copying nothing:
    an engine carries the whole model, and copies of it were verify's memory peak."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise EngineError(f"engine must be bytes, got {type(data).__name__}")
    view = memoryview(data).cast("B")
    if len(view) < _PREFIX.size + _DIGEST_SIZE or bytes(view[:8]) != ENGINE_MAGIC:
        raise EngineError(
            "engine was not written by the reference backend (bad magic or too short): "
            "rebuild it with the reference backend, or run it with the backend that built it"
        )
    _, version, meta_len, model_len = _PREFIX.unpack_from(view)
    if version != ENGINE_FORMAT_VERSION:
        raise EngineError(
            f"engine has format version {version}, this reprobuild reads version "
            f"{ENGINE_FORMAT_VERSION}: rebuild the engine"
        )
    body, digest = view[:-_DIGEST_SIZE], bytes(view[-_DIGEST_SIZE:])
    if len(body) != _PREFIX.size + meta_len + model_len:
        raise EngineError("engine file is truncated or has trailing bytes: rebuild the engine")
    if hashlib.sha256(body).digest() != digest:
        raise EngineError("engine file is corrupted (checksum mismatch): rebuild the engine")
    try:
        meta = json.loads(bytes(body[_PREFIX.size : _PREFIX.size + meta_len]).decode())
    except ValueError as exc:
        raise EngineError(f"engine metadata is unreadable ({exc}): rebuild the engine") from exc
    if not isinstance(meta, dict) or meta.get("format") != ENGINE_FORMAT_NAME:
        raise EngineError("engine metadata has an unknown format: rebuild the engine")
    return meta, body[_PREFIX.size + meta_len :], digest


def engine_environment(meta: Mapping[str, Any]) -> Environment:
    try:
        return Environment.from_dict(meta["environment"])
    except (KeyError, TypeError) as exc:
        raise EngineError("engine metadata lacks its environment: rebuild the engine") from exc


# -- inputs -----------------------------------------------------------------------------------
def check_inputs(prepared: PreparedModel, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Validate user inputs against the graph (names, dtypes, ranks): strongly typed."""
    feeds: dict[str, Any] = {}
    expected = {vi.name for vi in prepared.inputs}
    unknown = sorted(set(inputs) - expected)
    if unknown:
        raise UsageError(
            f"unknown engine input(s) {', '.join(unknown)}; the engine takes "
            f"{', '.join(sorted(expected)) or 'no inputs'}"
        )
    for vi in prepared.inputs:
        if vi.name not in inputs:
            raise UsageError(f"missing engine input {vi.name!r}: pass a value for every input")
        value = np.asarray(inputs[vi.name])
        dtype = input_dtype(vi)
        if value.dtype != dtype:
            raise UsageError(
                f"engine input {vi.name!r} has dtype {value.dtype}, the model expects {dtype}: "
                "cast it before running"
            )
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and len(dims) != value.ndim:
            raise UsageError(
                f"engine input {vi.name!r} has rank {value.ndim}, the model expects {len(dims)}"
            )
        feeds[vi.name] = value
    return feeds


# -- loading engines --------------------------------------------------------------------------
@dataclass
class LoadedEngine:
    meta: dict[str, Any]
    prepared: PreparedModel
    plan: dict[int, kernels.KernelSpec]

    @property
    def counts_runs(self) -> bool:
        """Whether a kernel of the plan gives other bits run after run (:func:`run_number`):
        only then are its runs counted, which hashes the inputs on every run."""
        return any(spec.scheme == "atomic" for spec in self.plan.values())


_LOADED: OrderedDict[bytes, LoadedEngine] = OrderedDict()
_LOADED_MAX = 1  # one engine in memory at a time: verify runs one engine, then the next


# The bytes object of the last loaded engine: running the same (immutable) ``bytes`` again
# skips the SHA-256 of the whole file and the metadata parse, which cost more than the layers
# on AlexNet and VGG (weights of 240 and 570 MB). Dropped by ``forget_engine_bytes`` when a
# build starts, so a caller that dropped its engine does not keep it alive through the build.
_LAST_BYTES: list[tuple[bytes, LoadedEngine]] = []
_RUNS: dict[str, int] = {}  # runs of the engine in ``_LAST_BYTES``, by inputs digest


def clear_loaded() -> None:
    """Forget the loaded engine (its folded model stays only if :mod:`.modelcache` has it)."""
    forget_engine_bytes()
    _LOADED.clear()


def forget_engine_bytes() -> None:
    """Stop holding the last run engine's bytes and its runs' scratch buffers (its checked,
    loaded form stays)."""
    _LAST_BYTES.clear()
    _RUNS.clear()
    for loaded in _LOADED.values():
        loaded.prepared.release_scratch()


def load_engine(data: bytes, environment: Environment) -> LoadedEngine:
    """Parse, check and prepare an engine; the last loaded engine stays in memory, and the
    folded model is shared with the build that made it (:mod:`.modelcache`)."""
    if type(data) is bytes and _LAST_BYTES and _LAST_BYTES[0][0] is data:
        return _LAST_BYTES[0][1]  # the very object checked last time: bytes never change
    loaded = _load_engine(data, environment)
    _LAST_BYTES.clear()
    _RUNS.clear()
    if type(data) is bytes:
        _LAST_BYTES.append((data, loaded))
    return loaded


def run_number(feeds: Mapping[str, Any]) -> int:
    """How many times the engine :func:`load_engine` returned last has run on these very
    inputs before (and counts this run): 0 for an engine object met for the first time (a
    rebuilt engine, even of identical bytes) or for inputs it has not run on, one more for
    each run since. The run-to-run kernels follow it (:class:`.kernels.engine_run`): the
    same engine on the same inputs gives other bits on its next run, as GPU atomics do,
    and every rebuilt engine's first run gives the same bits."""
    digest = hashlib.sha256()
    for name in sorted(feeds):
        value = np.ascontiguousarray(feeds[name])
        digest.update(f"{name}\0{value.dtype.str}{value.shape}\0".encode())
        digest.update(value.tobytes())
    key = digest.hexdigest()
    runs = _RUNS.get(key, 0)
    _RUNS[key] = runs + 1
    return runs


def _load_engine(data: bytes, environment: Environment) -> LoadedEngine:
    meta, model_view, digest = split_engine(data)
    cached = _LOADED.get(digest)
    if cached is not None:
        _LOADED.move_to_end(digest)
        return cached
    recorded = engine_environment(meta)
    if recorded.fingerprint() != environment.fingerprint():
        raise EngineError(
            f"engine was built for target {recorded.name} "
            f"({'; '.join(recorded.differences(environment)) or 'other identity fields'}), "
            f"this machine is {environment.name}: rebuild it here"
        )
    model_sha = hashlib.sha256(model_view).hexdigest()
    prepared = modelcache.get(model_sha)
    if prepared is None:
        try:
            model = onnx.load_model_from_string(bytes(model_view))
        except Exception as exc:  # protobuf raises its own DecodeError
            raise EngineError(f"engine holds an unreadable model ({exc}): rebuild it") from exc
        prepared = prepare(model)
        modelcache.put(model_sha, prepared)
    plan: dict[int, kernels.KernelSpec] = {}
    by_index = {layer.index: layer for layer in prepared.layers}
    for entry in meta.get("layers", []):
        spec = kernels.KERNELS.get(entry.get("kernel")) or int8.BY_NAME.get(entry.get("kernel"))
        layer = by_index.get(entry.get("index"))
        if (
            spec is None
            or layer is None
            or layer.op != spec.op
            or (int8.is_int8(spec) and layer.fusion is None)
        ):
            raise EngineError(
                f"engine layer {entry.get('name')!r} names kernel {entry.get('kernel')!r} that "
                "this reprobuild does not have for it: rebuild the engine"
            )
        if int(entry["tactic"], 16) != spec.tactic_hash:
            raise EngineError(f"engine layer {entry.get('name')!r} has an inconsistent tactic")
        plan[layer.index] = spec
    loaded = LoadedEngine(meta, prepared, plan)
    while len(_LOADED) >= _LOADED_MAX:  # drop the old engine before keeping the new one
        _LOADED.popitem(last=False)
    _LOADED[digest] = loaded
    return loaded
