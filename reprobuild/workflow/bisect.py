"""``bisect``: which layers' tactics make two locks' outputs differ.

Group testing: builds lock A's tactics with a group of B's differing tactics swapped in; a
group that changes the outputs is split in halves and both halves are searched, so the
search keeps going after the first culprit and names every layer whose tactic alone changes
the outputs (``first``: it stops at the first one). When a group changes the outputs but
neither half does (layers interact), it is narrowed to a smallest set by removing layers one
by one, reported as one interacting group. Every build is lock A with B's tactics swapped
in and A's recorded times and key choices written back (:func:`.pinned.switched`), never a
re-timed cache, so the answer is the same with or without a stored recording cache.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from reprobuild.backends.base import Backend
from reprobuild.errors import UsageError
from reprobuild.events import Progress, Step, quiet
from reprobuild.fileio import sha256_file
from reprobuild.lock.model import DEFAULT_LOCK
from reprobuild.workflow.context import announce_backend, open_lock, resolve_backend
from reprobuild.workflow.outputs import load_inputs, output_hashes
from reprobuild.workflow.pinned import switched_build
from reprobuild.workflow.prepare import prepare_model

__all__ = ["BisectResult", "bisect", "group_test"]


@dataclass
class BisectResult:
    differing_layers: int
    culprits: list[dict[str, Any]]
    builds: int
    outputs_differ: bool
    message: str
    steps: list[str] = field(default_factory=list)
    search: str = "all"  # "all": every culprit; "first": stopped at the first one found

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def bisect(
    model: str | os.PathLike[str] | None = None,
    *,
    lock: str | os.PathLike[str] = DEFAULT_LOCK,
    against: str | os.PathLike[str],
    backend: str | Backend = "auto",
    cache_dir: str | os.PathLike[str] | None = None,
    inputs: str | os.PathLike[str] | None = None,
    seed: int = 0,
    first: bool = False,
    progress: Progress = quiet,
) -> BisectResult:
    """Find every layer whose tactic difference changes the outputs (``first``: the first
    one found, fewer builds); see the module's docstring for the search."""
    from reprobuild.cachedir import cache_folder, cache_path

    cache_dir = cache_folder(cache_dir, lock)
    be = resolve_backend(backend)
    announce_backend(backend, be, progress)
    a, lock_path, model_path = open_lock(lock, model, be)
    b, _, _ = open_lock(against, model_path, be)
    be = be.for_target(a.environment)  # the keys this target was recorded with
    base = a.tactic_map()
    other = b.tactic_map()
    names = {e.key: e.layer for e in a.layers}
    differing = sorted(k for k in base if k in other and other[k] != base[k])
    unmatched = sorted(set(base) ^ set(other))
    if unmatched:
        raise UsageError(
            f"{lock_path} and {against} list different layers ({len(unmatched)} keys); bisect "
            "needs two locks of the same model, settings and environment"
        )
    samples = load_inputs(inputs, model_path, seed)
    steps: list[str] = []
    count = 0
    with tempfile.TemporaryDirectory(prefix="reprobuild-bisect-") as tmp:
        built_model, _, _ = prepare_model(model_path, a, None, True, Path(tmp), lock_path)
        cfile = cache_path(cache_dir, be.environment(), a.settings, sha256_file(built_model))
        memo: dict[frozenset[str], dict[str, str]] = {}

        def outputs_with(swapped: frozenset[str]) -> dict[str, str]:
            nonlocal count
            if swapped not in memo:
                count += 1
                progress(Step(f"build {count}: {len(swapped)} of {len(differing)} layers from B"))
                pb = switched_build(be, built_model, a, {k: other[k] for k in swapped}, cfile)
                memo[swapped] = output_hashes(samples.run(partial(be.run, pb.output.engine)))
            return memo[swapped]

        search = "first" if first else "all"
        if not differing:
            return BisectResult(
                0, [], 0, False, "the locks choose the same tactics everywhere", search=search
            )
        ref = outputs_with(frozenset())

        def changes(subset: list[str]) -> bool:
            return outputs_with(frozenset(subset)) != ref

        if not changes(differing):
            return BisectResult(
                len(differing),
                [],
                count,
                False,
                "the locks differ in tactics but give identical outputs",
                search=search,
            )
        found = group_test(differing, changes, first, steps)
    culprits = [
        {
            "layer": names.get(k, "?"),
            "key": k,
            "tactic_a": f"0x{base[k]:x}",
            "tactic_b": f"0x{other[k]:x}",
            "group": group,  # culprits of one group change the outputs together
            "alone": len(keys) == 1,
        }
        for group, keys in enumerate(found)
        for k in keys
    ]
    return BisectResult(
        len(differing),
        culprits,
        count,
        True,
        _message(found, first),
        steps,
        search,
    )


def group_test(keys: list[str], changes: Any, first: bool, steps: list[str]) -> list[list[str]]:
    """The culprit groups among ``keys`` (which change the outputs together): single layers
    that change them alone, and smallest interacting sets where only layers together do.

    A group that changes the outputs is split and both halves searched; a half that does
    not change them holds no culprit. Where culprits are dense (both halves changed the
    outputs, two levels in a row) splitting costs more builds than testing each layer, so
    those halves are tested layer by layer. ``first`` stops at the first group found."""
    found: list[list[str]] = []
    pending = [(keys, False)]  # groups known to change the outputs, depth first
    while pending and not (first and found):
        group, dense = pending.pop()
        if len(group) == 1:
            found.append(group)
            continue
        half = len(group) // 2
        left, right = group[:half], group[half:]
        hits = [part for part in (left, right) if changes(part)]
        if not hits:
            steps.append(f"halves of {len(group)} layers interact; minimising one by one")
            found.append(_minimise(group, changes))
            continue
        steps.append(
            f"{len(group)} layers: {' and '.join(f'{len(h)}' for h in hits)} change the outputs"
        )
        if len(hits) == 2 and dense and not first:
            steps.append(f"culprits are dense: testing {len(group)} layers one by one")
            for part in hits:
                found.extend(_one_by_one(part, changes))
            continue
        pending.extend((h, len(hits) == 2) for h in reversed(hits))  # the left half first
    return found


def _one_by_one(group: list[str], changes: Any) -> list[list[str]]:
    """The layers of ``group`` (which changes the outputs) that change them alone, and the
    rest's smallest interacting set when the rest still changes them."""
    alone = [k for k in group if changes([k])]
    rest = [k for k in group if k not in alone]
    found = [[k] for k in alone]
    if rest and (not alone or changes(rest)):
        found.append(_minimise(rest, changes))
    return found


def _minimise(group: list[str], changes: Any) -> list[str]:
    """A smallest subset of ``group`` that still changes the outputs (one by one)."""
    current = list(group)
    for k in list(current):
        trial = [x for x in current if x != k]
        if trial and changes(trial):
            current = trial
    return current


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _message(found: list[list[str]], first: bool) -> str:
    """What the search did and found, in words: every culprit, or only the first."""
    together = [g for g in found if len(g) > 1]
    alone = len(found) - len(together)
    parts = []
    if alone:
        parts.append(
            f"{_plural(alone, 'layer')} change{'s' if alone == 1 else ''} the outputs alone"
        )
    for g in together:
        parts.append(f"a group of {len(g)} layers changes them only together")
    if first:
        return f"first culprit only (--first; other layers may change the outputs too): {parts[0]}"
    return f"all culprits (every differing layer searched): {'; '.join(parts)}"
