"""The exception tree. Every user-facing failure is a :class:`TfdistError` with a hint; the CLI turns it into
one line on stderr and an exit status in exactly one place (``tfdist.cli.main``)."""
from __future__ import annotations

from tfdist.status import ExitStatus


class TfdistError(Exception):
    """Base of all errors tfdist reports to a user.

    Args:
        message: what went wrong, naming the file or flag involved.
        hint: the fix, phrased as something to do.
        reference: a stable kebab-case id (for docs and ``--json``), e.g. ``mirror-config-not-writable``.
    """

    status: ExitStatus = ExitStatus.ERROR

    def __init__(self, message: str, *, hint: str | None = None, reference: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.reference = reference

    def one_line(self) -> str:
        """The message and its hint as the single line the CLI prints."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(TfdistError):
    """Bad input from the user: a flag, an argument or a file. Nothing was changed. Exit status 2."""

    status = ExitStatus.USAGE


class ConfigFileError(UsageError):
    """A configuration file cannot be read, parsed or written safely; the original is left untouched."""
