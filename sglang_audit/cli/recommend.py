"""``sglang-audit recommend``: the fastest configuration expected to work, with the evidence."""

from __future__ import annotations

import sys
from typing import Any

import click

from sglang_audit.cli.common import (
    jobs_of,
    jobs_option,
    make_request,
    progress,
    run_or_exit,
    target_options,
)

RECOMMEND_EXIT = """\b
Exit codes:
  0  a viable configuration was found and ranked
  1  no viable configuration among the explored choices
  2  usage or input error (bad --arch, missing source, bad --bench file, ...)
"""


@click.command(epilog=RECOMMEND_EXIT)
@target_options
@click.option("--bench", metavar="FILE", help="JSON lines written by `python -m sglang.bench_serving --output-file FILE` "
              "(one run per configuration, matched by --tag CANDIDATE-ID or by the server_info it records): "
              "measured configurations rank first, by output_throughput.")
@click.option("--max-resolutions", type=int, default=None, metavar="N",
              help="At most N full resolutions in all (default 32); combinations past it are listed as not evaluated.")
@click.option("--explore", multiple=True, type=click.Choice(["attention"]),
              help="Also explore the attention backends (prefill and decode, where the release has both): each "
                   "choice SGLang's support matrix lists for this kind of model (MHA/MLA) and platform is a full "
                   "resolution, within --max-resolutions.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@jobs_option
def recommend(bench: str | None, max_resolutions: int | None, explore: tuple[str, ...], fmt: str, jobs: int | None,
              **kw: Any) -> None:
    """Recommend the fastest configuration that works on this GPU.

    Forces every choice the release declares for the MoE runner, the FP4 GEMM and the FP8
    GEMM backend (those the model uses), the all-to-all backend (with --ep-size > 1), the
    draft MoE runner on its own (with a draft model, where the release has
    --speculative-moe-runner-backend) and, with --explore attention, the attention
    backends; one at a time, then combines the survivors. A choice is removed with one reason: SGLang rejects
    it (message, file:line), FlashInfer declares the device unsupported (file:line), or a
    known-bad rule flags it (rule id, sources). The viable ones are ranked by your own
    measurements (--bench), then published measurements (rules/perf/, with URL and
    hardware), then SGLang's own `auto` pick on this device; where nothing separates two,
    it says "no evidence: benchmark both" and prints the commands to do it.

    \b
    Example:
      sglang-audit recommend --source sglang==0.5.10 --arch sm120 \\
          --model qwen3.5-397b-a17b-nvfp4 --set tp_size=8 --set speculative_algorithm=NEXTN \\
          --set disable_radix_cache=true
    """
    from sglang_audit.analyses.recommend import DEFAULT_MAX_RESOLUTIONS
    from sglang_audit.analyses.recommend import recommend as run_recommend
    from sglang_audit.render.recommend import render_json, render_text

    limit = DEFAULT_MAX_RESOLUTIONS if max_resolutions is None else max_resolutions
    rec = run_or_exit(lambda: run_recommend(make_request(kw), bench=bench, max_resolutions=limit, progress=progress,
                                            explore=tuple(explore), jobs=jobs_of(jobs)))
    if fmt == "json":
        click.echo(render_json(rec))
    else:
        from sglang_audit.cli.common import for_reader

        click.echo(for_reader(render_text(rec, requested_model=kw.get("model"))), nl=False)
    if rec.recommended is None:
        sys.exit(1)
