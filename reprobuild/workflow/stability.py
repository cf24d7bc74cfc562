"""``stability``: record a model N times independently and say which layers hold still.

Each recording is a whole recording build (its own lock, engine, report and cache folder,
in a temporary folder), so no recording sees another's timing cache: N machines of one
target recording on their own. Per timing-cache key: the tactic each recording kept, the
flip rate (the share of recordings that kept another than the most common one), the best
and second-best times, the band, whether the rule's choice held in every recording, and
whether the key is *at risk*: it flipped, or in some recording a candidate the rule would
take before its choice lay near the band's edge (``tiebreak.unsure``), where a noisier
machine could move it across; candidates after the choice in the rule's order never can.

Key agreement is not yet what users ship: a layer of several keys (format combinations)
runs one of them, so recordings that agree on every key's tactic can still build different
engines. So the report also counts, over the recordings, the distinct *engines* (per layer:
the key it runs, its tactic and kernel; :func:`~reprobuild.lock.diff.engine_of`) and the
distinct recorded *output digests* (the bits the engine gave on seeded inputs).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.backends.base import Backend
from reprobuild.events import Progress, Step, quiet
from reprobuild.lock.diff import engine_of
from reprobuild.lock.model import Lock
from reprobuild.lock.yamlio import load_lock
from reprobuild.tiebreak import TieCandidate, unsure
from reprobuild.types import MAX_TIE_RECORDS, BuildSettings


@dataclass
class KeyStability:
    """One key across the recordings."""

    layer: str
    key: str
    chosen: list[int | None]  # per recording (None: the key was not recorded there)
    fastest: list[int | None]
    best_ms: float | None
    second_ms: float | None
    band_ms: float | None
    band_rel: float | None
    at_risk: bool
    # per candidate tactic: in each recording that timed it, how far its cost lay above
    # the key's best in that same recording (0.1: 10 % above), as the band is (for the plot)
    above_best: dict[int, list[float]] = field(default_factory=dict)
    kernels: dict[int, str | None] = field(default_factory=dict)
    # per recording: whether its layer ran this key (None: not recorded there)
    ran: list[bool | None] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return len(set(self.chosen)) == 1 and self.chosen[0] is not None

    @property
    def flip_rate(self) -> float:
        most = Counter(self.chosen).most_common(1)[0][1]
        return 1.0 - most / len(self.chosen)

    @property
    def fastest_flip_rate(self) -> float:
        most = Counter(self.fastest).most_common(1)[0][1]
        return 1.0 - most / len(self.fastest)

    def to_json(self) -> dict[str, Any]:
        def hx(t: int | None) -> str | None:
            return None if t is None else f"0x{t:x}"

        return {
            "layer": self.layer,
            "key": self.key,
            "held": self.held,
            "flip_rate": self.flip_rate,
            "fastest_flip_rate": self.fastest_flip_rate,
            "chosen": [hx(t) for t in self.chosen],
            "best_ms": self.best_ms,
            "second_ms": self.second_ms,
            "band_ms": self.band_ms,
            "band_rel": self.band_rel,
            "at_risk": self.at_risk,
            "ran": self.ran,
        }


@dataclass
class StabilityReport:
    model: str
    records: int
    backend: str
    settings: BuildSettings
    keys: list[KeyStability]
    recording_s: list[float]
    total_s: float
    # per recording: what it ships (engine_of its lock) and its recorded output digests
    engines: list[dict[str, tuple[str, int, str | None]]] = field(default_factory=list)
    digests: list[tuple[tuple[str, str], ...]] = field(default_factory=list)

    @property
    def agreement(self) -> float:
        """The share of keys whose tactic every recording kept the same."""
        return sum(k.held for k in self.keys) / len(self.keys) if self.keys else 1.0

    @property
    def at_risk(self) -> list[KeyStability]:
        return [k for k in self.keys if k.at_risk]

    @property
    def engine_ids(self) -> list[int]:
        """Per recording, its engine's number (0, 1, ... in order of first appearance)."""
        return _ids([tuple(sorted(e.items())) for e in self.engines])

    @property
    def digest_ids(self) -> list[int | None]:
        """Per recording, its output digests' number; None where it recorded none."""
        ids = _ids([d for d in self.digests if d])
        it = iter(ids)
        return [next(it) if d else None for d in self.digests]

    @property
    def distinct_engines(self) -> int:
        return len(set(self.engine_ids))

    @property
    def distinct_digests(self) -> int:
        return len({i for i in self.digest_ids if i is not None})

    @property
    def engine_layers(self) -> list[str]:
        """The layers that run another key, tactic or kernel in some recording."""
        names = sorted({name for e in self.engines for name in e})
        return [n for n in names if len({e.get(n) for e in self.engines}) > 1]

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "records": self.records,
            "backend": self.backend,
            "tie_band": self.settings.tie_band,
            "tie_rule": self.settings.tie_rule,
            "keys": len(self.keys),
            "agreement": self.agreement,
            "held": sum(k.held for k in self.keys),
            "layers_at_risk": [k.layer for k in self.at_risk],
            "distinct_engines": self.distinct_engines,
            "distinct_output_digests": self.distinct_digests,
            "recording_engine": self.engine_ids,
            "recording_output_digest": self.digest_ids,
            "engine_layers_differ": self.engine_layers,
            "recording_s": self.recording_s,
            "total_s": self.total_s,
            "layers": [k.to_json() for k in self.keys],
        }


def stability(
    model: str | os.PathLike[str],
    *,
    records: int = 5,
    backend: str | Backend = "auto",
    settings: BuildSettings | None = None,
    progress: Progress = quiet,
) -> StabilityReport:
    """``records`` independent recordings of ``model``; see the module docstring."""
    from reprobuild.errors import UsageError
    from reprobuild.transaction import working_files
    from reprobuild.workflow.build import build
    from reprobuild.workflow.context import check_model_file

    if not 2 <= records <= MAX_TIE_RECORDS:  # build --records' bound: each is a full build
        raise UsageError(f"--records {records}: stability needs 2 to {MAX_TIE_RECORDS} recordings")
    model = check_model_file(model)  # before the first recording is announced
    settings = settings or BuildSettings()
    t0 = time.perf_counter()
    runs: list[tuple[dict[str, Any], Any]] = []
    durations: list[float] = []
    name = backend if isinstance(backend, str) else backend.name
    with tempfile.TemporaryDirectory(prefix="reprobuild-stability-") as tmp, working_files():
        for i in range(records):
            progress(Step(f"recording {i + 1} of {records} (own cache folder)"))
            here = Path(tmp) / f"r{i}"
            here.mkdir()
            start = time.perf_counter()
            result = build(
                model,
                lock=here / "tactics.lock",
                out=here / "model.engine",
                backend=backend,
                settings=settings,
                cache_dir=here / "caches",
            )
            durations.append(round(time.perf_counter() - start, 3))
            name = result.backend
            report = json.loads((here / "model.engine.report.json").read_text())
            runs.append((report, load_lock(here / "tactics.lock")))
            shutil.rmtree(here)  # read: its engine and cache need not wait for the others
    keys = _per_key(runs, settings)
    locks = [lock for _, lock in runs]
    return StabilityReport(
        str(model), records, name, settings, keys, durations, round(time.perf_counter() - t0, 3),
        [engine_of(lock.layers) for lock in locks], [digests_of(lock) for lock in locks],
    )  # fmt: skip


def digests_of(lock: Lock) -> tuple[tuple[str, str], ...]:
    """The output digests a recording recorded, as one comparable value."""
    return tuple(sorted((o.inputs, o.sha256) for o in lock.outputs))


def _ids(values: list[Any]) -> list[int]:
    seen: dict[Any, int] = {}
    return [seen.setdefault(v, len(seen)) for v in values]


def _per_key(
    runs: list[tuple[dict[str, Any], Lock]], settings: BuildSettings
) -> list[KeyStability]:
    """One row per key, in network order (the order the recordings built the layers)."""
    engines = [engine_of(lock.layers) for _, lock in runs]
    by_key = [lock.by_key() for _, lock in runs]
    layers: dict[str, str] = {}
    for keys in by_key:
        for e in keys.values():
            layers.setdefault(e.key, e.layer)
    order = _network_order([report for report, _ in runs])
    out = []
    for key in sorted(layers, key=lambda k: (order.get(k, len(order)), layers[k], k)):
        layer = layers[key]
        ks = _key_row(key, layer, [report for report, _ in runs], by_key, settings)
        ks.ran = [
            None if keys.get(key) is None else engine[layer][0] == key
            for keys, engine in zip(by_key, engines, strict=True)
        ]
        out.append(ks)
    return out


def _network_order(reports: list[dict[str, Any]]) -> dict[str, int]:
    """Each key's position in the order the builds timed them (the network's order), not
    the lock's (sorted by name: n0, n10, n100, ...)."""
    order: dict[str, int] = {}
    for report in reports:
        for rec in report.get("records") or []:
            order.setdefault(rec.get("key"), len(order))
    return order


def _key_row(
    key: str,
    layer: str,
    reports: list[dict[str, Any]],
    by_key: list[dict[str, Any]],
    settings: BuildSettings,
) -> KeyStability:
    chosen, fastest, best, second, band, rel = [], [], [], [], [], []
    above: dict[int, list[float]] = {}
    kernels: dict[int, str | None] = {}
    risky = False
    for report, keys in zip(reports, by_key, strict=True):
        entry = keys.get(key)
        chosen.append(None if entry is None else entry.tactic)
        d = _decision(report, key)
        fastest.append(None if d is None else int(d["fastest"], 16))
        if d is not None:
            best.append(d["best_ms"])
            if d["second_ms"] is not None:
                second.append(d["second_ms"])
            band.append(d["band_ms"])
            rel.append(d["band_rel"])
        timed: list[TieCandidate] = []
        for rec in report.get("records") or []:
            if rec.get("key") != key or rec.get("from_cache"):
                continue
            for c in rec.get("candidates") or []:
                if c.get("cost_ms") is not None:
                    t = int(c["tactic_hash"], 16)
                    kernels[t] = c.get("kernel")
                    timed.append(TieCandidate(t, c.get("kernel"), (float(c["cost_ms"]),)))
        low = min((c.cost for c in timed), default=0.0)
        for c in timed:
            above.setdefault(c.tactic, []).append(c.cost / low - 1.0 if low > 0 else 0.0)
        # at risk: a candidate the rule would take before its choice sits near the
        # band's edge in this recording (only those can change the choice)
        if d is not None and unsure(timed, d["band_rel"], settings.tie_rule):
            risky = True
    ks = KeyStability(
        layer, key, chosen, fastest, _median(best), _median(second), _median(band),
        _median(rel), False, above, kernels,
    )  # fmt: skip
    ks.at_risk = risky or not ks.held
    return ks


def _decision(report: dict[str, Any], key: str) -> dict[str, Any] | None:
    for row in (report.get("tie_break") or {}).get("layers") or []:
        if row["key"] == key:
            return row
    return None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
