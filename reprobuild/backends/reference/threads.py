"""How many BLAS threads the reference backend's timing and engine runs use.

Why: autotuning times kernels and keeps the fastest, so a timing must measure the kernel,
not the neighbours. OpenBLAS starts one thread per core and its threads spin-wait for each
other; when another process holds a core, every multi-threaded matmul waits for the slowest
thread, and the recording build of ResNet50 took 4.8x longer with a second build on the same
two cores. One thread per build keeps timings steady under load, at a small cost
on a quiet machine (figures: ``scripts/bench_contention.py``).

The count changes results: OpenBLAS splits a GEMM among its threads, and two threads gave
a re-weighted SqueezeNet other output bits than one. So the count in effect is part of the
reference backend's target identity (``backend.machine_environment``), and the build report
records it too (``BuildOutput.extra["blas_threads"]``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from reprobuild.errors import UsageError

DEFAULT_THREADS = 1


def resolve(threads: int | None) -> int:
    """The thread count to use: ``threads``, else the default (1). 0 means the BLAS
    library's own choice (every core)."""
    if threads is None:
        return DEFAULT_THREADS
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise UsageError(
            f"--threads must be a whole number >= 0 (0 = the BLAS default), got {threads!r}"
        )
    return threads


def effective(threads: int) -> int:
    """The BLAS threads a run with ``threads`` (0: the BLAS default) really uses."""
    return threads if threads > 0 else _blas_threads()


def _blas_threads() -> int:
    """Threads the loaded BLAS libraries use now (the most of any)."""
    from threadpoolctl import threadpool_info

    counts = [
        int(i.get("num_threads", 1)) for i in threadpool_info() if i.get("user_api") == "blas"
    ]
    return max(counts, default=1)


@contextmanager
def limited(threads: int) -> Iterator[int]:
    """Run the block with at most ``threads`` BLAS threads (0: leave BLAS alone); yields
    the count in effect, for the build report. numpy must already be imported."""
    if threads == 0:
        yield _blas_threads()
        return
    with _controller().limit(limits=threads, user_api="blas"):
        yield threads


@functools.lru_cache(maxsize=1)
def _controller() -> Any:
    """The loaded thread pools, found once: finding them walks every loaded library (0.5 ms,
    a tenth of a small model's engine run). The kernels reach BLAS only through numpy, whose
    BLAS is loaded with numpy, before the first call; a library loaded later is not theirs."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()
