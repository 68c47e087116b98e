"""The known-bad rule model and its results: what a rule file becomes once validated
(``Rule``, ``Fingerprint``) and what matching a resolution yields (``Finding``,
``Undecided``, ``CheckResult``). Frozen data; loading and matching are in knownbad.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang_audit.errors import AuditError
from sglang_audit.result import ChainStep, Resolution

SEVERITIES = ("error", "warning", "info")
SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
CONFIDENCES = ("high", "medium", "low")
FAIL_ON = {"error": ("error",), "warning": ("error", "warning"), "never": ()}


class RuleError(AuditError):
    """A rule file is malformed: the message names the file and the field."""


# ---- rule model ------------------------------------------------------------------------


@dataclass(frozen=True)
class Fingerprint:
    """A code shape in one file of the release (relative to the dir holding ``sglang/``)."""

    id: str
    file: str
    regex: str | None = None
    contains: str | None = None
    description: str = ""


@dataclass(frozen=True)
class Rule:
    id: str
    slug: str
    severity: str
    confidence: str
    title: str
    description: str
    message: str
    fix: str
    sources: tuple[str, ...]
    subjects: tuple[str | None, ...]  # settings the rule is about (one finding each); (None,) if none
    when: Any  # the normalised condition tree (nested tuples/dicts, see _normalise)
    fingerprints: tuple[Fingerprint, ...]
    examples_flag: tuple[dict[str, Any], ...]
    examples_pass: tuple[dict[str, Any], ...]
    checked: str
    needs_env: bool = False
    tags: tuple[str, ...] = ()
    path: str = ""

    @property
    def family(self) -> str:
        if self.id.startswith("SGK"):
            return "kernel"
        fam = {"1": "fp4-gemm", "2": "moe", "3": "flashinfer-version", "4": "attention", "5": "model-specific"}
        return fam.get(self.id[3:4], "custom") if self.id.startswith("SGA") else "custom"


# ---- results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CodeEvidence:
    fingerprint: str
    file: str
    found: bool
    line: int | None = None
    description: str = ""


@dataclass(frozen=True)
class Finding:
    rule_id: str
    slug: str
    severity: str
    confidence: str
    title: str
    message: str
    fix: str
    sources: tuple[str, ...]
    setting: str | None  # the triggering setting
    value: Any  # its resolved (effective) value
    chain: tuple[ChainStep, ...]  # that setting's decision chain
    deciding: ChainStep | None  # the SGLang line that produced the value
    code: tuple[CodeEvidence, ...] = ()
    needs_env: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule_id, "slug": self.slug, "severity": self.severity,
            "confidence": self.confidence, "title": self.title, "message": self.message,
            "fix": self.fix, "sources": list(self.sources), "setting": self.setting,
            "value": self.value, "needs_env": self.needs_env,
            "deciding": self.deciding.to_json() if self.deciding else None,
            "chain": [s.to_json() for s in self.chain],
            "code": [{"fingerprint": c.fingerprint, "file": c.file, "found": c.found, "line": c.line,
                      "description": c.description} for c in self.code],
        }


@dataclass(frozen=True)
class Undecided:
    """A rule the resolution could not decide: the facts it needed and why they are unknown."""

    rule_id: str
    severity: str
    setting: str | None
    facts: tuple[tuple[str, str], ...]  # (fact, reason)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule_id, "severity": self.severity, "setting": self.setting,
                "facts": [{"fact": f, "reason": r} for f, r in self.facts]}


@dataclass(frozen=True)
class CheckResult:
    resolution: Resolution
    rules: tuple[Rule, ...]  # every rule applied (for SARIF tool.driver.rules)
    findings: tuple[Finding, ...]
    undecided: tuple[Undecided, ...]

    def failing(self, fail_on: str) -> list[Finding]:
        return [f for f in self.findings if f.severity in FAIL_ON[fail_on]]

    def exit_code(self, fail_on: str) -> int:
        """0 clean, 1 findings at/above ``fail_on``, 3 a rule that could fail was undecided."""
        if fail_on == "never":
            return 0
        if self.failing(fail_on):
            return 1
        if any(u.severity in FAIL_ON[fail_on] for u in self.undecided):
            return 3
        return 0

