"""The hardware part of a decision's guard, as the decision graph (``graph.py``) reads it: a
formula over the hardware predicates, evaluated three-valued from the predicates' values
(``explain`` asks which guards a device decides).

Shape: ``("and"|"or", [f...])`` ``("not", f)`` ``("call", predicate)`` ``("const", v)``
``("cmp", f, ops, [f...])`` ``("sub", f, f)`` ``("opaque", text)``.
"""

from __future__ import annotations

from typing import Any

Formula = tuple  # the shapes above


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()


def evaluate_formula(f: Formula, predicates: dict[str, Any]) -> Any:
    """Three-valued evaluation: a Python value, or UNKNOWN when a non-hardware input matters."""
    tag = f[0]
    if tag == "const":
        return f[1]
    if tag == "call":
        v = predicates.get(f[1], UNKNOWN)
        return UNKNOWN if isinstance(v, str) and v.startswith("unknown") else v
    if tag == "not":
        v = evaluate_formula(f[1], predicates)
        return UNKNOWN if v is UNKNOWN else not v
    if tag in ("and", "or"):
        last: Any = UNKNOWN
        saw_unknown = False
        for sub in f[1]:
            v = evaluate_formula(sub, predicates)
            if v is UNKNOWN:
                saw_unknown = True
                continue
            if (tag == "and" and not v) or (tag == "or" and v):
                return v  # short-circuit decides regardless of the unknown operands
            last = v
        return UNKNOWN if saw_unknown else last
    if tag == "sub":
        base, index = evaluate_formula(f[1], predicates), evaluate_formula(f[2], predicates)
        if base is UNKNOWN or index is UNKNOWN:
            return UNKNOWN
        try:
            return base[index]
        except (TypeError, KeyError, IndexError):
            return UNKNOWN
    if tag == "cmp":
        left = evaluate_formula(f[1], predicates)
        rights = [evaluate_formula(c, predicates) for c in f[3]]
        if left is UNKNOWN or any(r is UNKNOWN for r in rights):
            return UNKNOWN
        try:
            for op, right in zip(f[2], rights, strict=False):
                if not _compare(op, left, right):
                    return False
                left = right
        except TypeError:
            return UNKNOWN
        return True
    return UNKNOWN


def _compare(op: str, a: Any, b: Any) -> bool:
    ops = {
        "==": lambda: a == b, "!=": lambda: a != b, "<": lambda: a < b, "<=": lambda: a <= b,
        ">": lambda: a > b, ">=": lambda: a >= b, "in": lambda: a in b, "not in": lambda: a not in b,
        "is": lambda: a is b, "is not": lambda: a is not b,
    }
    if op not in ops:
        raise TypeError(op)
    return bool(ops[op]())


def formula_predicates(f: Formula) -> list[str]:
    """Predicate names a formula calls, in order of appearance."""
    out: list[str] = []
    stack = [f]
    while stack:
        g = stack.pop(0)
        tag = g[0]
        if tag == "call" and g[1] not in out:
            out.append(g[1])
        elif tag in ("and", "or"):
            stack.extend(g[1])
        elif tag == "not":
            stack.append(g[1])
        elif tag == "sub":
            stack.extend([g[1], g[2]])
        elif tag == "cmp":
            stack.extend([g[1], *g[3]])
    return out
