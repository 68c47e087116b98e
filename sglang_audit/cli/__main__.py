"""`python -m sglang_audit.cli`."""

from sglang_audit.cli.main import run

run()
