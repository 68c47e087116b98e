"""Text and JSON rendering of a check result (reads result data only)."""

from __future__ import annotations

from typing import Any

from sglang_audit.result import SCHEMA_VERSION, ChainStep
from sglang_audit.rules.knownbad import CheckResult, Finding

MAX_CHAIN_LINES = 12


def check_json(result: CheckResult, fail_on: str) -> dict[str, Any]:
    res = result.resolution.to_json()
    return {
        "schema_version": SCHEMA_VERSION,
        "source": res["source"],
        "structure": res["structure"],
        "device": res["device"],
        "model": res["model"],
        "flags": res["flags"],
        "env": res["env"],
        "rules": [r.id for r in result.rules],
        "findings": [f.to_json() for f in result.findings],
        "undecided": [u.to_json() for u in result.undecided],
        "summary": _summary_counts(result),
        "fail_on": fail_on,
        "exit_code": result.exit_code(fail_on),
    }


def _summary_counts(result: CheckResult) -> dict[str, int]:
    counts = {"error": 0, "warning": 0, "info": 0}
    for f in result.findings:
        counts[f.severity] += 1
    counts["undecided"] = len(result.undecided)
    return counts


def _step(step: ChainStep) -> str:
    guard = f" if {step.guard}" if step.guard and step.kind not in ("default", "flag") else f" ({step.guard})" if step.guard else ""
    return f"{step.layer:7} {step.file}:{step.line}{guard} → {step.value!r}"


def _finding_lines(f: Finding) -> list[str]:
    head = f"{f.severity.upper():7} {f.rule_id} {f.slug}"
    if f.confidence != "high":
        head += f"  [confidence {f.confidence}]"
    out = [head]
    if f.setting:
        out.append(f"  {f.setting} = {f.value}")
    out.append(f"  {f.message}")
    out.append(f"  fix: {f.fix}")
    if f.needs_env:
        out.append("  (an environment requirement: sglang-audit cannot check it)")
    if f.deciding is not None:
        out.append(f"  decided at {f.deciding.file}:{f.deciding.line}" + (f"  [{f.deciding.code}]" if f.deciding.code else ""))
    steps = [s for s in f.chain if s.kind != "default"] or list(f.chain)
    if steps:
        out.append("  chain:")
        out.extend(f"    {_step(s)}" for s in steps[:MAX_CHAIN_LINES])
        if len(steps) > MAX_CHAIN_LINES:
            out.append(f"    ... {len(steps) - MAX_CHAIN_LINES} more (--format json has all)")
    for c in f.code:
        where = f"{c.file}:{c.line}" if c.line else c.file
        out.append(f"  code: {c.fingerprint} {'found at' if c.found else 'not found in'} {where} ({c.description})")
    if f.sources:
        out.append(f"  sources: {', '.join(f.sources)}")
    return out


def render_check(result: CheckResult, fail_on: str) -> str:
    res = result.resolution
    src = res.source
    out = [
        f"SGLang {src.get('version')} (flashinfer {src.get('flashinfer')}) · {res.device.get('arch')} · {res.model.name}"
        + (" · flags: " + " ".join(f"{k}={v}" for k, v in res.flags.items()) if res.flags else ""),
        f"{sum(1 for r in result.rules if r.path != '<builtin>')} rules checked (and SGLang's own asserts).",
        "",
    ]
    for f in result.findings:
        out.extend(_finding_lines(f))
        out.append("")
    if not result.findings:
        # never a bare "no findings" over an unknown: that reads as a clean check
        out.extend([f"no findings, but {len(result.undecided)} undecided (below): not a clean check."
                    if result.undecided else "no findings.", ""])
    if result.undecided:
        out.append("undecided (a fact these rules need is unknown in the resolution):")
        for u in result.undecided:
            facts = "; ".join(f"{name}: {reason}" for name, reason in u.facts)
            out.append(f"  {u.rule_id} [{u.severity}]" + (f" ({u.setting})" if u.setting else "") + f": {facts}")
        out.append("")
    c = _summary_counts(result)
    code = result.exit_code(fail_on)
    out.append(
        f"summary: {c['error']} error(s), {c['warning']} warning(s), {c['info']} info; "
        f"{c['undecided']} undecided → exit {code} (--fail-on {fail_on})"
    )
    return "\n".join(out) + "\n"
