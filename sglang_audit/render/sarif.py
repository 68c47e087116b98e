"""SARIF 2.1.0 rendering of a check result (reads result data only).

Written as plain dicts and validated against the vendored official schema in the tests.
GitHub code scanning uses the first location, ``partialFingerprints.primaryLocationLineHash``
and ``runAutomationDetails.id`` (one category per arch × model), so:

* ``locations[0]`` is the user's launch/deployment file when given (the finding concerns
  *their* configuration; SGLang's source is not in their repository), else the SGLang line
  that decided the value;
* ``relatedLocations`` hold the decision chain (and matched code fingerprints);
* besides ``primaryLocationLineHash`` each result carries a semantic key (rule, arch,
  model, setting, value) that survives SGLang line moves between releases.

Output is deterministic: no timestamps, sorted keys, stable order.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from sglang_audit import __version__
from sglang_audit.inputs.flagnames import cli_flag
from sglang_audit.result import ChainStep
from sglang_audit.rules.knownbad import CheckResult, Finding, Rule

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
PROBLEM_SEVERITY = {"error": "error", "warning": "warning", "info": "recommendation"}
SEMANTIC_KEY = "sglangAuditSemantic/v1"
SGLANG_BASE = "SGLANG"
FALLBACK_FILE = "sglang/version.py"  # a finding about the release as a whole (no setting)


@dataclass(frozen=True)
class Anchor:
    """The user's launch/deployment file: its URI as given and its text (to find a line)."""

    uri: str
    text: str


def source_url(source: str) -> str:
    repo, number = source.split("#", 1)
    return f"https://github.com/{repo}/issues/{number}"


def _hash(*parts: Any) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()


def _category_part(text: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-") or "unknown"


def _release_base(version: Any) -> str | None:
    """The upstream tag of a plain release (files are relative to python/ in the repo)."""
    try:
        v = Version(str(version))
    except InvalidVersion:
        return None
    if v.local or v.is_devrelease:
        return None
    return f"https://github.com/sgl-project/sglang/blob/v{version}/python/"


def _descriptor(rule: Rule) -> dict[str, Any]:
    sources = ", ".join(rule.sources)
    text = " ".join(x for x in (
        rule.description or rule.title,
        f"Fix: {rule.fix}" if rule.fix else "",
        f"Sources: {sources}." if sources else "",
    ) if x)
    md_sources = ", ".join(f"[{s}]({source_url(s)})" for s in rule.sources)
    markdown = "\n\n".join(x for x in (
        f"**{rule.title}**",
        rule.description,
        f"**Fix:** {rule.fix}",
        f"**Sources:** {md_sources}" if md_sources else "",
        f"**Checked against the code:**\n\n```\n{rule.checked.strip()}\n```" if rule.checked else "",
        "_Needs an environment check: sglang-audit cannot see the installed libraries._" if rule.needs_env else "",
    ) if x)
    out: dict[str, Any] = {
        "id": rule.id,
        "name": rule.slug,
        "shortDescription": {"text": rule.title[:1024]},
        "fullDescription": {"text": (rule.description or rule.title)[:1024]},
        "help": {"text": text, "markdown": markdown},
        "defaultConfiguration": {"level": LEVELS[rule.severity]},
        "properties": {
            "tags": sorted({"sglang", rule.family, *rule.tags}),
            "precision": rule.confidence,
            "problem.severity": PROBLEM_SEVERITY[rule.severity],
        },
    }
    if rule.sources:
        out["helpUri"] = source_url(rule.sources[0])
    return out


def _sglang_location(file: str, line: int, message: str | None = None, loc_id: int | None = None) -> dict[str, Any]:
    loc: dict[str, Any] = {
        "physicalLocation": {
            "artifactLocation": {"uri": file, "uriBaseId": SGLANG_BASE},
            "region": {"startLine": max(int(line), 1)},
        }
    }
    if message:
        loc["message"] = {"text": message}
    if loc_id is not None:
        loc["id"] = loc_id
    return loc


def _step_text(step: ChainStep) -> str:
    guard = step.guard if step.guard else step.code or step.kind
    return f"[{step.layer}] {guard} → {step.value!r}"


def _anchor_line(anchor: Anchor, finding: Finding) -> tuple[int, str]:
    """The line of the launch file that sets the finding's setting, else line 1."""
    lines = anchor.text.splitlines() or [""]
    if finding.setting:
        needles = (cli_flag(finding.setting), finding.setting.replace("_", "-"), finding.setting)
        for i, text in enumerate(lines, 1):
            if any(n in text for n in needles):
                return i, text
    return 1, lines[0]


def _result(finding: Finding, rule_index: dict[str, int], res_facts: dict[str, Any], anchor: Anchor | None) -> dict[str, Any]:
    step = finding.deciding
    decided = f"{step.file}:{step.line}" if step else None
    head = f"{finding.setting} = {finding.value}" if finding.setting else finding.title
    if anchor is not None:
        line, line_text = _anchor_line(anchor, finding)
        primary = {
            "physicalLocation": {"artifactLocation": {"uri": anchor.uri}, "region": {"startLine": line}},
            "message": {"text": head + (f" (decided at SGLang {decided})" if decided else "")},
        }
        line_hash = _hash(anchor.uri, line_text.strip(), finding.rule_id)
    elif step is not None:
        primary = _sglang_location(step.file, step.line, f"{head}: {_step_text(step)}")
        line_hash = _hash(step.file, step.code or step.guard, finding.rule_id)
    else:
        primary = _sglang_location(FALLBACK_FILE, 1, head)
        line_hash = _hash(FALLBACK_FILE, finding.rule_id)
    related: list[dict[str, Any]] = []
    seen: set[tuple[str, int, str]] = set()
    for s in finding.chain:
        key = (s.file, s.line, _step_text(s))
        if key in seen or s.line < 1:
            continue
        seen.add(key)
        related.append(_sglang_location(s.file, s.line, _step_text(s), len(related) + 1))
    for ev in finding.code:
        if ev.found and ev.line:
            related.append(_sglang_location(ev.file, ev.line, f"code fingerprint {ev.fingerprint}: {ev.description}", len(related) + 1))
    semantic = _hash(finding.rule_id, res_facts["arch"], res_facts["model"], finding.setting or "", finding.value)
    props: dict[str, Any] = {
        "confidence": finding.confidence,
        "fix": finding.fix,
        "sources": list(finding.sources),
        "needsEnv": finding.needs_env,
    }
    if finding.setting:
        props["setting"] = finding.setting
        props["value"] = finding.value
    if decided:
        props["decidedAt"] = decided
    if finding.code:
        props["codeFingerprints"] = {c.fingerprint: c.found for c in finding.code}
    out: dict[str, Any] = {
        "ruleId": finding.rule_id,
        "ruleIndex": rule_index[finding.rule_id],
        "kind": "fail",
        "level": LEVELS[finding.severity],
        "message": {"text": f"{finding.message} Fix: {finding.fix}"},
        "locations": [primary],
        "partialFingerprints": {
            "primaryLocationLineHash": f"{line_hash[:16]}:1",
            SEMANTIC_KEY: semantic[:32],
        },
        "properties": props,
    }
    if related:
        out["relatedLocations"] = related
    return out


def render_sarif(result: CheckResult, anchor: Anchor | None = None) -> dict[str, Any]:
    res = result.resolution
    arch = res.device.get("arch")
    model = res.model.name
    facts = {"arch": arch, "model": model}
    rules = sorted(result.rules, key=lambda r: r.id)
    rule_index = {r.id: i for i, r in enumerate(rules)}
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "sglang-audit",
                "version": __version__,
                "semanticVersion": __version__,
                "rules": [_descriptor(r) for r in rules],
            }
        },
        "automationDetails": {"id": f"sglang-audit/{_category_part(arch)}/{_category_part(model)}/"},
        "columnKind": "unicodeCodePoints",
        "results": [_result(f, rule_index, facts, anchor) for f in result.findings],
        "invocations": [{
            "executionSuccessful": True,
            "toolExecutionNotifications": [
                {
                    "level": "warning",
                    "message": {"text": f"{u.rule_id}"
                                + (f" ({u.setting})" if u.setting else "")
                                + " could not be decided: "
                                + "; ".join(f"{f} unknown ({r})" for f, r in u.facts)},
                    "associatedRule": {"id": u.rule_id, "index": rule_index[u.rule_id]},
                }
                for u in result.undecided
            ],
        }],
        "properties": {
            "sglang": {"version": res.source.get("version"), "flashinfer": res.source.get("flashinfer"),
                       "structure": res.structure},
            "device": {"arch": arch, "cuda": res.device.get("cuda"), "platform": res.device.get("platform")},
            "model": {"name": model, "architecture": _plain(res.model.architecture),
                      "quantization": _plain(res.model.quantization)},
            "flags": {k: _plain(v) for k, v in sorted(res.flags.items())},
        },
    }
    base = _release_base(res.source.get("version"))
    if base:
        run["originalUriBaseIds"] = {
            SGLANG_BASE: {"uri": base, "description": {"text": "The analysed SGLang release (upstream tag); paths are relative to python/."}}
        }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    to_json = getattr(value, "to_json", None)
    return to_json() if callable(to_json) else str(value)
