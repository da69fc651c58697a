"""Exit codes and the errors a chronoctl command raises to end with one of them.

Commands never print an error and call `sys.exit` themselves: they raise one of the
classes below and the error boundary in `chronoctl.main.main` prints
`chronoctl: error: <message>` (and `hint: <hint>`) on stderr and exits with `code`.

A "no" answer (the job did not run, validation found errors) is not an error: the command
prints its answer and raises `typer.Exit(EXIT_NO)`.
"""

from __future__ import annotations

from typing import Iterable

EXIT_OK = 0
"""Success, or "yes"."""
EXIT_NO = 1
"""A "no" answer (did not run, validation failed) or invalid input."""
EXIT_USAGE = 2
"""A usage error (bad flags, a missing path) or an unknown job."""
EXIT_UNREACHABLE = 3
"""The database or the daemon could not be reached."""
EXIT_INTERNAL = 70
"""A bug in chronoctl (an unexpected exception); EX_SOFTWARE from sysexits.h."""
EXIT_INTERRUPTED = 130
"""Interrupted by Ctrl-C (128 + SIGINT)."""


class CliError(Exception):
    """Something the operator can fix; `hint` says how. Exits 1 (invalid input) by default."""

    code = EXIT_NO

    def __init__(self, message: str, hint: str | None = None, code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if code is not None:
            self.code = code


class InvalidInput(CliError):
    """The input (a file, an expression, a time) is not valid; exits 1."""

    code = EXIT_NO


class UsageError(CliError):
    """The command line is wrong: conflicting or missing options, a path that does not exist; exits 2."""

    code = EXIT_USAGE


class UnknownJob(UsageError):
    """No job with this id in the registry (or the database); exits 2."""

    def __init__(self, job_id: str, where: str, hint: str | None = None, known: Iterable[str] = ()):
        import difflib

        close = difflib.get_close_matches(job_id, list(known), n=3, cutoff=0.6)
        guess = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        super().__init__(
            f"no job {job_id!r} in {where}{guess}",
            hint or "`chronoctl list` shows the registered jobs; `chronoctl validate` checks the registry",
        )
        self.job_id = job_id


class Unreachable(CliError):
    """The database or the daemon could not be reached; exits 3. Never put a DSN password in `message`."""

    code = EXIT_UNREACHABLE
