"""The field-case corpus: one YAML file per public report (tests/field/cases/), loaded,
validated and turned into a `check` request.  Used by tests/test_field.py and by
scripts that print the recall table for docs/field.md.

A case keeps the launch command as the user pasted it; `normalise_launch` makes the minimal
changes today's `--launch` parser needs (issue #20 teaches the parser the rest): join
backslash continuations, drop a `docker run ...`/`env` wrapper, and carry `NAME=VALUE`
prefixes (and docker's `-e NAME=VALUE`) as environment variables.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

FIELD_DIR = Path(__file__).resolve().parent
CASES_DIR = FIELD_DIR / "cases"
MODELS_DIR = FIELD_DIR / "models"
PROFILES_DIR = FIELD_DIR.parent.parent / "fixtures" / "models"

KINDS = ("failure", "known_good")
REQUIRED = ("url", "thread", "reported_version", "gpu", "arch", "launch", "model", "what_happened",
            "in_scope", "kind", "expect")
OPTIONAL = ("title", "check_version", "cuda", "cudnn", "env", "out_of_scope_reason", "notes")
THREAD_RE = re.compile(r"^([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)#(\d+)$")
# a documentation page (SGLang's docs and cookbook recipes): `docs:<host>/<path>`, its url the page
DOC_RE = re.compile(r"^docs:([a-z0-9.-]+\.[a-z]+)/([\w./-]+)$")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# where the SGLang command starts inside a wrapper
ENTRY = (("-m", "sglang.launch_server"), ("-m", "sglang.launch_server_grpc"))


class CaseError(ValueError):
    pass


@dataclass(frozen=True)
class Case:
    id: str  # file stem
    path: Path
    url: str
    thread: str
    reported_version: str
    check_version: str  # the release the tool checks (the reported one unless it is not on PyPI)
    gpu: str
    arch: str
    cuda: str
    cudnn: str | None
    launch: str  # as pasted
    model: str  # a bundled profile name or a path under tests/field/models/
    env: dict[str, str]
    what_happened: str
    in_scope: bool
    out_of_scope_reason: str | None
    kind: str
    expect_rules: tuple[str, ...]  # rule ids check must report (error or warning)
    title: str = ""
    miss: str | None = None  # an in-scope failure no rule covers yet: why (counts against recall)

    @property
    def model_spec(self) -> str:
        local = MODELS_DIR / self.model
        return str(local) if local.is_dir() else self.model


def normalise_launch(text: str) -> tuple[str, dict[str, str]]:
    """(the SGLang command alone, env from NAME=VALUE prefixes / docker -e)."""
    joined = re.sub(r"\\\s*\n", " ", text)
    joined = " ".join(line for line in joined.splitlines() if not line.lstrip().startswith("#"))
    words = shlex.split(joined)
    env: dict[str, str] = {}
    start = None
    for i, w in enumerate(words):
        if i + 1 < len(words) and (w, words[i + 1]) in ENTRY:
            start = i + 2
            break
        if w == "sglang" and i + 1 < len(words) and words[i + 1] == "serve":
            start = i + 2
            break
    if start is None:
        raise CaseError("no `python -m sglang.launch_server` (or `sglang serve`) in the launch command")
    prefix = words[:start]
    for i, w in enumerate(prefix):
        if ENV_RE.match(w) and (i == 0 or prefix[i - 1] in ("-e", "--env") or ENV_RE.match(prefix[i - 1])
                                or prefix[i - 1] in ("env", "&&", ";") or _plain_prefix(prefix[:i])):
            name, _, value = w.partition("=")
            env[name] = value
    return shlex.join(words[start:]), env


def _plain_prefix(words: list[str]) -> bool:
    # NAME=VALUE words that open the command line (before any program name)
    return all(ENV_RE.match(w) for w in words)


def load_case(path: Path) -> Case:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CaseError(f"{path.name}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise CaseError(f"{path.name}: expected a mapping")
    for key in REQUIRED:
        if key not in data:
            raise CaseError(f"{path.name}: {key}: missing")
    for key in data:
        if key not in REQUIRED and key not in OPTIONAL:
            raise CaseError(f"{path.name}: {key}: unknown field")
    m = THREAD_RE.match(str(data["thread"]))
    doc = DOC_RE.match(str(data["thread"]))
    if m:
        owner, repo, num = m.groups()
        if not re.fullmatch(rf"https://github\.com/{owner}/{repo}/(issues|pull)/{num}(#[\w-]+)?", str(data["url"])):
            raise CaseError(f"{path.name}: url: does not point at {data['thread']}")
    elif doc:
        if data["kind"] != "known_good":
            raise CaseError(f"{path.name}: thread: a documentation page is a known-good recipe, not a failure report")
        if not re.fullmatch(rf"https://{re.escape(doc[1])}/{re.escape(doc[2])}(#[\w-]+)?", str(data["url"])):
            raise CaseError(f"{path.name}: url: does not point at {data['thread']}")
    else:
        raise CaseError(f"{path.name}: thread: expected owner/repo#N (or docs:<host>/<path> for a documentation page)")
    if data["kind"] not in KINDS:
        raise CaseError(f"{path.name}: kind: one of {KINDS}")
    if not isinstance(data["in_scope"], bool):
        raise CaseError(f"{path.name}: in_scope: true or false")
    if not data["in_scope"] and not data.get("out_of_scope_reason"):
        raise CaseError(f"{path.name}: out_of_scope_reason: required when in_scope is false")
    expect = data["expect"]
    if not isinstance(expect, dict) or set(expect) - {"rules", "no_error", "miss"}:
        raise CaseError(f"{path.name}: expect: {{rules: [ids]}} for a failure, {{no_error: true}} for known-good")
    rules = tuple(expect.get("rules") or ())
    miss = expect.get("miss")
    if data["kind"] == "known_good" and (rules or expect.get("no_error") is not True):
        raise CaseError(f"{path.name}: expect: a known-good deployment expects {{no_error: true}}")
    if data["kind"] == "failure" and data["in_scope"] and not rules and not miss:
        raise CaseError(f"{path.name}: expect.rules: an in-scope failure names the rules that must warn "
                        "(or expect.miss: why no rule covers it yet)")
    if miss and (rules or not data["in_scope"] or data["kind"] != "failure"):
        raise CaseError(f"{path.name}: expect.miss: only for an in-scope failure with no rule")
    env = data.get("env") or {}
    if not isinstance(env, dict):
        raise CaseError(f"{path.name}: env: a mapping")
    return Case(
        id=path.stem, path=path, url=str(data["url"]), thread=str(data["thread"]),
        reported_version=str(data["reported_version"]),
        check_version=str(data.get("check_version") or data["reported_version"]),
        gpu=str(data["gpu"]), arch=str(data["arch"]), cuda=str(data.get("cuda") or "12.9"),
        cudnn=str(data["cudnn"]) if data.get("cudnn") else None, launch=str(data["launch"]),
        model=str(data["model"]), env={str(k): str(v) for k, v in env.items()},
        what_happened=str(data["what_happened"]), in_scope=data["in_scope"],
        out_of_scope_reason=data.get("out_of_scope_reason"), kind=data["kind"], expect_rules=rules,
        title=str(data.get("title") or ""), miss=str(miss) if miss else None,
    )


def load_cases() -> list[Case]:
    return [load_case(p) for p in sorted(CASES_DIR.glob("*.yaml"))]


def request_for(case: Case, source: str) -> Any:
    from sglang_audit.resolve.pipeline import Request

    command, env = normalise_launch(case.launch)
    env.update(case.env)
    return Request(source=source, arch=case.arch, model=case.model_spec, cuda=case.cuda,
                   cudnn=case.cudnn, launch=command, env=[f"{k}={v}" for k, v in sorted(env.items())])


@dataclass(frozen=True)
class Outcome:
    case: Case
    findings: tuple[tuple[str, str], ...]  # (rule id, severity)
    undecided: tuple[str, ...]

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(r for r, s in self.findings if s == "error")

    @property
    def warned(self) -> bool:
        """Every rule the case expects is reported (as an error or a warning)."""
        ids = {r for r, s in self.findings if s in ("error", "warning")}
        return bool(self.case.expect_rules) and set(self.case.expect_rules) <= ids


def run_case(case: Case, source: str, cache: Any = None) -> Outcome:
    """``cache``: a ``SourceCache`` shared by the cases of one release (the report and the
    tests resolve many cases of a release in one process)."""
    from sglang_audit.resolve.pipeline import resolve
    from sglang_audit.rules.knownbad import check_resolution, load_rules

    res = resolve(request_for(case, source), cache=cache)
    result = check_resolution(res, load_rules())
    return Outcome(case, tuple((f.rule_id, f.severity) for f in result.findings),
                   tuple(sorted({u.rule_id for u in result.undecided})))
