"""A recording's near-ties: the rule's choice per key, written back and rebuilt from the cache.

TensorRT has already chosen (the fastest as measured) when the recording build ends. So
the workflow reads every key's candidates and times (the verbose log's table; the
reference backend also reports each candidate's runs), lets :mod:`reprobuild.tiebreak`
decide, and, where edits are proven honoured (:func:`.probe_store.edit_policy`: a stored
``doctor --probe`` answer for this target, or ``--apply-tie-rule``), writes the rule's tactic
with ``update()`` where it differs from the builder's and builds again from that cache,
checked like any pinned build (cache map and engine kernels; the report counts the keys it
timed). Otherwise on TensorRT the rule's choices are only reported (``held_back``, and
``edit_policy`` says why): see :mod:`.record`. The reference builder applies the same rule
to the same costs while it times, so there it agrees and nothing is written back. With
``tie_band`` 0 nothing is decided and nothing is rebuilt.

With ``tie_records`` N > 1 (``build --records N``) the decision pools N recording builds,
each from an empty cache: a candidate's runs are its runs in every recording that timed its
key, so its cost is its fastest sane time in any of them, and a burst of load in one recording no
longer lifts a candidate out of the band. The engine and the lock's keys stay those of the
first recording; the others only lend their times. Where one time per candidate is logged
(TensorRT), the spread between recordings is the measured noise the report gives.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from reprobuild.lock.model import LayerEntry
from reprobuild.lock.rules import check_candidates
from reprobuild.tiebreak import OUTLIER_BELOW, TieCandidate, TieDecision, decide, describe_policy
from reprobuild.types import DEFAULT_TIE_BAND, LOG_TIE_BAND, BuildSettings
from reprobuild.workflow.probe_store import EditPolicy

MEASURED_RUNS = (
    "each candidate's timed runs on the builder's clock (the reference builder: CPU time, in "
    "rounds of up to avg_timing_iterations runs each, then settling rounds for the candidates "
    "near the band's edge): cost = the fastest run, leaving out runs more than "
    f"{OUTLIER_BELOW:g}x below the median run; noise (reported, not used) = median over "
    "candidates of (second-fastest - fastest) / fastest"
)
MEASURED_LOG = (
    "one time per candidate from the verbose log (the builder's average over "
    "avg_timing_iterations runs): no spread measured, the band is tie_band alone; "
    "`reprobuild stability --records N` measures it across recordings"
)


def measured_pooled(text: str, recordings: int) -> str:
    """How the band was measured when ``recordings`` recording builds were pooled."""
    return (
        f"{recordings} recording builds, each from an empty timing cache, pooled: a "
        "candidate's runs are its runs in every recording that timed its key, its cost the "
        f"fastest sane one of them; noise = the spread between its runs. Per recording: {text}"
    )


@dataclass
class TieOutcome:
    """What the rule did to one recording: its decisions per key and the rebuild."""

    settings: BuildSettings
    decisions: dict[str, TieDecision]
    layers: dict[str, str]  # key -> layer name
    measured: str
    band: float  # the band used: the setting, or LOG_TIE_BAND (see decide_recording)
    recordings: int = 1  # recording builds pooled (build --records N)
    # with recordings > 1: each key's candidates with their pooled runs (for the report)
    pooled: dict[str, list[TieCandidate]] = field(default_factory=dict)
    rebuilt: bool = False
    second_build_timed: int | None = None
    moved: list[str] = field(default_factory=list)  # keys whose tactic the rule changed
    # of ``moved``: keys whose builder's choice a kernel rule denies (always written back)
    denied: list[str] = field(default_factory=list)
    # keys the rule would move but that were not written back (edits not proven honoured on
    # this backend, or the rebuild failed): the builder's choice is kept for them
    held_back: list[str] = field(default_factory=list)
    fallback: str | None = None  # why the rule's rebuild failed and the builder's choice stays
    policy: str | None = None  # why the rule's choices are written back or held back

    def to_json(self) -> dict[str, Any]:
        head = describe_policy(self.band, self.settings.tie_rule, self.measured)
        return {
            **head,
            "recordings": self.recordings,
            "keys": len(self.decisions),
            "near_ties": sum(1 for d in self.decisions.values() if d.near_tie),
            "changed_from_fastest": sum(
                1 for d in self.decisions.values() if d.chosen != d.fastest
            ),
            "written_back": len(self.moved),
            # only where a kernel rule moved keys (other reports keep the fields they had)
            **({"denied_written_back": len(self.denied)} if self.denied else {}),
            "held_back": len(self.held_back),
            "fallback": self.fallback,
            "edit_policy": self.policy,
            "rebuilt_from_cache": self.rebuilt,
            "second_build_timed": self.second_build_timed,
            "layers": [
                {"layer": self.layers.get(k, "?"), "key": k, **d.to_json(), **self._runs(k)}
                for k, d in sorted(self.decisions.items())
            ],
        }

    def _runs(self, key: str) -> dict[str, Any]:
        if key not in self.pooled:
            return {}
        return {"runs_ms": {f"0x{c.tactic:x}": list(c.runs) for c in self.pooled[key]}}


def candidates_by_key(
    records: list[Any], autotune: dict[str, Any] | None
) -> tuple[dict[str, list[TieCandidate]], dict[str, str], bool]:
    """Each logged key's candidates with their runs: the backend's per-candidate runs where
    it reports them (``autotune.layers[].candidates[].times_ms``), else the log's cost.
    Also the layer name per key, and whether any candidate had repeated runs."""
    runs: dict[tuple[str, str], list[float]] = {}
    for entry in (autotune or {}).get("layers") or []:
        for c in entry.get("candidates") or []:
            if c.get("times_ms"):
                runs[(entry["key"], c["kernel"])] = [float(t) for t in c["times_ms"]]
    out: dict[str, list[TieCandidate]] = {}
    names: dict[str, str] = {}
    repeated = False
    for rec in records:
        if rec.key is None or rec.from_cache or not rec.candidates:
            continue
        cands = []
        for c in rec.candidates:
            times = runs.get((rec.key, c.kernel or ""))
            if times is None:
                times = [] if c.cost_ms is None else [float(c.cost_ms)]
            repeated = repeated or len(times) > 1
            cands.append(TieCandidate(c.tactic_hash, c.kernel, tuple(times)))
        out[rec.key] = cands
        names[rec.key] = rec.layer
    return out, names, repeated


RecordingTimes = tuple[list[Any], "dict[str, Any] | None"]
"""One recording build's log records and its backend's ``autotune`` data."""


def pool(
    base: dict[str, list[TieCandidate]], others: list[dict[str, list[TieCandidate]]]
) -> dict[str, list[TieCandidate]]:
    """``base``'s keys and candidates, each candidate with its runs in every recording
    (base first) that timed the key and the candidate. A key or a candidate that only
    another recording made is left out: the engine is built from the base's keys."""
    out = {}
    for key, cands in base.items():
        more: dict[int, list[float]] = {}  # tactic -> its runs in the others, in order
        for other in others:
            for o in other.get(key, ()):
                more.setdefault(o.tactic, []).extend(o.runs)
        out[key] = [
            TieCandidate(c.tactic, c.kernel, (*c.runs, *more.get(c.tactic, ()))) for c in cands
        ]
    return out


def decide_recording(
    records: list[Any],
    autotune: dict[str, Any] | None,
    settings: BuildSettings,
    more: list[RecordingTimes] | None = None,
) -> TieOutcome:
    """The rule's decision for every timed key of one recording build, its candidates' runs
    pooled with those of ``more`` recordings of the same model (``build --records N``)."""
    by_key, names, repeated = candidates_by_key(records, autotune)
    band = settings.tie_band
    if not repeated and band == DEFAULT_TIE_BAND:  # one averaged time per candidate
        band = LOG_TIE_BAND
    measured = MEASURED_RUNS if repeated else MEASURED_LOG
    pooled: dict[str, list[TieCandidate]] = {}
    if more:
        by_key = pooled = pool(by_key, [candidates_by_key(r, a)[0] for r, a in more])
        measured = measured_pooled(measured, 1 + len(more))
    decisions = {}
    for key, cands in by_key.items():
        # a denied candidate is never the choice (``reprobuild deny``): the rule and the
        # fastest are taken among the others; none left is a refusal naming the rule
        check_candidates(settings, names[key], cands)
        cands = settings.allowed(names[key], cands)
        d = decide(cands, band, settings.tie_rule)
        if d is not None:
            decisions[key] = d
    return TieOutcome(settings, decisions, names, measured, band, 1 + len(more or []), pooled)


def noise_warning(outcome: TieOutcome) -> str | None:
    """A warning when the noise measured across pooled recordings is wider than the band:
    independent recordings may then still disagree (the band is not widened by it, see
    :mod:`reprobuild.tiebreak`)."""
    if outcome.recordings < 2 or outcome.band <= 0:
        return None
    noise = [d.noise_rel for d in outcome.decisions.values() if d.noise_rel is not None]
    if not noise:
        return None
    median = statistics.median(noise)  # as tiebreak.measured_noise takes it per key
    if median <= outcome.band:
        return None
    return (
        f"the {outcome.recordings} recordings' times differ by {100 * median:.0f} % (median over "
        f"keys), more than the tie band ({100 * outcome.band:g} %): independent recordings may "
        f"still disagree; a wider --tie-band (e.g. {min(1.0, 2 * median):.2f}) covers it"
    )


def apply_to_entries(
    entries: list[LayerEntry], outcome: TieOutcome, policy: EditPolicy | None = None
) -> list[LayerEntry]:
    """Entries with the rule's tactic, the band and the near-ties; the keys whose tactic
    changed are listed in ``outcome.moved``. Where ``policy`` does not write (edits not
    proven honoured: :func:`.probe_store.edit_policy`) the builder's tactic stays and those
    keys are listed in ``outcome.held_back`` (reported, not written); ``outcome.policy`` says
    why either way.

    A moved key keeps its recorded time, as a pin does: the cached time is what the builder
    compares between a layer's keys, so an edit changes which kernel a key runs, never
    which key wins (docs/tensorrt.md, "The tie rule on TensorRT").

    A key whose builder's choice a kernel rule denies is always moved (and listed in
    ``outcome.denied`` too): to the rule's choice among the allowed candidates, or, where
    the rule's choices are not written, to the fastest allowed one, as the builder would
    have chosen without the denied tactic."""
    write = policy is None or policy.write
    if policy is not None:
        outcome.policy = policy.why
    for e in entries:
        d = outcome.decisions.get(e.key)
        if d is None:
            continue
        if d.near_tie:
            e.band_ms, e.ties = d.band_ms, list(d.ties)
        if outcome.settings.denying(e.layer, e.kernel, e.tactic) is not None:
            e.tactic = d.chosen if write and outcome.band > 0 else d.fastest
            e.kernel = next((c.kernel for c in e.candidates if c.tactic == e.tactic), None)
            outcome.moved.append(e.key)
            outcome.denied.append(e.key)
            continue
        if outcome.band > 0 and d.chosen != e.tactic:
            if not write:
                outcome.held_back.append(e.key)
                continue
            e.tactic = d.chosen
            e.kernel = next((c.kernel for c in e.candidates if c.tactic == d.chosen), e.kernel)
            outcome.moved.append(e.key)
    return entries
