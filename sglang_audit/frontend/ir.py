"""The intermediate representation the evaluator runs on.

The front end (``frontend``) turns a libcst module into these nodes once per file
content; they are plain, picklable objects so the extracted form can be cached and a
warm run never touches libcst.  One class per Python construct; ``kind`` is the class
name and is what the evaluator dispatches on (Byterun style).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any


class Node:
    """Base node: ``line`` is the 1-based source line of the node's first token."""

    __slots__ = ("line",)
    kind = "Node"

    if TYPE_CHECKING:
        # For the type checker only: the node classes are made by ``_node`` and dispatched on
        # ``kind`` (a string), so the checker sees every field of every kind on ``Node``; the kind
        # says which are set. A field whose type differs between kinds is ``Any`` (``value``: a
        # node, or a constant on ``Const``; ``body``/``orelse``: a block, or an expression on
        # ``Lambda``/``IfExp``; ``names``: pairs, ``"*"`` or plain names).
        def __init__(self, line: int, *fields: Any) -> None: ...

        line: int
        # statements
        body: Any
        orelse: Any
        name: Any  # str; None on a bare ``except:`` handler
        params: list[Node]
        decorators: list[Node]
        end_line: int
        star: str
        default: Node | None
        bases: list[Node]
        keywords: list[tuple[str, Node]]
        value: Any
        targets: list[Node]
        target: Node
        text: Any  # the statement's source; None on ``Call``
        op: str
        annotation: Node
        test: Node
        is_elif: bool
        iter: Node
        handlers: list[Node]
        finalbody: list[Node]
        type: Node | None
        items: Any  # ``With``: (expr, target | None) pairs; ``DictExpr``: (key | None, value)
        exc: Node | None
        cause: Node | None
        msg: Node | None
        names: Any
        module: str | None
        level: int
        what: str
        # expressions
        id: str
        parts: list[Node]
        conversion: Any
        spec: Any
        attr: str
        index: Node
        lower: Node | None
        upper: Node | None
        step: Node | None
        func: Node
        args: list[tuple[str, Node]]
        left: Node
        right: Node
        operand: Node
        values: list[Node]
        ops: list[str]
        comparators: list[Node]
        elts: list[Node]
        elt: Node
        generators: list[tuple[Node, Node, list[Node]]]
        key: Node
    else:

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


if TYPE_CHECKING:
    # For the type checker: one class per kind (made by ``_node`` below at run time), so an
    # annotation or ``isinstance`` names the kind; the fields are declared on ``Node``.
    class Module(Node): ...
    class FunctionDef(Node): ...
    class Param(Node): ...
    class ClassDef(Node): ...
    class Return(Node): ...
    class Assign(Node): ...
    class AugAssign(Node): ...
    class AnnAssign(Node): ...
    class If(Node): ...
    class For(Node): ...
    class While(Node): ...
    class Try(Node): ...
    class Handler(Node): ...
    class With(Node): ...
    class Raise(Node): ...
    class Assert(Node): ...
    class Import(Node): ...
    class ImportFrom(Node): ...
    class ExprStmt(Node): ...
    class Pass(Node): ...
    class Break(Node): ...
    class Continue(Node): ...
    class Global(Node): ...
    class Nonlocal(Node): ...
    class Delete(Node): ...
    class Unsupported(Node): ...
    class Name(Node): ...
    class Const(Node): ...
    class JoinedStr(Node): ...
    class FormattedValue(Node): ...
    class Attribute(Node): ...
    class Subscript(Node): ...
    class Slice(Node): ...
    class Call(Node): ...
    class BinOp(Node): ...
    class UnaryOp(Node): ...
    class BoolOp(Node): ...
    class Compare(Node): ...
    class IfExp(Node): ...
    class ListExpr(Node): ...
    class TupleExpr(Node): ...
    class SetExpr(Node): ...
    class DictExpr(Node): ...
    class Starred(Node): ...
    class ListComp(Node): ...
    class SetComp(Node): ...
    class GeneratorExp(Node): ...
    class DictComp(Node): ...
    class Lambda(Node): ...
    class NamedExpr(Node): ...
    class Await(Node): ...
    class Yield(Node): ...
    class UnsupportedExpr(Node): ...
else:
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


_SCOPES = ("FunctionDef", "ClassDef", "Lambda")


def walk(nodes: Any, into_scopes: bool = True) -> Iterator[Node]:
    """Every node under ``nodes`` (a node or a list), statements and expressions, breadth first
    (source order within a body). ``into_scopes=False``: a function, class or lambda below the
    root is yielded but not entered (its body is another scope's)."""
    roots = nodes if isinstance(nodes, list) else [nodes]
    stack = deque(roots)
    while stack:
        node = stack.popleft()  # list.pop(0) made a walk of a large module quadratic
        if isinstance(node, Node):
            yield node
            if not into_scopes and node.kind in _SCOPES and node is not nodes:
                continue
            for slot in getattr(node, "__slots__", ()) or getattr(node, "__dataclass_fields__", {}):
                child = getattr(node, slot, None)
                if isinstance(child, Node):
                    stack.append(child)
                elif isinstance(child, (list, tuple)):
                    stack.extend(c for c in child if isinstance(c, (Node, list, tuple)))
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
