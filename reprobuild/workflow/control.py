"""Checks with power: does a tactic change reach the outputs at all?

``verify`` proves a lock by rebuilding and comparing output bits. That proof is empty when
no tactic could have changed those bits (a saturated softmax, an argmax head, constant
inputs): every lock, even one that pins nothing, would "reproduce". So verify also runs a
positive control, one build with one layer switched to another recorded candidate, and
reports whether the outputs changed; ``--sensitivity`` does that for every layer, which maps
the layers a lock really protects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.accuracy import output_error
from reprobuild.backends.base import Backend
from reprobuild.errors import ReprobuildError
from reprobuild.events import Progress, Step, quiet
from reprobuild.lock.model import LayerEntry, Lock
from reprobuild.pinning import idle_keys
from reprobuild.workflow.pinned import pinned_build


@dataclass
class TacticProbe:
    """One build with one layer's tactic switched, and what that did to the outputs."""

    layer: str
    key: str
    locked: int
    tried: int
    kernel: str | None
    changed: bool = False
    bits_flipped: int = 0
    bits_total: int = 0
    max_abs: float = 0.0
    outputs_changed: list[str] = field(default_factory=list)
    error: str | None = None  # the build refused the tactic, or did not use it

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["locked"], d["tried"] = f"0x{self.locked:x}", f"0x{self.tried:x}"
        return d


@dataclass
class Control:
    """The positive control: the first single-tactic change (in lock order) that reaches
    the outputs, or every change tried when none did."""

    power: bool
    probes: list[TacticProbe]
    layers: int  # layers with another recorded candidate to switch to

    @property
    def decisive(self) -> TacticProbe | None:
        return self.probes[-1] if self.power else None

    def message(self) -> str:
        p = self.decisive
        if p is not None:
            return (
                f"switching layer {p.layer!r} to {p.kernel or f'0x{p.tried:x}'} flips "
                f"{p.bits_flipped} of {p.bits_total} output bits (max abs {p.max_abs:.3g}): "
                "the check has power"
            )
        if not self.layers:
            return "no layer has another recorded candidate: the check has no power"
        return (
            f"none of the {len(self.probes)} single-tactic changes tried changed the outputs on "
            "these inputs: the inputs or outputs hide the kernels, so identical outputs prove "
            "nothing here; try other inputs (--inputs) or outputs"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "power": self.power,
            "message": self.message(),
            "layers_switchable": self.layers,
            "probes": [p.to_json() for p in self.probes],
        }


def alternative(entry: LayerEntry) -> tuple[int, str | None] | None:
    """Another recorded candidate of the layer (the first in the lock's order), or None."""
    for cand in entry.candidates:
        if cand.tactic != entry.tactic:
            return cand.tactic, cand.kernel
    return None


def bit_difference(a: dict[str, Any], b: dict[str, Any]) -> tuple[int, int, list[str]]:
    """Bits that differ between two runs' outputs, all output bits, and the outputs that
    differ. Outputs of another dtype or shape count as entirely different."""
    import numpy as np

    flipped = total = 0
    changed: list[str] = []
    for name in sorted(a):
        x = np.ascontiguousarray(a[name])
        y = np.ascontiguousarray(b.get(name, np.empty(0, x.dtype)))
        total += x.nbytes * 8
        if x.dtype != y.dtype or x.shape != y.shape:
            flipped += x.nbytes * 8
            changed.append(name)
            continue
        n = int(np.unpackbits(np.bitwise_xor(x.view(np.uint8), y.view(np.uint8))).sum())
        if n:
            flipped += n
            changed.append(name)
    return flipped, total, changed


@dataclass
class ProbeContext:
    """What every probe build shares: the model as built, the lock, the cache, the inputs
    and the locked build's outputs to compare with."""

    backend: Backend
    built_model: Path
    lock: Lock
    cache_file: Path | None
    feeds: dict[str, Any]
    reference: dict[str, Any]
    progress: Progress
    layer_info: str | None = None  # the locked build's engine inspector JSON, when known

    def probe(self, entry: LayerEntry, tactic: int, kernel: str | None) -> TacticProbe:
        """Build with ``entry`` switched to ``tactic`` (everything else locked) and run."""
        result = TacticProbe(entry.layer, entry.key, entry.tactic, tactic, kernel)
        tactics = {**self.lock.tactic_map(), entry.key: tactic}
        try:
            pb = pinned_build(
                self.backend,
                self.built_model,
                self.lock.settings,
                tactics,
                self.cache_file,
                quiet,
                [],
                strict=False,
            )
            if pb.after.get(entry.key) != tactic:
                result.error = "the build did not use the switched tactic"
                return result
            outputs = self.backend.run(pb.output.engine, self.feeds)
        except ReprobuildError as err:  # e.g. TensorRT refuses the tactic for this layer
            result.error = str(err)
            return result
        result.bits_flipped, result.bits_total, result.outputs_changed = bit_difference(
            self.reference, outputs
        )
        result.changed = bool(result.outputs_changed)
        for name in result.outputs_changed:
            try:
                err_abs = output_error(outputs[name], self.reference[name])[0]
            except (KeyError, ValueError):
                err_abs = float("inf")
            result.max_abs = max(result.max_abs, err_abs)
        return result


def positive_control(ctx: ProbeContext, limit: int | None = None) -> Control:
    """Switch one layer at a time, in lock order, until the outputs change (or ``limit``
    layers were tried). Keys the engine provably does not run (another format combination
    of a layer that runs one of its other keys, :func:`.pinning.idle_keys`) come last: a
    tactic switched there cannot reach the outputs."""
    switchable = [(e, alt) for e in ctx.lock.layers if (alt := alternative(e)) is not None]
    if ctx.layer_info:
        idle = idle_keys(ctx.layer_info, ctx.lock.layers)
        switchable.sort(key=lambda pair: pair[0].key in idle)  # stable: lock order otherwise
    probes: list[TacticProbe] = []
    for entry, (tactic, kernel) in switchable[:limit]:
        ctx.progress(Step(f"control: layer {entry.layer!r} -> {kernel or f'0x{tactic:x}'}"))
        probes.append(ctx.probe(entry, tactic, kernel))
        if probes[-1].changed:
            return Control(True, probes, len(switchable))
    return Control(False, probes, len(switchable))


def sensitivity(ctx: ProbeContext) -> list[TacticProbe]:
    """Every layer switched on its own: which layers the lock protects, and by how much."""
    probes = []
    layers = ctx.lock.layers
    for i, entry in enumerate(layers):
        alt = alternative(entry)
        if alt is None:
            continue
        ctx.progress(Step(f"sensitivity {i + 1}/{len(layers)}: layer {entry.layer!r}"))
        probes.append(ctx.probe(entry, *alt))
    return probes
