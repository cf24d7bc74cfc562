"""Naming the timing-cache keys that no log line names.

Real TensorRT 10.x logs time Cask convolutions without printing a key, keep one cache entry
per format combination, and add reformat entries; none of them has an
``Autotuning op X(key: K)`` header, yet every key of the recording cache must be locked (a
key left out would be free to drift). What the lock records for such a key, in order of
evidence:

1. a keyless log record (Cask runner table, keyless Myelin table) whose chosen tactic is
   the key's tactic: its layer name, kernel and candidates;
2. an engine-inspector layer whose ``TacticValue`` is the key's tactic: its name and
   ``TacticName`` (reformat layers usually land here), no candidates;
3. otherwise ``<cache-only 0x12345678>``: the key and its tactic, kernel and candidates
   unknown. It is still pinned and drift-checked like every key; ``pin`` cannot switch it.

A tactic hash shared by several keys of one layer (several format combinations) gives the
same name to each: names repeat in locks, keys identify entries. A tactic chosen by several
layers (two convolutions of the same shape pick the same kernel) cannot tell which of them
owns the key: the entry is named ``<one of conv1, conv2>`` and still gets the kernel and the
candidates, which those layers share. ``pin key=0x...`` pins any of them.
"""

from __future__ import annotations

from typing import Any

from reprobuild.lock.model import LayerEntry, LockCandidate

CACHE_ONLY = "<cache-only {prefix}>"


def attribute_keyless(
    unlogged: dict[str, int], records: list[Any], layer_info: str | None
) -> dict[str, LayerEntry]:
    """A lock entry for each ``{key: tactic}`` the log never named, by the rules above."""
    by_tactic: dict[int, list[Any]] = {}
    for rec in records:
        if rec.key is None and rec.chosen is not None:
            by_tactic.setdefault(int(rec.chosen), []).append(rec)
    inspector = _inspector_tactics(layer_info)
    out: dict[str, LayerEntry] = {}
    for key, tactic in sorted(unlogged.items()):
        recs = by_tactic.get(int(tactic), [])
        if recs:
            cands = sorted(
                {LockCandidate(c.tactic_hash, c.kernel) for r in recs for c in r.candidates},
                key=lambda c: c.tactic,
            )
            kernel = next((c.kernel for c in cands if c.tactic == tactic), recs[0].chosen_kernel)
            name = _one_of({r.layer for r in recs})
            out[key] = LayerEntry(key, name, tactic, kernel, False, cands)
            continue
        layers = inspector.get(int(tactic), [])
        if layers:
            kernels = {k for _, k in layers}
            kernel = kernels.pop() if len(kernels) == 1 else None
            out[key] = LayerEntry(key, _one_of({n for n, _ in layers}), tactic, kernel, False, [])
            continue
        out[key] = LayerEntry(key, CACHE_ONLY.format(prefix=key[:10]), tactic, None, False, [])
    return out


def _one_of(names: set[str]) -> str:
    """The layer name, or ``<one of a, b>`` when the evidence fits several layers."""
    return next(iter(names)) if len(names) == 1 else f"<one of {', '.join(sorted(names))}>"


def _inspector_tactics(layer_info: str | None) -> dict[int, list[tuple[str, str | None]]]:
    """``{TacticValue: [(engine layer name, TacticName)]}``; empty without detailed info."""
    if not layer_info:
        return {}
    from reprobuild.errors import ReprobuildError
    from reprobuild.logs.layerinfo import build_layer_info

    try:
        info = build_layer_info(layer_info)
    except ReprobuildError:
        return {}
    out: dict[int, list[tuple[str, str | None]]] = {}
    for layer in info.layers:
        if layer.tactic_value is not None:
            out.setdefault(int(layer.tactic_value), []).append((layer.name, layer.tactic_name))
    return out
