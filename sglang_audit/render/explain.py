"""Plain-text and JSON rendering of an ``explain.Explanation`` (reads its data only)."""

from __future__ import annotations

import json

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
    Branch,
    ChoiceOutcome,
    Condition,
    Explanation,
)
from sglang_audit.render.text import (
    describe_step,
    env_line,
    hint_lines,
    model_label,
    unknown_reason,
    value_text,
)
from sglang_audit.result import ChainStep, built_fails, built_what

MAX_OTHER_CONDITIONS = 2  # non-hardware conditions shown per branch before summarising


def render_json(exp: Explanation) -> str:
    return json.dumps(exp.to_json(), indent=2)


def _short(file: str) -> str:
    return file.removeprefix("sglang/srt/")


def _where(step: ChainStep) -> str:
    guard = f" if {step.guard}" if step.guard and step.kind not in ("default", "flag") else f" ({step.guard})" if step.guard else ""
    return f"{step.file}:{step.line}{guard}"


def _pred_text(c: Condition) -> str:
    return ", ".join(f"{n}() = {v}" for n, v in c.predicates)


def _condition_text(c: Condition, device: str, taken: bool = False) -> str:
    want = "true" if c.needed else "false"
    head = f"{_short(c.file)}:{c.line} {c.construct} {c.guard}"
    if c.value is None and taken:
        state = f"{want} in this resolution"
    elif c.value is None:
        state = f"must be {want}; depends on more than the hardware"
    elif c.holds:
        state = f"is {str(c.value).lower()} on {device}"
    else:
        state = f"must be {want}, but is {str(c.value).lower()} on {device}"
    preds = _pred_text(c)
    return f"{head}  — {state}" + (f" ({preds})" if preds else "")


def render_text(exp: Explanation, requested_model: str | None = None) -> str:
    """``requested_model``: the model as the user named it (-m), when known."""
    res = exp.resolution
    dev = res.device
    device = str(dev.get("arch"))
    out: list[str] = []
    m = res.model
    out.append(f"SGLang {res.source.get('version')} — explain {exp.field}")
    out.append(f"device: {dev['arch']} {dev['name']}" + (f", CUDA {dev['cuda']}" if dev.get("cuda") else "")
               + f"; model: {model_label(m, requested_model)} ({value_text(m.architecture)}, quantization {value_text(m.quantization, unknown_reason(m.architecture))})")
    if res.flags:
        out.append("flags: " + " ".join(f"{k}={v}" for k, v in res.flags.items()))
    env = env_line(res)
    if env:
        out.append(env)
    out.append("")
    _resolved(exp, out, device)
    if exp.choices:
        out.append("")
        src = "choices declared by the release" if exp.choices_source == "release" else "values the release's code writes (no declared choices)"
        out.append(f"If you force it ({src}):")
        width = max(len(c.choice) for c in exp.choices)
        base = exp.resolution.rejected
        if base is not None and all(c.rejection is not None and (c.rejection.message, c.rejection.file, c.rejection.line)
                                    == (base.message, base.file, base.line) for c in exp.choices):
            # the rejection does not depend on this field: say so once
            out.append(f"  every choice ({', '.join(c.choice for c in exp.choices)}) is rejected the same way")
        else:
            for c in exp.choices:
                out.extend(_choice_lines(c, width, device))
            # said once, after every choice it explains (the base's is said under Resolved)
            out.extend(hint_lines([r for c in exp.choices for r in (c.rejection, *c.conditional)],
                                  said=[res.rejected, *res.rejections]))
    out.append("")
    _branch_section(exp, out, device)
    if exp.notes:
        out.append("")
        out.append("notes:")
        out.extend(f"  - {n}" for n in exp.notes)
    return "\n".join(out) + "\n"


def _resolved(exp: Explanation, out: list[str], device: str) -> None:
    res, s = exp.resolution, exp.setting
    if res.rejected is not None:
        r = res.rejected
        out.append(f"Resolved: the configuration is REJECTED by SGLang: {r.exception}: {r.message}")
        out.append(f"  at {r.file}:{r.line}")
        out.extend(hint_lines([r]))
        return
    if not s.present:
        out.append(f"Resolved: this release has no {exp.field} setting")
        return
    rt = ""
    if s.runtime is not None and s.runtime != s.config:
        rt = f" → runtime {value_text(s.runtime)}"
    out.append(f"Resolved: {exp.field} = {value_text(s.config)}{rt}  ({s.status})" + (f"  [{s.note}]" if s.note else ""))
    if exp.user_set:
        if exp.overridden:
            out.append(f"  OVERRIDDEN: you set {exp.user_value!r}; SGLang rewrote it" + (f" at {_where(exp.deciding)}" if exp.deciding else ""))
        else:
            out.append(f"  you set {exp.user_value!r}")
    if exp.deciding is not None:
        d = exp.deciding
        if d.kind == "default":
            out.append(f"  the declared default ({d.file}:{d.line}); no branch changed it here")
        elif d.kind == "flag":
            out.append(f"  your flag, kept as set ({d.file}:{d.line})")
        else:
            out.append(f"  decided at {d.file}:{d.line}  {d.code}")
            for c in exp.reason:
                out.append(f"    because {_condition_text(c, device, taken=True)}")
    out.append("  chain:")
    for step in s.chain:
        out.append(f"    {step.layer:7} {describe_step(step)}")
    for r in res.rejections:
        out.append(f"  rejected when {' and '.join(r.when)}: {r.exception}: {r.message} ({r.file}:{r.line})")
    out.extend(hint_lines(res.rejections))


def _choice_lines(c: ChoiceOutcome, width: int, device: str) -> list[str]:
    pad = f"  {c.choice:{width}}  "
    if c.outcome == OUTCOME_REJECTED and c.rejection is not None:
        r = c.rejection
        return [f"{pad}REJECTED  {r.exception}: {_clip(r.message)}", f"  {'':{width}}    at {r.file}:{r.line}"]
    if c.outcome in (OUTCOME_ACCEPTED, OUTCOME_KNOWN_BAD):
        rt = f" (runtime {value_text(c.runtime)})" if c.runtime is not None and c.runtime != c.config else ""
        bad = ", ".join(f"{r} ({sev}: {title})" for r, sev, title in c.known_bad)
        lines = [f"{pad}accepted by SGLang, but known-bad: {bad}{rt}" if bad else f"{pad}accepted{rt}"]
        if c.note:  # e.g. what its MoE layers do cannot be told
            lines.append(f"  {'':{width}}    {_clip(c.note, 240)}")
    elif c.outcome == OUTCOME_REWRITTEN:
        final = c.config if c.layer == "config" else c.runtime
        label = "OVERRIDDEN" if c.overridden else "resolved"
        lines = [f"{pad}{label} → {value_text(final)} ({c.layer})" + (f" at {_where(c.where)}" if c.where else "")]
        for cond in c.reason:
            if cond.predicates:
                lines.append(f"  {'':{width}}    because {_condition_text(cond, device, taken=True)}")
    elif c.outcome == OUTCOME_LAYERS_FAIL:
        # the stage that failed, as the resolve output names it (the attention stage builds
        # a backend, the speculative stage a worker, not MoE layers)
        built, verb = built_fails(c.stage)
        what = f"{built} built with it {verb}"
        lines = [f"{pad}accepted by SGLang, but {what}: {_clip(c.note, 240)}"]
    else:
        lines = [f"{pad}unknown: {_clip(c.note) or 'no reason recorded'}"]
    for name, stage, failure in c.also_fails:
        built, verb = built_fails(stage)
        lines.append(f"  {'':{width}}    with it, {built} ({name}) {verb}: {_clip(failure, 240)}")
    for name, stage, reason in c.also_unknown:
        lines.append(f"  {'':{width}}    with it, {built_what(stage)} ({name}) cannot be told: {_clip(reason, 200)}")
    if c.known_bad and c.outcome != OUTCOME_KNOWN_BAD:
        lines.append(f"  {'':{width}}    known-bad: " + ", ".join(f"{r} ({sev}: {title})" for r, sev, title in c.known_bad))
    if c.kernel is not None:
        k = c.kernel
        what = f" {k.function or k.library}" + (f" backend {k.backend!r}" if k.backend else "")
        said = f"not used:{what} — {_clip(k.unused, 240)}" if k.unused else f"{k.status}:{what} — {_clip(k.reason, 240)}"
        lines.append(f"  {'':{width}}    kernel {said}")
    for r in c.conditional:
        lines.append(f"  {'':{width}}    rejected when {' and '.join(r.when)}: {r.exception}: {_clip(r.message)} ({r.file}:{r.line})")
    return lines


def _clip(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


_MARK = {BRANCH_FIRED: "✓ fired    ", BRANCH_REACHED: "◦ reached  ", BRANCH_NOT_TAKEN: "· not taken", BRANCH_BLOCKED: "✗ blocked  "}


def _branch_section(exp: Explanation, out: list[str], device: str) -> None:
    if not exp.branches:
        out.append(f"No guarded branch in the analysed files writes {exp.field}.")
        return
    out.append(f"Branches in the code that pick {exp.field} ({len(exp.branches)}):")
    order = {BRANCH_FIRED: 0, BRANCH_REACHED: 1, BRANCH_NOT_TAKEN: 2, BRANCH_BLOCKED: 3}
    for b in sorted(exp.branches, key=lambda b: (order[b.status], not b.applies_to_model, b.file, b.line)):
        out.extend(_branch_lines(b, device))


def _branch_lines(b: Branch, device: str) -> list[str]:
    value = repr(b.value) if b.constant else b.value_text
    tag = "  [this model's architecture]" if b.applies_to_model else ""
    lines = [f"  {_MARK[b.status]}  {_short(b.file)}:{b.line} → {value}  ({b.layer}){tag}"]
    if b.status == BRANCH_REACHED:
        lines.append("        its statement ran here; which arm gave the value is not recorded")
    if b.status == BRANCH_BLOCKED:
        picked = set(map(id, b.blocked_by))
    else:
        picked = {id(c) for c in b.conditions if c.predicates or (c.mentions_model and c.needed)}
        others = [c for c in b.undecided if id(c) not in picked]
        picked |= {id(c) for c in others[-MAX_OTHER_CONDITIONS:]}  # the innermost guards say most
    shown = [c for c in b.conditions if id(c) in picked]  # in path order, outermost first
    for c in shown:
        # an arm's own condition is not known to have held when only its statement ran
        taken = b.status == BRANCH_FIRED or b.status == BRANCH_REACHED and c.construct != "ifexp"
        lines.append(f"        {_condition_text(c, device, taken=taken)}")
    hidden = len(b.conditions) - len(shown)
    if hidden > 0:
        lines.append(f"        (+{hidden} more condition{'s' if hidden > 1 else ''} on its path; see --format json)")
    return lines
