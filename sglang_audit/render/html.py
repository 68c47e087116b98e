"""The HTML report: one self-contained file for reviewers (``sglang-audit report``).

Reads result data only — the ``Resolution``, ``explain`` results, the rules' findings,
the ``--from`` resolution (and ``diff``'s result when that module exists) and the source
lines the command read around each decision — never the parser or the evaluator.

jinja2 with autoescape on: every value that comes from the analysed source (guards,
messages, code, snippets) or from the user is escaped by the template; nothing is marked
safe.  Inline CSS and SVG only, no script, no external URL that the page loads (the only
URLs are plain links a reader may follow).  Output is deterministic: no timestamp unless
the caller passes one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import jinja2

from sglang_audit import __version__
from sglang_audit.analyses.explain import (
    BRANCH_BLOCKED,
    BRANCH_FIRED,
    BRANCH_NOT_TAKEN,
    BRANCH_REACHED,
    OUTCOME_ACCEPTED,
    OUTCOME_KNOWN_BAD,
    OUTCOME_LAYERS_FAIL,
    OUTCOME_REJECTED,
    OUTCOME_REWRITTEN,
    Condition,
    Explanation,
    final_value,
)
from sglang_audit.analyses.report_graph import deployment_graph
from sglang_audit.render.text import cudnn_text, driver_text
from sglang_audit.result import (
    ChainStep,
    LayerValue,
    Rejection,
    Resolution,
    Setting,
    UnknownValue,
    agreeing,
    built_fails,
    built_what,
)

PRIMARY = ("moe_runner_backend", "speculative_moe_runner_backend", "fp4_gemm_runner_backend")
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
MAX_LINE_CHARS = 240  # a snippet line is clipped past this (minified or generated code)
MAX_GUARD_CHARS = 120  # a guard in the diff table is clipped past this (tooltip has it all)


@dataclass(frozen=True)
class Snippet:
    """Source lines around one decision, read from the checkout by the command."""

    file: str
    line: int
    lines: tuple[tuple[int, str], ...]  # (line number, text as in the file)


@dataclass
class ReportData:
    resolution: Resolution
    explanations: dict[str, Explanation] = field(default_factory=dict)
    check: Any = None  # rules.CheckResult, when the rules module is available
    check_note: str = ""  # why there are no findings to show (rules absent, failed)
    base: Resolution | None = None  # the --from release, same deployment
    diff: Any = None  # diff.ReleaseDiff for (--from, this release), when that module exists
    snippets: dict[tuple[str, int], Snippet] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # report-level notes (an explain that failed, ...)
    timestamp: str | None = None
    tool_version: str = __version__
    recommendation: Any = None  # analyses.recommend.Recommendation, with `report --recommend`


# ---- small formatting helpers ------------------------------------------------------------
def fmt(value: Any) -> str:
    if isinstance(value, UnknownValue):
        return "unknown"
    return "None" if value is None else str(value)


def _layer_text(v: LayerValue) -> str:
    if v.status == "unknown":
        text = f"unknown — {v.reason}"
    elif v.stage in ("attention", "speculative"):
        text = f"{v.status} — {v.value} at {v.site} ({v.what.removeprefix('the ')})"
    else:
        text = f"{v.status} — {v.value} at {v.site} ({v.method}" + (f", runner {v.runner})" if v.runner else ")")
    extra = [*v.assumptions, *(f"fork: {f}" for f in v.forks)]
    if isinstance(v.draft, LayerValue):
        extra.append(f"draft: {_layer_text(v.draft)}")
    shown = v.stage == "attention" or v.forks or isinstance(v.draft, LayerValue)  # the linear stage's draft
    return text + (f" [{'; '.join(extra)}]" if extra and shown else "")


def _unknown_detail(value: Any) -> str:
    if not isinstance(value, UnknownValue):
        return ""
    cands = ", ".join(f"{fmt(c.value)}" + (f" when {' and '.join(c.when)}" if c.when else "") for c in value.candidates)
    return value.reason + (f" — candidates: {cands}" if cands else "")


def failing(s: Setting) -> tuple[str, ...]:
    """The levels at which a setting fails (its layers raise, its kernel is unsupported on
    the device): ``diff``'s definition, or the setting's status when that module is absent."""
    try:
        from sglang_audit.analyses.outcome import failing_levels
    except ImportError:
        return ("status",) if s.status == "unsupported" else ()
    return failing_levels(s)


_FAILING_BADGE = {"layer": "layers fail", "kernel": "kernel unsupported", "status": "unsupported"}
CHANGES = ("changed", "added", "removed")  # diff's changes of a setting (its VALUE_CHANGES)


def short(file: str) -> str:
    return file.removeprefix("sglang/srt/")


def source_link(res: Resolution, file: str, line: int) -> str | None:
    """A GitHub link to the line, for releases taken from the package index (their tag
    is ``v<version>``); a checkout or installed copy may not match any tag."""
    origin = str(res.source.get("origin") or "")
    version = res.source.get("version")
    if not version or not re.fullmatch(r"sglang==[0-9][0-9A-Za-z.+-]*|.*sglang-[0-9][^/]*\.(whl|tar\.gz)", origin):
        return None
    if not re.fullmatch(r"[0-9A-Za-z.+-]+", str(version)) or not re.fullmatch(r"sglang/[\w./-]+\.py", file):
        return None
    return f"https://github.com/sgl-project/sglang/blob/v{version}/python/{file}#L{line}"


def issue_link(source: str) -> str | None:
    """``owner/repo#123`` → its GitHub page (GitHub redirects an issue URL to the PR)."""
    m = re.fullmatch(r"([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)#(\d+)", source.strip())
    return f"https://github.com/{m.group(1)}/issues/{m.group(2)}" if m else None


def key_steps(s: Setting) -> list[ChainStep]:
    """The steps about the setting's own values (the chain also holds every read that
    fed it): steps carrying its config or runtime value, and the user's flag."""
    values = [v for v in (s.config, s.runtime) if not isinstance(v, UnknownValue)]
    if any(isinstance(v, UnknownValue) for v in (s.config, s.runtime)):
        return list(s.chain)  # no value to select by: every step may matter
    keep = [st for st in s.chain if any(_same(st.value, v) for v in values) or st.kind == "flag"]
    return keep or list(s.chain)


def _is_guard(text: str) -> bool:
    return bool(text) and text not in ("default", "set by the user")


# ---- view model --------------------------------------------------------------------------
class _View:
    """Turns the result data into plain dicts the template can print without logic."""

    def __init__(self, data: ReportData) -> None:
        self.d = data
        self.res = data.resolution
        dev = self.res.device
        self.device = str(dev.get("arch"))

    # evidence ------------------------------------------------------------------------
    def where(self, file: str, line: int) -> dict[str, Any]:
        snip = self.d.snippets.get((file, line))
        return {
            "file": file, "line": line, "short": short(file), "text": f"{file}:{line}",
            "url": source_link(self.res, file, line),
            "snippet": [{"n": n, "text": t[:MAX_LINE_CHARS] + ("…" if len(t) > MAX_LINE_CHARS else ""), "hit": n == line}
                        for n, t in snip.lines] if snip else None,
        }

    def step(self, s: ChainStep, key: bool = False) -> dict[str, Any]:
        return {
            "where": self.where(s.file, s.line), "layer": s.layer, "kind": s.kind,
            "guard": s.guard if _is_guard(s.guard) else "", "label": s.guard if not _is_guard(s.guard) else "",
            "value": repr(s.value), "code": s.code, "key": key,
        }

    def rejection(self, r: Rejection) -> dict[str, Any]:
        return {"exception": r.exception, "message": r.message, "where": self.where(r.file, r.line),
                "stage": r.stage, "when": list(r.when), "code": r.code}

    def condition(self, c: Condition, taken: bool = False) -> dict[str, Any]:
        want = "true" if c.needed else "false"
        if c.value is None and taken:
            state, cls = f"{want} in this resolution", "holds"
        elif c.value is None:
            state, cls = f"must be {want}; depends on more than the hardware", "open"
        elif c.holds:
            state, cls = f"is {str(c.value).lower()} on {self.device}", "holds"
        else:
            state, cls = f"must be {want}, but is {str(c.value).lower()} on {self.device}", "blocks"
        return {
            "where": self.where(c.file, c.line), "construct": c.construct, "guard": c.guard,
            "state": state, "cls": cls,
            "predicates": [f"{n}() = {v}" for n, v in c.predicates], "model": c.mentions_model,
        }

    # summary ---------------------------------------------------------------------------
    def findings_by_setting(self) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        if self.d.check is not None:
            for f in self.d.check.findings:
                if f.setting:
                    out.setdefault(f.setting, []).append(f)
        return out

    def changed(self, name: str) -> tuple[bool, str]:
        """Whether the setting changed since --from (at any level of its outcome: the values,
        the layers, the kernel verdict, the findings: ``diff``'s comparison), and what it was."""
        sd = self.setting_diff(name)
        old_version = self.d.base.source.get("version") if self.d.base is not None else None
        if sd is not None:
            if sd.change in CHANGES:
                if sd.change != "changed":
                    return True, sd.note or sd.change
                if set(sd.layers) & {"config", "runtime"}:
                    return True, f"was {_pair(sd.old)}"
                return True, f"was {_pair(sd.old)} ({sd.old.status})" + (f": {sd.note}" if sd.note else "")
            if sd.change == "still_failing":
                return False, f"fails in {old_version or 'the older release'} too"
            return False, ""
        base = self.d.base
        if base is None:
            return self.d.diff is not None and self.d.diff.deployments[0].old.resolution is None, ""
        old = base.settings.get(name)
        new = self.res.settings[name]
        if old is None or old.present != new.present:
            return True, "not in the older release" if (old is None or not old.present) else "removed"
        if base.rejected is not None:
            return True, "the older release rejects this configuration"
        try:
            from sglang_audit.analyses.outcome import outcome_change
        except ImportError:  # no diff module: the values only
            return ((old.config, old.runtime) != (new.config, new.runtime)), f"was {_pair(old)}"
        oc = outcome_change(old, new)
        if oc.changed:
            values = set(oc.changed) & {"config", "runtime"}
            return True, f"was {_pair(old)}" + ("" if values else f" ({old.status}): {'; '.join(oc.details)}")
        return False, ""

    def settings_rows(self) -> list[dict[str, Any]]:
        by_setting = self.findings_by_setting()
        rows = []
        for name, s in self.res.settings.items():
            badges: list[tuple[str, str]] = []
            if not s.present:
                rows.append({"name": name, "present": False, "cls": "absent", "badges": [("absent", "not in this release")]})
                continue
            if self.res.rejected is not None:
                badges.append(("rejected", "rejected"))
            for f in sorted(by_setting.get(name, []), key=lambda f: (SEVERITY_ORDER.get(f.severity, 9), f.rule_id)):
                badges.append(("finding-" + f.severity, f"{f.rule_id} {f.severity}"))
            fails = failing(s) if self.res.rejected is None else ()
            for level in fails:
                # SGLang accepts the value; the layers built with it raise / its kernel is unsupported
                badges.append(("finding-error", _FAILING_BADGE.get(level, level)))
            if not fails and (s.status == "unknown" or isinstance(s.config, UnknownValue) or isinstance(s.runtime, UnknownValue)):
                badges.append(("unknown", "unknown"))
            changed, was = self.changed(name)
            if changed:
                badges.append(("changed", "changed"))
            if not badges:
                badges.append(("ok", "ok"))
            # the row takes the colour of its most serious badge
            order = ["rejected", "finding-error", "finding-warning", "unknown", "changed", "finding-info", "ok"]
            cls = min((b[0] for b in badges), key=order.index)
            rejected = self.res.rejected is not None or s.status == "rejected"
            rows.append({
                "name": name, "present": True, "cls": cls, "badges": badges, "failing": list(fails),
                # a rejected configuration has no value: SGLang stops before using one
                "config": "—" if rejected else fmt(s.config), "config_detail": _unknown_detail(s.config),
                "runtime": "—" if rejected or s.runtime is None else fmt(s.runtime), "runtime_detail": _unknown_detail(s.runtime),
                "runtime_differs": not rejected and s.runtime is not None and s.runtime != s.config,
                "user_set": name in self.res.flags, "was": was, "primary": name in PRIMARY,
                "note": "" if self.res.rejected is not None else s.note,  # the banner says it once
            })
        return rows

    # per setting -----------------------------------------------------------------------
    def setting_section(self, name: str, s: Setting) -> dict[str, Any]:
        key = key_steps(s)
        exp = self.d.explanations.get(name)
        deciding = None
        if exp is not None:
            deciding = exp.deciding
        else:
            deciding = s.deciding
        rejected = self.res.rejected is not None or s.status == "rejected"
        return {
            "name": name, "anchor": f"setting-{name}", "status": s.status, "note": s.note,
            "config": "—" if rejected else fmt(s.config), "config_detail": _unknown_detail(s.config),
            "runtime": None if s.runtime is None else fmt(s.runtime), "runtime_detail": _unknown_detail(s.runtime),
            "layer": (f"unknown — {s.layer.reason}" if isinstance(s.layer, UnknownValue)
                      else _layer_text(s.layer) if isinstance(s.layer, LayerValue) else None) if not rejected else None,
            "layer_raises": [f"{c.value} ({', '.join(c.when)})" for c in s.layer.candidates] if isinstance(s.layer, (UnknownValue, LayerValue)) and not rejected else [],
            "user_set": name in self.res.flags, "user_value": self.res.flags.get(name),
            "primary": name in PRIMARY,
            "deciding": self.step(deciding) if deciding is not None else None,
            "key_steps": [self.step(st, key=deciding is not None and st == deciding) for st in key],
            "all_steps": [self.step(st) for st in s.chain] if len(key) < len(s.chain) else [],
            "explain": self.explanation(exp) if exp is not None else None,
            "kernel": _kernel_view(s) if not rejected else None,
        }

    def explanation(self, exp: Explanation) -> dict[str, Any]:
        base_rej = exp.resolution.rejected
        all_same = base_rej is not None and bool(exp.choices) and all(
            c.rejection is not None and (c.rejection.message, c.rejection.file, c.rejection.line)
            == (base_rej.message, base_rej.file, base_rej.line) for c in exp.choices)
        choices = []
        for c in exp.choices:
            row: dict[str, Any] = {"choice": c.choice, "outcome": c.outcome, "cls": c.outcome,
                                   "final": "", "where": None, "why": [], "rejection": None,
                                   "conditional": [self.rejection(r) for r in c.conditional], "note": c.note}
            if c.outcome == OUTCOME_REJECTED and c.rejection is not None:
                row["rejection"] = self.rejection(c.rejection)
                row["label"] = "rejected"
            elif c.outcome == OUTCOME_ACCEPTED:
                row["label"] = "accepted"
                final = fmt(c.runtime if c.runtime is not None else c.config)
                row["final"] = final if final != c.choice else ""  # kept as chosen: nothing to add
            elif c.outcome == OUTCOME_REWRITTEN:
                row["label"] = "overridden" if c.overridden else "resolved"
                row["cls"] = "overridden" if c.overridden else "rewritten"
                row["final"] = fmt(c.config if c.layer == "config" else c.runtime) + f" ({c.layer})"
                row["where"] = self.step(c.where) if c.where else None
                row["why"] = [self.condition(x, taken=True) for x in c.reason if x.predicates]
            elif c.outcome == OUTCOME_LAYERS_FAIL:
                # SGLang accepts it; the layers built with it raise (explain's own words)
                layer = exp.setting.layer
                what = built_what(c.stage) if c.stage else (layer.what if isinstance(layer, LayerValue) else "the MoE layers")
                row["label"] = {"the attention backend": "attention backend fails",
                                "the speculative worker": "speculative worker fails"}.get(what, "MoE layers fail")
                row["cls"] = "rejected"
                head = f"accepted by SGLang, but {what} built with it {agreeing(what, 'fail')}"
                row["note"] = f"{head}: {c.note}" if c.note else head
            elif c.outcome == OUTCOME_KNOWN_BAD:
                row["label"] = "known-bad"
                final = fmt(c.runtime if c.runtime is not None else c.config)
                row["final"] = final if final != c.choice else ""
                row["cls"] = "rejected" if any(sev == "error" for _r, sev, _t in c.known_bad) else "rewritten"
                bad = ", ".join(f"{r} ({sev}: {title})" for r, sev, title in c.known_bad)
                row["note"] = f"accepted by SGLang, but known-bad: {bad}" + (f"; {c.note}" if c.note else "")
            else:
                row["label"] = "unknown"
            for name, stage, failure in c.also_fails:
                built, verb = built_fails(stage)
                row["note"] = "; ".join(x for x in (row["note"], f"with it, {built} ({name}) {verb}: {failure}") if x)
            for name, stage, reason in c.also_unknown:
                row["note"] = "; ".join(x for x in (row["note"], f"with it, {built_what(stage)} ({name}) cannot be told: {reason}") if x)
            if c.outcome != OUTCOME_KNOWN_BAD and c.known_bad:
                row["note"] = "; ".join(x for x in (row["note"], "known-bad: " + ", ".join(
                    f"{r} ({sev}: {title})" for r, sev, title in c.known_bad)) if x)
            if c.kernel is not None and c.kernel.status == "unsupported":
                k = c.kernel
                what = (k.function or k.library) + (f" backend {k.backend!r}" if k.backend else "")
                row["note"] = "; ".join(x for x in (row["note"], f"kernel {what} unsupported: {k.reason}") if x)
            choices.append(row)
        order = {BRANCH_FIRED: 0, BRANCH_REACHED: 1, BRANCH_NOT_TAKEN: 2, BRANCH_BLOCKED: 3}
        branches = []
        for b in sorted(exp.branches, key=lambda b: (order[b.status], not b.applies_to_model, b.file, b.line, str(b.value))):
            taken = b.status in (BRANCH_FIRED, BRANCH_REACHED)
            if b.status == BRANCH_BLOCKED:
                picked = {id(c) for c in b.blocked_by}
            else:
                picked = {id(c) for c in b.conditions if c.predicates or (c.mentions_model and c.needed)}
                others = [c for c in b.undecided if id(c) not in picked]
                picked |= {id(c) for c in others[-2:]}
            conds = [self.condition(c, taken=taken and not (b.status == BRANCH_REACHED and c.construct == "ifexp"))
                     for c in b.conditions]
            branches.append({
                "status": b.status, "status_text": b.status.replace("_", " "),
                "where": self.where(b.file, b.line), "value": repr(b.value) if b.constant else b.value_text,
                "layer": b.layer, "code": b.code, "model": b.applies_to_model,
                "shown": [cv for c, cv in zip(b.conditions, conds, strict=True) if id(c) in picked],
                "conditions": conds,
            })
        return {
            "default": repr(exp.default), "user_set": exp.user_set, "user_value": repr(exp.user_value),
            "overridden": exp.overridden,
            "reason": [self.condition(c, taken=True) for c in exp.reason],
            "choices_source": exp.choices_source, "choices": choices, "all_rejected_same": all_same,
            "branches": branches,
            "counts": {k: sum(1 for b in exp.branches if b.status == k) for k in order},
            "rejections": [self.rejection(r) for r in exp.resolution.rejections],
            "notes": list(exp.notes),
        }

    # findings --------------------------------------------------------------------------
    def findings(self) -> dict[str, Any] | None:
        chk = self.d.check
        if chk is None:
            return None
        items = []
        for f in chk.findings:
            items.append({
                "id": f.rule_id, "slug": f.slug, "severity": f.severity, "confidence": f.confidence,
                "title": f.title, "message": f.message, "fix": f.fix, "setting": f.setting,
                "value": fmt(f.value) if f.setting else None, "needs_env": f.needs_env,
                "deciding": self.step(f.deciding) if f.deciding is not None else None,
                "chain": [self.step(s) for s in f.chain],
                "code": [{"fingerprint": c.fingerprint, "found": c.found, "description": c.description,
                          "where": self.where(c.file, c.line) if c.line else {"text": c.file, "url": None, "snippet": None}}
                         for c in f.code],
                "sources": [{"text": s, "url": issue_link(s)} for s in f.sources],
            })
        counts = {k: sum(1 for f in chk.findings if f.severity == k) for k in ("error", "warning", "info")}
        return {
            "items": items, "counts": counts,
            "rules": sum(1 for r in chk.rules if getattr(r, "path", "") != "<builtin>"),
            "undecided": [{"id": u.rule_id, "severity": u.severity, "setting": u.setting,
                           "facts": [f"{n}: {r}" for n, r in u.facts]} for u in chk.undecided],
        }

    # recommend -------------------------------------------------------------------------
    def where_text(self, text: str) -> dict[str, Any] | None:
        """A ``file:line`` the recommend analysis gives as text, as a link where it has one."""
        m = re.fullmatch(r"(.+):(\d+)", text or "")
        if m is None:
            return {"text": text, "url": None, "snippet": None} if text else None
        return self.where(m.group(1), int(m.group(2)))

    def recommendation(self) -> dict[str, Any] | None:
        rec = self.d.recommendation
        if rec is None:
            return None
        steps = list(rec.steps)
        viable = []
        for i, c in enumerate(rec.viable):
            step = steps[i] if i < len(steps) else None
            viable.append({
                "rank": i + 1, "id": c.id, "effective": [(k, fmt(v)) for k, v in c.values],
                "forced": [(k, v) for k, v in c.flags],
                "evidence": [{"kind": e.kind, "text": e.text, "hardware": e.hardware,
                              "source": e.source, "url": _https(e.source),
                              "where": self.where_text(e.source) if e.source and not _https(e.source) else None}
                             for e in c.evidence],
                "notes": list(c.notes),
                "step": {"decided_by": step.decided_by, "text": step.text} if step is not None else None,
            })
        tied = 1
        for s in steps:
            if s.decided_by != "none":
                break
            tied += 1
        rejected = []
        for c in rec.rejected:
            r = c.reason
            rejected.append({
                "id": c.id, "kind": r.kind if r else "", "message": r.message if r else "", "stage": r.stage if r else "",
                "where": self.where_text(r.where) if r and r.where else None, "rule": r.rule if r else "",
                "sources": [{"text": x, "url": _https(x) or issue_link(x)} for x in (r.sources if r else ())],
            })
        return {
            "fields": list(rec.fields), "resolutions": rec.resolutions, "max_resolutions": rec.max_resolutions,
            "bench_lines": rec.bench_lines,
            "recommended": rec.recommended.id if rec.recommended is not None else None,
            "launch": rec.launch, "changes": [(f, fmt(a), fmt(b)) for f, a, b in rec.changes],
            "tied": tied if len(rec.viable) > 1 and tied > 1 else 0,
            "viable": viable, "rejected": rejected,
            "not_evaluated": [c.id for c in rec.not_evaluated],
            "auto": [{"field": f, "value": fmt(v), "where": self.where_text(w)} for f, v, w in rec.auto],
            "bench_plan": list(rec.bench_plan), "notes": list(rec.notes),
        }

    # diff ------------------------------------------------------------------------------
    def setting_diff(self, name: str) -> Any:
        """``diff``'s comparison of one setting, when the report has ``diff``'s result."""
        if self.d.diff is None:
            return None
        for sd in self.d.diff.deployments[0].settings:
            if sd.name == name:
                return sd
        return None

    def diff(self) -> dict[str, Any] | None:
        base = self.d.base
        rd = self.d.diff
        if base is None and rd is None:
            return None
        old_src = rd.old.to_json() if rd is not None else base.source  # type: ignore[union-attr]
        out: dict[str, Any] = {
            "old_version": old_src.get("version"), "old_origin": old_src.get("origin"),
            "new_version": self.res.source.get("version"), "new_origin": self.res.source.get("origin"),
            "old_flashinfer": old_src.get("flashinfer"), "new_flashinfer": self.res.source.get("flashinfer"),
            "rejected_old": self.rejection_text(base.rejected) if base is not None else "",
            "rejected_new": self.rejection_text(self.res.rejected),
            "transition": "", "old_error": "", "predicates": [], "flags": [], "cond_added": [], "cond_removed": [],
            "notes": [], "by": "diff" if rd is not None else "report",
        }
        rows = []
        if rd is not None:
            dd = rd.deployments[0]
            out["transition"] = dd.rejection.replace("_", " ")
            out["old_error"] = dd.old.error
            for sd in dd.settings:
                if sd.change == "absent":
                    continue
                changed = sd.change in CHANGES
                still = sd.change == "still_failing" or (changed and getattr(sd, "still_failing", False))
                newly = getattr(sd, "newly_failing", False)
                rows.append({
                    "name": sd.name, "change": "still failing on both" if sd.change == "still_failing" else
                    (f"{sd.change}, newly failing" if newly else sd.change), "changed": changed,
                    # the row's colour: a failure on the new release is the most serious
                    "cls": "finding-error" if (still or newly) else "changed" if changed else
                    "unknown" if sd.change in ("unknown", "rejected") else "ok",
                    "layers": list(sd.layers), "note": sd.note,
                    "old": _pair(sd.old) if sd.old is not None and sd.old.present else "—",
                    "new": _pair(sd.new) if sd.new is not None and sd.new.present else "—",
                    "old_where": self._step_link(sd.old_deciding, base) if base is not None else None,
                    "new_where": self._step_link(sd.new_deciding, self.res),
                    "guards_added": list(sd.guards_added), "guards_removed": list(sd.guards_removed),
                })
            out["predicates"] = [{
                "name": p.name, "change": p.change, "old": fmt(p.old_value) if p.old_definition is not None else "—",
                "new": fmt(p.new_value) if p.new_definition is not None else "—",
                "old_def": p.old_definition or "", "new_def": p.new_definition or "",
                "old_site": p.old_site or "", "new_site": p.new_site or "", "used_by": list(p.used_by),
            } for p in dd.predicates]
            out["flags"] = [{
                "name": f.name, "added": list(f.added), "removed": list(f.removed),
                "default": f"{f.old_default!r} → {f.new_default!r}" if f.default_changed else "",
                "declared": "" if f.old_declared == f.new_declared else ("new in this release" if f.new_declared else "removed"),
            } for f in rd.flags if f.changed]
            out["cond_added"] = [self.rejection(r) for r in dd.conditional_added]
            out["cond_removed"] = [self.rejection(r) for r in dd.conditional_removed]
            out["notes"] = list(rd.notes)
        else:
            # no diff module: compare the two resolutions value by value
            assert base is not None
            names = list(self.res.settings) + [n for n in base.settings if n not in self.res.settings]
            for name in names:
                old, new = base.settings.get(name), self.res.settings.get(name)
                old_present = old is not None and old.present
                new_present = new is not None and new.present
                if not old_present and not new_present:
                    continue
                changed = self.changed(name)[0] if name in self.res.settings else True
                rows.append({
                    "name": name, "change": "changed" if changed else "unchanged", "changed": changed,
                    "cls": "changed" if changed else "ok",
                    "layers": [], "note": "",
                    "old": _pair(old) if old_present else "—", "new": _pair(new) if new_present else "—",
                    "old_where": self._decided(old, base) if old_present else None,
                    "new_where": self._decided(new, self.res) if new_present else None,
                    "guards_added": [], "guards_removed": [],
                })
        out["rows"] = rows
        out["changed"] = sum(1 for r in rows if r["changed"])
        return out

    def _step_link(self, step: ChainStep | None, res: Resolution) -> dict[str, Any] | None:
        if step is None:
            return None
        guard = step.guard if _is_guard(step.guard) else step.guard and f"({step.guard})"
        short_guard = " ".join(guard.split())
        return {"text": f"{step.file}:{step.line}", "url": source_link(res, step.file, step.line),
                # a long guard is clipped in the table; the full text is its tooltip
                "guard": short_guard if len(short_guard) <= MAX_GUARD_CHARS else short_guard[: MAX_GUARD_CHARS - 1] + "…",
                "full_guard": guard, "version": res.source.get("version")}

    def _decided(self, s: Setting | None, res: Resolution) -> dict[str, Any] | None:
        from sglang_audit.analyses.explain import deciding_step

        return self._step_link(deciding_step(s, final_value(s)), res) if s is not None else None

    @staticmethod
    def rejection_text(r: Rejection | None) -> str:
        return f"{r.exception}: {r.message} ({r.file}:{r.line})" if r is not None else ""

    def verdict(self, rows: list[dict[str, Any]], findings: dict[str, Any] | None) -> dict[str, str]:
        """The headline: SGLang's verdict on the flags, and — when it accepts them — whether the
        deployment then works: settings whose layers raise or whose kernel is unsupported, error
        findings.  SGLang accepting the flags alone is not "accepts this configuration"."""
        res = self.res
        if res.rejected is not None:
            return {"cls": "rejected", "text": "SGLang rejects this configuration"}
        layers = [r["name"] for r in rows if r["present"] and "layer" in r["failing"]]
        kernels = [r["name"] for r in rows if r["present"] and "kernel" in r["failing"]]
        other = [r["name"] for r in rows if r["present"] and r["failing"] and not {"layer", "kernel"} & set(r["failing"])]
        errors = findings["counts"]["error"] if findings else 0
        parts = []
        for names, what in ((layers, "fail{s} when the layers are built"), (kernels, "call{s} a kernel unsupported on this device"),
                            (other, "{are} unsupported")):
            if names:
                n = len(names)
                parts.append(f"{n} setting{'s' if n != 1 else ''} " + what.format(s="" if n != 1 else "s", are="are" if n != 1 else "is"))
        if not parts and errors:
            parts.append(f"{errors} known-bad error{'s' if errors != 1 else ''}")
        if parts:
            return {"cls": "finding-error", "text": "SGLang accepts the flags; " + "; ".join(parts)}
        if res.rejections:
            return {"cls": "unknown", "text": "SGLang accepts the flags; it rejects them on some paths (inputs the tool does not know)"}
        return {"cls": "ok", "text": "SGLang accepts this configuration"}

    # whole page --------------------------------------------------------------------------
    def page(self) -> dict[str, Any]:
        res = self.res
        m = res.model
        sections = []
        for name in [*[n for n in PRIMARY if n in res.settings], *[n for n in res.settings if n not in PRIMARY]]:
            s = res.settings[name]
            if s.present:
                sections.append(self.setting_section(name, s))
        absent = [n for n, s in res.settings.items() if not s.present]
        graph = deployment_graph(self.d.explanations[k] for k in PRIMARY if k in self.d.explanations)
        rows = self.settings_rows()
        findings = self.findings()
        base = self.d.base
        return {
            "tool_version": self.d.tool_version, "timestamp": self.d.timestamp,
            "title": f"SGLang {res.source.get('version')} on {self.device} — {m.name}",
            "release": {"version": res.source.get("version"), "origin": res.source.get("origin"),
                        "flashinfer": res.source.get("flashinfer"), "structure": res.structure},
            "base": {"version": base.source.get("version"), "origin": base.source.get("origin"),
                     "flashinfer": base.source.get("flashinfer")} if base is not None else None,
            "device": res.device,
            "cudnn": cudnn_text(res.device).removeprefix(", cuDNN "),
            "driver": driver_text(res.device).removeprefix(", driver "),
            "model": {"name": m.name, "architecture": fmt(m.architecture), "quantization": fmt(m.quantization),
                      "config_quant_method": fmt(m.config_quant_method),
                      "draft_architecture": fmt(m.draft_architecture) if m.draft_architecture is not None else None,
                      "draft_quantization": fmt(m.draft_quantization) if m.draft_architecture is not None else None,
                      "assumptions": list(m.assumptions)},
            "flags": [(k, repr(v) if isinstance(v, str) else str(v)) for k, v in res.flags.items()],
            "env": list(res.env.items()),
            "rejected": self.rejection(res.rejected) if res.rejected is not None else None,
            "rejections": [self.rejection(r) for r in res.rejections],
            "rows": rows,
            "legend": [("ok", "ok"), ("changed", "changed since --from"),
                       ("finding-error", "finding (error), or fails when the layers are built"),
                       ("finding-warning", "finding (warning)"), ("unknown", "unknown"), ("rejected", "rejected")],
            "counts": {
                "findings": len(findings["items"]) if findings else 0,
                "unknown": sum(1 for r in rows if r["present"] and any(b[0] == "unknown" for b in r["badges"])),
                "failing": sum(1 for r in rows if r["present"] and r["failing"]),
                "changed": sum(1 for r in rows if r["present"] and any(b[0] == "changed" for b in r["badges"])),
            },
            "verdict": self.verdict(rows, findings),
            "sections": sections, "absent": absent,
            "findings": findings, "check_note": self.d.check_note,
            "diff": self.diff(),
            "recommend": self.recommendation(),
            "graph": graph,
            "paths": res.paths,
            "analysis_notes": list(res.analysis_notes),
            "logs": [{"where": self.where(x.file, x.line), "level": x.level, "message": x.message}
                     for x in res.logs if x.level in ("warning", "error", "info", "critical")],
            "notes": list(self.d.notes),
        }


def _kernel_view(s: Setting) -> dict[str, Any] | None:
    """The kernel library's declared support for this setting's kernel (kernels.py)."""
    k = s.kernel
    if k is None:
        return None
    return {
        # no layer of the model calls it (Setting.unused): said instead of the library's status
        "status": "not used" if k.unused else k.status,
        "what": (k.function or k.library) + (f" backend {k.backend!r}" if k.backend else ""),
        "library": f"{k.library} {k.version}" if k.version else k.library, "reason": k.unused or k.reason,
        "call_site": k.call_site,
        "layers": [f"{x.mechanism}: {x.function} says {x.says}{'' if x.enforced else ' (declared; not a check the call runs)'}: "
                   f"{x.detail} ({x.file}:{x.line})" for x in k.layers],
        "conditions": list(k.conditions),
    }


def _https(text: str) -> str | None:
    """A plain https URL (published measurements cite one) may be a link; anything else,
    including another scheme, is shown as text only."""
    return text if re.fullmatch(r"https://[A-Za-z0-9.-]+(/[^\s\"'<>`]*)?", text or "") else None


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # a value whose __eq__ misbehaves is not "the same"
        return False


def _pair(s: Setting | None) -> str:
    if s is None:
        return "—"
    if s.runtime is not None and s.runtime != s.config:
        return f"{fmt(s.config)} → runtime {fmt(s.runtime)}"
    return fmt(s.config)


# ---- jinja -------------------------------------------------------------------------------
def environment() -> jinja2.Environment:
    # autoescape on for every template (the names end in .j2, so select_autoescape's
    # extension list would not catch them); StrictUndefined turns a typo into an error
    return jinja2.Environment(
        loader=jinja2.PackageLoader("sglang_audit.render", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )


def render_html(data: ReportData) -> str:
    return environment().get_template("report.html.j2").render(page=_View(data).page())
