"""``bisect``: which layers' tactics make two locks' outputs differ.

Builds lock A's tactics with halves of B's differing pins swapped in; when neither half alone
changes the outputs (layers interact), it falls back to removing layers one by one.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.backends.base import Backend
from reprobuild.errors import UsageError
from reprobuild.events import Progress, Step, quiet
from reprobuild.fileio import sha256_file
from reprobuild.lock.model import DEFAULT_LOCK
from reprobuild.workflow.context import announce_backend, open_lock, resolve_backend
from reprobuild.workflow.outputs import load_inputs, output_hashes
from reprobuild.workflow.pinned import pinned_build
from reprobuild.workflow.prepare import prepare_model

__all__ = ["BisectResult", "bisect"]


@dataclass
class BisectResult:
    differing_layers: int
    culprits: list[dict[str, Any]]
    builds: int
    outputs_differ: bool
    message: str
    steps: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def bisect(
    model: str | os.PathLike[str] | None = None,
    *,
    lock: str | os.PathLike[str] = DEFAULT_LOCK,
    against: str | os.PathLike[str],
    backend: str | Backend = "auto",
    cache_dir: str | os.PathLike[str] = "caches",
    inputs: str | os.PathLike[str] | None = None,
    seed: int = 0,
    progress: Progress = quiet,
) -> BisectResult:
    """Find the smallest set of layers whose tactic difference changes the outputs.

    Builds lock A's tactics with halves of B's differing pins swapped in; when neither half
    alone changes the outputs (layers interact), falls back to removing layers one by one.
    """
    from reprobuild.cachedir import cache_path

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
    feeds, _ = load_inputs(inputs, model_path, seed)
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
                tactics = {k: (other[k] if k in swapped else v) for k, v in base.items()}
                pb = pinned_build(be, built_model, a.settings, tactics, cfile, quiet, [])
                memo[swapped] = output_hashes(be.run(pb.output.engine, feeds))
            return memo[swapped]

        if not differing:
            return BisectResult(0, [], 0, False, "the locks choose the same tactics everywhere")
        ref = outputs_with(frozenset())
        if outputs_with(frozenset(differing)) == ref:
            return BisectResult(
                len(differing),
                [],
                count,
                False,
                "the locks differ in tactics but give identical outputs",
            )

        def changes(subset: list[str]) -> bool:
            return outputs_with(frozenset(subset)) != ref

        current = list(differing)
        while len(current) > 1:
            half = len(current) // 2
            left, right = current[:half], current[half:]
            if changes(left):
                current = left
            elif changes(right):
                current = right
            else:
                steps.append(f"halves of {len(current)} layers interact; minimising one by one")
                for k in list(current):
                    trial = [x for x in current if x != k]
                    if trial and changes(trial):
                        current = trial
                break
            steps.append(f"narrowed to {len(current)} layers")
    culprits = [
        {
            "layer": names.get(k, "?"),
            "key": k,
            "tactic_a": f"0x{base[k]:x}",
            "tactic_b": f"0x{other[k]:x}",
        }
        for k in current
    ]
    return BisectResult(
        len(differing), culprits, count, True, f"{len(culprits)} layer(s) change the outputs", steps
    )
