"""The decision graph of a release: which code decides each setting, read from the IR.

Target-independent: the IR of the configuration files is walked statically (the evaluator
never runs here).  Nodes are setting fields, hardware predicates, decision sites
(``if``/``elif``/conditional expressions/``assert``), rejection sites (``raise``/``assert``)
and writes; edges say what a decision reads, what it writes, which decisions guard a
write or a rejection, and how locals and helper returns feed later code.  The shape is
documented in ``docs/graph.md``.

Files walked: ``sglang/srt/server_args.py``, ``sglang/srt/arg_groups/**/*.py`` and the
runtime initialiser modules named in ``rules/settings.toml``.  File paths are relative to
the directory that holds the ``sglang`` package, as in ``resolve``'s evidence.

The hardware formulas a decision's guard is read into are ``formula.py``'s; the questions
asked of a built graph (a field's part, what a predicate controls) are ``graphquery.py``'s.

Why this module is long: one static walker over the IR for every construct SGLang's
configuration code decides with (branches, conditional expressions, asserts, returned
override dicts, declaration stashes), plus the predicate and field indexes built from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from sglang_audit import factfiles
from sglang_audit.analyses.formula import Formula
from sglang_audit.frontend import ir
from sglang_audit.frontend.bindings import flatten_targets
from sglang_audit.frontend.irtext import (
    const_value,
    dotted,
    exception_of,
    expr_text,
    message_text,
    sub_exprs,
    walk_expr,
)
from sglang_audit.frontend.parse import ParseFailure, SourceCache
from sglang_audit.source.locate import SourceTree, locate_source

GRAPH_SCHEMA = "sglang-audit-graph/1"

# Where SGLang's config code lives and the names that hold a ServerArgs: rules/graph.toml
_LAYOUT = factfiles.graph()
ARG_BASES = frozenset(_LAYOUT.names.arg_bases)
VIEW_CALLS = frozenset(_LAYOUT.names.view_calls)


# ---- the graph ---------------------------------------------------------------------------
@dataclass
class DecisionGraph:
    """The exported graph plus what explain needs that does not fit node attributes."""

    graph: nx.MultiDiGraph
    files: tuple[str, ...]
    formulas: dict[str, Formula] = field(default_factory=dict)  # decision id -> formula
    strings: dict[str, frozenset[str]] = field(default_factory=dict)  # decision id -> constants
    notes: list[str] = field(default_factory=list)

    def nodes_at(self, file: str, line: int) -> list[str]:
        return [n for n, d in self.graph.nodes(data=True) if d.get("file") == file and d.get("line") == line]

    def enclosing(self, node: str) -> list[tuple[str, str]]:
        """(decision id, branch) guarding a write or rejection, outermost first."""
        out = [(v, d["branch"], d.get("depth", 0)) for _u, v, d in self.graph.out_edges(node, data=True) if d["kind"] == "guarded_by"]
        out.sort(key=lambda t: t[2])
        return [(v, b) for v, b, _ in out]


@dataclass
class _Scope:
    """What a function (or the module) binds: aliases used to read guards through locals."""

    parent: _Scope | None
    assigns: dict[str, list[ir.Node]] = field(default_factory=dict)
    globals_decl: set[str] = field(default_factory=set)
    pred_imports: dict[str, str] = field(default_factory=dict)  # local name -> predicate
    field_alias: dict[str, str] = field(default_factory=dict)  # local name -> field it copies
    decision_names: set[str] = field(default_factory=set)  # names read by guards here
    local_writes: dict[str, list[str]] = field(default_factory=dict)  # name -> write ids
    consumers: list[tuple[str, set[str]]] = field(default_factory=list)  # (node id, names read)
    is_module: bool = False

    def lookup(self, name: str) -> _Scope | None:
        s: _Scope | None = self
        while s is not None:
            if name in s.assigns and name not in s.globals_decl:
                return s
            s = s.parent
        return None

    def predicate(self, name: str) -> str | None:
        s: _Scope | None = self
        while s is not None:
            if name in s.pred_imports:
                return s.pred_imports[name]
            s = s.parent
        return None


class _Builder:
    def __init__(self, root: Path, cache: SourceCache) -> None:
        self.root = root
        self.cache = cache
        self.g: nx.MultiDiGraph[str] = nx.MultiDiGraph()
        self.formulas: dict[str, Formula] = {}
        self.strings: dict[str, frozenset[str]] = {}
        self.notes: list[str] = []
        settings = factfiles.settings()
        self.entry_module: str = settings.entry.module
        self.entry_class: str = settings.entry.class_
        self.settings: list[str] = list(settings.settings)
        self.runtime_specs: tuple[factfiles.RuntimeInitialiser, ...] = settings.runtime
        preds = factfiles.predicates()
        self.predicate_names: list[str] = list(preds.names)
        self.predicate_modules: list[str] = list(preds.modules)
        self.platform_spec = preds.platform
        self.platform_facts: dict[str, str] = {}  # get_platform().<fact> -> predicate name
        self.fields: dict[str, dict[str, Any]] = {}  # name -> declaration attrs
        self.written_attrs: set[str] = set()
        self.runtime_globals: dict[str, dict[str, str]] = {}  # file -> {global: setting}
        self.runtime_files: set[str] = set()
        self.ids: set[str] = set()
        self.returns: dict[str, dict[str, list[str]]] = {}  # file -> function -> write ids
        self.calls: list[tuple[str, str, set[str]]] = []  # (file, write id, called names)

    # -- files ----------------------------------------------------------------------------
    def module_file(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        if (base / "__init__.py").is_file():
            return base / "__init__.py"
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
        return None

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def load(self, path: Path) -> ir.Node | None:
        try:
            return self.cache.load(path)
        except ParseFailure as exc:
            self.notes.append(f"{self.rel(path)}: not analysed ({exc.message})")
            return None

    def config_files(self) -> list[Path]:
        entry = self.root.joinpath(*self.entry_module.split(".")).with_suffix(".py")
        files = [entry] if entry.is_file() else []
        for rel_dir in _LAYOUT.layout.config_dirs:
            groups = self.root / rel_dir
            if groups.is_dir():
                files.extend(sorted(p for p in groups.rglob("*.py") if p.is_file()))
        return files

    # -- ids --------------------------------------------------------------------------------
    def new_id(self, base: str) -> str:
        nid, n = base, 1
        while nid in self.ids:
            n += 1
            nid = f"{base}#{n}"
        self.ids.add(nid)
        return nid

    # -- pass 1: declarations -------------------------------------------------------------
    def declare_fields(self, rel: str, module: ir.Node) -> None:
        in_fields_pkg = any(part in rel for part in _LAYOUT.layout.field_packages)
        for stmt in module.body:
            if stmt.kind != "ClassDef" or not (stmt.name == self.entry_class or in_fields_pkg):
                continue
            for item in stmt.body:
                if item.kind == "AnnAssign" and item.target.kind == "Name" and item.target.id not in self.fields:
                    ok, value = const_value(item.value)
                    self.fields[item.target.id] = {
                        "file": rel, "line": item.line, "declared": True,
                        "default": value if ok else None, "constant": ok or item.value is None,
                        "default_text": expr_text(item.value) if item.value is not None else "",
                        "owner": stmt.name,
                    }

    def collect_attr_writes(self, module: ir.Node) -> None:
        for stmt in _all_statements(module.body):
            targets: list[ir.Node] = []
            if stmt.kind == "Assign":
                targets = list(stmt.targets)
            elif stmt.kind in ("AugAssign", "AnnAssign"):
                targets = [stmt.target]
            for t in flatten_targets(targets):
                if t.kind == "Attribute" and t.value.kind == "Name" and t.value.id in ARG_BASES - {"self"}:
                    self.written_attrs.add(t.attr)

    def runtime_global_map(self, module: ir.Node, spec: factfiles.RuntimeInitialiser) -> dict[str, str]:
        """Module globals a runtime getter returns → the setting the getter reads."""
        funcs = {s.name: s for s in module.body if s.kind == "FunctionDef"}
        out: dict[str, str] = {}
        for setting, getter in spec.getters.items():
            fn = funcs.get(getter)
            if fn is None:
                continue
            for stmt in _all_statements(fn.body):
                if stmt.kind == "Return" and stmt.value is not None and stmt.value.kind == "Name":
                    out.setdefault(stmt.value.id, setting)
        return out

    # -- nodes ----------------------------------------------------------------------------
    def field_node(self, name: str) -> str:
        nid = f"field:{name}"
        if nid not in self.g:
            decl = self.fields.get(name)
            attrs: dict[str, Any] = {
                "kind": "field", "name": name, "setting": name in self.settings,
                "declared": bool(decl), "file": decl["file"] if decl else "", "line": decl["line"] if decl else 0,
                "default": decl["default"] if decl else None,
                "default_text": decl["default_text"] if decl else "",
            }
            self.g.add_node(nid, **attrs)
            self.ids.add(nid)
        return nid

    def predicate_node(self, name: str) -> str:
        nid = f"predicate:{name}"
        if nid not in self.g:
            self.g.add_node(nid, kind="predicate", name=name, file="", line=0, definition="", meaning="")
            self.ids.add(nid)
        return nid

    def define_predicates(self) -> None:
        """Predicate nodes with the file:line of their definition and a derived meaning."""
        for module in self.predicate_modules:
            path = self.module_file(module)
            if path is None:
                continue
            tree = self.load(path)
            if tree is None:
                continue
            rel = self.rel(path)
            defs = {s.name: s for s in tree.body if s.kind == "FunctionDef"}
            for stmt in tree.body:
                names: list[str] = []
                if stmt.kind == "FunctionDef":
                    names = [stmt.name]
                elif stmt.kind == "Assign":
                    names = [t.id for t in stmt.targets if t.kind == "Name"]
                for name in names:
                    if name not in self.predicate_names:
                        continue
                    nid = self.predicate_node(name)
                    if self.g.nodes[nid]["file"]:
                        continue  # first definition wins, as the import order does
                    if stmt.kind == "FunctionDef":
                        definition = f"def {name}()"
                        meaning = _function_meaning(stmt, {})
                    else:
                        definition = expr_text(stmt.value)
                        meaning = _assigned_meaning(stmt.value, defs)
                    self.g.nodes[nid].update(file=rel, line=stmt.line, definition=definition, meaning=meaning)

    def define_platform_facts(self) -> None:
        """``get_platform().<fact>`` (0.5.19+) → the predicate it calls, from the release's
        own fact tables (dict literals of fact name → probe name)."""
        spec = self.platform_spec
        path = self.module_file(spec.module) if spec is not None else None
        tree = self.load(path) if path is not None else None
        if tree is None or spec is None:
            return
        for stmt in tree.body:
            target = stmt.targets[0] if stmt.kind == "Assign" and len(stmt.targets) == 1 else stmt.target if stmt.kind == "AnnAssign" else None
            if target is None or target.kind != "Name" or target.id not in spec.tables or stmt.value is None or stmt.value.kind != "DictExpr":
                continue
            for key, value in stmt.value.items:
                if key is not None and key.kind == "Const" and value.kind == "Const" and isinstance(value.value, str):
                    if value.value in self.predicate_names:
                        self.platform_facts.setdefault(key.value, value.value)

    def platform_fact(self, node: ir.Node) -> str | None:
        """The predicate behind ``get_platform().<fact>``, or None."""
        if node.kind != "Attribute" or node.value.kind != "Call" or node.value.args:
            return None
        func = node.value.func
        if func.kind != "Name" or self.platform_spec is None or func.id != self.platform_spec.accessor:
            return None
        return self.platform_facts.get(node.attr)

    # -- pass 2: walking ------------------------------------------------------------------
    def walk_file(self, rel: str, module: ir.Node) -> None:
        scope = _Scope(parent=None, is_module=True)
        self.prepare_scope(scope, module.body, module_level=True)
        self.returns.setdefault(rel, {})
        # module constants a guard anywhere in the file reads (`model_arch in DEEPSEEK_ARCHS`)
        for stmt in _all_statements(module.body):
            tests = [stmt.test] if stmt.kind in ("If", "Assert") else []
            for e in _statement_exprs(stmt):
                tests.extend(sub.test for sub in walk_expr(e) if sub.kind == "IfExp")
            for t in tests:
                scope.decision_names.update(n.id for n in walk_expr(t) if n.kind == "Name")
        w = _Walker(self, rel, scope)
        w.block(module.body, [], "")
        for sc in [scope, *w.scopes]:  # after the whole file: a constant may follow its readers
            w.link_scope(sc)

    def prepare_scope(self, scope: _Scope, body: list[ir.Node], module_level: bool = False) -> None:
        for stmt in _scope_statements(body):
            k = stmt.kind
            if k == "Global":
                scope.globals_decl.update(stmt.names)
            elif k == "ImportFrom" and stmt.names != "*":
                for name, asname in stmt.names:
                    if name in self.predicate_names:
                        scope.pred_imports[asname or name] = name
            elif k in ("Assign", "AnnAssign", "AugAssign"):
                targets = list(stmt.targets) if k == "Assign" else [stmt.target]
                value = stmt.value
                if value is None:
                    continue
                for t in flatten_targets(targets):
                    if t.kind == "Name":
                        scope.assigns.setdefault(t.id, []).append(value)
                        fld = self.field_read(value)
                        if fld is not None and not module_level:
                            scope.field_alias.setdefault(t.id, fld)
            if k == "Assign" and any(t.kind == "Attribute" and _is_args_base(t.value) for t in flatten_targets(stmt.targets)):
                # locals feeding a setting write are evidence too
                scope.decision_names.update(n.id for n in walk_expr(stmt.value) if n.kind == "Name")
            for node in _statement_exprs(stmt):
                if k in ("If", "Assert") and node is stmt.test or k == "While" and node is stmt.test:
                    scope.decision_names.update(n.id for n in walk_expr(node) if n.kind == "Name")
                for sub in walk_expr(node):
                    if sub.kind == "IfExp":
                        scope.decision_names.update(n.id for n in walk_expr(sub.test) if n.kind == "Name")
        if module_level:
            for name in self.predicate_names:
                # a predicate defined in this very module
                if name in scope.assigns or any(s.kind == "FunctionDef" and s.name == name for s in body):
                    scope.pred_imports.setdefault(name, name)

    def known_field(self, name: str) -> bool:
        return name in self.fields or name in self.settings or name in self.written_attrs

    def field_read(self, node: ir.Node | None) -> str | None:
        """The field a plain read expression names (``server_args.x``, ``getattr(self, "x")``)."""
        if node is None:
            return None
        if node.kind == "Attribute" and self.known_field(node.attr) and _is_args_base(node.value):
            return node.attr
        if node.kind == "Call" and node.func.kind == "Name" and node.func.id == "getattr" and len(node.args) >= 2:
            base, name = node.args[0][1], node.args[1][1]
            if _is_args_base(base) and name.kind == "Const" and isinstance(name.value, str) and self.known_field(name.value):
                return name.value
        return None


def _is_args_base(node: ir.Node) -> bool:
    if node.kind == "Name":
        return node.id in ARG_BASES
    return node.kind == "Call" and node.func.kind == "Name" and node.func.id in VIEW_CALLS


def _child_blocks(stmt: ir.Node) -> list[list[ir.Node]]:
    k = stmt.kind
    if k in ("If", "While", "For"):
        return [stmt.body, stmt.orelse]
    if k == "Try":
        return [stmt.body, *[h.body for h in stmt.handlers], stmt.orelse, stmt.finalbody]
    if k == "With":
        return [stmt.body]
    return []


def _all_statements(body: list[ir.Node]) -> Iterator[ir.Node]:
    """Every statement, descending into functions and classes too."""
    for stmt in body:
        yield stmt
        if stmt.kind in ("FunctionDef", "ClassDef"):
            yield from _all_statements(stmt.body)
        for block in _child_blocks(stmt):
            yield from _all_statements(block)


def _scope_statements(body: list[ir.Node]) -> Iterator[ir.Node]:
    """Statements of one scope: into blocks, not into nested functions or classes."""
    for stmt in body:
        yield stmt
        for block in _child_blocks(stmt):
            yield from _scope_statements(block)


def _statement_exprs(stmt: ir.Node) -> list[ir.Node]:
    k = stmt.kind
    out: list[Any] = []
    if k in ("If", "While", "Assert"):
        out = [stmt.test] + ([stmt.msg] if k == "Assert" else [])
    elif k == "Assign":
        out = [stmt.value, *stmt.targets]
    elif k in ("AugAssign", "AnnAssign"):
        out = [stmt.value, stmt.target]
    elif k in ("Return", "ExprStmt"):
        out = [stmt.value]
    elif k == "Raise":
        out = [stmt.exc, stmt.cause]
    elif k == "For":
        out = [stmt.iter]
    elif k == "With":
        out = [e for e, _t in stmt.items]
    return [e for e in out if e is not None]


def _function_meaning(fn: ir.Node, subst: dict[str, ir.Node]) -> str:
    """A predicate function body as one condition: ``if C: return False`` guards and the
    final ``return E``, with the given parameter values substituted."""
    conjuncts: list[str] = []
    for stmt in fn.body:
        if stmt.kind == "ExprStmt" and stmt.value.kind == "Const":
            continue  # docstring
        if (stmt.kind == "If" and not stmt.orelse and len(stmt.body) == 1 and stmt.body[0].kind == "Return"
                and stmt.body[0].value is not None and stmt.body[0].value.kind == "Const" and stmt.body[0].value.value is False):
            test = _substitute(stmt.test, subst)
            conjuncts.append(expr_text(test.operand, 3) if test.kind == "UnaryOp" and test.op == "not" else f"not {expr_text(test, 3)}")
            continue
        if stmt.kind == "Return" and stmt.value is not None:
            conjuncts.append(expr_text(_substitute(stmt.value, subst), 2))
            return " and ".join(conjuncts)
        return ""
    return ""


def _assigned_meaning(value: ir.Node, defs: dict[str, ir.Node]) -> str:
    """``lru_cache(...)(partial(f, k=v))`` → f's condition with k=v substituted."""
    node = value
    while node.kind == "Call":
        if node.func.kind == "Call" and len(node.args) == 1:  # lru_cache(maxsize=1)(X)
            node = node.args[0][1]
            continue
        name = dotted(node.func)
        if name.rsplit(".", 1)[-1] in ("lru_cache", "cache") and len(node.args) == 1 and node.args[0][0] == "":
            node = node.args[0][1]
            continue
        if name.rsplit(".", 1)[-1] == "partial" and node.args and node.args[0][0] == "":
            target = node.args[0][1]
            fn = defs.get(target.id) if target.kind == "Name" else None
            kws = {k: v for k, v in node.args[1:] if k not in ("", "*", "**", None)}
            if fn is not None:
                return _function_meaning(fn, kws) or expr_text(node)
            return expr_text(node)
        break
    if node.kind == "Name" and node.id in defs:
        return _function_meaning(defs[node.id], {})
    return ""


def _substitute(node: ir.Node, subst: dict[str, ir.Node]) -> ir.Node:
    if not subst:
        return node
    if node.kind == "Name" and node.id in subst:
        return subst[node.id]
    clone = type(node).__new__(type(node))
    for slot in node._all_slots():
        v = getattr(node, slot)
        if isinstance(v, ir.Node):
            v = _substitute(v, subst)
        elif isinstance(v, list):
            v = [_substitute(x, subst) if isinstance(x, ir.Node) else
                 tuple(_substitute(y, subst) if isinstance(y, ir.Node) else y for y in x) if isinstance(x, tuple) else x
                 for x in v]
        setattr(clone, slot, v)
    return clone


class _Walker:
    """Walks one file's statements, adding decision, rejection and write nodes."""

    def __init__(self, b: _Builder, rel: str, module_scope: _Scope) -> None:
        self.b = b
        self.g = b.g
        self.rel = rel
        self.module_scope = module_scope
        self.layer = "runtime" if rel in b.runtime_files else "config"
        self.globals_map = b.runtime_globals.get(rel, {})
        self.scopes: list[_Scope] = []  # function scopes, linked once the file is walked

    # -- name resolution ------------------------------------------------------------------
    def name_sources(self, name: str, scope: _Scope, seen: frozenset[str] = frozenset()) -> set[tuple[str, str]]:
        """Fields and predicates a name's value is computed from (through local aliases)."""
        pred = scope.predicate(name)
        if pred is not None:
            return {("predicate", pred)}
        if name in self.globals_map:
            return {("field", self.globals_map[name])}
        owner = scope.lookup(name)
        if owner is None or name in seen:
            return set()
        out: set[tuple[str, str]] = set()
        for value in owner.assigns[name]:
            out |= self.reads(value, owner, seen | {name})
        return out

    def reads(self, node: ir.Node | None, scope: _Scope, seen: frozenset[str] = frozenset()) -> set[tuple[str, str]]:
        out: set[tuple[str, str]] = set()
        for sub in walk_expr(node):
            fld = self.b.field_read(sub)
            if fld is not None:
                out.add(("field", fld))
            elif sub.kind == "Name":
                out |= self.name_sources(sub.id, scope, seen)
            elif sub.kind == "Attribute" and (pred := self.b.platform_fact(sub)) is not None:
                out.add(("predicate", pred))
        return out

    def formula(self, node: ir.Node | None, scope: _Scope, depth: int = 0) -> Formula:
        if node is None or depth > 8:
            return ("opaque", "")
        k = node.kind
        if k == "BoolOp":
            return (node.op, [self.formula(v, scope, depth + 1) for v in node.values])
        if k == "UnaryOp" and node.op == "not":
            return ("not", self.formula(node.operand, scope, depth + 1))
        if k == "Const":
            return ("const", node.value)
        if k in ("ListExpr", "TupleExpr", "SetExpr") and all(e.kind == "Const" for e in node.elts):
            vals = [e.value for e in node.elts]
            return ("const", set(vals) if k == "SetExpr" else tuple(vals))
        if k == "Call" and node.func.kind == "Name" and not node.args:
            pred = scope.predicate(node.func.id)
            if pred is not None:
                return ("call", pred)
        if k == "Attribute" and (fact := self.b.platform_fact(node)) is not None:
            return ("call", fact)
        if k == "Name":
            pred_alias = scope.lookup(node.id)
            if pred_alias is not None and len(pred_alias.assigns[node.id]) == 1:
                return self.formula(pred_alias.assigns[node.id][0], pred_alias, depth + 1)
        if k == "Compare":
            return ("cmp", self.formula(node.left, scope, depth + 1), list(node.ops),
                    [self.formula(c, scope, depth + 1) for c in node.comparators])
        if k == "Subscript":
            return ("sub", self.formula(node.value, scope, depth + 1), self.formula(node.index, scope, depth + 1))
        return ("opaque", expr_text(node))

    def strings(self, node: ir.Node | None, scope: _Scope, depth: int = 0) -> set[str]:
        """String constants a guard compares with, through module-level constant lists."""
        out: set[str] = set()
        for sub in walk_expr(node):
            if sub.kind == "Const" and isinstance(sub.value, str):
                out.add(sub.value)
            elif sub.kind == "Name" and depth < 3:
                owner = scope.lookup(sub.id)
                if owner is not None and owner.is_module and len(owner.assigns[sub.id]) == 1:
                    out |= self.strings(owner.assigns[sub.id][0], owner, depth + 1)
        return out

    # -- statements -----------------------------------------------------------------------
    def block(self, body: list[ir.Node], stack: list[tuple[str, str]], fn: str, scope: _Scope | None = None) -> None:
        scope = scope or self.module_scope
        for stmt in body:
            self.statement(stmt, stack, fn, scope)

    def statement(self, stmt: ir.Node, stack: list[tuple[str, str]], fn: str, scope: _Scope) -> None:
        k = stmt.kind
        if k == "FunctionDef":
            inner = _Scope(parent=scope)
            for p in stmt.params:
                inner.assigns[p.name] = []  # a parameter shadows any module-level alias
            self.b.prepare_scope(inner, stmt.body)
            qual = f"{fn}.{stmt.name}" if fn else stmt.name
            self.b.returns[self.rel].setdefault(stmt.name, [])
            self.block(stmt.body, [], qual, inner)
            self.scopes.append(inner)
            return
        if k == "ClassDef":
            qual = f"{fn}.{stmt.name}" if fn else stmt.name
            for item in stmt.body:
                if item.kind in ("FunctionDef", "ClassDef"):
                    self.statement(item, [], qual, scope)
            return
        if k == "If":
            d = self.decision(stmt, "elif" if stmt.is_elif else "if", stack, fn, scope)
            self.block(stmt.body, [*stack, (d, "true")], fn, scope)
            self.block(stmt.orelse, [*stack, (d, "false")], fn, scope)
            return
        if k == "Assert":
            d = self.decision(stmt, "assert", stack, fn, scope)
            self.rejection(stmt, "AssertionError", message_text(stmt.msg), f"assert {stmt.text}", [*stack, (d, "false")])
            return
        if k == "Raise":
            exc, msg = exception_of(stmt.exc)
            self.ifexps(stmt.exc, stack, fn, scope, None)
            self.rejection(stmt, exc, msg, stmt.text, stack)
            return
        if k in ("Assign", "AnnAssign", "AugAssign"):
            self.assignment(stmt, stack, fn, scope)
            return
        if k == "Return":
            self.ret(stmt, stack, fn, scope)
            return
        if k == "ExprStmt" and self.setattr_write(stmt, stack, fn, scope):
            return
        for e in _statement_exprs(stmt):
            self.ifexps(e, stack, fn, scope, None)
        for block in _child_blocks(stmt):
            self.block(block, stack, fn, scope)

    def decision(self, node: ir.Node, construct: str, stack: list[tuple[str, str]], fn: str, scope: _Scope) -> str:
        d = self.b.new_id(f"decision:{self.rel}:{node.line}")
        self.g.add_node(d, kind="decision", file=self.rel, line=node.line, guard=node.text or expr_text(node.test),
                        construct=construct, function=fn, layer=self.layer)
        self.b.formulas[d] = self.formula(node.test, scope)
        self.b.strings[d] = frozenset(self.strings(node.test, scope))
        for kind, name in sorted(self.reads(node.test, scope)):
            target = self.b.field_node(name) if kind == "field" else self.b.predicate_node(name)
            self.g.add_edge(d, target, key=f"reads:{target}", kind="reads")
        self.guard_edges(d, stack, "nested_in")
        scope.consumers.append((d, {n.id for n in walk_expr(node.test) if n.kind == "Name"}))
        # conditional expressions inside the guard are decisions too
        self.ifexps(node.test, [*stack, (d, "true")], fn, scope, None)
        return d

    def guard_edges(self, node: str, stack: list[tuple[str, str]], kind: str = "guarded_by") -> None:
        if kind == "nested_in":
            if stack:
                parent, branch = stack[-1]
                self.g.add_edge(node, parent, key=f"nested_in:{parent}", kind="nested_in", branch=branch)
            return
        for depth, (parent, branch) in enumerate(stack):
            self.g.add_edge(node, parent, key=f"guarded_by:{parent}", kind="guarded_by", branch=branch, depth=depth)

    def rejection(self, node: ir.Node, exception: str, message: str, code: str, stack: list[tuple[str, str]]) -> None:
        r = self.b.new_id(f"rejection:{self.rel}:{node.line}")
        self.g.add_node(r, kind="rejection", file=self.rel, line=node.line, exception=exception,
                        message=message, code=code, layer=self.layer)
        self.guard_edges(r, stack)
        if stack:
            d, branch = stack[-1]
            self.g.add_edge(d, r, key=f"rejects:{r}", kind="rejects", branch=branch)

    def ifexps(self, node: ir.Node | None, stack: list[tuple[str, str]], fn: str, scope: _Scope,
               write: tuple[str, str | None] | None, arms: tuple[tuple[str, str], ...] = ()) -> None:
        """Decision nodes for conditional expressions; for a write's value, ``writes`` edges
        from each conditional to the field with the constant of each arm."""
        if node is None:
            return
        if node.kind == "IfExp":
            d = self.decision(node, "ifexp", stack, fn, scope)
            for branch, arm in (("true", node.body), ("false", node.orelse)):
                path = (*arms, (d, branch))
                if write is not None and arm.kind != "IfExp":
                    wid, fld = write
                    if fld is not None:
                        self.writes_edge(d, fld, wid, arm, branch, path)
                self.ifexps(arm, stack, fn, scope, write, path)
            return
        for sub in sub_exprs(node):
            # an arm nested in a call or a container is not the written value itself
            self.ifexps(sub, stack, fn, scope, None, arms)

    def writes_edge(self, src: str, fld: str, wid: str, value: ir.Node | None, branch: str,
                    arms: tuple[tuple[str, str], ...] = ()) -> None:
        ok, const = const_value(value)
        attrs = self.g.nodes[wid]
        arm_text = ",".join(f"{d}={b}" for d, b in arms)
        self.g.add_edge(src, self.b.field_node(fld), key=f"writes:{wid}:{arm_text}", kind="writes",
                        value=const if ok else None, constant=ok, value_text=expr_text(value),
                        branch=branch, write=wid, arm=arm_text, file=attrs["file"], line=attrs["line"],
                        layer=self.layer)

    def assignment(self, stmt: ir.Node, stack: list[tuple[str, str]], fn: str, scope: _Scope) -> None:
        targets = list(stmt.targets) if stmt.kind == "Assign" else [stmt.target]
        value = stmt.value
        if value is None:
            return
        if stmt.kind == "AnnAssign" and not fn:
            self.ifexps(value, stack, fn, scope, None)
            return  # a class-level declaration: a field default, not a write
        recorded = False
        for t in flatten_targets(targets):
            write_kind, target, fld = self.classify_target(t, fn, scope)
            if write_kind is None:
                continue
            recorded = True
            wid = self.b.new_id(f"write:{self.rel}:{stmt.line}:{target}")
            ok, const = const_value(value)
            if stmt.kind == "AugAssign":
                ok, const = False, None
            self.g.add_node(wid, kind="write", write_kind=write_kind, file=self.rel, line=stmt.line,
                            target=target, field=fld or "", value=const if ok else None, constant=ok,
                            value_text=expr_text(value) if stmt.kind != "AugAssign" else f"{target} {stmt.op}= {expr_text(value)}",
                            code=stmt.text, function=fn, layer=self.layer)
            self.guard_edges(wid, stack)
            self.value_edges(wid, value, scope)
            if fld is not None:
                self.writes_edge(wid, fld, wid, value, "")
                if stack and value.kind != "IfExp":  # a conditional value: its arms carry the edges
                    d, branch = stack[-1]
                    self.writes_edge(d, fld, wid, value, branch)
            if write_kind in ("local", "module"):
                scope.local_writes.setdefault(target, []).append(wid)
            self.ifexps(value, stack, fn, scope, (wid, fld))
        if not recorded:
            self.ifexps(value, stack, fn, scope, None)

    def setattr_write(self, stmt: ir.Node, stack: list[tuple[str, str]], fn: str, scope: _Scope) -> bool:
        """``setattr(server_args, name, value)``: a write of that field, or of whichever
        field ``name`` holds (later releases materialise declared overrides this way)."""
        call = stmt.value
        if not (call.kind == "Call" and call.func.kind == "Name" and call.func.id == "setattr"
                and len(call.args) == 3 and all(k == "" for k, _ in call.args) and _is_args_base(call.args[0][1])):
            return False
        name, value = call.args[1][1], call.args[2][1]
        fld = name.value if name.kind == "Const" and isinstance(name.value, str) else None
        target = fld or f"setattr({expr_text(name)})"
        wid = self.b.new_id(f"write:{self.rel}:{stmt.line}:{target}")
        ok, const = const_value(value)
        self.g.add_node(wid, kind="write", write_kind="field" if fld else "dynamic", file=self.rel, line=stmt.line,
                        target=target, field=fld or "", value=const if ok else None, constant=ok,
                        value_text=expr_text(value), code=expr_text(call), function=fn, layer=self.layer)
        self.guard_edges(wid, stack)
        self.value_edges(wid, value, scope)
        if fld is not None:
            self.writes_edge(wid, fld, wid, value, "")
            if stack:
                d, branch = stack[-1]
                self.writes_edge(d, fld, wid, value, branch)
        return True

    def classify_target(self, t: ir.Node, fn: str, scope: _Scope) -> tuple[str | None, str, str | None]:
        if t.kind == "Attribute" and _is_args_base(t.value):
            if t.value.kind == "Name" and t.value.id == "self" and fn.split(".")[0] != self.b.entry_class:
                return None, "", None  # `self` of some other class
            return "field", t.attr, t.attr
        if t.kind == "Subscript" and t.value.kind == "Name" and t.value.id in ARG_BASES:
            return None, "", None
        if t.kind != "Name":
            return None, "", None
        name = t.id
        if not fn:
            return ("module", name, None) if scope.is_module and name in scope.decision_names else (None, "", None)
        if name in scope.globals_decl:
            # a module global: only the ones a runtime getter returns are settings
            return ("global", name, self.globals_map[name]) if name in self.globals_map else (None, "", None)
        if name in scope.field_alias:
            return "local", name, scope.field_alias[name]
        if name in scope.decision_names:
            return "local", name, None
        return None, "", None

    def value_edges(self, wid: str, value: ir.Node, scope: _Scope) -> None:
        for kind, name in sorted(self.reads(value, scope)):
            target = self.b.field_node(name) if kind == "field" else self.b.predicate_node(name)
            self.g.add_edge(wid, target, key=f"reads:{target}", kind="reads")
        names = {n.id for n in walk_expr(value) if n.kind == "Name"}
        scope.consumers.append((wid, names))
        called = set()
        for sub in walk_expr(value):
            if sub.kind == "Call":
                if sub.func.kind == "Name":
                    called.add(sub.func.id)
                elif sub.func.kind == "Attribute" and sub.func.value.kind == "Name" and sub.func.value.id == "self":
                    called.add(sub.func.attr)
        if called:
            self.b.calls.append((self.rel, wid, called))

    def ret(self, stmt: ir.Node, stack: list[tuple[str, str]], fn: str, scope: _Scope) -> None:
        if stmt.value is None:
            return
        # a guarded return decides a helper's result; an unguarded one matters when it
        # passes a setting or a predicate on (the caller's guards then apply)
        if not fn or not stack and not self.reads(stmt.value, scope):
            self.ifexps(stmt.value, stack, fn, scope, None)
            return
        wid = self.b.new_id(f"write:{self.rel}:{stmt.line}:return:{fn}")
        ok, const = const_value(stmt.value)
        self.g.add_node(wid, kind="write", write_kind="return", file=self.rel, line=stmt.line, target=fn,
                        field="", value=const if ok else None, constant=ok, value_text=expr_text(stmt.value),
                        code=f"return {expr_text(stmt.value)}", function=fn, layer=self.layer)
        self.guard_edges(wid, stack)
        self.value_edges(wid, stmt.value, scope)
        self.b.returns[self.rel].setdefault(fn.rsplit(".", 1)[-1], []).append(wid)
        self.ifexps(stmt.value, stack, fn, scope, None)

    def link_scope(self, scope: _Scope) -> None:
        """``feeds`` edges: a local's writes → the decisions and writes that read it."""
        for consumer, names in scope.consumers:
            for name in sorted(names):
                owner = scope.lookup(name) if not scope.is_module else scope
                if owner is None:
                    continue
                for wid in owner.local_writes.get(name, []):
                    # flow-insensitive, but a write after its reader (the usual
                    # `if x == "auto": x = ...`) does not feed it
                    if wid != consumer and (owner.is_module or self.g.nodes[wid]["line"] <= self.g.nodes[consumer]["line"]):
                        self.g.add_edge(wid, consumer, key=f"feeds:{consumer}", kind="feeds", via=name)


def build_graph(package_dir: Path, cache: SourceCache | None = None) -> DecisionGraph:
    """The decision graph of the release whose ``sglang`` package is ``package_dir``."""
    root = package_dir.parent
    b = _Builder(root, cache or SourceCache())
    config = b.config_files()
    runtime: list[tuple[Path, factfiles.RuntimeInitialiser]] = []
    for spec in b.runtime_specs:
        path = b.module_file(spec.module)
        if path is not None and path not in config and all(path != p for p, _ in runtime):
            runtime.append((path, spec))
    trees: list[tuple[str, ir.Node]] = []
    for path in config:
        tree = b.load(path)
        if tree is not None:
            trees.append((b.rel(path), tree))
    for path, spec in runtime:
        tree = b.load(path)
        if tree is None:
            continue
        rel = b.rel(path)
        b.runtime_files.add(rel)
        b.runtime_globals[rel] = b.runtime_global_map(tree, spec)
        trees.append((rel, tree))
    for rel, tree in trees:
        b.declare_fields(rel, tree)
        b.collect_attr_writes(tree)
    for name in [*b.settings, *b.fields]:
        b.field_node(name)
    b.define_predicates()
    b.define_platform_facts()
    for rel, tree in trees:
        b.walk_file(rel, tree)
    # a helper's guarded returns feed the write that calls it (same file)
    for rel, wid, called in b.calls:
        for name in sorted(called):
            for rid in b.returns.get(rel, {}).get(name, []):
                b.g.add_edge(rid, wid, key=f"feeds:{wid}", kind="feeds", via=name)
    files = tuple(rel for rel, _ in trees)
    b.g.graph.update(schema=GRAPH_SCHEMA, files=list(files), notes=list(b.notes))
    return DecisionGraph(b.g, files, b.formulas, b.strings, b.notes)


def release_graph(source: str | None, use_cache: bool = True, progress: Callable[[str], None] | None = None,
          cache: SourceCache | None = None) -> tuple[SourceTree, Any]:
    """The release's decision graph (``graph.DecisionGraph``); no target needed."""
    tree = locate_source(source, progress=progress)
    dg = build_graph(tree.package_dir, cache or SourceCache(use_disk=use_cache))
    dg.graph.graph.update(version=tree.version or "", origin=tree.origin)
    return tree, dg
