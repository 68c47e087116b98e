"""``sglang-audit matrix``: a support table (arch × model × flag set → backends, findings
and rejections) generated from one release's code, the cases resolved in parallel."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO, cast

import click

from sglang_audit.analyses.matrix import (
    DEFAULT_ARCHS,
    DEFAULT_FLAG_SETS,
    DEFAULT_MODELS,
    MODEL_DEFAULT_SETS,
    CaseResult,
    parse_flag_set,
    plan,
    run,
    split_list,
)
from sglang_audit.cli.common import (
    TargetOptions,
    TerminalControl,
    jobs_of,
    jobs_option,
    progress,
    run_or_exit,
    target_options,
)
from sglang_audit.inputs.device import ARCH_CHOICES

_SETS = "\n               ".join(f"{fs.name}={','.join(fs.items)}" for fs in DEFAULT_FLAG_SETS)
MATRIX_EPILOG = f"""\b
Defaults:
  --arch       {",".join(DEFAULT_ARCHS)}
  --model      {",".join(DEFAULT_MODELS)}
               ({", ".join(MODEL_DEFAULT_SETS)} with tp_size=8)
  --flags-set  {_SETS}

\b
Each case is resolved as `sglang-audit resolve` would (flags: the model's defaults, then
the flag set, then every --set) and checked with the known-bad rules as `check` would.
Output order is arch, model, flag set, whatever --jobs is. A known SGLang
rejection (e.g. a hybrid model with NEXTN on 0.5.10-0.5.13) is explained once,
with the flag to add (--set disable_radix_cache=true); the rows stay.

\b
Exit codes:
  0  the matrix was produced (rejections, unknowns and findings are in the table)
  2  usage or input error (bad --arch, model, flag set or source)
  3  a worker process died
"""


@click.command(epilog=MATRIX_EPILOG)
@target_options(only=("source",))
@click.option("--arch", "-a", "archs", multiple=True, metavar="LIST",
              help=f"Architectures, comma-separated or repeated (any of {', '.join(ARCH_CHOICES)}).")
@click.option("--model", "-m", "models", multiple=True, metavar="LIST",
              help="Models (bundled profiles or directories), comma-separated or repeated.")
@click.option("--flags-set", "flag_sets", multiple=True, metavar="NAME=K=V,K=V",
              help="A named set of flags (NAME= for none). Repeatable; replaces the default sets.")
@target_options(only=("cuda", "driver", "cudnn", "sets", "env"))  # --set: applied to every case, after the flag set
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Extra rule files (*.yaml) added to the shipped known-bad rules. Repeatable.")
@jobs_option
@click.option("--format", "fmt", type=click.Choice(["text", "json", "csv", "html"]), default="text", show_default=True)
@target_options(only=("no_cache",))
def matrix(archs: tuple[str, ...], models: tuple[str, ...], flag_sets: tuple[str, ...], rule_dirs: tuple[Path, ...],
           jobs: int | None, fmt: str, **kw: Any) -> None:
    """Resolve (and check) every architecture × model × flag set of one release and print a
    compact table: one row per case, one column per main setting (MoE runner, draft MoE
    runner, FP4 GEMM config → runtime, attention), findings marked, rejections listed.

    \b
    Example:
      sglang-audit matrix --source sglang==0.5.10 --arch sm100,sm120 \\
          --model deepseek-r1-nvfp4 --flags-set none= \\
          --flags-set cutlass=moe_runner_backend=flashinfer_cutlass --format csv
    """
    from sglang_audit.render.matrix import RENDERERS

    target = TargetOptions.of(kw)
    no_cache = target.no_cache

    def build() -> Any:
        fsets = [parse_flag_set(f) for f in flag_sets]
        return plan(target.source, split_list(archs), split_list(models), fsets, list(target.sets), target.cuda_version,
                    list(target.env), use_cache=not no_cache, cudnn=target.cudnn, progress=progress,
                    driver=target.driver)

    p = run_or_exit(build)
    n_jobs = jobs_of(jobs)
    # progress only for a person watching: never on a pipe, a file or in CI logs
    if sys.stderr.isatty() and p.cases:
        # the bar's \r and cursor codes are the tool's own terminal control: written as they are
        with click.progressbar(length=len(p.cases), label=f"resolving {len(p.cases)} cases",
                               file=cast(TextIO, TerminalControl(sys.stderr))) as bar:  # a stream, duck-typed
            def tick(_r: CaseResult) -> None:
                bar.update(1)

            m = run_or_exit(lambda: run(p, n_jobs, use_cache=not no_cache, rule_dirs=rule_dirs, on_result=tick))
    else:
        m = run_or_exit(lambda: run(p, n_jobs, use_cache=not no_cache, rule_dirs=rule_dirs))
    click.echo(RENDERERS[fmt](m), nl=False)
