"""IR expressions as source-like text: what a guard, a message or a value says, as written
(precedence-aware parentheses, f-strings rendered with their fields), and walks over an
expression's parts. For evidence lines and the decision graph; no evaluation here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sglang_audit.frontend import ir

_SCALARS = (str, int, float, bool, type(None))  # a Const worth showing as a value

_PREC = {"or": 1, "and": 2, "not": 3, "cmp": 4, "|": 5, "^": 6, "&": 7, "<<": 8, ">>": 8,
         "+": 9, "-": 9, "*": 10, "/": 10, "//": 10, "%": 10, "@": 10, "unary": 11, "**": 12}


def _prec(node: ir.Node | None) -> int:
    if node is None:
        return 99
    k = node.kind
    if k in ("IfExp", "Lambda", "NamedExpr"):
        return 0
    if k == "BoolOp":
        return _PREC[node.op]
    if k == "UnaryOp":
        return _PREC["not"] if node.op == "not" else _PREC["unary"]
    if k == "Compare":
        return _PREC["cmp"]
    if k == "BinOp":
        return _PREC.get(node.op, 9)
    return 99


def expr_text(node: ir.Node | None, parent_prec: int = 0) -> str:
    """Source-like text of an IR expression (for evidence; spacing is normalised)."""
    text = _expr_text(node)
    return f"({text})" if _prec(node) < parent_prec else text


def _args_text(args: list[tuple[str, ir.Node]]) -> str:
    parts = []
    for kind, value in args:
        if kind in ("", None):
            parts.append(expr_text(value))
        elif kind in ("*", "**"):
            parts.append(kind + expr_text(value, 99))
        else:
            parts.append(f"{kind}={expr_text(value)}")
    return ", ".join(parts)


def _expr_text(node: ir.Node | None) -> str:
    if node is None:
        return ""
    k = node.kind
    if k == "Name":
        return node.id
    if k == "Const":
        return "..." if node.value is ... else repr(node.value)
    if k == "Attribute":
        return f"{expr_text(node.value, 99)}.{node.attr}"
    if k == "Subscript":
        return f"{expr_text(node.value, 99)}[{expr_text(node.index)}]"
    if k == "Slice":
        text = f"{expr_text(node.lower)}:{expr_text(node.upper)}"
        return text + (f":{expr_text(node.step)}" if node.step is not None else "")
    if k == "Call":
        return f"{expr_text(node.func, 99)}({_args_text(node.args)})"
    if k == "BinOp":
        p = _prec(node)
        return f"{expr_text(node.left, p)} {node.op} {expr_text(node.right, p + 1)}"
    if k == "UnaryOp":
        p = _prec(node)
        sep = " " if node.op == "not" else ""
        return f"{node.op}{sep}{expr_text(node.operand, p)}"
    if k == "BoolOp":
        p = _prec(node)
        return f" {node.op} ".join(expr_text(v, p + 1) for v in node.values)
    if k == "Compare":
        p = _prec(node)
        out = expr_text(node.left, p + 1)
        for op, comp in zip(node.ops, node.comparators, strict=False):
            out += f" {op} {expr_text(comp, p + 1)}"
        return out
    if k == "IfExp":
        return f"{expr_text(node.body, 1)} if {expr_text(node.test, 1)} else {expr_text(node.orelse)}"
    if k == "ListExpr":
        return "[" + ", ".join(expr_text(e) for e in node.elts) + "]"
    if k == "TupleExpr":
        inner = ", ".join(expr_text(e) for e in node.elts)
        return f"({inner},)" if len(node.elts) == 1 else f"({inner})"
    if k == "SetExpr":
        return "{" + ", ".join(expr_text(e) for e in node.elts) + "}"
    if k == "DictExpr":
        items = [f"**{expr_text(v, 99)}" if key is None else f"{expr_text(key)}: {expr_text(v)}" for key, v in node.items]
        return "{" + ", ".join(items) + "}"
    if k == "Starred":
        return "*" + expr_text(node.value, 99)
    if k == "JoinedStr":
        return "f" + repr(joined_text(node))
    if k in ("ListComp", "SetComp", "GeneratorExp", "DictComp"):
        return {"ListComp": "[...]", "SetComp": "{...}", "GeneratorExp": "(...)", "DictComp": "{...}"}[k]
    if k == "Lambda":
        return "lambda ..."
    if k == "NamedExpr":
        return f"{expr_text(node.target)} := {expr_text(node.value)}"
    if k == "Await":
        return "await " + expr_text(node.value, 99)
    return f"<{getattr(node, 'what', k)}>"


def joined_text(node: ir.Node) -> str:
    """An f-string's text with each replacement field shown as ``{expr}``."""
    out = []
    for part in node.parts:
        if part.kind == "Const":
            out.append(str(part.value))
        else:
            out.append("{" + expr_text(part.value) + "}")
    return "".join(out)


def message_text(node: ir.Node | None) -> str:
    """The message of a rejection as written: constant text, f-string with ``{expr}``."""
    if node is None:
        return ""
    if node.kind == "Const":
        return str(node.value)
    if node.kind == "JoinedStr":
        return joined_text(node)
    if node.kind == "BinOp" and node.op == "+":
        return message_text(node.left) + message_text(node.right)
    if node.kind == "Call" and node.args and node.args[0][0] == "":
        # e.g. "...".format(x): the template is the message
        if node.func.kind == "Attribute" and node.func.attr == "format":
            return message_text(node.func.value)
    return expr_text(node)


def exception_of(node: ir.Node | None) -> tuple[str, str]:
    """(exception class name, message) of a ``raise`` expression."""
    if node is None:
        return "re-raise", ""
    if node.kind == "Call":
        name = dotted(node.func) or expr_text(node.func)
        positional = [v for k, v in node.args if k in ("", None)]
        msg = message_text(positional[0]) if positional else ""
        return name.rsplit(".", 1)[-1], msg
    return (dotted(node) or expr_text(node)).rsplit(".", 1)[-1], ""


def dotted(node: ir.Node | None) -> str:
    if node is None:
        return ""
    if node.kind == "Name":
        return node.id
    if node.kind == "Attribute":
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def const_value(node: ir.Node | None) -> tuple[bool, Any]:
    if node is not None and node.kind == "Const" and isinstance(node.value, _SCALARS):
        return True, node.value
    return False, None


def sub_exprs(node: Any) -> Iterator[ir.Node]:
    """Direct child expressions of an IR expression (not into lambdas' bodies)."""
    if node is None:
        return
    k = node.kind
    if k in ("Name", "Const", "UnsupportedExpr", "Lambda"):
        return
    if k == "Call":
        yield node.func
        for _kind, v in node.args:
            yield v
        return
    if k == "DictExpr":
        for key, v in node.items:
            if key is not None:
                yield key
            yield v
        return
    if k == "JoinedStr":
        for p in node.parts:
            if p.kind == "FormattedValue":
                yield p.value
        return
    if k in ("ListComp", "SetComp", "GeneratorExp", "DictComp"):
        for target, it, ifs in node.generators:
            yield target
            yield it
            yield from ifs
        for attr in ("elt", "key", "value"):
            v = getattr(node, attr, None)
            if isinstance(v, ir.Node):
                yield v
        return
    for slot in node._all_slots():
        if slot == "line":
            continue
        v = getattr(node, slot)
        if isinstance(v, ir.Node):
            yield v
        elif isinstance(v, list):
            for item in v:
                if isinstance(item, ir.Node):
                    yield item


def walk_expr(node: ir.Node | None) -> Iterator[ir.Node]:
    if node is None:
        return
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(sub_exprs(n))
