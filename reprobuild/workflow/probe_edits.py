"""``doctor --probe``'s question ``edits``: is an edited tactic honoured?

What is shown in public is narrow: NVIDIA's editable-cache sample edits one Myelin MatMul
in the cache object of the build that wrote it. reprobuild edits (a pin, the tie rule's
choice) in a cache deserialized from the recording's bytes into a new builder config, for
any layer. So the probe asks it for one Cask layer (its engine layer shows a
``TacticValue``) and one Myelin layer (no ``TacticValue``: its kernel is the ``TacticName``),
each edited alone:

- negative control: a pinned build from the recording cache as it is must run the layer's
  recorded tactic (else the engine cannot tell which tactic ran, and the kind is skipped);
- the edit: a pinned build from a fresh copy of the same bytes after ``update(key, another
  candidate, the key's recorded time)`` runs the other candidate (``honoured``) or not
  (``ignored``), or fails (``fails``, TensorRT's message recorded).

The candidate is one the control engine shows nowhere (no other layer runs it), so its
presence in the edited engine can only come from the edit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reprobuild.lock.model import by_layer
from reprobuild.types import BuildSettings

KINDS = ("cask", "myelin")


def edit_control(
    be: Any,
    inner: Any,
    model: Path,
    caches: Path,
    layers: list[Any],
    evidence: dict[str, str] | None = None,
) -> dict[str, tuple[str, str]]:
    """Per kind: (honoured | ignored | fails | skipped, a one-line detail); never raises.
    ``evidence`` receives each build's engine inspector JSON (``control``, ``cask``,
    ``myelin``) for the bundle."""
    files = sorted(caches.glob("*.cache")) if caches.is_dir() else []
    if not files:
        return {k: ("skipped", "no recording cache") for k in KINDS}
    data = files[0].read_bytes()
    seen = evidence if evidence is not None else {}
    try:
        control = _shown(be, inner, model, data, None, seen, "control")
    except Exception as err:  # noqa: BLE001 - the answer records what happened
        return {k: ("skipped", f"the unchanged cache: {type(err).__name__}: {err}") for k in KINDS}
    out = {}
    for kind in KINDS:
        pick = _pick(kind, layers, control)
        if pick is None:
            out[kind] = ("skipped", f"no {kind} layer with another candidate to edit")
            continue
        entry, other = pick
        out[kind] = _edit(be, inner, model, data, kind, entry, other, seen)
    return out


Shown = dict[str, set[Any]]
"""What an engine shows: ``cask`` TacticValues, ``myelin`` TacticNames of layers without one."""


def _identity(kind: str, tactic: int, kernel: str | None) -> Any:
    return tactic if kind == "cask" else kernel


def _pick(kind: str, layers: list[Any], control: Shown) -> tuple[Any, Any] | None:
    """A one-key layer of ``kind`` that the control ran as recorded, and a candidate of it
    the control engine shows nowhere (so seeing it later can only come from the edit)."""
    grouped = by_layer(layers)
    for e in layers:
        if len(grouped[e.layer]) > 1 and not e.layer.startswith("<"):
            continue  # several keys: which one runs is another question (key-times)
        if _identity(kind, e.tactic, e.kernel) not in control[kind]:
            continue
        for c in e.candidates:
            ident = _identity(kind, c.tactic, c.kernel)
            if c.tactic != e.tactic and ident is not None and ident not in control[kind]:
                return e, c
    return None


def _edit(
    be: Any,
    inner: Any,
    model: Path,
    data: bytes,
    kind: str,
    entry: Any,
    other: Any,
    evidence: dict[str, str],
) -> tuple[str, str]:
    where = f"layer {entry.layer!r} (key {entry.key})"
    try:
        value = be.create_timing_cache(data).query(entry.key)
        if value is None:
            return "skipped", f"{where}: the key is not in the recording cache"
        change = (entry.key, other.tactic, float(value.time_ms))
        shown = _shown(be, inner, model, data, change, evidence, kind)
    except Exception as err:  # noqa: BLE001 - a failed build is an answer, its message kept
        return "fails", f"{where} edited to 0x{other.tactic:x}: the build failed: {err}"
    seen = _identity(kind, other.tactic, other.kernel) in shown[kind]
    return ("honoured" if seen else "ignored"), (
        f"{where} edited from 0x{entry.tactic:x} to 0x{other.tactic:x} in a cache "
        f"deserialized into a new config: the engine runs "
        f"{'the edit' if seen else 'no layer with it'} (the unchanged cache ran 0x"
        f"{entry.tactic:x})"
    )


def _shown(
    be: Any,
    inner: Any,
    model: Path,
    data: bytes,
    change: tuple[str, int, float] | None,
    evidence: dict[str, str],
    name: str,
) -> Shown:
    """A pinned build from ``data`` loaded into a new cache (one key edited first); its
    inspector JSON goes to ``evidence[name]``."""
    from reprobuild.logs.layerinfo import parse_layer_info

    cache = be.create_timing_cache(data)
    if change is not None and not cache.update(*change):
        raise ValueError(f"update() refused key {change[0]}")
    out = inner.build(str(model), BuildSettings(), cache, lambda line: None, pinned=True)
    evidence[name] = out.layer_info
    info = parse_layer_info(out.layer_info, "engine layer information", strict=False)
    return {
        "cask": {int(x.tactic_value) for x in info.layers if x.tactic_value is not None},
        "myelin": {x.tactic_name for x in info.layers if x.tactic_value is None and x.tactic_name},
    }


def edits_verdict(per_kind: dict[str, str]) -> str:
    """``honoured`` only when every kind was asked and honoured; ``not-honoured`` when any
    kind was ignored or failed; else ``unknown`` (a kind not asked proves nothing)."""
    if any(v in ("ignored", "fails") for v in per_kind.values()):
        return "not-honoured"
    if all(per_kind.get(k) == "honoured" for k in KINDS):
        return "honoured"
    return "unknown"
