"""Progress that the core reports and the CLI renders.

The core never formats progress for a terminal: it sends typed events, and the CLI decides
how they look (a live bar on a terminal, plain lines in CI logs, nothing under ``--json``).
A caller of the Python API passes any callable, or nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """A phase of the work begins (a recording build, applying pins, running an engine)."""

    message: str


@dataclass(frozen=True)
class LayersDone:
    """How many layers of the build ``build`` have been autotuned or served so far."""

    build: str
    layers: int


Event = Step | LayersDone
Progress = Callable[[Event], None]


def quiet(_: Event) -> None:
    """The default progress sink: the Python API is silent unless asked."""
