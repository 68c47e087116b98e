"""``sglang-audit diff``: what changes for a deployment (or a fleet) between two releases."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from sglang_audit.cli.common import (
    TargetOptions,
    jobs_of,
    jobs_option,
    progress,
    run_or_exit,
    target_options,
)

DIFF_EPILOG = """\b
Exit codes:
  0  nothing changed for these deployments, and none fails on both releases (with
     --fail-on rejected: none becomes rejected or newly fails; with --fail-on never:
     always, unless there is a usage error)
  1  something changed: a setting's outcome differs at any level (the config or runtime
     value, what the layers built with it do, the kernel library's verdict, the known-bad
     findings on it), a setting appears or disappears, or the configuration becomes /
     stops being rejected; or a deployment still fails on both releases (rejected by
     both, or a setting whose layers raise or whose kernel is unsupported on both:
     "STILL FAILING", never "unchanged")
     (--fail-on rejected: only when a deployment becomes rejected, or a setting newly
     fails: its layers raise or its kernel is unsupported on the --to release only)
  2  usage or input error (bad --arch, a release that cannot be found, bad deployment
     file, flags neither release accepts, ...)
  3  nothing is known to have changed, but a value or outcome is unknown on one side
     (or a rejection depends on unknown inputs; --fail-on rejected: whether a failure
     on the --to release is new cannot be told); a clean 0 is never claimed on a guess
  Changes underneath (predicate definitions, guards, choices, defaults, the FlashInfer
  pin) are reported but do not by themselves make the exit code non-zero.

\b
Deployment file (YAML or TOML), one entry per deployment:
  deployments:
    - name: qwen-sm120
      arch: sm120
      model: qwen3.5-397b-a17b-nvfp4
      cuda: "12.9"                     # optional, as driver, cudnn, env_profile
      flags: {tp_size: 8, speculative_algorithm: NEXTN}
      env: {SGLANG_ENABLE_JIT_DEEPGEMM: "0"}   # optional
    - name: dsr1-b200
      arch: sm100
      launch: "python -m sglang.launch_server --model-path deepseek-r1-nvfp4 --tp 8"

\b
Example (exits 1: 0.5.13 changes the FP4 GEMM runtime backend on SM120):
  sglang-audit diff --from sglang==0.5.12 --to sglang==0.5.13 --arch sm120 \\
      --model qwen3.5-397b-a17b-nvfp4 --set tp_size=8
"""

@click.command(epilog=DIFF_EPILOG)
@click.option("--from", "from_source", required=True, metavar="SOURCE",
              help="The release you run now: a checkout dir, a wheel/sdist, sglang==X, or 'installed'.")
@click.option("--to", "to_source", required=True, metavar="SOURCE", help="The release you would upgrade to (same forms).")
@target_options(only=("arch", "cuda", "cudnn", "driver", "model", "sets", "launch", "config", "env", "with_packages",
                      "without_packages", "env_profile", "no_cache"),
                arch_required=False)
@click.option("--deployment", "deployment_file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="A YAML/TOML file of deployments to audit in one run (instead of --arch/--model/--set/--launch/--env/--cuda); ends with a summary table.")
@click.option("--fail-on", type=click.Choice(["changed", "rejected", "never"]), default="changed", show_default=True,
              help="What makes the exit code 1: any change (or a deployment failing on both releases), only a "
                   "deployment becoming rejected or a setting newly failing, or nothing.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--verbose", "-v", is_flag=True, help="Show both decision chains of every setting, not only of the changed ones.")
@jobs_option
def diff(from_source: str, to_source: str, deployment_file: Path | None, fail_on: str, fmt: str,
         verbose: bool, jobs: int | None, **kw: Any) -> None:
    """Compare two SGLang releases for a deployment: every resolved setting old → new with
    both decision chains, configurations that become (or stop being) rejected, and what
    changed underneath (hardware predicate definitions, guards on the deciding code,
    declared choices and defaults, the pinned FlashInfer version)."""
    from sglang_audit.analyses.diff import Deployment, diff_releases, load_deployments
    from sglang_audit.render.diff import render_json, render_text

    def source(text: str) -> str | None:
        return None if text == "installed" else text

    target = TargetOptions.of(kw)
    if deployment_file is not None:
        target.refuse_with_deployment()
        given = target.request()
        # --with/--without, --cudnn and --env-profile apply to every deployment in the file
        deployments = run_or_exit(lambda: [d.with_command_line(given) for d in load_deployments(deployment_file)])
    else:
        from sglang_audit.resolve.pipeline import launch_with_config

        target.require_arch()
        request = target.request()
        # the YAML file folded into the launch command, as resolve does: each release's own
        # --config merging then reads it (a release without --config says so)
        deployments = [Deployment.of_request(request, launch_with_config(request))]
    result = run_or_exit(lambda: diff_releases(
        source(from_source), source(to_source), deployments, use_cache=not target.no_cache,
        progress=progress, from_file=deployment_file is not None, jobs=jobs_of(jobs)))
    if fmt == "json":
        click.echo(render_json(result, fail_on))
    else:
        from sglang_audit.cli.common import for_reader

        click.echo(for_reader(render_text(result, verbose=verbose, fail_on=fail_on)), nl=False)
    sys.exit(result.exit_code(fail_on))
