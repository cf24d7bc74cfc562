"""What a build does with the lock it finds: which target it builds, whether that target
must be recorded first, and what a recording stores besides tactics.

A lock serves a fleet (:mod:`reprobuild.lock.targets`): a build uses this machine's target
when the lock has one, records it beside the others when not (``--frozen`` refuses, exit
3), and ``--re-record`` starts over after a model change while keeping the pins that still
apply.
"""

from __future__ import annotations

import math
from pathlib import Path

from reprobuild.backends.base import Backend
from reprobuild.errors import EnvironmentMismatch, UsageError
from reprobuild.lock.model import LayerEntry, Lock, ModelInfo, OutputDigest, by_layer
from reprobuild.lock.targets import describe_names, matching, no_target_message, select
from reprobuild.types import BuildSettings
from reprobuild.words import count
from reprobuild.workflow.context import check_backend, check_lock_matches


def check_existing(
    existing: Lock,
    lock_path: Path,
    info: ModelInfo,
    settings: BuildSettings,
    be: Backend,
    frozen: bool,
    warnings: list[str],
) -> tuple[Lock, bool]:
    """Refuse a lock for another model or settings (exit 2); the lock's view for this
    machine's target, and whether that target must be recorded: missing (recorded beside
    the others; ``--frozen`` refuses that with exit 3, naming the lock's targets) or without
    identity (recorded in its place, see :func:`_without_identity`)."""
    check_lock_matches(existing, lock_path, info, settings)
    here = be.environment()
    if matching(existing, here) is None:
        if frozen or not any(t.environment.backend == be.name for t in existing.targets()):
            check_backend(existing, lock_path, be)
            raise EnvironmentMismatch(
                no_target_message(existing, here, lock_path) + "; --frozen never adds one"
                if frozen
                else no_target_message(existing, here, lock_path)
            )
        warnings.append(
            f"no target for this machine ({here.name}) in {lock_path}: recording it beside "
            f"{describe_names(existing.target_names())}"
        )
        return existing, True
    chosen = select(existing, here, lock_path)
    if not chosen.lock.environment.identity:
        return _without_identity(chosen.lock, lock_path, here.name, frozen, warnings), True
    warnings += chosen.warnings
    return chosen.lock, False


def _without_identity(
    view: Lock, lock_path: Path, here: str, frozen: bool, warnings: list[str]
) -> Lock:
    """A section without identity (a schema-1 lock) would claim its tactics and bits for
    every machine: a build records this machine's target in its place (keeping its pins,
    as ``--re-record`` does); ``--frozen``, which never writes, refuses (exit 2)."""
    if frozen:
        raise UsageError(
            f"{lock_path}: the lock's target has no identity (a schema-1 lock), so it cannot "
            "say which machines its tactics and bits hold for; --frozen never rewrites the "
            "lock: build once without --frozen to record this machine's target (pins kept), "
            "then commit the lock"
        )
    warnings.append(
        f"{lock_path}: the target without identity (a schema-1 lock) is recorded anew as "
        f"this machine's target {here}, keeping its pins"
    )
    return view


def start_over(
    existing: Lock,
    info: ModelInfo,
    settings: BuildSettings | None,
    be: Backend,
    lock_path: Path,
    warnings: list[str],
) -> tuple[Lock, list[LayerEntry]]:
    """``--re-record``: the lock to record this machine's target into, and the old pins to
    carry. Other targets stay only while the model and settings are the lock's (they were
    recorded from them); else they are dropped, and said so."""
    here = be.environment()
    mine = matching(existing, here)
    pins = [e for e in mine.layers if e.pinned] if mine is not None else []
    same = (
        info.sha256 == existing.model.sha256
        and (settings or existing.settings) == existing.settings
    )
    gone = {here.name} | ({mine.name} if mine is not None else set())  # an old target too
    others = [t for t in existing.targets() if t.name not in gone]
    if others and not same:
        warnings.append(
            f"the model or settings changed: targets dropped from {lock_path}: "
            f"{describe_names([t.name for t in others])} (re-record them on their machines)"
        )
        others = []
    base = existing.select(others[0]) if others else existing
    base.others = others[1:] if others else []
    if not others:
        base.layers, base.outputs = [], []
        base.environment = here
    return base, pins


def expected_bits(be: Backend, engine: bytes, model_path: Path, seed: int = 0) -> OutputDigest:
    """What a recording stores for its target: the digest of the engine's outputs on the
    seeded inputs ``verify`` uses by default, so ``verify`` on any machine of the target
    can prove its bits equal the recording machine's."""
    from reprobuild.workflow.outputs import (
        inputs_label,
        load_inputs,
        output_hashes,
        outputs_digest,
    )

    feeds = load_inputs(None, model_path, seed).feeds
    digest = outputs_digest(output_hashes(be.run(engine, feeds)))
    return OutputDigest(inputs_label(None, seed), digest)


def carry_pins(old: list[LayerEntry], new: list[LayerEntry]) -> tuple[list[str], list[str]]:
    """``--re-record``: pin again, by layer name, every old pin whose layer still exists
    (one entry of that name, or the same key) and whose tactic is still one of its
    candidates. Returns (kept, dropped) layer names; a dropped one says why."""
    by_key = {e.key: e for e in new}
    by_name = by_layer(new)
    kept: list[str] = []
    dropped: list[str] = []
    for pin in (e for e in old if e.pinned):
        same = by_key.get(pin.key)
        named = by_name.get(pin.layer, [])
        holding = [e for e in named if e.candidate(pin.tactic) is not None]
        entry = same or (named[0] if len(named) == 1 else None)
        entry = entry or (holding[0] if len(holding) == 1 else None)  # one key has the tactic
        if entry is None:
            why = "no longer built" if not named else f"{len(named)} layers have that name now"
            dropped.append(f"{pin.layer} ({why})")
            continue
        cand = entry.candidate(pin.tactic)
        if cand is None:
            dropped.append(f"{pin.layer} (tactic 0x{pin.tactic:x} is no longer a candidate)")
            continue
        entry.tactic, entry.kernel, entry.pinned = pin.tactic, cand.kernel, True
        _run_pinned_key(entry, named)
        kept.append(pin.layer)
    return kept, dropped


def _run_pinned_key(entry: LayerEntry, layer_keys: list[LayerEntry]) -> None:
    """Make the layer run the key a pin was carried to.

    A layer with several keys (format combinations) runs the one whose time is lowest, so a
    pin carried to a slower key (a schema-1 lock's Conv pinned to ``direct``, now its own
    ``hwc`` key) would be written to a key the engine never runs. The pinned key's time
    becomes the largest time below the layer's other keys' (unchanged when already lowest;
    a 0 cannot be undercut, and equal times go to the earlier format); a locked build writes
    that time back, so every build of the lock runs the pinned key. The lock's record of
    the key the layer runs (``runs``) names the pinned key, so the build's key check holds
    it to that.
    """
    if len(layer_keys) > 1:
        for e in layer_keys:
            e.runs = e is entry
    others = [e.time_ms for e in layer_keys if e is not entry and e.time_ms is not None]
    if entry.time_ms is None or not others or entry.time_ms < min(others):
        return
    entry.time_ms = math.nextafter(min(others), 0.0)


def lock_keys_differ(cached: set[str], locked: set[str]) -> str | None:
    """Why a stored recording cache is recorded again for a locked build: None when its
    keys are the lock's. A cache holding every locked key and more is sound; the lock lacks
    entries (deleted by hand, or older than the model), and the new keys need a recording's
    log to be named, so the warning blames the lock, not the cache. "" otherwise (the
    cache lacks locked keys: foreign or stale)."""
    if cached == locked:
        return None
    if locked < cached:
        n = len(cached - locked)
        return (
            f"has {count(n, 'key')} the lock lacks (an entry deleted from the lock, or a lock "
            "older than the model)"
        )
    return ""
