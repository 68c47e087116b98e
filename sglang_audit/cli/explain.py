"""``sglang-audit explain FIELD``: every choice of a setting and why it is (not) used."""

from __future__ import annotations

import sys
from typing import Any

import click

from sglang_audit.cli.common import (
    EXIT_CODES,
    jobs_of,
    jobs_option,
    make_request,
    progress,
    run_or_exit,
    target_options,
)


@click.command(epilog=EXIT_CODES)
@click.argument("field")
@target_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@jobs_option
def explain(field: str, fmt: str, jobs: int | None, **kw: Any) -> None:
    """Explain one setting: its resolved value and chain, the outcome of forcing each of
    its choices (accepted, rewritten by SGLang, rejected), and the auto-selection branches
    in the code with the guard that keeps each from firing on this device.

    \b
    Example:
      sglang-audit explain fp4_gemm_runner_backend --source sglang==0.5.10 \\
          --arch sm120 --model qwen3.5-397b-a17b-nvfp4 --set tp_size=8
    """
    from sglang_audit.analyses.explain import explain as run_explain
    from sglang_audit.render.explain import render_json, render_text

    exp = run_or_exit(lambda: run_explain(make_request(kw), field, progress=progress, jobs=jobs_of(jobs)))
    if fmt == "json":
        click.echo(render_json(exp))
    else:
        from sglang_audit.cli.common import for_reader

        click.echo(for_reader(render_text(exp, requested_model=kw.get("model"))), nl=False)
    if exp.resolution.rejected is not None:
        sys.exit(1)
    if exp.setting.status == "unknown":
        sys.exit(3)
