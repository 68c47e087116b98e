"""Command line: parses options, calls the pipeline, picks a renderer, sets the exit code."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from . import __version__
from .device import ARCH_CHOICES
from .errors import AuditError
from .pipeline import Request, bundled_profiles, resolve

EXIT_CODES = """\b
Exit codes:
  0  resolved (every setting known, configuration accepted)
  1  SGLang would reject this configuration (an assert/raise fires)
  2  usage or input error (bad --arch, missing source, bad config.json, ...)
  3  resolution incomplete: some setting is unknown (see its reason)
"""


def _progress(msg: str) -> None:
    click.echo(msg, err=True)


def _common(fn: Any) -> Any:
    options = [
        click.option("--source", "-s", help="SGLang source: a checkout dir, a wheel/sdist file, sglang==X (downloaded into the cache, never installed), or omitted for the installed sglang (found, not imported)."),
        click.option("--arch", "-a", required=True, help=f"GPU architecture: {', '.join(ARCH_CHOICES)}, or a compute capability like 12.0."),
        click.option("--cuda", default="12.9", show_default=True, help="CUDA version that torch reports (torch.version.cuda)."),
        click.option("--model", "-m", help=f"Model directory with config.json (and hf_quant_config.json), or a bundled profile: {', '.join(bundled_profiles())}."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="A server flag, by field or flag name (e.g. --set moe_runner_backend=flashinfer_cutlass). Repeatable."),
        click.option("--launch", metavar="COMMAND", help='A pasted launch command, e.g. "python -m sglang.launch_server --model-path M --tp 8 --moe-runner-backend flashinfer_cutlass".'),
        click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help="An environment variable SGLang would see (default: unset, so the release's declared default applies). Repeatable."),
        click.option("--with", "with_packages", multiple=True, metavar="PKG", help="Pretend an optional package is installed (e.g. triton_kernels)."),
        click.option("--without", "without_packages", multiple=True, metavar="PKG", help="Pretend a dependency is missing (e.g. flashinfer)."),
        click.option("--no-cache", is_flag=True, help="Do not read or write the parsed-file cache."),
    ]
    for opt in reversed(options):
        fn = opt(fn)
    return fn


def _request(kw: dict[str, Any]) -> Request:
    return Request(
        source=kw["source"], arch=kw["arch"], model=kw["model"], cuda=kw["cuda"],
        sets=list(kw["sets"]), launch=kw["launch"], env=list(kw["env"]),
        with_packages=list(kw["with_packages"]), without_packages=list(kw["without_packages"]),
        use_cache=not kw["no_cache"],
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="sglang-audit")
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
@_common
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--verbose", "-v", is_flag=True, help="Show the decision chain of every setting.")
def resolve_cmd(fmt: str, verbose: bool, **kw: Any) -> None:
    """Resolve the backend settings for one deployment, with evidence."""
    res = _run(lambda: resolve(_request(kw), progress=_progress))
    if fmt == "json":
        click.echo(json.dumps(res.to_json(), indent=2, sort_keys=False))
    else:
        from .render_text import render_resolution

        click.echo(render_resolution(res, verbose=verbose), nl=False)
    if res.rejected is not None:
        sys.exit(1)
    if any(s.status == "unknown" for s in res.settings.values()):
        sys.exit(3)


resolve_cmd.name = "resolve"


def _run(fn: Any) -> Any:
    try:
        return fn()
    except AuditError as exc:
        click.echo(f"sglang-audit: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("sglang-audit: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
