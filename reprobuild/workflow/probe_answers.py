"""Turning what the probe saw into answers to :data:`probe.QUESTIONS`, and its bundle.

Each answer says whether reprobuild worked with this behaviour (``pass``/``fail``/
``skipped``) and which of the stand-in's named behaviours this TensorRT shows
(``observed``), so a stand-in variant can be confirmed or dropped from the first real run.
:class:`Answer` is defined here, where answers are made; :mod:`.probe` reports them.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprobuild.transaction import Outputs

_KEY_HEADER = re.compile(r"Autotuning op .*\(key: (0x[0-9a-fA-F]{32})\)")


@dataclass
class Answer:
    question: str
    text: str
    result: str  # pass | fail | skipped
    observed: list[str]  # stand-in behaviour names this TensorRT shows, or ["default"]
    detail: str = ""
    action: str = ""  # what reprobuild does with this answer (the table's last column)


def _key_times_answer(evs: list[tuple[str, Any]], questions: dict[str, str]) -> Answer:
    """(a): cached times between a layer's keys; the unchanged cache is the control."""
    asked = [(n, e.key_times) for n, e in evs if e.key_times[0] != "skipped"]
    moves = [n for n, (v, _) in asked if v == "moves"]
    stays = [n for n, (v, _) in asked if v == "stays"]
    return Answer(
        "key-times",
        questions["key-times"],
        "pass" if asked else "skipped",
        (["multi-key"] if moves else []) + (["fixed-format"] if stays else []) or ["default"],
        "; ".join(f"{n}: {e.key_times[1]}" for n, e in evs) or "not asked",
        "writes each key's recorded time back, so a rebuild chooses between keys as recorded"
        if not stays
        else "cached times do not choose between keys here: the format is decided otherwise",
    )


def edit_kinds(evs: list[tuple[str, Any]]) -> dict[str, str]:
    """(c) per layer kind over every model: ``ignored``/``fails`` if any model showed it,
    else ``honoured`` if one did, else ``skipped``."""
    from reprobuild.workflow.probe_edits import KINDS

    out = {}
    for kind in KINDS:
        seen = [e.edits[kind][0] for _, e in evs if kind in e.edits]
        bad = [v for v in seen if v in ("ignored", "fails")]
        out[kind] = bad[0] if bad else "honoured" if "honoured" in seen else "skipped"
    return out


def _edits_answer(evs: list[tuple[str, Any]], questions: dict[str, str]) -> Answer:
    """(c): an edited tactic in a deserialized cache, for a Cask and a Myelin layer; each
    kind's negative control is the unchanged cache running the recorded tactic."""
    from reprobuild.workflow.probe_edits import edits_verdict

    kinds = edit_kinds(evs)
    verdict = edits_verdict(kinds)
    return Answer(
        "edits",
        questions["edits"],
        "skipped" if all(v == "skipped" for v in kinds.values()) else "pass",
        [f"{k}-edits-ignored" for k, v in kinds.items() if v in ("ignored", "fails")]
        or ["default"],
        "; ".join(f"{n} {k}: {v} ({d})" for n, e in evs for k, (v, d) in e.edits.items())
        or "not asked",
        "records this TensorRT and GPU as honouring edits: recordings here write the tie "
        "rule's choices by default"
        if verdict == "honoured"
        else "recordings here keep the builder's choices (--apply-tie-rule writes the rule's "
        f"choices anyway): edits are {verdict} ("
        + ", ".join(f"{k} {v}" for k, v in kinds.items())
        + ")",
    )


def _replay_answer(runs: list[Any], questions: dict[str, str], built: bool) -> Answer:
    """(b): the recording engine's bits against a replay's, on the same seeded inputs; the
    negative control is the other models (and the stand-in's ``recording-bits``)."""
    seen = {r.name: r.replay for r in runs if r.replay is not None}
    differ = sorted(n for n, v in seen.items() if not v["same"])
    return Answer(
        "recording-bits",
        questions["recording-bits"],
        _result(built) if seen else "skipped",
        ["recording-bits"] if differ else ["default"],
        f"other bits in {', '.join(differ)}; same in {len(seen) - len(differ)}"
        if differ
        else f"same bits in {len(seen)} models"
        if seen
        else "no recording ran its engine",
        "the lock records the replay's bits (every locked build is a replay)",
    )


def _replay_keys_answer(runs: list[Any], questions: dict[str, str]) -> Answer:
    """Did a recording's replay time keys the recording had not made (the miss TensorRT
    11.0 was seen not to stop)? The negative control is every model whose replay did not."""
    seen = {r.name: r.replay_added for r in runs if r.replay_added is not None}
    added = sorted(n for n, keys in seen.items() if keys)
    return Answer(
        "replay-keys",
        questions["replay-keys"],
        "pass" if seen else "skipped",
        ["replay-adds-combination"] if added else ["default"],
        "; ".join(f"{n}: {len(seen[n])} added" for n in added)
        + (f"; none in {len(seen) - len(added)}" if len(seen) > len(added) else "")
        if added
        else f"no key added in {len(seen)} models"
        if seen
        else "no recording was replayed",
        "the recording locks the added keys from the replay's cache after a second replay "
        "from it matches",
    )


def _result(ok: bool) -> str:
    return "pass" if ok else "fail"


def answers(runs: list[Any], steps: list[Any], questions: dict[str, str]) -> list[Answer]:
    """One answer per question, over every model the probe built."""
    from reprobuild.workflow.probe_capture import non_finite_times

    locked = [r for r in runs if r.locked is not None]
    built = all(r.locked_ok for r in runs) and bool(runs)
    out = []

    headers = sorted(
        {r.name for r in locked for line in r.locked.lines if _KEY_HEADER.search(line)}
    )
    cached = any("got cached result" in line for r in locked for line in r.locked.lines)
    out.append(
        Answer(
            "hit-headers",
            questions["hit-headers"],
            _result(built),
            (["hit-headers"] if headers else []) + (["cached-result-lines"] if cached else [])
            or ["default"],
            f"headers in the locked build of {', '.join(headers)}" if headers else "no headers",
        )
    )
    unmatched = sorted(
        {w for r in runs for w in r.warnings if "engine layer" in w and "layer '" in w}
    )
    typed = any(_typed(r.locked.layer_info) for r in locked)
    out.append(
        Answer(
            "engine-names",
            questions["engine-names"],
            _result(built),
            (["myelin-names"] if unmatched else []) + (["typed-io"] if typed else [])
            or ["default"],
            "; ".join(unmatched[:5]) or "every locked layer matched an engine layer",
        )
    )
    keyless, multi = _keyless(runs)
    several = multi or keyless["inspector"]
    observed = (["keyless-cask"] if keyless["log"] else []) + (["multi-key"] if several else [])
    out.append(
        Answer(
            "keyless",
            questions["keyless"],
            _result(built),
            observed or ["default"],
            ", ".join(f"{v} keys named from the {k}" for k, v in keyless.items())
            + (f"; layers with several keys: {', '.join(multi)}" if multi else ""),
        )
    )
    held = [
        r.name
        for r in locked
        if r.pinned is not None and r.locked.after.get(r.pinned[0]) == r.pinned[1]
    ]
    bad_times = non_finite_times([c for r in runs for c in (r.recording, r.locked) if c])
    shuffled = [r.name for r in runs if r.shuffled]
    flags = sorted({f for r in locked for f in r.locked.extra.get("builder_flags", [])})
    pins_observed = (["inf-nan"] if bad_times else []) + (["shuffled-keys"] if shuffled else [])
    out.append(
        Answer(
            "pins",
            questions["pins"],
            _result(bool(locked) and len(held) == len(locked) and built),
            pins_observed or ["default"],
            f"pin held in {len(held)}/{len(locked)} models; non-finite cached times: "
            f"{len(bad_times)}; flags: {', '.join(flags)}",
        )
    )
    strict = [r.strict_attach for r in runs if isinstance(r.strict_attach, bool)]
    untold = [f"{r.name}: {r.strict_attach}" for r in runs if isinstance(r.strict_attach, str)]
    out.append(
        Answer(
            "strict-attach",
            questions["strict-attach"],
            _result(built) if strict else "skipped",
            ["strict-attach"] if strict and not all(strict) else ["default"],
            "refused (reprobuild attaches with ignore_mismatch=True)"
            if strict and not all(strict)
            else "accepted"
            if strict
            else f"could not tell ({'; '.join(untold)})"
            if untold
            else "not checked",
        )
    )
    verify_ok = [s.ok for s in steps if s.name == "verify"]
    paths = sorted({r.run_path for r in runs if r.run_path})
    out.append(
        Answer(
            "run",
            questions["run"],
            _result(all(verify_ok)) if verify_ok else "skipped",
            ["default"],
            ", ".join(paths) or "no engine ran",
        )
    )
    tx = [r.trtexec for r in runs if r.trtexec is not None]
    ran = [s for s in tx if s.ok is not None]
    out.append(
        Answer(
            "trtexec",
            questions["trtexec"],
            "skipped" if not ran else _result(all(s.ok for s in ran)),
            ["default"],
            "; ".join(f"{s.model}: {s.detail or 'ok'}" for s in tx) or "not run",
        )
    )
    out += key_answers(runs, questions, shared_names(runs))
    for answer in out:
        answer.action = answer.action or ACTIONS.get(answer.question, "")
    return out


ACTIONS = {
    "hit-headers": "decides drift by the cache map and inspector only, never by log headers",
    "engine-names": "matches engine layers by name variants; unmatched layers are warnings",
    "keyless": "names keyless keys from the log and inspector; locks them all",
    "pins": "pins with update() and the recorded times; compares the map before and after",
    "strict-attach": "attaches caches with ignore_mismatch=True and checks the map instead",
    "run": "runs engines through that CUDA runtime",
    "trtexec": "export-cache documents what trtexec honours (docs/export-cache.md)",
}


_COST = r"(?:[\d.]+|nan|inf)"  # a candidate that failed to time logs nan
_ROW = re.compile(rf"\d+, {_COST}, {_COST}, [\d.]+, ([^,]+), (0x[0-9a-fA-F]+)")


def shared_names(runs: list[Any]) -> bool:
    """Whether a recording's tables list one kernel name under several tactic hashes."""
    seen: dict[str, set[int]] = {}
    for r in runs:
        for line in r.recording.lines if r.recording is not None else []:
            if m := _ROW.search(line):
                seen.setdefault(m.group(1).strip(), set()).add(int(m.group(2), 16))
    return any(len(v) > 1 for v in seen.values())


def _typed(layer_info: str) -> bool:
    from reprobuild.logs.layerinfo import build_layer_info

    try:
        info = build_layer_info(layer_info)
    except Exception:  # noqa: BLE001 - unreadable: no types seen
        return False
    return any(t.datatype or t.format for x in info.layers for t in (*x.inputs, *x.outputs))


def key_answers(runs: list[Any], questions: dict[str, str], shared: bool = False) -> list[Answer]:
    """The answers from :mod:`.probe_keys` and the pinned builds' retries."""
    evs = [(r.name, r.keys) for r in runs if getattr(r, "keys", None) is not None]
    out = []
    asked = [(n, e) for n, e in evs if e.non_editable is not None]
    same = [n for n, e in asked if set(e.non_editable) == set(e.recorded)]
    out.append(
        Answer(
            "editable-keys",
            questions["editable-keys"],
            "skipped" if not asked else "pass",
            ["default"],
            "; ".join(
                f"{n}: {len(set(e.non_editable) & set(e.recorded))} of {len(e.recorded)} "
                f"keys shared ({len(e.non_editable)} without the flag)"
                for n, e in asked
            )
            or "; ".join(f"{n}: {e.non_editable_why}" for n, e in evs)
            or "not asked",
            "an exported cache pins builds without the flag"
            if asked and len(same) == len(asked)
            else "export-cache's file pins only builds that set the editable flag",
        )
    )
    counted = [(n, e.tactic_values) for n, e in evs if e.tactic_values[1]]
    equal = all(m == t for _, (m, t) in counted)
    out.append(
        Answer(
            "tactic-value",
            questions["tactic-value"],
            "skipped" if not counted else _result(equal),
            ["shared-kernel-names"] if shared else ["default"],
            "; ".join(f"{n}: {m}/{t} TacticValues are cache hashes" for n, (m, t) in counted)
            or "no engine layer showed a TacticValue",
            "cross-checks kernels by TacticValue, names only where it is absent",
        )
    )
    misses = [(n, e) for n, e in evs if e.miss != "skipped"]
    stops = all(e.miss == "fails" for _, e in misses)
    out.append(
        Answer(
            "miss-fails",
            questions["miss-fails"],
            "skipped" if not misses else "pass",
            ["default"],
            "; ".join(f"{n}: {e.miss} ({e.miss_detail})" for n, e in evs) or "not asked",
            "sets the flag on pinned builds and compares the whole map anyway"
            if stops
            else "relies on the whole-map comparison: the flag did not stop a miss",
        )
    )
    retried = sorted(
        {
            r.name
            for r in runs
            for c in ([r.locked] if r.locked else [])
            if c.extra.get("retried_without_error_on_miss")
        }
    )
    out.append(
        Answer(
            "strict-retried",
            questions["strict-retried"],
            _result(not retried) if runs else "skipped",
            ["default"],
            f"retried in {', '.join(retried)}" if retried else "no pinned build was retried",
            "fails the build (exit 1) naming the keys, unless --allow-cache-miss-retry",
        )
    )
    out.append(_replay_answer(runs, questions, bool(runs) and all(r.locked_ok for r in runs)))
    out.append(_replay_keys_answer(runs, questions))
    out.append(_key_times_answer(evs, questions))
    out.append(_edits_answer(evs, questions))
    other = [(n, e) for n, e in evs if e.other_process is not None]
    stable = all(set(e.other_process) == set(e.recorded) for _, e in other)
    # a second recording in this process (the plain build) that made other keys is an
    # answer too: the key set is not a function of the model alone
    varied = [n for n, e in evs if e.again is not None and set(e.again) != set(e.recorded)]
    details = [
        f"{n}: {'same' if set(e.other_process) == set(e.recorded) else 'DIFFERENT'} keys"
        for n, e in other
    ] + [f"{n}: another recording in this process made DIFFERENT keys" for n in varied]
    out.append(
        Answer(
            "stable-keys",
            questions["stable-keys"],
            "fail" if varied else "skipped" if not other else _result(stable),
            ["varying-keys"] if varied or not stable else ["default"],
            "; ".join(details)
            or "; ".join(sorted({e.other_process_why for _, e in evs}))
            or "not asked",
            "reuses recording caches across runs (caches/)"
            if stable and not varied
            else "a lock applies only with its recording cache: keep caches/ beside the lock; "
            "a recording with other keys stops with exit 1 naming them",
        )
    )
    return out


def _keyless(runs: list[Any]) -> tuple[dict[str, int], list[str]]:
    """How the recording's unlogged keys were named, and layers holding several keys."""
    counts = {"log": 0, "inspector": 0, "cache only": 0}
    multi: set[str] = set()
    for r in runs:
        if r.lock is None or r.recording is None:
            continue
        logged = {
            m.group(1).lower() for line in r.recording.lines if (m := _KEY_HEADER.search(line))
        }
        names = [e.layer for e in r.lock.layers]
        multi |= {f"{r.name}:{n}" for n in names if names.count(n) > 1}
        for e in r.lock.layers:
            if e.key in logged:
                continue
            if e.layer.startswith("<cache-only"):
                counts["cache only"] += 1
            elif e.candidates:
                counts["log"] += 1
            else:
                counts["inspector"] += 1
    return counts, sorted(multi)


def timings(runs: list[Any]) -> dict[str, Any]:
    """Per model: a plain build, the recording, the locked build as the backend timed it and
    as reprobuild's whole locked ``build`` took (the difference is reprobuild's overhead)."""
    out: dict[str, Any] = {}
    for r in runs:
        plain = r.plain.seconds if r.plain else None
        locked_backend = r.locked.seconds if r.locked else None
        out[r.name] = {
            "plain_build_s": plain,
            "recording_build_s": r.recording.seconds if r.recording else None,
            "locked_backend_build_s": locked_backend,
            "locked_reprobuild_build_s": r.locked_wall or None,
            "reprobuild_overhead_s": None
            if locked_backend is None
            else round(r.locked_wall - locked_backend, 4),
            "locked_over_plain": None
            if not plain or not r.locked_wall
            else round(r.locked_wall / plain, 3),
        }
    return out


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def write_evidence(run: Any) -> None:
    """The raw evidence of one model, under its folder in the bundle."""
    d = run.dir
    if run.recording is not None:  # also when the recording failed: the log is the evidence
        failed = f"# the build failed: {run.recording.error}\n" if run.recording.error else ""
        (d / "recording.log").write_text("\n".join(run.recording.lines) + "\n" + failed)
    if run.keys is not None and run.keys.miss_log:  # (d): what a strict miss printed
        (d / "strict_miss.log").write_text("\n".join(run.keys.miss_log) + "\n")
    for name, info in (run.keys.edit_evidence if run.keys is not None else {}).items():
        (d / f"edits_{name}.json").write_text(info)  # (c): the engines it compared
    if run.locked is not None:
        (d / "locked.log").write_text("\n".join(run.locked.lines) + "\n")
        write_json(d / "cache_before.json", run.locked.cache_json("before"))
        write_json(d / "cache_after.json", run.locked.cache_json("after"))
        (d / "inspector.json").write_text(run.locked.layer_info)
    for junk in (
        "caches",
        "recording.engine",
        "recording.engine.report.json",
        "recording.engine.layers.json",
        "locked.engine",
        "locked.engine.report.json",
        "trtexec.engine",
        "tactics.lock.lck",
    ):
        p = d / junk
        if p.is_dir():
            import shutil

            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    for onnx_file in d.glob("*.onnx"):
        onnx_file.unlink()  # the bundled examples are in every install


def tar(root: Path, bundle: Path) -> None:
    """``bundle`` written whole or not at all, as every output is (:class:`.Outputs`: a
    temporary file beside it, then a rename; its folder made if missing)."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tf:
        tf.add(root, arcname=root.name)
    with Outputs() as out:
        out.stage_bytes(bundle, data.getvalue(), "probe bundle")
        out.commit()
