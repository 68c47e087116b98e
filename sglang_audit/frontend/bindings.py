"""The names a statement binds: the one walker every stage uses (the evaluator marking names
unknown and finding a function's locals, the pipeline's layout check, the decision graph)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sglang_audit.frontend import ir


def flatten_targets(targets: Iterable[ir.Node | None]) -> Iterator[ir.Node]:
    """The leaves of assignment targets: ``a, (b.x, *c) = ...`` gives ``a``, ``b.x``, ``c``."""
    for t in targets:
        if t is None:
            continue
        if t.kind in ("TupleExpr", "ListExpr"):
            yield from flatten_targets(t.elts)
        elif t.kind == "Starred":
            yield from flatten_targets([t.value])
        else:
            yield t


def target_names(node: ir.Node | None) -> list[str]:
    """The plain names an assignment target binds (attributes and subscripts bind none)."""
    return [t.id for t in flatten_targets([node]) if t.kind == "Name"]


def bound_names(stmt: ir.Node, as_targets: bool = False) -> list[str]:
    """Names a statement may bind at its own level and in its nested blocks (for marking
    them unknown); ``as_targets`` adds ``with ... as x`` and ``except ... as e``."""
    out: list[str] = []
    kind = stmt.kind
    if kind in ("FunctionDef", "ClassDef"):
        out.append(stmt.name)
    elif kind == "Assign":
        for t in stmt.targets:
            out.extend(target_names(t))
    elif kind in ("AnnAssign", "AugAssign"):
        out.extend(target_names(stmt.target))
    elif kind == "Import":
        out.extend(asname or dotted.split(".")[0] for dotted, asname in stmt.names)
    elif kind == "ImportFrom" and stmt.names != "*":
        out.extend(asname or name for name, asname in stmt.names)
    elif kind == "For":
        out.extend(target_names(stmt.target))
    elif kind == "With" and as_targets:
        for _expr, target in stmt.items:
            out.extend(target_names(target))
    for block in ("body", "orelse", "finalbody"):
        if kind in ("If", "For", "While", "Try", "With") and hasattr(stmt, block):
            for sub in getattr(stmt, block):
                out.extend(bound_names(sub, as_targets))
    if kind == "Try":
        for h in stmt.handlers:
            if as_targets and h.name:
                out.append(h.name)
            for sub in h.body:
                out.extend(bound_names(sub, as_targets))
    return out


def absolute_module(current: str, is_package: bool, target: str, level: int) -> str:
    """The module ``from <level dots><target> import ...`` names inside module ``current``
    (a package's ``__init__`` when ``is_package``), as CPython resolves a relative import."""
    if level == 0:
        return target
    parts = current.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    return f"{base}.{target}" if target else base
