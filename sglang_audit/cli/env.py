"""``sglang-audit env``: the versions a plain ``pip install sglang==X`` gets, with their sources."""

from __future__ import annotations

import sys
from typing import Any

import click

from sglang_audit.cli.common import STATUS, TargetOptions, progress, run_or_exit, target_options

EPILOG = """\b
Exit codes:
  0  every version known
  2  usage or input error (bad --arch, missing source, ...)
  3  a version is not one exact pin (a range), or torch's metadata could
     not be read and rules/torch_pins.toml has no row for it
"""


@click.command(epilog=EPILOG)
@target_options(only=("source", "arch"), arch_required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def env(fmt: str, **kw: Any) -> None:
    """Print the versions a plain `pip install sglang==X` gets, each with its source.

    torch, flashinfer-python and sgl-kernel are the release's own Requires-Dist pins (a
    range is said to be one); cuDNN is the nvidia-cudnn-cu* pin in the metadata of that
    torch version's Linux x86_64 wheel, read from the package index (its metadata file, or
    the wheel's METADATA by byte ranges: never the wheel) and cached in the user cache dir.
    With SGLANG_AUDIT_OFFLINE=1, or the index unreachable, cuDNN comes from the table
    rules/torch_pins.toml and the output says so. --arch picks the platform (default: CUDA);
    off CUDA, flashinfer, sgl-kernel and cuDNN are not used.

    Each line is a package, its version and where it came from, e.g. "torch 2.14.1 (sglang
    0.5.23 Requires-Dist: torch==2.14.1)", "cuDNN 9.24.0.43 (torch 2.14.1 Requires-Dist
    nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"; read from ...)".

    \b
    Example:
      sglang-audit env --source sglang==0.5.23
    """
    from sglang_audit.inputs.device import parse_device
    from sglang_audit.inputs.pins import profile_for
    from sglang_audit.render.env import render_env_json, render_env_text
    from sglang_audit.source.locate import locate_source

    target = TargetOptions.of(kw)

    def run() -> Any:
        platform = parse_device(target.arch).platform if target.arch else "cuda"
        tree = locate_source(target.source, progress=progress)
        return tree, profile_for(tree.package_dir, tree.version or "unknown", platform)

    try:
        tree, profile = run_or_exit(run)
    finally:
        STATUS.clear()
    if fmt == "json":
        click.echo(render_env_json(profile, tree.to_json() | {"package_dir": None}))
    else:
        from sglang_audit.cli.common import for_reader

        click.echo(for_reader(render_env_text(profile)), nl=False)
    if not profile.complete:
        sys.exit(3)
