"""Expressions: one ``e_<Kind>`` method per expression kind of the IR (interpreter.py fills
the dispatch table from them), with names, f-strings and the text of values (str, repr),
containers, comprehensions and call sites."""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable
from typing import Any, cast

from sglang_audit.evaluate.core import (
    EXPR_HANDLERS,
    VALUE_FORMS,
    Frame,
    InterpreterCore,
    PyRaise,
    Unmodelled,
)
from sglang_audit.evaluate.plaindata import CONTAINERS, first_unknown, is_plain, stable_repr
from sglang_audit.evaluate.values import (
    AnalysisBound,
    Class,
    External,
    Function,
    Guard,
    HFConfig,
    Instance,
    LazyImport,
    Scope,
    SuperProxy,
    Unknown,
    negated,
)
from sglang_audit.frontend import ir

_SITE = re.compile(r"\.py:\d+")


class Expressions(InterpreterCore):
    """Evaluates expressions: ``evaluate`` and the ``e_<Kind>`` handlers."""

    def evaluate(self, node: ir.Node, frame: Frame) -> Any:
        return EXPR_HANDLERS[node.__class__](self, node, frame)

    def e_Const(self, node: ir.Node, frame: Frame) -> Any:
        return node.value

    def e_UnsupportedExpr(self, node: ir.Node, frame: Frame) -> Any:
        return Unknown(f"unsupported expression {node.what} at {frame.module.file}:{node.line}")

    def e_Await(self, node: ir.Node, frame: Frame) -> Any:
        return Unknown("await expression")

    def e_Yield(self, node: ir.Node, frame: Frame) -> Any:
        raise Unmodelled(f"generator function at {frame.module.file}:{node.line}")

    def e_Name(self, node: ir.Node, frame: Frame) -> Any:
        name = node.id
        class_ns = frame.class_ns
        if class_ns is None:
            scope = frame.scope
            if scope is not None:
                # the commonest read of all, a local of the innermost function: bound there, so
                # not declared global (CPython refuses `global x` after x is bound)
                local = scope.vars
                if name in local:
                    reads = self.reads
                    if reads is not None:
                        ev = scope.events.get(name)
                        if ev is not None:
                            reads.append(ev)
                    return local[name]
        else:
            if name in class_ns:
                return class_ns[name]
            scope = frame.outer_scope
        if scope is not None and name not in scope.globals_decl:
            s: Scope | None = scope
            while s is not None:
                local = s.vars
                if name in local:
                    reads = self.reads  # note_read, inlined: the most frequent read of all
                    if reads is not None:
                        ev = s.events.get(name)
                        if ev is not None:
                            reads.append(ev)
                    return local[name]
                if s is scope and name in s.local_names and class_ns is None and name not in s.nonlocal_decl:
                    # bound somewhere in this function, not yet here: CPython's UnboundLocalError
                    raised = self.make_raise("UnboundLocalError", f"cannot access local variable '{name}' where it is not associated with a value")
                    raised.site(frame.module.file, node.line)
                    raise raised
                s = s.parent
        module = frame.module
        g = module.globals
        if name in g:
            value = g[name]
            if value.__class__ is LazyImport:
                value = self.resolve_lazy(value)
                g[name] = value
            reads = self.reads
            if reads is not None:
                ev = module.events.get(name)
                if ev is not None:
                    reads.append(ev)
            return value
        if name in self.builtins:
            return self.builtins[name]
        if frame.module.failed:
            return Unknown(f"{frame.module.file} could not be parsed", f"parse:{frame.module.file}")
        raised = self.make_raise("NameError", f"name '{name}' is not defined")
        raised.site(frame.module.file, node.line)
        raise raised

    def e_Attribute(self, node: ir.Node, frame: Frame) -> Any:
        value = node.value  # the hot handlers dispatch inline (one call less per node)
        try:
            return self.getattr(EXPR_HANDLERS[value.__class__](self, value, frame), node.attr)
        except PyRaise as raised:
            # the evaluator's raises name the expression that failed (a no-op until one is
            # raised: the handlers that operate on their operands do this)
            raised.site(frame.module.file, node.line)
            raise

    def e_Subscript(self, node: ir.Node, frame: Frame) -> Any:
        try:
            obj = self.evaluate(node.value, frame)
            index = self.evaluate(node.index, frame)
            return self.getitem(obj, index)
        except PyRaise as raised:
            raised.site(frame.module.file, node.line)
            raise

    def e_Slice(self, node: ir.Node, frame: Frame) -> Any:
        parts = [None if p is None else self.evaluate(p, frame) for p in (node.lower, node.upper, node.step)]
        u = first_unknown(parts)
        return u if u is not None else slice(*parts)

    def e_JoinedStr(self, node: ir.Node, frame: Frame) -> Any:
        try:
            out: list[str] = []
            for part in node.parts:
                if isinstance(part, ir.Const):
                    out.append(str(part.value))
                    continue
                value = self.evaluate(part.value, frame)
                if isinstance(value, Unknown) and not getattr(self, "_message_mode", False):
                    return value
                spec = self.evaluate(part.spec, frame) if part.spec is not None else ""
                out.append(self.format_value(value, part.conversion, spec))
            return "".join(out)
        except PyRaise as raised:
            raised.site(frame.module.file, node.line)
            raise

    def format_value(self, value: Any, conversion: str | None, spec: Any) -> str:
        if isinstance(value, Unknown):
            return "<?>"
        if conversion == "r":
            text = self.repr_of(value)
        elif conversion == "a":
            text = ascii(value) if is_plain(value) else self.to_str(value)
        else:
            text = self.to_str(value)
        if spec and isinstance(spec, str) and any(len(w) > 6 for w in re.findall(r"\d+", spec)):
            raise AnalysisBound("analysis bound reached: format width too large")
        if spec and isinstance(spec, str) and is_plain(value):
            # as CPython: f"{x!r:>8}" formats the converted text, f"{None:>3}" is a TypeError
            subject = text if conversion in ("r", "s", "a") else value
            return cast(str, self.data_op(lambda: format(subject, spec)))
        return text

    def repr_of(self, value: Any) -> str:
        """``repr(value)``: plain data as CPython; an exception as ``ValueError('x')``."""
        self.charge_walk(value)
        if is_plain(value):
            return stable_repr(value)
        if isinstance(value, Instance):
            found, meth = value.cls.lookup("__repr__")
            if found and isinstance(meth, Function):
                result = self.call(self.bind(meth, value, value.cls), [], {})
                return result if isinstance(result, str) else "<?>"
            if "exception" in value.cls.flags:
                args = value.attrs.get("args", ())
                return f"{value.cls.name}({', '.join(self.repr_of(a) for a in args)})"
        return self.to_str(value)

    def to_str(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        self.charge_walk(value)
        if is_plain(value):
            return stable_repr(value) if type(value) in CONTAINERS else str(value)
        if isinstance(value, Instance):
            if "enum" in value.cls.flags and "_name_" in value.attrs:
                if "str_mixin" in value.cls.flags:
                    return str(value.attrs.get("_value_"))
                return f"{value.cls.name}.{value.attrs['_name_']}"
            found, meth = value.cls.lookup("__str__")
            if "exception" in value.cls.flags and not (found and isinstance(meth, Function)):
                args = value.attrs.get("args", ())
                if len(args) == 1 and is_plain(args[0]) and value.cls.is_subclass_of(self.exc_classes["KeyError"]):
                    return repr(args[0])
                if len(args) == 1:
                    return self.to_str(args[0])
                # several arguments: str() of the exception is the repr of the args tuple
                return "(" + ", ".join(self.repr_of(a) for a in args) + ")" if args else ""
            found, meth = value.cls.lookup("__str__")
            if found and isinstance(meth, Function):
                result = self.call(self.bind(meth, value, value.cls), [], {})
                return result if isinstance(result, str) else "<?>"
            return f"<{value.cls.name} object>"
        if isinstance(value, Unknown):
            return "<?>"
        if isinstance(value, Class):
            return f"<class '{value.name}'>"
        if isinstance(value, HFConfig):
            return f"{value.attrs.get('model_type')}Config"
        native = self.natives.to_str(value)
        if native is not None:
            return native
        if isinstance(value, External):
            return f"<{value.path}>"
        return f"<{type(value).__name__}>"

    def e_ListExpr(self, node: ir.Node, frame: Frame) -> Any:
        try:
            return self.build_seq(node.elts, frame)
        except PyRaise as raised:
            raised.site(frame.module.file, node.line)
            raise

    def e_TupleExpr(self, node: ir.Node, frame: Frame) -> Any:
        try:
            return tuple(self.build_seq(node.elts, frame))
        except PyRaise as raised:
            raised.site(frame.module.file, node.line)
            raise

    def e_SetExpr(self, node: ir.Node, frame: Frame) -> Any:
        try:
            items = self.build_seq(node.elts, frame)
            u = first_unknown(items)
            if u is not None:
                return Unknown(f"set containing an unknown ({u.reason})", u.key)
            return self.data_op(lambda: set(items))
        except PyRaise as raised:
            raised.site(frame.module.file, node.line)
            raise

    def build_seq(self, elts: list[ir.Node], frame: Frame) -> list[Any]:
        out: list[Any] = []
        for e in elts:
            if isinstance(e, ir.Starred):
                value = self.evaluate(e.value, frame)
                if isinstance(value, Unknown):
                    raise Unmodelled(f"unpacking an unknown value at {frame.module.file}:{e.line}")
                out.extend(self.iterate(value, frame, e.line))
            else:
                out.append(EXPR_HANDLERS[e.__class__](self, e, frame))
        return out

    def e_Starred(self, node: ir.Node, frame: Frame) -> Any:
        return self.evaluate(node.value, frame)

    def e_DictExpr(self, node: ir.Node, frame: Frame) -> Any:
        try:
            out: dict[Any, Any] = {}
            for key_node, value_node in node.items:
                if key_node is None:
                    value = self.evaluate(value_node, frame)
                    if isinstance(value, dict):
                        out.update(value)
                    elif isinstance(value, Unknown):
                        raise Unmodelled(f"** of an unknown mapping at {frame.module.file}:{node.line}")
                    else:
                        out.update(self.mapping_items(value))
                    continue
                key = self.evaluate(key_node, frame)
                if isinstance(key, str) and key in self.tracked_keys:
                    value, reads = self.evaluate_reads(value_node, frame)
                    self.note_keyed(key, value, frame, value_node.line, reads, VALUE_FORMS.get(value_node.kind, "expr"), value_node)
                else:
                    value = self.evaluate(value_node, frame)
                if isinstance(key, Unknown):
                    raise Unmodelled(f"dict with an unknown key at {frame.module.file}:{node.line}")
                self.data_op(functools.partial(out.__setitem__, key, value))
            return out
        except PyRaise as raised:
            raised.site(frame.module.file, node.line)
            raise

    def e_BinOp(self, node: ir.Node, frame: Frame) -> Any:
        try:
            left = self.evaluate(node.left, frame)
            right = self.evaluate(node.right, frame)
            return self.binop(node.op, left, right)
        except PyRaise as raised:
            raised.site(frame.module.file, node.line)
            raise

    def e_UnaryOp(self, node: ir.Node, frame: Frame) -> Any:
        try:
            value = self.evaluate(node.operand, frame)
            if node.op == "not":
                t = self.truth_value(value)
                if isinstance(t, Unknown):
                    return negated(t)
                return not t
            if isinstance(value, Unknown):
                return value
            if is_plain(value):
                unary: dict[str, Callable[[Any], Any]] = {"-": operator.neg, "+": operator.pos, "~": operator.invert}
                fn = unary[node.op]
                return self.data_op(lambda: fn(value))
            return Unknown(f"unary {node.op}")
        except PyRaise as raised:
            raised.site(frame.module.file, node.line)
            raise

    def e_BoolOp(self, node: ir.Node, frame: Frame) -> Any:
        # short-circuit; an unknown operand becomes a decision only when its truth matters
        value: Any = None
        for i, sub in enumerate(node.values):
            value = EXPR_HANDLERS[sub.__class__](self, sub, frame)
            if i == len(node.values) - 1:
                return value
            t = self.truth_value(value)
            if isinstance(t, Unknown):
                t = self.decide(t, frame.module.file, sub.line, f"{node.op}-operand")
            if node.op == "and" and not t:
                return value
            if node.op == "or" and t:
                return value
        return value

    def e_Compare(self, node: ir.Node, frame: Frame) -> Any:
        try:
            left_node = node.left
            left = EXPR_HANDLERS[left_node.__class__](self, left_node, frame)
            result: Any = True
            for op, comp_node in zip(node.ops, node.comparators, strict=False):
                right = EXPR_HANDLERS[comp_node.__class__](self, comp_node, frame)
                r = self.compare(op, left, right)
                if isinstance(r, Unknown):
                    return r
                if getattr(r, "native_truth", None) is not None:
                    # a world's value (an elementwise comparison of tensors): its truth is the world's
                    t = self.truth_value(r)
                    if len(node.ops) == 1 or isinstance(t, Unknown):
                        return r if len(node.ops) == 1 else t
                    r = t
                if not r:
                    return False
                left = right
            return result
        except PyRaise as raised:
            raised.site(frame.module.file, node.line)
            raise

    def e_IfExp(self, node: ir.Node, frame: Frame) -> Any:
        test, reads = self.evaluate_reads(node.test, frame)
        truth = self.truth(test, frame, node.line, node.text)
        self.guards.append(Guard(frame.module.file, node.line, node.text, truth, tuple(reads)))
        self.guard_tuple = None
        try:
            return self.evaluate(node.body if truth else node.orelse, frame)
        finally:
            self.guards.pop()
            self.guard_tuple = None

    def e_NamedExpr(self, node: ir.Node, frame: Frame) -> Any:
        value = self.evaluate(node.value, frame)
        self.assign(node.target, value, frame, node.line, "walrus", [])
        return value

    def e_Lambda(self, node: ir.Node, frame: Frame) -> Any:
        return self.make_function("<lambda>", node.params, node.body, frame, node.line, True)

    def comprehension(self, node: ir.Node, frame: Frame, emit: Callable[[Frame], None]) -> None:
        scope = Scope(parent=frame.scope)
        if frame.scope is not None:
            scope.globals_decl = frame.scope.globals_decl
        inner = Frame(module=frame.module, scope=scope, func=frame.func, depth=frame.depth)
        if frame.class_ns is not None:
            inner.scope = Scope(parent=None)

        def loop(i: int) -> None:
            if i == len(node.generators):
                emit(inner)
                return
            target, iter_node, ifs = node.generators[i]
            iterable = self.evaluate(iter_node, inner if i else frame)
            if isinstance(iterable, Unknown):
                raise Unmodelled(f"comprehension over an unknown value at {frame.module.file}:{node.line} ({iterable.reason})")
            for item in self.iterate(iterable, frame, node.line):
                self.steps += 1
                if self.steps > self.bounds.max_steps:
                    raise AnalysisBound("analysis bound reached: too many steps")
                self.assign(target, item, inner, node.line, "", [])
                ok = True
                for cond in ifs:
                    c = self.evaluate(cond, inner)
                    if not self.truth(c, inner, cond.line, "comprehension condition"):
                        ok = False
                        break
                if ok:
                    loop(i + 1)

        loop(0)

    def e_ListComp(self, node: ir.Node, frame: Frame) -> Any:
        try:
            out: list[Any] = []
            self.comprehension(node, frame, lambda f: out.append(self.evaluate(node.elt, f)))
            return out
        except PyRaise as raised:
            raised.site(frame.module.file, node.line)
            raise

    e_GeneratorExp = e_ListComp

    def e_SetComp(self, node: ir.Node, frame: Frame) -> Any:
        out = self.e_ListComp(node, frame)
        u = first_unknown(out)
        return u if u is not None else self.data_op(lambda: set(out))

    def e_DictComp(self, node: ir.Node, frame: Frame) -> Any:
        try:
            out: dict[Any, Any] = {}

            def emit(f: Frame) -> None:
                k = self.evaluate(node.key, f)
                v = self.evaluate(node.value, f)
                if isinstance(k, Unknown):
                    raise Unmodelled(f"dict comprehension with an unknown key at {frame.module.file}:{node.line}")
                self.data_op(lambda: out.__setitem__(k, v))

            self.comprehension(node, frame, emit)
            return out
        except PyRaise as raised:
            raised.site(frame.module.file, node.line)
            raise

    def e_Call(self, node: ir.Node, frame: Frame) -> Any:
        try:
            func_node = node.func
            # super() without arguments needs the enclosing class and instance
            if func_node.__class__ is ir.Name and func_node.id == "super" and not node.args:
                return self.zero_arg_super(frame)
            func = EXPR_HANDLERS[func_node.__class__](self, func_node, frame)
            args: list[Any] = []
            kwargs: dict[str, Any] = {}
            for kind, expr in node.args:
                if kind == "":
                    args.append(EXPR_HANDLERS[expr.__class__](self, expr, frame))
                elif kind == "*":
                    value = self.evaluate(expr, frame)
                    if isinstance(value, Unknown):
                        return Unknown(f"call with *{value.reason}")
                    args.extend(self.iterate(value, frame, node.line))
                elif kind == "**":
                    value = self.evaluate(expr, frame)
                    if isinstance(value, Unknown):
                        return Unknown(f"call with **{value.reason}")
                    kwargs.update(self.mapping_items(value))
                elif kind in self.tracked_keys:
                    value, reads = self.evaluate_reads(expr, frame)
                    self.note_keyed(kind, value, frame, expr.line, reads, VALUE_FORMS.get(expr.kind, "expr"), expr)
                    kwargs[kind] = value
                else:
                    kwargs[kind] = EXPR_HANDLERS[expr.__class__](self, expr, frame)
            self._call_site = (frame.module.file, node.line)
            result = self.call(func, args, kwargs)
            if result.__class__ is Unknown and not _SITE.search(result.reason):
                # an unknown a call returns names the call site (issue #23)
                result = Unknown(f"{result.reason} at {frame.module.file}:{node.line}", result.key)
            return result
        except PyRaise as raised:
            raised.site(frame.module.file, node.line)
            raise

    def zero_arg_super(self, frame: Frame) -> Any:
        func = frame.func
        if func is None or frame.scope is None:
            return Unknown("super() outside a method")
        cls = func.attrs.get("__class__")
        if not isinstance(cls, Class):
            return Unknown("super() in a function without a class")
        first = func.params[0].name if func.params else None
        obj = frame.scope.vars.get(first) if first else None
        return SuperProxy(cls, obj)

