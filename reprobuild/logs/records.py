"""What the log parser produces: one record per autotuning decision, and warnings.

These are the values that cross from ``logs`` to the rest of reprobuild (the workflow turns
records into lock entries, the CLI prints them), so they hold plain data and a ``to_json``
whose fields ``reprobuild log --json`` promises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from reprobuild.logs.layermodel import EngineLayer
from reprobuild.logs.values import json_float

__all__ = ["Candidate", "LogWarning", "ParseResult", "TacticRecord"]


class Candidate(NamedTuple):
    """One timed tactic. ``tactic_id`` exists only in sorted tables (editable/Myelin).

    A tuple because logs hold millions of them.
    """

    tactic_id: int | None
    tactic_hash: int
    kernel: str | None
    cost_ms: float | None
    runner: str | None = None

    @property
    def tactic_hex(self) -> str:
        return f"0x{self.tactic_hash:x}"

    def to_json(self) -> dict[str, Any]:
        return {
            "tactic_id": self.tactic_id,
            "tactic_hash": self.tactic_hex,
            "kernel": self.kernel,
            "cost_ms": json_float(self.cost_ms),
            "runner": self.runner,
        }


@dataclass(slots=True)
class TacticRecord:
    """One autotuning decision: a layer (per format combination in runner logs).

    ``chosen`` is the tactic hash TensorRT selected (None when the log does not say, e.g.
    a block cut off before its ``Chose Runner Type`` line). ``line`` is the 1-based line
    where the block starts; ``formats`` the format combination when the log prints one.
    """

    layer: str
    key: str | None
    onnx_layers: tuple[str, ...]
    candidates: list[Candidate]
    chosen: int | None
    chosen_kernel: str | None
    chosen_cost_ms: float | None
    from_cache: bool
    runner: str | None
    line: int
    format: str
    formats: str | None = None

    @property
    def chosen_hex(self) -> str | None:
        return None if self.chosen is None else f"0x{self.chosen:x}"

    def candidate(self, tactic_hash: int) -> Candidate | None:
        """The candidate with this hash (compared as an integer), if it was timed."""
        for c in self.candidates:
            if c.tactic_hash == tactic_hash:
                return c
        return None

    def to_json(self, *, candidates: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "layer": self.layer,
            "key": self.key,
            "onnx_layers": list(self.onnx_layers),
            "format": self.format,
            "formats": self.formats,
            "line": self.line,
            "runner": self.runner,
            "from_cache": self.from_cache,
            "chosen": self.chosen_hex,
            "chosen_kernel": self.chosen_kernel,
            "chosen_cost_ms": json_float(self.chosen_cost_ms),
            "num_candidates": len(self.candidates),
        }
        if candidates:
            d["candidates"] = [c.to_json() for c in self.candidates]
        return d


@dataclass(frozen=True, slots=True)
class LogWarning:
    """A timing-cache message worth showing a user, with its 1-based line number.

    Kinds: ``cache-loaded``, ``cache-in-use``, ``cache-local``, ``cache-not-used``,
    ``cache-invalid``, ``cache-error``, ``cache-miss``, ``cache-serialized``, and
    ``parser-error`` (a build's log the parser failed on: ``workflow.pinned.LogCollector``).
    """

    line: int
    kind: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "kind": self.kind, "message": self.message}


@dataclass
class ParseResult:
    """A whole log read at once (``parse_file``); ``lines`` counts every line read."""

    records: list[TacticRecord]
    warnings: list[LogWarning]
    engine_layers: list[EngineLayer]
    source: str | None = None
    lines: int = 0
    warnings_dropped: int = 0
