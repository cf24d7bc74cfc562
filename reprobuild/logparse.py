"""Streaming parser for TensorRT builder verbose logs.

The verbose log is the only place where TensorRT says, per autotuned layer, which tactics it
timed, how long each took and which one it chose. Every backend reports through these lines,
so the parser sits on the path of every build and must take whatever a logger produced:
trtexec, the Python logger, application loggers, excerpts with elisions, interleaved lines
and binary noise. Unreadable lines are skipped silently; only an unreadable *file* raises
(``LogParseError``).

Line formats (see ``tests/fixtures/trt-logs/INDEX.md`` for real examples):

- ``editable``: 10.8+ with the editable timing cache: ``Autotuning op NAME(key: 0x..):``,
  a sorted tactic table, ``The selected tactic is (tactic hash, cost(in ms)):0x.., ms`` and
  ``Writing the best tactic (0x..) to cache``. The reference backend prints this format.
- ``myelin``: ``(foreignNode) Autotuning op NAME: [ONNX Layer: ..]`` tables without a key
  or selection line; the table is sorted, so its first row is the choice.
- ``runner`` (8.6-10.x) and ``legacy`` (7.x-8.5): ``Computing costs for`` /
  ``Autotuning format combination`` / ``Timing Runner`` / candidate lines / ``Fastest
  Tactic`` / ``Chose Runner Type``. One record per format combination; the choice is the
  ``Chose Runner Type`` line, which can differ from the last ``Fastest Tactic`` printed.
- ``reformat``: ``Autotuning Reformat`` blocks (no ``Chose`` line: the fastest wins).
- ``cached``: ``<layer> [<in> -> <out>] got cached result: <Runner>, tactic 0x.., <t> ms``.

Lines starting with ``# `` (provenance notes and excerpt separators in fixture files; never
printed by TensorRT) end any open block, so excerpts of unrelated blocks are not merged.

Memory stays flat: the parser holds only the blocks being read, the engine layers of the
most recent engine, and at most ``max_warnings`` warnings; files are read in chunks.

Two implementations: ``LogParser`` below (pure Python; the specification, and what
``feed()`` uses for lines arriving one at a time) and the C scanner
``reprobuild._logscan`` (the same state machine over bytes, used by ``iter_file`` and
``iter_chunks`` when it was built). ASCII semantics throughout (``_WS``, ``re.ASCII``) so
that both read every byte alike; ``tests/test_logscan.py`` holds them to identical output.
One known difference: a line longer than ``_MAX_LINE`` (1 MiB; only binary noise is) is cut
to its first 1 MiB of bytes by the scanner and of characters here.
"""

from __future__ import annotations

import codecs
import itertools
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from reprobuild.errors import LogParseError
from reprobuild.layerinfo import EngineLayer, split_onnx_layers, tactic_to_int

__all__ = [
    "Candidate",
    "LogDiff",
    "diff_records",
    "LogParser",
    "LogWarning",
    "ParseResult",
    "RecordSummary",
    "TacticRecord",
    "iter_chunks",
    "iter_file",
    "native_available",
    "parse_file",
    "parse_lines",
    "parse_tactic",
]

_CHUNK = 1 << 17  # bytes per read: small enough that the scanner finds them still in cache
_MAX_LINE = 1 << 20  # longer lines are truncated (binary noise without newlines)
_MAX_CANDIDATES = 100_000  # per block; real blocks hold a few hundred
_MAX_ORPHANS = 4096  # candidate lines seen outside any block (excerpts starting mid-block)
_MAX_ENGINE_LAYERS = 100_000
_U64 = 1 << 64


def parse_tactic(text: str) -> int:
    """A tactic hash as an int: ``0x..`` hex (any padding) or signed decimal (7.x/8.0).

    Negative decimals are the signed print of the same unsigned 64-bit value, so they are
    returned in two's complement: ``parse_tactic("-1") == 0xFFFFFFFFFFFFFFFF``.
    """
    value = tactic_to_int(text)
    if value is None:
        raise LogParseError(
            f"{text!r} is not a tactic: write it as 0x<hex> or a 64-bit decimal integer"
        )
    return value


def _tac(tok: str) -> int | None:
    """Hot-path twin of ``tactic_to_int`` for tokens already cut out of a line."""
    try:
        value = int(tok, 16) if tok[:2] in ("0x", "0X") else int(tok, 10)
    except ValueError:
        return None
    if value < 0:
        value = value + _U64 if value >= -(1 << 63) else -1
    return value if 0 <= value < _U64 else None


def _float(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return float(text.rstrip(",;"))
    except ValueError:
        return None


class _TupleCandidate(NamedTuple):
    """One timed tactic. ``tactic_id`` exists only in sorted tables (editable/Myelin).

    Where the C extension is built, ``Candidate`` is its type instead
    (``reprobuild._logscan.Candidate``): the same fields, ``tactic_hex``, ``to_json``,
    equality and hashing, in an object that costs a fraction of a tuple subclass to make
    and free (logs hold millions). This one is the fallback.
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
            "cost_ms": _json_float(self.cost_ms),
            "runner": self.runner,
        }


Candidate: Any
try:
    from reprobuild._logscan import Candidate  # type: ignore[attr-defined,no-redef]
except ImportError:  # no C compiler at install time
    Candidate = _TupleCandidate


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
            "chosen_cost_ms": _json_float(self.chosen_cost_ms),
            "num_candidates": len(self.candidates),
        }
        if candidates:
            d["candidates"] = [c.to_json() for c in self.candidates]
        return d


@dataclass(frozen=True, slots=True)
class LogWarning:
    """A timing-cache message worth showing a user, with its 1-based line number.

    Kinds: ``cache-loaded``, ``cache-in-use``, ``cache-local``, ``cache-not-used``,
    ``cache-invalid``, ``cache-error``, ``cache-miss``, ``cache-serialized``.
    """

    line: int
    kind: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "kind": self.kind, "message": self.message}


@dataclass
class ParseResult:
    records: list[TacticRecord]
    warnings: list[LogWarning]
    engine_layers: list[EngineLayer]
    source: str | None = None
    lines: int = 0
    warnings_dropped: int = 0


def _json_float(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


# --- regular expressions (applied only to lines that passed a substring check) ----------
# ASCII semantics throughout (``\s``, ``\d``, case folding, and ``_WS`` for stripping): the
# native scanner (``_logscan.c``) implements exactly these, so both parsers agree on every
# byte, and TensorRT prints its own whitespace and digits in ASCII anyway.

_WS = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # what str.strip() removes, restricted to ASCII


def _rx(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags | re.ASCII)


_WORD = _rx(r"[^ \t\n\r\x0b\x0c\x1c-\x1f]+")

_PREFIX = _rx(
    r"""^\s*(?:
        \[[^\[\]\n]*\]\s*                                   # [ts] [V] [TRT] [TensorRT] ...
      | (?:VERBOSE|INFO|WARNING|WARN|ERROR|DEBUG|INTERNAL_ERROR|
           Verbose|Info|Warning|Error|Debug)(?:\s+TRT)?:\s*  # [TensorRT] VERBOSE: / WARN TRT:
      | \(foreignNode\)\s*                                  # Myelin sub-lines
      | \d{4}-\d\d-\d\d[ T][0-9:.+\-]+:?\s+                 # 2023-01-11 13:19:51-0600:
      | TensorRT\ backend:\s*                               # KataGo
    )*""",
    re.X,
)
_CAND = _rx(
    r"(?:Tactic Name: (?P<k>.+?) )?Tactic: (?P<tac>0x[0-9a-fA-F]+|-?[0-9]+) "
    r"(?:Time|time):?\s*(?P<time>[^\s,]+)"
)
_FASTEST_TAIL = _rx(r"Fastest Tactic: (?P<tac>[^\s,]+)\s+Time:?\s*(?P<time>[^\s,]+)")
_PROFILED = _rx(r"(?P<layer>.*) \((?P<runner>[^()]*)\) profiling completed")
_CHOSE = _rx(r"Chose Runner Type: (?P<runner>.+?) Tactic: (?P<tac>[^\s,]+)")
_SET_TACTIC = _rx(
    r"(?P<layer>.*?)\s*(?:\((?P<src>[^()]*)\)\s*)?Set Tactic Name: (?P<k>.*?)"
    r"(?: Tactic: (?P<tac>[^\s,]+))?\s*$"
)
_RUNNER_TAIL = _rx(r"(?P<layer>.*) \((?P<runner>[^()]*)\)\s*$")
_OP_KEYED = _rx(r"(?P<name>.*)\(key: (?P<key>[^)]*)\)\s*:?\s*(?P<rest>.*)$")
_KEY32 = _rx(r"0[xX][0-9a-fA-F]{32}")
_KEY_IN = _rx(r"\s*\(key: (?P<key>0[xX][0-9a-fA-F]{32})\)\s*")
_SELECTED = _rx(r"\(tactic hash, cost\(in ms\)\):\s*(?P<tac>[^,\s]+)\s*(?:,\s*(?P<time>[^\s,]+))?")
_WRITING = _rx(r"Writing the best tactic \(?(?P<tac>[^)\s]+)")
_CACHED_TAIL = _rx(
    r"\s*(?P<runner>[^,]*?)\s*,\s*tactic:?\s*(?P<tac>[^,\s]+)\s*(?:,\s*(?P<time>[^\s,]+))?"
)
_LAYER_LINE = _rx(r"Layer\((?P<type>[^)]*)\):\s*(?P<name>.*?)(?:, Tactic: (?P<tac>[^,\s]+)|,|$)")
_TACTIC_VALUE = _rx(r", TacticValue: (?P<tac>[^,\s]+)")
_FOREIGN_META = _rx(r"ForeignNode (?P<node>.*?) metadata: (?P<md>.*)$")

_WARNINGS: tuple[tuple[re.Pattern[str], str], ...] = (
    (_rx(r"Cache result detected as invalid"), "cache-invalid"),
    (_rx(r"[Ii]nvalid timing cache"), "cache-invalid"),
    (_rx(r"timing cache will not be used", re.I), "cache-not-used"),
    (_rx(r"Could not read (?:timing )?cache", re.I), "cache-not-used"),
    (_rx(r"[Cc]ache.*Error Code \d+|Error Code \d+.*[Cc]ache"), "cache-error"),
    (_rx(r"timing cache miss", re.I), "cache-miss"),
    (_rx(r"Loaded \d+ bytes of (?:the )?timing cache", re.I), "cache-loaded"),
    (_rx(r"Using existing timing cache", re.I), "cache-loaded"),
    (_rx(r"Global timing cache in use"), "cache-in-use"),
    (_rx(r"Local timing cache in use"), "cache-local"),
    (_rx(r"Serialized \d+ timing cache entries"), "cache-serialized"),
    (_rx(r"Saved \d+ bytes of timing cache"), "cache-serialized"),
)


def _strip_prefix(line: str) -> str:
    """The message without logger prefixes (``[ts] [V] [TRT] ``, ``[TensorRT] VERBOSE: `` ...)."""
    m = _PREFIX.match(line)
    return (line[m.end() :] if m else line).strip(_WS)


# --- blocks being read ---------------------------------------------------------------------


class _RunnerBlock:
    """A format combination (or reformat) being timed, runner by runner."""

    __slots__ = ("layer", "formats", "line", "kind", "cands", "runner", "fastest", "onnx")

    def __init__(self, layer: str, formats: str | None, line: int, kind: str) -> None:
        self.layer = layer
        self.formats = formats
        self.line = line
        self.kind = kind  # "runner" or "reformat"
        self.cands: list[Candidate] = []
        self.runner: str | None = None
        self.fastest: list[tuple[str | None, int, float | None]] = []
        self.onnx: tuple[str, ...] = ()


class _OpBlock:
    """An ``Autotuning op`` table (editable cache or Myelin)."""

    __slots__ = ("name", "key", "keyed", "onnx", "line", "cands", "sel", "sel_cost", "written")

    def __init__(
        self, name: str, key: str | None, keyed: bool, onnx: tuple[str, ...], line: int
    ) -> None:
        self.name = name
        self.key = key
        self.keyed = keyed
        self.onnx = onnx
        self.line = line
        self.cands: list[Candidate] = []
        self.sel: int | None = None
        self.sel_cost: float | None = None
        self.written: int | None = None


class LogParser:
    """Incremental parser: ``feed`` one line at a time, ``finish`` at the end.

    ``feed`` returns the records that the line completed, so a logger callback can forward
    records while the build is still running. ``warnings`` and ``engine_layers`` (the layers
    of the most recently printed engine) are filled as lines arrive.
    """

    def __init__(self, source: str | None = None, *, max_warnings: int = 10_000) -> None:
        self.source = source
        self.lineno = 0
        self.warnings: list[LogWarning] = []
        self.warnings_dropped = 0
        self.engine_layers: list[EngineLayer] = []
        self._max_warnings = max_warnings
        self._out: list[TacticRecord] = []
        self._blk: _RunnerBlock | None = None
        self._op: _OpBlock | None = None
        self._orphans: list[Candidate] = []
        self._cur_layer = ""
        self._set_layer = ""
        self._meta: tuple[str, tuple[str, ...]] | None = None
        self._pending: tuple[str, int | None] | None = None
        self._legacy = False
        self._layers_open = False

    # -- public -------------------------------------------------------------------------

    def feed(self, line: str) -> list[TacticRecord]:
        """Parse one log line (a trailing newline is ignored; embedded ones split it)."""
        if line.endswith("\n"):
            line = line[:-1]
        if "\n" in line:
            for part in line.split("\n"):
                self._line(part)
        else:
            self._line(line)
        out, self._out = self._out, []
        return out

    def finish(self) -> list[TacticRecord]:
        """End of log: emit blocks still open (e.g. a Myelin table at the very end)."""
        self._flush_op()
        self._flush_blk()
        out, self._out = self._out, []
        return out

    # -- dispatch -----------------------------------------------------------------------

    def _line(self, line: str) -> None:
        self.lineno += 1
        if line[-1:] == "\r":
            line = line[:-1]
        if line[:2] == "# ":
            self._separator()
            return
        # Candidate lines dominate verbose logs: they are recognised first and cheaply.
        if "Tactic" in line and self._tactic_family(line):
            return
        if self._op is not None and ", 0x" in line and self._row(line):
            return
        if "Autotuning " in line and self._autotuning(line):
            return
        if "Timing Runner" in line and self._timing_runner(line):
            return
        if "Computing costs for" in line:
            self._computing_costs(line)
            return
        if "ache" in line and self._cache_line(line):
            return
        if "(tactic hash" in line:
            self._selected(line)
            return
        if "Layer" in line:
            self._layer_misc(line)

    def _tactic_family(self, line: str) -> bool:
        # Fast path for the dominant 8.6+ forms "Tactic Name: K Tactic: 0x.. Time: t" and
        # "Tactic: 0x.. Time: t"; everything else goes through the regexes below.
        i = line.find("Tactic: ")
        if i >= 0:
            j = line.find(" Time: ", i)
            if j > 0 and not (i >= 8 and line.startswith("Fastest ", i - 8)):
                tok = line[i + 8 : j]
                try:
                    tac = int(tok, 16) if tok.startswith("0x") else int(tok)
                except ValueError:
                    tac = -1
                if 0 <= tac < _U64:
                    k = line.rfind("Tactic Name: ", 0, i)
                    kernel = (line[k + 13 : i].strip(_WS) or None) if k >= 0 else None
                    tail = line[j + 7 :]
                    try:
                        cost: float | None = float(tail)
                    except ValueError:  # trailing text after the time
                        word = _WORD.search(tail)
                        cost = _float(word[0]) if word else None
                    blk = self._blk
                    if blk is not None and self._op is None and self._pending is None:
                        if tok[1:2] != "x":
                            self._legacy = True
                        if len(blk.cands) < _MAX_CANDIDATES:
                            blk.cands.append(Candidate(None, tac, kernel, cost, blk.runner))
                    else:
                        self._candidate(tac, tok, kernel, cost)
                    return True
        if "Fastest Tactic" in line:
            return self._fastest(line)
        if "Chose Runner Type" in line:
            return self._chose(line)
        if "Set Tactic Name" in line:
            return self._set_tactic(line)
        if "Layer(" in line:
            return self._layer_line(line)
        if "LayerType: " in line:
            return self._oneline(line)
        m = _CAND.search(line)
        if m is None:
            return False
        tac = _tac(m["tac"])
        if tac is None:
            return False
        self._candidate(tac, m["tac"], m["k"], _float(m["time"]))
        return True

    def _candidate(self, tac: int, tok: str, kernel: str | None, cost: float | None) -> None:
        if self._op is not None:
            self._flush_op()
        pending = self._pending
        if pending is not None:
            if kernel is None and (pending[1] is None or pending[1] == tac):
                kernel = pending[0]
            self._pending = None
        if tok[:2] not in ("0x", "0X"):
            self._legacy = True
        blk = self._blk
        cand = Candidate(None, tac, kernel, cost, blk.runner if blk else None)
        if blk is not None:
            if len(blk.cands) < _MAX_CANDIDATES:
                blk.cands.append(cand)
        else:
            if len(self._orphans) >= _MAX_ORPHANS:
                del self._orphans[: _MAX_ORPHANS // 2]
            self._orphans.append(cand)

    # -- runner / legacy blocks -----------------------------------------------------------

    def _open_implicit(self, layer: str, kind: str = "runner") -> _RunnerBlock:
        """A block whose header was not printed (excerpt starting mid-block)."""
        layer = layer or self._cur_layer or self._set_layer
        blk = _RunnerBlock(layer, None, self.lineno, kind)
        blk.cands, self._orphans = self._orphans, []
        self._attach_meta(blk)
        self._blk = blk
        return blk

    def _attach_meta(self, blk: _RunnerBlock) -> None:
        if self._meta is not None and blk.layer and self._meta[0] == blk.layer:
            blk.onnx = self._meta[1]

    def _fastest(self, line: str) -> bool:
        i = line.find("Fastest Tactic: ")
        m = _FASTEST_TAIL.match(line, i) if i >= 0 else None
        if m is None:
            return False
        tac = tactic_to_int(m["tac"])
        if tac is None:
            return False
        self._flush_op()
        layer, runner = "", None
        pm = _PROFILED.search(line, 0, i)
        if pm is not None:
            layer = _strip_prefix(pm["layer"])
            runner = pm["runner"].split("[", 1)[0].strip(_WS) or None
        blk = self._blk if self._blk is not None else self._open_implicit(layer)
        if layer and not blk.layer:
            blk.layer = layer
            self._attach_meta(blk)
        if runner is None:
            runner = blk.runner
        blk.fastest.append((runner, tac, _float(m["time"])))
        return True

    def _chose(self, line: str) -> bool:
        m = _CHOSE.search(line)
        if m is None:
            return False
        tac = tactic_to_int(m["tac"])
        if tac is None:
            return False
        self._flush_op()
        blk = self._blk if self._blk is not None else self._open_implicit("")
        if m["tac"][:2] not in ("0x", "0X"):
            self._legacy = True
        self._blk = None
        self._emit_runner_block(blk, tac, m["runner"].strip(_WS))
        return True

    def _set_tactic(self, line: str) -> bool:
        m = _SET_TACTIC.match(_strip_prefix(line))
        if m is None:
            return False
        self._flush_op()
        tac = tactic_to_int(m["tac"]) if m["tac"] else None
        self._pending = (m["k"].strip(_WS), tac)
        if m["layer"]:
            self._set_layer = m["layer"].strip(_WS)
        self._legacy = True
        return True

    def _timing_runner(self, line: str) -> bool:
        i = line.find("Timing Runner: ")
        if i < 0:
            return False
        rest = line[i + 15 :].strip(_WS)
        m = _RUNNER_TAIL.match(rest)
        if m is not None:
            layer = m["layer"].strip(_WS)
            runner: str | None = m["runner"].split("[", 1)[0].strip(_WS) or None
        else:
            layer, runner = rest, None
        self._flush_op()
        blk = self._blk
        if blk is None:
            kind = "reformat" if layer.startswith("Optimizer Reformat") else "runner"
            blk = self._open_implicit(layer, kind)
        if not blk.layer:
            blk.layer = layer
            self._attach_meta(blk)
        if blk.kind == "runner" and not self._cur_layer:
            self._cur_layer = blk.layer
        blk.runner = runner
        self._pending = None
        return True

    def _computing_costs(self, line: str) -> None:
        name = line[line.find("Computing costs for") + 19 :].strip(_WS)
        self._flush_op()
        self._flush_blk()
        self._orphans.clear()
        self._cur_layer = name
        self._set_layer = ""
        self._pending = None

    def _autotuning(self, line: str) -> bool:
        i = line.find("Autotuning op ")
        if i >= 0:
            self._op_header(line[i + 14 :])
            return True
        i = line.find("Autotuning format combination")
        kind = "runner"
        if i < 0:
            i = line.find("Autotuning Reformat")
            if i < 0:
                return False
            kind = "reformat"
            formats = line[i + 19 :]
        else:
            formats = line[i + 30 :]
        formats = formats.strip(_WS).lstrip(":").strip(_WS).rstrip("*").strip(_WS) or None
        self._flush_op()
        self._flush_blk()
        self._orphans.clear()
        self._pending = None
        blk = _RunnerBlock(self._cur_layer if kind == "runner" else "", formats, self.lineno, kind)
        self._attach_meta(blk)
        self._blk = blk
        return True

    def _flush_blk(self) -> None:
        """End a block without a ``Chose Runner Type`` line (reformat, or cut off)."""
        blk = self._blk
        if blk is None:
            return
        self._blk = None
        if blk.kind == "reformat":
            chosen, runner = None, None
            if blk.fastest:
                best = min(blk.fastest, key=lambda f: math.inf if f[2] is None else f[2])
                runner, chosen = best[0], best[1]
            elif blk.cands:
                best_c = min(blk.cands, key=lambda c: math.inf if c.cost_ms is None else c.cost_ms)
                runner, chosen = best_c.runner, best_c.tactic_hash
            if chosen is None:
                return
            self._emit_runner_block(blk, chosen, runner)
        elif blk.cands or blk.fastest:
            self._emit_runner_block(blk, None, None)

    def _emit_runner_block(self, blk: _RunnerBlock, chosen: int | None, runner: str | None) -> None:
        layer = blk.layer or self._set_layer
        if not layer:
            return  # nothing to identify it by (excerpt without any layer name)
        kernel = cost = None
        if chosen is not None:
            match = None
            for c in blk.cands:
                if c.tactic_hash == chosen and c.runner == runner:
                    match = c
                    break
            if match is None:
                match = next((c for c in blk.cands if c.tactic_hash == chosen), None)
            if match is not None:
                kernel, cost = match.kernel, match.cost_ms
            if cost is None:
                cost = next((f[2] for f in blk.fastest if f[1] == chosen), None)
        if blk.kind == "reformat":
            fmt = "reformat"
        else:
            fmt = "legacy" if self._legacy else "runner"
        self._emit(
            TacticRecord(
                layer=layer,
                key=None,
                onnx_layers=blk.onnx,
                candidates=blk.cands,
                chosen=chosen,
                chosen_kernel=kernel,
                chosen_cost_ms=cost,
                from_cache=False,
                runner=runner,
                line=blk.line,
                format=fmt,
                formats=blk.formats,
            )
        )

    # -- editable / Myelin tables ---------------------------------------------------------

    def _op_header(self, rest: str) -> None:
        rest = rest.strip(_WS)
        key: str | None = None
        keyed = False
        m = _OP_KEYED.match(rest)
        if m is not None:
            keyed = True
            name, suffix = m["name"].strip(_WS), m["rest"].strip(_WS)
            if _KEY32.fullmatch(m["key"].strip(_WS)):
                key = m["key"].strip(_WS).lower()
        else:
            p = rest.find(": [")
            if p >= 0:
                name, suffix = rest[:p].strip(_WS), rest[p + 2 :].strip(_WS)
            else:
                name, suffix = rest.rstrip(":").strip(_WS), ""
        onnx = split_onnx_layers(suffix) if suffix.startswith("[") else ()
        self._flush_op()
        self._op = _OpBlock(name, key, keyed, onnx, self.lineno)

    def _row(self, line: str) -> bool:
        """``<id>, <cost>, <ratio>, <correlation>, <kernel>, 0x<hash>, [<tunable>]``."""
        h = line.rfind(", 0x")
        e = line.find(",", h + 2)
        if e < 0:
            return False
        parts = line[:h].rsplit(",", 4)
        if len(parts) != 5:
            return False
        head = parts[0]
        try:
            tac = int(line[h + 2 : e], 16)
            ident = int(head[head.rfind(" ") + 1 :])
            cost = float(parts[1])
        except ValueError:
            return False
        if not (0 <= tac < _U64 and ident >= 0):
            return False
        op = self._op
        if op is not None and len(op.cands) < _MAX_CANDIDATES:
            op.cands.append(Candidate(ident, tac, parts[4].strip(_WS) or None, cost, None))
        return True

    def _selected(self, line: str) -> None:
        m = _SELECTED.search(line)
        op = self._op
        if m is None or op is None:
            return
        tac = tactic_to_int(m["tac"])
        if tac is not None:
            op.sel, op.sel_cost = tac, _float(m["time"])

    def _flush_op(self) -> None:
        op = self._op
        if op is None:
            return
        self._op = None
        if op.sel is not None:
            chosen: int | None = op.sel
        elif op.written is not None:
            chosen = op.written
        elif not op.keyed and op.cands:
            chosen = op.cands[0].tactic_hash  # sorted table: first row is the fastest
        else:
            chosen = None
        if not op.keyed and chosen is None:
            return
        if not op.name and op.key is None:
            return
        kernel = None
        cost = op.sel_cost
        if chosen is not None:
            match = next((c for c in op.cands if c.tactic_hash == chosen), None)
            if match is not None:
                kernel = match.kernel
                if cost is None:
                    cost = match.cost_ms
        self._emit(
            TacticRecord(
                layer=op.name,
                key=op.key,
                onnx_layers=op.onnx,
                candidates=op.cands,
                chosen=chosen,
                chosen_kernel=kernel,
                chosen_cost_ms=cost,
                from_cache=False,
                runner=None,
                line=op.line,
                format="editable" if op.keyed else "myelin",
            )
        )

    # -- cache lines, warnings, engine layers ---------------------------------------------

    def _cache_line(self, line: str) -> bool:
        if "got cached result" in line:
            return self._cached(line)
        if "Writing the best tactic" in line:
            m = _WRITING.search(line)
            op = self._op
            if m is not None and op is not None:
                op.written = tactic_to_int(m["tac"].rstrip(")"))
                self._flush_op()
            return True
        for rx, kind in _WARNINGS:
            if rx.search(line):
                self._warn(kind, _strip_prefix(line))
                return True
        return False

    def _cached(self, line: str) -> bool:
        s = _strip_prefix(line)
        i = s.find("got cached result")
        tail = s[i + 17 :].lstrip(":")
        m = _CACHED_TAIL.match(tail)
        if m is None:
            return False
        tac = tactic_to_int(m["tac"])
        if tac is None:
            return False
        head = s[:i].strip(_WS)
        formats = None
        if head.endswith("]"):
            j = head.rfind(" [")
            if j >= 0:
                formats, head = head[j + 2 : -1].strip(_WS), head[:j].strip(_WS)
        key = None
        km = _KEY_IN.search(head)
        if km is not None:
            key = km["key"].lower()
            head = (head[: km.start()] + " " + head[km.end() :]).strip(_WS)
        self._flush_op()
        self._flush_blk()
        if not head and key is None:
            return True
        onnx = self._meta[1] if self._meta is not None and self._meta[0] == head else ()
        time_text = m["time"]
        if time_text is not None and time_text.endswith("ms"):
            time_text = time_text[:-2]
        self._emit(
            TacticRecord(
                layer=head,
                key=key,
                onnx_layers=onnx,
                candidates=[],
                chosen=tac,
                chosen_kernel=None,
                chosen_cost_ms=_float(time_text),
                from_cache=True,
                runner=m["runner"] or None,
                line=self.lineno,
                format="cached",
                formats=formats,
            )
        )
        return True

    def _warn(self, kind: str, message: str) -> None:
        if len(self.warnings) < self._max_warnings:
            self.warnings.append(LogWarning(self.lineno, kind, message))
        else:
            self.warnings_dropped += 1

    def _layer_misc(self, line: str) -> None:
        s = _strip_prefix(line)
        if s.startswith("Engine Layer Information") or s == "Layers:":
            self.engine_layers = []
            self._layers_open = True
            return
        if s.startswith("ForeignNode ") and " metadata: " in s:
            m = _FOREIGN_META.match(s)
            if m is not None:
                self._meta = (m["node"].strip(_WS), split_onnx_layers(m["md"]))
                if self._blk is not None:
                    self._attach_meta(self._blk)
            return
        if s.startswith("Layer("):
            self._layer_line(line)
        elif s.startswith("Name: "):
            self._oneline(line)

    def _add_engine_layer(self, layer: EngineLayer) -> None:
        if not self._layers_open:
            self.engine_layers = []
            self._layers_open = True
        if len(self.engine_layers) < _MAX_ENGINE_LAYERS:
            self.engine_layers.append(layer)

    def _layer_line(self, line: str) -> bool:
        """``Layer(<Type>): <name>, Tactic: 0x.., <in> -> <out>`` (Engine Layer Information)."""
        s = _strip_prefix(line)
        if not s.startswith("Layer("):
            return False
        m = _LAYER_LINE.match(s)
        if m is None:
            return False
        tac = tactic_to_int(m["tac"]) if m["tac"] else None
        self._add_engine_layer(EngineLayer(m["name"].strip(_WS), m["type"] or None, None, tac))
        return True

    def _oneline(self, line: str) -> bool:
        """An engine inspector kONELINE line: ``Name: .., LayerType: .., ..``."""
        s = _strip_prefix(line)
        if not s.startswith("Name: "):
            return False
        i = s.find(", LayerType: ")
        if i < 0:
            return False
        name = s[6:i].strip(_WS)
        j = s.find(",", i + 13)
        layer_type = (s[i + 13 :] if j < 0 else s[i + 13 : j]).strip(_WS) or None
        tactic_name = None
        k = s.find(", TacticName: ")
        if k >= 0:
            e = s.find(",", k + 14)
            tactic_name = (s[k + 14 :] if e < 0 else s[k + 14 : e]).strip(_WS) or None
        tm = _TACTIC_VALUE.search(s)
        tac = tactic_to_int(tm["tac"]) if tm is not None else None
        k = s.find(", Metadata:")
        md = split_onnx_layers(s[k + 11 :]) if k >= 0 else ()
        self._add_engine_layer(EngineLayer(name, layer_type, tactic_name, tac, md))
        return True

    # -- misc ---------------------------------------------------------------------------

    def _separator(self) -> None:
        self._flush_op()
        self._flush_blk()
        self._orphans.clear()
        self._cur_layer = ""
        self._set_layer = ""
        self._meta = None
        self._pending = None
        self._legacy = False

    def _emit(self, rec: TacticRecord) -> None:
        self._out.append(rec)
        self._layers_open = False


# --- entry points --------------------------------------------------------------------------


def parse_lines(lines: Iterable[str], parser: LogParser | None = None) -> Iterator[TacticRecord]:
    """Records from lines captured in memory or a pipe, yielded as their blocks complete."""
    p = parser if parser is not None else LogParser()
    for line in lines:
        if isinstance(line, bytes | bytearray):
            line = bytes(line).decode("utf-8", errors="replace")
        out = p.feed(line)
        if out:
            yield from out
    yield from p.finish()


def _read_raw(path: str | os.PathLike[str]) -> Iterator[memoryview]:
    """A log file in fixed-size chunks (valid until the next one); unreadable files raise
    ``LogParseError``."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; generator owns it
    except OSError as err:
        raise LogParseError(
            f"{path}: cannot read the log ({err.strerror or err}); "
            "pass the path of a verbose builder log"
        ) from None
    # One buffer, refilled: consumers (the scanner, the incremental decoder) copy what
    # they keep, and fresh 1 MiB objects per read cost page faults on multi-GB logs.
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with fh:
        while True:
            try:
                n = fh.readinto(buf)
            except OSError as err:
                raise LogParseError(
                    f"{path}: read failed ({err.strerror or err}); check the file"
                ) from None
            if not n:
                return
            yield view[:n]


def _split_chunks(chunks: Iterable[bytes]) -> Iterator[list[str]]:
    """Lists of lines, decoded as UTF-8 (errors replaced), from chunks cut anywhere.

    Splits on ``\\n`` only: ``str.splitlines`` would also split on ``\\x1e``/``\\x1f``,
    which TensorRT uses *inside* lines to separate ONNX layer names.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    carry = ""
    for chunk in chunks:
        parts = (carry + decoder.decode(chunk)).split("\n")
        carry = parts.pop()
        if len(carry) > _MAX_LINE:
            carry = carry[:_MAX_LINE]
        yield parts
    carry += decoder.decode(b"", final=True)
    if carry:
        yield [carry]


def native_available() -> bool:
    """Whether the C scanner (``reprobuild._logscan``) was built for this interpreter."""
    return _native_module() is not None


def _native_module() -> Any:
    if os.environ.get("REPROBUILD_PURE_PYTHON_PARSER"):
        return None
    try:
        from reprobuild import _logscan  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _logscan


def _native_scanner(parser: LogParser) -> Any:
    mod = _native_module()
    if mod is None:
        return None
    return mod.Scanner(
        parser,
        Candidate,
        TacticRecord,
        LogWarning,
        EngineLayer,
        split_onnx_layers,
        parser._max_warnings,
    )


def iter_chunks(
    chunks: Iterable[bytes], parser: LogParser | None = None, *, native: bool | None = None
) -> Iterator[TacticRecord]:
    """Stream the records of a log given as byte chunks cut anywhere (a file, a pipe).

    ``native`` picks the implementation: True requires the C scanner, False forces the
    pure-Python parser, None (default) uses the C scanner when it was built. Both give the
    same records, warnings and engine layers (tests/test_logscan.py holds them to that).
    """
    p = parser if parser is not None else LogParser()
    scanner = None
    fresh = not (p.lineno or p._out or p._blk is not None or p._op is not None)
    if native is not False and fresh:
        scanner = _native_scanner(p)
    if native and scanner is None:
        if not fresh:
            raise LogParseError(
                "native=True needs a fresh LogParser: this one was already fed lines, and "
                "its state lives in Python; pass a new LogParser or native=None"
            )
        raise LogParseError(
            "the native log scanner is not available: reinstall reprobuild where a C "
            "compiler is present, or unset REPROBUILD_PURE_PYTHON_PARSER"
        )
    if scanner is not None:
        # Records flow from the scanner's lists through C-level iterators: no Python frame
        # is resumed per record.
        return itertools.chain(
            itertools.chain.from_iterable(map(scanner.feed, chunks)), _finish(scanner)
        )
    return _iter_python(chunks, p)


def _finish(scanner: Any) -> Iterator[TacticRecord]:
    yield from scanner.finish()


def _iter_python(chunks: Iterable[bytes], p: LogParser) -> Iterator[TacticRecord]:
    line_fn = p._line
    for lines in _split_chunks(chunks):
        for line in lines:
            line_fn(line)
            if p._out:
                out, p._out = p._out, []
                yield from out
    yield from p.finish()


def iter_file(
    path: str | os.PathLike[str], parser: LogParser | None = None, *, native: bool | None = None
) -> Iterator[TacticRecord]:
    """Stream the records of a log file; pass ``parser`` to read its warnings afterwards."""
    p = parser if parser is not None else LogParser(source=str(path))
    return iter_chunks(_read_raw(path), p, native=native)


def parse_file(path: str | os.PathLike[str]) -> ParseResult:
    """All records of a log file in a list (use ``iter_file`` for multi-GB logs)."""
    parser = LogParser(source=str(path))
    records = list(iter_file(path, parser))
    return ParseResult(
        records=records,
        warnings=parser.warnings,
        engine_layers=parser.engine_layers,
        source=str(Path(path)),
        lines=parser.lineno,
        warnings_dropped=parser.warnings_dropped,
    )


# --- comparing two logs --------------------------------------------------------------------


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
