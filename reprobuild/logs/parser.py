"""The builder-log state machine: lines in, one ``TacticRecord`` per autotuning decision.

The verbose log is the only place where TensorRT says, per autotuned layer, which tactics it
timed, how long each took and which one it chose. Every backend reports through these lines,
so the parser sits on the path of every build and must take whatever a logger produced:
trtexec, the Python logger, application loggers, excerpts with elisions, interleaved lines
and binary noise. Unreadable lines are skipped silently.

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
most recent engine, and at most ``max_warnings`` warnings.
"""

from __future__ import annotations

from reprobuild.logs.blocks import BlockState, OpBlock, RunnerBlock
from reprobuild.logs.lines import (
    FOREIGN_META,
    WS,
    cached_line,
    cand_parts,
    chose_parts,
    cost_of,
    fastest_parts,
    layer_line,
    mask_quoted,
    oneline_layer,
    op_header,
    runner_parts,
    selected_parts,
    set_tactic_parts,
    strip_prefix,
    warning_kind,
    writing_parts,
)
from reprobuild.logs.records import Candidate, LogWarning, TacticRecord
from reprobuild.logs.values import U64, split_onnx_layers

__all__ = ["LogParser"]

MAX_CANDIDATES = 100_000  # per block; real blocks hold a few hundred
MAX_ORPHANS = 4096  # candidate lines seen outside any block (excerpts starting mid-block)


class LogParser(BlockState):
    """Incremental parser: ``feed`` one line at a time, ``finish`` at the end.

    ``feed`` returns the records that the line completed, so a logger callback can forward
    records while the build is still running. ``warnings`` and ``engine_layers`` (the layers
    of the most recently printed engine) are filled as lines arrive.
    """

    # -- public -------------------------------------------------------------------------

    def feed(self, line: str) -> list[TacticRecord]:
        """Parse one log line (a trailing newline is ignored; embedded ones split it)."""
        if line.endswith("\n"):
            line = line[:-1]
        parts = line.split("\n")
        for i, part in enumerate(parts):
            if part[-1:] == "\r":
                parts[i] = part[:-1]
        return self.feed_lines(parts)

    def finish(self) -> list[TacticRecord]:
        """End of log: emit blocks still open (e.g. a Myelin table at the very end)."""
        self._flush_op()
        self._flush_blk()
        out, self._out = self._out, []
        return out

    def feed_lines(self, lines: list[str]) -> list[TacticRecord]:
        """Parse lines already split, each without its newline and the ``\\r`` before it
        (``logs.reader`` hands over a chunk's lines at once); returns the records they
        completed.

        Every line goes through one fixed order of checks: the first handler that
        recognises it takes it, and one that does not (returns False) passes it on. This
        loop is the hot path of a multi-GB log, written for CPython: candidate lines and
        sorted-table rows, most of such a log, are read inline; every other line pays only
        for the substring checks that rule out the handlers it cannot reach; ``lineno``
        lives in a local, stored where a handler reads it; and lines are cut with
        ``partition`` (one argument, no argument parsing) rather than ``find`` with
        offsets. A line with a quoted name is dispatched and cut on ``probe``, the line with
        its quoted strings blanked (``mask_quoted``): a name is one token, and nothing in
        it is a candidate, a row or another line's marker.
        """
        new = tuple.__new__  # Candidate(...) without NamedTuple's interpreted __new__
        lineno = self.lineno
        for line in lines:
            lineno += 1
            probe = mask_quoted(line) if '"' in line else line
            if line and line[0] == "#" and line[:2] == "# ":  # line[0]: no new string
                self.lineno = lineno
                self._separator()
                continue
            if "Tactic" in probe:
                # "Tactic Name: K Tactic: 0x.. Time: t" and "Tactic: 0x.. Time: t" (8.6+):
                # the first "Tactic: ", the first " Time: " after it, no "Fastest " before
                # it. (A " Time: " right after the colon, "Tactic: Time: 5", leaves no
                # tactic; here the token then starts with "Time: ", which int() refuses.)
                head, found, rest = probe.partition("Tactic: ")
                if found and head[-8:] != "Fastest ":
                    tok, found, tail = rest.partition(" Time: ")
                    if found:
                        hexed = tok[:2] == "0x"
                        try:
                            tac = int(tok, 16) if hexed else int(tok)
                        except ValueError:
                            tac = -1
                        if 0 <= tac < U64:
                            _, named, kernel = head.rpartition("Tactic Name: ")
                            kernel = (kernel.strip(WS) or None) if named else None
                            try:
                                cost = float(tail)
                            except ValueError:
                                cost = cost_of(tail)
                            blk = self._blk
                            if blk is not None and self._op is None and self._pending is None:
                                if not hexed:  # a decimal tactic: 7.x/8.0 print
                                    self._legacy = True
                                if len(blk.cands) < MAX_CANDIDATES:
                                    cand = (None, tac, kernel, cost, blk.runner)
                                    blk.cands.append(new(Candidate, cand))
                            else:
                                self._candidate(tac, hexed, kernel, cost)
                            continue
                self.lineno = lineno
                if self._tactic_rest(line):
                    continue
            op = self._op
            if op is not None:
                # a sorted-table row: "<id>, <cost>, <ratio>, <correlation>, <kernel>,
                # 0x<hash>, [<tunable>]", the hash after the last ", 0x"
                before, found, after = probe.rpartition(", 0x")
                if found:
                    digits, found, _ = after.partition(",")
                if found:
                    parts = before.rsplit(",", 4)
                    if len(parts) == 5:
                        try:
                            tac = int("0x" + digits, 16)
                            ident = int(parts[0].rpartition(" ")[2])
                            cost = float(parts[1])
                        except ValueError:
                            tac = -1
                        if 0 <= tac < U64 and ident >= 0:
                            if len(op.cands) < MAX_CANDIDATES:
                                kernel = parts[4].strip(WS) or None
                                op.cands.append(new(Candidate, (ident, tac, kernel, cost, None)))
                            continue
            if "Autotuning " in probe:
                self.lineno = lineno
                if self._autotuning(line):
                    continue
            if "Timing Runner" in probe:
                self.lineno = lineno
                if self._timing_runner(line):
                    continue
            if "Computing costs for" in probe:
                self._computing_costs(line)
                continue
            if "ache" in probe:
                self.lineno = lineno
                if self._cache_line(line):
                    continue
            if "(tactic hash" in probe:
                self._selected(line)
                continue
            if "Layer" in probe:
                self.lineno = lineno
                self._layer_misc(line)
        self.lineno = lineno
        out, self._out = self._out, []
        return out

    # -- the Tactic family beyond candidate lines ---------------------------------------

    def _tactic_rest(self, line: str) -> bool:
        """A line with "Tactic" that is no 8.6+ candidate line (``feed_lines`` reads those)."""
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
        parts = cand_parts(line)
        if parts is None:
            return False
        self._candidate(*parts)
        return True

    def _candidate(self, tac: int, hex_: bool, kernel: str | None, cost: float | None) -> None:
        if self._op is not None:
            self._flush_op()
        pending = self._pending
        if pending is not None:
            if kernel is None and (pending[1] is None or pending[1] == tac):
                kernel = pending[0]
            self._pending = None
        if not hex_:
            self._legacy = True
        blk = self._blk
        cand = tuple.__new__(Candidate, (None, tac, kernel, cost, blk.runner if blk else None))
        if blk is not None:
            if len(blk.cands) < MAX_CANDIDATES:
                blk.cands.append(cand)
        else:
            if len(self._orphans) >= MAX_ORPHANS:
                del self._orphans[: MAX_ORPHANS // 2]
            self._orphans.append(cand)

    # -- runner / legacy blocks -----------------------------------------------------------

    def _fastest(self, line: str) -> bool:
        parts = fastest_parts(line)
        if parts is None:
            return False
        tac, time, layer, runner = parts
        self._flush_op()
        blk = self._blk if self._blk is not None else self._open_implicit(layer)
        if layer and not blk.layer:
            blk.layer = layer
            self._attach_meta(blk)
        if runner is None:
            runner = blk.runner
        blk.fastest.append((runner, tac, time))
        return True

    def _chose(self, line: str) -> bool:
        parts = chose_parts(line)
        if parts is None:
            return False
        tac, runner, hex_ = parts
        self._flush_op()
        blk = self._blk if self._blk is not None else self._open_implicit("")
        if not hex_:
            self._legacy = True
        self._blk = None
        self._emit_runner_block(blk, tac, runner)
        return True

    def _set_tactic(self, line: str) -> bool:
        parts = set_tactic_parts(line)
        if parts is None:
            return False
        layer, kernel, tac = parts
        self._flush_op()
        self._pending = (kernel, tac)
        if layer is not None:
            self._set_layer = layer
        self._legacy = True
        return True

    def _timing_runner(self, line: str) -> bool:
        parts = runner_parts(line)
        if parts is None:
            return False
        layer, runner, reformat = parts
        self._flush_op()
        blk = self._blk
        if blk is None:
            blk = self._open_implicit(layer, "reformat" if reformat else "runner")
        if not blk.layer:
            blk.layer = layer
            self._attach_meta(blk)
        if blk.kind == "runner" and not self._cur_layer:
            self._cur_layer = blk.layer
        blk.runner = runner
        self._pending = None
        return True

    def _computing_costs(self, line: str) -> None:
        name = line[line.find("Computing costs for") + 19 :].strip(WS)
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
        formats = formats.strip(WS).lstrip(":").strip(WS).rstrip("*").strip(WS) or None
        self._flush_op()
        self._flush_blk()
        self._orphans.clear()
        self._pending = None
        blk = RunnerBlock(self._cur_layer if kind == "runner" else "", formats, self.lineno, kind)
        self._attach_meta(blk)
        self._blk = blk
        return True

    # -- editable / Myelin tables ---------------------------------------------------------

    def _op_header(self, rest: str) -> None:
        head = op_header(rest)
        self._flush_op()
        self._op = OpBlock(head.name, head.key, head.keyed, head.onnx, self.lineno)

    def _selected(self, line: str) -> None:
        parts = selected_parts(line)
        op = self._op
        if parts is not None and op is not None:
            op.sel, op.sel_cost = parts

    # -- cache lines, warnings, engine layers ---------------------------------------------

    def _cache_line(self, line: str) -> bool:
        if "got cached result" in line:
            return self._cached(line)
        if "Writing the best tactic" in line:
            parts = writing_parts(line)
            op = self._op
            if parts is not None and op is not None:
                (op.written,) = parts
                self._flush_op()
            return True
        kind = warning_kind(line)
        if kind is None:
            return False
        if len(self.warnings) < self._max_warnings:
            self.warnings.append(LogWarning(self.lineno, kind, strip_prefix(line)))
        else:  # past the cap only counted: no message cut out for nothing
            self.warnings_dropped += 1
        return True

    def _cached(self, line: str) -> bool:
        c = cached_line(line)
        if c is None:
            return False
        self._flush_op()
        self._flush_blk()
        if not c.layer and c.key is None:
            return True
        onnx = self._meta[1] if self._meta is not None and self._meta[0] == c.layer else ()
        self._emit(
            TacticRecord(
                layer=c.layer,
                key=c.key,
                onnx_layers=onnx,
                candidates=[],
                chosen=c.tactic,
                chosen_kernel=None,
                chosen_cost_ms=c.cost_ms,
                from_cache=True,
                runner=c.runner,
                line=self.lineno,
                format="cached",
                formats=c.formats,
            )
        )
        return True

    def _layer_misc(self, line: str) -> None:
        s = strip_prefix(line)
        if s.startswith("Engine Layer Information") or s == "Layers:":
            self.engine_layers = []
            self._layers_open = True
            return
        if s.startswith("ForeignNode ") and " metadata: " in s:
            m = FOREIGN_META.match(s)
            if m is not None:
                self._meta = (m["node"].strip(WS), split_onnx_layers(m["md"]))
                if self._blk is not None:
                    self._attach_meta(self._blk)
            return
        if s.startswith("Layer("):
            self._layer_line(line)
        elif s.startswith("Name: "):
            self._oneline(line)

    def _layer_line(self, line: str) -> bool:
        layer = layer_line(line)
        if layer is None:
            return False
        self._add_engine_layer(layer)
        return True

    def _oneline(self, line: str) -> bool:
        layer = oneline_layer(line)
        if layer is None:
            return False
        self._add_engine_layer(layer)
        return True
