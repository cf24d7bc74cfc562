"""Determinism beyond rebuilds: the same bits run after run, and at every batch size.

Rebuilt engines that agree when each is run once can still give other bits on the next run
(kernels that reduce with atomics) or for a sample inside another batch (kernels whose
split or tile follows the batch size). ``verify --runs N`` runs each rebuilt engine N times
on the same inputs; ``verify --batch-invariance`` runs each sample of a batch alone and
compares its outputs with its rows inside the batch. Both compare bits, never tolerances.

When a check fails, the layers responsible are found by switching tactics, never by
marking extra outputs (which changes a TensorRT engine): group testing as ``bisect`` does
(:func:`.bisect.group_test`), where a group "still fails" when only its layers keep the
lock's tactics and every other layer with another recorded candidate runs its steadiest
one (the first in the tie rule's order, which ranks run-to-run and batch-dependent kernels
last). Each culprit comes with the ``deny`` line that keeps recording away from its kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.errors import ReprobuildError
from reprobuild.events import Step
from reprobuild.lock.model import LayerEntry
from reprobuild.lock.rules import deny_command
from reprobuild.tiebreak import TieCandidate, rule_key
from reprobuild.types import BuildSettings
from reprobuild.workflow.bisect import group_test
from reprobuild.workflow.control import ProbeContext, bit_difference
from reprobuild.workflow.pinned import switched_build

SEEDED_BATCH = 4
"""Samples in the seeded batch of a model with a dynamic batch (its seeded inputs have 1)."""

Outputs = dict[str, Any]
Run = Callable[[Any], Outputs]  # engine -> outputs on the check's inputs


@dataclass
class Moved:
    """One output whose bits moved: in a later run of one engine, or for one sample."""

    output: str
    bits_flipped: int
    bits_total: int
    build: int | None = None  # run check: the rebuild (1-based) and its run that moved
    run: int | None = None
    sample: int | None = None  # batch check: the sample (0-based) alone vs in the batch

    def where(self) -> str:
        if self.sample is not None:
            return f"sample {self.sample}"
        return f"build {self.build} run {self.run}" if self.build else f"run {self.run}"


@dataclass
class Culprits:
    """The layers whose tactics make a check fail, found by switching (module docstring)."""

    layers: list[dict[str, Any]]
    builds: int
    message: str
    steps: list[str] = field(default_factory=list)

    def fixes(self) -> list[str]:
        return list(dict.fromkeys(c["fix"] for c in self.layers))


@dataclass
class RunCheck:
    """``--runs``: each rebuilt engine run ``runs`` times on the same inputs."""

    runs: int
    engines: int
    moved: list[Moved] = field(default_factory=list)
    culprits: Culprits | None = None

    @property
    def deterministic(self) -> bool:
        return not self.moved

    def to_json(self) -> dict[str, Any]:
        return _json(self, deterministic=self.deterministic)


@dataclass
class BatchCheck:
    """``--batch-invariance``: each sample alone against its rows inside the full batch."""

    batch: int | None  # samples in the full batch; None: not checked (see ``reason``)
    reason: str = ""  # why it was not checked, or what could not be compared
    sizes: list[int] = field(default_factory=list)  # the batch sizes run
    moved: list[Moved] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)  # outputs without the batch axis
    # the full batch run twice gave other bits: not decidable, and not deterministic
    unsteady: list[Moved] = field(default_factory=list)
    culprits: Culprits | None = None

    @property
    def invariant(self) -> bool | None:
        return None if self.batch is None else not (self.moved or self.unsteady)

    def to_json(self) -> dict[str, Any]:
        return _json(self, invariant=self.invariant)


def _json(check: Any, **extra: Any) -> dict[str, Any]:
    d = dict(check.__dict__)
    d["moved"] = [dict(m.__dict__) for m in check.moved]
    if "unsteady" in d:
        d["unsteady"] = [dict(m.__dict__) for m in check.unsteady]
    d["culprits"] = None if check.culprits is None else dict(check.culprits.__dict__)
    return {**d, **extra}


def moved_outputs(first: Outputs, again: Outputs, **where: int) -> list[Moved]:
    """Each output of ``again`` whose bits differ from ``first``'s."""
    out = []
    for name in sorted(first):
        flipped, total, _ = bit_difference({name: first[name]}, {name: again.get(name)})
        if flipped:
            out.append(Moved(name, flipped, total, **where))
    return out


def repeat_runs(run: Run, engine: Any, first: Outputs, runs: int, build: int) -> list[Moved]:
    """Runs 2..``runs`` of ``engine`` compared with its first run's ``first``."""
    moved: list[Moved] = []
    for r in range(2, runs + 1):
        moved += moved_outputs(first, run(engine), build=build, run=r)
    return moved


def batch_inputs(
    feeds: Outputs, count: int | None, batch: int | None, proto: Any, settings: Any, seed: int
) -> tuple[Outputs | None, str]:
    """The full batch the check runs (``None`` and why when the model has none).

    Samples along the first axis of an inputs file: the first batch the engine runs; the
    model's own shape with a first dimension above 1: those samples; a dynamic first
    dimension fed one sample (seeded inputs): :data:`SEEDED_BATCH` seeded samples, at
    most the profile's maximum."""
    from reprobuild.precision.analysis import fixed_batch, real_inputs
    from reprobuild.precision.calibration import seeded_feeds

    inputs = real_inputs(proto)
    if not inputs:
        return None, "the model has no inputs"
    if count is not None:
        size = min(count, batch or count)
        feeds = {n: v[:size] for n, v in feeds.items()}
    fixed = fixed_batch(proto)
    first = feeds[inputs[0].name]
    size = first.shape[0] if getattr(first, "ndim", 0) else 1
    if size == 1 and fixed is None:
        limit = next(
            (mx[0] for n, _mn, _opt, mx in settings.input_shapes if n == inputs[0].name and mx),
            SEEDED_BATCH,
        )
        size = min(SEEDED_BATCH, limit)
        feeds = seeded_feeds(inputs, seed, samples=size)
    if size < 2:
        what = f"input {inputs[0].name!r} has a fixed batch of 1" if fixed == 1 else "one sample"
        return None, f"the model has no batch dimension to vary ({what})"
    short = [n for n, v in feeds.items() if getattr(v, "ndim", 0) == 0 or v.shape[0] != size]
    if short:
        return None, f"input {short[0]!r} has no batch axis of {size} samples"
    return feeds, ""


def check_batch(run: Callable[[Outputs], Outputs], feeds: Outputs) -> BatchCheck:
    """Each sample of ``feeds`` run alone (batch 1) against its rows in the full batch.

    The full batch runs twice first: an engine whose bits change from run to run would
    make any sample look batch-dependent, so then nothing is compared (``unsteady``)."""
    size = next(iter(feeds.values())).shape[0]
    check = BatchCheck(size, sizes=[1, size])
    full = run(feeds)
    check.unsteady = moved_outputs(full, run(feeds), run=2)
    if check.unsteady:
        return check
    for i in range(size):
        try:
            alone = run({n: v[i : i + 1] for n, v in feeds.items()})
        except ReprobuildError as err:
            return BatchCheck(
                None, f"the engine refused a single sample ({err}); build it with a dynamic batch"
            )
        for name in sorted(full):
            rows, one = full[name], alone.get(name)
            if getattr(rows, "ndim", 0) == 0 or rows.shape[0] != size or one is None:
                if name not in check.not_compared:
                    check.not_compared.append(name)
                continue
            check.moved += moved_outputs({name: rows[i : i + 1]}, {name: one}, sample=i)
    return check


def steadiest(entry: LayerEntry, settings: BuildSettings) -> tuple[int, str | None] | None:
    """The layer's other recorded candidate that comes first in the tie rule's order and
    that no kernel rule denies (None: the lock records no such other)."""
    others = [
        c for c in settings.allowed(entry.layer, entry.candidates) if c.tactic != entry.tactic
    ]
    if not others:
        return None
    rule = settings.tie_rule
    best = min(others, key=lambda c: rule_key(TieCandidate(c.tactic, c.kernel, ()), rule))
    return best.tactic, best.kernel


def find_culprits(
    ctx: ProbeContext, fails: Callable[[Any], bool], lock_path: str | Path, what: str
) -> Culprits:
    """The layers whose locked tactics make ``fails(engine)`` true (module docstring)."""
    alts = {
        e.key: alt
        for e in ctx.lock.layers
        if e.runs is not False and (alt := steadiest(e, ctx.lock.settings)) is not None
    }
    keys = [e.key for e in ctx.lock.layers if e.key in alts]
    entries = {e.key: e for e in ctx.lock.layers}
    memo: dict[frozenset[str], bool] = {}

    def still_fails(kept: list[str]) -> bool:
        frozen = frozenset(kept)
        if frozen not in memo:
            ctx.progress(Step(f"{what}: build {len(memo) + 1}, {len(kept)} layers as locked"))
            tactics = {k: alts[k][0] for k in keys if k not in frozen}
            pb = switched_build(
                ctx.backend, ctx.built_model, ctx.lock, tactics, ctx.cache_file, strict=False
            )
            memo[frozen] = fails(pb.output.engine)
        return memo[frozen]

    if not keys:
        return Culprits([], 0, "no layer has another recorded candidate to switch to")
    steps: list[str] = []
    try:
        if still_fails([]):
            return Culprits(
                [],
                len(memo),
                "it still fails with every layer that has another candidate switched to it: "
                "the cause is in a layer without one, or outside the tactics",
            )
        found = group_test(keys, still_fails, False, steps)
    except ReprobuildError as err:
        return Culprits([], len(memo), f"the search stopped: {err}", steps)
    layers = [
        {
            "layer": entries[k].layer,
            "key": k,
            "kernel": entries[k].kernel,
            "tactic": f"0x{entries[k].tactic:x}",
            "switched_to": alts[k][1] or f"0x{alts[k][0]:x}",
            "group": group,
            "alone": len(group_keys) == 1,
            "fix": deny_command(
                lock_path, entries[k].kernel or f"0x{entries[k].tactic:x}", entries[k].layer
            ),
        }
        for group, group_keys in enumerate(found)
        for k in group_keys
    ]
    names = ", ".join(dict.fromkeys(c["layer"] for c in layers))
    return Culprits(layers, len(memo), f"switching these layers' tactics fixes it: {names}", steps)
