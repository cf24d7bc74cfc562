"""Capturing TensorRT's verbose log through a ``trt.ILogger`` subclass.

Two objects on purpose: the ``trt.ILogger`` subclass defines only TensorRT's own method
names (``__init__`` and ``log``; the conformance test checks every method of a TensorRT
subclass against the real bindings), and all state lives in a plain ``LogRouter``.

Lines are forwarded with trtexec's prefix ``[MM/DD/YYYY-HH:MM:SS] [V] [TRT] `` so the
project's log parser reads our capture exactly like a user's ``trtexec --verbose`` log. Like
trtexec, only the first line of a multi-line message gets the prefix.

The logger must stay alive as long as the builder, runtime and engines created with it, so
the backend creates one per backend instance and keeps it.
"""

from __future__ import annotations

import time
from collections import deque
from types import ModuleType
from typing import Any

from reprobuild.backends.base import LogSink

_KEEP_ERRORS = 100


class LogRouter:
    """Where the ILogger's messages go: the current build's sink, plus recent errors.

    Exceptions raised by the sink are held and re-raised by :meth:`stop`, because an
    exception escaping a callback that C++ invoked would abort the build obscurely.
    """

    def __init__(self) -> None:
        self._sink: LogSink | None = None
        self._pending: BaseException | None = None
        self.lines = 0
        self._errors: deque[str] = deque(maxlen=_KEEP_ERRORS)
        self._errors_total = 0

    def start(self, sink: LogSink | None) -> None:
        self._sink = sink
        self._pending = None
        self.lines = 0

    def stop(self, raise_pending: bool = True) -> int:
        """Detach the sink; re-raise what the sink raised (an error not when the build itself
        is failing: the build's error is the one to tell; Ctrl-C always); return the number
        of lines sent."""
        self._sink = None
        pending, self._pending = self._pending, None
        if pending is not None and (raise_pending or not isinstance(pending, Exception)):
            raise pending
        return self.lines

    def error_mark(self) -> int:
        return self._errors_total

    def errors_since(self, mark: int) -> list[str]:
        """Error/internal-error messages logged after ``mark`` (at most the last 100)."""
        count = min(self._errors_total - mark, len(self._errors))
        return list(self._errors)[len(self._errors) - count :] if count > 0 else []

    def emit(self, letter: str, message: str) -> None:
        if letter in ("F", "E"):
            self._errors.append(" ".join(message.split()))
            self._errors_total += 1
        sink = self._sink
        if sink is None:
            return
        stamp = time.strftime("%m/%d/%Y-%H:%M:%S")
        lines = message.rstrip("\n").split("\n")
        for i, line in enumerate(lines):
            text = f"[{stamp}] [{letter}] [TRT] {line}" if i == 0 else line
            try:
                sink(text)
            except BaseException as err:  # re-raised by stop()
                self._pending = err
                self._sink = None
                return
            self.lines += 1


def trt_make_logger(trt: ModuleType, router: LogRouter) -> Any:
    """An ILogger instance that forwards every message (all severities) to ``router``."""
    trt_severity = trt.ILogger.Severity
    letters = {
        int(trt_severity.INTERNAL_ERROR): "F",
        int(trt_severity.ERROR): "E",
        int(trt_severity.WARNING): "W",
        int(trt_severity.INFO): "I",
        int(trt_severity.VERBOSE): "V",
    }

    class _RouterLogger(trt.ILogger):
        def __init__(self) -> None:
            # pybind11 requires the base initializer to be called explicitly.
            trt.ILogger.__init__(self)

        def log(self, trt_level: Any, msg: str) -> None:
            router.emit(letters.get(int(trt_level), "?"), str(msg))

    return _RouterLogger()
