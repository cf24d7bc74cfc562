"""Comparing two locks: the logic under ``reprobuild diff``.

Entries match by timing-cache key; across environments (a new GPU gives every layer a new
key) they fall back to matching by layer name where the name is unique on both sides.
The precision plans are compared too (:mod:`.plandiff`): two INT8 locks with the same
tactics but another scale build other bits, so they differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reprobuild.lock.model import LayerEntry, Lock
from reprobuild.lock.plandiff import PlanChange, plan_changes


def in_band(a: LayerEntry, b: LayerEntry) -> bool | None:
    """Was a changed tactic a draw inside the tie band (noise) rather than a real change?
    True when either recording timed the other's tactic within its band of the best; None
    when neither entry recorded a near-tie (a clear winner, or a lock older than the band)."""
    if not a.ties and not b.ties:
        return None
    return b.tactic in a.ties or a.tactic in b.ties


def change_label(a: LayerEntry, b: LayerEntry) -> str | None:
    """What a changed row is: ``pinned`` (B pins it: a deliberate choice, whatever the
    band says), else ``noise (in band)`` or ``real``; None where neither recorded a band
    and nothing is pinned (the table then has no such column)."""
    if b.pinned:
        return "pinned"
    band = in_band(a, b)
    return None if band is None else "noise (in band)" if band else "real"


@dataclass
class LockDiff:
    added: list[LayerEntry]
    removed: list[LayerEntry]
    changed: list[tuple[LayerEntry, LayerEntry]]  # (a, b) with a different tactic
    settings_changed: list[str]
    model_changed: bool
    environment_changed: list[str]  # identity fields: the two locks' targets differ
    precision_changed: list[PlanChange] = field(default_factory=list)
    advisory_changed: list[str] = field(default_factory=list)  # shown, not a difference

    @property
    def differs(self) -> bool:
        return bool(
            self.added
            or self.removed
            or self.changed
            or self.settings_changed
            or self.model_changed
            or self.environment_changed
            or self.precision_changed
        )

    def to_json(self) -> dict[str, Any]:
        def row(e: LayerEntry) -> dict[str, Any]:
            return {"layer": e.layer, "key": e.key, "tactic": f"0x{e.tactic:x}", "kernel": e.kernel}

        return {
            "differs": self.differs,
            "added": [row(e) for e in self.added],
            "removed": [row(e) for e in self.removed],
            "changed": [
                {
                    "layer": b.layer,
                    "key_a": a.key,
                    "key_b": b.key,
                    "tactic_a": f"0x{a.tactic:x}",
                    "tactic_b": f"0x{b.tactic:x}",
                    "kernel_a": a.kernel,
                    "kernel_b": b.kernel,
                    "pinned_b": b.pinned,
                    "change": change_label(a, b) or "real",
                    # only where either side recorded near-ties (docs/stability.md)
                    **({} if (v := in_band(a, b)) is None else {"in_band": v}),
                }
                for a, b in self.changed
            ],
            "model_changed": self.model_changed,
            "settings_changed": self.settings_changed,
            "environment_changed": self.environment_changed,
            "advisory_changed": self.advisory_changed,
            "precision_changed": [c.to_json() for c in self.precision_changed],
        }


def diff_locks(a: Lock, b: Lock) -> LockDiff:
    """Match entries by key; then, across environments (keys all differ), by unique name."""
    bkeys = b.by_key()
    changed: list[tuple[LayerEntry, LayerEntry]] = []
    only_a: list[LayerEntry] = []
    matched_b: set[str] = set()
    for e in a.layers:
        other = bkeys.get(e.key)
        if other is None:
            only_a.append(e)
            continue
        matched_b.add(e.key)
        if other.tactic != e.tactic:
            changed.append((e, other))
    only_b = [e for e in b.layers if e.key not in matched_b]
    # Fallback by layer name, only where the name is unique on both sides.
    a_names = _unique_names(only_a)
    b_names = _unique_names(only_b)
    for name in sorted(set(a_names) & set(b_names)):
        ea, eb = a_names[name], b_names[name]
        only_a.remove(ea)
        only_b.remove(eb)
        if ea.tactic != eb.tactic:
            changed.append((ea, eb))
    ad, bd = a.settings.to_dict(), b.settings.to_dict()
    ae, be = a.environment, b.environment
    ai, bi = (
        {"backend": ae.backend, **ae.identity_dict()},
        {"backend": be.backend, **be.identity_dict()},
    )
    aa, ba = ae.advisory_dict(), be.advisory_dict()
    return LockDiff(
        added=only_b,
        removed=only_a,
        changed=sorted(changed, key=lambda p: (p[1].layer, p[1].key)),
        settings_changed=[k for k in {**ad, **bd} if ad.get(k) != bd.get(k)],
        model_changed=a.model.sha256 != b.model.sha256,
        environment_changed=sorted(k for k in {*ai, *bi} if ai.get(k) != bi.get(k)),
        advisory_changed=sorted(k for k in {*aa, *ba} if aa.get(k) != ba.get(k)),
        precision_changed=plan_changes(a.precision, b.precision),
    )


def _unique_names(entries: list[LayerEntry]) -> dict[str, LayerEntry]:
    counts: dict[str, int] = {}
    for e in entries:
        counts[e.layer] = counts.get(e.layer, 0) + 1
    return {e.layer: e for e in entries if counts[e.layer] == 1}
