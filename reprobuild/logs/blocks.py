"""The open blocks of a builder log and how a finished block becomes a record.

``LogParser`` (``parser.py``) recognises lines and moves between states; this base class
holds that state and turns blocks into ``TacticRecord``s: which candidate was chosen, with
which kernel and cost, and which format the record reports.
"""

from __future__ import annotations

import hashlib
import math
from operator import itemgetter

from reprobuild.logs.layermodel import EngineLayer
from reprobuild.logs.records import Candidate, LogWarning, TacticRecord

MAX_ENGINE_LAYERS = 100_000
_HASH = itemgetter(1)  # Candidate.tactic_hash


def _chosen_candidate(
    cands: list[Candidate], chosen: int, runner: str | None, *, any_runner: bool = False
) -> Candidate | None:
    """The first candidate timed as ``chosen`` by ``runner`` (or by any runner), else the
    first timed as ``chosen`` at all, else None.

    A block can hold thousands of candidates: the hashes are compared by ``list.index``
    rather than by an interpreted loop over the candidates.
    """
    hashes = list(map(_HASH, cands))
    try:
        first = hashes.index(chosen)
    except ValueError:
        return None
    i = first
    try:
        while not any_runner and cands[i].runner != runner:
            i = hashes.index(chosen, i + 1)
    except ValueError:
        return cands[first]
    return cands[i]


class RunnerBlock:
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


class OpBlock:
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


_GROWING = ("cands", "fastest")
"""A block's lists that only grow while it is open: hashed incrementally by ``fingerprint``."""


class _ListDigest:
    """A running digest of a list that only grows, or is replaced or cut (which restarts
    it: another list, fewer items, or another first item than the one hashed first; the
    first item is held, so a new one can never be taken for it)."""

    __slots__ = ("items", "first", "count", "hash")

    def __init__(self) -> None:
        self.items: list[object] | None = None
        self.first: object = None
        self.count = 0
        self.hash = hashlib.blake2b(digest_size=20)

    def digest(self, items: list[object]) -> bytes:
        if (
            items is not self.items
            or len(items) < self.count
            or (self.count and items[0] is not self.first)
        ):
            self.items, self.count = items, 0
            self.hash = hashlib.blake2b(digest_size=20)
        h = self.hash
        for item in items[self.count :]:
            h.update(repr(item).encode("utf-8", "surrogatepass") + b"\n")
        self.count = len(items)
        self.first = items[0] if items else None
        return h.digest()


class BlockState:
    """What the parser remembers between lines; records leave through ``_out``."""

    def __init__(self, source: str | None = None, *, max_warnings: int = 10_000) -> None:
        self.source = source
        self.lineno = 0
        self.warnings: list[LogWarning] = []
        self.warnings_dropped = 0
        self.engine_layers: list[EngineLayer] = []
        self._max_warnings = max_warnings
        self._out: list[TacticRecord] = []
        self._blk: RunnerBlock | None = None
        self._op: OpBlock | None = None
        self._orphans: list[Candidate] = []
        self._cur_layer = ""
        self._set_layer = ""
        self._meta: tuple[str, tuple[str, ...]] | None = None
        self._pending: tuple[str, int | None] | None = None
        self._legacy = False
        self._layers_open = False
        self._digests: dict[tuple[str, str], _ListDigest] = {}

    @property
    def max_warnings(self) -> int:
        """How many warnings are kept; past it they are only counted."""
        return self._max_warnings

    def fingerprint(self) -> bytes:
        """A digest of everything that decides what later lines make: the open blocks, the
        remembered layer names, flags and engine layers, and the line count.

        Why: ``logs.split`` reads the second half of a log in another process from a fresh
        parser; where that parser's fingerprint meets the one read from the start, the two
        read every later line alike. ``repr`` of these values is exact (floats included).
        It is taken after every block read (a MiB), so what only grows (an open block's
        candidates, which can run to 100,000, the orphans, the engine layers) is hashed
        incrementally (:class:`_ListDigest`): a check costs the lines added since the last.
        """

        def block(b: RunnerBlock | OpBlock | None) -> object:
            if b is None:
                return None
            fixed = [getattr(b, a) for a in b.__slots__ if a not in _GROWING]
            return (type(b).__name__, fixed, [self._grown(b, a) for a in _GROWING])

        state = (
            self.lineno,
            block(self._blk),
            block(self._op),
            self._cur_layer,
            self._set_layer,
            self._meta,
            self._pending,
            self._legacy,
            self._layers_open,
        )
        h = hashlib.blake2b(repr(state).encode("utf-8", "surrogatepass"), digest_size=20)
        h.update(self._grown(self, "_orphans"))
        h.update(self._grown(self, "engine_layers"))
        return h.digest()

    def _grown(self, owner: object, name: str) -> bytes:
        """The digest of list ``name`` of ``owner`` (b"" where it has none), kept per list."""
        lst = getattr(owner, name, None)
        if lst is None:
            return b""
        where = (type(owner).__name__, name)
        found = self._digests.get(where)
        if found is None:
            found = self._digests[where] = _ListDigest()
        return found.digest(lst)

    def _open_implicit(self, layer: str, kind: str = "runner") -> RunnerBlock:
        """A block whose header was not printed (excerpt starting mid-block)."""
        layer = layer or self._cur_layer or self._set_layer
        blk = RunnerBlock(layer, None, self.lineno, kind)
        blk.cands, self._orphans = self._orphans, []
        self._attach_meta(blk)
        self._blk = blk
        return blk

    def _attach_meta(self, blk: RunnerBlock) -> None:
        if self._meta is not None and blk.layer and self._meta[0] == blk.layer:
            blk.onnx = self._meta[1]

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

    def _emit_runner_block(self, blk: RunnerBlock, chosen: int | None, runner: str | None) -> None:
        layer = blk.layer or self._set_layer
        if not layer:
            return  # nothing to identify it by (excerpt without any layer name)
        kernel = cost = None
        if chosen is not None:
            match = _chosen_candidate(blk.cands, chosen, runner)
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
            match = _chosen_candidate(op.cands, chosen, None, any_runner=True)
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

    def _add_engine_layer(self, layer: EngineLayer) -> None:
        if not self._layers_open:
            self.engine_layers = []
            self._layers_open = True
        if len(self.engine_layers) < MAX_ENGINE_LAYERS:
            self.engine_layers.append(layer)

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
