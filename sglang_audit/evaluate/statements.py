"""Statements: one ``s_<Kind>`` method per statement kind of the IR (interpreter.py fills
the dispatch table from them), with assignment and binding, definitions, and the handling
of ``try``, ``raise`` and ``assert``."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable
from typing import Any, Self, cast

from sglang_audit.evaluate.core import (
    EXPR_HANDLERS,
    STMT_HANDLERS,
    VALUE_FORMS,
    BreakSignal,
    ContinueSignal,
    Frame,
    InterpreterCore,
    PyRaise,
    ReturnSignal,
    Unmodelled,
)
from sglang_audit.evaluate.plaindata import SCALARS, is_plain
from sglang_audit.evaluate.values import (
    AnalysisBound,
    Class,
    Event,
    External,
    Function,
    Guard,
    HFConfig,
    Instance,
    LazyImport,
    ModuleObj,
    Native,
    TypeForm,
    Unknown,
)
from sglang_audit.frontend import ir

_IBIN: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.iadd, "-": operator.isub, "*": operator.imul, "/": operator.itruediv,
    "//": operator.ifloordiv, "%": operator.imod, "**": operator.ipow, "<<": operator.ilshift,
    ">>": operator.irshift, "|": operator.ior, "&": operator.iand, "^": operator.ixor,
}


def _annotation_text(node: ir.Node | None) -> str:
    """A rough rendering of an annotation, enough to spot ClassVar/InitVar/Annotated."""
    if node is None:
        return ""
    if isinstance(node, ir.Name):
        return node.id
    if isinstance(node, ir.Attribute):
        return _annotation_text(node.value) + "." + node.attr
    if isinstance(node, ir.Subscript):
        return _annotation_text(node.value) + "[" + _annotation_text(node.index) + "]"
    if isinstance(node, ir.TupleExpr):
        return ", ".join(_annotation_text(e) for e in node.elts)
    if isinstance(node, ir.Const):
        return repr(node.value)
    if isinstance(node, ir.BinOp):
        return _annotation_text(node.left) + " | " + _annotation_text(node.right)
    return "?"


class Statements(InterpreterCore):
    """Executes statements: ``exec_block`` and the ``s_<Kind>`` handlers."""

    def exec_block(self, stmts: list[ir.Node], frame: Frame) -> None:
        max_steps = self.bounds.max_steps
        for stmt in stmts:
            steps = self.steps = self.steps + 1
            if steps > max_steps:
                raise AnalysisBound(f"analysis bound reached: more than {max_steps} steps")
            if not steps & 1023 and self.deadline is not None and self.deadline():
                raise AnalysisBound(f"analysis bound reached: CPU-time budget of {self.bounds.cpu_seconds:.0f} s per resolution")
            try:
                STMT_HANDLERS[stmt.__class__](self, stmt, frame)
            except PyRaise as raised:
                # the evaluator's raise in this statement, outside any expression naming its
                # own line (an unpacking, an import): this statement, in this frame
                raised.site(frame.module.file, stmt.line)
                raise
            except (Unmodelled, AnalysisBound) as exc:
                # the innermost statement names where evaluation stopped (free unless raised)
                if getattr(exc, "where", None) is None:
                    # an attribute of this exception object only, read back with getattr (stop_reason)
                    exc.where = f"{frame.module.file}:{stmt.line}"  # type: ignore[union-attr]
                raise

    def s_ExprStmt(self, node: ir.Node, frame: Frame) -> None:
        value = node.value
        EXPR_HANDLERS[value.__class__](self, value, frame)

    def s_Pass(self, node: ir.Node, frame: Frame) -> None:
        return None

    def s_Unsupported(self, node: ir.Node, frame: Frame) -> None:
        raise Unmodelled(f"unsupported statement {node.what} at {frame.module.file}:{node.line}")

    def s_Break(self, node: ir.Node, frame: Frame) -> None:
        raise BreakSignal()

    def s_Continue(self, node: ir.Node, frame: Frame) -> None:
        raise ContinueSignal()

    def s_Global(self, node: ir.Node, frame: Frame) -> None:
        if frame.scope is not None:
            frame.scope.globals_decl.update(node.names)

    def s_Nonlocal(self, node: ir.Node, frame: Frame) -> None:
        if frame.scope is not None:
            frame.scope.nonlocal_decl.update(node.names)

    def s_Delete(self, node: ir.Node, frame: Frame) -> None:
        for target in node.targets:
            if isinstance(target, ir.Name):
                if frame.scope is not None:
                    frame.scope.vars.pop(target.id, None)
                else:
                    frame.module.globals.pop(target.id, None)
            elif isinstance(target, ir.Subscript):
                obj = self.evaluate(target.value, frame)
                key = self.evaluate(target.index, frame)
                if isinstance(obj, (dict, list)) and not isinstance(key, Unknown):
                    self.data_op(functools.partial(obj.__delitem__, key))
            elif isinstance(target, ir.Attribute):
                obj = self.evaluate(target.value, frame)
                if isinstance(obj, (Instance, HFConfig)):
                    obj.attrs.pop(target.attr, None)

    def s_Import(self, node: ir.Node, frame: Frame) -> None:
        for dotted, asname in node.names:
            if asname:
                self.bind_name(frame, asname, LazyImport(dotted, None) if frame.scope is None else self.load_module(dotted), node.line, "")
            else:
                # `import a.b.c` loads a.b.c (and its parents) and binds `a`
                self.load_module(dotted)
                self.bind_name(frame, dotted.split(".")[0], self.load_module(dotted.split(".")[0]), node.line, "")

    def s_ImportFrom(self, node: ir.Node, frame: Frame) -> None:
        module = self.absolute_module(cast(str, node.module), node.level, frame.module)  # "" for `from . import x`
        if node.names == "*":
            mod = self.load_module(module)
            if isinstance(mod, ModuleObj):
                names = mod.globals.get("__all__")
                if not isinstance(names, (list, tuple)):
                    names = [n for n in mod.globals if not n.startswith("_")]
                for n in names:
                    if isinstance(n, str) and n in mod.globals:
                        self.bind_name(frame, n, mod.globals[n], node.line, "")
            return
        # only imports inside the analysed tree are deferred; an outside import is cheap and
        # must fail where it stands (inside its `try: ... except ImportError`)
        lazy = frame.scope is None and frame.class_ns is None and module.split(".")[0] == self.natives.package_name
        for name, asname in node.names:
            target = asname or name
            # `from package import submodule` runs the submodule now, as CPython does: its
            # body may register providers (decorators) whose order is import order
            if lazy and not self.is_submodule(module, name):
                value: Any = LazyImport(module, name, frame.module.file, node.line)
            else:
                value = self.resolve_lazy(LazyImport(module, name))
            self.bind_name(frame, target, value, node.line, "")

    def s_FunctionDef(self: Self, node: ir.Node, frame: Frame) -> None:
        func = self.make_function(node.name, node.params, node.body, frame, node.line, False)
        value: Any = func
        for dec_node in reversed(node.decorators):
            dec = self.evaluate(dec_node, frame)
            value = self.apply_decorator(dec, value, frame, node.line)
        if frame.class_obj is not None:
            func.attrs["__class__"] = frame.class_obj  # for zero-argument super()
        if frame.scope is None and frame.class_ns is None:
            boundary = self.natives.boundary_for(self, frame.module.name, node.name)
            if boundary is not None:
                value = boundary
        self.bind_name(frame, node.name, value, node.line, "")

    def make_function(
        self, name: str, params: list[ir.Node], body: Any, frame: Frame, line: int, is_lambda: bool
    ) -> Function:
        defaults = {}
        for p in params:
            if p.default is not None:
                defaults[p.name] = self.evaluate(p.default, frame)
        qual = f"{frame.class_obj.name}.{name}" if frame.class_obj is not None else name
        if frame.class_ns is not None and frame.class_obj is None:
            qual = f"{frame.class_ns.get('__qualname__', '?')}.{name}"
        return Function(
            name=name, qualname=qual, params=params, body=body, module=frame.module,
            closure=frame.scope, defaults=defaults, line=line, is_lambda=is_lambda, interp=self,
        )

    def apply_decorator(self, dec: Any, func: Any, frame: Frame, line: int) -> Any:
        if isinstance(dec, External) or isinstance(dec, Unknown):
            # decorators from outside the tree (torch.compile, ...) keep the function's behaviour
            return func
        result = self.call(dec, [func], {})
        if isinstance(result, Unknown):
            return func
        return result

    def s_ClassDef(self: Self, node: ir.Node, frame: Frame) -> None:
        bases = []
        external: list[str] = []
        for b in node.bases:
            value = self.evaluate(b, frame)
            if isinstance(value, TypeForm) and isinstance(value.origin, Native):
                value = value.origin  # `class L(list[str])` (0.5.10 jit_kernel CPPArgList): the builtin
            if isinstance(value, External):
                external.append(value.path)
            elif isinstance(value, Native) and value.name in ("str", "int", "dict", "float", "tuple", "list"):
                external.append(value.name)
            bases.append(value)
        real_bases = tuple(b for b in bases if isinstance(b, Class))
        for b in bases:
            if isinstance(b, Native) and b.name in self.exc_classes:
                real_bases += (self.exc_classes[b.name],)
        if sum(len(b.mro()) for b in real_bases if isinstance(b, Class)) > self.bounds.max_mro:
            # C3 linearisation is quadratic in the depth per class: a 5,000-class chain is cubic
            raise AnalysisBound(f"analysis bound reached: class hierarchy deeper than {self.bounds.max_mro} at {frame.module.file}:{node.line}")
        cls = Class(node.name, real_bases, {}, frame.module, node.line, external_bases=tuple(external))
        for base in real_bases:
            cls.flags |= base.flags & {"enum", "exception", "str_mixin", "dataclass"}
        if any(p.endswith("Enum") or p.endswith("IntEnum") or p.endswith("StrEnum") or p.endswith("Flag") for p in external):
            cls.flags.add("enum")
        if "str" in external or any(p.endswith("StrEnum") for p in external):
            cls.flags.add("str_mixin")
        ns: dict[str, Any] = {"__qualname__": node.name, "__module__": frame.module.name}
        cls.ns = ns
        # a class body sees its own namespace, then the enclosing function's locals, then globals
        body_frame = Frame(module=frame.module, class_ns=ns, class_obj=cls, depth=frame.depth, outer_scope=frame.scope)
        self.exec_block(node.body, body_frame)
        if "enum" in cls.flags:
            self.natives.make_enum(self, cls)
        self.natives.class_created(self, cls)
        for attr_name, attr_value in list(ns.items()):
            if isinstance(attr_value, Instance):
                found, set_name = attr_value.cls.lookup("__set_name__")
                if found:
                    self.call(self.bind(set_name, attr_value, attr_value.cls), [cls, attr_name], {})
        value = cls
        for dec_node in reversed(node.decorators):
            dec = self.evaluate(dec_node, frame)
            value = self.apply_decorator(dec, value, frame, node.line)
        self.bind_name(frame, node.name, value, node.line, "")

    def s_Return(self, node: ir.Node, frame: Frame) -> None:
        if node.value is None:
            raise ReturnSignal(None, None)
        value, reads = self.evaluate_reads(node.value, frame)
        fname = frame.func.qualname if frame.func else "?"
        ev = self.event("return", f"{fname}()", value, frame.module.file, node.line, "return", reads,
                        VALUE_FORMS.get(node.value.kind, "expr"))
        raise ReturnSignal(value, ev)

    def s_Assign(self, node: ir.Node, frame: Frame) -> None:
        value, reads = self.evaluate_reads(node.value, frame)
        form = VALUE_FORMS.get(node.value.kind, "expr")
        for target in node.targets:
            self.assign(target, value, frame, node.line, node.text, reads, form)

    def s_AnnAssign(self, node: ir.Node, frame: Frame) -> None:
        if frame.class_obj is not None and isinstance(node.target, ir.Name):
            ann = node.annotation
            ann_text = _annotation_text(ann)
            frame.class_obj.annotations.append((node.target.id, node.line, ann_text))
            # evaluated on demand (get_type_hints, __annotations__), in the class's module
            frame.class_obj.annotation_nodes[node.target.id] = ann
        if node.value is None:
            return
        value, reads = self.evaluate_reads(node.value, frame)
        self.assign(node.target, value, frame, node.line, node.text, reads, VALUE_FORMS.get(node.value.kind, "expr"))

    def s_AugAssign(self, node: ir.Node, frame: Frame) -> None:
        def compute() -> Any:
            current = self.evaluate(node.target, frame)
            rhs = self.evaluate(node.value, frame)
            if isinstance(current, list) and node.op == "+" and isinstance(rhs, (list, tuple)):
                self.check_size("+", current, rhs)
                current.extend(rhs)  # in-place, like list.__iadd__
                return current
            if isinstance(current, set) and node.op == "|" and isinstance(rhs, (set, frozenset)):
                current |= rhs
                return current
            if isinstance(current, dict) and node.op == "|" and isinstance(rhs, dict):
                current.update(rhs)
                return current
            if is_plain(current) and is_plain(rhs) and node.op in _IBIN:
                # in place, as CPython: `lst += "ab"` extends, errors name the operator "+="
                self.check_size(node.op, current, rhs)
                return self.data_op(lambda: _IBIN[node.op](current, rhs))
            return self.binop(node.op, current, rhs)

        value, reads = self.collect(compute)
        self.assign(node.target, value, frame, node.line, node.text, reads, "expr")

    def assign(self, target: ir.Node, value: Any, frame: Frame, line: int, text: str, reads: Iterable[Event],
               form: str = "copy") -> None:
        kind = target.kind
        if kind == "Name":
            self.bind_name(frame, target.id, value, line, text, reads, form)
        elif kind == "Attribute":
            obj = self.evaluate(target.value, frame)
            ev = self.event("write", target.attr, value, frame.module.file, line, text, reads, form)
            self.setattr(obj, target.attr, value, ev)
        elif kind == "Subscript":
            obj = self.evaluate(target.value, frame)
            key = self.evaluate(target.index, frame)
            if isinstance(key, str) and key in self.tracked_keys:
                # a store under a key written as a constant names the setting: keep its text
                self.note_keyed(key, value, frame, line, reads, form,
                                text=text if target.index.kind == "Const" else f"<{key}>=...")
            self.setitem(obj, key, value)
        elif kind in ("TupleExpr", "ListExpr"):
            # an item of an unpacked value: a copy of whatever made the whole
            items = self.unpack(value, target.elts, frame, line)
            for sub, item in zip(target.elts, items, strict=False):
                if isinstance(sub, ir.Starred):
                    self.assign(sub.value, item, frame, line, text, reads)
                else:
                    self.assign(sub, item, frame, line, text, reads)
        elif kind == "Starred":
            self.assign(target.value, value, frame, line, text, reads)
        else:
            raise Unmodelled(f"assignment to {kind} at {frame.module.file}:{line}")

    def unpack(self, value: Any, targets: list[ir.Node], frame: Frame, line: int) -> list[Any]:
        n = len(targets)
        star = [i for i, t in enumerate(targets) if isinstance(t, ir.Starred)]
        if isinstance(value, Unknown):
            return [value] * n
        if isinstance(value, External) and self.call_hook is not None and not star:
            # layer stage (layers.py): a tensor's shape unpacks into unknown sizes
            return [Unknown(f"element {i} of {value.path}", f"{value.identity}[{i}]") for i in range(n)]
        if isinstance(value, SCALARS):
            raise self.make_raise("TypeError", f"cannot unpack non-iterable {type(value).__name__} object")
        items = self.iterate(value, frame, line)
        if star:
            i = star[0]
            after = n - i - 1
            if len(items) < n - 1:
                raise self.make_raise("ValueError", f"not enough values to unpack (expected at least {n - 1}, got {len(items)})")
            return items[:i] + [list(items[i: len(items) - after])] + items[len(items) - after:]
        if len(items) < n:
            raise self.make_raise("ValueError", f"not enough values to unpack (expected {n}, got {len(items)})")
        if len(items) > n:
            raise self.make_raise("ValueError", f"too many values to unpack (expected {n})")
        return items

    def bind_name(
        self, frame: Frame, name: str, value: Any, line: int, text: str, reads: Iterable[Event] = (),
        form: str = "copy",
    ) -> None:
        ev = self.event("write", name, value, frame.module.file, line, text, reads, form) if text else None
        if frame.class_ns is not None:
            frame.class_ns[name] = value
            return
        scope = frame.scope
        if scope is None or name in scope.globals_decl:
            frame.module.globals[name] = value
            if ev is not None:
                frame.module.events[name] = ev
            return
        if name in scope.nonlocal_decl:
            s = scope.parent
            while s is not None and name not in s.vars:
                s = s.parent
            if s is not None:
                s.vars[name] = value
                if ev is not None:
                    s.events[name] = ev
                return
        scope.vars[name] = value
        if ev is not None:
            scope.events[name] = ev

    def s_If(self, node: ir.Node, frame: Frame) -> None:
        test, reads = self.evaluate_reads(node.test, frame)
        truth = self.truth(test, frame, node.line, node.text)
        self.guards.append(Guard(frame.module.file, node.line, node.text, truth, tuple(reads)))
        self.guard_tuple = None
        try:
            block = node.body if truth else node.orelse
            if block and frame.scope is None and frame.class_ns is None:
                self.run_module_statements(block, frame)  # a module's top level: statement by statement
            elif block:
                self.exec_block(block, frame)
        finally:
            self.guards.pop()
            self.guard_tuple = None

    def s_While(self, node: ir.Node, frame: Frame) -> None:
        count = 0
        while True:
            test = self.evaluate(node.test, frame)
            if isinstance(test, Unknown):
                raise Unmodelled(f"while-loop on an unknown condition at {frame.module.file}:{node.line} ({test.reason})")
            if not self.truth(test, frame, node.line, node.text):
                self.exec_block(node.orelse, frame)
                return
            count += 1
            if count > self.bounds.max_loop:
                raise AnalysisBound(f"analysis bound reached: loop at {frame.module.file}:{node.line} ran {count} times")
            try:
                self.exec_block(node.body, frame)
            except BreakSignal:
                return
            except ContinueSignal:
                continue

    def s_For(self, node: ir.Node, frame: Frame) -> None:
        iterable, reads = self.evaluate_reads(node.iter, frame)
        if isinstance(iterable, Unknown) and self.call_hook is not None:
            # layer stage (layers.py): a loop over unknown tensor sizes (experts, shards) runs
            # one representative iteration; each iteration runs the same code
            items: list[Any] = [Unknown(f"an element of {iterable.reason}", f"{iterable.key}[*]" if iterable.key else None)]
        elif isinstance(iterable, Unknown):
            raise Unmodelled(f"loop over an unknown value at {frame.module.file}:{node.line} ({iterable.reason})")
        else:
            items = self.iterate(iterable, frame, node.line)
        max_loop = self.bounds.max_loop
        target = node.target
        name = target.id if target.__class__ is ir.Name else None
        # `for a, b in pairs`: names bound straight from a tuple of that length, as assign's
        # unpacking would (the same events); anything else goes through assign
        names = (tuple(e.id for e in target.elts)
                 if target.__class__ is ir.TupleExpr and all(e.__class__ is ir.Name for e in target.elts) else None)
        sources = tuple(reads)  # each binding's event shares it (tuple() of a tuple is itself)
        for count, item in enumerate(items):
            if count > max_loop:
                raise AnalysisBound(f"analysis bound reached: loop at {frame.module.file}:{node.line}")
            if name is not None:
                self.bind_name(frame, name, item, node.line, "for", sources)
            elif names is not None and item.__class__ is tuple and len(item) == len(names):
                for sub, value in zip(names, item, strict=True):
                    self.bind_name(frame, sub, value, node.line, "for", sources)
            else:
                self.assign(target, item, frame, node.line, "for", sources)
            try:
                self.exec_block(node.body, frame)
            except BreakSignal:
                return
            except ContinueSignal:
                continue
        self.exec_block(node.orelse, frame)

    def s_Try(self, node: ir.Node, frame: Frame) -> None:
        try:
            try:
                self.exec_block(node.body, frame)
            except PyRaise as raised:
                handler = self.match_handler(node.handlers, raised, frame)
                if handler is None:
                    raise
                self.run_handler(handler, raised, frame)
            else:
                self.exec_block(node.orelse, frame)
        finally:
            if node.finalbody:
                self.exec_block(node.finalbody, frame)

    def match_handler(self, handlers: list[ir.Node], raised: PyRaise, frame: Frame) -> ir.Node | None:
        exc = raised.exc
        for h in handlers:
            if h.type is None:
                return h
            types = self.evaluate(h.type, frame)
            if not isinstance(types, tuple):
                types = (types,)
            for t in types:
                if isinstance(t, Class) and isinstance(exc, Instance) and exc.cls.is_subclass_of(t):
                    return h
                if isinstance(t, Native) and t.name in self.exc_classes and isinstance(exc, Instance):
                    if exc.cls.is_subclass_of(self.exc_classes[t.name]):
                        return h
        return None

    def s_With(self, node: ir.Node, frame: Frame) -> None:
        self.with_items(node, 0, frame)

    def run_handler(self, handler: ir.Node, raised: PyRaise, frame: Frame) -> None:
        """An ``except`` block handling ``raised`` (``s_Try``'s rules: the name bound, a bare
        ``raise`` re-raises it)."""
        if handler.name:
            self.bind_name(frame, handler.name, raised.exc, handler.line, "")
        self.handling.append(raised)
        try:
            self.exec_block(handler.body, frame)
        finally:
            self.handling.pop()

    def s_Raise(self, node: ir.Node, frame: Frame) -> None:
        if node.exc is None:
            if self.handling:
                raise self.handling[-1]
            raise self.make_raise("RuntimeError", "No active exception to reraise")
        exc = self.eval_message_expr(node.exc, frame)
        if isinstance(exc, Class):
            exc = self.instantiate_exception(exc, [])
        if isinstance(exc, Native) and exc.name in self.exc_classes:
            exc = self.instantiate_exception(self.exc_classes[exc.name], [])
        if not isinstance(exc, Instance):
            exc = self.instantiate_exception(self.exc_classes["Exception"], [f"(unmodelled exception {exc!r})"])
        raised = PyRaise(exc, frame.module.file, node.line, node.text)
        raised.guards = tuple(self.guards)  # the branches it is in (layers.py weighs them)
        raise raised

    def s_Assert(self, node: ir.Node, frame: Frame) -> None:
        if frame.scope is None and self.call_hook is not None:
            return  # layer stage (layers.py): an import-time assert held when SGLang imported the module
        test = self.evaluate(node.test, frame)
        if self.truth(test, frame, node.line, node.text):
            return
        msg = self.eval_message_expr(node.msg, frame) if node.msg is not None else ""
        exc = self.instantiate_exception(self.exc_classes["AssertionError"], [msg] if node.msg is not None else [])
        raised = PyRaise(exc, frame.module.file, node.line, f"assert {node.text}")
        raised.guards = tuple(self.guards)
        raise raised

    def eval_message_expr(self, node: ir.Node, frame: Frame) -> Any:
        with self.message_mode():
            return self.evaluate(node, frame)

