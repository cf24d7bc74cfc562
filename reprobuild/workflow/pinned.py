"""Running builds: a recording build that creates the keys, and a pinned build that obeys a
tactic map and proves it did.

Flow of a pinned build (the contract of TensorRT's editable timing cache):
  recording cache (from ``caches/`` or a fresh recording build) -> ``update()`` every locked
  key -> pinned build -> the cache's ``{key: tactic}`` and the engine's kernels must equal
  the lock. Only the backend interface is used, so the reference backend runs exactly the
  code path a TensorRT build takes.

Drift is decided by the cache map and the engine inspector only. Log lines add names and
candidates: a header TensorRT prints for a key it served from the cache never fails a build.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from reprobuild.backends.base import Backend, BuildOutput, TimingCache
from reprobuild.cachedir import get_or_record
from reprobuild.errors import BuildError, DriftError
from reprobuild.events import Progress, Step, quiet
from reprobuild.lock.model import LayerEntry, Lock, LockCandidate
from reprobuild.pinning import (
    cross_check_kernels,
    drift_message,
    key_choice_drift,
    recorded_key_times,
    running_keys,
    tactic_map_drift,
    update_tactics,
)
from reprobuild.types import BuildSettings
from reprobuild.words import count
from reprobuild.workflow.logcollect import LogCollector

_LACKS = "lacks keys of the lock"
_RETRY_HINT = " (--allow-cache-miss-retry accepts the retried build when its map matches)"


class SavedLog(Protocol):
    """Where ``build --log`` writes the raw lines (``transaction.StagedLines``)."""

    def __call__(self, line: str) -> None: ...

    def restart(self) -> None: ...


def run_build(
    backend: Backend,
    model_path: Path,
    settings: BuildSettings,
    cache: TimingCache,
    progress: Progress,
    what: str,
    *,
    pinned: bool = False,
    save: SavedLog | None = None,
) -> tuple[BuildOutput, LogCollector]:
    """One build with its log parsed as it comes. ``pinned`` tells the backend that every
    key must come from the cache (TensorRT: no compilation cache, a miss is an error).
    ``save`` receives the raw lines, started over: it keeps the last build's log."""
    if save is not None:
        save.restart()
    log = LogCollector(progress, what, save)
    if pinned:
        output = backend.build(str(model_path), settings, cache, log, pinned=True)
    else:
        output = backend.build(str(model_path), settings, cache, log)
    log.finish()
    log.layer_info = output.layer_info
    known = output.extra.get("key_layers")
    if known is not None:
        log.records = records_from_data(log.records, known)
        log.known = known
    return output, log


def records_from_data(records: list[Any], known: dict[str, Any]) -> list[Any]:
    """The log's records with each key's layer and candidates taken from the backend's own
    data (``key_layers``: key -> (layer, [(tactic hash, kernel)])); a record for a key the
    build did not make (a forged line) is dropped.

    Why: a node name can hold a newline or leading spaces, and a name carrying log lines
    could rename a layer or empty its candidates if names were parsed back from the log.
    """
    import dataclasses

    from reprobuild.logs.records import Candidate

    out: list[Any] = []
    for rec in records:
        if rec.key is None:  # a cached-result line (no key): counted, never named from
            out.append(rec)
            continue
        if rec.key not in known:
            continue  # no key of this build: not a line the builder meant
        layer, cands = known[rec.key]
        logged = {c.tactic_hash: c for c in rec.candidates}
        if rec.from_cache and not rec.candidates:
            keep = []  # a cached-result line names no candidates
        elif set(logged) == {h for h, _ in cands}:
            keep = rec.candidates  # as logged: sorted by cost, with the costs
        else:
            keep = [logged.get(h) or Candidate(None, h, kernel, None) for h, kernel in cands]
        out.append(dataclasses.replace(rec, layer=layer, onnx_layers=(layer,), candidates=keep))
    return out


def entries_from_records(
    records: list[Any],
    cache_map: dict[str, int],
    layer_info: str | None = None,
    known: dict[str, Any] | None = None,
) -> tuple[list[LayerEntry], list[str]]:
    """Lock entries for every key the recording build put in the cache.

    The log gives names and candidates; the cache is the authority on keys and choices.
    Keys no ``Autotuning op ...(key: K)`` line names (keyless Cask tables, reformats, a
    second format combination) are named by :func:`attribute_keyless` from what the log
    and the engine inspector do say.
    """
    from reprobuild.workflow.keyless import attribute_keyless

    warnings: list[str] = []
    by_key: dict[str, Any] = {}
    for rec in records:
        if rec.key is None:
            continue
        seen = by_key.get(rec.key)
        # A key's table can print twice (a second pass, or a one-row "got cached result"
        # table): the timed table with the most candidates names them, never the echo.
        if seen is None or _richer(rec, seen):
            by_key[rec.key] = rec
    unlogged = {k: t for k, t in cache_map.items() if k not in by_key}
    named = attribute_keyless(unlogged, records, layer_info)
    for key in named:  # the backend's own data, where it has some, settles every such key
        if known and key in known:
            layer, cands = known[key]
            locked = sorted({LockCandidate(h, k) for h, k in cands}, key=lambda c: c.tactic)
            kernel = next((c.kernel for c in locked if c.tactic == cache_map[key]), None)
            named[key] = LayerEntry(key, layer, cache_map[key], kernel, False, locked)
    entries = []
    for key, tactic in sorted(cache_map.items()):
        rec = by_key.get(key)
        if rec is None:
            entries.append(named[key])
            if named[key].kernel is None:
                warnings.append(
                    f"key {key} (tactic 0x{tactic:x}) is named by no log line or engine layer: "
                    f"locked as {named[key].layer!r}"
                )
            continue
        if rec.chosen is not None and rec.chosen != tactic:
            warnings.append(
                f"layer {rec.layer!r}: log says 0x{rec.chosen:x} but the cache holds 0x{tactic:x}"
            )
        cands = sorted(
            {LockCandidate(c.tactic_hash, c.kernel) for c in rec.candidates}, key=lambda c: c.tactic
        )
        kernel = next((c.kernel for c in cands if c.tactic == tactic), rec.chosen_kernel)
        entries.append(LayerEntry(key, rec.layer, tactic, kernel, False, cands))
    return entries, warnings


def _richer(new: Any, old: Any) -> bool:
    """Whether ``new`` names a key's candidates better than ``old``: timed beats cached,
    then more candidates win; a tie keeps the first."""
    if bool(new.from_cache) != bool(old.from_cache):
        return not new.from_cache
    return len(new.candidates) > len(old.candidates)


def with_recorded_times(entries: list[LayerEntry], cache: TimingCache) -> list[LayerEntry]:
    """Each entry with its key's time in ``cache`` (what the recording build measured),
    kept exactly in the lock so that a rebuild anywhere chooses between keys the same way."""
    for e in entries:
        value = cache.query(e.key)
        t = None if value is None else float(value.time_ms)
        e.time_ms = None if t is None or t != t else t  # NaN: no usable time recorded
    return entries


def switched(entries: list[LayerEntry], tactics: dict[str, int]) -> list[LayerEntry]:
    """The lock's entries with the named keys' tactics (and kernels) switched, everything
    else as recorded: the recorded times and key choices a build that claims to be "the
    lock with one change" writes back (the positive control, ``--sensitivity``,
    ``bisect``), so it never depends on a re-timed cache."""
    import dataclasses

    out = []
    for e in entries:
        if e.key in tactics and tactics[e.key] != e.tactic:
            t = tactics[e.key]
            kernel = next((c.kernel for c in e.candidates if c.tactic == t), None)
            e = dataclasses.replace(e, tactic=t, kernel=kernel)
        out.append(e)
    return out


def switched_build(
    backend: Backend,
    model_path: Path,
    lock: Lock,
    tactics: dict[str, int],
    cache_file: Path | None,
    *,
    strict: bool = True,
) -> PinnedBuild:
    """A pinned build of ``lock`` with the named keys switched to ``tactics`` (:func:`switched`:
    the lock's recorded times and key choices written back), quietly: the one way the
    positive control, ``bisect`` and the culprit search of ``verify`` build "the lock with
    these changes"."""
    entries = switched(lock.layers, tactics)
    return pinned_build(
        backend,
        model_path,
        lock.settings,
        {e.key: e.tactic for e in entries},
        cache_file,
        quiet,
        [],
        entries=entries,
        strict=strict,
    )


def mark_running(entries: list[LayerEntry], layer_info: str | None) -> list[LayerEntry]:
    """Each entry of a layer with several keys marked with whether the engine runs it
    (``runs``, :func:`reprobuild.pinning.running_keys`); the others left as they are."""
    running = running_keys(layer_info, entries)
    for e in entries:
        e.runs = running.get(e.key, e.runs)
    return entries


def log_layer_names(log: LogCollector | None) -> dict[str, str]:
    """Each key's layer as a recording build's log (or the backend's own data) names it."""
    if log is None:
        return {}
    names = {r.key: r.layer for r in log.records if r.key is not None}
    names.update({k: v[0] for k, v in (log.known or {}).items()})
    return names


def key_set_message(
    where: object,
    new: list[str],
    missing: list[str],
    names: dict[str, str],
    cache_file: Path | None,
) -> str:
    """The one line for a build whose timing-cache keys are not the lock's although the
    model, settings and target are: which keys are new and which are missing, and the fix.

    Why it is drift (exit 1), not a stale lock to rewrite: with the model and settings
    unchanged, the builder itself timed another set of layers or format combinations
    (TensorRT's choices follow noisy times). Rewriting the lock would drop its pins on the
    missing keys and lock whatever this build chose; the lock is only reproducible from the
    recording cache it was recorded with, whose keys are the lock's.
    """

    def listed(keys: list[str]) -> str:
        shown = [f"{k} ({names[k]})" if names.get(k) else k for k in keys[:3]]
        more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
        return ", ".join(shown) + more

    parts = [f"{count(len(missing), 'locked key')} missing: {listed(missing)}"]
    if new:
        parts.append(f"{count(len(new), 'new key')}: {listed(new)}")
    cache = f"the recording cache {cache_file}" if cache_file else "the recording cache"
    return (
        f"{where}: this build's timing-cache keys are not the lock's for the same model, "
        f"settings and target ({'; '.join(parts)}): the builder timed another set of layers "
        f"or formats; build with {cache} from the machine that recorded the lock (keep the "
        "cache folder with the lock), or re-record the lock here (build --re-record)"
    )


@dataclass
class Recording:
    """The recording cache a pinned build starts from, and the log of recording it (if now)."""

    cache: TimingCache
    log: LogCollector | None = None
    fresh: bytes | None = None  # a cache recorded now and not yet stored (``store=False``)

    @property
    def recorded_now(self) -> bool:
        return self.log is not None


def recording_cache(
    backend: Backend,
    model_path: Path,
    settings: BuildSettings,
    cache_file: Path | None,
    progress: Progress,
    warnings: list[str],
    *,
    reject: Any = None,
    store: bool = True,
) -> Recording:
    """The stored recording cache for this model, or a recording build that makes one
    (stored at once unless ``store`` is False: then ``Recording.fresh`` holds its bytes)."""
    logs: list[LogCollector] = []

    def record(cache: TimingCache) -> None:
        progress(Step("recording build (creates the timing-cache keys)"))
        logs.append(run_build(backend, model_path, settings, cache, progress, "recording")[1])

    cache, now = get_or_record(backend, cache_file, record, warnings, reject=reject, save=store)
    fresh = cache.serialize() if now and not store else None
    return Recording(cache, logs[0] if logs else None, fresh)


@dataclass
class PinnedBuild:
    """One build from a tactic map, with what the drift check saw."""

    output: BuildOutput
    after: dict[str, int]
    records: list[Any]
    log_warnings: list[Any]
    cache_hits: int
    timed: int
    recorded_now: bool
    problems: list[str] = field(default_factory=list)
    retry: str | None = None  # the strict build failed and was built again without the flag
    retry_accepted: bool = False  # --allow-cache-miss-retry: a warning, not a failure
    missed: list[str] = field(default_factory=list)  # keys the retry shows missed
    names: dict[str, str] = field(default_factory=dict)  # each locked key's layer
    engine_problems: int = 0  # of ``problems``, those the engine's kernels showed (the last)

    def judge(self) -> None:
        """Raise ``DriftError`` for any problem (a disallowed strict retry is one)."""
        retry, accepted, problems = self.retry, self.retry_accepted, self.problems
        if retry is not None and not accepted and not self.missed and len(problems) == 1:
            raise DriftError(
                "the strict build failed with ERROR_ON_TIMING_CACHE_MISS although the cache held "
                f"every locked key and the retried build matches the lock ({retry}): no tactic "
                "drifted; --allow-cache-miss-retry accepts such a build (with a warning), or "
                "attach the build's --log to a bug report"
            )
        if problems:
            hint = "" if retry is None else f" ({retry})" if accepted else _RETRY_HINT
            raise DriftError(drift_message(problems, self.names) + hint)


def missed_keys(before: dict[str, int], after: dict[str, int], records: list[Any]) -> list[str]:
    """The keys a pinned build's retry shows missed: added, removed or changed in the cache
    map, or timed by the retried build (structural, never TensorRT's wording)."""
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    timed = {r.key for r in records if r.key is not None and not r.from_cache}
    return sorted(changed | timed)


def strict_retry(extra: dict[str, Any], missed: list[str]) -> str | None:
    """What a pinned build's retry without ``ERROR_ON_TIMING_CACHE_MISS`` says, naming the
    keys that missed (:func:`missed_keys`)."""
    if not extra.get("retried_without_error_on_miss"):
        return None
    named = (
        f"keys {', '.join(missed)}" if missed else "no key (the cache map held every locked key)"
    )
    return (
        "the pinned build failed with ERROR_ON_TIMING_CACHE_MISS "
        f"({extra.get('strict_failure', 'no error was logged')}) and was built again without "
        f"it: missed {named}"
    )


def pinned_build(
    backend: Backend,
    model_path: Path,
    settings: BuildSettings,
    expected: dict[str, int],
    cache_file: Path | None,
    progress: Progress,
    warnings: list[str],
    *,
    entries: list[LayerEntry] | None = None,
    strict: bool = True,
    recording: Recording | None = None,
    save: SavedLog | None = None,
) -> PinnedBuild:
    """Build with every key of ``expected`` pinned; raise ``DriftError`` on any drift.

    With ``strict=False`` the drift problems are returned instead (``verify`` reports them
    per layer next to the outputs). ``recording`` is a recording cache the caller already
    has; by default it is read from ``cache_file`` or recorded. ``save`` receives the
    pinned build's raw log lines.
    """
    if recording is None:
        recording = recording_cache(
            backend,
            model_path,
            settings,
            cache_file,
            progress,
            warnings,
            reject=lambda c: None if set(expected) <= set(c.tactic_map()) else _LACKS,
        )
    cache = recording.cache
    progress(Step("applying pins"))
    recorded = cache.tactic_map()
    names = {e.key: e.layer for e in entries or []}
    times = {e.key: e.time_ms for e in entries or []}
    if getattr(backend, "key_rule", False):  # the builder's key choice follows the tie rule
        times = recorded_key_times(entries or [], expected, settings.tie_band, settings.tie_rule)
    missing = sorted(set(expected) - set(recorded))
    if missing:
        new = sorted(set(recorded) - set(expected))
        known = {**log_layer_names(recording.log), **names}
        raise DriftError(key_set_message("the lock", new, missing, known, cache_file))
    update_tactics(
        cache,
        [
            LayerEntry(k, names.get(k, "?"), t, time_ms=times.get(k))
            for k, t in sorted(expected.items())
        ],
    )
    before = {**recorded, **expected}
    progress(Step("pinned build"))
    try:
        output, log = run_build(
            backend, model_path, settings, cache, progress, "pinned build", pinned=True, save=save
        )
    except BuildError as err:  # a pin is blamed only when the lock has one
        pins = [e.layer for e in entries or [] if e.pinned]
        if not pins:
            raise
        raise BuildError(
            f"{err}; if a pinned tactic is named, unpin it or pin one of the layer's recorded "
            f"candidates (pinned: {', '.join(pins[:5])})"
        ) from None
    after = cache.tactic_map()
    missed = missed_keys(before, after, log.records)
    retry = strict_retry(output.extra, missed)
    accepted = bool(output.extra.get("retry_accepted"))
    if retry is not None and accepted:
        warnings.append(retry)  # --allow-cache-miss-retry: accepted, never silent
    problems = tactic_map_drift(before, after)
    if retry is not None and not accepted:  # first: it is why the build failed
        problems.insert(0, f"{retry}; a failed strict build is a failure unless allowed")
    # Informational only: a header for a locked key may just be TensorRT announcing a hit.
    timed = [r for r in log.records if r.key is not None and not r.from_cache]
    engine_problems: list[str] = []
    if entries:
        kernels = cross_check_kernels(output.layer_info, entries)
        engine_problems = kernels.problems + key_choice_drift(output.layer_info, entries)
        warnings += [w for w in kernels.warnings if w not in warnings]
    problems += engine_problems
    hits = sum(1 for r in log.records if r.from_cache)
    built = PinnedBuild(
        output,
        after,
        log.records,
        list(log.parser.warnings),
        hits,
        len(timed),
        recording.recorded_now,
        problems,
        retry,
        accepted,
        missed,
        names,
        len(engine_problems),
    )
    if strict:
        built.judge()
    return built
