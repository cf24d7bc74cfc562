"""Errors that map to the documented exit codes.

Every failure a user can cause is raised as a ``ReprobuildError`` so the CLI can print one
line and exit with a code CI can act on; anything else escaping is a bug in reprobuild, and
the CLI's one guard turns it into exit 4 with the traceback saved to a file
(:mod:`reprobuild.cli.crash`), so no Python traceback ever reaches a user.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_DIFFERENT = 1  # a difference, drift, or failed verification
EXIT_USAGE = 2  # bad usage or bad input (file, option, model)
EXIT_ENV = 3  # the lock was recorded for another environment
EXIT_INTERNAL = 4  # a bug in reprobuild: an exception that is not a ReprobuildError

DOCUMENTED_EXIT_CODES = (EXIT_OK, EXIT_DIFFERENT, EXIT_USAGE, EXIT_ENV, EXIT_INTERNAL)
"""Every code the CLI can exit with, besides 128 + the signal for Ctrl-C (130), SIGHUP (129)
and SIGTERM (143), which roll back like a failure, and 141 for a closed pipe
(docs/exit-codes.md)."""


class ReprobuildError(Exception):
    """A user-facing failure: ``str(err)`` is the one-line message, ``exit_code`` the code."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(ReprobuildError):
    """Bad arguments or a bad input file (exit 2)."""

    exit_code = EXIT_USAGE


class LockError(UsageError):
    """A lockfile that cannot be read or does not validate (exit 2)."""


class LogParseError(UsageError):
    """A builder log or layer-information file that cannot be read (exit 2)."""


class CacheError(ReprobuildError):
    """A timing cache that is corrupted or belongs to another environment (exit 2)."""

    exit_code = EXIT_USAGE


class EngineError(UsageError):
    """An engine file that is corrupted or was not written by this backend (exit 2)."""


class BuildError(ReprobuildError):
    """The builder failed, e.g. a pinned tactic the layer cannot use (exit 2)."""

    exit_code = EXIT_USAGE


class EnvironmentMismatch(ReprobuildError):
    """The lock was recorded on another GPU / TensorRT version (exit 3)."""

    exit_code = EXIT_ENV


class DriftError(ReprobuildError):
    """The built engine does not match the lock, or outputs differ (exit 1)."""

    exit_code = EXIT_DIFFERENT


class BackendUnavailable(ReprobuildError):
    """The requested backend cannot run on this machine (exit 3: wrong environment)."""

    exit_code = EXIT_ENV
