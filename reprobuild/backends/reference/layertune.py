"""One autotuned layer: its keys (one per format combination), each key's tactic and time,
and the key the layer runs.

Per key (:func:`layer_key`: ``"0x"`` + 32 hex hashing the layer's identity, its format, the
environment and the build settings): if the timing cache holds the key, its tactic is used
without timing (it must be one of the key's candidates, else ``BuildError``) and its cached
time stands for the key; otherwise the key's candidates are timed by :mod:`.autotune`'s
policy, the tie rule's choice wins and is written to the cache with its cost. The layer then
runs the key the tie rule chooses between its keys' times (:func:`reprobuild.tiebreak.choose_key`;
the module docstring of :mod:`.formats` says why and what happens when only some keys are
cached).

Settings that shape a key's candidates: ``optimization_level`` 0 ignores the timing cache
and uses the first format's first (BLAS) kernel, as TensorRT's level 0 ignores its cache;
``workspace`` drops kernels whose scratch memory exceeds it (a format left without any is
not offered); ``max_num_tactics`` keeps the first N of each key's table.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reprobuild.backends.base import BuildSettings, TimingValue
from reprobuild.backends.reference import int8, kernels
from reprobuild.backends.reference.autotune import CLOCKS, AutotuneStats, tune
from reprobuild.backends.reference.buildlog import BuildLog, autotune_lines, tensor_format
from reprobuild.backends.reference.formats import HWC, LINEAR, by_format
from reprobuild.backends.reference.knob import TimingKnob
from reprobuild.backends.reference.prepared import Layer, execute_spec
from reprobuild.backends.reference.timingcache import ReferenceTimingCache
from reprobuild.errors import BuildError
from reprobuild.lock.rules import check_candidates
from reprobuild.logs.lines import escape_name
from reprobuild.tiebreak import KeyOption, TieCandidate, ahead, choose_key, decide, unsure


def layer_key(
    layer: Layer,
    inputs: Sequence[Any],
    environment_fp: str,
    settings_fp: str,
    fmt: str = LINEAR,
) -> str:
    """One key per layer and format combination (editable mode): identity + shapes +
    format + environment + settings. The ``linear`` format adds nothing to the hashed
    identity, so a single-format layer keeps the key it always had."""
    identity: dict[str, Any] = {
        "key_version": 1,
        "environment": environment_fp,
        "settings": settings_fp,
        "index": layer.index,
        "name": layer.name,
        "domain": layer.domain,
        "op": layer.op,
        "attributes": {
            a.name: hashlib.sha256(a.SerializeToString(deterministic=True)).hexdigest()
            for a in layer.node.attribute
        },
        "inputs": [
            None if v is None else [list(np.shape(v)), str(np.asarray(v).dtype)] for v in inputs
        ],
    }
    if fmt != LINEAR:
        identity["format"] = fmt
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return "0x" + digest[:32]


@dataclass
class KeyChoice:
    """One format combination of a layer: its key, the tactic its cache entry names (or
    timing chose) and that entry's time."""

    format: str
    key: str
    spec: kernels.KernelSpec
    time_ms: float
    source: str  # "timed" | "cache" | "default"
    candidates: list[kernels.KernelSpec] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """What the engine records per key (nothing that depends on cached vs timed)."""
        return {
            "format": self.format,
            "key": self.key,
            "kernel": self.spec.name,
            "tactic": f"0x{self.spec.tactic_hash:016x}",
            "time_ms": self.time_ms,
        }


@dataclass
class LayerChoice:
    """An autotuned layer's keys and the one it runs (``chosen``, an index into ``keys``)."""

    index: int
    name: str
    op: str
    keys: list[KeyChoice]
    chosen: int = 0

    @property
    def runs(self) -> KeyChoice:
        return self.keys[self.chosen]

    @property
    def key(self) -> str:
        return self.runs.key

    @property
    def spec(self) -> kernels.KernelSpec:
        return self.runs.spec

    @property
    def time_ms(self) -> float:
        return self.runs.time_ms

    @property
    def source(self) -> str:
        """ "timed" when any key was timed, "default" at level 0, else "cache"."""
        sources = {k.source for k in self.keys}
        return "timed" if "timed" in sources else self.runs.source

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "op": self.op,
            "key": self.key,
            "format": self.runs.format,
            "kernel": self.spec.name,
            "tactic": f"0x{self.spec.tactic_hash:016x}",
            "time_ms": self.time_ms,
            "source": self.source,
            "candidates": [c.name for c in self.runs.candidates],
            "keys": [k.to_dict() for k in self.keys],
        }


class _ConvOperands:
    """A float Conv's operands, made once per layer for the candidates of all its keys,
    with the time they took: added to the cost of each candidate that uses them (the
    im2col time only to im2col kernels), so kernels of both formats are compared on what
    a run of each costs in the engine.

    Each operand is made twice and the faster time kept: the first making in a process
    also loads the compiled copy loops (numba), up to seconds that no engine run pays,
    and charged to the im2col kernels alone it made the first Conv of a model choose the
    slower direct kernel."""

    def __init__(self, inputs: Sequence[Any], attrs: Any, clock: Callable[[], float]) -> None:
        self.inputs, self.attrs, self.clock = inputs, attrs, clock
        self.made: kernels.ConvOperands | None = None
        self.prep_ms = 0.0
        self.cols_ms: float | None = None

    def _fastest_of_two(self, make: Callable[[], Any]) -> tuple[Any, float]:
        """``make()`` twice: the second result (the same values) and the faster time."""
        times, made = [], None
        for _ in range(2):
            start = self.clock()
            made = make()
            times.append((self.clock() - start) * 1e3)
        return made, min(times)

    def get(self) -> kernels.ConvOperands:
        if self.made is None:
            make = lambda: kernels.conv_operands(self.inputs, self.attrs)  # noqa: E731
            self.made, self.prep_ms = self._fastest_of_two(make)
        return self.made

    def extra_ms(self, spec: kernels.KernelSpec) -> float:
        ops = self.get()
        if spec.scheme == "direct":
            return self.prep_ms
        if self.cols_ms is None:
            ops.cols, self.cols_ms = self._fastest_of_two(
                lambda: kernels.columns(ops.padded, ops.params)
            )
        return self.prep_ms + self.cols_ms


class LayerTuner:
    """Chooses every autotuned layer's tactics for one build (state shared by the layers)."""

    def __init__(
        self,
        settings: BuildSettings,
        cache: ReferenceTimingCache,
        log: BuildLog,
        fingerprints: tuple[str, str],
        knob: TimingKnob,
        stats: AutotuneStats,
        *,
        one_key_per_layer: bool = False,
    ) -> None:
        """``one_key_per_layer``: a schema-1 target's scheme, every format in one key."""
        self.settings, self.cache, self.log = settings, cache, log
        self.env_fp, self.settings_fp = fingerprints
        self.knob, self.stats = knob, stats
        self.one_key_per_layer = one_key_per_layer

    def candidates(
        self, layer: Layer, geo: kernels.Geometry
    ) -> list[tuple[str, list[kernels.KernelSpec]]]:
        """The layer's candidates per format, after the workspace and max-tactics limits."""
        if layer.fusion is not None:
            has_bias = len(layer.node.input) > 2 and bool(layer.node.input[2])
            specs = int8.candidates(layer.op, layer.fusion, has_bias)
        else:
            specs = kernels.candidates(geo)
        if self.settings.workspace is not None:
            fitting = [s for s in specs if geo.scratch_bytes(s) <= self.settings.workspace]
            for s in specs:
                if s not in fitting:
                    self.log.verbose(
                        f"{layer.name} Tactic: 0x{s.tactic_hash:x} skipped. Scratch requested: "
                        f"{geo.scratch_bytes(s)}, available: {self.settings.workspace}"
                    )
            if not fitting:
                need = min(geo.scratch_bytes(s) for s in specs)
                raise BuildError(
                    f"layer {layer.name!r}: no tactic fits the workspace limit of "
                    f"{self.settings.workspace} bytes (the smallest needs {need}): raise workspace"
                )
            specs = fitting
        specs = self._allowed(layer, specs)
        groups = [(LINEAR, list(specs))] if self.one_key_per_layer else by_format(specs)
        if self.settings.max_num_tactics is not None:
            groups = [(fmt, group[: self.settings.max_num_tactics]) for fmt, group in groups]
        return groups

    def _allowed(self, layer: Layer, specs: list[kernels.KernelSpec]) -> list[kernels.KernelSpec]:
        """The candidates no kernel rule denies (``reprobuild deny``): a denied one is never
        timed, so a recording cannot choose it; every one denied is a refusal naming the
        rule."""
        if not self.settings.deny:
            return specs
        check_candidates(self.settings, layer.name, specs)
        allowed = []
        for s in specs:
            rule = self.settings.denying(layer.name, s.name, s.tactic_hash)
            if rule is None:
                allowed.append(s)
            else:
                self.log.verbose(
                    f"{layer.name} Tactic: 0x{s.tactic_hash:x} skipped. Denied by the rule "
                    f"{rule.describe()}"
                )
        return allowed

    def tune(
        self, layer: Layer, inputs: list[Any], geo: kernels.Geometry
    ) -> tuple[LayerChoice, Any]:
        """The layer's keys and its output, computed by the kernel of the key it runs."""
        groups = self.candidates(layer, geo)
        keys = [layer_key(layer, inputs, self.env_fp, self.settings_fp, f) for f, _ in groups]
        if self.settings.optimization_level == 0:
            fmt, specs = groups[0]
            self.stats.kernel_runs += 1
            first = KeyChoice(fmt, keys[0], specs[0], 0.0, "default", specs)
            choice = LayerChoice(layer.index, layer.name, layer.op, [first])
            return choice, execute_spec(layer, specs[0], inputs)
        float_conv = layer.op == "Conv" and layer.fusion is None
        clock = CLOCKS[self.stats.policy.clock]
        conv = _ConvOperands(inputs, layer.attrs, clock) if float_conv else None
        results: list[KeyChoice] = []
        outputs: list[Any] = []  # each timed key's output (a float Conv has two keys)
        for (fmt, specs), key in zip(groups, keys, strict=True):
            cached = self.cache.query(key)
            if cached is not None:
                result, output = self._cached(layer, fmt, key, specs, cached), None
            else:
                result, output = self._timed(layer, fmt, key, specs, inputs, conv, clock)
            results.append(result)
            outputs.append(output)
        options = [KeyOption(k.key, k.time_ms, k.spec.name) for k in results]
        best = choose_key(options, self.settings.tie_band, self.settings.tie_rule)
        choice = LayerChoice(layer.index, layer.name, layer.op, results, best)
        best_output = outputs[best]
        if best_output is None:
            best_output = execute_spec(layer, choice.spec, inputs)
            self.stats.kernel_runs += 1
        self._log_choice(layer, inputs, choice, best_output)
        return choice, best_output

    def _cached(
        self,
        layer: Layer,
        fmt: str,
        key: str,
        specs: list[kernels.KernelSpec],
        cached: TimingValue,
    ) -> KeyChoice:
        spec = next((s for s in specs if s.tactic_hash == cached.tactic_hash), None)
        if spec is None:
            raise BuildError(
                f"layer {layer.name!r} (timing-cache key {key}): the cached tactic "
                f"0x{cached.tactic_hash:x} is not one of its candidates "
                f"({', '.join(f'{s.name}=0x{s.tactic_hash:x}' for s in specs)}): "
                "fix or remove the pinned tactic for this key"
            )
        return KeyChoice(fmt, key, spec, cached.time_ms, "cache", specs)

    def _timed(
        self,
        layer: Layer,
        fmt: str,
        key: str,
        specs: list[kernels.KernelSpec],
        inputs: list[Any],
        conv: _ConvOperands | None,
        clock: Callable[[], float],
    ) -> tuple[KeyChoice, Any]:
        measure = _measurer(layer, specs, inputs, conv, clock)
        names = [s.name for s in specs]
        band, rule = self.settings.tie_band, self.settings.tie_rule

        def cands(costs: list[float]) -> list[TieCandidate]:
            return [
                TieCandidate(s.tactic_hash, s.name, (c,)) for s, c in zip(specs, costs, strict=True)
            ]

        def settle(costs: list[float]) -> list[int]:
            return unsure(cands(costs), band, rule)

        def pick(costs: list[float]) -> int:
            d = decide(cands(costs), band, rule)
            assert d is not None  # every candidate ran at least once
            return next(i for i, s in enumerate(specs) if s.tactic_hash == d.chosen)

        def guard(costs: list[float]) -> list[int]:
            return ahead(cands(costs), band, rule)

        tuning = tune(
            len(specs),
            measure,
            self.stats.policy,
            lambda raw: self.knob.apply(key, names, raw),
            settle if band > 0 else None,
            pick if band > 0 else None,
            guard if band > 0 else None,
        )
        times = self.knob.runs(key, names, tuning.samples)
        self.stats.add_timed(layer.name, key, names, tuning, times)
        costs = tuning.costs
        order = sorted(range(len(specs)), key=lambda i: (costs[i], i))
        rows = [(i, costs[i], specs[i]) for i in order]
        for line in autotune_lines(layer.name, key, rows, (costs[tuning.best], specs[tuning.best])):
            self.log.verbose(line)
        best = tuning.best
        self.cache.record(key, specs[best].tactic_hash, costs[best])
        return KeyChoice(fmt, key, specs[best], costs[best], "timed", specs), tuning.output

    def _log_choice(
        self, layer: Layer, inputs: list[Any], choice: LayerChoice, output: Any
    ) -> None:
        """A cached-result line per key served from the cache (in the key's formats), and,
        for a layer with several keys, which one runs."""
        for k in choice.keys:
            if k.source != "cache":
                continue
            hwc = k.format == HWC
            formats = f"{tensor_format(inputs[0], hwc)} -> {tensor_format(output, hwc)}"
            self.log.verbose(
                f"{escape_name(layer.name)} [{formats}] got cached result: {k.spec.name}, "
                f"tactic 0x{k.spec.tactic_hash:x}, {k.time_ms:g} ms"
            )
        if len(choice.keys) > 1:
            runs = choice.runs
            others = "; ".join(
                f"{k.format} {k.time_ms:g} ms ({k.spec.name})" for k in choice.keys if k is not runs
            )
            self.log.verbose(
                f"{escape_name(layer.name)}: format combination {runs.format} runs "
                f"({runs.time_ms:g} ms, {runs.spec.name}); {others}"
            )


def _measurer(
    layer: Layer,
    specs: Sequence[kernels.KernelSpec],
    inputs: list[Any],
    conv: _ConvOperands | None,
    clock: Callable[[], float],
) -> Callable[[int], tuple[float, Any]]:
    """One timed run of candidate ``i`` on ``clock``: (ms, output). A float Conv's operands
    are shared by the candidates of all its keys (:class:`_ConvOperands`)."""
    if conv is None:

        def run_one(i: int) -> tuple[float, Any]:
            start = clock()
            out = execute_spec(layer, specs[i], inputs)
            return (clock() - start) * 1e3, out

        return run_one
    ops = conv.get()
    extra = [conv.extra_ms(s) for s in specs]

    def run_conv(i: int) -> tuple[float, Any]:
        start = clock()
        out = kernels.run_conv(specs[i], ops)
        return (clock() - start) * 1e3 + extra[i], out

    return run_conv
