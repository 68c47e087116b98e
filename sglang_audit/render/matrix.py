"""Rendering of a ``matrix.Matrix``: text table, JSON, CSV and a self-contained HTML page.

Reads result data only (``matrix.Matrix``/``CaseResult``); every renderer lists the cases
in plan order (arch, then model, then flag set), so the output is the same whatever the
parallelism.  Values from the analysed source (messages, guards) are escaped in HTML.
"""

from __future__ import annotations

import csv
import html
import io
import json
import textwrap
from collections import Counter
from typing import Any

from sglang_audit import __version__
from sglang_audit.analyses.matrix import (
    STATUS_ERROR,
    STATUS_SKIPPED,
    CaseResult,
    Column,
    HintUse,
    Matrix,
    cell_text,
    hint_for,
    hint_uses,
    unknown_reasons,
    value_text,
)
from sglang_audit.inputs.device import DEFAULT_DRIVER
from sglang_audit.result import STATUS_REJECTED, STATUS_UNKNOWN, UnknownValue

JSON_SCHEMA = "sglang-audit-matrix/1"
HINT_WIDTH = 100  # columns of a rejection hint's explanation
MAX_MESSAGE = 160  # rejection messages are clipped in the text table's footnotes
_MARK = {"error": "!", "warning": "~", "info": "~"}
LEGEND = (
    "marks: A→B config value A, runtime value B;  ! error finding on this setting;  "
    "~ warning/info finding;  ?(a|b) unknown value with its candidates, [U1] why;  "
    "RULE? a rule left undecided by an unknown;  n/a the release has no such setting"
)


def _clip(text: str, limit: int = MAX_MESSAGE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Notes:
    """Numbered footnotes, in case order: rejection sites (R1 ...), errors and skipped
    flag sets (E1 ...), reasons a value is unknown (U1 ...)."""

    def __init__(self, m: Matrix) -> None:
        self.rejections: dict[tuple[str, int, str], str] = {}
        self.errors: dict[str, str] = {}
        self.unknowns: dict[str, str] = {}
        for r in m.results:
            if r.rejected is not None:
                key = (r.rejected.file, r.rejected.line, r.rejected.message)
                self.rejections.setdefault(key, f"R{len(self.rejections) + 1}")
            if r.error is not None:
                self.errors.setdefault(r.error, f"E{len(self.errors) + 1}")
            if r.rejected is None and r.error is None:
                for c in r.cells:
                    for reason in unknown_reasons(c):
                        self.unknowns.setdefault(reason, f"U{len(self.unknowns) + 1}")

    def unknown_tags(self, r: CaseResult, i: int) -> str:
        tags = dict.fromkeys(self.unknowns[x] for x in unknown_reasons(r.cells[i]))
        return "[" + ",".join(tags) + "]" if tags else ""


def _marks(r: CaseResult, setting: str) -> str:
    sev = {f.severity for f in r.findings if f.setting == setting and f.rule != "SGA001"}
    return "!" if "error" in sev else "~" if sev else ""


def _findings_text(r: CaseResult) -> str:
    parts = [f"{f.rule}{_MARK.get(f.severity, '')}" for f in r.findings if f.rule != "SGA001"]
    parts = list(dict.fromkeys(parts))
    parts += [f"{u}?" for u in r.undecided]
    return ",".join(parts) if parts else "-"


def _row_cells(r: CaseResult, m: Matrix, notes: _Notes) -> list[str]:
    if r.status in (STATUS_ERROR, STATUS_SKIPPED):
        label = "ERROR" if r.status == STATUS_ERROR else "SKIPPED"
        return [f"{label} [{notes.errors[r.error or '']}]"] + ["-"] * (len(m.columns) - 1) + ["-"]
    if r.rejected is not None:
        tag = notes.rejections[(r.rejected.file, r.rejected.line, r.rejected.message)]
        return [f"REJECTED [{tag}]"] + ["-"] * (len(m.columns) - 1) + [_findings_text(r)]
    cells = [cell_text(c, col) + notes.unknown_tags(r, i) + _marks(r, c.setting)
             for i, (c, col) in enumerate(zip(r.cells, m.columns, strict=True))]
    return cells + [_findings_text(r)]


def summary(m: Matrix) -> dict[str, int]:
    counts = Counter(r.status for r in m.results)
    return {
        "cases": len(m.results),
        "resolved": counts.get("resolved", 0),
        "unknown": counts.get(STATUS_UNKNOWN, 0),
        "rejected": counts.get(STATUS_REJECTED, 0),
        "error": counts.get(STATUS_ERROR, 0),
        "skipped": counts.get(STATUS_SKIPPED, 0),
        "with_findings": sum(1 for r in m.results if any(f.rule != "SGA001" for f in r.findings)),
        "with_undecided_rules": sum(1 for r in m.results if r.undecided),
    }


def _header(m: Matrix) -> str:
    src = m.source
    n = len(m.results)
    cudnn = f", cuDNN {m.cudnn}" if m.cudnn else ""
    driver = f", driver {m.driver}" if m.driver else f", driver {DEFAULT_DRIVER} (assumed; --driver sets it)"
    return (f"SGLang {src.get('version')} (flashinfer {src.get('flashinfer')}) · CUDA {m.cuda}{driver}{cudnn} · "
            f"{n} cases: {len(m.archs)} archs × {len(m.models)} models × {len(m.flag_sets)} flag sets · "
            f"{m.rules_note}")


def _hint_tags(use: HintUse, notes: _Notes) -> list[str]:
    return list(dict.fromkeys(
        notes.rejections[(r.rejected.file, r.rejected.line, r.rejected.message)] for r in use.cases if r.rejected
    ))


def _hint_lines(m: Matrix, notes: _Notes) -> tuple[list[str], list[str]]:
    """A one-line note for the top and the full hint for the rejections section, once per
    hint however many cases it explains (the rows keep their REJECTED cells)."""
    top: list[str] = []
    full: list[str] = []
    for use in hint_uses(m):
        n = len(use.cases)
        tags = ",".join(_hint_tags(use, notes))
        cases = f"{n} case{'s' if n != 1 else ''}"
        top.append(f"note: {cases} rejected by SGLang [{tags}] need `{use.hint.advice()}` on this release "
                   f"(see below)")
        full.append(f"how to get past [{tags}] ({cases}; flag sets {', '.join(use.flag_sets)}; "
                    f"model{'s' if len(use.models) != 1 else ''} {', '.join(use.models)}):")
        # the explanation is prose: wrapped, not one 300-column line
        full.extend(textwrap.wrap(f"rerun with {use.hint.advice()}: {use.hint.why}", HINT_WIDTH,
                                  initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False))
        if use.hint.alternative:
            full.extend(textwrap.wrap(use.hint.alternative, HINT_WIDTH, initial_indent="  ",
                                      subsequent_indent="    ", break_on_hyphens=False))
    return top, full


def render_text(m: Matrix) -> str:
    notes = _Notes(m)
    rej, err = notes.rejections, notes.errors
    hint_top, hint_full = _hint_lines(m, notes)
    head = ["arch", "model", "flags", *[c.title for c in m.columns], "findings"]
    rows = [[r.case.arch, r.case.model, r.case.flag_set, *_row_cells(r, m, notes)] for r in m.results]
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [_header(m), *hint_top, "", line(head), line(["-" * w for w in widths])]
    prev_arch = None
    for row in rows:
        if prev_arch is not None and row[0] != prev_arch:
            out.append("")
        prev_arch = row[0]
        out.append(line(row))
    out.append("")
    out.append("flag sets:")
    w = max((len(fs.name) for fs in m.flag_sets), default=4)
    out.extend(f"  {fs.name:{w}}  {fs.label()}" for fs in m.flag_sets)
    defaults = {k: v for k, v in m.model_sets.items() if v}
    if defaults:
        out.append("model defaults (before the flag set): " + "; ".join(f"{k}: {' '.join(v)}" for k, v in defaults.items()))
    if m.common_sets:
        out.append("every case (after the flag set): " + " ".join(m.common_sets))
    if rej:
        counts = Counter((r.rejected.file, r.rejected.line, r.rejected.message) for r in m.results if r.rejected)
        out.append("")
        out.append("rejected by SGLang:")
        for key, tag in rej.items():
            file, lineno, message = key
            out.append(f"  [{tag}] {file}:{lineno}  {_clip(message)}  ({counts[key]} case{'s' if counts[key] != 1 else ''})")
        if hint_full:
            out.append("")
            out.extend(hint_full)
    findings = Counter((f.rule, f.severity, f.title) for r in m.results for f in r.findings if f.rule != "SGA001")
    seen_cases = {k: sum(1 for r in m.results if any((f.rule, f.severity, f.title) == k for f in r.findings)) for k in findings}
    if findings:
        out.append("")
        out.append("findings (run `sglang-audit check` on a case for the message, fix and evidence):")
        for rule, severity, title in sorted(findings, key=lambda k: (k[0], k[1])):
            n = seen_cases[(rule, severity, title)]
            out.append(f"  {rule} {severity:7} {title}  ({n} case{'s' if n != 1 else ''})")
    if notes.unknowns:
        out.append("")
        out.append("unknown values (run `sglang-audit resolve` on a case for the candidates and chain):")
        out.extend(f"  [{tag}] {_clip(reason, 240)}" for reason, tag in notes.unknowns.items())
    if err:
        out.append("")
        out.append("errors and skipped flag sets:")
        out.extend(f"  [{tag}] {_clip(msg, 240)}" for msg, tag in err.items())
    s = summary(m)
    out.append("")
    out.append(f"{s['cases']} cases: {s['resolved']} resolved, {s['unknown']} unknown, {s['rejected']} rejected, "
               f"{s['error']} errors, {s['skipped']} skipped; {s['with_findings']} with findings, {s['with_undecided_rules']} with undecided rules")
    out.append(LEGEND)
    return "\n".join(out) + "\n"


def _value_json(value: Any) -> Any:
    return value.to_json() if isinstance(value, UnknownValue) else value


def case_json(r: CaseResult) -> dict[str, Any]:
    return {
        "arch": r.case.arch, "model": r.case.model, "flag_set": r.case.flag_set,
        "flags": r.flags, "status": r.status,
        "settings": {
            c.setting: {
                "config": _value_json(c.config), "runtime": _value_json(c.runtime),
                "status": c.status, "present": c.present,
                "deciding": {"file": c.deciding[0], "line": c.deciding[1], "guard": c.deciding[2]} if c.deciding else None,
            }
            for c in r.cells
        },
        "findings": [{"rule": f.rule, "severity": f.severity, "setting": f.setting, "title": f.title} for f in r.findings],
        "undecided": list(r.undecided),
        "rejected": r.rejected.to_json() if r.rejected else None,
        "hint": h.id if (h := hint_for(r.rejected)) is not None else None,
        "conditional_rejections": r.conditional_rejections,
        "error": r.error,
    }


def hint_json(use: HintUse) -> dict[str, Any]:
    h = use.hint
    return {
        "id": h.id, "set": list(h.sets), "advice": h.advice(), "why": h.why,
        "alternative": h.alternative or None, "sources": list(h.sources), "cases": len(use.cases),
        "flag_sets": list(use.flag_sets), "models": list(use.models),
        "rejected_at": [{"file": f, "line": ln} for f, ln in use.sites],
    }


def render_json(m: Matrix) -> str:
    data = {
        "schema": JSON_SCHEMA,
        "tool_version": __version__,
        "source": {k: m.source.get(k) for k in ("version", "flashinfer", "origin")},
        "cuda": m.cuda,
        "cudnn": m.cudnn,
        "driver": m.driver,  # null: DEFAULT_DRIVER assumed
        "archs": list(m.archs),
        "models": list(m.models),
        "flag_sets": {fs.name: list(fs.items) for fs in m.flag_sets},
        "model_defaults": {k: list(v) for k, v in m.model_sets.items() if v},
        "common_sets": list(m.common_sets),
        "rules": {"applied": m.rules, "note": m.rules_note},
        "columns": [{"title": c.title, "setting": c.setting} for c in m.columns],
        "summary": summary(m),
        "hints": [hint_json(u) for u in hint_uses(m)],
        "cases": [case_json(r) for r in m.results],
    }
    return json.dumps(data, indent=1, ensure_ascii=False, default=str) + "\n"


def csv_header(columns: tuple[Column, ...]) -> list[str]:
    settings = [f"{c.setting}_{layer}" for c in columns for layer in ("config", "runtime")]
    return ["arch", "model", "flag_set", "flags", "status", *settings, "findings", "undecided",
            "rejected", "rejected_at", "error"]


def render_csv(m: Matrix) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(csv_header(m.columns))
    for r in m.results:
        values: list[str] = []
        for c in r.cells:
            values += [value_text(c.config, full=True), value_text(c.runtime, full=True)] if c.present else ["n/a", "n/a"]
        if not r.cells:
            values = [""] * (2 * len(m.columns))
        w.writerow([_cell(x) for x in [
            r.case.arch, r.case.model, r.case.flag_set,
            " ".join(f"{k}={v}" for k, v in r.flags.items()), r.status, *values,
            ";".join(f"{f.rule}:{f.severity}" + (f":{f.setting}" if f.setting else "") for f in r.findings),
            ";".join(r.undecided),
            f"{r.rejected.exception}: {' '.join(r.rejected.message.split())}" if r.rejected else "",
            f"{r.rejected.file}:{r.rejected.line}" if r.rejected else "",
            r.error or "",
        ]])
    return buf.getvalue()


def _cell(value: str) -> str:
    """A CSV cell a spreadsheet will not run: one starting with = + - @ (or a tab/CR that
    some read past) is prefixed with ' (OWASP's advice for CSV injection)."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#f0f0f0;position:sticky;top:0}
tr.rejected td{background:#fdecea} tr.unknown td{background:#fff8e1} tr.error td,tr.skipped td{background:#eee}
td.err{color:#b00020;font-weight:600} td.warn{color:#8a5a00}
tr.sep td{border:none;height:6px}
code{font-size:12px}
"""


def render_html(m: Matrix) -> str:
    e = html.escape
    notes = _Notes(m)
    rej, err = notes.rejections, notes.errors
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>SGLang {e(str(m.source.get('version')))} support matrix</title>",
           f"<style>{_CSS}</style></head><body>",
           f"<h1>SGLang {e(str(m.source.get('version')))} support matrix</h1>",
           f"<p>{e(_header(m))}</p>", "<table>", "<thead><tr>"]
    out += [f"<th>{e(h)}</th>" for h in ["arch", "model", "flags", *[c.title for c in m.columns], "findings"]]
    out.append("</tr></thead><tbody>")
    prev_arch = None
    for r in m.results:
        if prev_arch is not None and r.case.arch != prev_arch:
            out.append(f'<tr class="sep"><td colspan="{len(m.columns) + 4}"></td></tr>')
        prev_arch = r.case.arch
        cells = _row_cells(r, m, notes)
        out.append(f'<tr class="{e(r.status)}"><td>{e(r.case.arch)}</td><td>{e(r.case.model)}</td>'
                   f'<td title="{e(" ".join(f"{k}={v}" for k, v in r.flags.items()))}">{e(r.case.flag_set)}</td>')
        for i, text in enumerate(cells):
            cls = ""
            if i < len(r.cells):
                mark = _marks(r, r.cells[i].setting)
                cls = ' class="err"' if mark == "!" else ' class="warn"' if mark == "~" else ""
                deciding = r.cells[i].deciding
                if deciding and r.status not in (STATUS_REJECTED, STATUS_ERROR, STATUS_SKIPPED):
                    tip = f"{deciding[0]}:{deciding[1]}" + (f"  [{deciding[2]}]" if deciding[2] else "")
                    out.append(f'<td{cls} title="{e(tip)}">{e(text)}</td>')
                    continue
            out.append(f"<td{cls}>{e(text)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    out.append("<h2>Flag sets</h2><ul>")
    out += [f"<li><b>{e(fs.name)}</b>: <code>{e(fs.label())}</code></li>" for fs in m.flag_sets]
    out.append("</ul>")
    if rej:
        out.append("<h2>Rejected by SGLang</h2><ul>")
        for (file, lineno, message), tag in rej.items():
            out.append(f"<li>[{e(tag)}] <code>{e(file)}:{lineno}</code> {e(message)}</li>")
        out.append("</ul>")
        for use in hint_uses(m):
            out.append(f"<p>How to get past [{e(','.join(_hint_tags(use, notes)))}] ({len(use.cases)} cases): "
                       f"rerun with <code>{e(use.hint.advice())}</code>: {e(use.hint.why)}"
                       + (f"; {e(use.hint.alternative)}" if use.hint.alternative else "") + "</p>")
    if notes.unknowns:
        out.append("<h2>Unknown values</h2><ul>")
        out += [f"<li>[{e(tag)}] {e(reason)}</li>" for reason, tag in notes.unknowns.items()]
        out.append("</ul>")
    if err:
        out.append("<h2>Errors</h2><ul>")
        out += [f"<li>[{e(tag)}] {e(msg)}</li>" for msg, tag in err.items()]
        out.append("</ul>")
    out.append(f"<p>{e(LEGEND)}</p></body></html>")
    return "\n".join(out) + "\n"


RENDERERS = {"text": render_text, "json": render_json, "csv": render_csv, "html": render_html}
