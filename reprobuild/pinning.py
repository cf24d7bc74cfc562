"""Applying a lock to a timing cache and checking that the build obeyed it.

Backend-neutral: both backends go through these, since they work on the ``TimingCache``
contract and on engine-inspector JSON only. The order that makes pins stick (TensorRT's
editable timing cache only updates keys that exist):

1. a recording build, or a cached recording cache, creates every key;
2. :func:`apply_pins` calls ``update(key, tactic, time)`` for each entry; a ``False`` is a
   ``BuildError`` naming the layer and key;
3. snapshot ``tactic_map()``, run the pinned build, snapshot again, and
   :func:`tactic_map_drift` / :func:`check_no_drift` fail on any added, removed or
   changed key (``ERROR_ON_TIMING_CACHE_MISS`` alone has missed misses);
4. :func:`cross_check_kernels` compares the engine inspector's ``TacticName`` per layer with
   the locked kernel names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from reprobuild.backends.base import TimingCache
from reprobuild.errors import BuildError, DriftError


class _Entry(Protocol):
    """The lockfile's ``LayerEntry`` fields these helpers read."""

    key: str
    layer: str
    tactic: int
    kernel: str | None
    pinned: bool


@dataclass(frozen=True)
class PinResult:
    key: str
    layer: str
    tactic: int
    previous: int


def apply_pins(
    cache: TimingCache, entries: Iterable[_Entry], *, pinned_only: bool = False
) -> list[PinResult]:
    """``update()`` every (pinned) entry; any False return raises ``BuildError``.

    The timing written is the entry's current time in the cache: the lock does not store
    timings, and a NaN would delete the entry instead of pinning it.
    """
    results: list[PinResult] = []
    for entry in entries:
        if pinned_only and not entry.pinned:
            continue
        current = cache.query(entry.key)
        time_ms = current.time_ms if current is not None else 0.0
        if time_ms != time_ms or time_ms < 0:
            time_ms = 0.0
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
        results.append(
            PinResult(
                key=entry.key,
                layer=entry.layer,
                tactic=entry.tactic,
                previous=current.tactic_hash if current is not None else -1,
            )
        )
    return results


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
_PROFILE_SUFFIX = re.compile(r" \[profile \d+\]$")


def engine_layer_matches(op_name: str, engine_name: str) -> bool:
    """Whether an engine layer implements the autotuned op ``op_name``.

    Matching (engine layer names are not the autotuning op names):
    - the profile suffix `` [profile N]`` is ignored (one layer copy per profile);
    - exact name (``conv1``), e.g. Cask layers;
    - Myelin suffix: ``<op>_myl<G>_<I>`` (``matMul1`` -> ``matMul1_myl0_0``);
    - fused layers: ``op`` is one of the `` + ``-joined parts (``conv1 + relu1``).
    ONNX ``Metadata`` is not used: one ONNX node can map to several engine layers.
    Reformat/NoOp layers (``Reformatting CopyNode for Input Tensor 0 to conv1 + relu1``)
    are skipped by :func:`cross_check_kernels`.
    """
    name = _PROFILE_SUFFIX.sub("", engine_name)
    if name == op_name:
        return True
    if _MYELIN_SUFFIX.sub("", name) == op_name and _MYELIN_SUFFIX.search(name):
        return True
    return op_name in [part.strip() for part in name.split(" + ")]


def cross_check_kernels(
    layer_info_json: str, locked_entries: Sequence[_Entry], *, pinned_only: bool = False
) -> list[str]:
    """Problems where the built engine's kernels differ from the locked kernel names.

    Entries are grouped by layer name (a name can repeat across keys); every engine layer
    matching that name must use one of the group's locked kernels (``TacticName``; Myelin
    layers have no ``TacticValue``, so kernel names are compared, not tactic values). A locked
    layer with a kernel name but no matching engine layer is also reported.
    """
    from reprobuild.logs.layerinfo import parse_layer_info

    info = parse_layer_info(layer_info_json, "engine layer information", strict=False)
    wanted: dict[str, set[str]] = {}
    for entry in locked_entries:
        if pinned_only and not entry.pinned:
            continue
        if entry.kernel:
            wanted.setdefault(entry.layer, set()).add(entry.kernel)
    if not wanted:
        return []
    if info.names_only:
        return [
            "the engine's layer information lists names only, without TacticName: build with "
            "ProfilingVerbosity.DETAILED to cross-check kernels"
        ]
    problems: list[str] = []
    for op_name in sorted(wanted):
        kernels = wanted[op_name]
        matched = [
            layer
            for layer in info.layers
            if not layer.is_reformat and engine_layer_matches(op_name, layer.name)
        ]
        if not matched:
            problems.append(
                f"layer {op_name!r}: no engine layer named {op_name!r}, "
                f"'{op_name}_myl<N>_<M>' or fused '... + {op_name}' in the engine information"
            )
            continue
        for layer in matched:
            used = layer.tactic_name
            if not used:
                problems.append(
                    f"layer {op_name!r}: engine layer {layer.name!r} reports no TacticName"
                )
            elif used not in kernels:
                problems.append(
                    f"layer {op_name!r}: engine layer {layer.name!r} uses kernel "
                    f"{used!r}, the lock says {' or '.join(sorted(repr(k) for k in kernels))}"
                )
    return problems
