"""The canonical form of a lock as YAML events, written by PyYAML's emitter.

The lock's bytes are a contract (reviewed diffs, ``--frozen`` CI checks), so every choice
PyYAML would otherwise make is fixed here: a string is plain only when it is an
identifier-like word that no YAML reader could take for anything else, otherwise it is
double-quoted; hex hashes are always quoted; candidate and plan rows are flow mappings;
lines never wrap.

Events rather than ``yaml.dump`` and representers: the lock is a fixed shape, and building
events directly (constant events shared) is several times faster than representing a node
tree on a 10,000-layer lock, which ``reprobuild pin`` rewrites on every call. The layers,
the bulk of a lock, are written as text (:func:`layers_text`), at a fifth of the
emitter's time; the emitter escapes the strings that need it.

PyYAML's emitters (C and pure) differ from the format as first written in four places,
restored by ``restyle``: no comments (the header is prepended), block sequences inside a
mapping are not indented, escapes use YAML's short forms (``\\x01``, ``\\e``, ``\\N``,
uppercase hex, ``\\U`` for characters beyond U+FFFF) instead of JSON's ``\\u00XX`` forms,
and keys over 128 characters or with line breaks become ``? key`` complex keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import yaml
from yaml import (
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)

from reprobuild.lock.model import SCHEMA_VERSION, LayerEntry, Lock

HEADER = (
    "# reprobuild lockfile: written by `reprobuild build`, edited with `reprobuild pin`.\n"
    "# Review changes like code; one section per target (a kind of machine).\n"
)
WIDTH = 1 << 30  # lines never wrap (libyaml's own "unlimited" is not honoured by pure PyYAML)

_PLAIN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_./\-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "none"}

# Events carry no identity, so constant ones are shared between all places they occur.
_BLOCK_MAP = MappingStartEvent(None, None, True, flow_style=False)
_FLOW_MAP = MappingStartEvent(None, None, True, flow_style=True)
_BLOCK_SEQ = SequenceStartEvent(None, None, True, flow_style=False)
_FLOW_SEQ = SequenceStartEvent(None, None, True, flow_style=True)
_MAP_END = MappingEndEvent()
_SEQ_END = SequenceEndEvent()
_NULL = ScalarEvent(None, None, (True, False), "null")
_TRUE = ScalarEvent(None, None, (True, False), "true")
_FALSE = ScalarEvent(None, None, (True, False), "false")
_K = {
    k: ScalarEvent(None, None, (True, False), k)
    for k in (
        "layer",
        "key",
        "tactic",
        "time",
        "runs",
        "band",
        "ties",
        "kernel",
        "pinned",
        "candidates",
        "layers",
    )  # fmt: skip
}


def is_plain(value: str) -> bool:
    """Plain only for identifier-like words; YAML 1.1 reads 'no', 'on', 'y' as booleans."""
    return _PLAIN_RE.fullmatch(value) is not None and value.lower() not in _YAML_WORDS


def text_event(value: str) -> ScalarEvent:
    if is_plain(value):
        return ScalarEvent(None, None, (True, False), value)
    return ScalarEvent(None, None, (False, True), value, style='"')


def scalar_event(value: Any) -> ScalarEvent:
    if value is None:
        return _NULL
    if isinstance(value, bool):
        return _TRUE if value else _FALSE
    if isinstance(value, int):
        return ScalarEvent(None, None, (True, False), str(value))
    if isinstance(value, float):
        if value != value:
            text = ".nan"
        elif abs(value) == float("inf"):
            text = ".inf" if value > 0 else "-.inf"
        else:
            text = repr(value)
            # YAML 1.1 (PyYAML) reads 1e+20 as a string: a float needs its dot.
            text = text if "." in text else text.replace("e", ".0e", 1)
        return ScalarEvent(None, None, (True, False), text)
    return text_event(str(value))


def _hex(n: int) -> ScalarEvent:
    return ScalarEvent(None, None, (False, True), f"0x{n:x}", style='"')


def _section(value: dict[str, Any]) -> Iterator[Any]:
    """A block mapping whose non-empty mappings nest as blocks, lists of rows as block
    sequences of flow rows, and everything else (scalar lists included) inline."""
    yield _BLOCK_MAP
    for k, v in value.items():
        yield scalar_event(k)
        if isinstance(v, dict) and v:
            yield from _section(v)
        elif isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v):
            yield _BLOCK_SEQ
            for item in v:
                yield from _inline(item)
            yield _SEQ_END
        else:
            yield from _inline(v)
    yield _MAP_END


def _inline(v: Any) -> Iterator[Any]:
    if isinstance(v, dict):
        yield _FLOW_MAP
        for k, x in v.items():
            yield scalar_event(k)
            yield from _inline(x)
        yield _MAP_END
    elif isinstance(v, list):
        yield _FLOW_SEQ
        for x in v:
            yield from _inline(x)
        yield _SEQ_END
    else:
        yield scalar_event(v)


def time_text(time_ms: float) -> str:
    """A recorded time, exactly: ``float.hex`` (``inf`` for a key whose tactics failed)."""
    return "inf" if time_ms == float("inf") else float.hex(float(time_ms))


# ------------------------------------------------------------------ layers as text

_SAFE_QUOTED_RE = re.compile(r"[ !#-\[\]-~]*")
"""Printable ASCII but ``"`` and ``\\``: double-quoted, the emitter writes it unchanged."""

DUMPER: type = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def emit_events(events: list[Any]) -> str:
    """PyYAML's text for ``events``, before :func:`restyle`: libyaml's emitter where it is
    installed, the pure one for a lone surrogate (libyaml takes only valid UTF-8)."""
    options: dict[str, Any] = {"width": WIDTH, "allow_unicode": True}
    try:
        return yaml.emit(events, Dumper=DUMPER, **options)
    except UnicodeEncodeError:
        return yaml.emit(events, Dumper=yaml.SafeDumper, **options)


def _escaped(value: str) -> str:
    """``value`` double-quoted as the emitter escapes it, restyled: the one escaping of the
    lock's strings, asked of the emitter for the rare string that needs it."""
    events = [yaml.StreamStartEvent(), yaml.DocumentStartEvent(explicit=False), _BLOCK_MAP]
    events += [_K["layer"], ScalarEvent(None, None, (False, True), value, style='"'), _MAP_END]
    events += [yaml.DocumentEndEvent(explicit=False), yaml.StreamEndEvent()]
    text = emit_events(events)
    return _ESCAPE_RE.sub(_json_escape, text)[len("layer: ") :].rstrip("\n")


def _quoted(value: str) -> str:
    """A string always double-quoted (hashes, keys), escaped where it needs it."""
    return f'"{value}"' if _SAFE_QUOTED_RE.fullmatch(value) else _escaped(value)


def _text(value: str | None) -> str:
    """A string as the lock writes it (``null`` for None): plain words as they are,
    printable ASCII in double quotes, anything else escaped by the emitter."""
    if value is None:
        return "null"
    if is_plain(value):
        return value
    if _SAFE_QUOTED_RE.fullmatch(value) is None:
        return _escaped(value)
    return f'"{value}"'


def layers_text(layers: list[LayerEntry]) -> str:
    """A target's ``layers:`` block in its final form (indented, restyled), written as
    text: the one writer of the bulk of a lock. Building, emitting and re-indenting 50
    events per layer was most of ``pin``'s writing time; only a string that needs
    escaping goes through the emitter (:func:`_escaped`). Empty for no layers."""
    texts: dict[str | None, str] = {}
    lines: list[str] = []
    add = lines.append

    def text(value: str | None) -> str:
        out = texts.get(value)
        if out is None:
            out = texts[value] = _text(value)
        return out

    for e in layers:
        add(f"      - layer: {text(e.layer)}")
        add(f'        key: {_quoted(e.key)}\n        tactic: "0x{e.tactic:x}"')
        if e.time_ms is not None:
            add(f"        time: {text(time_text(e.time_ms))}")
        if e.runs is not None:
            add("        runs: true" if e.runs else "        runs: false")
        if e.near_tie and e.band_ms is not None:
            ties = ", ".join(f'"0x{t:x}"' for t in e.ties)
            add(f"        band: {text(time_text(e.band_ms))}\n        ties: [{ties}]")
        add(f"        kernel: {text(e.kernel)}")
        add("        pinned: true" if e.pinned else "        pinned: false")
        if not e.candidates:
            add("        candidates: []")
            continue
        add("        candidates:")
        for c in e.candidates:
            add(f'          - {{tactic: "0x{c.tactic:x}", kernel: {text(c.kernel)}}}')
    return "\n".join(lines)


def layers_marker(index: int) -> str:
    """The plain word standing for target ``index``'s layers in the emitted text."""
    return f"reprobuild_layers_{index}"


def lock_events(lock: Lock) -> list[Any]:
    """The whole document but the layers, in the fixed field order (``lock`` must be
    canonicalized); each target's layers are the word :func:`layers_marker`, replaced by
    :func:`layers_text`'s text."""
    model: dict[str, Any] = {
        "path": lock.model.path,
        "sha256": lock.model.sha256,
        "external_data": [{"path": f.path, "sha256": f.sha256} for f in lock.model.external_data],
    }
    top: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "model": model,
        "settings": lock.settings.to_dict(),
    }
    if lock.precision is not None:
        top["precision"] = lock.precision.to_dict()
    out: list[Any] = [yaml.StreamStartEvent(), yaml.DocumentStartEvent(explicit=False)]
    out += list(_section(top))[:-1]  # keep the top mapping open for the targets
    out += (scalar_event("targets"), _BLOCK_SEQ)
    for index, target in enumerate(lock.targets()):
        env = target.environment
        head: dict[str, Any] = {
            "target": env.name,
            "backend": env.backend,
            "identity": env.identity_dict(),
            "advisory": env.advisory_dict(),
            "outputs": [{"inputs": o.inputs, "sha256": o.sha256} for o in target.outputs],
        }
        out += list(_section(head))[:-1]  # keep the target's mapping open for its layers
        out += (_K["layers"], ScalarEvent(None, None, (True, False), layers_marker(index)))
        out.append(_MAP_END)
    out += (_SEQ_END, _MAP_END, yaml.DocumentEndEvent(explicit=False), yaml.StreamEndEvent())
    return out


# ------------------------------------------------------------------------- restyling

_ESCAPE_RE = re.compile(r"\\(x[0-9A-F]{2}|u[0-9A-F]{4}|U[0-9A-F]{8}|.)")
_SHORT_ESCAPES = {
    "0": "\\u0000",
    "a": "\\u0007",
    "v": "\\u000b",
    "e": "\\u001b",
    "N": "\\u0085",
    "_": "\xa0",
    "L": "\\u2028",
    "P": "\\u2029",
}
_COMPLEX_KEY_RE = re.compile(r"^( *)\? (.*)\n\1: ([A-Za-z_][A-Za-z0-9_]*: )?", re.M)


def _json_escape(m: re.Match[str]) -> str:
    body = m.group(1)
    if body[0] == "x":
        return "\\u00" + body[1:].lower()
    if body[0] == "u":
        return "\\u" + body[1:].lower()
    if body[0] == "U":
        return chr(int(body[1:], 16))
    return _SHORT_ESCAPES.get(body, m.group(0))


def _simple_key(m: re.Match[str]) -> str:
    indent, key, nested = m.group(1), m.group(2), m.group(3)
    # A block-mapping value starts on the ': ' line in the complex form.
    return f"{indent}{key}:\n{indent}  {nested}" if nested else f"{indent}{key}: "


def _indent_sequences(text: str) -> str:
    """Indent every block sequence under its key, as the format always had it.

    Every scalar of the canonical form is on one line (quoted scalars escape line breaks,
    nothing wraps), so each line is indentation plus content and a line starting with
    '- ' is a sequence item.
    """
    out: list[str] = []
    open_at: list[int] = []  # indentation of each enclosing (emitted unindented) sequence
    for line in text.split("\n"):
        body = line.lstrip(" ")
        ind = len(line) - len(body)
        item = body.startswith("- ")
        while open_at and (open_at[-1] > ind or (open_at[-1] == ind and not item)):
            open_at.pop()
        if item and (not open_at or open_at[-1] != ind):
            open_at.append(ind)
        out.append(" " * (ind + 2 * len(open_at)) + body if open_at else line)
    return "\n".join(out)


def restyle(text: str) -> str:
    """From PyYAML's output to the lock's canonical bytes (see the module docstring)."""
    if "\\" in text:
        text = _ESCAPE_RE.sub(_json_escape, text)
    if "? " in text:
        text = _COMPLEX_KEY_RE.sub(_simple_key, text)
    return HEADER + _indent_sequences(text)
