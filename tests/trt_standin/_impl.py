"""Implementation of the stand-in ``tensorrt`` module (see ``__init__.py``).

Public (non-underscore) names here are TensorRT's own; ``test_trt_conformance.py`` checks
each of them against the real 10.13 / 11.4 bindings. Helpers and state are private.

What is emulated, at the level the backend's control flow needs:
- ONNX parsing with errors reported through ``num_errors``/``get_error(i)`` (``desc()``,
  ``node()``, ``node_name()``, ``node_operator()``).
- Builds that autotune MatMul/Gemm/Conv nodes: every candidate is timed with run-to-run
  noise (so two recording builds can pick different tactics, as on a GPU), the verbose log
  prints the documented editable-timing-cache table through the ``ILogger``, and winners are
  written to the attached ``ITimingCache``. With ``EDITABLE_TIMING_CACHE`` every layer gets
  its own key; without it identical layers share one. Keys depend on the network, shapes,
  profiles, flags, settings, version and device. Optimization level 0 ignores the cache.
- A cached tactic that the layer cannot use fails the *next build* (not ``update``).
- ``multi-key``: a Conv is tuned once per format combination (NCHW, NHWC), each with its
  own key, candidates and table, and the combination whose time is lowest runs, the
  cached time when the key is in the cache (ties: NCHW). Recorded times carry run-to-run
  noise drawn per build, so two recordings can disagree on the format as on the tactic,
  and ``update(key, value)`` with other times flips the choice of a locked build. Where
  TensorRT is seen doing this: its optimizer "choose[s] the algorithms that globally
  minimize the execution time of the engine ... by timing each implementation"
  (https://docs.nvidia.com/deeplearning/tensorrt/10.16.1/inference-library/precision-control.html,
  "Algorithm Selection and Reproducible Builds", which points to the editable timing
  cache); an algorithm is a tactic *and* the formats of its inputs and outputs, with its
  own time (``IAlgorithm.getTimingMSec``, ``IAlgorithmIOInfo`` strides; deprecated in 10.8
  for "editable mode in ITimingCache",
  https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/AlgorithmSelector/pyAlgorithmSelector.html);
  and a verbose log times one layer once per ``Autotuning format combination: Float(...)
  -> Float(...)`` (``tests/fixtures/trt-logs/trt1016_cookbook_trtexec_verbose_excerpt.log``,
  from NVIDIA/trt-samples-for-hackathon-cn ``cookbook/07-Tool/trtexec/result-02.log``).
  Real TensorRT also weighs the reformat layers a format needs (a global choice); the
  stand-in compares the layer's own times only.
- ``ITimingCache``: ``queryKeys()``, ``query()`` (missing -> ``tacticHash == 2**64 - 1``),
  ``update()`` (only existing keys; NaN deletes; an invalid value returns False),
  ``combine()`` (never overrides), ``reset()``, ``serialize()``; loading bytes from another
  version or corrupted bytes logs an error and yields an empty cache; a cache from another
  device is refused by ``set_timing_cache(..., ignore_mismatch=False)``.
- Engines: serialized bytes differ on every build (like real engines, which embed compiler
  names); the inspector returns 10.x-style JSON (11.x: ``I/O Tensors``), Myelin-style layer
  names ``<op>_myl0_<n>`` without ``TacticValue``, fused Cask names ``conv + relu``.

The error-message wording for failures is invented (real wording differs); the log table
format is the documented one (sampleEditableTimingCache, TensorRT 10.8 to 11.1).
"""

import enum as _enum
import hashlib as _hashlib
import json as _json
import math as _math
import random as _random
import re as _re

from tests.trt_standin import dynamic_io as _dynamic_io
from tests.trt_standin import host_device as _host_device
from tests.trt_standin import keysets as _keysets

_CACHE_MAGIC = b"STANDIN-TRT-TIMING-CACHE\x00"
_ENGINE_MAGIC = b"STANDIN-TRT-ENGINE\x00"
_INVALID = 2**64 - 1
_KEY_RE = _re.compile(r"0x[0-9a-fA-F]{32}")
_AUTOTUNED = ("MatMul", "Gemm", "Conv")
# QuantizeLinear/DequantizeLinear: explicit quantization, in onnx-tensorrt's operator list
# (https://github.com/onnx/onnx-tensorrt/blob/main/docs/operators.md) since TensorRT 8.
_SUPPORTED = frozenset(
    {
        "Add",
        "Cast",
        "Conv",
        "DequantizeLinear",
        "QuantizeLinear",
        "Flatten",
        "Gemm",
        "GlobalAveragePool",
        "MatMul",
        "MaxPool",
        "NonZero",
        "Mul",
        "Relu",
        "Reshape",
        "Shape",
        "Softmax",
        "Sub",
    }
)


class _State:
    """Per-module state: identity (version, device) and test knobs."""

    def __init__(self, version, device, compute_capability):
        self.version = version
        self.major_minor = tuple(int(x) for x in version.split(".")[:2])
        self.device = device
        self.sm = f"{compute_capability[0]}{compute_capability[1]}"
        self.builds = 0
        # Test knob: op names whose key changes on every build (a cache miss that
        # ERROR_ON_TIMING_CACHE_MISS would not stop), to exercise the drift check.
        self.rekey_ops = set()
        # Named behaviours real TensorRT may show (see tests/trt_standin/__init__.py).
        self.behaviours = set()
        self.myelin_style = 0
        self.module = None
        # Test knob: class names ("Builder", "Runtime", "OnnxParser") whose constructor
        # fails as on a machine whose driver cannot serve this TensorRT.
        self.fail_create = set()
        # Test knob: keys whose update() returns False although they exist ("returns false
        # if the key is not found or the value is invalid": ITimingCache::update in
        # NVIDIA/TensorRT include/NvInfer.h, 10.8+; what TensorRT calls invalid is not listed).
        self.refuse_update = set()
        # Builds that started from an empty cache (``varying-keys`` counts on it).
        self.recordings = 0


_NULLPTR = "pybind11::init(): factory function returned nullptr"


def _maybe_fail_create(state, what):
    """The real bindings raise ``TypeError`` from pybind11's factory ``__init__`` when
    ``createInferBuilder``/``createInferRuntime``/``createNvOnnxParser`` return null (seen
    running ``tensorrt-cu12-bindings`` 10.13.3.9 and ``tensorrt-cu13-bindings`` 11.4.0.106
    against stub libraries whose factories return null: tests/test_trt_real_bindings.py
    shows it; pybind11's ``init`` factory raises "factory function returned nullptr")."""
    if what in state.fail_create:
        raise TypeError(_NULLPTR)


class _Strict:
    """Rejects unknown public attributes, like pybind11 objects do."""

    def __setattr__(self, name, value):
        if not name.startswith("_") and not hasattr(type(self), name):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        object.__setattr__(self, name, value)


class _EnumProp:
    """A property that only accepts members of one of the module's enums (pybind11 does)."""

    def __init__(self, enum_name, default):
        self._enum_name = enum_name
        self._default = default

    def __set_name__(self, owner, name):
        self._slot = "_prop_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        enum_cls = getattr(obj._state.module, self._enum_name)
        return obj.__dict__.get(self._slot, enum_cls[self._default])

    def __set__(self, obj, value):
        enum_cls = getattr(obj._state.module, self._enum_name)
        if not isinstance(value, enum_cls):
            raise TypeError(f"incompatible type: expected tensorrt.{self._enum_name}")
        obj.__dict__[self._slot] = value


class _IntProp:
    def __init__(self, default, minimum):
        self._default = default
        self._minimum = minimum

    def __set_name__(self, owner, name):
        self._slot = "_prop_" + name
        self._name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return obj.__dict__.get(self._slot, self._default)

    def __set__(self, obj, value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{self._name}: incompatible type {type(value).__name__}")
        if value < self._minimum:
            raise ValueError(f"{self._name} must be >= {self._minimum}")
        obj.__dict__[self._slot] = value


def _hex_digest(*parts, n=32):
    text = "\x1f".join(str(p) for p in parts)
    return _hashlib.sha256(text.encode()).hexdigest()[:n]


# --------------------------------------------------------------------------- logging


class ILogger:
    """Base class of application loggers; subclasses must call ``ILogger.__init__``."""

    Severity = _enum.IntEnum(
        "Severity", {"INTERNAL_ERROR": 0, "ERROR": 1, "WARNING": 2, "INFO": 3, "VERBOSE": 4}
    )

    def __init__(self):
        self._standin_initialized = True

    def log(self, severity, msg):
        raise NotImplementedError("ILogger.log must be overridden")


def _check_logger(logger):
    if not isinstance(logger, ILogger):
        raise TypeError("incompatible function arguments: logger must be a tensorrt.ILogger")
    if not getattr(logger, "_standin_initialized", False):
        raise TypeError("ILogger.__init__() was not called by the subclass")


def _say(logger, level, msg):
    logger.log(getattr(ILogger.Severity, level), msg)


# --------------------------------------------------------------------------- network


class ITensor(_Strict):
    def __init__(self, name, shape):
        self._name = name
        self._shape = tuple(shape)

    @property
    def name(self):
        return self._name

    @property
    def shape(self):
        return self._shape


class INetworkDefinition(_Strict):
    def __init__(self, state, flags):
        self._state = state
        self._flags = flags
        self._inputs = []
        self._outputs = []
        self._nodes = []
        self._model_path = None

    @property
    def num_inputs(self):
        return len(self._inputs)

    @property
    def num_layers(self):
        return len(self._nodes)

    def get_input(self, index):
        return self._inputs[index] if 0 <= index < len(self._inputs) else None


class ParserError(_Strict):
    def __init__(self, desc, node=-1, node_name="", node_operator=""):
        self._desc = desc
        self._node = node
        self._node_name = node_name
        self._node_operator = node_operator

    def desc(self):
        return self._desc

    def node(self):
        return self._node

    def node_name(self):
        return self._node_name

    def node_operator(self):
        return self._node_operator


class OnnxParser(_Strict):
    def __init__(self, network, logger):
        if not isinstance(network, INetworkDefinition):
            raise TypeError("incompatible function arguments: expected INetworkDefinition")
        _check_logger(logger)
        _maybe_fail_create(network._state, "OnnxParser")
        self._network = network
        self._logger = logger
        self._errors = []

    @property
    def num_errors(self):
        return len(self._errors)

    def get_error(self, index):
        return self._errors[index] if 0 <= index < len(self._errors) else None

    def clear_errors(self):
        self._errors = []

    def parse_from_file(self, model):
        import onnx

        try:
            proto = onnx.load(model)
        except Exception as err:  # the real parser reports, it does not raise
            self._errors.append(ParserError(f"Failed to parse ONNX model from file {model}: {err}"))
            return False
        graph = proto.graph
        self._network._model_path = str(model)
        initializers = {t.name for t in graph.initializer}
        self._network._io_types = {
            v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.output)
        }
        for value in graph.input:
            if value.name in initializers:
                continue
            dims = [
                d.dim_value if d.dim_value > 0 else -1 for d in value.type.tensor_type.shape.dim
            ]
            self._network._inputs.append(ITensor(value.name, dims))
        for index, node in enumerate(graph.node):
            name = node.name or f"{node.op_type}_{index}"
            if node.op_type not in _SUPPORTED:
                self._errors.append(
                    ParserError(
                        f"No importer registered for op: {node.op_type}", index, name, node.op_type
                    )
                )
                continue
            self._network._nodes.append(
                {
                    "name": name,
                    "op": node.op_type,
                    "inputs": list(node.input),
                    "outputs": list(node.output),
                }
            )
        self._network._outputs = [v.name for v in graph.output]
        return not self._errors


# --------------------------------------------------------------------------- builder config


class IOptimizationProfile(_Strict):
    def __init__(self):
        self._shapes = {}

    def set_shape(self, input, min, opt, max):
        shapes = tuple(tuple(int(d) for d in s) for s in (min, opt, max))
        self._shapes[str(input)] = shapes

    def get_shape(self, input):
        return list(self._shapes.get(str(input), ()))


class IBuilderConfig(_Strict):
    profiling_verbosity = _EnumProp("ProfilingVerbosity", "LAYER_NAMES_ONLY")
    builder_optimization_level = _IntProp(3, 0)
    max_num_tactics = _IntProp(-1, -1)
    avg_timing_iterations = _IntProp(1, 1)
    tiling_optimization_level = _EnumProp("TilingOptimizationLevel", "NONE")
    max_aux_streams = _IntProp(-1, -1)
    hardware_compatibility_level = _EnumProp("HardwareCompatibilityLevel", "NONE")

    def __init__(self, state, logger):
        self._state = state
        self._logger = logger
        self._flags = {int(state.module.BuilderFlag.TF32)}
        self._pools = {}
        self._sources = sum(1 << int(m) for m in state.module.TacticSource)
        self._profiles = []
        self._cache = None

    def _check_flag(self, flag):
        if not isinstance(flag, self._state.module.BuilderFlag):
            raise TypeError("incompatible function arguments: expected tensorrt.BuilderFlag")

    def set_flag(self, flag):
        self._check_flag(flag)
        self._flags.add(int(flag))

    def clear_flag(self, flag):
        self._check_flag(flag)
        self._flags.discard(int(flag))

    def get_flag(self, flag):
        self._check_flag(flag)
        return int(flag) in self._flags

    def set_memory_pool_limit(self, pool, pool_size):
        if not isinstance(pool, self._state.module.MemoryPoolType):
            raise TypeError("incompatible function arguments: expected tensorrt.MemoryPoolType")
        self._pools[int(pool)] = int(pool_size)

    def get_memory_pool_limit(self, pool):
        return self._pools.get(int(pool), 1 << 40)

    def set_tactic_sources(self, tactic_sources):
        valid = sum(1 << int(m) for m in self._state.module.TacticSource)
        if tactic_sources & ~valid:
            return False
        self._sources = int(tactic_sources)
        return True

    def get_tactic_sources(self):
        return self._sources

    def add_optimization_profile(self, profile):
        for mn, opt, mx in profile._shapes.values():
            ok = len(mn) == len(opt) == len(mx) and all(
                0 <= a <= b <= c for a, b, c in zip(mn, opt, mx, strict=True)
            )
            if not ok:
                _say(self._logger, "ERROR", "IOptimizationProfile: invalid min/opt/max shapes")
                return -1
        self._profiles.append(profile)
        return len(self._profiles) - 1

    def create_timing_cache(self, serialized_timing_cache):
        data = bytes(serialized_timing_cache)
        cache = ITimingCache(self._state, self._state.device)
        if not data:
            return cache
        if not data.startswith(_CACHE_MAGIC):
            _say(
                self._logger,
                "ERROR",
                "Error Code 1: Serialization (Serialization assertion magicTagRead == kMAGIC_TAG "
                "failed.Magic tag does not match)",
            )
            return cache
        header = _json.loads(data[len(_CACHE_MAGIC) :].decode())
        if header["version"] != self._state.version:
            _say(
                self._logger,
                "ERROR",
                f"Timing cache was created by TensorRT {header['version']}, not "
                f"{self._state.version}; the timing cache will not be used",
            )
            return cache
        cache._device = header["device"]
        cache._entries = {k: (int(h), float(ms)) for k, (h, ms) in header["entries"].items()}
        cache._origin = {k: int(h) for k, h in header.get("origin", {}).items()}
        cache._from_bytes = True
        return cache

    def set_timing_cache(self, cache, ignore_mismatch):
        if not isinstance(cache, ITimingCache):
            raise TypeError("incompatible function arguments: expected tensorrt.ITimingCache")
        if cache._device != self._state.device and not ignore_mismatch:
            _say(
                self._logger,
                "ERROR",
                f"Timing cache was recorded on {cache._device}, not {self._state.device}",
            )
            return False
        if cache._from_bytes and not ignore_mismatch and "strict-attach" in self._state.behaviours:
            # Model-Connect #451: a cache from GPU 0 refused on GPU 1 of the same SKU.
            _say(
                self._logger,
                "ERROR",
                "Timing cache was recorded on another device instance; use ignore_mismatch",
            )
            return False
        self._cache = cache
        return True

    def get_timing_cache(self):
        return self._cache


# --------------------------------------------------------------------------- timing cache


class TimingCacheKey:
    """No equality or hash of its own (identity only), like the real binding."""

    def __init__(self, text):
        self._text = text.lower()

    @staticmethod
    def parse(text):
        if not isinstance(text, str) or not _KEY_RE.fullmatch(text):
            raise ValueError(f"invalid timing cache key text: {text!r}")
        return TimingCacheKey(text)

    def __str__(self):
        return self._text

    __repr__ = __str__


class TimingCacheValue(_Strict):
    tacticHash = 0
    timingMSec = 0.0

    def __init__(self, tacticHash, timingMSec, /):
        if isinstance(tacticHash, bool) or not isinstance(tacticHash, int):
            raise TypeError("TimingCacheValue(): tacticHash must be an int")
        if not 0 <= tacticHash < 2**64:
            raise TypeError("TimingCacheValue(): tacticHash does not fit uint64")
        self.tacticHash = tacticHash
        self.timingMSec = float(timingMSec)


class IHostMemory(_Strict):
    def __init__(self, data):
        self._data = bytes(data)

    @property
    def nbytes(self):
        return len(self._data)

    def __bytes__(self):
        return self._data


class ITimingCache(_Strict):
    def __init__(self, state, device):
        self._state = state
        self._device = device
        self._entries = {}
        self._compiled = {}  # JIT-compiled kernels kept with the cache (compilation cache)
        self._from_bytes = False
        # The tactic the builder itself wrote per key, kept through serialize(): what a
        # build runs instead of an edit under ``cask-edits-ignored``/``myelin-edits-ignored``.
        self._origin = {}

    def _key(self, key):
        if not isinstance(key, TimingCacheKey):
            raise TypeError("incompatible function arguments: expected tensorrt.TimingCacheKey")
        return str(key)

    def queryKeys(self):
        keys = [TimingCacheKey(k) for k in self._entries]
        if "shuffled-keys" in self._state.behaviours:
            _random.shuffle(keys)
        return keys

    def query(self, key):
        entry = self._entries.get(self._key(key))
        if entry is None:
            return TimingCacheValue(_INVALID, -1.0)
        return TimingCacheValue(entry[0], entry[1])

    def update(self, key, value):
        k = self._key(key)
        if not isinstance(value, TimingCacheValue):
            raise TypeError("incompatible function arguments: expected TimingCacheValue")
        if k not in self._entries or k in self._state.refuse_update:
            return False
        if _math.isnan(value.timingMSec):
            del self._entries[k]
            return True
        if value.tacticHash == _INVALID or value.timingMSec < 0 or _math.isinf(value.timingMSec):
            return False
        self._entries[k] = (value.tacticHash, value.timingMSec)
        return True

    def combine(self, input_cache, ignore_mismatch):
        if input_cache._state.version != self._state.version:
            return False
        if input_cache._device != self._device and not ignore_mismatch:
            return False
        for k, v in input_cache._entries.items():
            self._entries.setdefault(k, v)
        return True

    def reset(self):
        self._entries = {}
        return True

    def serialize(self):
        header = {
            "version": self._state.version,
            "device": self._device,
            "entries": {k: [h, ms] for k, (h, ms) in sorted(self._entries.items())},
            "origin": dict(sorted(self._origin.items())),
        }
        return IHostMemory(_CACHE_MAGIC + _json.dumps(header).encode())


# --------------------------------------------------------------------------- builder


class _Candidate:
    def __init__(self, kernel, variant=""):
        self.kernel = kernel
        parts = ("tactic", kernel, variant) if variant else ("tactic", kernel)
        self.tactic_hash = int(_hex_digest(*parts, n=13), 16)


def _shared_names(kernels):
    """``shared-kernel-names``: candidates that differ only in their pipeline stages print
    one kernel name with several tactic hashes, as real tables do (43 names under 2 or more
    hashes in tests/fixtures/trt-logs/trt1016_cookbook_python_logger_verbose_excerpt.log,
    e.g. ``sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize32x32x64_stage...``)."""
    return [
        _Candidate(
            _re.sub(r"_stage\d+", "", k), m.group(0) if (m := _re.search(r"_stage\d+", k)) else ""
        )
        for k in kernels
    ]


def _candidates(state, op, config, combo=""):
    """Every tactic the layer could use (before max_num_tactics limits the timed ones); a
    Conv's NHWC format combination (``multi-key``) has channels-last kernels of its own."""
    m = state.module
    tf32 = config.get_flag(m.BuilderFlag.TF32)
    sm = state.sm
    if op in ("MatMul", "Gemm"):
        math_ = "tf32f32_f32_nn_n" if tf32 else "f32f32_f32_nn_n"
        inst = "tensor16x8x8" if tf32 else "ffma"
        tiles = ["32x32x64_stage3", "64x32x64_stage4", "64x32x64_stage5", "64x64x64_stage4"]
        kernels = [
            f"sm{sm}_xmma_gemm_f32f32_{math_}_tilesize{t}_warpsize2x1x2_{inst}" for t in tiles
        ]
    else:
        layout = "nhwckrsc_nhwc" if combo == "fmt:NHWC" else "nchwkcrs_nchw"
        kernels = [
            f"sm{sm}_xmma_fprop_implicit_gemm_f32f32_{'tf32' if tf32 else 'f32'}f32_f32_{layout}"
            f"_tilesize{t}"
            for t in ("64x32x32_stage5", "128x64x32_stage3")
        ]
        if config.get_tactic_sources() & (1 << int(m.TacticSource.EDGE_MASK_CONVOLUTIONS)):
            kernels.append(f"sm{sm}_xmma_fprop_implicit_gemm_edge_mask_tilesize64x64x32")
        if config.get_tactic_sources() & (1 << int(m.TacticSource.JIT_CONVOLUTIONS)):
            kernels.append(f"sm{sm}_jit_convolution_tilesize32x32")
        if combo == "fmt:NHWC":
            kernels = [k if "nhwc" in k else f"{k}_nhwc" for k in kernels]
    di = getattr(m.BuilderFlag, "DISTRIBUTIVE_INDEPENDENCE", None)
    if di is not None and config.get_flag(di):
        # stands for the kernels whose tiling depends on the batch, which the flag removes
        kernels = [k for k in kernels if "_stage5" not in k]
    level = config.builder_optimization_level
    if level == 1:
        kernels = kernels[: max(1, len(kernels) // 2)]
    if "shared-kernel-names" in state.behaviours:
        return _shared_names(kernels)
    return [_Candidate(k) for k in kernels]


_SANITISE_RE = _re.compile(r"[^0-9A-Za-z_]")


def _myelin_names(st, name, nodes, index, myelin, skip):
    """Engine layer names of a Myelin gemm: ``<op>_myl0_<n>`` by default. ``myelin-names``
    rotates through what real Myelin does: one copy per profile (``<op> [profile N]_myl..``),
    sanitised names (``/fc1/MatMul`` -> ``_fc1_MatMul``), and a fusion with the next
    elementwise node under a name that no longer contains the op."""
    if "myelin-names" not in st.behaviours:
        return [f"{name}_myl0_{myelin}"]
    style = st.myelin_style
    st.myelin_style = (style + 1) % 3
    clean = _SANITISE_RE.sub("_", name)
    if style == 0:
        return [f"{clean} [profile 0]_myl{myelin}_0", f"{clean} [profile 1]_myl{myelin}_1"]
    nxt = nodes[index + 1] if index + 1 < len(nodes) else None
    if style == 1 and nxt is not None and nxt["op"] not in _AUTOTUNED:
        skip.add(index + 1)
        return [f"__myl_{nxt['op']}Gemm_myl0_{myelin}"]
    return [f"{clean}_myl0_{myelin}"]


class _Tuner:
    """Autotunes one op (or one format combination of it) against the attached cache, and
    prints the log the active behaviours ask for."""

    def __init__(self, st, log, config, cache, salt, editable, miss_is_error, build_no):
        self.st, self.log, self.config, self.cache = st, log, config, cache
        self.salt, self.editable, self.miss_is_error = salt, editable, miss_is_error
        self.build_no = build_no
        self.compile_cache = not config.get_flag(st.module.BuilderFlag.DISABLE_COMPILATION_CACHE)

    def say(self, msg):
        _say(self.log, "VERBOSE", msg)

    def key(self, index, node, combo):
        """The key of one op (or one format combination of it) in this build."""
        nonce = self.build_no if node["name"] in self.st.rekey_ops else 0
        # Editable: one key per layer. Otherwise identical layers share a key (the stand-in
        # does not track per-node shapes, so "identical" means "same op type").
        per_layer = (index, node["inputs"]) if self.editable else "shared"
        return "0x" + _hex_digest(
            self.salt, node["op"], per_layer, nonce, *([combo] if combo else [])
        )

    def tune(self, index, node, combo):
        """(the tactic, the key's time in ms: cached or just measured), or None on an error."""
        st, op, name = self.st, node["op"], node["name"]
        key = self.key(index, node, combo)
        allowed = _candidates(st, op, self.config, combo)
        limit = self.config.max_num_tactics
        timed = allowed[:limit] if limit > 0 else allowed
        marker = " (foreignNode) " if op != "Conv" else ""
        entries = self.cache._entries
        if self.config.builder_optimization_level == 0:
            return timed[0], 0.0
        if key in entries:
            cached = entries[key][0]
            match = [c for c in allowed if c.tactic_hash == cached]
            if not match:
                _say(
                    self.log,
                    "ERROR",
                    f"Error Code 2: Internal Error (node {name}: tactic 0x{cached:x} from the "
                    f"timing cache (key: {key}) is not a valid tactic for this layer)",
                )
                return None
            chosen = self._edit_ignored(op, key, allowed) or match[0]
            if "cached-result-lines" in st.behaviours:
                # A cache hit as 10.16 trtexec prints it on a rebuild
                # (tests/fixtures/trt-logs/trt1016_cookbook_trtexec_verbose_excerpt.log:
                # "node_conv2d + node_relu [Float(...) -> Float(...)] got cached result:
                # CaskConvolution, tactic 0x5b8bf1b8028629d9, 0.00534603 ms").
                runner = "CaskConvolution" if op == "Conv" else "CaskGemm"
                self.say(
                    f"{name} [Float(1,1,1,1) -> Float(1,1,1,1)] got cached result: {runner}, "
                    f"tactic 0x{cached:016x}, {entries[key][1]:g} ms"
                )
            if "hit-headers" in st.behaviours:
                self._table(marker, name, key, [(entries[key][1], 0, chosen)], write=False)
            if op != "Conv" and self.compile_cache and key in self.cache._compiled:
                # Reused JIT compilation: the kernel compiled earlier, whatever the cache says.
                return self.cache._compiled[key], entries[key][1]
            return chosen, entries[key][1]
        if self.miss_is_error:
            _say(self.log, "ERROR", f"Timing cache miss for node {name} (key: {key})")
            return None
        rnd = _random.Random(f"{self.build_no}:{key}")
        costs = []
        for tactic_id, cand in enumerate(timed):
            base = 0.010 + 0.0004 * (cand.tactic_hash % 7)
            costs.append((base * (1.0 + 0.25 * rnd.random()), tactic_id, cand))
        costs.sort(key=lambda t: t[0])
        if "inf-nan" in st.behaviours and len(costs) > 1:
            # A failed candidate times as NaN, and the winner is stored with an infinite time.
            costs[-1] = (float("nan"), costs[-1][1], costs[-1][2])
        if op == "Conv" and "keyless-cask" in st.behaviours:
            self._cask_table(name, costs)
        else:
            self._table(marker, name, key, costs, write=True)
        chosen = costs[0][2]
        stored = float("inf") if "inf-nan" in st.behaviours else round(costs[0][0], 7)
        entries[key] = (chosen.tactic_hash, stored)
        self.cache._origin[key] = chosen.tactic_hash
        if op != "Conv" and self.compile_cache:
            self.cache._compiled[key] = chosen
        return chosen, stored

    def _edit_ignored(self, op, key, allowed):
        """``cask-edits-ignored`` (Conv) / ``myelin-edits-ignored`` (MatMul, Gemm): in a
        cache deserialized into a new config, a key whose tactic was edited with
        ``update()`` runs the tactic the builder wrote; the cache keeps the edit, so only
        the engine shows it. None where the edit is honoured (see ``__init__``)."""
        kind = "cask-edits-ignored" if op == "Conv" else "myelin-edits-ignored"
        origin = self.cache._origin.get(key)
        if kind not in self.st.behaviours or not self.cache._from_bytes or origin is None:
            return None
        if origin == self.cache._entries[key][0]:
            return None
        return next((c for c in allowed if c.tactic_hash == origin), None)

    def _table(self, marker, name, key, costs, *, write):
        say = self.say
        fastest = costs[0][0]
        say(f"{marker}Autotuning op {name}(key: {key}): [ONNX Layer: {name}]")
        say(f"{marker}Sorted table of all evaluated tactics:")
        say(
            f"{marker}tactic_id, cost(in ms), cost/fastest_cost, prediction_correlation, "
            "kernel_name, tactic_hash, tunable_parameter"
        )
        for cost, tactic_id, cand in costs:
            say(
                f"{marker}{tactic_id:4d}, {cost:.7f}, {cost / fastest:.5f}, 0.50000, "
                f"{cand.kernel}, 0x{cand.tactic_hash:x},"
            )
        chosen = costs[0][2]
        say(
            f"{marker}The selected tactic is (tactic hash, cost(in ms)):"
            f"0x{chosen.tactic_hash:x},  {fastest:.6f}"
        )
        if write:
            say(f"{marker}Writing the best tactic (0x{chosen.tactic_hash:x}) to cache")

    def _cask_table(self, name, costs):
        """The 10.x runner format: no key anywhere (as real Cask convolutions print)."""
        say = self.say
        runner = "CaskConvolution[0x80000009]"
        say(f"=============== Computing costs for {name}")
        say("*************** Autotuning format combination: Float(1,1,1,1) -> Float(1,1,1,1) ***")
        say(f"--------------- Timing Runner: {name} ({runner})")
        for cost, _, cand in costs:
            say(f"Tactic Name: {cand.kernel} Tactic: 0x{cand.tactic_hash:016x} Time: {cost:.6f}")
        best = costs[0]
        say(
            f"{name} ({runner}) profiling completed in 0.0123 seconds. Fastest Tactic: "
            f"0x{best[2].tactic_hash:016x} Time: {best[0]:.6f}"
        )
        say(
            ">>>>>>>>>>>>>>> Chose Runner Type: CaskConvolution Tactic: "
            f"0x{best[2].tactic_hash:016x}"
        )

    def reformat(self, feeds):
        """A reformat entry: keyed in the cache, never logged, a Reformat engine layer."""
        key = "0x" + _hex_digest(self.salt, "reformat", feeds)
        tactic = int(_hex_digest("reformat-copy", n=13), 16)
        if key in self.cache._entries:
            if self.cache._entries[key][0] != tactic:
                _say(self.log, "ERROR", f"Error Code 2: reformat tactic invalid (key: {key})")
                return None
        elif self.miss_is_error:
            _say(self.log, "ERROR", f"Timing cache miss for reformat (key: {key})")
            return None
        else:
            self.cache._entries[key] = (tactic, 0.001)
        return {
            "Name": f"Reformatting CopyNode for Input Tensor 0 to {feeds}",
            "LayerType": "Reformat",
            "TacticName": None,
            "TacticValue": f"0x{tactic:016x}",
            "Metadata": "",
        }


class Builder(_Strict):
    _state = None  # set on the per-module subclass

    def __init__(self, logger):
        _check_logger(logger)
        _maybe_fail_create(self._state, "Builder")
        self._logger = logger

    def create_network(self, flags=0):
        m = self._state.module
        if self._state.major_minor >= (11, 0) and flags & (
            1 << int(m.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        ):
            _say(
                self._logger,
                "WARNING",
                "NetworkDefinitionCreationFlag::kSTRONGLY_TYPED is deprecated and ignored: "
                "networks are always strongly typed",
            )
        return INetworkDefinition(self._state, int(flags))

    def create_builder_config(self):
        return self._state.module.IBuilderConfig(self._state, self._logger)

    def create_optimization_profile(self):
        return IOptimizationProfile()

    def _salt(self, network, config):
        m = self._state.module
        # Flags that only change how the cache is used, not which kernels are candidates,
        # do not change keys (else every pinned build would miss).
        neutral = {"ERROR_ON_TIMING_CACHE_MISS", "DISABLE_COMPILATION_CACHE"}
        flags = sorted(
            name
            for name, f in m.BuilderFlag.__members__.items()
            if config.get_flag(f) and name not in neutral
        )
        shapes = [(t.name, t.shape) for t in network._inputs]
        profiles = [sorted(p._shapes.items()) for p in config._profiles]
        return _hex_digest(
            self._state.version,
            self._state.device,
            network._flags,
            flags,
            config.builder_optimization_level,
            config.get_tactic_sources(),
            config.max_num_tactics,
            config.avg_timing_iterations,
            int(config.tiling_optimization_level),
            config.max_aux_streams,
            int(config.hardware_compatibility_level),
            sorted(config._pools.items()),
            shapes,
            profiles,
        )

    def build_serialized_network(self, network, config):
        st = self._state
        m = st.module
        st.builds += 1
        build_no = st.builds
        log = self._logger

        def say(msg):
            _say(log, "VERBOSE", msg)

        dynamic = [t.name for t in network._inputs if any(d < 0 for d in t.shape)]
        covered = set().union(*(p._shapes for p in config._profiles)) if config._profiles else set()
        missing = [n for n in dynamic if n not in covered]
        if missing:
            _say(
                log,
                "ERROR",
                f"Network has dynamic or shape inputs, but no optimization profile has been "
                f"defined for {', '.join(missing)}.",
            )
            return None
        editable = hasattr(m.BuilderFlag, "EDITABLE_TIMING_CACHE") and config.get_flag(
            m.BuilderFlag.EDITABLE_TIMING_CACHE
        )
        miss_is_error = config.get_flag(m.BuilderFlag.ERROR_ON_TIMING_CACHE_MISS)
        cache = config._cache
        if cache is None:
            _say(
                log,
                "INFO",
                "Local timing cache in use. Profiling results in this builder pass "
                "will not be stored.",
            )
            cache = ITimingCache(st, st.device)
        else:
            _say(
                log,
                "INFO",
                "Global timing cache in use. Profiling results in this builder pass "
                "will be stored.",
            )
        salt = self._salt(network, config)
        tuner = _Tuner(st, log, config, cache, salt, editable, miss_is_error, build_no)
        from_nothing = not cache._entries  # a recording build (recording-bits)
        st.recordings += from_nothing  # varying-keys: a recording starts from nothing
        convs = 0
        st.myelin_style = 0  # engine names are stable from build to build
        layers = []
        myelin = 0
        nodes = network._nodes
        skip = set()
        chosen_by_node = {}
        for index, node in enumerate(nodes):
            if index in skip:
                continue
            op = node["op"]
            name = node["name"]
            if op not in _AUTOTUNED:
                layers.append(
                    {
                        "Name": f"__myl_{op}_myl0_{myelin}",
                        "LayerType": "kgen",
                        "TacticName": f"__myl_{op}_0x{_hex_digest(name, op)}",
                        "Metadata": f"[ONNX Layer: {name}]",
                    }
                )
                myelin += 1
                continue
            combos = ("", "fmt:NHWC") if op == "Conv" and "multi-key" in st.behaviours else ("",)
            if op == "Conv" and "varying-keys" in st.behaviours:
                combos = _keysets.timed_combos(tuner, index, node, convs, st.recordings)
            if op == "Conv" and "replay-adds-combination" in st.behaviours:
                combos = _keysets.replay_combos(combos, from_nothing)
            convs += op == "Conv"
            tuned = []
            for combo in combos:  # each format combination has its own key and table
                result = tuner.tune(index, node, combo)
                if result is None:
                    return None
                tuned.append(result)
            # The combination whose (cached or measured) time is lowest runs; ties: the first.
            chosen = min(enumerate(tuned), key=lambda it: (it[1][1], it[0]))[1][0]
            if "fixed-format" in st.behaviours:  # the format is not chosen by cached times
                chosen = tuned[0][0]
            chosen_by_node[name] = chosen.tactic_hash
            if op == "Conv":
                layer_name = name
                nxt = nodes[index + 1] if index + 1 < len(nodes) else None
                if nxt and nxt["op"] == "Relu" and nxt["inputs"][:1] == node["outputs"][:1]:
                    layer_name = f"{name} + {nxt['name']}"
                    skip.add(index + 1)
                layers.append(
                    {
                        "Name": layer_name,
                        "LayerType": "CaskConvolution",
                        "TacticName": chosen.kernel,
                        "TacticValue": f"0x{chosen.tactic_hash:016x}",
                        "Metadata": f"[ONNX Layer: {name}]",
                    }
                )
            else:
                for layer_name in _myelin_names(st, name, nodes, index, myelin, skip):
                    layers.append(
                        {
                            "Name": layer_name,
                            "LayerType": "gemm",
                            "TacticName": chosen.kernel,
                            "Metadata": f"[ONNX Layer: {name}]",
                        }
                    )
                    myelin += 1
        if "multi-key" in st.behaviours and layers:
            reformat = tuner.reformat(layers[0]["Name"])
            if reformat is None:
                return None
            layers.insert(0, reformat)
        engine = {
            "version": st.version,
            "device": st.device,
            "build": build_no,  # engines are not byte-reproducible
            "detailed": int(config.profiling_verbosity) == int(m.ProfilingVerbosity.DETAILED),
            "layers": layers,
            "tactics": chosen_by_node,
            "recording": from_nothing and "recording-bits" in st.behaviours,
            "model": network._model_path,
            "inputs": [t.name for t in network._inputs],
            "input_shapes": {t.name: list(t.shape) for t in network._inputs},
            "outputs": list(network._outputs),
            "io_types": dict(getattr(network, "_io_types", {})),
            "shape_inputs": _dynamic_io.shape_inputs(network._model_path),
            "shape_outputs": _dynamic_io.shape_outputs(network._model_path),
        }
        return IHostMemory(_ENGINE_MAGIC + _json.dumps(engine).encode())


# --------------------------------------------------------------------------- runtime


class EngineInspector(_Strict):
    def __init__(self, engine):
        self._engine = engine

    def get_engine_information(self, format):
        st = self._engine._state
        if not isinstance(format, st.module.LayerInformationFormat):
            raise TypeError("expected tensorrt.LayerInformationFormat")
        data = self._engine._data
        io_key = "I/O Tensors" if st.major_minor >= (11, 0) else "Bindings"
        io = data["inputs"] + data["outputs"]
        if not data["detailed"]:
            return _json.dumps({"Layers": [x["Name"] for x in data["layers"]], io_key: io})
        if int(format) == int(st.module.LayerInformationFormat.ONELINE):
            return "\n".join(
                ", ".join(f"{k}: {v}" for k, v in layer.items()) for layer in data["layers"]
            )
        typed = "typed-io" in st.behaviours
        tensors = _typed_tensors(data["model"], st.major_minor) if typed else None
        layers = []
        for layer in data["layers"]:
            record = {
                "Name": layer["Name"],
                "LayerType": layer["LayerType"],
                "Inputs": [],
                "Outputs": [],
                "TacticName": layer["TacticName"],
            }
            if tensors is not None:
                node = tensors["nodes"].get(
                    _re.sub(r"^\[ONNX Layer: (.*)\]$", r"\1", layer["Metadata"])
                )
                if node is not None:
                    record["Inputs"] = [tensors["desc"](t) for t in node[0]]
                    record["Outputs"] = [tensors["desc"](t) for t in node[1]]
            if "TacticValue" in layer:
                record["TacticValue"] = layer["TacticValue"]
            record["StreamId"] = 0
            record["Metadata"] = layer["Metadata"]
            layers.append(record)
        return _json.dumps({"Layers": layers, io_key: io})


_TYPE_WORDS = {1: "FP32", 10: "FP16", 16: "BF16", 3: "Int8", 6: "Int32", 7: "Int64", 9: "Bool"}


def _typed_tensors(model_path, major_minor):
    """``typed-io``: each layer's input and output tensors with their types, taken from the
    ONNX graph (a strongly typed build runs the graph's types). 10.x writes one
    ``"Format/Datatype": "Row major linear FP32"`` field (tests/fixtures/trt-logs/
    trt84_trex_resnet_a100_fp16_exportLayerInfo.json); 11.x splits it into ``Format`` and
    ``Datatype`` (tests/fixtures/logparse/layerinfo_trt11_detailed.json)."""
    import onnx

    proto = onnx.shape_inference.infer_shapes(onnx.load(model_path))
    graph = proto.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.output)}
    types.update({v.name: v.type.tensor_type.elem_type for v in graph.value_info})
    consts = {t.name for t in graph.initializer}
    nodes = {
        (n.name or f"{n.op_type}_{i}"): (
            [t for t in n.input if t and t not in consts],
            [t for t in n.output if t],
        )
        for i, n in enumerate(graph.node)
    }

    def desc(tensor):
        word = _TYPE_WORDS.get(types.get(tensor), "FP32")
        if major_minor >= (11, 0):
            return {"Name": tensor, "Format": "Row major linear", "Datatype": word}
        return {"Name": tensor, "Format/Datatype": f"Row major linear {word}"}

    return {"nodes": nodes, "desc": desc}


# ONNX elem_type -> (DataType member, NumPy type name)
_IO_TYPES = {
    1: ("FLOAT", "float32"),
    10: ("HALF", "float16"),
    3: ("INT8", "int8"),
    6: ("INT32", "int32"),
    7: ("INT64", "int64"),
    9: ("BOOL", "bool"),
}


def _np_type(data, name):
    import numpy as _np

    return _np.dtype(_IO_TYPES.get(data.get("io_types", {}).get(name, 1), ("", "float32"))[1])


class ICudaEngine(_Strict):
    def __init__(self, state, data, logger=None):
        self._state = state
        self._data = data
        self._logger = logger  # the runtime's: errors while running are logged there

    @property
    def num_layers(self):
        return len(self._data["layers"])

    def create_engine_inspector(self):
        return EngineInspector(self)

    @property
    def num_io_tensors(self):
        return len(self._data["inputs"]) + len(self._data["outputs"])

    def get_tensor_name(self, index):
        names = self._data["inputs"] + self._data["outputs"]
        return names[index] if 0 <= index < len(names) else None

    def get_tensor_mode(self, name):
        mode = self._state.module.TensorIOMode
        if name in self._data["inputs"]:
            return mode.INPUT
        return mode.OUTPUT if name in self._data["outputs"] else mode.NONE

    def get_tensor_dtype(self, name):
        """The I/O tensor's type from the graph, as a strongly typed engine keeps it (the
        real inspector prints it: ``Input ->DataType.FLOAT`` in
        tests/fixtures/trt-logs/trt1016_cookbook_engineinspector_oneline.log)."""
        code = self._data.get("io_types", {}).get(name, 1)
        return getattr(self._state.module.DataType, _IO_TYPES.get(code, ("FLOAT",))[0])

    def is_shape_inference_io(self, name):
        """A shape tensor input (see ``dynamic_io``): its values are read from host memory."""
        shape_io = (*self._data.get("shape_inputs", ()), *self._data.get("shape_outputs", ()))
        return name in shape_io

    def create_execution_context(self):
        return IExecutionContext(self)


class IExecutionContext(_Strict):
    """Runs the engine's ONNX model with ``onnx.reference`` on the memory the caller put
    at the tensor addresses. The last mantissa bit of every output element is flipped by a
    pattern drawn from the engine's tactics, so outputs are bit-identical exactly when the
    tactics are (what real kernels that sum in different orders give)."""

    def __init__(self, engine):
        self._engine = engine
        self._shapes = {}
        self._addresses = {}
        self._out_shapes = None
        self._allocators = {}

    def set_input_shape(self, name, shape):
        if name not in self._engine._data["inputs"]:
            return False
        want = self._engine._data["input_shapes"][name]
        dims = tuple(int(d) for d in shape)
        if len(dims) != len(want) or any(
            w >= 0 and w != d for w, d in zip(want, dims, strict=True)
        ):
            return False  # outside the engine's (static) profile
        self._shapes[name] = tuple(int(d) for d in shape)
        self._out_shapes = None
        return True

    def _evaluate(self, feeds):
        from onnx.reference import ReferenceEvaluator

        data = self._engine._data
        try:
            outputs = ReferenceEvaluator(data["model"]).run(None, feeds)
        except RuntimeError:  # an op version onnx.reference lacks (Q/DQ before opset 19)
            import onnxruntime as _ort

            session = _ort.InferenceSession(data["model"], providers=["CPUExecutionProvider"])
            outputs = session.run(None, feeds)
        return dict(zip(data["outputs"], outputs, strict=True))

    def _feeds_with(self, fill):
        """Ordinary inputs filled with ``fill``; shape tensors as set at their host address."""
        import numpy as _np

        data = self._engine._data
        feeds = {}
        for n, s in self._shapes.items():
            dtype = _np_type(data, n)
            if n in data.get("shape_inputs", ()) and n in self._addresses:
                feeds[n] = _dynamic_io.read_host(self._addresses[n], s, dtype)
            else:
                feeds[n] = _np.full(s, fill, dtype)
        return feeds

    def get_tensor_shape(self, name):
        if name in self._shapes:
            return self._shapes[name]
        if self._out_shapes is None:
            self._out_shapes = _dynamic_io.output_shapes(
                self._evaluate, self._feeds_with, self._engine._data["model"]
            )
        return self._out_shapes.get(name, ())

    def set_output_allocator(self, name, output_allocator):
        if not isinstance(output_allocator, _dynamic_io.IOutputAllocator):
            raise TypeError("incompatible function arguments: expected IOutputAllocator")
        self._allocators[name] = output_allocator
        return True

    def set_tensor_address(self, name, memory):
        self._addresses[name] = int(memory)
        return True

    def _device_memory(self, name, nbytes):
        """The stand-in device buffer at the tensor's address, or None (after logging the
        CUDA error TensorRT reports) when the address is not one: see ``host_device``."""
        buf = _host_device.buffer(self._addresses.get(name, 0), nbytes)
        if buf is None and self._engine._logger is not None:
            # cudaErrorIllegalAddress (700), as cudaGetErrorString words it.
            _say(
                self._engine._logger,
                "ERROR",
                "IExecutionContext::enqueueV3: Error Code 1: Cuda Runtime (an illegal memory "
                f"access was encountered) [tensor {name}: not stand-in device memory]",
            )
        return buf

    def execute_async_v3(self, stream_handle):
        import numpy as _np

        data = self._engine._data
        feeds = {}
        for name in data["inputs"]:
            shape, dtype = self._shapes[name], _np_type(data, name)
            nbytes = int(_np.prod(shape, dtype=_np.int64)) * dtype.itemsize
            if name in data.get("shape_inputs", ()):
                if _host_device.buffer(self._addresses[name], 0) is not None:
                    return False  # a shape tensor in device memory: TensorRT needs host
                feeds[name] = _dynamic_io.read_host(self._addresses[name], shape, dtype)
                continue
            raw = self._device_memory(name, nbytes)
            if raw is None:
                return False
            feeds[name] = raw[:nbytes].view(dtype).reshape(shape).copy()
        outputs = self._evaluate(feeds)
        seed = _hex_digest(
            *sorted(data["tactics"].items()), *(["recording"] * bool(data.get("recording")))
        )
        rng = _np.random.default_rng(int(seed, 16))
        for name in data["outputs"]:
            dtype = _np_type(data, name)
            out = _np.ascontiguousarray(outputs[name], dtype=dtype)
            if dtype.kind == "f":  # the last mantissa bit, at the type's own width
                bits = _np.dtype(f"uint{8 * dtype.itemsize}")
                out.view(bits)[...] ^= rng.integers(0, 2, out.shape, dtype=bits)
            if name in data.get("shape_outputs", ()):
                if _host_device.buffer(self._addresses[name], 0) is not None:
                    return False  # a shape tensor output in device memory: TensorRT needs host
                _dynamic_io.write_host(self._addresses[name], out)
                continue
            if name in self._allocators:  # data-dependent shape: the application allocates
                if not _dynamic_io.deliver(self._allocators[name], name, out, stream_handle):
                    return False
                continue
            raw = self._device_memory(name, out.nbytes)
            if raw is None:
                return False
            raw[: out.nbytes] = out.reshape(-1).view(_np.uint8)
        return True


class Runtime(_Strict):
    _state = None  # set on the per-module subclass

    def __init__(self, logger):
        _check_logger(logger)
        _maybe_fail_create(self._state, "Runtime")
        self._logger = logger

    def deserialize_cuda_engine(self, serialized_engine):
        data = bytes(serialized_engine)
        if not data.startswith(_ENGINE_MAGIC):
            _say(
                self._logger,
                "ERROR",
                "Error Code 1: Serialization (Serialization assertion "
                "plan->header.magicTag == rt::kPLAN_MAGIC_TAG failed.)",
            )
            return None
        info = _json.loads(data[len(_ENGINE_MAGIC) :].decode())
        if info["version"] != self._state.version or info["device"] != self._state.device:
            _say(
                self._logger,
                "ERROR",
                f"The engine was built with TensorRT {info['version']} on {info['device']}; "
                "it cannot run here.",
            )
            return None
        return ICudaEngine(self._state, info, self._logger)


# --------------------------------------------------------------------------- module variants


def _enums(major_minor):
    ten = major_minor < (11, 0)
    builder_flags = (
        {
            "FP16": 0,
            "DEBUG": 2,
            "DISABLE_TIMING_CACHE": 5,
            "TF32": 6,
            "ERROR_ON_TIMING_CACHE_MISS": 16,
            "BF16": 17,
            "DISABLE_COMPILATION_CACHE": 18,
        }
        if ten
        else {
            "DEBUG": 0,
            "DISABLE_TIMING_CACHE": 2,
            "TF32": 3,
            "ERROR_ON_TIMING_CACHE_MISS": 10,
            "DISABLE_COMPILATION_CACHE": 11,
        }
    )
    if major_minor >= (10, 8):
        # The two values TENSORRT_NOTES.md documents: 27 on 10.x, 26 on 11.x.
        builder_flags["EDITABLE_TIMING_CACHE"] = 27 if ten else 26
        # 28 in the 10.13 bindings, 27 in 11.4 (tests/test_trt_real_bindings.py reads them).
        # The version that first had it is not recorded here: every variant with an
        # editable cache has it (tests of bindings without it take it out of the enum).
        builder_flags["DISTRIBUTIVE_INDEPENDENCE"] = 28 if ten else 27
    network_flags = {"EXPLICIT_BATCH": 0, "STRONGLY_TYPED": 1} if ten else {"STRONGLY_TYPED": 0}
    sources = (
        {
            "CUBLAS": 0,
            "CUBLAS_LT": 1,
            "CUDNN": 2,
            "EDGE_MASK_CONVOLUTIONS": 3,
            "JIT_CONVOLUTIONS": 4,
        }
        if ten
        else {"EDGE_MASK_CONVOLUTIONS": 0, "JIT_CONVOLUTIONS": 1}
    )
    enums = {
        "BuilderFlag": builder_flags,
        "NetworkDefinitionCreationFlag": network_flags,
        "ProfilingVerbosity": {"LAYER_NAMES_ONLY": 0, "NONE": 1, "DETAILED": 2},
        "LayerInformationFormat": {"ONELINE": 0, "JSON": 1},
        "DataType": {"FLOAT": 0, "HALF": 1, "INT8": 2, "INT32": 3, "BOOL": 4, "INT64": 5},
        "TensorIOMode": {"NONE": 0, "INPUT": 1, "OUTPUT": 2},
        "MemoryPoolType": {"WORKSPACE": 0, "TACTIC_SHARED_MEMORY": 5},
        "TacticSource": sources,
        "HardwareCompatibilityLevel": {"NONE": 0, "AMPERE_PLUS": 1, "SAME_COMPUTE_CAPABILITY": 2},
    }
    if major_minor >= (10, 8):
        enums["TilingOptimizationLevel"] = {"NONE": 0, "FAST": 1, "MODERATE": 2, "FULL": 3}
    return {name: _enum.IntEnum(name, members) for name, members in enums.items()}


class _BuildRouteConfig(IBuilderConfig):
    build_route = ""


def _build_module(module, version, device, compute_capability):
    state = _State(version, device, compute_capability)
    state.module = module
    module.__version__ = version
    for name, enum_cls in _enums(state.major_minor).items():
        setattr(module, name, enum_cls)
    module.ILogger = ILogger
    module.IOutputAllocator = _dynamic_io.IOutputAllocator

    def nptype(trt_type):
        """The numpy type of a ``DataType`` (the real module defines it in Python)."""
        import numpy as _np

        return {
            0: _np.float32,
            1: _np.float16,
            2: _np.int8,
            3: _np.int32,
            4: _np.bool_,
            5: _np.int64,
        }[int(trt_type)]

    module.nptype = nptype
    module.Builder = type("Builder", (Builder,), {"_state": state})
    module.Runtime = type("Runtime", (Runtime,), {"_state": state})
    config_base = _BuildRouteConfig if state.major_minor >= (11, 1) else IBuilderConfig
    module.IBuilderConfig = type("IBuilderConfig", (config_base,), {})
    for cls in (
        INetworkDefinition,
        ITensor,
        OnnxParser,
        ParserError,
        IOptimizationProfile,
        ITimingCache,
        TimingCacheKey,
        TimingCacheValue,
        IHostMemory,
        ICudaEngine,
        IExecutionContext,
        EngineInspector,
    ):
        setattr(module, cls.__name__, cls)
    module._standin = state
    return module
