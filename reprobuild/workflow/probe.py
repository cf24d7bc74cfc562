"""``doctor --probe``: what this TensorRT actually does, settled on the user's first GPU.

The backend was written against headers, docs and a stand-in; seven behaviours could not be
observed without a GPU (see :data:`QUESTIONS`). The probe runs the whole cycle on the
bundled examples (plain build, record, pin a non-fastest candidate, locked rebuild, verify,
export-cache, and trtexec with ``--errorOnTimingCacheMiss`` where it is on PATH), answers
each question with what it saw (pass / fail / skipped, and which stand-in behaviour this
TensorRT shows), and writes one ``.tar.gz`` bundle of the raw evidence for a bug report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.backends.base import Backend
from reprobuild.errors import ReprobuildError
from reprobuild.events import Progress, Step, quiet
from reprobuild.transaction import check_output_path, working_files
from reprobuild.workflow.probe_answers import (
    Answer,
    answers,
    tar,
    timings,
    write_evidence,
    write_json,
)
from reprobuild.workflow.probe_capture import BuildCapture, CapturingBackend

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEFAULT_MODELS = ("cnn.onnx", "fp16_middle.onnx", "mlp.onnx")
QUESTIONS = {
    "hit-headers": "does a pinned build print 'Autotuning op X(key: K)' for keys it took "
    "from the cache?",
    "engine-names": "does every locked layer match an engine layer by name?",
    "keyless": "are there cache keys no log line names (keyless Cask tables, several keys per "
    "layer, reformats)?",
    "pins": "does update() of a non-fastest candidate hold through the pinned build, with "
    "finite times, in any key order?",
    "strict-attach": "does a strict attach (ignore_mismatch=False) accept a reloaded cache?",
    "run": "which CUDA runtime ran the engines?",
    "trtexec": "does trtexec build from export-cache's file with --errorOnTimingCacheMiss?",
    "editable-keys": "do builds without EDITABLE_TIMING_CACHE (trtexec, Torch-TensorRT) "
    "compute the same keys (Python API)?",
    "tactic-value": "is the inspector's TacticValue the timing cache's tactic hash?",
    "miss-fails": "does ERROR_ON_TIMING_CACHE_MISS fail a build whose cache lacks a key "
    "(negative control), and what exactly does it print?",
    "strict-retried": "was a pinned build retried without ERROR_ON_TIMING_CACHE_MISS?",
    "recording-bits": "does the recording engine give the bits of a build from its serialized "
    "cache (a replay)?",
    "replay-keys": "does a replay of the recording cache time keys the recording did not make?",
    "key-times": "does a change of a key's cached time move a multi-key layer to another key?",
    "edits": "is an edited non-chosen tactic honoured for a Cask and a Myelin layer, in a cache "
    "deserialized into a new config?",
    "stable-keys": "are the keys the same when another process builds the model?",
}
EXPECTED_MISS = "missed a key (expected: trtexec cannot set EDITABLE_TIMING_CACHE)"
BUNDLE_FILES = (
    "report.json",
    "environment.json",
    "timings.json",
)
MODEL_FILES = (
    "recording.log",
    "locked.log",
    "cache_before.json",
    "cache_after.json",
    "inspector.json",
    "tactics.lock",
    "build_report.json",
    "recording_report.json",
    "verify.json",
)


@dataclass
class ProbeStep:
    model: str
    name: str
    ok: bool | None  # None: skipped
    detail: str = ""
    seconds: float = 0.0


@dataclass
class ProbeReport:
    ok: bool
    environment: dict[str, Any]
    steps: list[ProbeStep]
    answers: list[Answer]
    timings: dict[str, Any]
    bundle: str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "environment": self.environment,
            "answers": [a.__dict__ for a in self.answers],
            "steps": [s.__dict__ for s in self.steps],
            "timings": self.timings,
            "bundle": self.bundle,
            "notes": self.notes,
        }


@dataclass
class _ModelRun:
    """Everything one model's cycle produced, for the answers and the bundle."""

    name: str
    dir: Path
    plain: BuildCapture | None = None
    recording: BuildCapture | None = None
    locked: BuildCapture | None = None
    locked_wall: float = 0.0
    locked_ok: bool = False
    warnings: list[str] = field(default_factory=list)
    pinned: tuple[str, int] | None = None  # key, tactic
    lock: Any = None
    run_path: str | None = None
    strict_attach: bool | str | None = None  # a string: why it could not tell
    shuffled: bool = False
    trtexec: ProbeStep | None = None
    keys: Any = None  # probe_keys.KeyEvidence
    replay: dict[str, Any] | None = None  # the recording report's recording_vs_replay
    replay_added: list[str] | None = None  # the recording report's replay_added_keys


def probe(
    bundle: str | os.PathLike[str],
    *,
    backend: Backend | None = None,
    models: tuple[str | os.PathLike[str], ...] | None = None,
    progress: Progress = quiet,
) -> ProbeReport:
    """Run the cycle on every model, answer :data:`QUESTIONS`, write ``bundle``.

    Raises ``BackendUnavailable`` (exit 3) before any work when TensorRT or a GPU is missing.
    """
    if backend is None:
        from reprobuild.backends import get_backend

        backend = get_backend("tensorrt")
    check_output_path(bundle, "probe bundle")  # before any work
    be = CapturingBackend(backend)
    paths = [Path(m) for m in models] if models else [EXAMPLES / m for m in DEFAULT_MODELS]
    steps: list[ProbeStep] = []
    runs: list[_ModelRun] = []
    with tempfile.TemporaryDirectory(prefix="reprobuild-probe-") as tmp:
        root = Path(tmp) / "probe"
        for path in paths:
            run = _ModelRun(path.stem, root / path.stem)
            run.dir.mkdir(parents=True)
            progress(Step(f"probe: {path.name}"))
            with working_files():  # its builds' outputs are evidence for the bundle
                _cycle(be, path, run, steps, progress)
            runs.append(run)
        env = be.environment().to_dict()
        ok = all(s.ok is not False for s in steps)
        report = ProbeReport(
            ok, env, steps, answers(runs, steps, QUESTIONS), timings(runs), str(bundle)
        )
        report.notes += _store_edits(runs, env, str(bundle))
        write_json(root / "report.json", report.to_json())
        write_json(root / "environment.json", env)
        write_json(root / "timings.json", report.timings)
        for run in runs:
            write_evidence(run)
        tar(root, Path(bundle))
    return report


def _store_edits(runs: list[_ModelRun], env: dict[str, Any], bundle: str) -> list[str]:
    """Store the ``edits`` answer for this target, where recordings read it (probe_store);
    a question no model could ask stores nothing."""
    from reprobuild.workflow.probe_answers import edit_kinds
    from reprobuild.workflow.probe_edits import edits_verdict
    from reprobuild.workflow.probe_store import store_answer

    kinds = edit_kinds([(r.name, r.keys) for r in runs if r.keys is not None])
    if all(v == "skipped" for v in kinds.values()):
        return []
    verdict = edits_verdict(kinds)
    path = store_answer(env.get("identity") or {}, verdict, kinds, bundle)
    if path is None:
        return ["the edits answer was not stored: the TensorRT version or GPU is unknown"]
    return [f"edits {verdict} stored in {path} (recordings on this target read it)"]


def _step(run: _ModelRun, steps: list[ProbeStep], name: str, fn: Any) -> Any:
    """Run one step; any error fails the step (recorded), never the probe: on an unknown
    TensorRT an unexpected exception is exactly the evidence the bundle is for."""
    t0 = time.perf_counter()
    try:
        value = fn()
    except ReprobuildError as err:
        steps.append(ProbeStep(run.name, name, False, str(err), _since(t0)))
        return None
    except Exception as err:  # noqa: BLE001 - reported in the bundle, see the docstring
        detail = f"unexpected {type(err).__name__}: {err}"
        steps.append(ProbeStep(run.name, name, False, detail, _since(t0)))
        return None
    steps.append(ProbeStep(run.name, name, True, "", _since(t0)))
    return value if value is not None else True


def _since(t0: float) -> float:
    return round(time.perf_counter() - t0, 4)


def _cycle(
    be: CapturingBackend, model: Path, run: _ModelRun, steps: list[ProbeStep], progress: Progress
) -> None:
    import reprobuild
    from reprobuild.types import BuildSettings
    from reprobuild.workflow.export import export_pinned_cache

    local = run.dir / model.name
    shutil.copy(model, local)
    lock, caches = run.dir / "tactics.lock", run.dir / "caches"
    kw: dict[str, Any] = {"backend": be, "cache_dir": caches, "progress": progress}

    def plain() -> None:
        be.label = "plain"
        be.build(str(local), BuildSettings(), be.create_timing_cache(), lambda line: None)
        run.plain = be.builds[-1]

    _step(run, steps, "plain build", plain)
    be.label = "recording"
    first = len(be.builds)  # this model's recording builds come after
    # Every output goes under the bundle's folder: never the current folder, where a
    # user's own engine of the same name may be.
    recorded = _step(
        run,
        steps,
        "record",
        lambda: reprobuild.build(local, lock=lock, out=run.dir / "recording.engine", **kw),
    )
    recording = [b for b in be.builds[first:] if b.label == "recording"]
    # its raw log, failed or not: the build that timed every candidate, not the tie rule's
    # rebuild from the cache that may follow it
    timed = [b for b in recording if not b.pinned]
    run.recording = (timed or recording)[0] if recording else None
    if not recorded:
        return
    # the recording's report (its tie_break section: what the rule did or would do)
    shutil.copy(run.dir / "recording.engine.report.json", run.dir / "recording_report.json")
    recording_report = json.loads((run.dir / "recording_report.json").read_text())
    run.replay, run.replay_added = (
        recording_report["recording_vs_replay"],
        recording_report["replay_added_keys"],
    )
    run.shuffled = _keys_shuffle(be, caches)
    run.strict_attach = _strict_attach(be, caches)
    from reprobuild.lock.yamlio import load_lock
    from reprobuild.workflow.probe_keys import gather_keys

    run.keys = gather_keys(be, local, caches, run.recording, run.plain, load_lock(lock).layers)
    if not _step(run, steps, "pin a non-fastest candidate", lambda: _pin(run, lock)):
        return
    be.label = "locked"
    t0 = time.perf_counter()
    result = _step(
        run,
        steps,
        "locked rebuild",
        lambda: reprobuild.build(local, lock=lock, out=run.dir / "locked.engine", **kw),
    )
    run.locked_wall = _since(t0)
    run.locked = next((b for b in reversed(be.builds) if b.pinned), None)
    run.locked_ok = bool(result)
    if result:
        run.warnings = list(result.warnings)
        shutil.copy(run.dir / "locked.engine.report.json", run.dir / "build_report.json")
    be.label = "verify"
    verify_report = run.dir / "verify.json"
    _step(
        run,
        steps,
        "verify",
        lambda: _verified(reprobuild.verify(lock=lock, rebuilds=2, report=verify_report, **kw)),
    )
    run.run_path = getattr(be.inner, "last_run_path", None)
    be.label = "export-cache"
    exported = _step(
        run,
        steps,
        "export-cache",
        lambda: export_pinned_cache(lock, run.dir / "pinned.cache", caches, backend=be),
    )
    try:
        run.trtexec = _trtexec(
            run, local, bool(exported), lambda data: be.create_timing_cache(data).tactic_map()
        )
    except Exception as err:  # noqa: BLE001 - evidence for the bundle, as in _step
        detail = f"unexpected {type(err).__name__}: {err}"
        run.trtexec = ProbeStep(run.name, "trtexec --errorOnTimingCacheMiss", False, detail)
    steps.append(run.trtexec)


def _verified(result: Any) -> Any:
    if not result.reproducible:
        from reprobuild.errors import DriftError

        raise DriftError("verify: the rebuilt engines' outputs or tactics differ (verify.json)")
    return result


def _pin(run: _ModelRun, lock: Path) -> None:
    from reprobuild.errors import UsageError
    from reprobuild.lock.edit import edit_lock
    from reprobuild.lock.yamlio import load_lock

    data = load_lock(lock)
    names = [e.layer for e in data.layers]
    entry = next(
        (e for e in data.layers if len(e.candidates) > 1 and names.count(e.layer) == 1), None
    )
    if entry is None:
        raise UsageError("no layer has a second recorded candidate to pin")
    other = next(c for c in entry.candidates if c.tactic != entry.tactic)
    edit_lock(lock, [f"key={entry.key}", f"tactic=0x{other.tactic:x}"])
    run.pinned = (entry.key, other.tactic)
    run.lock = load_lock(lock)


def _recording_bytes(caches: Path) -> bytes | None:
    files = sorted(caches.glob("*.cache")) if caches.is_dir() else []
    return files[0].read_bytes() if files else None


def _keys_shuffle(be: CapturingBackend, caches: Path) -> bool:
    data = _recording_bytes(caches)
    if data is None:
        return False
    cache = be.create_timing_cache(data)
    return len({tuple(cache.query_keys()) for _ in range(4)}) > 1


def _strict_attach(be: CapturingBackend, caches: Path) -> bool | str | None:
    """Whether a strict attach took the recording cache; a string: why it could not tell."""
    check = getattr(be.inner, "strict_attach_accepted", None)
    data = _recording_bytes(caches)
    if check is None or data is None:
        return None
    try:
        return bool(check(data))
    except ReprobuildError as err:
        return str(err)


def _trtexec_misses(run: _ModelRun, cmd: list[str], read: Any) -> list[str]:
    """The keys trtexec missed, found structurally: the same build without
    ``--errorOnTimingCacheMiss`` on another copy of the exported cache, and the cache's key
    map before and after (trtexec writes its cache file back). Empty when that build fails
    too or adds no key: then the strict failure was not a miss."""
    cache = run.dir / "trtexec_nostrict.cache"
    shutil.copy(run.dir / "pinned.cache", cache)
    cmd = [f"--timingCacheFile={cache}" if c.startswith("--timingCacheFile=") else c for c in cmd]
    cmd = [c for c in cmd if not c.startswith(("--saveEngine=", "--exportLayerInfo="))]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    (run.dir / "trtexec_nostrict.log").write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    if proc.returncode != 0:
        return []
    try:
        before = read((run.dir / "pinned.cache").read_bytes())
        after = read(cache.read_bytes())
    except (OSError, ReprobuildError):
        return []
    return sorted(set(after) - set(before))


def _trtexec(run: _ModelRun, model: Path, exported: bool, read: Any) -> ProbeStep:
    exe = shutil.which("trtexec")
    if exe is None or not exported or run.lock is None:
        why = "trtexec is not on PATH" if exe is None else "export-cache did not succeed"
        return ProbeStep(run.name, "trtexec --errorOnTimingCacheMiss", None, why)
    from reprobuild.pinning import cross_check_kernels

    cache = run.dir / "trtexec.cache"  # trtexec writes back to its cache file: use a copy
    shutil.copy(run.dir / "pinned.cache", cache)
    layers = run.dir / "trtexec_layers.json"
    cmd = [
        exe,
        f"--onnx={model}",
        f"--timingCacheFile={cache}",
        "--errorOnTimingCacheMiss",
        f"--builderOptimizationLevel={run.lock.settings.optimization_level}",
        "--profilingVerbosity=detailed",
        f"--exportLayerInfo={layers}",
        f"--saveEngine={run.dir / 'trtexec.engine'}",
    ]
    version = run.lock.environment.identity_dict().get("tensorrt_version") or ""
    if str(version).startswith("10."):
        cmd.append("--stronglyTyped")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return ProbeStep(run.name, "trtexec --errorOnTimingCacheMiss", False, str(err))
    text = proc.stdout + proc.stderr
    (run.dir / "trtexec.log").write_text(" ".join(cmd) + "\n" + text)
    if proc.returncode != 0:
        added = _trtexec_misses(run, [c for c in cmd if c != "--errorOnTimingCacheMiss"], read)
        if added:
            # Expected: trtexec cannot set the editable flag, so its keys may differ. An
            # answer (the file does not pin trtexec builds), not a failure of the cycle;
            # what its strict build printed is kept, not guessed (trtexec.log).
            last = [line for line in text.splitlines() if line.strip()][-1:] or [""]
            detail = (
                f"{EXPECTED_MISS}: exit {proc.returncode}; without the flag it added "
                f"{len(added)} keys to the cache ({', '.join(added[:3])}); it printed: "
                f"{last[0][:200]!r}"
            )
            return ProbeStep(run.name, "trtexec --errorOnTimingCacheMiss", None, detail)
        detail = f"exit {proc.returncode}: see trtexec.log"
        return ProbeStep(run.name, "trtexec --errorOnTimingCacheMiss", False, detail, _since(t0))
    check = cross_check_kernels(layers.read_text(), run.lock.layers)
    detail = "; ".join(check.problems[:3]) or f"{len(check.warnings)} layers not checkable"
    return ProbeStep(
        run.name, "trtexec --errorOnTimingCacheMiss", not check.problems, detail, _since(t0)
    )
