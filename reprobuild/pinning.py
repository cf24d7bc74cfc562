"""Applying a lock to a timing cache and checking that the build obeyed it.

Backend-neutral: both backends go through these, since they work on the ``TimingCache``
contract and on engine-inspector JSON only. The order that makes pins stick (TensorRT's
editable timing cache only updates keys that exist):

1. a recording build, or a cached recording cache, creates every key;
2. :func:`update_tactics` calls ``update(key, tactic, time)`` for each entry; a ``False`` is a
   ``BuildError`` naming the layer and key;
3. snapshot ``tactic_map()``, run the pinned build, snapshot again, and
   :func:`tactic_map_drift` / :func:`check_no_drift` fail on any added, removed or
   changed key (``ERROR_ON_TIMING_CACHE_MISS`` alone has missed misses);
4. :func:`cross_check_kernels` compares the engine inspector's ``TacticValue``/``TacticName``
   per layer with the lock: a layer that shows *another recorded candidate* of its own is
   drift; a layer that cannot be matched reliably (Myelin, sanitised, fused or split names,
   a kernel that is none of the layer's candidates) is a warning naming the layer.

Log lines never decide drift: whether TensorRT prints an ``Autotuning op`` header for a key
it served from the cache is not documented, so only the cache map and the inspector do.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from reprobuild.backends.base import TimingCache
from reprobuild.errors import BuildError, DriftError
from reprobuild.lock.model import by_layer


class _Candidate(Protocol):
    tactic: int
    kernel: str | None


class _Entry(Protocol):
    """The lockfile's ``LayerEntry`` fields these helpers read (and ``time_ms`` where the
    entry has one)."""

    key: str
    layer: str
    tactic: int
    kernel: str | None
    pinned: bool
    candidates: Sequence[_Candidate]


@dataclass(frozen=True)
class PinResult:
    key: str
    layer: str
    tactic: int
    previous: int
    updated: bool = True  # False: the cache already held exactly what the lock says


def update_tactics(
    cache: TimingCache, entries: Iterable[_Entry], *, pinned_only: bool = False
) -> list[PinResult]:
    """``update()`` every (pinned) entry (the name mirrors ``ITimingCache.update``; editing
    the lock's pins is ``lock.edit.apply_pins``); any False return raises ``BuildError``.

    Every key is written, also one the lock does not change: that one gets exactly the
    value the cache holds (``update(key, query(key))``), as NVIDIA's qualified replay flow
    (TensorRT-Model-Connect) writes every key before its ``ERROR_ON_TIMING_CACHE_MISS``
    build, so a locked build differs from that flow only by the edits a lock makes.
    ``PinResult.updated`` says whether the value changed. The time written is
    the entry's recorded time (``time_ms``, exact, from the lock): a builder chooses between
    the several keys of one layer by their cached times, so writing the recorded ones back
    makes a rebuild on any machine of the target choose as the recording did. Without a
    usable recorded time (a schema-1 lock; ``inf`` for a key whose tactics all failed)
    the cache's current time is kept when finite, and a non-finite one becomes
    :data:`FAILED_TIME_MS`, never a cheap time that could win a format choice. Nothing
    non-finite is written: a NaN deletes the entry, and although NvInfer.h lists only
    negative and NaN timings as invalid, whether ``update()`` takes ``inf`` is not shown,
    while a finite time relies on nothing undocumented.
    """
    results: list[PinResult] = []
    for entry in entries:
        if pinned_only and not entry.pinned:
            continue
        current = cache.query(entry.key)
        recorded = getattr(entry, "time_ms", None)
        usable = recorded is not None and math.isfinite(recorded) and recorded >= 0
        previous = current.tactic_hash if current is not None else -1
        if (
            current is not None
            and int(current.tactic_hash) == int(entry.tactic)
            and (not usable or float(current.time_ms) == float(recorded))
        ):
            _write_back(cache, entry, current)
            results.append(PinResult(entry.key, entry.layer, entry.tactic, previous, False))
            continue
        if usable:
            time_ms = float(recorded)
        else:
            time_ms = finite_time(current.time_ms if current is not None else None)
        if not cache.update(entry.key, entry.tactic, time_ms):
            if current is None:
                why = (
                    "the key is not in the recording timing cache: the model, a setting, the "
                    "TensorRT version or the GPU changed since the lock was recorded; "
                    "re-record the lock on this machine"
                )
            else:
                why = (
                    "the timing cache rejected the value as invalid; check the tactic hash "
                    "in the lock against the layer's recorded candidates"
                )
            raise BuildError(
                f"layer {entry.layer!r} (key {entry.key}): cannot pin tactic "
                f"0x{entry.tactic:x}: {why}"
            )
        results.append(PinResult(entry.key, entry.layer, entry.tactic, previous, True))
    return results


def _write_back(cache: TimingCache, entry: _Entry, current: Any) -> None:
    """``update(key, query(key))`` for a key the lock does not change. A refusal changes
    nothing (the cache still holds that very value), so it never stops a build; a
    non-finite time (every tactic failed) is left as the builder wrote it."""
    if math.isfinite(float(current.time_ms)):
        cache.update(entry.key, int(current.tactic_hash), float(current.time_ms))


FAILED_TIME_MS = 3.4028234663852886e38
"""Written for a key whose cached time is not finite (every tactic failed: ``inf``) or
missing: the largest float32, finite (a time ``update()`` is documented to take), the most expensive
time there is, so a pinned failed entry can never undercut a real cost when the builder
chooses between a layer's keys by their cached times."""


def finite_time(time_ms: float | None) -> float:
    """A timing ``update()`` accepts: the given one when finite and >= 0, else
    :data:`FAILED_TIME_MS` (expensive, never cheap)."""
    if time_ms is None or not math.isfinite(time_ms) or time_ms < 0:
        return FAILED_TIME_MS
    return float(time_ms)


def tactic_map_drift(before: Mapping[str, int], after: Mapping[str, int]) -> list[str]:
    """Every added, removed or changed key between two ``tactic_map()`` snapshots."""
    problems: list[str] = []
    for key in sorted(set(after) - set(before)):
        problems.append(
            f"key {key} was added by the build (tactic 0x{after[key]:x}): a timing-cache miss"
        )
    for key in sorted(set(before) - set(after)):
        problems.append(f"key {key} (tactic 0x{before[key]:x}) disappeared from the cache")
    for key in sorted(set(before) & set(after)):
        if int(before[key]) != int(after[key]):
            problems.append(f"key {key} changed from tactic 0x{before[key]:x} to 0x{after[key]:x}")
    return problems


def check_no_drift(
    before: Mapping[str, int], after: Mapping[str, int], *, names: Mapping[str, str] | None = None
) -> None:
    """Raise ``DriftError`` (exit 1) when the pinned build changed the cache at all."""
    problems = tactic_map_drift(before, after)
    if not problems:
        return
    if names:
        problems = [name_keys(p, names) for p in problems]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    raise DriftError(
        f"the pinned build did not use the locked timing cache: {problems[0]}{more}; "
        "the lock no longer matches this model/settings/environment: re-record it"
    )


def name_keys(problem: str, names: Mapping[str, str]) -> str:
    """Add the layer name after every ``key 0x...`` a drift message mentions."""
    return re.sub(
        r"key (0x[0-9a-f]{32})",
        lambda m: (
            f"key {m.group(1)} (layer {names[m.group(1)]!r})" if m.group(1) in names else m.group(0)
        ),
        problem,
    )


def drift_message(problems: list[str], names: Mapping[str, str]) -> str:
    """The one-line ``DriftError`` text: the first five problems, with layer names."""
    shown = [name_keys(p, names) for p in problems[:5]]
    more = f"; ... {len(problems) - 5} more" if len(problems) > 5 else ""
    return f"drift: the build does not match the lock: {'; '.join(shown)}{more}"


# ------------------------------------------------------------------- kernel cross-check

_MYELIN_SUFFIX = re.compile(r"_myl\d+_\d+$")
_PROFILE_SUFFIX = re.compile(r" \[profile \d+\]")
_UNSAFE = re.compile(r"[^0-9A-Za-z_]")


def _sanitise(name: str) -> str:
    """TensorRT/Myelin names replace characters such as ``/``, ``.`` and ``:`` with ``_``."""
    return _UNSAFE.sub("_", name)


def engine_layer_matches(op_name: str, engine_name: str) -> bool:
    """Whether an engine layer implements the autotuned op ``op_name``.

    Matching (engine layer names are not the autotuning op names):
    - a profile marker `` [profile N]`` is ignored wherever it sits (one layer copy per
      profile: ``node_linear [profile 1]_myl11_2``);
    - exact name (``conv1``), e.g. Cask layers;
    - Myelin suffix: ``<op>_myl<G>_<I>`` (``matMul1`` -> ``matMul1_myl0_0``);
    - sanitised names: ``/fc1/MatMul`` matches ``_fc1_MatMul_myl0_0``;
    - fused layers: ``op`` is one of the `` + ``-joined parts (``conv1 + relu1``).
    ONNX ``Metadata`` is not used: one ONNX node can map to several engine layers.
    Reformat/NoOp layers (``Reformatting CopyNode for Input Tensor 0 to conv1 + relu1``)
    are skipped by :func:`cross_check_kernels`.
    """
    name = _PROFILE_SUFFIX.sub("", engine_name)
    bare = _MYELIN_SUFFIX.sub("", name)
    if op_name in (name, bare) or _sanitise(op_name) in (name, bare):
        return True
    parts = name.split(" + ")  # not stripped when unfused: " fc1 " is not "fc1"
    return len(parts) > 1 and op_name in [part.strip() for part in parts]


@dataclass
class KernelCheck:
    """What the engine inspector says about the locked kernels.

    ``problems`` are drift (a matched engine layer runs another recorded candidate of the
    same layer: the lock was not obeyed); ``warnings`` are layers the inspector cannot
    vouch for either way (no matching engine layer, a kernel that is none of the layer's
    candidates, names-only information). Only problems fail a build.
    """

    problems: list[str]
    warnings: list[str]


def cross_check_kernels(
    layer_info_json: str | Any, locked_entries: Sequence[_Entry], *, pinned_only: bool = False
) -> KernelCheck:
    """Compare the built engine's per-layer kernels with the lock.

    Entries are grouped by layer name (a name can repeat across keys: one per format
    combination). For every engine layer that matches the name: a ``TacticValue`` or
    ``TacticName`` equal to a locked one of *any* of the layer's keys is fine (the builder
    runs one key per layer, chosen by the cached times, which the tactic map does not
    hold); equal to another candidate recorded for that layer is a problem; anything else
    (Myelin sub-kernels, fused or split layers running kernels the log never listed) is a
    warning, as is a locked layer with no matching engine layer.
    """
    from reprobuild.logs.layerinfo import build_layer_info

    info = (
        build_layer_info(layer_info_json)
        if isinstance(layer_info_json, str)
        else layer_info_json  # already parsed (``reprobuild layers --lock``)
    )
    groups: dict[str, list[_Entry]] = {}
    for entry in locked_entries:
        if pinned_only and not entry.pinned:
            continue
        if entry.layer.startswith("<"):
            continue  # <one of a, b> / <cache-only ...>: no single layer to look for
        if entry.kernel or getattr(entry, "candidates", None):
            groups.setdefault(entry.layer, []).append(entry)
    if not groups:
        return KernelCheck([], [])
    if info.names_only:
        return KernelCheck(
            [],
            [
                "the engine's layer information lists names only, without TacticName: build "
                "with ProfilingVerbosity.DETAILED to cross-check kernels"
            ],
        )
    check = KernelCheck([], [])
    # a key named after no single layer (<cache-only ...>, <one of a, b>) may be the format
    # combination a layer runs: its tactic is locked too, never another candidate's drift
    unnamed = {int(e.tactic) for e in locked_entries if e.layer.startswith("<")}
    for op_name in sorted(groups):
        _check_layer(op_name, groups[op_name], info.layers, check, unnamed)
    return check


def running_keys(layer_info_json: str | None, entries: Sequence[_Entry]) -> dict[str, bool]:
    """Of every layer with several keys (format combinations): whether the engine runs each
    key, by the tactic the inspector shows for the layer. Layers the inspector cannot vouch
    for (no match, names only, no key's tactic shown) are left out.

    The builder runs one key per layer (TensorRT: the lowest cached time; the reference
    builder: the tie rule between keys), which the tactic map does not hold."""
    from reprobuild.logs.layerinfo import build_layer_info

    groups = {
        name: group
        for name, group in by_layer(entries).items()
        if len(group) > 1 and not name.startswith("<")  # <one of a, b>: no single layer
    }
    if not groups or not layer_info_json:
        return {}
    info = build_layer_info(layer_info_json)
    if info.names_only:
        return {}
    out: dict[str, bool] = {}
    for name, group in groups.items():
        shown = [
            (layer.tactic_value, layer.tactic_name)
            for layer in info.layers
            if not layer.is_reformat and engine_layer_matches(name, layer.name)
        ]

        def runs(entry: _Entry, shown: list = shown) -> bool:
            # By hash where the inspector shows one (names repeat across tactics).
            return any(
                int(value) == int(entry.tactic)
                if value is not None
                else kernel is not None and kernel == entry.kernel
                for value, kernel in shown
            )

        running = {e.key: runs(e) for e in group}
        if any(running.values()):
            out.update(running)
    return out


def idle_keys(layer_info_json: str, locked_entries: Sequence[_Entry]) -> set[str]:
    """Keys the engine provably does not run (:func:`running_keys`): a tactic switched in
    an idle key cannot reach the outputs. Layers the inspector cannot vouch for yield
    nothing: their keys count as running."""
    return {k for k, runs in running_keys(layer_info_json, locked_entries).items() if not runs}


def recorded_key_times(
    entries: Sequence[Any], tactics: Mapping[str, int], tie_band: float, rule: str
) -> dict[str, float | None]:
    """Each entry's time to write back so that a builder choosing between a layer's keys by
    the tie rule (:func:`reprobuild.tiebreak.choose_key`, the reference builder) runs the
    key the lock records as running (``runs: true``) with ``tactics`` in place.

    The recorded times, unchanged, where the rule already picks that key from them (a lock
    built as recorded). A build that switches a tactic (the positive control, bisect) can
    make the rule prefer another key (a steadier kernel): there the other keys' times are
    raised just above the band of the running key, which keeps its own time; the build is
    then the lock with the one change it names. TensorRT chooses by the lowest cached time
    and has not been shown to honour such edits, so it is given the recorded times alone."""
    from reprobuild.tiebreak import KeyOption, forcing_times

    times: dict[str, float | None] = {e.key: getattr(e, "time_ms", None) for e in entries}
    for group in by_layer(entries).values():
        runs = [i for i, e in enumerate(group) if getattr(e, "runs", None)]
        if len(group) < 2 or len(runs) != 1 or any(times[e.key] is None for e in group):
            continue
        options = []
        for e in group:
            tactic = tactics.get(e.key, e.tactic)
            kernel = next((c.kernel for c in e.candidates if c.tactic == tactic), e.kernel)
            options.append(KeyOption(e.key, float(times[e.key]), kernel))  # type: ignore[arg-type]
        for e, t in zip(group, forcing_times(options, runs[0], tie_band, rule), strict=True):
            times[e.key] = t
    return times


def key_choice_drift(layer_info_json: str | None, entries: Sequence[Any]) -> list[str]:
    """Drift in the choice between a layer's keys: a layer whose engine runs another key
    than the one the lock records as running (``runs: true``), naming both keys. A layer
    the inspector cannot vouch for, or without a recorded choice, is not checked."""
    ran = running_keys(layer_info_json, entries)
    problems = []
    for layer, group in sorted(by_layer(entries).items()):
        want = [e.key for e in group if getattr(e, "runs", None)]
        got = [e.key for e in group if ran.get(e.key)]
        if len(want) == 1 and got and want != got:
            problems.append(
                f"layer {layer!r} runs key {', '.join(got)}, the lock records key {want[0]} "
                "as the one it runs (the choice between its format combinations drifted)"
            )
    return problems


def _check_layer(
    op_name: str, entries: list[_Entry], layers: Sequence, check: KernelCheck, unnamed: set[int]
) -> None:
    locked_kernels = {e.kernel for e in entries if e.kernel}
    locked_tactics = {int(e.tactic) for e in entries} | unnamed
    other_kernels = {
        c.kernel for e in entries for c in getattr(e, "candidates", ()) if c.kernel
    } - locked_kernels
    other_tactics = {
        int(c.tactic) for e in entries for c in getattr(e, "candidates", ())
    } - locked_tactics
    matched = [
        layer
        for layer in layers
        if not layer.is_reformat and engine_layer_matches(op_name, layer.name)
    ]
    if not matched:
        check.warnings.append(
            f"layer {op_name!r}: no engine layer is named after it (Myelin may have fused or "
            "renamed it), so its kernel was not cross-checked; the timing cache map was"
        )
        return
    want = " or ".join(sorted(repr(k) for k in locked_kernels)) or "its locked tactic"
    for layer in matched:
        value, used = layer.tactic_value, layer.tactic_name
        if value is not None:
            # The hash decides: real candidates share kernel names across tactic hashes.
            if int(value) in locked_tactics:
                continue
            if int(value) in other_tactics:
                check.problems.append(
                    f"layer {op_name!r}: engine layer {layer.name!r} uses tactic "
                    f"0x{int(value):x} ({used or 'no TacticName'}), the lock says "
                    f"{' or '.join(f'0x{t:x}' for t in sorted(locked_tactics))} ({want})"
                )
            else:
                check.warnings.append(
                    f"layer {op_name!r}: engine layer {layer.name!r} runs tactic "
                    f"0x{int(value):x}, none of the layer's recorded candidates (a fused or "
                    "split layer?); not checked"
                )
            continue
        if not used:
            check.warnings.append(
                f"layer {op_name!r}: engine layer {layer.name!r} reports no TacticName"
            )
        elif used in locked_kernels:
            continue
        elif used in other_kernels:
            check.problems.append(
                f"layer {op_name!r}: engine layer {layer.name!r} uses kernel {used!r}, "
                f"the lock says {want}"
            )
        else:
            check.warnings.append(
                f"layer {op_name!r}: engine layer {layer.name!r} runs {used!r}, none of the "
                "layer's recorded candidates (a fused or split layer?); not checked"
            )
