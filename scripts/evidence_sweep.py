#!/usr/bin/env python3
"""The evidence property over a release sweep: does every deciding step produce its value?

    python scripts/evidence_sweep.py                                  # default sweep
    python scripts/evidence_sweep.py --releases 0.5.23 --archs sm120 --jobs 2
    python scripts/evidence_sweep.py --json cases.jsonl               # one line per setting

For every case (release × arch × bundled profile × flag set) and every setting with a
value, the setting's deciding step (``Setting.deciding``, the one every command uses) is
read back from the release's own source text and classified:

* ``literal`` — the statement at that line contains a constant equal to the value;
* ``expr`` — its value expression computes the value (a call, an operator, a conditional,
  or a read of another named setting, e.g. ``default = view.moe_runner_backend``);
* ``flag`` — the user's flag (cited at the field's declaration);
* ``violation`` — anything else: a generic copy (``return declared[field]``, a bare name, a
  ``getattr``), or a line that is not there.

It also counts chain entries with line 0 (in the resolution and in ``check``'s findings,
which read the same chains), and settings with a known value but no deciding step
(``untraced``: the trail was lost; never replaced by a copy). Source text is parsed with
``ast`` only; nothing of the release is imported or run.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_audit.analyses.matrix import DEFAULT_FLAG_SETS, DEFAULT_MODELS, MODEL_DEFAULT_SETS  # noqa: E402
from sglang_audit.errors import AuditError  # noqa: E402
from sglang_audit.resolve.pipeline import Request, resolve  # noqa: E402
from sglang_audit.result import UnknownValue  # noqa: E402
from sglang_audit.shipped import load_toml  # noqa: E402
from sglang_audit.source.locate import locate_source  # noqa: E402

RELEASES = ["0.4.10", "0.5.5", "0.5.10", "0.5.13", "0.5.15", "0.5.19", "0.5.23"]
ARCHS = ["sm90", "sm100", "sm120"]
# the matrix's defaults (rules/matrix.toml): its bundled models, their tp, three of its flag sets
PROFILES = list(DEFAULT_MODELS)
_MATRIX_SETS = {fs.name: list(fs.items) for fs in DEFAULT_FLAG_SETS}
FLAG_SETS = {"none": _MATRIX_SETS["none"], "nextn": _MATRIX_SETS["nextn"], "moe-cutlass": _MATRIX_SETS["moe_cutlass"]}

_SOURCES: dict[str, str] = {}
_TREES: dict[str, Any] = {}


def _source(root: Path, rel: str) -> str | None:
    key = f"{root}/{rel}"
    if key not in _SOURCES:
        try:
            _SOURCES[key] = (root / rel).read_text(encoding="utf-8")
        except OSError:
            _SOURCES[key] = ""
    return _SOURCES[key] or None


def _statement_at(tree: ast.AST, line: int) -> ast.stmt | None:
    """The innermost simple statement that starts on ``line`` (or spans it)."""
    best: ast.stmt | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try,
                                                                 ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            end = getattr(node, "end_lineno", node.lineno) or node.lineno
            if node.lineno <= line <= end and (best is None or node.lineno >= best.lineno):
                best = node
    return best


def _value_expr(stmt: ast.stmt) -> ast.expr | None:
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)):
        return stmt.value
    if isinstance(stmt, ast.Expr):
        return stmt.value
    return None


def classify(root: Path, file: str, line: int, value: Any, kind: str, own: str, settings: set[str]) -> str:
    if line <= 0:
        return "violation"
    if kind == "flag":
        return "flag"
    text = _source(root, file)
    if text is None:
        return "violation"
    key = f"{root}/{file}"
    if key not in _TREES:
        try:
            _TREES[key] = ast.parse(text)
        except SyntaxError:
            return "violation"
    tree = _TREES[key]
    stmt = _statement_at(tree, line)
    if stmt is None:
        return "violation"
    for node in ast.walk(stmt):
        if isinstance(node, ast.Constant) and type(node.value) is type(value) and node.value == value:
            return "literal"
    if value is None and isinstance(stmt, ast.AnnAssign) and stmt.value is None:
        return "literal"  # a declaration without a default: None (dataclass Optional)
    expr = _value_expr(stmt)
    if isinstance(stmt, ast.Expr) and isinstance(expr, ast.Call):
        # a keyword declaration: declare_resolution(..., setting=<expr>)
        kw = next((k.value for k in expr.keywords if k.arg == own), None)
        expr = kw if kw is not None else expr
    if isinstance(expr, ast.Dict):
        item = next((v for k, v in zip(expr.keys, expr.values, strict=False) if isinstance(k, ast.Constant) and k.value == own), None)
        expr = item if item is not None else expr
    if expr is None:
        return "violation"
    if isinstance(expr, ast.Attribute) and expr.attr in settings and expr.attr != own:
        return "expr"  # a read of another named setting decides this one
    if isinstance(stmt, ast.Assign) and isinstance(expr, ast.Name) and any(
            (isinstance(t, ast.Attribute) and t.attr == own)
            or (isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == own)
            for t in stmt.targets):
        # ``self.quantization = quant_method`` (or ``overrides["quantization"] = ...``) under
        # its guard: the setting named and
        # assigned a value computed just before (from the model's config, a parameter)
        return "expr"
    if isinstance(expr, (ast.Name, ast.Attribute, ast.Subscript, ast.Starred)):
        return "violation"
    if isinstance(expr, ast.Call):
        fn = expr.func
        name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
        if name in ("getattr", "get", "resolution_result", "setattr", "__setattr__", "_set"):
            return "violation"
    return "expr"


def run_case(args: tuple[str, str, str, str]) -> dict[str, Any]:
    release, arch, model, flag_set = args
    sets = list(MODEL_DEFAULT_SETS.get(model, ())) + FLAG_SETS[flag_set]
    case: dict[str, Any] = {"release": release, "arch": arch, "model": model, "flags": flag_set, "settings": {}}
    try:
        res = resolve(Request(source=f"sglang=={release}", arch=arch, model=model, sets=sets))
    except AuditError as exc:
        case["error"] = str(exc)
        return case
    root = Path(res.source["package_dir"]).parent
    names = set(load_toml("settings.toml")["settings"])
    zero = sum(1 for s in res.settings.values() for st in s.chain if st.line == 0)
    try:
        from sglang_audit.rules.knownbad import check_resolution, load_rules

        findings = check_resolution(res, load_rules()).findings
        zero += sum(1 for f in findings for st in f.chain if st.line == 0)
        zero += sum(1 for f in findings if f.deciding is not None and f.deciding.line == 0)
    except AuditError:
        pass
    case["line0"] = zero
    case["rejected"] = res.rejected is not None
    for name, s in res.settings.items():
        if not s.present or res.rejected is not None:
            continue
        if isinstance(s.effective, UnknownValue) or isinstance(s.config, UnknownValue):
            case["settings"][name] = {"class": "unknown"}
            continue
        d = s.deciding
        if d is None:
            case["settings"][name] = {"class": "untraced", "value": s.effective}
            continue
        value = s.effective
        cls = classify(root, d.file, d.line, value if d.kind != "default" else d.value, d.kind, name, names)
        case["settings"][name] = {"class": cls, "value": value, "file": d.file, "line": d.line,
                                  "kind": d.kind, "layer": d.layer, "code": d.code[:120]}
    return case


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--releases", nargs="*", default=RELEASES)
    ap.add_argument("--archs", nargs="*", default=ARCHS)
    ap.add_argument("--models", nargs="*", default=PROFILES)
    ap.add_argument("--flag-sets", nargs="*", default=list(FLAG_SETS), choices=list(FLAG_SETS))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", type=Path, help="write one line per case")
    ns = ap.parse_args()
    for r in ns.releases:
        locate_source(f"sglang=={r}")  # fetch once, before the workers
    cases = [(r, a, m, f) for r in ns.releases for a in ns.archs for m in ns.models for f in ns.flag_sets]
    if ns.jobs > 1:
        with ProcessPoolExecutor(ns.jobs) as pool:
            results = list(pool.map(run_case, cases))
    else:
        results = [run_case(c) for c in cases]
    if ns.json:
        with ns.json.open("w") as fh:
            for r in results:
                fh.write(json.dumps(r, default=str) + "\n")
    print("| release | cases | settings with a value | literal | expr | flag | untraced | violations | line-0 entries |")
    print("|---|---|---|---|---|---|---|---|---|")
    total: Counter[str] = Counter()
    for rel in ns.releases:
        rows = [r for r in results if r["release"] == rel]
        c: Counter[str] = Counter()
        for r in rows:
            c["cases"] += 1
            c["line0"] += r.get("line0", 0)
            for v in r["settings"].values():
                if v["class"] != "unknown":
                    c["known"] += 1
                c[v["class"]] += 1
        total.update(c)
        print(f"| {rel} | {c['cases']} | {c['known']} | {c['literal']} | {c['expr']} | {c['flag']} | {c['untraced']} | {c['violation']} | {c['line0']} |")
    print(f"| **all** | {total['cases']} | {total['known']} | {total['literal']} | {total['expr']} | {total['flag']} | {total['untraced']} | {total['violation']} | {total['line0']} |")
    for r in results:
        for name, v in r["settings"].items():
            if v["class"] == "violation":
                print(f"violation: {r['release']} {r['arch']} {r['model']} {r['flags']} {name} = {v['value']!r} at {v['file']}:{v['line']} [{v['code']}]")
    return 1 if total["violation"] or total["line0"] else 0


if __name__ == "__main__":
    sys.exit(main())
