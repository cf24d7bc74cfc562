"""How the lines of a builder log are recognised: patterns and stateless line readers.

Everything here looks at one line and knows nothing of the blocks around it; the state
machine in ``parser.py`` decides what a recognised line means. ASCII semantics throughout
(``\\s``, ``\\d``, case folding, and ``WS`` for stripping): TensorRT prints its own
whitespace and digits in ASCII, and a Unicode space or digit inside a log line is noise, not
a separator or a number. Patterns run only on lines that passed a cheaper substring check.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

from reprobuild.logs.layermodel import EngineLayer
from reprobuild.logs.values import split_onnx_layers, tactic_to_int, tactic_token, to_float

WS = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # what str.strip() removes, restricted to ASCII


def _rx(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags | re.ASCII)


WORD = _rx(r"[^ \t\n\r\x0b\x0c\x1c-\x1f]+")

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
CAND = _rx(
    r"(?:Tactic Name: (?P<k>.+?) )?Tactic: (?P<tac>0x[0-9a-fA-F]+|-?[0-9]+) "
    r"(?:Time|time):?\s*(?P<time>[^\s,]+)"
)
FASTEST_TAIL = _rx(r"Fastest Tactic: (?P<tac>[^\s,]+)\s+Time:?\s*(?P<time>[^\s,]+)")
CHOSE = _rx(r"Chose Runner Type: (?P<runner>.+?) Tactic: (?P<tac>[^\s,]+)")
_OP_KEYED = _rx(r"(?P<name>.*)\(key: (?P<key>[^)]*)\)\s*:?\s*(?P<rest>.*)$")
_KEY32 = _rx(r"0[xX][0-9a-fA-F]{32}")
_KEY_IN = _rx(r"\s*\(key: (?P<key>0[xX][0-9a-fA-F]{32})\)\s*")
SELECTED = _rx(r"\(tactic hash, cost\(in ms\)\):\s*(?P<tac>[^,\s]+)\s*(?:,\s*(?P<time>[^\s,]+))?")
WRITING = _rx(r"Writing the best tactic \(?(?P<tac>[^)\s]+)")
_CACHED_TAIL = _rx(
    r"\s*(?P<runner>[^,]*?)\s*,\s*tactic:?\s*(?P<tac>[^,\s]+)\s*(?:,\s*(?P<time>[^\s,]+))?"
)
_LAYER_LINE = _rx(r"Layer\((?P<type>[^)]*)\):\s*(?P<name>.*?)(?:, Tactic: (?P<tac>[^,\s]+)|,|$)")
_TACTIC_VALUE = _rx(r", TacticValue: (?P<tac>[^,\s]+)")
FOREIGN_META = _rx(r"ForeignNode (?P<node>.*?) metadata: (?P<md>.*)$")

# (kind, pattern, gate): the first pattern that matches names the kind. ``gate`` is a literal
# every match contains (in lower case where the pattern ignores case), tested with ``in``
# first: most lines that mention a cache are no warning, and twelve searches cost more
# than the rest of their line's handling.
WARNINGS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("cache-invalid", _rx(r"Cache result detected as invalid"), "Cache result detected"),
    ("cache-invalid", _rx(r"[Ii]nvalid timing cache"), "nvalid timing cache"),
    ("cache-not-used", _rx(r"timing cache will not be used", re.I), "cache will not be used"),
    ("cache-not-used", _rx(r"Could not read (?:timing )?cache", re.I), "could not read "),
    ("cache-error", _rx(r"[Cc]ache.*Error Code \d+|Error Code \d+.*[Cc]ache"), "Error Code "),
    ("cache-miss", _rx(r"timing cache miss", re.I), "timing cache miss"),
    ("cache-loaded", _rx(r"Loaded \d+ bytes of (?:the )?timing cache", re.I), "loaded "),
    ("cache-loaded", _rx(r"Using existing timing cache", re.I), "using existing timing"),
    ("cache-in-use", _rx(r"Global timing cache in use"), "Global timing cache in use"),
    ("cache-local", _rx(r"Local timing cache in use"), "Local timing cache in use"),
    ("cache-serialized", _rx(r"Serialized \d+ timing cache entries"), "Serialized "),
    ("cache-serialized", _rx(r"Saved \d+ bytes of timing cache"), "Saved "),
)
_WARNING_CHECKS = tuple(
    (kind, pattern.search, gate, bool(pattern.flags & re.IGNORECASE))
    for kind, pattern, gate in WARNINGS
)  # flags read once: ``int & RegexFlag`` runs enum code on every call


# --- quoted names ----------------------------------------------------------------------------
# The reference backend writes a node name as a JSON string where it could be read as
# something else (``escape_name``); the parser reads such a string as one token: nothing in
# it is a key, a candidate row or any other line's marker.

MARKERS = (
    "Tactic", "Autotuning ", "Timing Runner", "Computing costs for", "ache", "(tactic hash",
    "Layer", "(key: ", ", 0x", "[", "]",
)  # fmt: skip
"""What ``LogParser.feed_lines`` dispatches on (or splits at): a name holding one is quoted."""

_JSON = json.JSONDecoder()


def escape_name(name: str) -> str:
    """A node name as it may appear in a log line: unchanged when it is plain, else as a
    JSON string (quotes, escapes). A newline in a name would end the line and let the
    name forge log lines; leading or trailing spaces would be stripped by any reader; a
    marker (``MARKERS``) would be read as a key, a candidate or another line. The lock
    never takes names from these lines (the builder hands over its own records), so
    escaping changes only what a person or ``reprobuild log`` reads."""
    plain = (
        name
        and name.isprintable()
        and name == name.strip()
        and not name.startswith('"')
        and not any(m in name for m in MARKERS)
    )
    return name if plain else json.dumps(name)


def mask_quoted(line: str) -> str:
    """``line`` with the inside of every JSON string blanked (same length, same places), so
    that a marker inside a quoted name is never seen; ``line`` itself when it has none."""
    parts: list[str] = []
    pos = 0
    i = line.find('"')
    while i >= 0:
        try:
            _, end = _JSON.raw_decode(line, i)
        except ValueError:  # not a string (a lone quote): the rest is left as it is
            break
        parts += (line[pos : i + 1], "_" * (end - i - 2), '"')
        pos = end
        i = line.find('"', end)
    return "".join(parts) + line[pos:] if parts else line


def quoted_name(text: str) -> tuple[str, str] | None:
    """(name, what follows) when ``text`` starts with a quoted name, else None."""
    if not text.startswith('"'):
        return None
    try:
        name, end = _JSON.raw_decode(text)
    except ValueError:
        return None
    return (name, text[end:]) if isinstance(name, str) else None


def _unquoted(name: str) -> str:
    whole = quoted_name(name)
    return whole[0] if whole is not None and not whole[1] else name


def strip_prefix(line: str) -> str:
    """The message without logger prefixes (``[ts] [V] [TRT] ``, ``[TensorRT] VERBOSE: `` ...)."""
    m = _PREFIX.match(line)
    return (line[m.end() :] if m else line).strip(WS)


def warning_kind(line: str) -> str | None:
    """The ``LogWarning.kind`` of a timing-cache message, or None for any other line."""
    low = None
    for kind, search, gate, folded in _WARNING_CHECKS:
        if folded:
            if low is None:
                low = line.lower()  # ASCII letters fold as re.I with re.ASCII folds them
            if gate not in low:
                continue
        elif gate not in line:
            continue
        if search(line):
            return kind
    return None


def layer_line(line: str) -> EngineLayer | None:
    """``Layer(<Type>): <name>, Tactic: 0x.., <in> -> <out>`` (Engine Layer Information)."""
    s = strip_prefix(line)
    if not s.startswith("Layer("):
        return None
    m = _LAYER_LINE.match(s)
    if m is None:
        return None
    tac = tactic_to_int(m["tac"]) if m["tac"] else None
    return EngineLayer(m["name"].strip(WS), m["type"] or None, None, tac)


def oneline_layer(line: str) -> EngineLayer | None:
    """An engine inspector kONELINE line: ``Name: .., LayerType: .., ..``."""
    s = strip_prefix(line)
    if not s.startswith("Name: "):
        return None
    i = s.find(", LayerType: ")
    if i < 0:
        return None
    name = s[6:i].strip(WS)
    j = s.find(",", i + 13)
    layer_type = (s[i + 13 :] if j < 0 else s[i + 13 : j]).strip(WS) or None
    tactic_name = None
    k = s.find(", TacticName: ")
    if k >= 0:
        e = s.find(",", k + 14)
        tactic_name = (s[k + 14 :] if e < 0 else s[k + 14 : e]).strip(WS) or None
    tm = _TACTIC_VALUE.search(s)
    tac = tactic_to_int(tm["tac"]) if tm is not None else None
    k = s.find(", Metadata:")
    md = split_onnx_layers(s[k + 11 :]) if k >= 0 else ()
    return EngineLayer(name, layer_type, tactic_name, tac, md)


class CachedLine(NamedTuple):
    """``<layer> [<in> -> <out>] got cached result: <Runner>, tactic 0x.., <t> ms``."""

    layer: str
    key: str | None
    formats: str | None
    tactic: int
    runner: str | None
    cost_ms: float | None


def cached_line(line: str) -> CachedLine | None:
    """The parts of a ``got cached result`` line, or None when it does not read as one."""
    s = strip_prefix(line)
    quoted = quoted_name(s)
    if quoted is not None:  # the name is one token; the rest of the line is read after it
        s = quoted[1]
    i = s.find("got cached result")
    tail = s[i + 17 :].lstrip(":")
    m = _CACHED_TAIL.match(tail)
    if m is None:
        return None
    tac = tactic_to_int(m["tac"])
    if tac is None:
        return None
    head = s[:i].strip(WS)
    formats = None
    if quoted is not None:
        head = f"_ {head}"  # the name's place: formats and key are read after it
    if head.endswith("]"):
        j = head.rfind(" [")
        if j >= 0:
            formats, head = head[j + 2 : -1].strip(WS), head[:j].strip(WS)
    key = None
    km = _KEY_IN.search(head)
    if km is not None:
        key = km["key"].lower()
        head = (head[: km.start()] + " " + head[km.end() :]).strip(WS)
    time_text = m["time"]
    if time_text is not None and time_text.endswith("ms"):
        time_text = time_text[:-2]
    if quoted is not None:
        head = quoted[0]
    return CachedLine(head, key, formats, tac, m["runner"] or None, to_float(time_text))


class OpHeader(NamedTuple):
    """``Autotuning op NAME(key: 0x..):`` (editable cache) or ``NAME: [ONNX Layer: ..]``."""

    name: str
    key: str | None
    keyed: bool
    onnx: tuple[str, ...]


def op_header(rest: str) -> OpHeader:
    """What follows ``Autotuning op ``; a key that is not 32 hex digits is dropped. A quoted
    name is one token: the key is the one after it, never one inside a name."""
    rest = rest.strip(WS)
    quoted = quoted_name(rest)
    text = rest if quoted is None else "_" + quoted[1]  # "_": the quoted name's place
    masked = mask_quoted(text)
    key: str | None = None
    keyed = False
    m = _OP_KEYED.match(masked)
    if m is not None:
        keyed = True
        name, suffix = text[: m.end("name")].strip(WS), text[m.start("rest") :].strip(WS)
        if _KEY32.fullmatch(m["key"].strip(WS)):
            key = m["key"].strip(WS).lower()
    else:
        p = masked.find(": [")
        if p >= 0:
            name, suffix = text[:p].strip(WS), text[p + 2 :].strip(WS)
        else:
            name, suffix = text.rstrip(":").strip(WS), ""
    if quoted is not None:
        name = quoted[0]
    onnx = tuple(map(_unquoted, split_onnx_layers(suffix))) if suffix.startswith("[") else ()
    return OpHeader(name, key, keyed, onnx)


# --- line readers ----------------------------------------------------------------------------
# Each returns what ``LogParser``'s matching method derives from the line, or None where
# that method returns False (line not recognised) before changing any state.


_SET = "Set Tactic Name: "
_RS = " \t\n\r\x0b\x0c"  # regex \s with re.ASCII


def _set_tactic_split(s: str) -> tuple[int, int] | None:
    """Where ``SET_TACTIC.match(s)`` ends its lazy layer and finds the literal, without the
    backtracking (10 us a line): the smallest layer end over every literal, reached through
    whitespace alone or through whitespace, one ``(<src>)`` group and whitespace."""
    best = None
    q = s.find(_SET)
    while q >= 0:
        r = q
        while r > 0 and s[r - 1] in _RS:
            r -= 1
        ends = [r]
        if r > 0 and s[r - 1] == ")":
            o = s.rfind("(", 0, r - 1)
            if o >= 0 and ")" not in s[o + 1 : r - 1]:
                while o > 0 and s[o - 1] in _RS:
                    o -= 1
                ends.append(o)
        for end in ends:
            if best is None or end < best[0]:
                best = (end, q)
        q = s.find(_SET, q + 1)
    return best


def set_tactic_parts(line: str) -> tuple[str | None, str, int | None] | None:
    """``LogParser._set_tactic``: (layer, or None to keep the last one; kernel; tactic).

    ``SET_TACTIC`` written out: the layer as above; after the literal, the kernel runs to
    the last `` Tactic: <token>`` that ends the line (bar trailing whitespace), or to the end.
    """
    s = strip_prefix(line)
    split = _set_tactic_split(s)
    if split is None:
        return None
    end, q = split
    start, stop = q + len(_SET), len(s.rstrip(_RS))
    kernel_end, tok = stop, None
    t = s.rfind(" Tactic: ", start, stop)
    if t >= 0 and stop > t + 9 and not any(c in _RS or c == "," for c in s[t + 9 : stop]):
        kernel_end, tok = t, s[t + 9 : stop]
    layer = s[:end]
    kernel_end = max(kernel_end, start)
    tac = tactic_to_int(tok) if tok else None
    return (layer.strip(WS) if layer else None), s[start:kernel_end].strip(WS), tac


def cand_parts(line: str) -> tuple[int, bool, str | None, float | None] | None:
    """The regex end of ``LogParser._tactic_rest``: (tactic, hex?, kernel, time)."""
    m = CAND.search(line)
    if m is None:
        return None
    tac = tactic_token(m["tac"])
    if tac is None:
        return None
    return tac, m["tac"][:2] in ("0x", "0X"), m["k"], to_float(m["time"])


def cost_of(tail: str) -> float | None:
    """The time after `` Time: `` on a candidate line, as the fast path reads it."""
    try:
        return float(tail)
    except ValueError:  # trailing text after the time
        word = WORD.search(tail)
        return to_float(word[0]) if word else None


def selected_parts(line: str) -> tuple[int, float | None] | None:
    """``LogParser._selected``: (tactic, cost) of ``The selected tactic is ...``."""
    m = SELECTED.search(line)
    if m is None:
        return None
    tac = tactic_to_int(m["tac"])
    return None if tac is None else (tac, to_float(m["time"]))


def writing_parts(line: str) -> tuple[int | None] | None:
    """``Writing the best tactic (0x..)``: (tactic or None,), or None without a match."""
    m = WRITING.search(line)
    return None if m is None else (tactic_to_int(m["tac"].rstrip(")")),)


def chose_parts(line: str) -> tuple[int, str, bool] | None:
    """``LogParser._chose``: (tactic, runner, whether the tactic was printed in hex)."""
    m = CHOSE.search(line)
    if m is None:
        return None
    tac = tactic_to_int(m["tac"])
    if tac is None:
        return None
    return tac, m["runner"].strip(WS), m["tac"][:2] in ("0x", "0X")


def _runner_tail(rest: str) -> int:
    """Where ``RUNNER_TAIL`` puts the `` (`` before the runner in ``rest`` (stripped), or
    -1: the last ``(`` with no parenthesis after it but the final ``)``, after a space.
    String methods, not the backtracking pattern: this runs on every ``Timing Runner``."""
    if not rest.endswith(")"):
        return -1
    p = rest.rfind("(", 0, len(rest) - 1)
    if p < 1 or rest[p - 1] != " " or ")" in rest[p + 1 : -1]:
        return -1
    return p - 1


def runner_parts(line: str) -> tuple[str, str | None, bool] | None:
    """``LogParser._timing_runner``: (layer, runner, whether a new block is a reformat)."""
    i = line.find("Timing Runner: ")
    if i < 0:
        return None
    rest = line[i + 15 :].strip(WS)
    p = _runner_tail(rest)
    if p >= 0:
        layer = rest[:p].strip(WS)
        runner: str | None = rest[p + 2 : -1].split("[", 1)[0].strip(WS) or None
    else:
        layer, runner = rest, None
    return layer, runner, layer.startswith("Optimizer Reformat")


def fastest_parts(line: str) -> tuple[int, float | None, str, str | None] | None:
    """``LogParser._fastest``: (tactic, time, layer or "", runner or None)."""
    i = line.find("Fastest Tactic: ")
    m = FASTEST_TAIL.match(line, i) if i >= 0 else None
    if m is None:
        return None
    tac = tactic_to_int(m["tac"])
    if tac is None:
        return None
    layer, runner = "", None
    q = line.rfind(") profiling completed", 0, i)
    while q >= 0:  # PROFILED.search(line, 0, i): the last such group, written out
        p = line.rfind("(", 0, q)
        if p >= 1 and line[p - 1] == " " and ")" not in line[p + 1 : q]:
            layer = strip_prefix(line[: p - 1])
            runner = line[p + 1 : q].split("[", 1)[0].strip(WS) or None
            break
        q = line.rfind(") profiling completed", 0, q + 20)
    return tac, to_float(m["time"]), layer, runner
