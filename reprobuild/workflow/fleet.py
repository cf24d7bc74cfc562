"""A fleet's two jobs: merging the locks its runners recorded, and checking that every
machine of one target reports the same bits.

No scheduler of our own: a CI matrix runs one job per runner (``build`` records or checks
that runner's target, ``verify --json`` reports its digests); these functions join what
the jobs left behind.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.cachedir import cache_folder
from reprobuild.errors import UsageError
from reprobuild.fileio import exclusive, read_regular
from reprobuild.limits import cap
from reprobuild.lock.model import Lock
from reprobuild.lock.targets import merge
from reprobuild.lock.yamlio import dumps_lock, load_lock
from reprobuild.transaction import (
    Outputs,
    check_distinct,
    check_output_path,
    lock_target,
    same_file,
)

MAX_REPORT_BYTES = 64 << 20  # a verify report with every sensitivity probe is far smaller


def merge_locks(paths: list[str | os.PathLike[str]], out: str | os.PathLike[str]) -> Lock:
    """``reprobuild merge A.lock B.lock ... --out L``: one lock with every target (same
    model, settings and precision plan, else exit 2; one target with two different sections,
    exit 2). ``out`` may be one of the inputs: it is read before anything is written, and
    the file lock on ``out`` is held from that reading to the commit, as every lock writer
    holds it, so a ``pin`` of ``out`` meanwhile is neither lost nor loses the merge."""
    if len(paths) < 1:
        raise UsageError("merge needs at least one lock: reprobuild merge A.lock B.lock --out L")
    check_output_path(lock_target(out, "merged lock"), "merged lock")
    with exclusive(out):
        locks = [(str(p), load_lock(p)) for p in paths]
        for path, lock in locks:
            if any(not t.environment.identity for t in lock.targets()):
                raise UsageError(
                    f"{path}: a target without identity (a schema-1 lock) cannot be merged: its "
                    "bits would be claimed for every machine; upgrade it first on the machine "
                    f"it was recorded on: reprobuild build MODEL --lock {path} (records that "
                    "machine's target, pins kept)"
                )
        models = [(Path(p).parent / lock.model.path, "model") for p, lock in locks]
        # the recording caches beside each input lock, and beside the merged one
        for folder in dict.fromkeys(cache_folder(None, p) for p in [*paths, out]):
            check_distinct([(out, "merged lock")], models, folder)
        merged = merge(locks)
        merged.model.path = _rebased(models[0][0], locks[0][1].model.path, out)
        text = dumps_lock(merged)
        if len(text.encode()) > cap("lock"):  # no command could read it back
            raise UsageError(
                f"{out}: the merged lock would be {len(text.encode()):,} bytes, over the "
                f"{cap('lock'):,}-byte lock limit no command reads past; merge fewer targets "
                "(or raise REPROBUILD_MAX_LOCK_BYTES)"
            )
        with Outputs() as outputs:
            outputs.stage_lock(out, text, "merged lock")
            outputs.commit()
    return merged


@dataclass
class Machine:
    """One ``verify --json`` report: which machine, which target, which bits, and what
    the lock records for that target and those inputs."""

    source: str
    host: str
    target: str
    inputs: str
    tactic_map_sha256: str
    outputs_sha256: str
    recorded_sha256: str | None = None  # None: the lock records no bits for these inputs
    reproducible: bool = True  # the report's own verdict
    why: str = ""  # why the fleet check calls this machine odd ("" while it is not)

    def own_fault(self) -> str:
        """Why this report fails by itself, however many machines agree with it."""
        if self.recorded_sha256 is not None and self.recorded_sha256 != self.outputs_sha256:
            return (
                f"other bits than the lock records (recorded {self.recorded_sha256[:16]}, "
                f"here {self.outputs_sha256[:16]})"
            )
        return "" if self.reproducible else "its own verify found it NOT REPRODUCIBLE"


@dataclass
class Untargeted:
    """A machine whose ``verify --json`` was the refusal of a machine of no recorded
    target (exit 3): listed, not compared."""

    source: str
    host: str
    message: str


@dataclass
class TargetCheck:
    """Every machine of one target and inputs: each must give the lock's recorded bits
    where it records them, and the machines must agree with each other (the majority's
    digests are taken as the group's; a tie names every machine as odd)."""

    target: str
    inputs: str
    machines: list[Machine]
    odd: list[Machine] = field(default_factory=list)

    @property
    def compared_with(self) -> str:
        """``lock`` (the recorded bits), ``machines`` (only each other) or ``nothing``
        (one report and no recorded bits: no check ran)."""
        if any(m.recorded_sha256 is not None for m in self.machines):
            return "lock"
        return "machines" if len(self.machines) > 1 else "nothing"

    @property
    def agree(self) -> bool:
        return not self.odd and self.compared_with != "nothing"

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "inputs": self.inputs,
            "machines": len(self.machines),
            "agree": self.agree,
            "compared_with": self.compared_with,
            "odd": [m.__dict__ for m in self.odd],
            "digests": sorted(
                {(m.inputs, m.tactic_map_sha256, m.outputs_sha256) for m in self.machines}
            ),
        }


def _rebased(model: Path, recorded: str, out: str | os.PathLike[str]) -> str:
    """``model.path`` as seen from the merged lock's folder: it is relative to its lock, so
    a merge into another folder would otherwise point at a file that is not there."""
    if Path(recorded).is_absolute():
        return recorded
    return Path(os.path.relpath(model, Path(out).parent)).as_posix()


@dataclass
class FleetCheck:
    """Every report: the targets' groups and the machines of no recorded target."""

    targets: list[TargetCheck]
    untargeted: list[Untargeted]

    @property
    def agree(self) -> bool:
        return all(c.agree for c in self.targets) and not self.untargeted

    def to_json(self) -> dict[str, Any]:
        return {
            "agree": self.agree,
            "targets": [c.to_json() for c in self.targets],
            "untargeted": [u.__dict__ for u in self.untargeted],
        }


NO_TARGET = "no target for this machine ("


def read_report(path: str | os.PathLike[str]) -> Machine | Untargeted:
    """One ``verify --json`` output (or ``--report`` file), or the JSON refusal of a
    machine of no recorded target; exit 2 naming the file when it is neither."""
    p = Path(path)
    raw = read_regular(p, MAX_REPORT_BYTES, "verify report")
    try:
        doc = json.loads(raw)
        error = doc.get("error")
        if isinstance(error, dict) and NO_TARGET in str(error.get("message")):
            return Untargeted(str(p), p.stem, str(error["message"]))
        fields = [doc[k] for k in ("target", "inputs_label", "tactic_map_sha256", "outputs_sha256")]
        if not all(isinstance(f, str) and f for f in fields):  # null digests agree on nothing
            raise TypeError
        recorded = doc.get("recorded_sha256")
        return Machine(
            str(p),
            str(doc.get("machine", {}).get("host") or p.stem),
            *fields,
            None if recorded is None else str(recorded),
            doc.get("reproducible") is not False,
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise UsageError(
            f"{p}: not a `reprobuild verify --json` report with target digests; give each "
            "machine's `verify --json` output"
        ) from None


def check_fleet(paths: list[str | os.PathLike[str]]) -> FleetCheck:
    """Group reports by target and inputs; a machine is odd when it does not give the
    bits the lock records, or differs from the majority of its group (the multi-GPU and
    multi-rank check). Machines of no recorded target are listed apart."""
    if not paths:
        raise UsageError("fleet needs at least one verify report: reprobuild fleet A.json B.json")
    groups: dict[tuple[str, str], list[Machine]] = {}
    untargeted: list[Untargeted] = []
    for i, p in enumerate(paths):
        twice = next((q for q in paths[:i] if same_file(p, q)), None)
        if twice is not None:  # one machine counted twice would win every vote
            raise UsageError(f"{p}: given twice (also as {twice}); give each report once")
        m = read_report(p)
        if isinstance(m, Untargeted):
            untargeted.append(m)
        else:
            groups.setdefault((m.target, m.inputs), []).append(m)
    checks = []
    for (target, inputs), machines in sorted(groups.items()):
        votes: dict[tuple[str, str], int] = {}
        for m in machines:
            key = (m.tactic_map_sha256, m.outputs_sha256)
            votes[key] = votes.get(key, 0) + 1
        ranked = sorted(votes.values(), reverse=True)
        tie = len(ranked) > 1 and ranked[0] == ranked[1]
        best = max(votes, key=votes.__getitem__)
        for m in machines:
            m.why = m.own_fault() or (
                "differs from the other machines of its target"
                if tie or (m.tactic_map_sha256, m.outputs_sha256) != best
                else ""
            )
        checks.append(TargetCheck(target, inputs, machines, [m for m in machines if m.why]))
    return FleetCheck(checks, untargeted)
