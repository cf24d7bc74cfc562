"""Comparing two builder logs of the same model: which layers chose another tactic.

Works on ``RecordSummary`` (a record without its candidate list) so that two multi-GB logs
can be compared while holding only one small object per record.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from reprobuild.logs.records import TacticRecord

__all__ = ["LogDiff", "RecordSummary", "diff_records"]


@dataclass(frozen=True)
class RecordSummary:
    """What ``diff`` compares: a record without its candidate list (keeps memory small)."""

    layer: str
    key: str | None
    chosen: int | None
    chosen_kernel: str | None
    runner: str | None
    from_cache: bool
    line: int
    formats: str | None

    @classmethod
    def of(cls, rec: TacticRecord) -> RecordSummary:
        return cls(
            rec.layer,
            rec.key,
            rec.chosen,
            rec.chosen_kernel,
            rec.runner,
            rec.from_cache,
            rec.line,
            rec.formats,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "key": self.key,
            "line": self.line,
            "chosen": None if self.chosen is None else f"0x{self.chosen:x}",
            "chosen_kernel": self.chosen_kernel,
            "runner": self.runner,
            "from_cache": self.from_cache,
            "formats": self.formats,
        }


@dataclass
class LogDiff:
    """Layers whose chosen tactic differs between two logs of the same model."""

    matched_by: str  # "key" when both logs have timing-cache keys, else "layer"
    compared: int
    changed: list[tuple[RecordSummary, RecordSummary]]
    only_a: list[RecordSummary]
    only_b: list[RecordSummary]

    @property
    def same(self) -> bool:
        return not (self.changed or self.only_a or self.only_b)


def _identities(
    recs: list[RecordSummary], use_keys: bool
) -> list[tuple[tuple[str, str, int], RecordSummary]]:
    """Match keys: the timing-cache key when usable, else layer name + occurrence index.

    The occurrence index pairs the n-th record of a layer in one log with the n-th in the
    other: runner logs print one record per format combination, and the editable cache
    gives identical layers separate keys but the same name.
    """
    seen: dict[tuple[str, str], int] = {}
    out = []
    for r in recs:
        base = ("key", r.key) if (use_keys and r.key is not None) else ("layer", r.layer)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append(((base[0], base[1], n), r))
    return out


def diff_records(a: Iterable[TacticRecord], b: Iterable[TacticRecord]) -> LogDiff:
    """Compare chosen tactics (as integers) of two record streams."""
    sa = [RecordSummary.of(r) for r in a]
    sb = [RecordSummary.of(r) for r in b]
    use_keys = any(r.key for r in sa) and any(r.key for r in sb)
    ia = _identities(sa, use_keys)
    ib = dict(_identities(sb, use_keys))
    changed: list[tuple[RecordSummary, RecordSummary]] = []
    only_a: list[RecordSummary] = []
    compared = 0
    for ident, ra in ia:
        rb = ib.pop(ident, None)
        if rb is None:
            only_a.append(ra)
            continue
        compared += 1
        if ra.chosen != rb.chosen:
            changed.append((ra, rb))
    only_b = sorted(ib.values(), key=lambda r: r.line)
    return LogDiff("key" if use_keys else "layer", compared, changed, only_a, only_b)
