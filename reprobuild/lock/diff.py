"""Comparing two locks: the one definition of "the same lock", under ``reprobuild diff``
and ``reprobuild merge`` alike (:func:`diff_locks`; ``LockDiff.differs``).

Two locks are the same when everything that decides the engine and its bits is: the model
(and its external data), the builder settings (the kernel rules included: they decide which
candidates a build may keep), the precision plan (two INT8 locks with the
same tactics but another scale build other bits: :mod:`.plandiff`), the target's identity,
every entry (:func:`entry_changes`: its fields, less :data:`NOT_COMPARED`), which key each
layer of several keys runs (:func:`ran_keys`), and the recorded output digests.

Entries match by timing-cache key; across environments (a new GPU gives every layer a new
key) they fall back to matching by layer name where the name is unique on both sides.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from reprobuild.lock.model import LayerEntry, Lock, OutputDigest, by_layer
from reprobuild.lock.plandiff import PlanChange, plan_changes
from reprobuild.types import KernelRule

NOT_COMPARED: dict[str, str] = {
    "key": "entries are paired by it (or, across environments, by their unique layer name)",
    "band_ms": "the recording's noise, not a choice: two recordings of one engine differ here",
    "ties": "the tactics timed within the band: noise too; the choice is ``tactic``",
}
""":class:`LayerEntry` fields that do not decide the engine, and why. Every other field is
compared, so a field added to ``LayerEntry`` counts unless it is listed here; ``candidates``
are compared as a set (their order is how they were written), and ``time_ms`` only where
the layer has more than one key (there the keys' times decide which one runs; a single
key's time decides nothing)."""


def entry_changes(a: LayerEntry, b: LayerEntry, several_keys: bool) -> list[str]:
    """The names of the fields in which two entries of one key differ (see
    :data:`NOT_COMPARED`); ``several_keys``: the layer has more than one key."""
    out = []
    for f in fields(LayerEntry):
        if f.name in NOT_COMPARED or (f.name == "time_ms" and not several_keys):
            continue
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if f.name == "candidates":
            va, vb = set(va), set(vb)
        if va != vb:
            out.append(f.name)
    return out


def ran_keys(layers: Iterable[LayerEntry]) -> dict[str, str]:
    """Which key each layer of several keys runs: the one the lock records as run where it
    records one, else the lowest recorded time (the builder's rule; the first on a tie).
    Layers of one key are left out: there is no choice to make."""
    out = {}
    for layer, entries in by_layer(layers).items():
        if len(entries) < 2:
            continue
        recorded = [e for e in entries if e.runs]  # a recorded choice
        out[layer] = (recorded or [min(entries, key=_time)])[0].key
    return out


def engine_of(layers: Iterable[LayerEntry]) -> dict[str, tuple[str, int, str | None]]:
    """What the engine runs, per layer: the key (its format combination), tactic and kernel;
    for a layer of several keys the one it runs (:func:`ran_keys`). Two locks with equal
    maps build the same engine from the same model and settings."""
    entries = list(layers)
    ran = ran_keys(entries)
    return {
        e.layer: (e.key, e.tactic, e.kernel) for e in entries if ran.get(e.layer, e.key) == e.key
    }


def _time(e: LayerEntry) -> float:
    return math.inf if e.time_ms is None or math.isnan(e.time_ms) else e.time_ms


@dataclass
class KeyChoice:
    """A layer of several keys that runs another key in ``b`` than in ``a``."""

    layer: str
    key_a: str | None
    key_b: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class OutputChange:
    """Inputs whose recorded output digest differs, or is recorded on one side only."""

    inputs: str
    sha256_a: str | None
    sha256_b: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def in_band(a: LayerEntry, b: LayerEntry) -> bool | None:
    """Was a changed tactic a draw inside the tie band (noise) rather than a real change?
    True when either recording timed the other's tactic within its band of the best; None
    when neither entry recorded a near-tie (a clear winner, or a lock older than the band)."""
    if not a.ties and not b.ties:
        return None
    return b.tactic in a.ties or a.tactic in b.ties


@dataclass
class EntryChange:
    """One key (or, across environments, one uniquely named layer) on both sides, with the
    compared fields in which it differs (:func:`entry_changes`)."""

    a: LayerEntry
    b: LayerEntry
    fields: list[str]

    @property
    def tactic_in_band(self) -> bool | None:
        """:func:`in_band` for a changed tactic; None where the tactic did not change."""
        return in_band(self.a, self.b) if "tactic" in self.fields else None

    @property
    def label(self) -> str:
        """What the change is: ``pinned`` (B pins it: a deliberate choice, whatever the
        band says), else ``noise (in band)`` for a tactic moved inside the recorded tie
        band, else ``real``."""
        if self.b.pinned:
            return "pinned"
        return "noise (in band)" if self.tactic_in_band else "real"


@dataclass
class LockDiff:
    added: list[LayerEntry]
    removed: list[LayerEntry]
    changed: list[EntryChange]
    settings_changed: list[str]
    model_changed: bool
    environment_changed: list[str]  # identity fields: the two locks' targets differ
    precision_changed: list[PlanChange] = field(default_factory=list)
    advisory_changed: list[str] = field(default_factory=list)  # shown, not a difference
    key_choice_changed: list[KeyChoice] = field(default_factory=list)
    outputs_changed: list[OutputChange] = field(default_factory=list)
    # kernel rules (``settings.deny``) only in b / only in a: a settings change (``deny``
    # is then in ``settings_changed``), listed rule by rule
    rules_added: list[KernelRule] = field(default_factory=list)
    rules_removed: list[KernelRule] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        """The one answer to "are these locks the same?" (``diff`` exits 1 on it, ``merge``
        refuses two sections of one target on it)."""
        return bool(
            self.added
            or self.removed
            or self.changed
            or self.settings_changed
            or self.model_changed
            or self.environment_changed
            or self.precision_changed
            or self.key_choice_changed
            or self.outputs_changed
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
                    "layer": c.b.layer,
                    "key_a": c.a.key,
                    "key_b": c.b.key,
                    "fields": c.fields,
                    "tactic_a": f"0x{c.a.tactic:x}",
                    "tactic_b": f"0x{c.b.tactic:x}",
                    "kernel_a": c.a.kernel,
                    "kernel_b": c.b.kernel,
                    "time_ms_a": c.a.time_ms,
                    "time_ms_b": c.b.time_ms,
                    "pinned_b": c.b.pinned,
                    "change": c.label,
                    # only for a tactic change where either side recorded near-ties
                    # (docs/stability.md)
                    **({} if (v := c.tactic_in_band) is None else {"in_band": v}),
                }
                for c in self.changed
            ],
            "key_choice_changed": [k.to_json() for k in self.key_choice_changed],
            "outputs_changed": [o.to_json() for o in self.outputs_changed],
            "model_changed": self.model_changed,
            "settings_changed": self.settings_changed,
            "environment_changed": self.environment_changed,
            "advisory_changed": self.advisory_changed,
            "precision_changed": [c.to_json() for c in self.precision_changed],
            # only where the kernel rules differ (other diffs keep the fields they had)
            **(
                {
                    "rules_added": [r.to_dict() for r in self.rules_added],
                    "rules_removed": [r.to_dict() for r in self.rules_removed],
                }
                if self.rules_added or self.rules_removed
                else {}
            ),
        }


def diff_locks(a: Lock, b: Lock) -> LockDiff:
    """Compare the active targets of two locks (see the module docstring). Entries match by
    key; then, across environments (keys all differ), by unique name."""
    several = _several_keys(a.layers) | _several_keys(b.layers)
    bkeys = b.by_key()
    pairs: list[tuple[LayerEntry, LayerEntry]] = []
    only_a: list[LayerEntry] = []
    for e in a.layers:
        other = bkeys.get(e.key)
        if other is None:
            only_a.append(e)
        else:
            pairs.append((e, other))
    matched_b = {eb.key for _, eb in pairs}
    only_b = [e for e in b.layers if e.key not in matched_b]
    # Fallback by layer name, only where the name is unique on both sides.
    a_names = _unique_names(only_a)
    b_names = _unique_names(only_b)
    for name in sorted(set(a_names) & set(b_names)):
        ea, eb = a_names[name], b_names[name]
        only_a.remove(ea)
        only_b.remove(eb)
        pairs.append((ea, eb))
    changed = [
        EntryChange(ea, eb, what)
        for ea, eb in pairs
        if (what := entry_changes(ea, eb, ea.layer in several or eb.layer in several))
    ]
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
        changed=sorted(changed, key=lambda c: (c.b.layer, c.b.key)),
        settings_changed=[k for k in {**ad, **bd} if ad.get(k) != bd.get(k)],
        model_changed=(a.model.sha256, a.model.external_data)
        != (b.model.sha256, b.model.external_data),
        environment_changed=sorted(k for k in {*ai, *bi} if ai.get(k) != bi.get(k)),
        advisory_changed=sorted(k for k in {*aa, *ba} if aa.get(k) != ba.get(k)),
        precision_changed=plan_changes(a.precision, b.precision),
        key_choice_changed=_key_choices(a.layers, b.layers),
        outputs_changed=_output_changes(a.outputs, b.outputs),
        rules_added=sorted(set(b.settings.deny) - set(a.settings.deny)),
        rules_removed=sorted(set(a.settings.deny) - set(b.settings.deny)),
    )


def _several_keys(layers: list[LayerEntry]) -> set[str]:
    return {name for name, n in Counter(e.layer for e in layers).items() if n > 1}


def _key_choices(a: list[LayerEntry], b: list[LayerEntry]) -> list[KeyChoice]:
    ra, rb = ran_keys(a), ran_keys(b)
    return [
        KeyChoice(layer, ra.get(layer), rb.get(layer))
        for layer in sorted({*ra, *rb})
        if ra.get(layer) != rb.get(layer)
    ]


def _output_changes(a: list[OutputDigest], b: list[OutputDigest]) -> list[OutputChange]:
    da, db = {o.inputs: o.sha256 for o in a}, {o.inputs: o.sha256 for o in b}
    return [
        OutputChange(inputs, da.get(inputs), db.get(inputs))
        for inputs in sorted({*da, *db})
        if da.get(inputs) != db.get(inputs)
    ]


def _unique_names(entries: list[LayerEntry]) -> dict[str, LayerEntry]:
    counts = Counter(e.layer for e in entries)
    return {e.layer: e for e in entries if counts[e.layer] == 1}
