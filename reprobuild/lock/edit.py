"""Editing a lock: the logic under ``pin``, ``unpin`` and ``show``.

Kept apart from the CLI so the Python API and tests use exactly what the commands do; the
CLI only renders what these return.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reprobuild.errors import UsageError
from reprobuild.fileio import exclusive
from reprobuild.lock.model import LayerEntry, Lock, OutputDigest
from reprobuild.lock.schema import HEX_RE, KEY_RE
from reprobuild.lock.yamlio import load_lock, save_lock
from reprobuild.transaction import check_output_path, lock_target
from reprobuild.types import Environment


@dataclass(frozen=True)
class Selection:
    """One ``layer=NAME`` or ``key=0x...`` selector, with the tactic to pin (if any)."""

    layer: str | None = None
    key: str | None = None
    tactic: str | None = None

    def describe(self) -> str:
        return f"key={self.key}" if self.key else f"layer={self.layer}"


def parse_selections(tokens: list[str], need_tactic: bool) -> list[Selection]:
    """Parse ``layer=A tactic=T key=0x.. tactic=U`` into selections, in order."""
    out: list[Selection] = []
    current: dict[str, str] = {}

    def flush() -> None:
        if not current:
            return
        if need_tactic and "tactic" not in current:
            raise UsageError(
                f"{_sel(current)} has no tactic=...; write e.g. layer=conv1 tactic=0x1a"
            )
        out.append(Selection(current.get("layer"), current.get("key"), current.get("tactic")))
        current.clear()

    for tok in tokens:
        name, sep, value = tok.partition("=")
        if not sep or not value or name not in ("layer", "key", "tactic"):
            allowed = (
                "layer=NAME, key=0x... and tactic=TACTIC"
                if need_tactic
                else "layer=NAME and key=0x..."
            )
            raise UsageError(f"cannot read argument {tok!r}: expected {allowed}")
        if name == "tactic":
            if not need_tactic:
                raise UsageError(f"unexpected {tok!r}: unpin takes only layer=NAME or key=0x...")
            if not current or "tactic" in current:
                raise UsageError(f"{tok!r} must follow a layer=NAME or key=0x... argument")
            current["tactic"] = value
            continue
        flush()
        if name == "key" and not KEY_RE.fullmatch(value):
            raise UsageError(f"malformed key {value!r}: expected '0x' followed by 32 hex digits")
        current[name] = value if name == "layer" else "0x" + value[2:].lower()
    flush()
    if not out:
        raise UsageError(
            "nothing to do: give at least one layer=NAME"
            + (" tactic=TACTIC" if need_tactic else "")
        )
    return out


def _sel(d: dict[str, str]) -> str:
    return f"key={d['key']}" if "key" in d else f"layer={d.get('layer')}"


def find_entry(lock: Lock, sel: Selection, lock_path: str) -> LayerEntry:
    """Resolve a selector to exactly one entry, with suggestions when it does not."""
    if sel.key is not None:
        for e in lock.layers:
            if e.key == sel.key:
                return e
        raise UsageError(
            f"{lock_path}: no layer has key {sel.key}; `reprobuild show` lists the keys"
        )
    matches = [e for e in lock.layers if e.layer == sel.layer]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        names = sorted({e.layer for e in lock.layers})
        close = difflib.get_close_matches(sel.layer or "", names, n=3, cutoff=0.5)
        hint = (
            f"did you mean {', '.join(repr(c) for c in close)}?"
            if close
            else "`reprobuild show` lists the layers"
        )
        raise UsageError(f"{lock_path}: no layer named {sel.layer!r}; {hint}")
    having = _with_candidate(matches, sel.tactic)
    if len(having) == 1:  # the tactic names a candidate of one of the layer's keys only
        return having[0]
    keys = ", ".join(e.key for e in matches)
    also = f"; tactic {sel.tactic} is a candidate of {len(having)} of them" if having else ""
    raise UsageError(
        f"{lock_path}: layer name {sel.layer!r} is ambiguous ({len(matches)} layers: {keys})"
        f"{also}; select one with key=0x..."
    )


def _with_candidate(entries: list[LayerEntry], tactic: str | None) -> list[LayerEntry]:
    """The entries with a recorded candidate that ``tactic`` (a kernel name or a hash, as
    ``pin`` takes it) names."""
    if tactic is None:
        return []
    value = None
    if HEX_RE.fullmatch(tactic) or tactic.isdigit():
        value = int(tactic, 16) if tactic.lower().startswith("0x") else int(tactic)
    return [
        e for e in entries if any(c.kernel == tactic or c.tactic == value for c in e.candidates)
    ]


def resolve_tactic(
    entry: LayerEntry, tactic: str, force: bool, lock_path: str
) -> tuple[int, str | None]:
    """Turn a hash or a kernel name into (hash, kernel), checked against the candidates."""
    where = f"{lock_path}: layer {entry.layer!r} ({entry.key})"
    if HEX_RE.fullmatch(tactic) or tactic.isdigit():
        value = int(tactic, 16) if tactic.lower().startswith("0x") else int(tactic)
        if not 0 <= value < 2**64:
            raise UsageError(f"tactic {tactic} does not fit in 64 bits")
        cand = entry.candidate(value)
        if cand is not None:
            return value, cand.kernel
        if force:
            return value, None
        raise UsageError(
            f"{where}: tactic {tactic} is not one of its {len(entry.candidates)} recorded "
            f"candidates ({_cand_list(entry)}); use --force to pin it anyway"
        )
    by_kernel = [c for c in entry.candidates if c.kernel == tactic]
    if len(by_kernel) == 1:
        return by_kernel[0].tactic, tactic
    if len(by_kernel) > 1:
        hashes = ", ".join(f"0x{c.tactic:x}" for c in by_kernel)
        raise UsageError(
            f"{where}: kernel {tactic!r} has several tactics ({hashes}); pin one by hash"
        )
    if tactic[:2].lower() == "0x":
        raise UsageError(
            f"{where}: {tactic!r} is not a hex tactic hash ('0x' followed by hex digits, "
            f"e.g. 0x{entry.tactic:x}); give a hash or one of: {_cand_list(entry)}"
        )
    kernels = sorted({c.kernel for c in entry.candidates if c.kernel})
    close = difflib.get_close_matches(tactic, kernels, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise UsageError(
        f"{where}: no candidate kernel named {tactic!r}; {hint}give a tactic hash "
        f"(0x...) or one of: {_cand_list(entry)}"
    )


def _cand_list(entry: LayerEntry, limit: int = 6) -> str:
    items = [f"0x{c.tactic:x}" + (f" {c.kernel}" if c.kernel else "") for c in entry.candidates]
    more = f", ... {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more if items else "none recorded"


@dataclass
class Change:
    layer: str
    key: str
    old_tactic: int
    new_tactic: int
    kernel: str | None
    pinned: bool
    was_pinned: bool = True  # unpin: False when the layer was not pinned (nothing changed)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["old_tactic"] = f"0x{self.old_tactic:x}"
        d["new_tactic"] = f"0x{self.new_tactic:x}"
        return d


@dataclass
class Edit:
    """What ``pin``/``unpin`` did to one target: the layers changed and the expected bits
    (output digests) cleared, which a later build or ``verify --record-digests`` restores."""

    target: str
    changes: list[Change]
    cleared: list[OutputDigest]

    def to_json(self, verb: str) -> dict[str, Any]:
        return {
            "target": self.target,
            verb: [c.to_json() for c in self.changes],
            "cleared_digests": [o.inputs for o in self.cleared],
        }


def apply_pins(lock: Lock, sels: list[Selection], force: bool, lock_path: str) -> list[Change]:
    """Pin every selection; one layer selected twice with different tactics is refused
    (keeping the last would silently drop what the user asked for first)."""
    changes: list[Change] = []
    chosen: dict[str, tuple[int, Selection]] = {}
    for sel in sels:
        entry = find_entry(lock, sel, lock_path)
        assert sel.tactic is not None
        value, kernel = resolve_tactic(entry, sel.tactic, force, lock_path)
        earlier = chosen.setdefault(entry.key, (value, sel))
        if earlier[0] != value:
            raise UsageError(
                f"{lock_path}: layer {entry.layer!r} ({entry.key}) is selected twice with "
                f"different tactics ({earlier[1].describe()} tactic={earlier[1].tactic}, then "
                f"{sel.describe()} tactic={sel.tactic}); pin it once"
            )
        if earlier[1] is not sel:
            continue  # the same pin twice: once is enough
        changes.append(Change(entry.layer, entry.key, entry.tactic, value, kernel, True))
        entry.tactic, entry.kernel, entry.pinned = value, kernel, True
    if any(c.old_tactic != c.new_tactic for c in changes):
        # The recorded bits were the old tactics' bits: the next build of this target (or
        # `verify --record-digests`) records the new ones.
        lock.outputs.clear()
    return changes


def apply_unpins(lock: Lock, sels: list[Selection], lock_path: str) -> list[Change]:
    changes: list[Change] = []
    for sel in sels:
        entry = find_entry(lock, sel, lock_path)
        was = entry.pinned
        entry.pinned = False
        changes.append(
            Change(entry.layer, entry.key, entry.tactic, entry.tactic, entry.kernel, False, was)
        )
    return changes


def edit_lock(
    path: str | Path,
    tokens: list[str],
    *,
    unpin: bool = False,
    force: bool = False,
    target: str | None = None,
    here: Callable[[Lock], Environment | None] | None = None,
) -> Edit:
    """Read-modify-write under an inter-process lock; any error leaves the file as it was.
    Edits one target (:func:`reprobuild.lock.targets.choose`); the others keep their bytes."""
    from reprobuild.lock.targets import choose

    sels = parse_selections(tokens, need_tactic=not unpin)
    check_output_path(lock_target(path), "lock")
    with exclusive(path):
        lock = choose(load_lock(path), str(path), target, here)
        before = list(lock.outputs)
        changes = (
            apply_unpins(lock, sels, str(path))
            if unpin
            else apply_pins(lock, sels, force, str(path))
        )
        save_lock(lock, path)
    return Edit(lock.target_name, changes, [o for o in before if o not in lock.outputs])


def record_digest(
    path: str | Path, target: str, digest: OutputDigest, tactics: dict[str, int]
) -> bool:
    """Add the digest of a target's outputs for new inputs (``verify --record-digests``),
    under the file lock; a digest already recorded for those inputs is never replaced.

    ``tactics`` is the tactic map that was verified: if the lock no longer holds it (a pin
    landed while the rebuilds ran), the digest describes other tactics and would fail every
    later verify, so nothing is written and False is returned.
    """
    from reprobuild.lock.targets import by_name

    with exclusive(path):
        lock = load_lock(path)
        lock = lock.select(by_name(lock, target, str(path)))
        if lock.tactic_map() != tactics:
            return False
        if any(o.inputs == digest.inputs for o in lock.outputs):
            return True
        lock.outputs.append(digest)
        save_lock(lock, path)
    return True


def denied_by(lock: Lock, e: LayerEntry, tactic: int, kernel: str | None) -> dict[str, str]:
    """``{"denied": RULE}`` where a rule of the lock denies this candidate of ``e``'s layer,
    else nothing (rows of a lock without rules keep the fields they had)."""
    rule = lock.settings.denying(e.layer, kernel, tactic)
    return {} if rule is None else {"denied": rule.describe()}


def show_rows(lock: Lock) -> list[dict[str, Any]]:
    return [
        {
            "layer": e.layer,
            "key": e.key,
            "tactic": f"0x{e.tactic:x}",
            "kernel": e.kernel,
            "pinned": e.pinned,
            "candidates": len(e.candidates),
            # only where the recording saw near-ties: other rows keep the fields they had
            **({"near_tie": True, "ties": len(e.ties)} if e.near_tie else {}),
            # only on a layer with several keys: whether the engine runs this one
            **({"runs": e.runs} if e.runs is not None else {}),
            # only where a rule denies the tactic it runs (a locked build refuses it)
            **denied_by(lock, e, e.tactic, e.kernel),
        }
        for e in lock.layers
    ]


MAX_REPORT_BYTES = 256 << 20  # a build report of a 10,000-layer model is far smaller


def report_times(path: str | Path) -> dict[tuple[str, int], float]:
    """Every candidate's time as the build that wrote ``path`` (``ENGINE.report.json``)
    recorded it, by timing-cache key and tactic: the lock keeps only the chosen one's."""
    import json

    from reprobuild.fileio import read_regular

    try:
        records = json.loads(read_regular(path, MAX_REPORT_BYTES, "build report"))["records"]
        return {
            (str(r["key"]), int(str(c["tactic_hash"]), 16)): float(c["cost_ms"])
            for r in records
            for c in r.get("candidates") or []
            if c.get("cost_ms") is not None
        }
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise UsageError(
            f"{path}: not a `reprobuild build` report with the recorded candidates; give the "
            "ENGINE.report.json the recording build wrote"
        ) from None


def candidate_rows(lock: Lock, times: dict[tuple[str, int], float]) -> list[dict[str, Any]]:
    """``show --candidates``: every layer's candidates, each with its recorded time where
    known (the locked one's from the lock, the others' from a build report's ``times``)."""

    def time_of(e: LayerEntry, tactic: int) -> float | None:
        if (e.key, tactic) in times:
            return times[e.key, tactic]
        return e.time_ms if tactic == e.tactic else None

    return [
        {
            "layer": e.layer,
            "key": e.key,
            "tactic": f"0x{e.tactic:x}",
            "pinned": e.pinned,
            "candidates": [
                {
                    "tactic": f"0x{c.tactic:x}",
                    "kernel": c.kernel,
                    "time_ms": time_of(e, c.tactic),
                    **denied_by(lock, e, c.tactic, c.kernel),
                }
                for c in e.candidates
            ],
        }
        for e in lock.layers
    ]
