"""``doctor --probe``'s questions about keys, tactic hashes and the strict flag.

Each is asked through TensorRT's Python API (pip installs ship no trtexec), on the model
the probe just recorded, with the recording's cache as the starting point:

- editable vs non-editable keys: one more build with ``EDITABLE_TIMING_CACHE`` cleared (what
  trtexec and Torch-TensorRT build with) and its key set compared with the recording's;
- the inspector's ``TacticValue`` against the cache's tactic hashes (the kernel cross-check
  relies on them being the same number);
- ``ERROR_ON_TIMING_CACHE_MISS`` as a negative control: one key removed from a copy of the
  recording cache (``update`` with a NaN time deletes an entry), then a pinned build, which
  must fail strictly (the backend then retries without the flag and says so);
- cached times between a layer's keys: one key of a multi-key layer given a quarter of the
  running key's time in a copy of the recording cache, against the unchanged cache (the
  negative control): does the engine move to the other key?
- keys across processes: a fresh Python process records the same model; its key set must
  equal this one's (only with the installed TensorRT: a test stand-in lives in-process).

Whether an edited tactic is honoured (one Cask and one Myelin layer, each edited alone in a
cache deserialized into a new config) is asked by :mod:`.probe_edits`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.lock.model import by_layer
from reprobuild.types import BuildSettings


@dataclass
class KeyEvidence:
    recorded: list[str]
    non_editable: list[str] | None = None  # None: not asked (see non_editable_why)
    non_editable_why: str = ""
    tactic_values: tuple[int, int] = (0, 0)  # engine layers whose TacticValue is a cache hash
    miss: str = "skipped"  # fails | not-stopped | skipped
    miss_detail: str = ""
    other_process: list[str] | None = None
    other_process_why: str = ""
    key_times: tuple[str, str] = ("skipped", "not asked")  # moves | stays | skipped, detail
    # the probe's plain build: a second recording in this process (None: it failed)
    again: list[str] | None = None
    miss_log: list[str] = field(default_factory=list)  # what the strict miss build printed
    # per layer kind ("cask", "myelin"): honoured | ignored | fails | skipped, and the detail
    edits: dict[str, tuple[str, str]] = field(default_factory=dict)
    edit_evidence: dict[str, str] = field(default_factory=dict)  # build -> inspector JSON


def gather_keys(
    be: Any, model: Path, caches: Path, recording: Any, plain: Any = None, layers: Any = ()
) -> KeyEvidence:
    """Every key question for one model (errors become the answer's detail, never raise).
    ``plain``: the probe's plain build from an empty cache, i.e. another recording."""
    ev = KeyEvidence(sorted(recording.after) if recording is not None else [])
    if plain is not None and plain.after:
        ev.again = sorted(plain.after)
    inner = getattr(be, "inner", be)
    try:
        cache = be.create_timing_cache(b"")
        inner.build(str(model), BuildSettings(), cache, lambda line: None, editable=False)
        ev.non_editable = sorted(cache.query_keys())
    except TypeError:
        ev.non_editable_why = "this backend cannot build without the editable flag"
    except Exception as err:  # noqa: BLE001 - the answer records what happened
        ev.non_editable_why = f"{type(err).__name__}: {err}"
    if recording is not None and recording.layer_info:
        ev.tactic_values = _tactic_values(recording.layer_info, set(recording.after.values()))
    ev.miss, ev.miss_detail = _miss_control(be, inner, model, caches, ev.miss_log)
    ev.key_times = key_time_control(be, inner, model, caches, list(layers))
    from reprobuild.workflow.probe_edits import edit_control

    ev.edits = edit_control(be, inner, model, caches, list(layers), ev.edit_evidence)
    ev.other_process, ev.other_process_why = _other_process(inner, model)
    return ev


def _tactic_values(layer_info: str, hashes: set[int]) -> tuple[int, int]:
    from reprobuild.logs.layerinfo import build_layer_info

    try:
        info = build_layer_info(layer_info)
    except Exception:  # noqa: BLE001 - unreadable: nothing to count
        return (0, 0)
    values = [int(x.tactic_value) for x in info.layers if x.tactic_value is not None]
    return (sum(1 for v in values if v in hashes), len(values))


def _miss_control(
    be: Any, inner: Any, model: Path, caches: Path, printed: list[str]
) -> tuple[str, str]:
    """(d) what a strict miss prints: every line the strict build (and its retry) logged
    goes to ``printed`` (the bundle's ``strict_miss.log``), recorded, never matched."""
    files = sorted(caches.glob("*.cache")) if caches.is_dir() else []
    if not files:
        return "skipped", "no recording cache was written"
    try:
        cache = be.create_timing_cache(files[0].read_bytes())
        keys = sorted(cache.query_keys())
        if not keys:
            return "skipped", "the recording cache holds no keys"
        gone = keys[0]
        value = cache.query(gone)
        cache.update(gone, value.tactic_hash if value else 0, float("nan"))  # NaN deletes
        if gone in cache.query_keys():
            return "skipped", f"update() with a NaN time did not remove key {gone}"
        out = inner.build(str(model), BuildSettings(), cache, printed.append, pinned=True)
    except Exception as err:  # noqa: BLE001 - the answer records what happened
        return "skipped", f"{type(err).__name__}: {err}"
    if "ERROR_ON_TIMING_CACHE_MISS" not in out.extra.get("builder_flags", []):
        return "skipped", "this TensorRT has no ERROR_ON_TIMING_CACHE_MISS"
    if out.extra.get("retried_without_error_on_miss"):
        return "fails", f"key {gone} removed: {out.extra.get('strict_failure')}"
    return "not-stopped", f"key {gone} removed, and the strict build succeeded"


def _other_process(inner: Any, model: Path) -> tuple[list[str] | None, str]:
    trt = sys.modules.get("tensorrt")
    if type(inner).__name__ != "TensorRTBackend" or not getattr(trt, "__file__", None):
        return None, "not the installed TensorRT (a stand-in cannot be reached from a process)"
    cmd = [sys.executable, "-m", "reprobuild.workflow.probe_keys", str(model)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        if proc.returncode != 0:
            return None, f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
        return sorted(json.loads(proc.stdout.strip().splitlines()[-1])), ""
    except Exception as err:  # noqa: BLE001 - the answer records what happened
        return None, f"{type(err).__name__}: {err}"


def _main(model: str) -> None:
    """``python -m reprobuild.workflow.probe_keys MODEL``: one recording build, keys as JSON."""
    from reprobuild.backends import get_backend

    be = get_backend("tensorrt")
    cache = be.create_timing_cache(b"")
    be.build(model, BuildSettings(), cache, lambda line: None)
    print(json.dumps(sorted(cache.query_keys())))


if __name__ == "__main__":
    _main(sys.argv[1])


def key_time_control(
    be: Any, inner: Any, model: Path, caches: Path, layers: list[Any]
) -> tuple[str, str]:
    """(a) Does a change of a key's cached time move a multi-key layer to another key?

    A layer with two keys whose tactics differ: a pinned build from the recording cache as
    it is (the negative control) runs key A's tactic; the same build after
    ``update(B, B's tactic, A's time / 4)`` runs B's when cached times choose between a
    layer's keys (``moves``), A's when they do not (``stays``)."""
    files = sorted(caches.glob("*.cache")) if caches.is_dir() else []
    pairs = [es for es in by_layer(layers).values() if len({e.tactic for e in es}) >= 2]
    if not files or not pairs:
        return "skipped", "no layer has several keys" if files else "no recording cache"
    data = files[0].read_bytes()
    try:
        control = _engine_tactics(be, inner, model, data, None)
        for entries in pairs:
            ran = [e for e in entries if e.tactic in control]
            idle = [e for e in entries if e.tactic not in control]
            if len(ran) != 1 or not idle:
                continue  # which key runs must be plain from the engine's tactics alone
            a, b = ran[0], idle[0]
            value = be.create_timing_cache(data).query(a.key)
            faster = (b.key, b.tactic, float(value.time_ms) / 4)
            moved = _engine_tactics(be, inner, model, data, faster)
            verdict = "moves" if b.tactic in moved else "stays"
            return verdict, (
                f"layer {a.layer!r}: key {b.key} given a quarter of key {a.key}'s time: the "
                f"engine runs 0x{(b if verdict == 'moves' else a).tactic:x} (the unchanged "
                f"cache ran 0x{a.tactic:x})"
            )
    except Exception as err:  # noqa: BLE001 - the answer records what happened
        return "skipped", f"{type(err).__name__}: {err}"
    return "skipped", "no multi-key layer ran exactly one of its keys"


def _engine_tactics(
    be: Any, inner: Any, model: Path, data: bytes, change: tuple[str, int, float] | None
) -> set[int]:
    """The TacticValues of a pinned build from ``data`` (one key's value changed first)."""
    from reprobuild.logs.layerinfo import build_layer_info

    cache = be.create_timing_cache(data)
    if change is not None:
        cache.update(*change)
    out = inner.build(str(model), BuildSettings(), cache, lambda line: None, pinned=True)
    info = build_layer_info(out.layer_info)
    return {int(x.tactic_value) for x in info.layers if x.tactic_value is not None}
