"""User-facing errors: each carries one line that the CLI prints before exiting 2."""

from __future__ import annotations

import os


class AuditError(Exception):
    """Bad input or an environment problem; the message is shown as-is, one line."""

    exit_code = 2


class SourceError(AuditError):
    """The SGLang source could not be located, downloaded or extracted, or cannot be
    analysed at all (its ServerArgs module is missing or unparseable)."""


class InputError(AuditError):
    """A bad command-line value, model directory or flag."""


def strict_mode() -> bool:
    """SGLANG_AUDIT_STRICT=1 (set by the test suite): an internal evaluator error raises
    instead of becoming `unknown`, so the tests see every defect the tool would hide."""
    return os.environ.get("SGLANG_AUDIT_STRICT") == "1"


class FactFileError(AuditError):
    """A shipped fact file (`rules/*.toml`) that does not have its schema's shape
    (`factfiles.py`, `factschema.py`): a broken build or edit."""
