"""A partial evaluator for the Python subset of SGLang's configuration code.

Byterun-style: one ``s_<Kind>`` method per statement and one ``e_<Kind>`` method per
expression of the IR, dispatched by the node's class.  Known values are concrete; anything
that depends on an input the tool does not model is ``Unknown(reason)``.  A branch on an
unknown asks ``decide()``: the resolver re-runs the evaluation once per outcome (bounded)
and joins the results, so nothing is ever guessed.

The evaluator knows no command line and no output format; it reads analysed source only
through the IR and never imports, executes or evaluates analysed text.

``Interpreter`` is composed here from its parts, each a class over ``InterpreterCore``
(core.py: state, paths, policy, decisions, events) in a module of its own: statements.py
(the ``s_`` handlers), generators.py (``with`` and context-manager generators),
expressions.py (the ``e_`` handlers), operators.py, calls.py, attributes.py (attributes,
items, iteration), modules.py (imports). The dispatch tables, node class -> handler, are
filled below from the composed class: the whole dispatch reads in one place, as in
Byterun's pyvm2. What the interpreter may ask of the world outside the tree: world_api.py
(implemented by world/native.py).

Why this module is long: the parts not yet moved into modules of their own are here.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any, Self, cast

from sglang_audit.evaluate.attributes import Attributes
from sglang_audit.evaluate.bounds import Bounds
from sglang_audit.evaluate.calls import Calls, function_locals
from sglang_audit.evaluate.core import (
    EXPR_HANDLERS,
    NOT_HOOKED,
    STMT_HANDLERS,
    VALUE_FORMS,
    BreakSignal,
    ContinueSignal,
    Frame,
    InterpreterCore,
    LogRecord,
    PathState,
    PyRaise,
    ReturnSignal,
    Unmodelled,
    call_identity,
    short_identity,
    stop_reason,
)
from sglang_audit.evaluate.modules import Modules
from sglang_audit.evaluate.plaindata import (
    CONTAINERS,
    SCALARS,
    contains_unknown,
    first_unknown,
    is_plain,
    stable_repr,
)
from sglang_audit.evaluate.values import NOT_HANDLED as _NOT_NATIVE
from sglang_audit.evaluate.values import (
    AnalysisBound,
    Class,
    Event,
    External,
    FieldSpec,
    Function,
    Guard,
    HFConfig,
    Instance,
    LazyImport,
    ModuleObj,
    Native,
    Property,
    Scope,
    SuperProxy,
    TypeForm,
    Unknown,
    negated,
)
from sglang_audit.evaluate.world_api import World, WorldState
from sglang_audit.frontend import ir

_SITE = re.compile(r"\.py:\d+")

_BIN = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "<<": operator.lshift,
    ">>": operator.rshift, "|": operator.or_, "&": operator.and_, "^": operator.xor,
}

_IBIN: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.iadd, "-": operator.isub, "*": operator.imul, "/": operator.itruediv,
    "//": operator.ifloordiv, "%": operator.imod, "**": operator.ipow, "<<": operator.ilshift,
    ">>": operator.irshift, "|": operator.ior, "&": operator.iand, "^": operator.ixor,
}

_CMP = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}

# dict/set keys that may equal a str without being one (a missed `in` must look at them)
_EXACT_KEYS = frozenset({Unknown, Instance})


def _in_unknown(item: Unknown, container: Any) -> Unknown:
    """``item in container`` for an unknown item: a decision of its own, not the item's truth."""
    if item.key is None or contains_unknown(container):
        return Unknown(item.reason)
    elems = container if isinstance(container, str) else sorted(map(repr, container)) if isinstance(container, (set, frozenset, dict)) else list(map(repr, container))
    return Unknown(item.reason, f"{item.key} in {elems!r}")


def _yield_of(stmt: ir.Node) -> ir.Node | None:
    """The Yield of ``yield x`` / ``v = yield x`` as a statement of its own, else None."""
    value: ir.Node | None = getattr(stmt, "value", None)
    if stmt.kind in ("ExprStmt", "Assign") and value is not None and getattr(value, "kind", "") == "Yield":
        return value
    return None


def _holds_yield(stmt: ir.Node | list[Any]) -> bool:
    """Whether a yield of this generator sits in ``stmt`` (nested functions, lambdas and
    classes hold their own, not this generator's)."""
    return any(node.kind == "Yield" for node in ir.walk(stmt, into_scopes=False))


class _GenLevel:
    """One block on the way from a generator's body to its yield: the statement holding the
    block (None for the body itself), the block, the index in it of the statement the way
    goes on through (or of the yield), a ``with``'s generator contexts entered (innermost
    last) and an ``if``'s guard."""

    __slots__ = ("node", "block", "pos", "held", "guard")

    def __init__(self, node: ir.Node | None, block: list[ir.Node]) -> None:
        self.node, self.block, self.pos = node, block, -1
        self.held: list[GeneratorContext] = []
        self.guard: Guard | None = None


class GeneratorContext:
    """A call of a ``@contextlib.contextmanager`` generator function, entered by ``with``:
    its body runs to the ``yield`` on entry (the value yielded is what ``as`` binds) and
    from there on exit, in the same frame. The yield may sit at any depth of ``if``/``try``/
    ``with`` blocks (0.5.23's ``patch_pipeline_parallel_group``: a ``with`` in a ``try``);
    the way to it (``levels``, outermost first) is kept between the two phases, and on exit
    the rest of each block runs innermost first, each container closing as Python closes it
    (a ``try``'s handlers, ``else`` and ``finally``, a ``with``'s context managers exited).
    A yield in a loop, a handler or a ``finally`` is unmodelled."""

    __slots__ = ("func", "args", "kwargs", "frame", "levels")

    def __init__(self, func: Function, args: list[Any], kwargs: dict[str, Any]) -> None:
        self.func, self.args, self.kwargs = func, args, kwargs
        self.frame: Frame | None = None
        self.levels: list[_GenLevel] = []  # the way from the body to the yield, outermost first


_DUNDER = {"+": "__add__", "-": "__sub__", "*": "__mul__", "|": "__or__", "&": "__and__", "/": "__truediv__"}

_RDUNDER = {"+": "__radd__", "-": "__rsub__", "*": "__rmul__", "|": "__ror__", "&": "__rand__"}

_CMP_DUNDER = {"<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__"}

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_percent_widths(template: str, args: Any, limit: int) -> None:
    """``"%*d" % (10**9, 1)``: a width or precision, written or passed, over the bound."""
    stars = False
    for m in _PERCENT_SPEC.finditer(template):
        for part in m.groups():
            if part == "*":
                stars = True
            elif part and (len(part) > 7 or int(part) > limit):
                raise AnalysisBound("analysis bound reached: format width too large")
    values = args if isinstance(args, tuple) else (args,)
    if stars and any(type(v) is int and abs(v) > limit for v in values):
        raise AnalysisBound("analysis bound reached: format width too large")


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


def _is_none_type(value: Any) -> bool:
    """NoneType as the evaluator represents it: ``type(None)`` is a Native, the member of
    ``Optional[X]`` an External; SGLang compares the two with ``is`` (arg_utils)."""
    if isinstance(value, External):
        return value.path in ("builtins.NoneType", "types.NoneType")
    return isinstance(value, Native) and value.name == "NoneType"


class Interpreter(Calls, Attributes, Modules, InterpreterCore):
    """Evaluates analysed modules for one path (one assignment of unknown decisions): the
    parts composed over the core (each part's methods in its own module)."""

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
        with self._importing(frame, node):
            for dotted, asname in node.names:
                if asname:
                    self.bind_name(frame, asname, LazyImport(dotted, None) if frame.scope is None else self.load_module(dotted), node.line, "")
                else:
                    # `import a.b.c` loads a.b.c (and its parents) and binds `a`
                    self.load_module(dotted)
                    self.bind_name(frame, dotted.split(".")[0], self.load_module(dotted.split(".")[0]), node.line, "")

    @contextlib.contextmanager
    def _importing(self, frame: Frame, node: ir.Node) -> Iterator[None]:
        """A raise made while this statement imports (ModuleNotFoundError, ImportError) names
        the statement, not the last call; the last call's site is restored afterwards, as
        what a later raise outside any call names."""
        saved = getattr(self, "_call_site", ("?", 0))
        self._call_site = (frame.module.file, node.line)
        try:
            yield
        finally:
            self._call_site = saved

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
        with self._importing(frame, node):
            for name, asname in node.names:
                target = asname or name
                # `from package import submodule` runs the submodule now, as CPython does: its
                # body may register providers (decorators) whose order is import order
                if lazy and not self.is_submodule(module, name):
                    value: Any = LazyImport(module, name)
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
            if block:
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

    def with_items(self, node: ir.Node, first: int, frame: Frame) -> None:
        """The items of a ``with`` from ``first`` on, then its body. A generator context
        (``GeneratorContext``) is entered and exited around the rest; other context managers
        are entered only when bound (``as``), as before."""
        for i in range(first, len(node.items)):
            expr, target = node.items[i]
            ctx = self.evaluate(expr, frame)
            if isinstance(ctx, GeneratorContext):
                entered = self.enter_generator(ctx)
                if target is not None:
                    self.assign(target, entered, frame, node.line, "with", [])
                try:
                    self.with_items(node, i + 1, frame)
                except PyRaise as raised:
                    if not self.exit_generator(ctx, raised):
                        raise
                    return  # suppressed by the generator's handler
                except (ReturnSignal, BreakSignal, ContinueSignal):
                    self.exit_generator(ctx, None)
                    raise
                self.exit_generator(ctx, None)
                return
            if target is not None:
                entered = ctx
                if isinstance(ctx, Instance):
                    found, enter = ctx.cls.lookup("__enter__")
                    if found:
                        entered = self.call(self.bind(enter, ctx, ctx.cls), [], {})
                elif isinstance(ctx, External):
                    entered = Unknown(f"value of `with {ctx.path}`", None)
                self.assign(target, entered, frame, node.line, "with", [])
        self.exec_block(node.body, frame)

    def enter_generator(self, ctx: GeneratorContext) -> Any:
        """Run a generator context's body up to its yield; the value yielded."""
        func = ctx.func
        scope = Scope(parent=func.closure, local_names=function_locals(func.body))
        frame = ctx.frame = Frame(module=func.module, scope=scope, func=func, depth=self.depth + 1)
        self.bind_params(func, ctx.args, ctx.kwargs, scope)
        ctx.levels = [_GenLevel(None, func.body)]

        def run() -> Any:
            guards = len(self.guards)
            try:
                found = self.run_to_yield(ctx, 0, frame)
            except ReturnSignal:
                found = None
            finally:
                # an if's guard on the way is the with-body's no more; exit_generator puts it back
                del self.guards[guards:]
                self.guard_tuple = None
            if found is None:
                raise Unmodelled(f"a context manager generator that ended without yielding ({func.qualname} at {func.module.file}:{func.line})")
            return None if found.value is None else self.evaluate(found.value, frame)

        return self._in_generator(run)

    def run_to_yield(self, ctx: GeneratorContext, depth: int, frame: Frame) -> ir.Node | None:
        """Execute the block of ``ctx.levels[depth]`` from its start until the yield (its Yield
        node; ``ctx.levels`` then is the way to it) or the block's end (None). A statement
        holding the yield is entered as Python enters it: an ``if``'s test decides the side,
        a ``with`` holds its items, a ``try`` catches a raise before the yield with its
        handlers (and the block goes on after it) and runs its ``finally``."""
        level = ctx.levels[depth]
        for pos, stmt in enumerate(level.block):
            level.pos = pos
            point = _yield_of(stmt)
            if point is not None:
                return point
            if not _holds_yield(stmt):
                self.exec_block([stmt], frame)
                continue
            kind = stmt.kind
            if kind == "If":
                test, reads = self.evaluate_reads(stmt.test, frame)
                truth = self.truth(test, frame, stmt.line, stmt.text)
                inner = _GenLevel(stmt, stmt.body if truth else stmt.orelse)
                inner.guard = Guard(frame.module.file, stmt.line, stmt.text, truth, tuple(reads))
                self.guards.append(inner.guard)
                self.guard_tuple = None
                ctx.levels.append(inner)
                found = self.run_to_yield(ctx, depth + 1, frame)
                if found is not None:
                    return found
                ctx.levels.pop()
                self.guards.pop()
                self.guard_tuple = None
            elif kind == "With":
                inner = _GenLevel(stmt, stmt.body)
                ctx.levels.append(inner)
                try:
                    self.hold_items(inner, stmt, frame)
                    found = self.run_to_yield(ctx, depth + 1, frame)
                except PyRaise as raised:
                    del ctx.levels[depth + 1:]
                    if not self.release_items(inner.held, raised):
                        raise
                    continue  # suppressed by a context manager held: on after the with
                except (ReturnSignal, BreakSignal, ContinueSignal):
                    del ctx.levels[depth + 1:]
                    self.release_items(inner.held, None)
                    raise
                if found is not None:
                    return found
                ctx.levels.pop()
                self.release_items(inner.held, None)
            elif kind == "Try" and not any(_holds_yield(part) for part in (stmt.handlers, stmt.orelse, stmt.finalbody)):
                ctx.levels.append(_GenLevel(stmt, stmt.body))
                try:
                    try:
                        found = self.run_to_yield(ctx, depth + 1, frame)
                    except PyRaise as raised:
                        del ctx.levels[depth + 1:]
                        handler = self.match_handler(stmt.handlers, raised, frame) if stmt.handlers else None
                        if handler is None:
                            raise
                        self.run_handler(handler, raised, frame)
                        found = None
                    else:
                        if found is not None:
                            return found  # the finally runs on exit, not now
                        ctx.levels.pop()
                        self.exec_block(stmt.orelse, frame)
                except BaseException:
                    if stmt.finalbody:
                        self.exec_block(stmt.finalbody, frame)
                    raise
                if stmt.finalbody:
                    self.exec_block(stmt.finalbody, frame)
            else:
                raise Unmodelled(f"a context manager generator whose yield is in a {kind.lower()} ({ctx.func.qualname} at {frame.module.file}:{stmt.line})")
        return None

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

    def exit_generator(self, ctx: GeneratorContext, raised: PyRaise | None) -> bool:
        """Resume a generator context after its yield (``raised``: the with-body's raise,
        thrown in at the yield); True when the generator suppressed it. Each block on the way
        finishes innermost first, then its container closes (``try``: a handler for what is
        pending, ``else``, ``finally``; ``with``: its context managers exited, innermost
        first, with what is pending); a raise or ``return`` there replaces what was pending."""
        frame = ctx.frame
        assert frame is not None
        levels = ctx.levels

        def run() -> bool:
            pending: BaseException | None = raised
            point = levels[-1].block[levels[-1].pos]
            if raised is None and point.kind == "Assign":  # `v = yield x`: a context manager is sent None
                for target in point.targets:
                    self.assign(target, None, frame, point.line, point.text, [])
            guards = len(self.guards)
            self.guards.extend(level.guard for level in levels if level.guard is not None)
            self.guard_tuple = None
            try:
                for level in reversed(levels):
                    if pending is None:
                        try:
                            self.exec_block(level.block[level.pos + 1:], frame)
                        except (PyRaise, ReturnSignal) as stopped:
                            pending = stopped
                    node = level.node
                    if level.guard is not None:
                        self.guards.pop()
                        self.guard_tuple = None
                    if node is None or node.kind == "If":
                        continue
                    try:
                        if node.kind == "With":
                            if self.release_items(level.held, pending if isinstance(pending, PyRaise) else None):
                                pending = None
                            continue
                        if isinstance(pending, PyRaise) and node.handlers:
                            handler = self.match_handler(node.handlers, pending, frame)
                            if handler is not None:
                                caught, pending = pending, None
                                self.run_handler(handler, caught, frame)
                        elif pending is None:
                            self.exec_block(node.orelse, frame)
                    except (PyRaise, ReturnSignal) as stopped:
                        pending = stopped
                    if node.finalbody:
                        try:
                            self.exec_block(node.finalbody, frame)
                        except (PyRaise, ReturnSignal) as stopped:
                            pending = stopped
            finally:
                del self.guards[guards:]
                self.guard_tuple = None
            if isinstance(pending, PyRaise):
                raise pending  # the raise thrown in, or one of the generator's own: out of the with
            return raised is not None  # the generator finished: a raise thrown in was suppressed

        return bool(self._in_generator(run))

    def hold_items(self, level: _GenLevel, node: ir.Node, frame: Frame) -> None:
        """Enter a ``with``'s items that hold a generator context's yield (``with_items``'
        rules: a generator context is entered and kept in ``level.held``; another context
        manager is entered only when bound); a raise entering one exits those entered."""
        for expr, target in node.items:
            try:
                value = self.evaluate(expr, frame)
                entered: Any = value
                if isinstance(value, GeneratorContext):
                    entered = self.enter_generator(value)
                    level.held.append(value)
                elif target is not None and isinstance(value, Instance):
                    found, enter = value.cls.lookup("__enter__")
                    if found:
                        entered = self.call(self.bind(enter, value, value.cls), [], {})
                elif target is not None and isinstance(value, External):
                    entered = Unknown(f"value of `with {value.path}`", None)
            except PyRaise as raised:
                if not self.release_items(level.held, raised):
                    raise
                raise Unmodelled(f"a with item's raise suppressed by the one before it at {frame.module.file}:{node.line}") from None
            if target is not None:
                self.assign(target, entered, frame, node.line, "with", [])

    def release_items(self, held: list[GeneratorContext], raised: PyRaise | None) -> bool:
        """Exit the generator contexts ``hold_items`` entered, innermost first, ``raised``
        thrown into each until one suppresses it (a raise of an exit replacing it, as
        Python's nested ``with`` does); True when it was suppressed."""
        pending = raised
        while held:
            inner = held.pop()
            try:
                if self.exit_generator(inner, pending) and pending is not None:
                    pending = None
            except PyRaise as stopped:
                pending = stopped
        if pending is not None and pending is not raised:
            raise pending
        return raised is not None and pending is None

    def _in_generator(self, run: Callable[[], Any]) -> Any:
        """A phase of a generator context, as ``call_function`` runs a body: one call deeper,
        its reads its own."""
        self.depth += 1
        if self.depth > self.bounds.max_depth:
            self.depth -= 1
            raise AnalysisBound(f"analysis bound reached: call depth over {self.bounds.max_depth}")
        saved_reads = self.reads
        self.reads = []
        try:
            return run()
        finally:
            self.reads = saved_reads
            self.depth -= 1

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
                    raise self.make_raise("UnboundLocalError", f"cannot access local variable '{name}' where it is not associated with a value")
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
        raise self.make_raise("NameError", f"name '{name}' is not defined")

    def e_Attribute(self, node: ir.Node, frame: Frame) -> Any:
        value = node.value  # the hot handlers dispatch inline (one call less per node)
        return self.getattr(EXPR_HANDLERS[value.__class__](self, value, frame), node.attr)

    def e_Subscript(self, node: ir.Node, frame: Frame) -> Any:
        obj = self.evaluate(node.value, frame)
        index = self.evaluate(node.index, frame)
        return self.getitem(obj, index)

    def e_Slice(self, node: ir.Node, frame: Frame) -> Any:
        parts = [None if p is None else self.evaluate(p, frame) for p in (node.lower, node.upper, node.step)]
        u = first_unknown(parts)
        return u if u is not None else slice(*parts)

    def e_JoinedStr(self, node: ir.Node, frame: Frame) -> Any:
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
        return self.build_seq(node.elts, frame)

    def e_TupleExpr(self, node: ir.Node, frame: Frame) -> Any:
        return tuple(self.build_seq(node.elts, frame))

    def e_SetExpr(self, node: ir.Node, frame: Frame) -> Any:
        items = self.build_seq(node.elts, frame)
        u = first_unknown(items)
        if u is not None:
            return Unknown(f"set containing an unknown ({u.reason})", u.key)
        return self.data_op(lambda: set(items))

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

    def e_BinOp(self, node: ir.Node, frame: Frame) -> Any:
        left = self.evaluate(node.left, frame)
        right = self.evaluate(node.right, frame)
        return self.binop(node.op, left, right)

    def binop(self: Self, op: str, left: Any, right: Any) -> Any:
        if isinstance(left, Unknown):
            return left
        if isinstance(right, Unknown):
            return right
        if op == "%" and isinstance(left, str):
            args = right if isinstance(right, tuple) else (right,)
            _check_percent_widths(left, right, self.bounds.max_seq_len)
            if all(is_plain(a) for a in args):
                return self.data_op(lambda: left % right)
            return left % tuple(self.to_str(a) for a in args) if "%s" in left else Unknown("string formatting of objects")
        if is_plain(left) and is_plain(right):
            fn = _BIN.get(op)
            if fn is None:
                return Unknown(f"operator {op}")
            self.check_size(op, left, right)
            return self.data_op(lambda: fn(left, right))
        if isinstance(left, Instance) and "enum" in left.cls.flags and op == "|":
            return Unknown("enum flag combination")
        if op == "|" and (isinstance(left, (Class, External, Native, TypeForm)) or left is None) and (isinstance(right, (Class, External, Native, TypeForm)) or right is None):
            return TypeForm(External("typing.Union"), tuple(x if x is not None else External("builtins.NoneType") for x in (left, right)))
        for obj, name, other, _reflected in ((left, _DUNDER.get(op), right, False), (right, _RDUNDER.get(op), left, True)):
            if isinstance(obj, Instance) and name:
                found, meth = obj.cls.lookup(name)
                if found:
                    return self.call(self.bind(meth, obj, obj.cls), [other], {})
        if isinstance(left, Instance) and "str_mixin" in left.cls.flags and op == "+":
            return self.binop(op, left.attrs.get("_value_"), right)
        native = self.natives.binop(self, op, left, right)
        if native is not _NOT_NATIVE:
            return native
        return Unknown(f"operator {op} on {type(left).__name__} and {type(right).__name__}")

    def check_size(self, op: str, left: Any, right: Any) -> None:
        limit = self.bounds.max_seq_len
        if op == "+" and isinstance(left, (str, list, tuple, bytes)) and isinstance(right, (str, list, tuple, bytes)):
            if len(left) + len(right) > limit:
                raise AnalysisBound("analysis bound reached: sequence too large")
        if op == "*" and isinstance(left, (str, list, tuple, bytes)) and isinstance(right, int):
            if len(left) * right > self.bounds.max_seq_len:
                raise AnalysisBound("analysis bound reached: sequence too large")
        if op == "*" and isinstance(right, (str, list, tuple, bytes)) and isinstance(left, int):
            if len(right) * left > self.bounds.max_seq_len:
                raise AnalysisBound("analysis bound reached: sequence too large")
        if op == "**" and isinstance(right, int) and abs(right) > 4096:
            raise AnalysisBound("analysis bound reached: exponent too large")
        if op == "<<" and isinstance(right, int) and right > 4096:
            raise AnalysisBound("analysis bound reached: shift too large")
        if type(left) is int and type(right) is int:
            # the result's size, before it is computed (x = x * x doubles it per step)
            bits = left.bit_length()
            grown = {"*": bits + right.bit_length(), "**": bits * abs(right), "<<": bits + max(right, 0)}.get(op, 0)
            if grown > self.bounds.max_int_bits:
                raise AnalysisBound("analysis bound reached: integer too large")
        if op == "%" and isinstance(left, str):
            _check_percent_widths(left, right, limit)

    def e_UnaryOp(self, node: ir.Node, frame: Frame) -> Any:
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

    def compare(self: Self, op: str, left: Any, right: Any) -> Any:
        if op in ("is", "is not"):
            if isinstance(left, Unknown) or isinstance(right, Unknown):
                u = left if isinstance(left, Unknown) else right
                r = Unknown(u.reason, (u.key + f" is {right!r}") if u.key else None)
                return r if op == "is" else negated(r)
            same = left is right or (left is None and right is None)
            if isinstance(left, External) and isinstance(right, External):
                same = left.path == right.path  # outside objects are named, not allocated
            if isinstance(left, bool) and isinstance(right, bool):
                same = left == right
            if _is_none_type(left) and _is_none_type(right):
                same = True  # `type(None)` vs the NoneType inside Optional[X] (get_args)
            return same if op == "is" else not same
        if op in ("in", "not in"):
            r = self.contains(right, left)
            if isinstance(r, Unknown):
                return r if op == "in" else negated(r)
            return r if op == "in" else not r
        if isinstance(left, Unknown) or isinstance(right, Unknown):
            u = left if isinstance(left, Unknown) else right
            other = right if u is left else left
            if op in ("==", "!="):
                eq = self.eq_unknown(u.reason, u.key, other)
                return eq if op == "==" else negated(eq)
            key = f"{u.key} {op} {other!r}" if u.key and is_plain(other) else None
            return Unknown(u.reason, key)
        if op in ("==", "!="):
            eq = self.equals(left, right)
            if isinstance(eq, Unknown):
                return eq if op == "==" else negated(eq)
            if op == "!=" and getattr(eq, "native_truth", None) is not None:
                return self.natives.compare(self, op, left, right)  # a world's elementwise result
            return eq if op == "==" else not eq
        left_v = self.plain_of(left)
        right_v = self.plain_of(right)
        if is_plain(left_v) and is_plain(right_v):
            if contains_unknown(left_v) or contains_unknown(right_v):
                return Unknown("comparison of values that contain an unknown")
            return self.data_op(lambda: _CMP[op](left_v, right_v))
        if isinstance(left, Instance):
            found, meth = left.cls.lookup(_CMP_DUNDER[op])
            if found:
                return self.call(self.bind(meth, left, left.cls), [right], {})
        native = self.natives.compare(self, op, left, right)
        if native is not _NOT_NATIVE:
            return native
        return Unknown(f"comparison {op} of {type(left).__name__} and {type(right).__name__}")

    def plain_of(self, value: Any) -> Any:
        if isinstance(value, Instance) and "str_mixin" in value.cls.flags:
            return value.attrs.get("_value_")
        if isinstance(value, Instance) and "int_mixin" in value.cls.flags:
            return value.attrs.get("_value_")
        return value

    def equals(self: Self, left: Any, right: Any) -> Any:
        if left is right:
            return True
        left_v = self.plain_of(left)
        right_v = self.plain_of(right)
        if isinstance(left_v, (list, tuple, dict, set, frozenset)) and isinstance(right_v, (list, tuple, dict, set, frozenset)):
            self.charge_walk(left_v, right_v)
        if is_plain(left_v) and is_plain(right_v):
            if contains_unknown(left_v) or contains_unknown(right_v):
                if isinstance(left_v, (list, tuple)) and isinstance(right_v, (list, tuple)):
                    if len(left_v) != len(right_v):
                        return False
                    for a, b in zip(left_v, right_v, strict=False):
                        e = self.equals(a, b)
                        if e is not True:
                            return e
                    return True
                return Unknown("equality of values that contain an unknown")
            return left_v == right_v
        if isinstance(left_v, Unknown) or isinstance(right_v, Unknown):
            u = left_v if isinstance(left_v, Unknown) else right_v
            return self.eq_unknown(u.reason, u.key, right_v if u is left_v else left_v)
        if isinstance(left, Instance):
            found, meth = left.cls.lookup("__eq__")
            if found and isinstance(meth, Function):
                return self.call(self.bind(meth, left, left.cls), [right], {})
        if isinstance(left, External) or isinstance(right, External):
            ext = left if isinstance(left, External) else right
            if is_plain(left_v) or is_plain(right_v):
                return self.eq_unknown(f"value of {ext.path} is not modelled", f"ext:{ext.identity}",
                                       right_v if is_plain(right_v) else left_v)
            if isinstance(left, External) and isinstance(right, External):
                if self.call_hook is not None and ("(" in left.path or "(" in right.path) and left.path != right.path:
                    # layer stage: an object made by a call (a tensor's dtype) is not known to differ
                    return Unknown(f"value of {ext.path} is not modelled", f"ext:{left.identity}=={right.identity}")
                return left.path == right.path
        native = self.natives.compare(self, "==", left, right)
        if native is not _NOT_NATIVE:
            return native  # the world's own values (an elementwise comparison of a tensor)
        return False

    def contains(self: Self, container: Any, item: Any) -> Any:
        tc, ti = type(container), type(item)
        if (tc is dict or tc is set or tc is frozenset) and (ti is str or ti is int):
            # the common case at C speed: a hit, or a miss among keys none of which may equal
            # a str/int without being one; anything else takes the general path below
            if item in container:
                return True
            if _EXACT_KEYS.isdisjoint(map(type, container)):
                return False
        if isinstance(container, Unknown):
            # membership is a decision of its own per item, not the container's truthiness
            key = (f"{item!r} in {container.key}" if container.key and is_plain(item) and not contains_unknown(item)
                   else None)
            return Unknown(container.reason, key)
        if isinstance(container, (dict, set, frozenset)) and is_plain(item):
            self.data_op(lambda: hash(item))  # TypeError: unhashable type: 'list'
        if isinstance(container, (dict, set, frozenset)) and (is_plain(item) and not isinstance(item, (list, dict, set))):
            if isinstance(item, Unknown):
                return _in_unknown(item, container)
            if contains_unknown(item):
                return Unknown("membership of a value that contains an unknown")
            keys: Collection[Any]
            if isinstance(container, dict):
                keys = container.keys()
            else:
                keys = container
            try:
                if item in keys:
                    return True
            except TypeError:
                pass
            if _EXACT_KEYS.isdisjoint(map(type, keys)):
                return False
        if isinstance(container, str):
            if isinstance(item, Unknown):
                return _in_unknown(item, container)
            item_v = self.plain_of(item)
            if not isinstance(item_v, str):
                name = item_v.cls.name if isinstance(item_v, Instance) else type(item_v).__name__
                raise self.make_raise("TypeError", f"'in <string>' requires string as left operand, not {name}")
            return item_v in container
        if isinstance(container, (list, tuple, set, frozenset, dict, range)):
            seen_unknown: Unknown | None = None
            elems = container.keys() if isinstance(container, dict) else container
            self.charge(len(elems))
            for elem in elems:
                eq = self.equals(elem, item)
                if eq is True:
                    return True
                if isinstance(eq, Unknown):
                    seen_unknown = eq
            if isinstance(item, Unknown):
                return _in_unknown(item, container)
            return seen_unknown if seen_unknown is not None else False
        if isinstance(container, HFConfig):
            return self.contains(container.attrs, item)
        if isinstance(container, Class) and "enum" in container.flags:
            members = container.ns.get("__members_list__", [])
            return any(m is item for m in members)
        if isinstance(container, Instance):
            found, meth = container.cls.lookup("__contains__")
            if found:
                return self.call(self.bind(meth, container, container.cls), [item], {})
        if isinstance(container, External):
            # the path names the object, not the call's arguments: the key adds the item
            key = f"in:{container.identity}:{item!r}" if is_plain(item) and not contains_unknown(item) else None
            return Unknown(f"membership in {container.path} is not modelled", key)
        if self.natives.is_environ(container):
            return self.natives.environ_contains(self, item)
        if isinstance(container, SCALARS):
            # `x in None`: CPython's own TypeError (the item is never looked at)
            # a scalar on purpose: CPython's own TypeError for it
            return self.data_op(lambda: operator.contains(container, None))  # type: ignore[arg-type]
        return Unknown(f"membership in {type(container).__name__} is not modelled")

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
        out: list[Any] = []
        self.comprehension(node, frame, lambda f: out.append(self.evaluate(node.elt, f)))
        return out

    e_GeneratorExp = e_ListComp

    def e_SetComp(self, node: ir.Node, frame: Frame) -> Any:
        out = self.e_ListComp(node, frame)
        u = first_unknown(out)
        return u if u is not None else self.data_op(lambda: set(out))

    def e_DictComp(self, node: ir.Node, frame: Frame) -> Any:
        out: dict[Any, Any] = {}

        def emit(f: Frame) -> None:
            k = self.evaluate(node.key, f)
            v = self.evaluate(node.value, f)
            if isinstance(k, Unknown):
                raise Unmodelled(f"dict comprehension with an unknown key at {frame.module.file}:{node.line}")
            self.data_op(lambda: out.__setitem__(k, v))

        self.comprehension(node, frame, emit)
        return out

    def e_Call(self, node: ir.Node, frame: Frame) -> Any:
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


def _no_handler(prefix: str, kind: str) -> Callable[..., Any]:
    def handler(interp: Interpreter, node: ir.Node, frame: Frame) -> Any:
        raise AttributeError(f"type object 'Interpreter' has no attribute '{prefix}{kind}'")

    return handler


# the dispatch tables (core.py declares them, the parts' hot paths read them): every IR node
# class -> the composed class's handler of its kind (``s_<Kind>``, ``e_<Kind>``)
for _cls in vars(ir).values():
    if isinstance(_cls, type) and issubclass(_cls, ir.Node):
        STMT_HANDLERS[_cls] = getattr(Interpreter, "s_" + _cls.kind, None) or _no_handler("s_", _cls.kind)
        EXPR_HANDLERS[_cls] = getattr(Interpreter, "e_" + _cls.kind, None) or _no_handler("e_", _cls.kind)


__all__ = [
    "Interpreter", "Frame", "Bounds", "PyRaise", "Unmodelled", "LogRecord", "FieldSpec",
    "Property", "is_plain",
    # the names other packages import from here (each defined in the part that uses it)
    "NOT_HOOKED", "stop_reason", "call_identity", "short_identity", "WorldState", "World", "PathState",
    "GeneratorContext", "function_locals", "EXPR_HANDLERS", "STMT_HANDLERS",
]
