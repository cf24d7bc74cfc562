"""``verify`` and ``bisect``: proving that a lock reproduces, and finding what breaks it.

Reproducibility is judged on bits (sha256 of every output, every rebuild) and on the tactic
map; accuracy against ONNX Runtime is reported beside it but never confused with it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.backends.base import Backend
from reprobuild.errors import DriftError, EnvironmentMismatch, UsageError
from reprobuild.lockfile import DEFAULT_LOCK, Lock, load_lock
from reprobuild.workflow import (
    Progress,
    _prepare_model,
    _quiet,
    announce_backend,
    check_lock_matches,
    model_info,
    pinned_build,
    resolve_backend,
    sha256_file,
)


@dataclass
class BuildCheck:
    index: int
    output_sha256: dict[str, str]
    drift: list[dict[str, Any]]  # per layer: layer, key, locked, built
    problems: list[str]
    duration_s: float


@dataclass
class VerifyResult:
    reproducible: bool
    lock_path: str
    model_path: str
    backend: str
    rebuilds: int
    inputs: str
    builds: list[BuildCheck]
    differing_outputs: list[str]
    accuracy: dict[str, Any]
    report_path: str | None = None
    layers: int = 0

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["builds"] = [b.__dict__ for b in self.builds]
        # JSON has no Infinity: report an infinite error as the string "inf".
        d["accuracy"] = {
            k: str(v) if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in self.accuracy.items()
        }
        return d


@dataclass
class BisectResult:
    differing_layers: int
    culprits: list[dict[str, Any]]
    builds: int
    outputs_differ: bool
    message: str
    steps: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _output_hashes(outputs: dict[str, Any]) -> dict[str, str]:
    import numpy as np

    out = {}
    for name in sorted(outputs):
        arr = np.ascontiguousarray(outputs[name])
        h = hashlib.sha256(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(arr.tobytes())
        out[name] = h.hexdigest()
    return out


def _open_lock(
    lock: str | os.PathLike[str], model: str | os.PathLike[str] | None, be: Backend
) -> tuple[Lock, Path, Path]:
    lock_path = Path(lock)
    data = load_lock(lock_path)
    model_path = Path(model) if model is not None else lock_path.parent / data.model.path
    if not model_path.is_file():
        raise UsageError(f"{model_path}: model file not found (from {lock_path}); pass MODEL")
    if data.environment.backend != be.name:
        raise EnvironmentMismatch(
            f"{lock_path}: recorded with backend {data.environment.backend!r}; "
            f"pass --backend {data.environment.backend}"
        )
    env_diff = check_lock_matches(
        data, lock_path, model_info(model_path, lock_path.parent), data.settings, be
    )
    if env_diff:
        raise EnvironmentMismatch(
            f"{lock_path}: recorded on another environment ({'; '.join(env_diff)}); verify on "
            "the recorded target"
        )
    return data, lock_path, model_path


def load_inputs(
    path: str | os.PathLike[str] | None, model_path: Path, seed: int
) -> tuple[dict, str]:
    """Seeded random inputs, or ``.npz`` / Polygraphy saved-inputs JSON (never unpickled)."""
    import onnx

    from reprobuild.precision import load_calibration

    proto = onnx.load(str(model_path), load_external_data=False)
    return load_calibration(None if path is None else str(path), proto, seed=seed)


def verify(
    model: str | os.PathLike[str] | None = None,
    *,
    lock: str | os.PathLike[str] = DEFAULT_LOCK,
    rebuilds: int = 3,
    inputs: str | os.PathLike[str] | None = None,
    report: str | os.PathLike[str] | None = None,
    backend: str | Backend = "auto",
    cache_dir: str | os.PathLike[str] = "caches",
    seed: int = 0,
    progress: Progress = _quiet,
) -> VerifyResult:
    """Rebuild ``rebuilds`` times from the lock and prove the outputs bit-identical."""
    from reprobuild.cachedir import cache_path

    if rebuilds < 1:
        raise UsageError(f"--rebuilds must be at least 1, got {rebuilds}")
    be = resolve_backend(backend)
    announce_backend(backend, be, progress)
    data, lock_path, model_path = _open_lock(lock, model, be)
    feeds, inputs_desc = load_inputs(inputs, model_path, seed)
    expected = data.tactic_map()
    names = {e.key: e.layer for e in data.layers}
    checks: list[BuildCheck] = []
    first_outputs: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="reprobuild-verify-") as tmp:
        built_model, _, _ = _prepare_model(model_path, data, None, True, Path(tmp), lock_path)
        built_sha = sha256_file(built_model)
        cfile = cache_path(cache_dir, be.environment(), data.settings, built_sha)
        for i in range(rebuilds):
            progress(f"rebuild {i + 1}/{rebuilds}")
            t0 = time.perf_counter()
            warnings: list[str] = []
            pb = pinned_build(
                be,
                built_model,
                data.settings,
                expected,
                cfile,
                progress,
                warnings,
                entries=data.layers,
                strict=False,
            )
            drift = [
                {
                    "layer": names.get(k, "?"),
                    "key": k,
                    "locked": None if k not in expected else f"0x{expected[k]:x}",
                    "built": None if k not in pb.after else f"0x{pb.after[k]:x}",
                }
                for k in sorted(set(expected) | set(pb.after))
                if expected.get(k) != pb.after.get(k)
            ]
            progress(f"running engine {i + 1}/{rebuilds}")
            outputs = be.run(pb.output.engine, feeds)
            if first_outputs is None:
                first_outputs = outputs
            checks.append(
                BuildCheck(
                    i,
                    _output_hashes(outputs),
                    drift,
                    pb.problems,
                    round(time.perf_counter() - t0, 3),
                )
            )
        progress("comparing with ONNX Runtime")
        accuracy = _accuracy(model_path, feeds, first_outputs or {})
    ref = checks[0].output_sha256
    differing = sorted({n for c in checks for n, h in c.output_sha256.items() if ref.get(n) != h})
    ok = not differing and not any(c.drift or c.problems for c in checks)
    result = VerifyResult(
        ok,
        str(lock_path),
        str(model_path),
        be.name,
        rebuilds,
        inputs_desc,
        checks,
        differing,
        accuracy,
        layers=len(data.layers),
    )
    if report is not None:
        from reprobuild.fileio import atomic_write_text

        result.report_path = str(report)
        atomic_write_text(report, json.dumps(result.to_json(), indent=2) + "\n")
    return result


def _accuracy(model_path: Path, feeds: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Any]:
    """Largest error of the engine against ONNX Runtime on the FP32 model (reported only).

    Compared with the original model, so a precision plan's error shows here too. A
    non-finite output where ONNX Runtime's is finite counts as an infinite error.
    """
    import numpy as np

    try:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        sess = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        ref = dict(zip(names, sess.run(names, feeds), strict=True))
    except Exception as err:  # ORT lacks some kernels (e.g. BF16 Conv): report, don't fail
        return {"runtime": "onnxruntime", "error": f"{type(err).__name__}: {err}"[:300]}
    max_abs = max_rel = 0.0
    non_finite: list[str] = []
    for name, want in ref.items():
        if name not in outputs:
            continue
        a = np.asarray(outputs[name], dtype=np.float64)
        b = np.asarray(want, dtype=np.float64)
        bad = ~np.isfinite(a) & np.isfinite(b)
        if bad.any():
            non_finite.append(name)
            max_abs = max_rel = float("inf")
            continue
        diff = np.abs(a - b)
        diff[~np.isfinite(diff)] = 0.0  # both non-finite alike (inf == inf): no error
        max_abs = max(max_abs, float(diff.max(initial=0.0)))
        max_rel = max(max_rel, float((diff / np.maximum(np.abs(b), 1e-12)).max(initial=0.0)))
    return {
        "runtime": "onnxruntime",
        "reference_model": str(model_path),
        "max_abs": max_abs,
        "max_rel": max_rel,
        "non_finite_outputs": non_finite,
    }


def bisect(
    model: str | os.PathLike[str] | None = None,
    *,
    lock: str | os.PathLike[str] = DEFAULT_LOCK,
    against: str | os.PathLike[str],
    backend: str | Backend = "auto",
    cache_dir: str | os.PathLike[str] = "caches",
    inputs: str | os.PathLike[str] | None = None,
    seed: int = 0,
    progress: Progress = _quiet,
) -> BisectResult:
    """Find the smallest set of layers whose tactic difference changes the outputs.

    Builds lock A's tactics with halves of B's differing pins swapped in; when neither half
    alone changes the outputs (layers interact), falls back to removing layers one by one.
    """
    from reprobuild.cachedir import cache_path

    be = resolve_backend(backend)
    announce_backend(backend, be, progress)
    a, lock_path, model_path = _open_lock(lock, model, be)
    b, _, _ = _open_lock(against, model_path, be)
    base = a.tactic_map()
    other = b.tactic_map()
    names = {e.key: e.layer for e in a.layers}
    differing = sorted(k for k in base if k in other and other[k] != base[k])
    unmatched = sorted(set(base) ^ set(other))
    if unmatched:
        raise UsageError(
            f"{lock_path} and {against} list different layers ({len(unmatched)} keys); bisect "
            "needs two locks of the same model, settings and environment"
        )
    feeds, _ = load_inputs(inputs, model_path, seed)
    steps: list[str] = []
    count = 0
    with tempfile.TemporaryDirectory(prefix="reprobuild-bisect-") as tmp:
        built_model, _, _ = _prepare_model(model_path, a, None, True, Path(tmp), lock_path)
        cfile = cache_path(cache_dir, be.environment(), a.settings, sha256_file(built_model))
        memo: dict[frozenset[str], dict[str, str]] = {}

        def outputs_with(swapped: frozenset[str]) -> dict[str, str]:
            nonlocal count
            if swapped not in memo:
                count += 1
                progress(f"build {count}: {len(swapped)} of {len(differing)} layers from B")
                tactics = {k: (other[k] if k in swapped else v) for k, v in base.items()}
                pb = pinned_build(be, built_model, a.settings, tactics, cfile, _quiet, [])
                memo[swapped] = _output_hashes(be.run(pb.output.engine, feeds))
            return memo[swapped]

        if not differing:
            return BisectResult(0, [], 0, False, "the locks choose the same tactics everywhere")
        ref = outputs_with(frozenset())
        if outputs_with(frozenset(differing)) == ref:
            return BisectResult(
                len(differing),
                [],
                count,
                False,
                "the locks differ in tactics but give identical outputs",
            )

        def changes(subset: list[str]) -> bool:
            return outputs_with(frozenset(subset)) != ref

        current = list(differing)
        while len(current) > 1:
            half = len(current) // 2
            left, right = current[:half], current[half:]
            if changes(left):
                current = left
            elif changes(right):
                current = right
            else:
                steps.append(f"halves of {len(current)} layers interact; minimising one by one")
                for k in list(current):
                    trial = [x for x in current if x != k]
                    if trial and changes(trial):
                        current = trial
                break
            steps.append(f"narrowed to {len(current)} layers")
    culprits = [
        {
            "layer": names.get(k, "?"),
            "key": k,
            "tactic_a": f"0x{base[k]:x}",
            "tactic_b": f"0x{other[k]:x}",
        }
        for k in current
    ]
    return BisectResult(
        len(differing), culprits, count, True, f"{len(culprits)} layer(s) change the outputs", steps
    )


__all__ = ["BisectResult", "DriftError", "VerifyResult", "bisect", "verify"]
