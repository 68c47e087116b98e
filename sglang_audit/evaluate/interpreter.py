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
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Collection
from typing import Any, Self, cast

from sglang_audit.evaluate.attributes import Attributes
from sglang_audit.evaluate.bounds import Bounds
from sglang_audit.evaluate.calls import Calls, function_locals
from sglang_audit.evaluate.core import (
    EXPR_HANDLERS,
    NOT_HOOKED,
    STMT_HANDLERS,
    VALUE_FORMS,
    Frame,
    InterpreterCore,
    LogRecord,
    PathState,
    PyRaise,
    Unmodelled,
    call_identity,
    short_identity,
    stop_reason,
)
from sglang_audit.evaluate.generators import GeneratorContext, Generators
from sglang_audit.evaluate.modules import Modules
from sglang_audit.evaluate.plaindata import (
    CONTAINERS,
    SCALARS,
    contains_unknown,
    first_unknown,
    is_plain,
    stable_repr,
)
from sglang_audit.evaluate.statements import Statements
from sglang_audit.evaluate.values import NOT_HANDLED as _NOT_NATIVE
from sglang_audit.evaluate.values import (
    AnalysisBound,
    Class,
    External,
    FieldSpec,
    Function,
    Guard,
    HFConfig,
    Instance,
    LazyImport,
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


def _is_none_type(value: Any) -> bool:
    """NoneType as the evaluator represents it: ``type(None)`` is a Native, the member of
    ``Optional[X]`` an External; SGLang compares the two with ``is`` (arg_utils)."""
    if isinstance(value, External):
        return value.path in ("builtins.NoneType", "types.NoneType")
    return isinstance(value, Native) and value.name == "NoneType"


class Interpreter(Statements, Generators, Calls, Attributes, Modules, InterpreterCore):
    """Evaluates analysed modules for one path (one assignment of unknown decisions): the
    parts composed over the core (each part's methods in its own module)."""

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
