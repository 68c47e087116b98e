"""``sglang-audit report``: one self-contained HTML file for reviewers — what SGLang will
pick for this deployment, why (chains, candidates, source lines), what is known to break
(rules), what changed since ``--from``, and the decision graph.

This module gathers the data (resolve, explain the primary settings, check, the
``--from`` resolution, the source lines around each decision); ``render_html`` only
renders it.  ``rules`` and ``diff`` are optional: imported lazily, the report degrades
without them.
"""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Callable, Iterable
from dataclasses import replace
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
from sglang_audit.errors import AuditError, InputError
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.render.html import PRIMARY, ReportData, Snippet, key_steps
from sglang_audit.resolve.pipeline import (
    Request,
    prepare,
    resolve_target,
    with_kernels,
    with_package_forks,
)
from sglang_audit.resolve.pipeline import resolve as run_resolve
from sglang_audit.resolve.resultcache import ResultCache
from sglang_audit.result import ChainStep, Resolution

CONTEXT_LINES = 3
MAX_SOURCE_BYTES = 8 * 1024 * 1024  # a larger "source file" is not read for snippets

REPORT_EPILOG = """\b
Exit codes:
  0  the report was written (whatever it says: findings, rejection, unknowns)
  2  usage or input error (bad --arch, missing source, bad deployment file, ...)

\b
The file is self-contained (inline CSS and SVG, no script, no external request): attach
it to a PR or keep it as a CI artifact. Output is deterministic for the same inputs;
--timestamp adds the generation time.

\b
Example (an upgrade review: 0.5.9 → 0.5.10 on 8x RTX PRO 6000):
  sglang-audit report -s sglang==0.5.10 --from sglang==0.5.9 -a sm120 \\
      -m qwen3.5-397b-a17b-nvfp4 --set tp_size=8 -o report.html

\b
--deployment FILE takes the deployment from a file in `diff`'s format (a "deployments"
list; see `sglang-audit diff --help`), instead of --arch/--model/--set/--launch/--env;
--name picks one when the file names several.
"""


# ---- deployment file ------------------------------------------------------------------------
def deployment_request(path: Path, name: str | None, request: Request) -> Request:
    """The deployment ``name`` of a deployment file (``diff``'s format: a ``deployments``
    list), as a request on ``request``'s source; --with/--without add to it."""
    try:
        from sglang_audit.analyses.diff import load_deployments
    except ImportError:
        raise InputError("--deployment needs the diff module (sglang_audit/diff.py), which this installation lacks") from None
    deps = load_deployments(path)
    if name is None and len(deps) > 1:
        names = ", ".join(repr(d.name) for d in deps)
        raise InputError(f"{path} names {len(deps)} deployments ({names}): pick one with --name")
    if name is not None:
        deps = [d for d in deps if d.name == name]
        if not deps:
            raise InputError(f"{path}: no deployment named {name!r}")
    # what the file does not describe comes from the command line (the rest is refused there)
    dep = deps[0].with_command_line(request).request(request.source, request.use_cache)
    return replace(dep, flashinfer_source=request.flashinfer_source)


# ---- gathering ------------------------------------------------------------------------------
def _evidence(res: Resolution, explanations: dict[str, Any], check: Any) -> set[tuple[str, int]]:
    """The (file, line) pairs the report shows source lines for: the steps about each
    setting's own values, the explained decisions and branches, the findings' evidence."""
    out: set[tuple[str, int]] = set()

    def add_step(s: ChainStep | None) -> None:
        if s is not None:
            out.add((s.file, s.line))

    for s in res.settings.values():
        for st in key_steps(s):  # the steps the page shows with their source
            add_step(st)
    for r in (res.rejected, *res.rejections):
        if r is not None:
            out.add((r.file, r.line))
    for log in res.logs:
        out.add((log.file, log.line))
    for exp in explanations.values():
        add_step(exp.deciding)
        for c in exp.reason:
            out.add((c.file, c.line))
        for ch in exp.choices:
            add_step(ch.where)
            for c in ch.reason:
                out.add((c.file, c.line))
            if ch.rejection is not None:
                out.add((ch.rejection.file, ch.rejection.line))
        for b in exp.branches:
            out.add((b.file, b.line))
            for c in b.conditions:
                out.add((c.file, c.line))
    if check is not None:
        for f in check.findings:
            add_step(f.deciding)
            for st in f.chain:
                add_step(st)
    return out


def read_snippets(root: Path, where: Iterable[tuple[str, int]], context: int = CONTEXT_LINES) -> dict[tuple[str, int], Snippet]:
    """±``context`` lines around each (file, line), read as text from the checkout.  Paths
    are relative to the directory holding ``sglang``; one that leaves it is not read."""
    root = root.resolve()
    files: dict[str, list[str] | None] = {}
    out: dict[tuple[str, int], Snippet] = {}
    for file, line in sorted(where):
        if file not in files:
            files[file] = _read_lines(root, file)
        lines = files[file]
        if not lines or not isinstance(line, int) or not 1 <= line <= len(lines):
            continue
        lo, hi = max(1, line - context), min(len(lines), line + context)
        out[(file, line)] = Snippet(file, line, tuple((n, lines[n - 1]) for n in range(lo, hi + 1)))
    return out


def _read_lines(root: Path, file: str) -> list[str] | None:
    path = (root / file).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return None
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return [line.rstrip("\r").expandtabs(4) for line in text.split("\n")]


def _shipped_rules() -> tuple[Any, ...] | None:
    """The shipped rules, read once for the explanations and the findings; None when they
    cannot be read (each user then says why, as on its own)."""
    try:
        from sglang_audit.rules.knownbad import load_rules

        return tuple(load_rules())
    except Exception:  # noqa: BLE001 - reported by explain and _check themselves
        return None


def _check(res: Resolution, rule_dirs: tuple[Path, ...], shipped: tuple[Any, ...] | None = None) -> tuple[Any, str]:
    try:
        from sglang_audit.rules.knownbad import check_resolution, load_rules
    except ImportError:
        return None, "the rules module is not available in this installation"
    # a bad rule file is a usage error (exit 2), as in `check`
    rules = shipped if shipped is not None and not rule_dirs else load_rules(rule_dirs)
    return check_resolution(res, rules), ""


def _release_diff(from_source: str, request: Request, say: Callable[[str], None] | None, jobs: int = 1,
                  cache: SourceCache | None = None) -> Any:
    """``diff``'s comparison of the two releases for this deployment, or None when the
    module is absent (the report then compares the two resolutions itself)."""
    try:
        from sglang_audit.analyses.diff import Deployment, diff_releases
    except ImportError:
        return None
    from sglang_audit.resolve.pipeline import launch_with_config

    dep = Deployment.of_request(request, launch_with_config(request))
    return diff_releases(from_source, request.source, [dep], use_cache=request.use_cache, progress=say, jobs=jobs,
                         new_cache=cache)


def build_report(request: Request, from_source: str | None = None, rule_dirs: tuple[Path, ...] = (),
                 timestamp: str | None = None, say: Callable[[str], None] | None = None,
                 explain_fields: Iterable[str] = PRIMARY, force_choices: bool = True,
                 recommend: bool = False, bench: str | None = None, max_resolutions: int | None = None,
                 explore: tuple[str, ...] = (), jobs: int = 1) -> ReportData:
    """``jobs`` > 1: the explanations' forced choices (most of the report's resolutions)
    are resolved in that many worker processes; the report is the same."""
    from sglang_audit.analyses.explain import explain_fields as explain_many

    # one SourceCache and one prepared release for the resolution and every explanation
    cache = SourceCache(use_disk=request.use_cache)
    fields = tuple(explain_fields)
    prep = prepare(request, cache, say, want_table=bool(fields))
    # listed once for every key; a result is stored only if it read the content keyed
    results = ResultCache(enabled=request.use_cache, stable_tree=True)
    plain = resolve_target(prep.target, cache, results, forks=False)
    res = with_package_forks(plain, prep.target, cache, results)
    res = with_kernels(res, prep.target, cache, request.flashinfer_source, say, results=results)  # kernels.py
    notes: list[str] = []
    names = [n for n in fields if (s := res.settings.get(n)) is not None and s.present]
    if say and names:
        say(f"explaining {', '.join(names)}")
    # what `explain` resolves first for this target (no package forks) is already resolved
    first = with_kernels(plain, prep.target, cache, request.flashinfer_source, results=results)
    shipped = _shipped_rules()
    explained = explain_many(request, names, say, force_choices, jobs, cache, bases=[(prep.target, first)], rules=shipped,
                             results=results)
    explanations: dict[str, Any] = {}
    for name, exp in explained.items():
        if isinstance(exp, AuditError):
            notes.append(f"explain {name} failed: {exp}")
        else:
            explanations[name] = exp
    check, check_note = _check(res, rule_dirs, shipped)
    base = diff = None
    if from_source is not None:
        diff = _release_diff(from_source, request, say, jobs, cache)
        if diff is not None:
            side = diff.deployments[0].old
            base = side.resolution
            if base is None:
                notes.append(f"{from_source} does not accept this deployment's flags: {side.error}")
        else:
            if say:
                say(f"resolving the same deployment with {from_source}")
            # the --from release's own FlashInfer pin, not the one given for this release
            fi = "none" if (request.flashinfer_source or "").strip().lower() == "none" else None
            base = run_resolve(replace(request, source=from_source, flashinfer_source=fi), progress=say)
    rec = None
    if recommend:
        from sglang_audit.analyses.recommend import DEFAULT_MAX_RESOLUTIONS
        from sglang_audit.analyses.recommend import recommend as run_recommend

        if say:
            say("recommending a configuration")
        limit = DEFAULT_MAX_RESOLUTIONS if max_resolutions is None else max_resolutions
        rec = run_recommend(request, bench=bench, max_resolutions=limit, progress=say, explore=explore, jobs=jobs,
                            cache=cache)
    snippets = read_snippets(prep.tree.package_dir.parent, _evidence(res, explanations, check))
    return ReportData(res, explanations, check, check_note, base, diff, snippets, tuple(notes), timestamp,
                      recommendation=rec)


# ---- command --------------------------------------------------------------------------------
@click.command(epilog=REPORT_EPILOG)
@target_options(arch_required=False)  # --arch may come from --deployment
@click.option("--from", "from_source", metavar="S0", help="An older SGLang source (any --source form): adds what changed for this deployment since it.")
@click.option("--deployment", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="FILE",
              help="A YAML/TOML deployment file in `diff`'s format, instead of --arch/--model/--set/--launch/--config/--env/--cuda.")
@click.option("--name", "deployment_name", metavar="NAME", help="Which deployment of --deployment (when it names several).")
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Extra rule directories for the findings, as in `check`.")
@click.option("--output", "-o", required=True, metavar="FILE", help="Where to write the HTML report (- for standard output).")
@click.option("--no-choices", is_flag=True,
              help="Do not force each choice of the primary settings (one resolution per choice: the slow part on large releases); branches and chains are still shown.")
@click.option("--recommend", "with_recommend", is_flag=True,
              help="Add a Recommendation section: `sglang-audit recommend` for this deployment (the recommended "
                   "launch, the ranked viable configurations with their evidence, the rejected ones with their reason, "
                   "a benchmark plan). Up to --max-resolutions more resolutions.")
@click.option("--bench", metavar="FILE", help="With --recommend: your `sglang.bench_serving --output-file` JSON lines "
              "(as `recommend --bench`); implies --recommend.")
@click.option("--max-resolutions", type=int, default=None, metavar="N",
              help="With --recommend: at most N full resolutions (default 32).")
@click.option("--explore", multiple=True, type=click.Choice(["attention"]),
              help="Also explore the attention backend in the Recommendation section (as `recommend --explore`); implies --recommend.")
@click.option("--timestamp", is_flag=True, help="Add the generation time (UTC) to the footer; without it the output is deterministic.")
@jobs_option
def report(from_source: str | None, deployment: Path | None, deployment_name: str | None,
           rule_dirs: tuple[Path, ...], output: str, no_choices: bool, with_recommend: bool, bench: str | None,
           max_resolutions: int | None, explore: tuple[str, ...], timestamp: bool, jobs: int | None, **kw: Any) -> None:
    """Write a self-contained HTML report of one deployment for reviewers: the resolved
    backends with their decision chains and source lines, every candidate and why it is
    (not) chosen, known-bad findings, changes since --from, and the decision graph."""
    from sglang_audit.render.html import render_html

    target = TargetOptions.of(kw)
    if deployment is not None:
        target.refuse_with_deployment()
    elif deployment_name is not None:
        raise click.UsageError("--name needs --deployment")
    else:
        target.require_arch()

    def run() -> str:
        request = target.request()
        if deployment is not None:
            request = deployment_request(deployment, deployment_name, request)
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC") if timestamp else None
        data = build_report(request, from_source, rule_dirs, stamp, progress, force_choices=not no_choices,
                            recommend=with_recommend or bench is not None or bool(explore), bench=bench,
                            max_resolutions=max_resolutions, explore=tuple(explore), jobs=jobs_of(jobs))
        return render_html(data)

    html = run_or_exit(run)
    if output == "-":
        sys.stdout.write(html)
        return
    try:
        Path(output).write_text(html, encoding="utf-8")
    except OSError as exc:
        click.echo(f"sglang-audit: error: cannot write {output}: {exc.strerror or exc}", err=True)
        sys.exit(2)
    click.echo(f"report written to {output}", err=True)
