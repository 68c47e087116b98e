"""Command line: parses options, calls the pipeline, picks a renderer, sets the exit code."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from sglang_audit import __version__
from sglang_audit.cli.common import (
    EXIT_CODES,
    STATUS,
    AuditGroup,
    TargetOptions,
    make_request,
    progress,
    run_or_exit,
    target_options,
)
from sglang_audit.cli.oneshot import collector_off
from sglang_audit.resolve.pipeline import resolve


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from sglang_audit.shipped import origin

    click.echo(f"sglang-audit {__version__}; {run_or_exit(origin)}")
    ctx.exit()


@click.group(cls=AuditGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and where the shipped rules are read from, and exit.")
def main() -> None:
    """Which backends will SGLang pick for this GPU and model, why, and will it work?

    sglang-audit reads an SGLang release's source (never importing or running it),
    evaluates its own configuration logic for a target GPU, CUDA version, model
    config.json and flags, and reports each resolved backend with the decision path
    as file:line evidence.

    \b
    Example:
      sglang-audit resolve --source sglang==0.5.10 --arch sm120 \\
          --model qwen3.5-397b-a17b-nvfp4 --set tp_size=8 \\
          --set speculative_algorithm=NEXTN --set disable_radix_cache=true
    """


@main.command(epilog=EXIT_CODES)
@target_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--verbose", "-v", is_flag=True, help="Show the decision chain of every setting.")
@click.option("--field", "fields", multiple=True, metavar="NAME",
              help="Also report this ServerArgs field (e.g. chunked_prefill_size, cuda_graph_max_bs, mem_fraction_static, page_size) with its chain. Repeatable.")
@click.option("--all-fields", is_flag=True, help="Report every ServerArgs field after resolution (slower; best with --format json).")
def resolve_cmd(fmt: str, verbose: bool, **kw: Any) -> None:
    """Resolve the backend settings for one deployment, with evidence.

    \b
    The deployment may be given as flags (--set), a pasted launch command (--launch),
    SGLang's own YAML (--config), or any mix; the answer is the same.
    Example (a command pasted from an issue, with a Hugging Face id):
      sglang-audit resolve -s sglang==0.5.10 -a sm120 --launch "SGLANG_ENABLE_JIT_DEEPGEMM=0 \\
          python3 -m sglang.launch_server --model-path nvidia/Qwen3.5-397B-A17B-NVFP4 \\
          --tp 8 --speculative-algorithm NEXTN --disable-radix-cache"
    """
    try:
        with collector_off():
            res = run_or_exit(lambda: resolve(make_request(kw), progress=progress))
    finally:
        STATUS.clear()
    if fmt == "json":
        click.echo(json.dumps(res.to_json(), indent=2, sort_keys=False))
    else:
        from sglang_audit.cli.common import for_reader
        from sglang_audit.render.text import render_resolution

        click.echo(for_reader(render_resolution(res, verbose=verbose, requested_model=kw.get("model"))), nl=False)
    if res.rejected is not None or any(s.status == "unsupported" for s in res.settings.values()):
        sys.exit(1)  # rejected by ServerArgs, or the layers built with a setting fail
    if any(s.status == "unknown" for s in res.settings.values()) or _model_unread(res):
        sys.exit(3)  # incomplete: a setting, or the model itself (ModelConfig not read)


def _model_unread(res: Any) -> bool:
    """No path read the model's ModelConfig (the release has none the tool can follow): what
    the release makes of the model is not known, however the flags resolved."""
    from sglang_audit.result import UnknownValue

    return isinstance(res.model.architecture, UnknownValue) and "ModelConfig not read" in res.model.architecture.reason


resolve_cmd.name = "resolve"


@main.command(epilog="Exit codes: 0 listed, 2 usage or input error.")
@target_options(only=("source", "arch", "cuda", "driver", "env"))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def guards(fmt: str, **kw: Any) -> None:
    """List the hardware predicates of a release and their value on a device.

    Each predicate is interpreted from its definition in the analysed release (e.g.
    lru_cache(partial(_check_cuda_device_version, device_capability_majors=[12], ...)))."""
    from sglang_audit.analyses.guards import guards_for as run_guards

    target = TargetOptions.of(kw)
    arch, cuda = target.require_arch(), target.cuda_version
    req = target.request()
    tree, facts = run_or_exit(lambda: run_guards(req, progress=progress))
    if fmt == "json":
        click.echo(json.dumps({"source": tree.to_json() | {"package_dir": None}, "arch": arch, "cuda": cuda,
                               "driver": target.driver, "guards": [f.to_json() for f in facts]}, indent=2))
        return
    from sglang_audit.inputs.device import DEFAULT_DRIVER

    driver = f"driver {target.driver}" if target.driver else f"driver {DEFAULT_DRIVER} assumed"
    click.echo(f"SGLang {tree.version}: hardware predicates on {arch} (CUDA {cuda}, {driver})")
    width = max((len(f.name) for f in facts), default=10)
    for f in facts:
        click.echo(f"  {f.name:{width}}  {str(f.value):6}  {f.file}:{f.line}  {f.definition}")
        for site in f.controls:
            click.echo(f"  {'':{width}}    controls {site}")


# Commands that live in their own modules register here, one loader each; a module is
# imported only when its command runs (or for --help): `resolve` answered from the result
# cache must not pay for jinja2, networkx or yaml.


def _explain() -> click.Command:
    from sglang_audit.cli.explain import explain

    return explain


def _graph() -> click.Command:
    from sglang_audit.cli.graph import graph

    return graph


def _check() -> click.Command:
    from sglang_audit.cli.check import check

    return check


def _report() -> click.Command:
    from sglang_audit.cli.report import report

    return report


def _diff() -> click.Command:
    from sglang_audit.cli.diff import diff

    return diff


def _matrix() -> click.Command:
    from sglang_audit.cli.matrix import matrix

    return matrix


def _cache() -> click.Command:
    from sglang_audit.cli.cache import cache

    return cache


def _env() -> click.Command:
    from sglang_audit.cli.env import env

    return env


def _recommend() -> click.Command:
    from sglang_audit.cli.recommend import recommend

    return recommend


for _loader in (_explain, _graph, _check, _report, _diff, _matrix, _cache, _recommend, _env):
    main.add_lazy_command(_loader.__name__[1:], _loader)



def run(prog_name: str = "sglang-audit") -> None:
    """The ``sglang-audit`` script and ``python -m sglang_audit``: the command line, then an
    exit that skips freeing the heap (``oneshot.run_and_exit``)."""
    from sglang_audit.cli.oneshot import run_and_exit

    run_and_exit(main, prog_name=prog_name)


if __name__ == "__main__":  # pragma: no cover
    run()
