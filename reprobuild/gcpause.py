"""Pausing Python's cyclic garbage collector around work that makes many acyclic objects.

A lock is hundreds of thousands of small acyclic objects (about 150,000 for 10,000 layers,
then table rows); the cyclic collector rescanning them as they are made costs more than
the parse itself, and reference counting frees them anyway. Whatever is still alive when
the collector is enabled again gets walked once, so callers free the bulk inside.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
