"""How the CLI shows results and progress to people: the core decides, the CLI renders.

Tables are plain aligned columns (no box drawing, no colour) so that output stays
greppable, diffable and independent of the terminal width. JSON goes to stdout with a stable
field order. Progress events from the core go to stderr: on a terminal, steps print as lines
and per-layer counts drive one live ``rich`` status line; elsewhere (CI logs, pipes) only the
steps print, one plain timestamped line each. ``--json`` and ``--quiet`` print no progress.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from typing import Any

from typer import echo  # the one writer of text: newline, ANSI codes cut off a terminal, flush

from reprobuild.events import Event, LayersDone, Step


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """Plain aligned columns: greppable, diffable, no terminal-width surprises."""
    return "\n".join(table_lines(headers, rows))


def table_lines(headers: list[str], rows: Iterable[list[str]] | list[list[str]]) -> list[str]:
    """``format_table``'s lines: each cell padded to its column's width, two spaces
    between, trailing spaces cut. Widths come from whole columns at a time and each row is
    one ``str.format``, which keeps a 10,000-row table in the tens of milliseconds."""
    rows = rows if isinstance(rows, list) else list(rows)
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in headers]
    widths = [
        max(len(h), max(map(len, c), default=0)) for h, c in zip(headers, columns, strict=True)
    ]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths).format
    lines = [fmt(*headers).rstrip(), "  ".join("-" * w for w in widths)]
    lines += [fmt(*r).rstrip() for r in rows]
    return lines


def shown(text: object) -> str:
    """``text`` from a file (a lock's field, a layer name) as it may be shown on one line:
    every character that is not printable (newline, escape, carriage return) written as its
    escape, so a hand-edited lock cannot forge an ``error:`` line or move the cursor."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)


def echo_lines(lines: list[str], chunk: int = 4096) -> None:
    """Many lines, as ``echo("\\n".join(lines))`` prints them, written a chunk at a time."""
    for i in range(0, max(len(lines), 1), chunk):
        echo("\n".join(lines[i : i + chunk]))


json_printed = False
"""Whether this command already printed its JSON document (then a failure after it, such as
``doctor --lock`` exit 3, goes to stderr only, so stdout stays one JSON document)."""


def print_json(data: object) -> None:
    """One JSON document on stdout, indented, in the fields' own order."""
    global json_printed
    echo(json.dumps(data, indent=2, sort_keys=False))
    json_printed = True


class Progress:
    """A callable progress sink for the workflow; call :meth:`done` when the work ends."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self._live: Any = None
        self._task: Any = None

    def _stamp(self) -> str:
        return f"[{time.perf_counter() - self.t0:6.1f}s]"

    def __call__(self, event: Event) -> None:
        if self.quiet:
            return
        if isinstance(event, LayersDone):
            if self.tty:
                self._count(event)
            return
        if isinstance(event, Step):
            line = f"{self._stamp()} {event.message}"
            if self._live is not None:
                self._live.console.print(line, highlight=False, markup=False)
            else:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()

    def _count(self, event: LayersDone) -> None:
        if self._live is None:
            from rich.console import Console
            from rich.progress import Progress as RichProgress
            from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

            self._live = RichProgress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._live.start()
            self._task = self._live.add_task("")
        self._live.update(self._task, description=f"{event.build}: {event.layers} layers")

    def done(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def with_progress(run: Any, quiet: bool, /, *args: Any, **kwargs: Any) -> Any:
    """Call a core function with a progress renderer, and always close the live display
    (an error must not leave the terminal without its cursor)."""
    prog = Progress(quiet)
    try:
        return run(*args, progress=prog, **kwargs)
    finally:
        prog.done()
