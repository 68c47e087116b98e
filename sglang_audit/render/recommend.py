"""Text and JSON for ``recommend`` (``analyses/recommend.py``)."""

from __future__ import annotations

import json

from sglang_audit.analyses.recommend import REASON_REJECTED, Candidate, Recommendation
from sglang_audit.render.text import env_line, hint_lines, model_label


def render_json(rec: Recommendation) -> str:
    return json.dumps(rec.to_json(), indent=2, default=str)


def _values(c: Candidate) -> str:
    return ", ".join(f"{k}={v}" for k, v in c.values)


def render_text(rec: Recommendation, requested_model: str | None = None) -> str:
    """``requested_model``: the model as the user named it (-m), when known."""
    res = rec.resolution
    out: list[str] = []
    out.append(f"sglang-audit recommend: SGLang {res.source.get('version')} (FlashInfer {res.source.get('flashinfer')}), "
               f"{res.device.get('name', res.device.get('arch', ''))}, model {model_label(res.model, requested_model)}")
    env = env_line(res)
    if env:
        out.append(env)
    out.append(f"explored: {', '.join(rec.fields) or 'nothing (no backend setting applies to this model)'}; "
               f"{rec.resolutions} resolution(s) (bound {rec.max_resolutions})")
    out.append("")
    best = rec.recommended
    if best is None:
        out.append("No viable configuration among the explored choices (see the rejected list).")
    else:
        out.append("Recommended launch command:")
        out.append(f"  {rec.launch}")
        if rec.changes:
            out.append("Changes versus the current configuration:")
            for f, now, new in rec.changes:
                out.append(f"  {f}: {now} -> {new}")
        else:
            out.append("No change: the current configuration is the top-ranked one.")
        if rec.steps and rec.steps[0].decided_by == "none":
            tied = [rec.viable[0].id]
            for s in rec.steps:
                if s.decided_by != "none":
                    break
                tied.append(s.below)
            out.append(f"Not decided by evidence: the top {len(tied)} are tied (no evidence: benchmark both); "
                       "the bench plan below measures them.")
    out.append("")
    out.append(f"Viable ({len(rec.viable)}), best first:")
    for i, c in enumerate(rec.viable, 1):
        out.append(f"  {i}. {_values(c)}")
        for e in c.evidence:
            where = f" [{e.source}]" if e.source else ""
            hw = f" on {e.hardware}" if e.hardware else ""
            out.append(f"       {e.kind}: {e.text}{hw}{where}")
        for n in c.notes:
            out.append(f"       note: {n}")
        if i <= len(rec.steps):
            s = rec.steps[i - 1]
            out.append(f"     above {i + 1} because: {s.text}" if s.decided_by != "none" else f"     vs {i + 1}: {s.text}")
    out.append("")
    out.append(f"Rejected ({len(rec.rejected)}):")
    out.extend(_rejected_lines(rec))
    if rec.not_evaluated:
        out.append("")
        out.append(f"Not evaluated ({len(rec.not_evaluated)}, bound reached): " + "; ".join(c.id for c in rec.not_evaluated))
    if rec.auto:
        out.append("")
        out.append("SGLang's own pick on this device (auto):")
        for f, v, w in rec.auto:
            out.append(f"  {f}: {v} ({w})")
    if rec.bench_plan:
        out.append("")
        out.append("Benchmark plan (run each server, then its client; feed the file back with --bench):")
        out.extend(f"  {line}" for line in rec.bench_plan)
    for n in rec.notes:
        out.append(f"note: {n}")
    return "\n".join(out) + "\n"


def _rejected_lines(rec: Recommendation) -> list[str]:
    """The removed candidates, in order; a reason shared by several (SGLang refusing the
    configuration whatever the explored field is) said once, with the candidates it removed
    and, for a known SGLang rejection, how to get past it (``hint_lines``)."""
    groups: dict[tuple[str, str, str, str, tuple[str, ...]], list[Candidate]] = {}
    for c in rec.rejected:
        r = c.reason
        assert r is not None
        groups.setdefault((r.kind, r.message, r.where, r.rule, r.sources), []).append(c)
    out: list[str] = []
    reasons = []
    for (kind, message, where, rule, sources), cands in groups.items():
        extra = f" [{rule}: {', '.join(sources)}]" if rule else ""
        at = f" ({where})" if where else ""
        if len(cands) == 1:
            out.append(f"  {cands[0].id}: {kind}: {message}{at}{extra}")
        else:
            out.append(f"  {len(cands)} candidates, the same way: {kind}: {message}{at}{extra}")
            out.append(f"    {_ids(cands)}")
        if kind == REASON_REJECTED:
            reasons.append(cands[0].reason)
    out.extend(hint_lines([*reasons, rec.resolution.rejected]))  # the configuration as given, too
    return out


def _ids(cands: list[Candidate]) -> str:
    """The candidates' ids, a field shared by all named once (``moe_runner_backend=a|b|c``)."""
    fields = {tuple(k for k, _ in c.flags) for c in cands}
    if len(fields) == 1 and len(next(iter(fields))) == 1:
        name = next(iter(fields))[0]
        return f"{name}=" + "|".join(c.flags[0][1] for c in cands)
    return "; ".join(c.id for c in cands)
