"""A recording build: every candidate timed, the tie rule applied, every choice an entry.

The engine a recording leaves (and the bits the lock expects) come from a build of the
serialized recording cache, as every later locked build is made, never from the recording
engine itself: NVIDIA compares replays with replays, and a recording engine is not shown to
give a replay's bits (``build.py`` reports when it does not).

Split from :mod:`.build` (which decides between recording and applying a lock) so each
module keeps one job: this one makes a fresh lock's entries from one recording.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprobuild.backends.base import Backend, BuildOutput
from reprobuild.errors import BuildError, DriftError
from reprobuild.events import Progress, Step
from reprobuild.lock.model import LayerEntry, Lock
from reprobuild.lock.rules import violations
from reprobuild.types import BuildSettings
from reprobuild.words import count
from reprobuild.workflow.existing import carry_pins
from reprobuild.workflow.pinned import (
    Recording,
    SavedLog,
    entries_from_records,
    mark_running,
    pinned_build,
    run_build,
    with_recorded_times,
)
from reprobuild.workflow.probe_store import edit_policy
from reprobuild.workflow.ties import (
    RecordingTimes,
    apply_to_entries,
    decide_recording,
    noise_warning,
)


@dataclass
class Built:
    """One build's product before anything is written."""

    lock: Lock
    output: BuildOutput
    records: list[Any]
    log_warnings: list[Any]
    cache_hits: int
    timed: int
    recorded: bool
    changes: list[str]
    cache_bytes: bytes | None = None  # a recording build's cache, written with the outputs
    ties: Any = None  # a recording's TieOutcome (workflow/ties.py)
    # a recording's own engine; ``output`` is a build from its serialized cache (a replay)
    recording_engine: bytes | None = None
    # keys the recording's replay timed that the recording had not made (locked from it)
    replay_added: list[str] | None = None


def record(
    be: Backend,
    built_model: Path,
    new_lock: Lock,
    cfile: Path,
    progress: Progress,
    warnings: list[str],
    save: SavedLog | None = None,
    apply_tie_rule: bool = False,
) -> Built:
    """A recording build: every candidate timed, every choice becomes a lock entry. Its
    timing cache is written with the other outputs, so a failed build leaves the old one."""
    n = new_lock.settings.tie_records
    of = f" 1 of {n}" if n > 1 else ""
    progress(Step(f"recording build{of} (timing every candidate)"))
    cache = be.create_timing_cache(b"")
    output, log = run_build(
        be, built_model, new_lock.settings, cache, progress, "recording", save=save
    )
    more = [_another(be, built_model, new_lock.settings, progress, i, n) for i in range(2, n + 1)]
    entries, w = entries_from_records(log.records, cache.tactic_map(), output.layer_info, log.known)
    warnings += w
    new_lock.layers = with_recorded_times(entries, cache)
    timed = sum(1 for r in log.records if r.key is not None and not r.from_cache)
    # the recording cache is kept as the builder wrote it: a locked build update()s every
    # key from the lock anyway, and the rebuild below works on a copy
    recorded = bytes(cache.serialize())
    ties = decide_recording(log.records, output.extra.get("autotune"), new_lock.settings, more)
    if (w := noise_warning(ties)) is not None:
        warnings.append(w)
    # Where edits of a tactic the builder did not choose are not proven honoured (TensorRT
    # without a stored probe answer for this target), the rule's choices are reported, not
    # written, unless the user opts in (probe_store.edit_policy: the one decision).
    policy = edit_policy(be, apply_tie_rule)
    builder = _choices(new_lock.layers)
    apply_to_entries(new_lock.layers, ties, policy)
    if not policy.write and ties.held_back:
        held = count(len(ties.held_back), "key")
        warnings.append(
            f"the tie rule would take another near-tie for {held}; the builder's choices are "
            f"kept: {policy.why} (the report's tie_break lists them; --apply-tie-rule writes "
            "them back)"
        )
    log_warnings = list(log.parser.warnings)

    def replay(rec: Recording | None = None, strict: bool = True) -> Any:
        """A build of the serialized recording cache, as every later locked build is (--log
        keeps the recording's log, which timed every candidate)."""
        return pinned_build(
            be, built_model, new_lock.settings, new_lock.tactic_map(), None, progress, warnings,
            entries=new_lock.layers, recording=rec or Recording(be.create_timing_cache(recorded)),
            strict=strict,
        )  # fmt: skip

    recording_engine: bytes | None = output.engine
    pb = None
    if ties.moved:  # the rule kept another near-tie than the builder: rebuild from the cache
        moved = count(len(ties.moved), "key takes", "keys take")
        why = f" ({len(ties.denied)} for a kernel rule)" if ties.denied else ""
        progress(Step(f"tie rule: {moved} the rule's tactic{why}; rebuilding"))
        try:
            pb = replay()
        except (BuildError, DriftError) as err:
            if ties.denied:  # the builder's choices there are denied: nothing to fall back to
                raise BuildError(
                    f"the rebuild that writes back the allowed tactics of "
                    f"{count(len(ties.denied), 'key')} a kernel rule denies the builder's "
                    f"choice of failed ({err}); narrow or remove the rule (`reprobuild undeny`)"
                ) from err
            _restore(new_lock.layers, builder)
            ties.fallback = str(err)
            ties.held_back, ties.moved = ties.held_back + ties.moved, []
            warnings.append(
                f"the tie rule's rebuild failed ({err}); the builder's choices are kept"
            )
        else:
            ties.rebuilt, ties.second_build_timed = True, pb.timed
            recording_engine = None  # it ran other tactics: no replay of it to compare
    settled: list[str] = []
    if pb is None:  # the engine (and the lock's bits) come from a replay, as later
        progress(Step("replaying the recording cache (the engine every locked build makes)"))
        rec = Recording(be.create_timing_cache(recorded))
        pb = replay(rec, strict=False)
        settled = _new_keys(cache.tactic_map(), pb)
        if not settled:
            pb.judge()
        else:  # the replay timed keys the recording had not made: lock them, replay again
            recorded = bytes(rec.cache.serialize())
            new_lock.layers = _with_keys(new_lock.layers, pb, rec.cache, settled, warnings)
            progress(Step(f"replaying again with {count(len(settled), 'key')} the replay added"))
            pb = replay()
            warnings.append(
                f"the replay of the recording timed {count(len(settled), 'key')} the recording "
                f"had not made ({', '.join(settled[:3])}{' ...' if len(settled) > 3 else ''}): "
                "TensorRT can time another set of format combinations from a cache; they are "
                "locked from the replay's cache, and a second replay from it matched the lock"
            )
    # the report's candidate times are the recording's: a replay measures only what it
    # has to (second_build_timed says how many keys)
    pb.output.extra = {**pb.output.extra, "autotune": output.extra.get("autotune")}
    output, log_warnings = pb.output, log_warnings + pb.log_warnings
    mark_running(new_lock.layers, output.layer_info)  # the key each layer runs
    if left := violations(new_lock.settings, new_lock.layers):  # never a denied choice
        raise BuildError(f"the recording kept a denied tactic: {left[0].describe()}")
    return Built(
        new_lock,
        output,
        log.records,
        log_warnings,
        0,
        timed + len(settled),
        True,
        [f"recorded {count(len(new_lock.layers), 'layer')}"],
        recorded,
        ties,
        recording_engine,
        settled,
    )


def _new_keys(recorded: dict[str, int], pb: Any) -> list[str]:
    """The keys a replay (``strict=False``) added to the recording's, where that is all it
    changed: every recorded key kept its tactic and the engine's kernels showed no problem
    (a strict build that failed on the missing keys is expected). Any other drift is left
    to :meth:`PinnedBuild.judge`."""
    added = sorted(set(pb.after) - set(recorded))
    kept = all(pb.after.get(k) == t for k, t in recorded.items())
    return added if added and kept and not pb.engine_problems else []


def _with_keys(
    entries: list[LayerEntry], pb: Any, cache: Any, keys: list[str], warnings: list[str]
) -> list[LayerEntry]:
    """The recording's entries and one for each key the replay added, named from the
    replay's log and engine, with the time its cache holds."""
    tactics = cache.tactic_map()
    added, w = entries_from_records(
        pb.records,
        {k: tactics[k] for k in keys},
        pb.output.layer_info,
        pb.output.extra.get("key_layers"),
    )
    warnings += w
    return sorted(entries + with_recorded_times(added, cache), key=lambda e: e.key)


Choices = dict[str, tuple[int, str | None, bool]]
"""Each key's tactic, kernel and pin as the recording builder left them."""


def _choices(entries: list[LayerEntry]) -> Choices:
    return {e.key: (e.tactic, e.kernel, e.pinned) for e in entries}


def _restore(entries: list[LayerEntry], choices: Choices) -> None:
    """Back to the builder's choices when an edit's rebuild failed: the recording's engine
    and cache hold exactly those, so the recording stands without the edit."""
    for e in entries:
        if e.key in choices:
            e.tactic, e.kernel, e.pinned = choices[e.key]


def _another(
    be: Backend, built_model: Path, settings: BuildSettings, progress: Progress, i: int, n: int
) -> RecordingTimes:
    """Recording ``i`` of ``n``: its own empty cache, its engine and cache thrown away; only
    its candidates' times are kept, for the tie rule (``build --records N``)."""
    progress(Step(f"recording build {i} of {n} (timing every candidate, its own empty cache)"))
    output, log = run_build(
        be, built_model, settings, be.create_timing_cache(b""), progress, "recording"
    )
    return log.records, output.extra.get("autotune")


def repin(
    done: Built,
    pins: list[LayerEntry],
    be: Backend,
    built_model: Path,
    settings: BuildSettings,
    cfile: Path,
    progress: Progress,
    warnings: list[str],
    save: SavedLog | None = None,
) -> Built:
    """``--re-record``: the old pins that still apply, built from the new recording's cache
    (so the engine runs the pinned tactics); the others are listed as dropped."""
    builder = _choices(done.lock.layers)
    denied = [v for v in violations(settings, pins) if v.entry.pinned]
    if denied:  # a rule outranks an old pin: the recording's allowed choice stays
        warnings.append("pins dropped by a kernel rule: " + "; ".join(v.describe() for v in denied))
        pins = [p for p in pins if settings.denying(p.layer, p.kernel, p.tactic) is None]
    kept, dropped = carry_pins(pins, done.lock.layers)
    if dropped:
        warnings.append(f"pins dropped by the re-recording: {', '.join(dropped)}")
    if not kept:
        return done
    assert done.cache_bytes is not None  # a recording build keeps its cache
    recording = Recording(be.create_timing_cache(done.cache_bytes))
    try:
        pb = pinned_build(
            be, built_model, settings, done.lock.tactic_map(), cfile, progress, warnings,
            entries=done.lock.layers, recording=recording, save=save,
        )  # fmt: skip
    except (BuildError, DriftError) as err:
        _restore(done.lock.layers, builder)
        warnings.append(
            f"the rebuild with the old pins failed ({err}); the builder's choices are kept "
            f"and the pins dropped: {', '.join(kept)}"
        )
        return done
    done.output, done.records, done.log_warnings = pb.output, pb.records, pb.log_warnings
    done.changes.append(f"kept {len(kept)} pins: {', '.join(kept)}")
    return done
