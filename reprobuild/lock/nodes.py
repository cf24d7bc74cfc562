"""The layers section read straight from the composed node tree.

The layers are nearly all of a big lock (10,000 entries, 400,000 nodes). Building plain
data from them and then validating that data costs more than parsing the text, so entries
in the shape the writer produces are checked and converted in one walk over the nodes.
Anything else (a wrong type, an unknown field, an explicit tag, a repeated key) makes
this walk give up, and the general path (plain data + ``validate``) reads the same nodes
and reports the error with its position; so this walk never decides what is an error.
"""

from __future__ import annotations

from typing import Any

from yaml import MappingNode, ScalarNode, SequenceNode
from yaml.constructor import SafeConstructor

from reprobuild.lock.model import LayerEntry, LockCandidate
from reprobuild.lock.schema import HEX_RE, KEY_RE

STR = "tag:yaml.org,2002:str"
MAP = "tag:yaml.org,2002:map"
SEQ = "tag:yaml.org,2002:seq"
_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_ENTRY_FIELDS = frozenset(("layer", "key", "tactic", "time", "kernel", "pinned", "candidates"))
_ENTRY_REQUIRED = ("layer", "key", "tactic")
_CANDIDATE_FIELDS = frozenset(("tactic", "kernel"))
_CANDIDATE_REQUIRED = ("tactic",)


class _Unusual(Exception):
    """Not in the writer's shape: leave it to the general path."""


def layers_from_nodes(node: Any) -> list[LayerEntry] | None:
    """The entries, or None if anything is unusual (the general path then decides)."""
    try:
        return _layers(node)
    except _Unusual:
        return None


def _layers(node: Any) -> list[LayerEntry]:
    if node.__class__ is not SequenceNode or node.tag != SEQ:
        raise _Unusual
    entries: list[LayerEntry] = []
    seen: set[str] = set()
    for item in node.value:
        f = _fields(item, _ENTRY_FIELDS, _ENTRY_REQUIRED)
        key = _key(f["key"])
        if key in seen:
            raise _Unusual
        seen.add(key)
        cands = f.get("candidates")
        entries.append(
            LayerEntry(
                key=key,
                layer=_str(f["layer"]),
                tactic=_tactic(f["tactic"]),
                kernel=_opt_str(f.get("kernel")),
                pinned=_bool(f.get("pinned"), False),
                candidates=[] if cands is None or cands.tag == _NULL else _candidates(cands),
                time_ms=_time(f.get("time")),
            )
        )
    return entries


def _candidates(node: Any) -> list[LockCandidate]:
    if node.__class__ is not SequenceNode or node.tag != SEQ:
        raise _Unusual
    out = []
    for c in node.value:
        pairs = c.value if c.__class__ is MappingNode and c.tag == MAP else None
        if pairs is not None and len(pairs) == 2:  # {tactic: ..., kernel: ...}: most nodes
            (kt, vt), (kk, vk) = pairs
            if kt.value == "tactic" and kk.value == "kernel" and kt.tag == kk.tag == STR:
                out.append(LockCandidate(_tactic(vt), _opt_str(vk)))
                continue
        f = _fields(c, _CANDIDATE_FIELDS, _CANDIDATE_REQUIRED)
        out.append(LockCandidate(_tactic(f["tactic"]), _opt_str(f.get("kernel"))))
    return out


def _fields(node: Any, allowed: frozenset[str], required: tuple[str, ...]) -> dict[str, Any]:
    if node.__class__ is not MappingNode or node.tag != MAP:
        raise _Unusual
    out: dict[str, Any] = {}
    for k, v in node.value:
        if k.__class__ is not ScalarNode or k.tag != STR or k.value not in allowed:
            raise _Unusual
        if k.value in out:
            raise _Unusual
        out[k.value] = v
    for name in required:
        if name not in out:
            raise _Unusual
    return out


def _str(node: Any) -> str:
    if node.__class__ is ScalarNode and node.tag == STR:
        return node.value
    raise _Unusual


def _opt_str(node: Any) -> str | None:
    if node is None or (node.__class__ is ScalarNode and node.tag == _NULL):
        return None
    return _str(node)


def _bool(node: Any, default: bool) -> bool:
    if node is None:
        return default
    if node.__class__ is ScalarNode and node.tag == _BOOL:
        return SafeConstructor.bool_values[node.value.lower()]
    raise _Unusual


def _tactic(node: Any) -> int:
    text = _str(node)
    if not HEX_RE.fullmatch(text):
        raise _Unusual
    value = int(text, 16)
    if value >= 2**64:
        raise _Unusual
    return value


def _time(node: Any) -> float | None:
    """A recorded time as the writer writes it: ``float.hex`` text, or ``inf``."""
    if node is None:
        return None
    text = _str(node)
    if text == "inf":
        return float("inf")
    if not text.startswith("0x"):
        raise _Unusual
    try:
        value = float.fromhex(text)
    except ValueError:
        raise _Unusual from None
    if not value >= 0:
        raise _Unusual
    return value


def _key(node: Any) -> str:
    text = _str(node)
    if not KEY_RE.fullmatch(text):
        raise _Unusual
    return "0x" + text[2:].lower()
