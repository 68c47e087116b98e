"""User-facing errors: each carries one line that the CLI prints before exiting 2."""

from __future__ import annotations


class AuditError(Exception):
    """Bad input or an environment problem; the message is shown as-is, one line."""

    exit_code = 2


class SourceError(AuditError):
    """The SGLang source could not be located, downloaded or extracted, or cannot be
    analysed at all (its ServerArgs module is missing or unparseable)."""


class InputError(AuditError):
    """A bad command-line value, model directory or flag."""
