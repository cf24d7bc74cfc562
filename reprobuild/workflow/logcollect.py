"""The builder log of one build, parsed as it comes (:class:`LogCollector`).

Apart from :mod:`.pinned` so that module keeps one job (running builds and proving them);
this one only turns a build's log lines into records and warnings, and never decides.
"""

from __future__ import annotations

from typing import Any

from reprobuild.backends.base import LogSink
from reprobuild.events import LayersDone, Progress
from reprobuild.logs.records import LogWarning

__all__ = ["LogCollector"]


class LogCollector:
    """Feeds builder log lines to the parser as they come, reporting layers done, and to
    ``save`` (``build --log``) when given.

    A parser failure (a line TensorRT prints in a form never seen) never fails the build:
    the log only adds names and candidates, the cache map and the engine inspector decide.
    It becomes a ``parser-error`` warning and the parser is fed no more lines. A ``save``
    error (the user's ``--log`` file) and Ctrl-C still propagate.
    """

    def __init__(self, progress: Progress, what: str, save: LogSink | None = None) -> None:
        from reprobuild.logs.parser import LogParser

        self.save = save
        self.parser = LogParser(source=what)
        self.records: list[Any] = []
        self.progress = progress
        self.what = what
        self.layer_info: str | None = None  # the engine inspector's JSON, once built
        self.known: dict[str, Any] | None = None  # the backend's own key -> layer data
        self.lines = 0  # lines received, as ``feed`` splits them
        self.failed = False  # the parser raised: the remaining lines are not parsed

    def __call__(self, line: str) -> None:
        if self.save is not None:
            self.save(line)
        first = self.lines + 1
        self.lines += line.removesuffix("\n").count("\n") + 1
        if self.failed:
            return
        try:
            done = self.parser.feed(line)
        except Exception as err:  # noqa: BLE001 - any parser bug; Ctrl-C is no Exception
            self._parser_failed(first, "this line", err)
            return
        if done:
            self.records.extend(done)
            self.progress(LayersDone(self.what, len(self.records)))

    def finish(self) -> list[Any]:
        if not self.failed:
            try:
                self.records.extend(self.parser.finish())
            except Exception as err:  # noqa: BLE001 - as in __call__
                self._parser_failed(self.lines, "the end", err)
        return self.records

    def _parser_failed(self, line: int, where: str, err: Exception) -> None:
        self.failed = True
        self.parser.warnings.append(
            LogWarning(
                line,
                "parser-error",
                f"the log parser failed at {where} of the {self.what} log "
                f"({type(err).__name__}: {err}): the log's remaining lines were not parsed "
                "(layer names and candidates may be missing; the timing cache and the engine "
                "still decided the build)",
            )
        )
