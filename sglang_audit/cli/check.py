"""`sglang-audit check`: resolve one deployment, apply the known-bad rules, report findings
(text, JSON or SARIF 2.1.0) and set a CI-friendly exit code."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from sglang_audit.cli.common import make_request, progress, run_or_exit, target_options
from sglang_audit.cli.oneshot import collector_off
from sglang_audit.errors import InputError
from sglang_audit.resolve.pipeline import resolve
from sglang_audit.rules.knownbad import check_resolution, load_rules

CHECK_EPILOG = """\b
Exit codes:
  0  no finding at or above --fail-on, and every rule that could reach it was decided
  1  findings at or above --fail-on (SGLang rejecting the configuration is one: SGA001)
  2  usage or input error (bad --arch, missing source, bad config.json, bad rule file ...)
  3  resolution incomplete: a rule at or above --fail-on needs a fact that is unknown, or a
     setting is unknown (listed as undecided SGA002; a clean 0 is never claimed on a guess)
  With --fail-on never the exit code is 0 unless there is a usage error (2).

\b
Rules: the shipped rules/known-bad/*.yaml plus every --rules DIR (one YAML rule per file,
validated at load time; see docs/rules.md). Findings name the triggering setting, its
resolved value, the deciding SGLang file:line and the decision chain.

\b
Example (CI, SARIF for GitHub code scanning, anchored to the team's launch script; on
0.5.13 it exits 1: the SGA101 error finding):
  sglang-audit check -s sglang==0.5.13 -a sm120 -m qwen3.5-397b-a17b-nvfp4 \\
      --set tp_size=8 --format sarif --location deploy/launch.sh > sglang-audit.sarif
"""


def _anchor(path: Path | None) -> Any:
    from sglang_audit.render.sarif import Anchor

    if path is None:
        return None
    from sglang_audit.userfiles import UserFileError, read_user_file

    try:
        text = read_user_file(path, "--location").decode("utf-8", errors="replace")
    except UserFileError as exc:
        raise InputError(exc.message) from None
    # SARIF wants a relative URI with forward slashes (relative to the repo checkout in CI)
    # a relative URI reference (RFC 3986): spaces, '#', '%', non-ASCII ... percent-encoded
    from urllib.parse import quote

    uri = quote(path.as_posix(), safe="/") if not path.is_absolute() else path.resolve().as_uri()
    return Anchor(uri, text)


@click.command(epilog=CHECK_EPILOG)
@target_options
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A directory of extra rule files (*.yaml), added to the shipped ones (rules/known-bad in the repository; `sglang-audit --version` says where they are read from). Repeatable.")
@click.option("--fail-on", type=click.Choice(["error", "warning", "never"]), default="error", show_default=True,
              help="Lowest finding severity that makes the exit code non-zero.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif"]), default="text", show_default=True)
@click.option("--location", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="FILE",
              help="The launch/deployment file this deployment comes from (launch script, SGLang --config YAML, compose/k8s manifest): SARIF results are anchored to it, at the line that sets the flag when there is one. Default: the deciding SGLang line.")
def check(rule_dirs: tuple[Path, ...], fail_on: str, fmt: str, location: Path | None, **kw: Any) -> None:
    """Check one deployment against the known-bad rules (SGA1xx FP4 GEMM, SGA2xx MoE and
    draft MoE, SGA3xx FlashInfer version, SGA4xx attention)."""
    # rule files and the anchor are checked before the (slower) resolution
    rules = run_or_exit(lambda: load_rules(rule_dirs))
    anchor = run_or_exit(lambda: _anchor(location))
    with collector_off():
        res = run_or_exit(lambda: resolve(make_request(kw), progress=progress))
    result = check_resolution(res, rules)
    if fmt == "sarif":
        from sglang_audit.render.sarif import render_sarif

        click.echo(json.dumps(render_sarif(result, anchor), indent=2, sort_keys=True, ensure_ascii=False))
    elif fmt == "json":
        from sglang_audit.render.check import check_json

        click.echo(json.dumps(check_json(result, fail_on), indent=2, sort_keys=True, default=str))
    else:
        from sglang_audit.render.check import render_check
        from sglang_audit.render.text import hint_lines

        text = render_check(result, fail_on)
        hints = hint_lines([res.rejected, *res.rejections], indent="")
        if hints:  # how to get past SGLang's rejection (SGA001), before the summary line
            head, sep, summary = text.rpartition("summary: ")
            text = head + "\n".join(hints) + "\n\n" + sep + summary if sep else text + "\n".join(hints) + "\n"
        from sglang_audit.cli.common import for_reader

        click.echo(for_reader(text), nl=False)
    sys.exit(result.exit_code(fail_on))
