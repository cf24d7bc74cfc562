"""Checks with power: does a tactic change reach the outputs at all?

``verify`` proves a lock by rebuilding and comparing output bits. That proof is empty when
no tactic could have changed those bits (a saturated softmax, an argmax head, constant
inputs): every lock, even one that pins nothing, would "reproduce". So verify also runs a
positive control: builds with one layer switched to another recorded candidate, the ones
most likely to show first (:mod:`.alternatives`), until the outputs change or the build
limit is reached (each build is exactly the lock with that one tactic switched: the lock's
recorded times and key choices written back, :func:`.pinned.switched`, so the figures are
the same in any folder, with or without a stored recording cache), and its verdict says
how many of the possible changes it tried; ``--sensitivity`` switches every layer
(reusing the control's builds), which maps the layers a lock really protects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.accuracy import output_error
from reprobuild.backends.base import Backend
from reprobuild.errors import ReprobuildError
from reprobuild.events import Progress, Step
from reprobuild.lock.model import LayerEntry, Lock
from reprobuild.pinning import idle_keys
from reprobuild.workflow.alternatives import difference, ranked_alternatives
from reprobuild.workflow.pinned import switched_build


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
    retry: str | None = None  # its strict build failed and was built again without the flag

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["locked"], d["tried"] = f"0x{self.locked:x}", f"0x{self.tried:x}"
        return d


DEFAULT_LIMIT_PER_LAYER = 2
"""Without ``--control-limit``, the control makes at most this many builds per layer that has
another candidate: each layer's most different candidate, then as many others again."""


@dataclass
class Control:
    """The positive control: the single-tactic changes tried until one reached the outputs
    (the last probe), or every change tried when none did."""

    power: bool
    probes: list[TacticProbe]
    layers: int  # layers with another recorded candidate to switch to
    possible: int = 0  # single-tactic changes the lock records (every other candidate)
    locked: int = 0  # layers in the lock
    limit: int | None = None  # the build limit that stopped the search, when one did

    @property
    def decisive(self) -> TacticProbe | None:
        return self.probes[-1] if self.power else None

    @property
    def nothing_locked(self) -> bool:
        """The lock has no layers: there is no tactic whose change the check could see."""
        return self.locked == 0

    def untested(self) -> list[TacticProbe]:
        """Changes whose build failed or did not run the switched tactic: they show
        nothing about the inputs."""
        return [p for p in self.probes if p.error is not None]

    @property
    def untestable(self) -> bool:
        """No change could be checked at all: no power found, and none shown missing."""
        return not self.power and bool(self.probes) and len(self.untested()) == len(self.probes)

    def tried(self) -> str:
        """What was tried, in the words every verdict uses."""
        n = len(self.untested())
        built = f"; {n} not built as switched" if n else ""
        return (
            f"{len(self.probes)} single-tactic changes tried (of {self.possible} possible{built})"
        )

    def message(self) -> str:
        p = self.decisive
        if p is not None:
            return (
                f"switching layer {p.layer!r} to {p.kernel or f'0x{p.tried:x}'} flips "
                f"{p.bits_flipped} of {p.bits_total} output bits (max abs {p.max_abs:.3g}): "
                f"the check has power ({len(self.probes)} of {self.possible} possible "
                "single-tactic changes tried)"
            )
        if self.nothing_locked:
            return "nothing is locked: the lock has no layers, so no tactic change can be checked"
        if not self.layers:
            return (
                "no layer has another recorded candidate (0 single-tactic changes possible): "
                "the check has no power"
            )
        if self.untestable:
            first = self.untested()[0]
            return (
                f"none of the {self.tried()} could be checked (layer {first.layer!r}: "
                f"{first.error}): the check's power is unknown, not a property of the inputs"
            )
        stopped = (
            f"; the limit of {self.limit} builds (--control-limit) stopped the search, raise "
            "it to try the rest"
            if self.limit is not None and len(self.probes) < self.possible
            else ""
        )
        return (
            f"none of the {self.tried()} changed the outputs on these inputs{stopped}: the "
            "inputs or outputs hide the kernels, so identical outputs prove nothing here; try "
            "other inputs (--inputs) or outputs (--outputs)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "power": self.power,
            "message": self.message(),
            "layers_switchable": self.layers,
            "changes_tried": len(self.probes),
            "changes_possible": self.possible,
            "nothing_locked": self.nothing_locked,
            "probes": [p.to_json() for p in self.probes],
        }


def alternative(entry: LayerEntry) -> tuple[int, str | None] | None:
    """The layer's candidate most likely to change the outputs (:mod:`.alternatives`), or
    None when the lock records no other."""
    ranked = ranked_alternatives(entry)
    return ranked[0] if ranked else None


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
    run: Any = None  # run(engine) -> outputs on every sample; default: backend.run(feeds)
    # every probe made, by (key, tactic): --sensitivity reuses the control's builds
    done: dict[tuple[str, int], TacticProbe] = field(default_factory=dict)

    def probe(self, entry: LayerEntry, tactic: int, kernel: str | None) -> TacticProbe:
        """Build with ``entry`` switched to ``tactic`` (everything else locked) and run;
        a change probed before is answered from :attr:`done` without building again."""
        if (entry.key, tactic) not in self.done:
            self.done[entry.key, tactic] = self._build_and_compare(entry, tactic, kernel)
        return self.done[entry.key, tactic]

    def _build_and_compare(self, entry: LayerEntry, tactic: int, kernel: str | None) -> TacticProbe:
        result = TacticProbe(entry.layer, entry.key, entry.tactic, tactic, kernel)
        try:
            pb = switched_build(
                self.backend,
                self.built_model,
                self.lock,
                {entry.key: tactic},
                self.cache_file,
                strict=False,
            )
            result.retry = pb.retry
            if pb.retry is not None and not pb.retry_accepted:  # a failure unless allowed
                result.error = pb.retry
                return result
            if pb.after.get(entry.key) != tactic:
                result.error = "the build did not use the switched tactic"
                return result
            if pb.problems:  # the cache holds the switch, the engine shows otherwise: an
                # edit the builder did not honour tests nothing (never "no change")
                result.error = f"the engine did not run the switched tactic: {pb.problems[0]}"
                return result
            if self.run is not None:
                outputs = self.run(pb.output.engine)
            else:
                outputs = self.backend.run(pb.output.engine, self.feeds)
        except ReprobuildError as err:  # e.g. TensorRT refuses the tactic for this layer
            result.error = str(err)
            return result
        except Exception as err:  # noqa: BLE001 - an exception of the bindings themselves:
            # a switched build is evidence, never the verdict; it is listed as not built
            result.error = f"{type(err).__name__}: {err}"
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


def _idle(ctx: ProbeContext) -> set[str]:
    """Keys the engine provably does not run (another format combination of a layer that
    runs one of its other keys, :func:`.pinning.idle_keys`): a tactic switched there cannot
    reach the outputs, so they come last."""
    return idle_keys(ctx.layer_info, ctx.lock.layers) if ctx.layer_info else set()


def positive_control(ctx: ProbeContext, limit: int | None = None) -> Control:
    """Single-tactic changes until one reaches the outputs, at most ``limit`` builds
    (default :data:`DEFAULT_LIMIT_PER_LAYER` per switchable layer).

    First every layer's most different candidate (:mod:`.alternatives`: another
    accumulation precision, another algorithm family), those most likely to show first;
    when none shows, every other recorded candidate, layer by layer."""
    idle = _idle(ctx)
    layers = [e for e in ctx.lock.layers if alternative(e) is not None]
    layers.sort(key=lambda e: e.key in idle)  # stable: lock order otherwise
    ranked = {e.key: ranked_alternatives(e) for e in layers}
    possible = sum(len(r) for r in ranked.values())
    budget = DEFAULT_LIMIT_PER_LAYER * len(layers) if limit is None else limit
    first = sorted(  # stable: the order above within one score
        layers, key=lambda e: (e.key in idle, -difference(e.kernel, ranked[e.key][0][1]))
    )
    plan = [(e, ranked[e.key][0]) for e in first]
    plan += [(e, alt) for e in layers for alt in ranked[e.key][1:]]
    probes: list[TacticProbe] = []
    for entry, (tactic, kernel) in plan[:budget]:
        ctx.progress(Step(f"control: layer {entry.layer!r} -> {kernel or f'0x{tactic:x}'}"))
        probes.append(ctx.probe(entry, tactic, kernel))
        if probes[-1].changed:
            return Control(True, probes, len(layers), possible, len(ctx.lock.layers))
    stopped = limit if limit is not None else budget
    return Control(False, probes, len(layers), possible, len(ctx.lock.layers), stopped)


def sensitivity(ctx: ProbeContext) -> list[TacticProbe]:
    """Every layer switched on its own: which layers the lock protects, and by how much.

    Per layer, a change the control already made is reused (one that reached the outputs
    when there is one); otherwise the layer's most different candidate is built."""
    probes = []
    layers = ctx.lock.layers
    for i, entry in enumerate(layers):
        alt = alternative(entry)
        if alt is None:
            continue
        made = [p for (key, _), p in ctx.done.items() if key == entry.key]
        if made:
            probes.append(next((p for p in made if p.changed), made[0]))
            continue
        ctx.progress(Step(f"sensitivity {i + 1}/{len(layers)}: layer {entry.layer!r}"))
        probes.append(ctx.probe(entry, *alt))
    return probes
