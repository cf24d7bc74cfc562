"""Size caps on what reprobuild reads, so no input makes it work without bound.

Each cap is far above anything real (a 20,000-layer lock is about 10 MB, a verbose
TensorRT log of a large model a few hundred MB, ONNX's protobuf itself stops at 2 GiB), so
only a wrong or hostile file meets one, and it gets one line instead of minutes of work or
an allocation failure. ``REPROBUILD_MAX_<KIND>_BYTES`` raises a cap when a real file needs
more (e.g. ``REPROBUILD_MAX_LOG_BYTES=20000000000``); ``REPROBUILD_MAX_MEMORY_BYTES`` sets
the memory a build may use (tensors, INT8 calibration) instead of half the machine's.
"""

from __future__ import annotations

import os
from pathlib import Path

from reprobuild.errors import UsageError

CAPS: dict[str, int] = {
    "lock": 256 << 20,
    "log": 8 << 30,
    "model": 2 << 30,  # protobuf's own limit; weights beyond it live in external data
    "inputs": 4 << 30,  # calibration / verify inputs (.npz, Polygraphy JSON)
    "cache": 1 << 30,  # a timing cache holds one small entry per layer
    "layers": 1 << 30,  # engine layer information JSON (a few KB per layer)
    "engine": 8 << 30,  # a serialized engine holds the weights: a few GB for large models
    "external": 16 << 30,  # an ONNX model's external weights, all files together
}

COUNT_CAPS: dict[str, int] = {
    "calib_files": 100_000,  # files in a calibration folder (one sample per file at most)
}

SEED_DIGITS = 18
"""The most digits of a ``--seed``: the lock records ``seeded:N`` and its loader reads at most
this many, so the CLI refuses a longer seed rather than write a lock no command can load."""
SEED_MAX = 10**SEED_DIGITS - 1

MEMORY_FRACTION = 0.5
"""A reference build may allocate at most this share of the machine's memory for tensors."""


def cap(kind: str) -> int:
    """The cap in bytes for ``kind``, after the environment override."""
    override = _override(f"REPROBUILD_MAX_{kind.upper()}_BYTES")
    return CAPS[kind] if override is None else override


def _override(name: str) -> int | None:
    """The whole number in the environment variable ``name``, None when unset or empty.

    Only ASCII digits: ``str.isdigit`` also says yes to superscripts, which ``int`` refuses;
    and a value that is not a number is refused rather than silently ignored."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 30:
        raise UsageError(
            f"{name}={value[:40]!r} is not a whole number; set it to digits only, or unset it"
        )
    return int(value)


def log_processes() -> int | None:
    """``REPROBUILD_LOG_PROCESSES``: 1 reads a log in one process, 2 lets a large log be split
    between two; None when unset. Any other value is refused, like every other variable,
    rather than silently meaning "split"."""
    value = _override("REPROBUILD_LOG_PROCESSES")
    if value not in (None, 1, 2):
        raise UsageError(
            f"REPROBUILD_LOG_PROCESSES={value} is not 1 or 2; set it to 1 (one process) or 2 "
            "(two for a large log), or unset it"
        )
    return value


def check_size(path: str | os.PathLike[str], size: int, kind: str) -> None:
    """Refuse a ``kind`` file of ``size`` bytes above its cap, with the override to use."""
    limit = cap(kind)
    if size > limit:
        raise UsageError(
            f"{Path(path)}: {size:,} bytes is over the {limit:,}-byte limit for a {kind} file; "
            f"check that this is the right file (REPROBUILD_MAX_{kind.upper()}_BYTES raises it)"
        )


def check_count(path: str | os.PathLike[str], count: int, kind: str, what: str) -> None:
    """Refuse more than the cap of ``kind`` items (``what``, e.g. "files") in ``path``, with
    the override to use; called while counting, so a huge folder is not listed to its end."""
    override = _override(f"REPROBUILD_MAX_{kind.upper()}")
    limit = COUNT_CAPS[kind] if override is None else override
    if count > limit:
        raise UsageError(
            f"{Path(path)}: more than {limit:,} {what}; check that this is the right folder "
            f"(REPROBUILD_MAX_{kind.upper()} raises the limit)"
        )


def available_memory() -> int | None:
    """Bytes of memory this process could use: physical memory, or a cgroup's limit."""
    total = None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    for cgroup in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(cgroup).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text)) if total else int(text)
    return total


HALF_MEMORY = "half this machine's memory"  # memory_limit's reason when no override is set


def memory_limit() -> tuple[int | None, str]:
    """The memory a build may use, and where that figure comes from: half the machine's
    memory (:data:`MEMORY_FRACTION`), or ``REPROBUILD_MAX_MEMORY_BYTES`` when set; None
    when neither is known."""
    override = _override("REPROBUILD_MAX_MEMORY_BYTES")
    if override is not None:
        return override, "REPROBUILD_MAX_MEMORY_BYTES"
    memory = available_memory()
    if memory is None:
        return None, ""
    return int(memory * MEMORY_FRACTION), HALF_MEMORY


def check_tensor_bytes(what: str, nbytes: int) -> None:
    """Refuse, before allocating, tensors larger than the memory share a build may use."""
    limit, why = memory_limit()
    if limit is None:
        return
    if nbytes > limit:
        over = f"{what} need {nbytes / (1 << 30):,.1f} GiB, over the {limit / (1 << 30):,.1f}"
        if why != HALF_MEMORY:
            raise UsageError(f"{over} GiB a build may use ({why}); use smaller --shapes")
        raise UsageError(
            f"{over} GiB this machine allows a build (half its memory); use smaller --shapes"
        )
