"""Text and JSON rendering of a ``diff.ReleaseDiff`` (reads its data only)."""

from __future__ import annotations

import json
from typing import Any

from sglang_audit.analyses.diff import (
    CHANGE_ABSENT,
    CHANGE_ADDED,
    CHANGE_CHANGED,
    CHANGE_REJECTED,
    CHANGE_REMOVED,
    CHANGE_STILL_FAILING,
    CHANGE_UNCHANGED,
    CHANGE_UNKNOWN,
    LEVEL_FINDINGS,
    LEVEL_LAYER,
    REJ_BECOMES,
    REJ_NO_LONGER,
    REJ_UNKNOWN,
    STATE_ACCEPTED,
    STATE_CONDITIONAL,
    STATE_REJECTED,
    STATUS_CHANGED,
    STATUS_STILL_FAILING,
    STATUS_UNKNOWN,
    VALUE_CHANGES,
    VALUE_LEVELS,
    DeploymentDiff,
    FlagDiff,
    ReleaseDiff,
    ReleaseInfo,
    SettingDiff,
    SideOutcome,
)
from sglang_audit.render.text import value_text
from sglang_audit.result import ChainStep, LayerValue, Setting, UnknownValue, agreeing

_CELL = {
    CHANGE_UNCHANGED: "=", CHANGE_CHANGED: "CHANGED", CHANGE_UNKNOWN: "unknown",
    CHANGE_ADDED: "added", CHANGE_REMOVED: "removed", CHANGE_REJECTED: "-", CHANGE_ABSENT: "",
    CHANGE_STILL_FAILING: "failing",
}


def render_json(diff: ReleaseDiff, fail_on: str = "changed") -> str:
    return json.dumps(diff.to_json(fail_on), indent=2, default=str)


def _labels(diff: ReleaseDiff) -> tuple[str, str]:
    a, b = diff.old.label, diff.new.label
    # a release against itself: name the sides by role, not by the same version twice
    return (a, b) if a != b else (f"from {a}", f"to {b}")


def _where(step: ChainStep) -> str:
    guard = f" if {step.guard}" if step.guard and step.kind not in ("default", "flag") else f" ({step.guard})" if step.guard else ""
    return f"{step.file}:{step.line}{guard}"


def _values(s: Setting | None) -> str:
    if s is None or not s.present:
        return "(no such setting)"
    rt = ""
    if s.runtime is not None and s.runtime != s.config:
        rt = f" → runtime {value_text(s.runtime)}"
    note = f"  [{s.note}]" if s.note else ""
    return f"{value_text(s.config)}{rt}  ({s.status}){note}"


def _chain_lines(s: Setting | None, deciding: ChainStep | None, indent: str, full: bool) -> list[str]:
    if s is None or not s.present:
        return []
    out: list[str] = []
    for step in s.chain:
        if step.kind == "default" and not full and step is not deciding:
            continue
        mark = "* " if step is deciding else "  "
        tail = "   <- decides" if step is deciding else ""
        out.append(f"{indent}{mark}{step.layer:7} {_where(step)} → {step.value!r}{tail}")
    if not out and deciding is None:
        out.append(f"{indent}  (no recorded decision)")
    return out


def _rejection_lines(side: SideOutcome, label: str, indent: str) -> list[str]:
    if side.error:
        return [f"{indent}{label}: its argument parser refuses the flags: {side.error}"]
    res = side.resolution
    if res is None or res.rejected is None:
        return []
    r = res.rejected
    code = f"  [{r.code}]" if r.code else ""
    return [f"{indent}{label}: {r.exception}: {r.message}", f"{indent}  at {r.file}:{r.line}{code}"]


def _failing_what(s: Setting | None, levels: tuple[str, ...]) -> str:
    """What fails, in words: the layers' raise (and where), the kernel library's verdict."""
    if s is None:
        return ", ".join(levels)
    parts: list[str] = []
    layer = s.layer
    if LEVEL_LAYER in levels and isinstance(layer, LayerValue):
        failing = layer if layer.status == "unsupported" else layer.draft
        what = "the draft's attention backend" if failing is not layer else layer.what
        assert isinstance(failing, LayerValue)
        at = f" at {failing.site}" if failing.site else ""
        parts.append(f"{what} built with it {agreeing(what, 'raise')} {failing.value}{at}")
    if "kernel" in levels and s.kernel is not None:
        k = s.kernel
        what = (k.function or k.library) + (f" backend {k.backend!r}" if k.backend else "")
        parts.append(f"kernel {what} unsupported: {k.reason}")
    if "status" in levels:
        parts.append(f"status {s.status}" + (f": {s.note}" if s.note else ""))
    return "; ".join(parts)


def _layer_line(s: Setting | None) -> str:
    layer = s.layer if s is not None else None
    if isinstance(layer, UnknownValue):
        return f"layer unknown: {layer.reason}"
    if not isinstance(layer, LayerValue):
        return "layer: (no layer outcome)"
    if layer.status == "unknown":
        return f"layer unknown: {layer.reason}"
    how = ", ".join(x for x in (layer.method, f"runner {layer.runner}" if layer.runner else "") if x)
    at = f" at {layer.site}" if layer.site else ""
    draft = f"; draft {layer.draft.status}: {layer.draft.value}" if isinstance(layer.draft, LayerValue) else ""
    return f"layer {layer.status}: {layer.value}{at}" + (f" ({how})" if how else "") + draft


def _failing_summary(d: DeploymentDiff, labels: tuple[str, str]) -> list[str]:
    """The settings that fail when the model is built, on both sides / the new side only /
    the old side only: SGLang accepting the flags is not the deployment working."""
    both = [s for s in d.settings if s.still_failing]
    new = [s for s in d.settings if s.new_failing and not s.old_failing]
    gone = [s for s in d.settings if s.old_failing and not s.new_failing]

    def names(items: list[SettingDiff], side: str) -> str:
        return ", ".join(f"{s.name} ({', '.join(getattr(s, side))})" for s in items)

    out = []
    if both:
        out.append(f"  still failing on both: {names(both, 'new_failing')}")
    if new:
        word = "newly failing" if all(s.newly_failing for s in new) else "failing"
        out.append(f"  {word} in {labels[1]}: {names(new, 'new_failing')}")
    if gone:
        out.append(f"  no longer failing in {labels[1]}: {names(gone, 'old_failing')}")
    return out


def _state_text(d: DeploymentDiff) -> str:
    if d.rejection == REJ_BECOMES:
        return "BECOMES REJECTED"
    if d.rejection == REJ_NO_LONGER:
        return "no longer rejected"
    if d.rejection == REJ_UNKNOWN:
        return "unknown"
    return {STATE_ACCEPTED: "accepted", STATE_REJECTED: "still rejected", STATE_CONDITIONAL: "conditional"}[d.new.state]


def _configuration_text(d: DeploymentDiff, labels: tuple[str, str]) -> str:
    """The configuration line: SGLang's verdict on the flags, and whether settings then fail
    when the model is built (an accepted configuration whose layers raise is not all-clear)."""
    state = _state_text(d)
    failing = [s for s in d.settings if s.new_failing]
    if not failing or d.new.state == STATE_REJECTED:
        return state
    n = len(failing)
    when = "on both releases" if all(s.still_failing for s in failing) else f"with {labels[1]}"
    return (f"{state} by SGLang's argument checks, but {n} setting{'s' if n != 1 else ''} "
            f"fail{'s' if n == 1 else ''} when the model is built {when}")


def _status_text(status: str) -> str:
    return status.replace("_", " ")


def _setting_block(sd: SettingDiff, labels: tuple[str, str], width: int, verbose: bool) -> list[str]:
    out: list[str] = []
    name = f"{sd.name:{width}}"
    if sd.change in (CHANGE_UNCHANGED, CHANGE_STILL_FAILING) and not verbose:
        where = ""
        if sd.old_deciding and sd.new_deciding:
            a, b = sd.old_deciding, sd.new_deciding
            where = f"  ({a.file}:{a.line} → {b.file}:{b.line})" if (a.file, a.line) != (b.file, b.line) else f"  ({a.file}:{a.line})"
        head = "STILL FAILING on both" if sd.change == CHANGE_STILL_FAILING else "unchanged"
        out.append(f"  {name}  {head}  {_values(sd.new)}{where}")
        if sd.change == CHANGE_STILL_FAILING:
            out.append(f"      fails on both: {_failing_what(sd.new, sd.new_failing)}")
    else:
        head = {CHANGE_CHANGED: "CHANGED", CHANGE_ADDED: "ADDED", CHANGE_REMOVED: "REMOVED",
                CHANGE_UNKNOWN: "UNKNOWN", CHANGE_UNCHANGED: "unchanged",
                CHANGE_STILL_FAILING: "STILL FAILING on both"}[sd.change]
        layers = f" ({', '.join(sd.layers)})" if sd.layers else ""
        if sd.newly_failing:
            layers += f", NEWLY FAILING in {labels[1]}"
        note = f"  [{sd.note}]" if sd.note else ""
        out.append(f"  {name}  {head}{layers}{note}")
        lw = max(len(x) for x in labels)
        show_layer = LEVEL_LAYER in sd.layers or LEVEL_LAYER in sd.unknown_levels
        for label, s, dec, failing in ((labels[0], sd.old, sd.old_deciding, sd.old_failing),
                                       (labels[1], sd.new, sd.new_deciding, sd.new_failing)):
            out.append(f"      {label:{lw}}  {_values(s)}")
            if show_layer and s is not None and s.present:
                out.append(f"        {_layer_line(s)}")
            elif failing:
                out.append(f"        fails: {_failing_what(s, failing)}")
            out.extend(_chain_lines(s, dec, "        ", verbose))
    ko, kn = (sd.old.kernel if sd.old else None), (sd.new.kernel if sd.new else None)
    if ko is not None and kn is not None and ko.status != kn.status:
        out.append(f"      kernel {ko.status} (flashinfer {ko.version}) → {kn.status} (flashinfer {kn.version}): {kn.reason}")
    for title, items in (("guards removed", sd.guards_removed), ("guards added", sd.guards_added)):
        for g in items:
            out.append(f"      {title}: {g}")
    return out


def _predicate_lines(d: DeploymentDiff, labels: tuple[str, str]) -> list[str]:
    out: list[str] = []
    for p in d.predicates:
        used = f"  — used here by {', '.join(p.used_by)}" if p.used_by else ""
        if p.change == "added":
            out.append(f"  {p.name}: new in {labels[1]}: {p.new_definition} = {p.new_value}  ({p.new_site}){used}")
        elif p.change == "removed":
            out.append(f"  {p.name}: gone in {labels[1]} (was {p.old_definition} = {p.old_value}, {p.old_site}){used}")
        else:
            out.append(f"  {p.name}: {p.change} changed{used}")
            if p.old_definition != p.new_definition:
                out.append(f"      {labels[0]}: {p.old_definition}  ({p.old_site})")
                out.append(f"      {labels[1]}: {p.new_definition}  ({p.new_site})")
            out.append(f"      on this device: {p.old_value} → {p.new_value}")
    return out


def _deployment_block(d: DeploymentDiff, labels: tuple[str, str], verbose: bool) -> list[str]:
    dep = d.deployment
    title = dep.label() if not dep.name else f"{dep.name} ({dep.arch}, {dep.model or 'model from launch'}{', ' if dep.sets else ''}{' '.join(dep.sets)})"
    out = [f"== {title}: {_status_text(d.status).upper()} =="]
    res = d.new.resolution or d.old.resolution
    if res is not None:
        dev = res.device
        out.append(f"device: {dev['arch']} {dev['name']}" + (f", CUDA {dev['cuda']}" if dev.get("cuda") else "")
                   + f"; model: {res.model.name}" + (f"; flags: {' '.join(f'{k}={v}' for k, v in res.flags.items())}" if res.flags else ""))
        if dep.env:
            out.append(f"env: {' '.join(dep.env)}")
    out.append(f"configuration: {_configuration_text(d, labels)}")
    out.extend(_failing_summary(d, labels))
    if d.old.state == STATE_REJECTED or d.new.state == STATE_REJECTED:
        out.extend(_rejection_lines(d.old, labels[0], "  "))
        out.extend(_rejection_lines(d.new, labels[1], "  "))
    for r in d.conditional_added:
        out.append(f"  new in {labels[1]}: rejected when {' and '.join(r.when) or 'some inputs'}: {r.exception}: {r.message} ({r.file}:{r.line})")
    for r in d.conditional_removed:
        out.append(f"  gone in {labels[1]}: rejected when {' and '.join(r.when) or 'some inputs'}: {r.exception}: {r.message} ({r.file}:{r.line})")
    for title, items in ((f"new in {labels[1]}", d.findings_added), (f"gone in {labels[1]}", d.findings_removed)):
        for f in items:
            code = next((f"  ({c.file}:{c.line})" for c in f.code if c.found and c.line), "")
            out.append(f"  known-bad {title}: {f.severity.upper()} {f.rule_id} {f.slug}: {f.message}{code}")
    shown = [s for s in d.settings if s.change not in (CHANGE_ABSENT, CHANGE_REJECTED)]
    if shown:
        out.append("")
        out.append("settings:")
        width = max(len(s.name) for s in shown)
        # changes first, so the answer is at the top
        order = {CHANGE_CHANGED: 0, CHANGE_ADDED: 0, CHANGE_REMOVED: 0, CHANGE_STILL_FAILING: 1, CHANGE_UNKNOWN: 2,
                 CHANGE_UNCHANGED: 3}
        for sd in sorted(shown, key=lambda s: order[s.change]):
            out.extend(_setting_block(sd, labels, width, verbose))
    elif d.old.state == STATE_REJECTED and d.new.state == STATE_REJECTED:
        out.append("settings: not compared (both releases reject the configuration)")
    else:
        # one release rejects: what the other one picks is still worth seeing
        new_side = d.old.state == STATE_REJECTED
        label, other = (labels[1], labels[0]) if new_side else (labels[0], labels[1])
        kept = [(s.name, s.new if new_side else s.old, s.new_deciding if new_side else s.old_deciding) for s in d.settings]
        kept = [(n, s, dec) for n, s, dec in kept if s is not None and s.present]
        out.append("")
        out.append(f"settings ({label} only; {other} rejects the configuration):")
        width = max((len(n) for n, _s, _d in kept), default=10)
        for name, s, dec in kept:
            where = f"  ({dec.file}:{dec.line})" if dec is not None else ""
            out.append(f"  {name:{width}}  {_values(s)}{where}")
            if verbose:
                out.extend(_chain_lines(s, dec, "        ", True))
    preds = _predicate_lines(d, labels)
    if preds:
        out.append("")
        out.append("hardware predicates (interpreted from each release for this device):")
        out.extend(preds)
    return out


def _default_text(v: Any, declared: bool) -> str:
    return repr(v) if declared else "(no such field)"


def _flag_lines(f: FlagDiff, labels: tuple[str, str]) -> list[str]:
    out: list[str] = []
    if f.old_declared != f.new_declared:
        out.append(f"  {f.name}: {'new field' if f.new_declared else 'field removed'} in {labels[1]}")
    if f.choices_changed:
        if f.old_choices is None or f.new_choices is None:
            a = ", ".join(f.old_choices) if f.old_choices is not None else "not declared"
            b = ", ".join(f.new_choices) if f.new_choices is not None else "not declared"
            out.append(f"  {f.name} choices: {labels[0]}: {a}; {labels[1]}: {b}")
        else:
            parts = [f"+{c}" for c in f.added] + [f"-{c}" for c in f.removed]
            out.append(f"  {f.name} choices: {' '.join(parts)}")
    if f.default_changed:
        out.append(f"  {f.name} default: {_default_text(f.old_default, f.old_declared)} → {_default_text(f.new_default, f.new_declared)}")
    return out


def _summary_table(diff: ReleaseDiff) -> list[str]:
    cols = [name for name in _setting_names(diff)
            if any(s.name == name and s.change not in (CHANGE_UNCHANGED, CHANGE_ABSENT, CHANGE_REJECTED)
                   for d in diff.deployments for s in d.settings)]
    header = ["deployment", "result", "configuration", "known-bad", *cols]
    rows = [header]
    for d in diff.deployments:
        cells = {s.name: _CELL[s.change] for s in d.settings}
        kb = " ".join([*(f"+{f.rule_id}" for f in d.findings_added), *(f"-{f.rule_id}" for f in d.findings_removed)])
        status = _status_text(d.status)
        rows.append([d.deployment.label(), status.upper() if d.status in (STATUS_CHANGED, STATUS_STILL_FAILING) else status,
                     _state_text(d), kb, *(cells.get(c, "") for c in cols)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    if not cols:
        out.append("(no setting changed in any deployment)")
    return out


def _setting_names(diff: ReleaseDiff) -> list[str]:
    names: list[str] = []
    for d in diff.deployments:
        for s in d.settings:
            if s.name not in names:
                names.append(s.name)
    return names


def render_text(diff: ReleaseDiff, verbose: bool = False, fail_on: str = "changed") -> str:
    labels = _labels(diff)
    old, new = diff.old, diff.new
    out = [f"SGLang {_origin(old)} → {_origin(new)}"]
    fi = f"{old.flashinfer} → {new.flashinfer}" if diff.flashinfer_changed else f"{new.flashinfer} (unchanged)"
    out.append(f"pinned flashinfer_python: {fi}")
    for d in diff.deployments:
        out.append("")
        out.extend(_deployment_block(d, labels, verbose))
    flag_lines = [line for f in diff.flags for line in _flag_lines(f, labels)]
    out.append("")
    out.append(f"declared choices and defaults ({labels[0]} → {labels[1]}):")
    out.extend(flag_lines or ["  no change for these settings"])
    for note in diff.notes:
        out.append(f"note: {note}")
    if diff.from_file or len(diff.deployments) > 1:
        out.append("")
        out.append(f"summary ({labels[0]} → {labels[1]}):")
        out.extend(_summary_table(diff))
    out.append("")
    out.append(_verdict(diff, fail_on))
    return "\n".join(out) + "\n"


def _origin(rel: ReleaseInfo) -> str:
    # "0.5.12", or "0.0.1 (path/to/checkout)" when the origin says more than the version
    if rel.version and rel.origin in (f"sglang=={rel.version}", rel.version):
        return rel.version
    return f"{rel.label} ({rel.origin})" if rel.version else rel.origin


def _change_item(s: SettingDiff, labels: tuple[str, str]) -> str:
    """A changed setting in the result line: its name, and what changed beyond its values."""
    if s.newly_failing:
        return f"{s.name} newly fails in {labels[1]} ({', '.join(s.new_failing)})"
    if s.old_failing and not s.new_failing:
        return f"{s.name} no longer fails ({', '.join(s.old_failing)})"
    # the findings are listed after the settings (known-bad +/-)
    beyond = [x for x in s.layers if x not in (*VALUE_LEVELS, LEVEL_FINDINGS)]
    return f"{s.name} ({', '.join(beyond)})" if beyond else s.name


def _verdict(diff: ReleaseDiff, fail_on: str) -> str:
    labels = _labels(diff)
    changed = [d for d in diff.deployments if d.status == STATUS_CHANGED]
    unknown = [d for d in diff.deployments if d.status == STATUS_UNKNOWN]
    failing = [d for d in diff.deployments if d.still_failing]
    n = len(diff.deployments)
    parts = []
    if changed:
        what = []
        for d in changed:
            items = [_change_item(s, labels) for s in d.settings if s.change in VALUE_CHANGES]
            if d.rejection in (REJ_BECOMES, REJ_NO_LONGER):
                items.insert(0, _state_text(d))
            items += [f"known-bad +{f.rule_id}" for f in d.findings_added]
            items += [f"known-bad -{f.rule_id}" for f in d.findings_removed]
            what.append(f"{d.deployment.label()}: {', '.join(items)}" if n > 1 else ", ".join(items))
        parts.append(f"CHANGED for {len(changed)} of {n} deployment{'s' if n > 1 else ''} — " + "; ".join(what))
    if failing:
        what = []
        for d in failing:
            items = ["rejected by both"] if d.still_rejected else []
            items += [f"{s.name} ({', '.join(s.new_failing)})" for s in d.settings if s.still_failing]
            what.append(f"{d.deployment.label()}: {', '.join(items)}" if n > 1 else ", ".join(items))
        lead = "" if changed else f"nothing changed for {'these deployments' if n > 1 else 'this deployment'}, but "
        parts.append(f"{lead}STILL FAILING on both releases for {len(failing)} of {n} — " + "; ".join(what))
    if unknown:
        parts.append(f"unknown for {len(unknown)} of {n} (a value or outcome cannot be stated on one side)")
    if not parts:
        parts.append(f"nothing changed for {'these deployments' if n > 1 else 'this deployment'}")
    return "result: " + "; ".join(parts) + f"  [exit {diff.exit_code(fail_on)} with --fail-on {fail_on}]"
