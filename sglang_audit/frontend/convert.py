"""Front end, the libcst half: a parsed libcst module → IR (``ir``), with line numbers.

Split from ``parse`` so that a run served from the IR or result cache never imports
libcst (~0.12 s of a CLI start): ``parse.convert_source`` imports this module on the
first file it has to parse.

Speed (see docs/performance.md): line numbers come from a line-only codegen pass
(``_LineState``) that reproduces libcst's ``PositionProvider`` lines about ten times
faster.
"""

from __future__ import annotations

import codecs
import re
from typing import Any, cast, overload

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import MetadataWrapper, PositionProvider

from sglang_audit.frontend import ir
from sglang_audit.frontend.limits import MAX_TEXT, ParseFailure, TooComplex, check_source

_BINOPS = {
    "Add": "+", "Subtract": "-", "Multiply": "*", "Divide": "/", "FloorDivide": "//",
    "Modulo": "%", "Power": "**", "LeftShift": "<<", "RightShift": ">>", "BitOr": "|",
    "BitAnd": "&", "BitXor": "^", "MatrixMultiply": "@",
}
_AUGOPS = {k + "Assign": v for k, v in _BINOPS.items()}
_CMPOPS = {
    "Equal": "==", "NotEqual": "!=", "LessThan": "<", "LessThanEqual": "<=",
    "GreaterThan": ">", "GreaterThanEqual": ">=", "In": "in", "NotIn": "not in",
    "Is": "is", "IsNot": "is not",
}
_UNOPS = {"Not": "not", "Minus": "-", "Plus": "+", "BitInvert": "~"}


class _Converter:
    """Walks one libcst module; one ``c_<NodeType>`` method per libcst node type."""

    def __init__(self, module: cst.Module, spans: dict[cst.CSTNode, tuple[int, int]]) -> None:
        self.module = module
        self.spans = spans  # node -> (start line, end line), see line_spans()

    # -- helpers ------------------------------------------------------------------------
    def line(self, node: cst.CSTNode) -> int:
        span = self.spans.get(node)
        return span[0] if span is not None else 0

    def end_line(self, node: cst.CSTNode) -> int:
        span = self.spans.get(node)
        return span[1] if span is not None else 0

    def text(self, node: cst.CSTNode) -> str:
        code = self.module.code_for_node(node)
        code = " ".join(code.split())
        return code if len(code) <= MAX_TEXT else code[: MAX_TEXT - 3] + "..."

    def block(self, body: Any) -> list[ir.Node]:
        stmts = body.body if hasattr(body, "body") else body
        out: list[ir.Node] = []
        for stmt in stmts:
            if isinstance(stmt, cst.SimpleStatementLine):
                out.extend(self.small(s, stmt) for s in stmt.body)
            elif isinstance(stmt, cst.BaseSmallStatement):
                out.append(self.small(stmt, stmt))
            else:
                out.append(self.stmt(stmt))
        return out

    def stmt(self, node: cst.CSTNode) -> ir.Node:
        method = getattr(self, "c_" + type(node).__name__, None)
        if method is None:
            return ir.Unsupported(self.line(node), type(node).__name__)
        return method(node)

    def small(self, node: cst.CSTNode, line_node: cst.CSTNode) -> ir.Node:
        method = getattr(self, "c_" + type(node).__name__, None)
        if method is None:
            return ir.Unsupported(self.line(line_node), type(node).__name__)
        return method(node)

    @overload
    def expr(self, node: None) -> None: ...
    @overload
    def expr(self, node: cst.CSTNode) -> ir.Node: ...
    @overload
    def expr(self, node: cst.CSTNode | None) -> ir.Node | None: ...
    def expr(self, node: cst.CSTNode | None) -> ir.Node | None:
        if node is None:
            return None
        method = getattr(self, "e_" + type(node).__name__, None)
        if method is None:
            return ir.UnsupportedExpr(self.line(node), type(node).__name__)
        return method(node)

    def params(self, params: cst.Parameters) -> list[ir.Node]:
        out: list[ir.Node] = []
        for p in params.posonly_params:
            out.append(ir.Param(self.line(p), p.name.value, "", self.expr(p.default)))
        for p in params.params:
            out.append(ir.Param(self.line(p), p.name.value, "", self.expr(p.default)))
        if isinstance(params.star_arg, cst.Param):
            out.append(ir.Param(self.line(params.star_arg), params.star_arg.name.value, "*", None))
        for p in params.kwonly_params:
            out.append(ir.Param(self.line(p), p.name.value, "kwonly", self.expr(p.default)))
        if isinstance(params.star_kwarg, cst.Param):
            out.append(
                ir.Param(self.line(params.star_kwarg), params.star_kwarg.name.value, "**", None)
            )
        return out

    def orelse(self, node: Any) -> list[ir.Node]:
        if node is None:
            return []
        if isinstance(node, cst.If):
            return [self.c_If(node, is_elif=True)]
        return self.block(node.body)

    # -- statements ---------------------------------------------------------------------
    def c_FunctionDef(self, node: cst.FunctionDef) -> ir.Node:
        return ir.FunctionDef(
            self.line(node),
            node.name.value,
            self.params(node.params),
            self.block(node.body),
            [self.expr(d.decorator) for d in node.decorators],
            self.end_line(node),
        )

    def c_ClassDef(self, node: cst.ClassDef) -> ir.Node:
        return ir.ClassDef(
            self.line(node),
            node.name.value,
            [self.expr(a.value) for a in node.bases],
            [(a.keyword.value, self.expr(a.value)) for a in node.keywords if a.keyword],
            self.block(node.body),
            [self.expr(d.decorator) for d in node.decorators],
            self.end_line(node),
        )

    def c_If(self, node: cst.If, is_elif: bool = False) -> ir.Node:
        return ir.If(
            self.line(node),
            self.expr(node.test),
            self.block(node.body),
            self.orelse(node.orelse),
            self.text(node.test),
            is_elif,
        )

    def c_For(self, node: cst.For) -> ir.Node:
        return ir.For(
            self.line(node),
            self.expr(node.target),
            self.expr(node.iter),
            self.block(node.body),
            self.orelse(node.orelse),
        )

    def c_While(self, node: cst.While) -> ir.Node:
        return ir.While(
            self.line(node),
            self.expr(node.test),
            self.block(node.body),
            self.orelse(node.orelse),
            self.text(node.test),
        )

    def c_Try(self, node: cst.Try) -> ir.Node:
        handlers = [
            ir.Handler(
                self.line(h),
                self.expr(h.type),
                h.name.name.value if h.name and isinstance(h.name.name, cst.Name) else None,
                self.block(h.body),
            )
            for h in node.handlers
        ]
        return ir.Try(
            self.line(node),
            self.block(node.body),
            handlers,
            self.orelse(node.orelse),
            self.block(node.finalbody.body) if node.finalbody else [],
        )

    c_TryStar = c_Try

    def c_With(self, node: cst.With) -> ir.Node:
        items = [
            (self.expr(i.item), self.expr(i.asname.name) if i.asname else None)
            for i in node.items
        ]
        return ir.With(self.line(node), items, self.block(node.body))

    def c_Expr(self, node: cst.Expr) -> ir.Node:
        return ir.ExprStmt(self.line(node), self.expr(node.value))

    def c_Assign(self, node: cst.Assign) -> ir.Node:
        return ir.Assign(
            self.line(node),
            [self.expr(t.target) for t in node.targets],
            self.expr(node.value),
            self.text(node),
        )

    def c_AnnAssign(self, node: cst.AnnAssign) -> ir.Node:
        return ir.AnnAssign(
            self.line(node),
            self.expr(node.target),
            self.expr(node.annotation.annotation),
            self.expr(node.value),
            self.text(node),
        )

    def c_AugAssign(self, node: cst.AugAssign) -> ir.Node:
        return ir.AugAssign(
            self.line(node),
            self.expr(node.target),
            _AUGOPS.get(type(node.operator).__name__, "?"),
            self.expr(node.value),
            self.text(node),
        )

    def c_Return(self, node: cst.Return) -> ir.Node:
        return ir.Return(self.line(node), self.expr(node.value))

    def c_Raise(self, node: cst.Raise) -> ir.Node:
        cause = node.cause.item if node.cause else None
        return ir.Raise(self.line(node), self.expr(node.exc), self.expr(cause), self.text(node))

    def c_Assert(self, node: cst.Assert) -> ir.Node:
        return ir.Assert(
            self.line(node), self.expr(node.test), self.expr(node.msg), self.text(node.test)
        )

    def c_Import(self, node: cst.Import) -> ir.Node:
        names = [
            (_dotted(a.name), cast(cst.Name, a.asname.name).value if a.asname else None)
            for a in node.names
        ]
        return ir.Import(self.line(node), names)

    def c_ImportFrom(self, node: cst.ImportFrom) -> ir.Node:
        module = _dotted(node.module) if node.module is not None else ""
        if isinstance(node.names, cst.ImportStar):
            names: Any = "*"
        else:
            names = [
                (_dotted(a.name), cast(cst.Name, a.asname.name).value if a.asname else None)
                for a in node.names
            ]
        return ir.ImportFrom(self.line(node), module, len(node.relative), names)

    def c_Pass(self, node: cst.Pass) -> ir.Node:
        return ir.Pass(self.line(node))

    def c_Break(self, node: cst.Break) -> ir.Node:
        return ir.Break(self.line(node))

    def c_Continue(self, node: cst.Continue) -> ir.Node:
        return ir.Continue(self.line(node))

    def c_Global(self, node: cst.Global) -> ir.Node:
        return ir.Global(self.line(node), [n.name.value for n in node.names])

    def c_Nonlocal(self, node: cst.Nonlocal) -> ir.Node:
        return ir.Nonlocal(self.line(node), [n.name.value for n in node.names])

    def c_Del(self, node: cst.Del) -> ir.Node:
        target = node.target
        targets = [e.value for e in target.elements] if isinstance(target, cst.Tuple) else [target]
        return ir.Delete(self.line(node), [self.expr(t) for t in targets])

    # -- expressions --------------------------------------------------------------------
    def e_Name(self, node: cst.Name) -> ir.Node:
        if node.value in ("True", "False", "None"):
            return ir.Const(self.line(node), {"True": True, "False": False, "None": None}[node.value])
        return ir.Name(self.line(node), node.value)

    def e_Integer(self, node: cst.Integer) -> ir.Node:
        return ir.Const(self.line(node), node.evaluated_value)

    def e_Float(self, node: cst.Float) -> ir.Node:
        return ir.Const(self.line(node), node.evaluated_value)

    def e_Imaginary(self, node: cst.Imaginary) -> ir.Node:
        return ir.Const(self.line(node), node.evaluated_value)

    def e_Ellipsis(self, node: cst.Ellipsis) -> ir.Node:
        return ir.Const(self.line(node), ...)

    def e_SimpleString(self, node: cst.SimpleString) -> ir.Node:
        return ir.Const(self.line(node), node.evaluated_value)

    def e_ConcatenatedString(self, node: cst.ConcatenatedString) -> ir.Node:
        left = self.expr(node.left)
        right = self.expr(node.right)
        parts: list[ir.Node] = []
        for side in (left, right):
            parts.extend(side.parts if isinstance(side, ir.JoinedStr) else [side])
        if all(isinstance(p, ir.Const) for p in parts):
            return ir.Const(self.line(node), "".join(_as_text(p.value) for p in parts))
        return ir.JoinedStr(self.line(node), parts)

    def e_FormattedString(self, node: cst.FormattedString, raw: bool | None = None) -> ir.Node:
        if raw is None:
            raw = "r" in node.prefix.lower()
        parts: list[ir.Node] = []
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                text = part.value.replace("{{", "{").replace("}}", "}")
                parts.append(ir.Const(self.line(node), text if raw else _unescape(text)))
            else:
                fpart = cast(cst.FormattedStringExpression, part)
                spec = None
                if fpart.format_spec:
                    spec = self.e_FormattedString(
                        cst.FormattedString(parts=fpart.format_spec, start='f"', end='"'), raw
                    )
                parts.append(
                    ir.FormattedValue(self.line(node), self.expr(fpart.expression), fpart.conversion, spec)
                )
        return ir.JoinedStr(self.line(node), parts)

    def e_Attribute(self, node: cst.Attribute) -> ir.Node:
        return ir.Attribute(self.line(node), self.expr(node.value), node.attr.value)

    def e_Subscript(self, node: cst.Subscript) -> ir.Node:
        elems = [self._slice(e.slice) for e in node.slice]
        index = elems[0] if len(elems) == 1 else ir.TupleExpr(self.line(node), elems)
        return ir.Subscript(self.line(node), self.expr(node.value), index)

    def _slice(self, s: Any) -> ir.Node:
        if isinstance(s, cst.Index):
            return self.expr(s.value)
        return ir.Slice(self.line(s), self.expr(s.lower), self.expr(s.upper), self.expr(s.step))

    def e_Call(self, node: cst.Call) -> ir.Node:
        args: list[tuple[str, ir.Node]] = []
        for a in node.args:
            kind = a.keyword.value if a.keyword else a.star
            args.append((kind, self.expr(a.value)))
        return ir.Call(self.line(node), self.expr(node.func), args, None)

    def e_BinaryOperation(self, node: cst.BinaryOperation) -> ir.Node:
        return ir.BinOp(
            self.line(node),
            _BINOPS.get(type(node.operator).__name__, "?"),
            self.expr(node.left),
            self.expr(node.right),
        )

    def e_UnaryOperation(self, node: cst.UnaryOperation) -> ir.Node:
        return ir.UnaryOp(
            self.line(node), _UNOPS.get(type(node.operator).__name__, "?"), self.expr(node.expression)
        )

    def e_BooleanOperation(self, node: cst.BooleanOperation) -> ir.Node:
        op = "and" if isinstance(node.operator, cst.And) else "or"
        values: list[ir.Node] = []
        for side in (node.left, node.right):
            conv = self.expr(side)
            # flatten a chain of the same operator, as Python's own AST does
            if (
                isinstance(side, cst.BooleanOperation)
                and not side.lpar
                and isinstance(conv, ir.BoolOp)
                and conv.op == op
            ):
                values.extend(conv.values)
            else:
                values.append(conv)
        return ir.BoolOp(self.line(node), op, values)

    def e_Comparison(self, node: cst.Comparison) -> ir.Node:
        return ir.Compare(
            self.line(node),
            self.expr(node.left),
            [_CMPOPS.get(type(c.operator).__name__, "?") for c in node.comparisons],
            [self.expr(c.comparator) for c in node.comparisons],
        )

    def e_IfExp(self, node: cst.IfExp) -> ir.Node:
        return ir.IfExp(
            self.line(node),
            self.expr(node.test),
            self.expr(node.body),
            self.expr(node.orelse),
            self.text(node.test),
        )

    def _elts(self, elements: Any) -> list[ir.Node]:
        out: list[ir.Node] = []
        for e in elements:
            if isinstance(e, cst.StarredElement):
                out.append(ir.Starred(self.line(e), self.expr(e.value)))
            else:
                out.append(self.expr(e.value))
        return out

    def e_List(self, node: cst.List) -> ir.Node:
        return ir.ListExpr(self.line(node), self._elts(node.elements))

    def e_Tuple(self, node: cst.Tuple) -> ir.Node:
        return ir.TupleExpr(self.line(node), self._elts(node.elements))

    def e_Set(self, node: cst.Set) -> ir.Node:
        return ir.SetExpr(self.line(node), self._elts(node.elements))

    def e_Dict(self, node: cst.Dict) -> ir.Node:
        items: list[tuple[ir.Node | None, ir.Node]] = []
        for e in node.elements:
            if isinstance(e, cst.StarredDictElement):
                items.append((None, self.expr(e.value)))
            else:
                items.append((self.expr(cast(cst.DictElement, e).key), self.expr(e.value)))
        return ir.DictExpr(self.line(node), items)

    def _generators(self, comp: Any) -> list[tuple[ir.Node, ir.Node, list[ir.Node]]]:
        gens = []
        while comp is not None:
            gens.append(
                (self.expr(comp.target), self.expr(comp.iter), [self.expr(i.test) for i in comp.ifs])
            )
            comp = comp.inner_for_in
        return gens

    def e_ListComp(self, node: cst.ListComp) -> ir.Node:
        return ir.ListComp(self.line(node), self.expr(node.elt), self._generators(node.for_in))

    def e_SetComp(self, node: cst.SetComp) -> ir.Node:
        return ir.SetComp(self.line(node), self.expr(node.elt), self._generators(node.for_in))

    def e_GeneratorExp(self, node: cst.GeneratorExp) -> ir.Node:
        return ir.GeneratorExp(self.line(node), self.expr(node.elt), self._generators(node.for_in))

    def e_DictComp(self, node: cst.DictComp) -> ir.Node:
        return ir.DictComp(
            self.line(node), self.expr(node.key), self.expr(node.value), self._generators(node.for_in)
        )

    def e_Lambda(self, node: cst.Lambda) -> ir.Node:
        return ir.Lambda(self.line(node), self.params(node.params), self.expr(node.body))

    def e_NamedExpr(self, node: cst.NamedExpr) -> ir.Node:
        return ir.NamedExpr(self.line(node), self.expr(node.target), self.expr(node.value))

    def e_Await(self, node: cst.Await) -> ir.Node:
        return ir.Await(self.line(node), self.expr(node.expression))

    def e_Yield(self, node: cst.Yield) -> ir.Node:
        # the value a context manager generator yields (`yield stack`); `yield from` keeps none
        value = node.value if isinstance(node.value, cst.BaseExpression) else None
        return ir.Yield(self.line(node), None if value is None else self.expr(value))

    def e_StarredElement(self, node: cst.StarredElement) -> ir.Node:
        return ir.Starred(self.line(node), self.expr(node.value))


def _unescape(text: str) -> str:
    """Backslash escapes of a non-raw f-string's literal text (\\n, \\x41, \\u00e9, ...)."""
    if "\\" not in text:
        return text
    try:
        return codecs.decode(text.encode("latin-1", "backslashreplace"), "unicode_escape")
    except (UnicodeDecodeError, ValueError):
        return text


def _as_text(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def _dotted(node: cst.CSTNode) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return _dotted(node.value) + "." + node.attr.value
    raise ValueError(f"not a dotted name: {type(node).__name__}")


_NEWLINE_RE = re.compile(r"\r\n?|\n")


class _Span:
    """``record_syntactic_position`` as a plain context manager (cheaper than a generator)."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: _LineState, node: cst.CSTNode, start_node: cst.CSTNode | None,
                 end_node: cst.CSTNode | None) -> None:
        self.state = state
        self.node = node
        self.start_node = start_node
        self.end_node = end_node
        self.start = 0

    def __enter__(self) -> None:
        self.start = self.state.line

    def __exit__(self, *exc: object) -> None:
        spans = self.state.spans
        start = spans[self.start_node][0] if self.start_node is not None else self.start
        end = spans[self.end_node][1] if self.end_node is not None else self.state.line
        spans[self.node] = (start, end)


class _LineState(CodegenState):
    """A codegen state that tracks only line numbers, with libcst's PositionProvider
    rules (syntactic position when the node records one, else whitespace-inclusive).

    PositionProvider builds a CodePosition/CodeRange object per node and tracks columns,
    which made it the largest cold cost (more than parsing); lines are all we keep."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.line = 1
        self.spans: dict[cst.CSTNode, tuple[int, int]] = {}
        self._starts: list[int] = []

    def add_indent_tokens(self) -> None:
        pass  # indentation holds no newline; the generated text itself is not needed

    def add_token(self, value: str) -> None:
        # "\r\n" and a lone "\r" count once each, as in libcst
        self.line += value.count("\n") if "\r" not in value else len(_NEWLINE_RE.findall(value))

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._starts.append(self.line)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._starts.pop()
        if node not in self.spans:
            self.spans[node] = (start, self.line)

    def record_syntactic_position(self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
                                  end_node: cst.CSTNode | None = None) -> Any:
        return _Span(self, node, start_node, end_node)


def line_spans(module: cst.Module) -> dict[cst.CSTNode, tuple[int, int]]:
    """Start and end line of every node, as libcst's PositionProvider would give them."""
    try:
        state = _LineState(module)
        module._codegen(state)
        return state.spans
    except RecursionError:
        raise
    except Exception:  # a libcst whose codegen protocol changed: use the public provider
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        return {node: (r.start.line, r.end.line) for node, r in positions.items()}


_ERROR_AT = re.compile(r"error at (\d+):\d+")


def _error_line(exc: cst.ParserSyntaxError) -> int:
    # the native parser's raw_line is one past the offending line for parser errors;
    # the "error at LINE:COL" in its message is right
    found = _ERROR_AT.search(exc.message)
    return int(found.group(1)) if found else exc.raw_line


def module_from_source(source: str) -> ir.Node:
    try:
        # before libcst: too deep a nesting overflows its native parser's C stack (SIGSEGV)
        check_source(source)
    except TooComplex as exc:
        raise ParseFailure(f"not analysed: {exc.message}", exc.line) from None
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise ParseFailure(f"syntax error: {exc.message}", _error_line(exc)) from None
    except RecursionError:
        raise ParseFailure("expression nesting too deep to parse") from None
    except Exception as exc:  # a libcst failure on odd input marks this file, not the run
        raise ParseFailure(f"libcst cannot parse it ({type(exc).__name__})") from None
    try:
        conv = _Converter(module, line_spans(module))
        return ir.Module(1, conv.block(module.body))
    except RecursionError:
        raise ParseFailure("expression nesting too deep to analyse") from None
