"""Which of a lock's targets a machine uses, and how locks recorded on different machines
become one.

A target is one kind of machine (:class:`~reprobuild.types.Environment`: its identity
decides which tactics exist and what bits they give). A machine uses the target whose
identity it shares; it never falls back to a "close" one, because a near miss (another BLAS
kernel family, another GPU) gives other bits under the same tactics.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reprobuild.errors import EnvironmentMismatch, UsageError
from reprobuild.lock.model import Lock, Target
from reprobuild.types import Environment


@dataclass
class Selected:
    """The lock as seen by one machine: the view with its target active, and what was
    noticed on the way (advisory differences, identity fields the lock does not record)."""

    lock: Lock
    warnings: list[str] = field(default_factory=list)


def matching(lock: Lock, here: Environment) -> Target | None:
    """The target whose identity ``here`` shares (at most one: identities are unique)."""
    found = [t for t in lock.targets() if t.environment.matches(here)]
    if len(found) > 1:  # only legacy targets lacking fields can both match: take the fullest
        found.sort(key=lambda t: -len(t.environment.identity))
    return found[0] if found else None


def by_name(lock: Lock, name: str, lock_path: str | Path) -> Target:
    """``--target NAME``: the exact name, or a prefix that names one target."""
    targets = lock.targets()
    exact = [t for t in targets if t.name == name]
    found = exact or [t for t in targets if t.name.startswith(name)]
    if len(found) == 1:
        return found[0]
    names = [t.name for t in targets]
    if found:
        raise UsageError(
            f"{lock_path}: --target {name!r} names several targets "
            f"({describe_names([t.name for t in found])}); give more of the name"
        )
    near = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise UsageError(
        f"{lock_path}: no target {name!r}; {hint}the lock has {describe_names(names)} "
        "(`reprobuild show --targets` lists them)"
    )


def choose(
    lock: Lock,
    lock_path: str,
    name: str | None,
    here: Callable[[Lock], Environment | None] | None = None,
) -> Lock:
    """The target a lock command (show, pin, unpin, diff) works on: ``--target NAME``; the
    only one; else this machine's (``here`` computes it, only then: it imports the
    backend); else exit 2 asking for ``--target``."""
    if name is not None:
        return lock.select(by_name(lock, name, lock_path))
    if not lock.others:
        return lock
    env = here(lock) if here is not None else None
    target = None if env is None else matching(lock, env)
    if target is None:
        raise UsageError(
            f"{lock_path}: the lock has {len(lock.others) + 1} targets "
            f"({describe_names(lock.target_names())}) and none is this machine's; "
            "choose one with --target NAME"
        )
    return lock.select(target)


def describe_names(names: list[str]) -> str:
    return ", ".join(names) if names else "no targets"


def select(
    lock: Lock, here: Environment | None, lock_path: str | Path, name: str | None = None
) -> Selected:
    """The view of ``lock`` for this machine (or for ``--target name``).

    Raises ``EnvironmentMismatch`` (exit 3) when no target matches, naming the lock's
    targets and how this machine differs from each.
    """
    if name is not None:
        return Selected(lock.select(by_name(lock, name, lock_path)))
    if here is None:
        return Selected(lock)
    target = matching(lock, here)
    if target is None:
        raise EnvironmentMismatch(no_target_message(lock, here, lock_path))
    return Selected(lock.select(target), notes(target.environment, here))


def no_target_message(lock: Lock, here: Environment, lock_path: str | Path) -> str:
    diffs = [f"{t.name}: {'; '.join(t.environment.differences(here))}" for t in lock.targets()]
    return (
        f"{lock_path}: no target for this machine ({here.name}); the lock has "
        f"{len(diffs)} target{'s' if len(diffs) != 1 else ''} ({' | '.join(diffs)}): record "
        "this machine's target with `reprobuild build` (without --frozen), or run on a "
        "machine of a recorded target"
    )


def notes(recorded: Environment, here: Environment) -> list[str]:
    """One line per advisory difference and per identity field the lock does not record."""
    out = [
        f"target {recorded.name}: advisory {d} (recorded, not part of the target)"
        for d in recorded.advisory_differences(here)
    ]
    missing = recorded.unrecorded(here)
    if missing:
        out.append(
            f"target {recorded.name} does not record {', '.join(missing)} (a lock from an older "
            "reprobuild): it matches on the fields it has and keeps the keys it was recorded "
            "with; `reprobuild build --re-record` records it anew, keeping its pins"
        )
    return out


def merge(locks: list[tuple[str, Lock]]) -> Lock:
    """One lock holding every target of ``locks`` (``(path, lock)`` pairs, same model,
    settings and precision plan, else exit 2). The same target twice is kept once when its
    sections are the same lock (:func:`~reprobuild.lock.diff.diff_locks`, the definition
    ``diff`` uses too) and refused (exit 2) when they differ."""
    from reprobuild.lock.diff import diff_locks

    first_path, first = locks[0]
    by_target: dict[str, tuple[str, Lock]] = {}
    for path, lock in locks:
        if path != first_path:
            _same_build(first_path, first, path, lock)
        for target in lock.targets():
            view = lock.select(target)
            seen = by_target.get(target.name)
            if seen is None:
                by_target[target.name] = (path, view)
            elif diff_locks(seen[1], view).differs:
                raise UsageError(
                    f"{path}: target {target.name} differs from the one in {seen[0]} "
                    "(`reprobuild diff` shows how); re-record one of them, or keep "
                    "one lock's section by leaving the other lock out"
                )
    targets = [v.active() for _, v in by_target.values()]
    head, others = targets[0], targets[1:]
    merged = Lock(
        first.model, head.environment, first.settings, head.layers, first.precision,
        first.schema, head.outputs, others,
    )  # fmt: skip
    merged.canonicalize()
    return merged


def _same_build(a_path: str, a: Lock, b_path: str, b: Lock) -> None:
    from reprobuild.lock.diff import diff_locks

    d = diff_locks(a, b)
    problems = [
        what
        for what, differs in (
            ("another model", d.model_changed),
            ("other builder settings", d.settings_changed),
            ("another precision plan", d.precision_changed),
        )
        if differs
    ]
    if problems:
        raise UsageError(
            f"{b_path}: cannot merge with {a_path}: {', '.join(problems)}; merge locks "
            "recorded from the same model, settings and precision plan"
        )
