"""The intermediate representation the evaluator runs on.

The front end (``frontend``) turns a libcst module into these nodes once per file
content; they are plain, picklable objects so the extracted form can be cached and a
warm run never touches libcst.  One class per Python construct; ``kind`` is the class
name and is what the evaluator dispatches on (Byterun style).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any


class Node:
    """Base node: ``line`` is the 1-based source line of the node's first token."""

    __slots__ = ("line",)
    kind = "Node"

    def __init__(self, line: int) -> None:
        self.line = line

    @classmethod
    def _all_slots(cls) -> tuple[str, ...]:
        slots: list[str] = []
        for klass in reversed(cls.__mro__):
            slots.extend(getattr(klass, "__slots__", ()))
        return tuple(slots)

    def __repr__(self) -> str:  # for debugging only
        fields = ", ".join(f"{s}={getattr(self, s)!r}" for s in self._all_slots())
        return f"{type(self).__name__}({fields})"


def _node(name: str, *fields: str) -> type[Node]:
    """Define a node class with the given fields (positional in this order after line)."""

    def __init__(self: Node, line: int, *args: Any) -> None:
        self.line = line
        for field, value in zip(fields, args, strict=False):
            setattr(self, field, value)

    cls = type(
        name,
        (Node,),
        {"__slots__": fields, "__init__": __init__, "kind": name, "__module__": __name__},
    )
    return cls


# ---- statements -----------------------------------------------------------------------
Module = _node("Module", "body")
# params: list[Param]; decorators: list[expr]; end_line: last line of the def
FunctionDef = _node("FunctionDef", "name", "params", "body", "decorators", "end_line")
Param = _node("Param", "name", "star", "default")  # star: "" | "*" | "**" | "kwonly"
ClassDef = _node("ClassDef", "name", "bases", "keywords", "body", "decorators", "end_line")
Return = _node("Return", "value")
Assign = _node("Assign", "targets", "value", "text")
AugAssign = _node("AugAssign", "target", "op", "value", "text")
AnnAssign = _node("AnnAssign", "target", "annotation", "value", "text")
If = _node("If", "test", "body", "orelse", "text", "is_elif")
For = _node("For", "target", "iter", "body", "orelse")
While = _node("While", "test", "body", "orelse", "text")
# handlers: list[Handler]
Try = _node("Try", "body", "handlers", "orelse", "finalbody")
Handler = _node("Handler", "type", "name", "body")
With = _node("With", "items", "body")  # items: list[(expr, target|None)]
Raise = _node("Raise", "exc", "cause", "text")
Assert = _node("Assert", "test", "msg", "text")
Import = _node("Import", "names")  # names: list[(dotted, asname|None)]
ImportFrom = _node("ImportFrom", "module", "level", "names")  # names: list[(name, asname)] | "*"
ExprStmt = _node("ExprStmt", "value")
Pass = _node("Pass")
Break = _node("Break")
Continue = _node("Continue")
Global = _node("Global", "names")
Nonlocal = _node("Nonlocal", "names")
Delete = _node("Delete", "targets")
Unsupported = _node("Unsupported", "what")

# ---- expressions ----------------------------------------------------------------------
Name = _node("Name", "id")
Const = _node("Const", "value")
JoinedStr = _node("JoinedStr", "parts")  # parts: list[Const | FormattedValue]
FormattedValue = _node("FormattedValue", "value", "conversion", "spec")
Attribute = _node("Attribute", "value", "attr")
Subscript = _node("Subscript", "value", "index")
Slice = _node("Slice", "lower", "upper", "step")
# args: list[(kind, expr)], kind "" positional, "*" star, "**" double star, else keyword name
Call = _node("Call", "func", "args", "text")
BinOp = _node("BinOp", "op", "left", "right")
UnaryOp = _node("UnaryOp", "op", "operand")
BoolOp = _node("BoolOp", "op", "values")
Compare = _node("Compare", "left", "ops", "comparators")
IfExp = _node("IfExp", "test", "body", "orelse", "text")
ListExpr = _node("ListExpr", "elts")
TupleExpr = _node("TupleExpr", "elts")
SetExpr = _node("SetExpr", "elts")
DictExpr = _node("DictExpr", "items")  # items: list[(key|None, value)]; None key = **value
Starred = _node("Starred", "value")
# generators: list[(target, iter, ifs)]
ListComp = _node("ListComp", "elt", "generators")
SetComp = _node("SetComp", "elt", "generators")
GeneratorExp = _node("GeneratorExp", "elt", "generators")
DictComp = _node("DictComp", "key", "value", "generators")
Lambda = _node("Lambda", "params", "body")
NamedExpr = _node("NamedExpr", "target", "value")
Await = _node("Await", "value")
Yield = _node("Yield", "value")
UnsupportedExpr = _node("UnsupportedExpr", "what")

STATEMENT_KINDS = frozenset(
    k.kind
    for k in (
        Module, FunctionDef, ClassDef, Return, Assign, AugAssign, AnnAssign, If, For, While,
        Try, With, Raise, Assert, Import, ImportFrom, ExprStmt, Pass, Break, Continue, Global,
        Nonlocal, Delete, Unsupported,
    )
)


def walk(nodes: Any) -> Iterator[Node]:
    """Every node under ``nodes`` (a node or a list), statements and expressions, breadth first
    (source order within a body)."""
    stack = deque(nodes) if isinstance(nodes, list) else deque([nodes])
    while stack:
        node = stack.popleft()  # list.pop(0) made a walk of a large module quadratic
        if isinstance(node, Node):
            yield node
            for slot in getattr(node, "__slots__", ()) or getattr(node, "__dataclass_fields__", {}):
                child = getattr(node, slot, None)
                if isinstance(child, Node):
                    stack.append(child)
                elif isinstance(child, (list, tuple)):
                    stack.extend(c for c in child if isinstance(c, (Node, list, tuple)))
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
