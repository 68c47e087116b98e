"""The CLI as the tests call it: exit code, stdout and stderr, through click's runner."""

from __future__ import annotations

from click.testing import CliRunner

from sglang_audit.cli.main import main


def cli(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr
