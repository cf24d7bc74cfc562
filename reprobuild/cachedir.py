"""Where recording-build timing caches live, shared by the workflow and ``export-cache``.

A recording build is the expensive step of applying a lock (it times every candidate), and
its timing cache is only valid for one backend, environment, settings and model. Keying the
file name by all four lets later builds skip the recording step safely: a changed GPU,
TensorRT version, setting or model simply maps to a different (missing) file.

Layout: ``<cache-dir>/<backend>-<env fingerprint>-<settings fingerprint>-<sha256[:16]>.cache``,
where the environment part is :meth:`Environment.fingerprint`: the target's identity
(TensorRT version, GPU model, CUDA major; the reference backend's BLAS kernels and threads),
never an advisory field (the driver, which card of a model, the CPU's name).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from reprobuild.backends.base import Backend, TimingCache
from reprobuild.errors import CacheError, UsageError
from reprobuild.types import BuildSettings, Environment

DEFAULT_CACHE_DIR = "caches"
CACHE_DIR_HELP = "Recording timing caches, per environment [default: caches/ beside the lock]."
_SHA_RE = re.compile(r"[0-9a-f]{16,64}")
_BACKEND_RE = re.compile(r"[a-z0-9_]+")


def cache_folder(cache_dir: str | os.PathLike[str] | None, lock: str | os.PathLike[str]) -> Path:
    """The recording caches' folder: ``cache_dir`` as given (relative to the current folder),
    by default ``caches/`` beside the lock. Why beside the lock: a build run from another
    folder must find the cache its lock was recorded with; it would otherwise record again,
    and on TensorRT another recording can make other keys (a locked build then exits 1)."""
    return Path(cache_dir) if cache_dir is not None else Path(lock).parent / DEFAULT_CACHE_DIR


def cache_path(
    cache_dir: str | os.PathLike[str],
    env: Environment,
    settings: BuildSettings,
    model_sha: str,
) -> Path:
    """The recording cache file for this backend/environment/settings/model combination."""
    sha = model_sha.lower()
    if not _SHA_RE.fullmatch(sha):
        raise UsageError(
            f"model sha256 {model_sha!r} is not a hex digest; "
            "take it from the lock's model.sha256 field"
        )
    if not _BACKEND_RE.fullmatch(env.backend):
        raise UsageError(f"backend name {env.backend!r} cannot be used in a cache file name")
    name = f"{env.backend}-{env.fingerprint()}-{settings.fingerprint()}-{sha[:16]}.cache"
    return Path(cache_dir) / name


def load_cache_bytes(path: str | os.PathLike[str]) -> bytes | None:
    """The cache file's bytes, or None when there is none yet (a recording build is due)."""
    from reprobuild.fileio import read_input

    p = Path(path)
    if not os.path.lexists(p):
        return None
    return read_input(p, "cache", "timing cache", error=CacheError)


def save_cache_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write atomically, so a concurrent build never loads half a cache."""
    from reprobuild.fileio import atomic_write_bytes

    try:
        atomic_write_bytes(path, bytes(data))
    except OSError as err:
        raise CacheError(
            f"{path}: cannot write the timing cache ({err.strerror}); "
            "check that the cache directory is writable"
        ) from None


def get_or_record(
    backend: Backend,
    path: Path | None,
    record: Callable[[TimingCache], None],
    warnings: list[str],
    *,
    reject: Callable[[TimingCache], str | None] | None = None,
    save: bool = True,
) -> tuple[TimingCache, bool]:
    """The stored recording cache, or a fresh one filled by ``record`` and stored.

    The one place that decides whether a stored cache can be trusted: a corrupted or foreign
    file is reported and re-recorded, never used. ``reject`` may refuse a cache that loaded
    (it returns the reason, reported as a warning, or ``""`` to re-record silently). Returns
    the cache and whether it was recorded now. ``save=False`` leaves storing a new cache
    to the caller, whose outputs transaction writes it only when the command succeeds.
    """
    cache: TimingCache | None = None
    if path is not None:
        try:
            data = load_cache_bytes(path)
            if data == b"":
                warnings.append(f"replaced timing cache {path}: the file was empty (0 bytes)")
                data = None
            cache = None if data is None else backend.create_timing_cache(data)
        except CacheError as err:
            warnings.append(f"ignored timing cache {path}: {err}; re-recording")
    if cache is not None and reject is not None:
        why = reject(cache)
        if why is not None:
            warnings.append(
                f"timing cache {path} {why}; re-recording"
                if why
                else f"replaced timing cache {path}: it holds {len(cache.tactic_map())} entries "
                "that are not this build's layers (a foreign or stale file)"
            )
            cache = None
    if cache is not None:
        return cache, False
    cache = backend.create_timing_cache(b"")
    record(cache)
    if path is not None and save:
        save_cache_bytes(path, cache.serialize())
    return cache, True
