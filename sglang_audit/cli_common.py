"""Options and helpers shared by every command (kept apart so command modules can use
them without importing the command group)."""

from __future__ import annotations

import sys
from typing import Any

import click

from .device import ARCH_CHOICES
from .errors import AuditError
from .pipeline import Request, bundled_profiles

EXIT_CODES = """\b
Exit codes:
  0  resolved (every setting known, configuration accepted)
  1  SGLang would reject this configuration (an assert/raise fires)
  2  usage or input error (bad --arch, missing source, bad config.json, ...)
  3  resolution incomplete: some setting is unknown (see its reason)
"""


def progress(msg: str) -> None:
    click.echo(msg, err=True)


def target_options(fn: Any) -> Any:
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


def make_request(kw: dict[str, Any]) -> Request:
    return Request(
        source=kw["source"], arch=kw["arch"], model=kw["model"], cuda=kw["cuda"],
        sets=list(kw["sets"]), launch=kw["launch"], env=list(kw["env"]),
        with_packages=list(kw["with_packages"]), without_packages=list(kw["without_packages"]),
        use_cache=not kw["no_cache"],
    )


def run_or_exit(fn: Any) -> Any:
    try:
        return fn()
    except AuditError as exc:
        click.echo(f"sglang-audit: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("sglang-audit: interrupted", err=True)
        sys.exit(130)


