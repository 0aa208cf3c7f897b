"""Error types that carry a documented exit code, so the CLI can turn any of them into one clear line."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    RUNTIME = 1  # synthesis or processing failed at run time
    USAGE = 2  # bad flag, bad input file, bad subtitle line
    MISSING = 3  # missing dependency, engine or model file
    INTERRUPTED = 130  # Ctrl-C; the cache is left consistent


class FastTTSError(Exception):
    """Base error: `str(err)` is the whole message shown to the user (no traceback)."""

    exit_code: ExitCode = ExitCode.RUNTIME

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(FastTTSError):
    """A flag or an input file is wrong; the message names the flag, file and line."""

    exit_code = ExitCode.USAGE


class InputError(UsageError):
    """An input file is missing, unreadable or malformed."""

    def __init__(self, path: object, message: str, *, line: int | None = None, hint: str | None = None):
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {message}", hint=hint)
        self.path = path
        self.line = line


class MissingDependencyError(FastTTSError):
    """A program, package, engine or model file that the job needs is not there."""

    exit_code = ExitCode.MISSING


class EngineMismatchError(MissingDependencyError):
    """An engine folder does not match what the runtime or preset expects."""


class SynthesisError(FastTTSError):
    """Synthesis of one or more lines failed and the failure policy says to stop."""

    exit_code = ExitCode.RUNTIME
