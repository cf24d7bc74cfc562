"""The reference builder: executes the model once, autotuning every MatMul/Gemm/Conv on the way.

Why execute instead of inspecting: each layer is timed on its real shapes and on real data
flowing through the network, as TensorRT times kernels on the device. The build feeds
deterministic pseudo-random inputs (``numpy.random.default_rng(0)``, uniform in [-1, 1)
for float inputs, zeros otherwise), shaped by ``BuildSettings.input_shapes`` (the ``opt``
shape) or by the graph's static dimensions.

Per autotuned layer, :mod:`.layertune` resolves one timing-cache key per format combination
(:mod:`.formats`: a float Conv has two, ``linear`` for the im2col kernels and ``hwc`` for
``direct``), each from the cache or by timing, and the layer runs the key with the lowest
time. The engine records, per layer, the key and kernel it runs and every key's tactic and
time; its layer information (the engine inspector's JSON) shows the kernel that runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from reprobuild.backends.base import BuildOutput, BuildSettings, Environment, LogSink
from reprobuild.backends.reference import int8, kernels, modelcache
from reprobuild.backends.reference.autotune import AutotunePolicy, AutotuneStats
from reprobuild.backends.reference.buildlog import BuildLog, tensor_info
from reprobuild.backends.reference.engine import write_engine
from reprobuild.backends.reference.knob import TimingKnob
from reprobuild.backends.reference.layertune import LayerChoice, LayerTuner
from reprobuild.backends.reference.prepared import Layer, PreparedModel, input_dtype, prepare
from reprobuild.backends.reference.timingcache import ReferenceTimingCache
from reprobuild.errors import BuildError, ReprobuildError, UsageError
from reprobuild.fileio import read_input
from reprobuild.limits import check_tensor_bytes

_MISSING = "cannot read model (no such file); check the path"
_LAYER_TYPES = {"Conv": "RefConvolution", "MatMul": "RefMatrixMultiply", "Gemm": "RefGemm"}
_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


# -- the build --------------------------------------------------------------------------------
def check_settings(settings: BuildSettings) -> None:
    if settings.distributive_independence:
        # Refused rather than ignored: a lock recording the setting would claim a property
        # no reference engine was built for. Kernel rules do the same job here.
        raise UsageError(
            "--distributive-independence is a TensorRT builder flag; the reference backend "
            "has no such flag: drop it, or rule out batch-dependent kernels with "
            "`reprobuild deny --lock LOCK kernel=PATTERN`"
        )
    if not 0 <= settings.optimization_level <= 5:
        raise UsageError(
            f"optimization_level {settings.optimization_level} is outside 0..5: pick 1..5 "
            "(level 0 ignores the timing cache)"
        )
    for name in ("max_num_tactics", "avg_timing_iterations"):
        value = getattr(settings, name)
        if value is not None and value < 1:
            raise UsageError(f"{name} must be at least 1, got {value}")


def load_model(model_path: str) -> tuple[onnx.ModelProto, bytes, str]:
    """(model, bytes stored in the engine, sha256 of the file)."""
    path = Path(model_path)
    raw = read_input(path, "model", "ONNX model file", missing=_MISSING)
    try:
        model = onnx.load_model_from_string(raw)
    except Exception as exc:
        raise UsageError(f"{model_path} is not an ONNX model ({exc}): pass a .onnx file") from exc
    file_sha = hashlib.sha256(raw).hexdigest()
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    if external:
        try:
            onnx.load_external_data_for_model(model, str(path.parent))
        except Exception as exc:
            raise UsageError(f"cannot load external data of {model_path}: {exc}") from exc
        raw = model.SerializeToString()
    return model, raw, file_sha


def _folded(model_path: str) -> tuple[bytes, str, PreparedModel]:
    """(model bytes for the engine, file sha256, the folded model), folding only when the
    model is not the one folded last (:mod:`.modelcache`: verify rebuilds one model)."""
    raw = read_input(model_path, "model", "ONNX model file", missing=_MISSING)
    file_sha = hashlib.sha256(raw).hexdigest()
    prepared = modelcache.get(file_sha)  # the key is the engine's model bytes: here the file
    if prepared is not None:
        return raw, file_sha, prepared
    del raw  # load_model reads it again: one copy of the weights alive, not two
    model, model_bytes, file_sha = load_model(model_path)
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    try:
        prepared = prepare(model)
    except ReprobuildError:
        raise
    except Exception as exc:
        raise BuildError(
            f"cannot fold the constants of {model_path}: {type(exc).__name__}: {exc}"
        ) from exc
    # with external data the engine stores the model re-serialized, not the file
    modelcache.put(hashlib.sha256(model_bytes).hexdigest() if external else file_sha, prepared)
    return model_bytes, file_sha, prepared


def synthetic_inputs(prepared: PreparedModel, settings: BuildSettings) -> dict[str, Any]:
    """Deterministic build-time inputs with the ``opt`` shapes of the profile."""
    shapes = {name: tuple(opt) for name, _mn, opt, _mx in settings.input_shapes}
    names = {vi.name for vi in prepared.inputs}
    unknown = sorted(set(shapes) - names)
    if unknown:
        raise UsageError(
            f"input_shapes names {', '.join(unknown)}, which the model does not take as inputs "
            f"({', '.join(sorted(names)) or 'none'})"
        )
    rng = np.random.default_rng(0)
    planned: list[tuple[Any, tuple[int, ...], Any]] = []
    for vi in prepared.inputs:
        dims = vi.type.tensor_type.shape.dim
        if vi.name in shapes:
            shape = shapes[vi.name]
            if vi.type.tensor_type.HasField("shape") and len(dims) != len(shape):
                raise UsageError(
                    f"input {vi.name!r} has {len(dims)} dimensions, the shape "
                    f"{'x'.join(map(str, shape))} gives {len(shape)}; check --shapes"
                )
        else:
            if not all(d.HasField("dim_value") for d in dims):
                fixed = [str(d.dim_value) if d.HasField("dim_value") else None for d in dims]
                shown = "x".join(f or d.dim_param or "?" for f, d in zip(fixed, dims, strict=True))
                example = "x".join(f or "1" for f in fixed)
                raise UsageError(
                    f"input {vi.name!r} has a dynamic shape ({shown}): give it with --shapes "
                    f"{vi.name}:{example}, or a profile with --min-shapes, --opt-shapes and "
                    "--max-shapes"
                )
            shape = tuple(int(d.dim_value) for d in dims)
        planned.append((vi, shape, input_dtype(vi)))
    # Checked before anything is allocated: a typo in --shapes must not exhaust memory.
    nbytes = sum(math.prod(shape) * max(dtype.itemsize, 8) for _, shape, dtype in planned)
    check_tensor_bytes("the build's input tensors", nbytes)
    feeds: dict[str, Any] = {}
    for vi, shape, dtype in planned:
        if np.issubdtype(dtype, np.floating) or dtype.kind == "V" or "bfloat16" in str(dtype):
            feeds[vi.name] = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32).astype(dtype)
        else:
            feeds[vi.name] = np.zeros(shape, dtype=dtype)
    return feeds


class Builder:
    """One build: state shared by the per-layer steps."""

    def __init__(
        self,
        settings: BuildSettings,
        cache: ReferenceTimingCache,
        log: BuildLog,
        environment: Environment,
        knob: TimingKnob,
        legacy_keys: str | None = None,
    ) -> None:
        reps = settings.avg_timing_iterations or AutotunePolicy().reps
        # a tie band needs costs that a neighbour process cannot inflate, and settled where
        # the rule is unsure (autotune's docstring); band 0 times as before the band existed
        if settings.tie_band > 0:
            policy = AutotunePolicy(reps, clock="cpu", settle_rounds=2 * reps, guard_ahead=True)
        else:
            policy = AutotunePolicy(reps)
        self.stats = AutotuneStats(policy)
        fingerprints = (legacy_keys or environment.fingerprint(), settings.fingerprint())
        self.tuner = LayerTuner(
            settings, cache, log, fingerprints, knob, self.stats,
            one_key_per_layer=legacy_keys is not None,
        )  # fmt: skip
        self.choices: list[LayerChoice] = []
        self.layer_info: list[dict[str, Any]] = []

    def info_entry(
        self,
        layer: Layer,
        inputs: list[Any],
        outputs: list[Any],
        tactic: tuple[str, int, str],
    ) -> dict[str, Any]:
        kernel, value, layer_type = tactic
        out_names = [o for o in layer.node.output if o]
        # onnx-tensorrt's name for a node (its name, else ``node_of_<first output>``), which
        # is also the precision plan's key: the plan check maps layers to nodes through it.
        onnx_name = layer.node.name or (f"node_of_{out_names[0]}" if out_names else layer.name)
        read = list(zip(layer.node.input, inputs, strict=True))
        if layer.op in _QDQ_OPS:
            read = read[:1]  # scale and zero point are parameters, as in TensorRT's inspector
        entry = {
            "Name": layer.name,
            "LayerType": layer_type,
            "Inputs": [tensor_info(n, v) for n, v in read if n],
            "Outputs": [tensor_info(n, v) for n, v in zip(out_names, outputs, strict=False)],
            "ParameterType": layer.op,
        }
        spec = int8.BY_NAME.get(kernel)
        if layer.fusion is not None and spec is not None:
            # a fused INT8 kernel reads INT8 and INT8 weights: say so, as TensorRT does
            entry |= int8.inspector_tensors(spec, layer.fusion, inputs, outputs[0], out_names[0])
        return entry | {
            "TacticName": kernel,
            "TacticValue": f"0x{value:016x}",
            "StreamId": 0,
            "Metadata": f"[ONNX Layer: {onnx_name}]",
        }

    def run(self, prepared: PreparedModel, feeds: dict[str, Any]) -> None:
        values: dict[str, Any] = dict(prepared.constants)
        values.update(feeds)
        for position, layer in enumerate(prepared.layers):
            inputs = prepared.gather(layer, values)
            try:
                geo = kernels.geometry(layer.op, inputs, layer.attrs) if not layer.domain else None
                if geo is not None:
                    choice, output = self.tuner.tune(layer, inputs, geo)
                    self.choices.append(choice)
                    outputs = [output]
                    tactic = (choice.spec.name, choice.spec.tactic_hash, _LAYER_TYPES[layer.op])
                else:
                    # the folded model may be reused: say which path ran in this build
                    prepared.fast_layers.discard(layer.index)
                    outputs = prepared.run_layer(layer, inputs, None, values)
                    path = "ref_numpy" if layer.index in prepared.fast_layers else "onnx_reference"
                    tactic = (f"{path}_{layer.op.lower()}", 0, f"Ref{layer.op}")
            except ReprobuildError:
                raise
            except Exception as exc:
                raise BuildError(
                    f"layer {layer.name!r} ({layer.op}) failed on the build inputs: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            self.layer_info.append(self.info_entry(layer, inputs, outputs, tactic))
            for name, value in zip((o for o in layer.node.output if o), outputs, strict=False):
                values[name] = value
            for name in layer.node.input:
                if (
                    name
                    and prepared.last_use.get(name) == position
                    and name not in prepared.constants
                ):
                    values.pop(name, None)


def build_engine(
    model_path: str,
    settings: BuildSettings,
    cache: ReferenceTimingCache,
    sink: LogSink,
    environment: Environment,
    knob: TimingKnob | None = None,
    *,
    legacy_keys: str | None = None,
) -> BuildOutput:
    """``legacy_keys``: build a schema-1 target's keys (its environment fingerprint, one
    key per Conv), see :meth:`ReferenceBackend.for_target`."""
    started = time.perf_counter()
    check_settings(settings)
    knob = knob or TimingKnob()
    log = BuildLog(sink)
    model_bytes, file_sha, prepared = _folded(model_path)
    feeds = synthetic_inputs(prepared, settings)
    if settings.optimization_level == 0:
        log.warning(
            "Builder optimization level 0: the timing cache is ignored; "
            "layers use their default tactic"
        )
    else:
        log.info(
            "Local timing cache in use. Profiling results in this builder pass will be stored."
        )
        if len(cache):
            log.info(f"Loaded {len(cache)} timing cache entries")
    if knob.active:
        log.warning(
            f"timing knob {knob.describe()}: measured costs are replaced by injected ones "
            "(test knob)"
        )
    log.verbose(f"Folded {prepared.folded} constant nodes; {len(prepared.layers)} layers remain")
    builder = Builder(settings, cache, log, environment, knob, legacy_keys)
    try:
        builder.run(prepared, feeds)
    except MemoryError:
        raise UsageError(
            f"{model_path}: out of memory running the layers with these input shapes "
            f"({', '.join(f'{n}: {v.shape}' for n, v in feeds.items())}); use smaller --shapes"
        ) from None
    except ReprobuildError:
        raise
    except Exception as exc:  # the model is user input: a graph that cannot run is bad input
        raise BuildError(
            f"{model_path}: the model cannot run ({type(exc).__name__}: {exc}); check it with "
            "onnx.checker.check_model"
        ) from exc
    timed = sum(1 for c in builder.choices if c.source == "timed")
    from_cache = sum(1 for c in builder.choices if c.source == "cache")
    log.info(f"Autotuned {timed} layers, {from_cache} from the timing cache")
    serialized_cache = cache.serialize()
    log.info(f"Serialized {len(cache)} timing cache entries")
    meta = {
        "environment": environment.to_dict(),
        "environment_fingerprint": environment.fingerprint(),
        "settings": settings.to_dict(),
        "settings_fingerprint": settings.fingerprint(),
        "model_sha256": file_sha,
        "inputs": [
            {"name": name, "dtype": str(v.dtype), "shape": list(v.shape)}
            for name, v in feeds.items()
        ],
        "outputs": list(prepared.output_names),
        "layers": [
            {k: v for k, v in c.to_dict().items() if k not in ("source", "candidates")}
            for c in builder.choices
        ],
    }
    inspector = {
        "Layers": builder.layer_info,
        "Bindings": [vi.name for vi in prepared.inputs] + list(prepared.output_names),
    }
    # The engine carries its own layer information, so ``reprobuild layers MODEL.engine``
    # reads it like TensorRT's inspector would; it is deterministic, as the engine must be.
    meta["layer_info"] = inspector
    engine_bytes = write_engine(meta, model_bytes)
    layer_info = json.dumps(inspector, indent=1)
    seconds = time.perf_counter() - started
    log.info(f"Engine built in {seconds:.3f} seconds")
    return BuildOutput(
        engine=engine_bytes,
        layer_info=layer_info,
        log_lines=log.lines,
        extra={
            "timing_cache": serialized_cache,
            "layers": [c.to_dict() for c in builder.choices],
            "tactic_map": {k.key: k.spec.tactic_hash for c in builder.choices for k in c.keys},
            # The layer and candidates of each key from the builder's own data: the lock
            # takes names from here, never back from the log text it printed.
            "key_layers": {
                k.key: (c.name, [(s.tactic_hash, s.name) for s in k.candidates])
                for c in builder.choices
                for k in c.keys
            },
            "timed_layers": timed,
            "cached_layers": from_cache,
            "build_seconds": seconds,
            "timing_knob": knob.describe(),
            "autotune": builder.stats.to_json(),
        },
    )
