"""`python -m sglang_audit`: the same command line as `sglang-audit`."""

from sglang_audit.cli.main import run

run()
