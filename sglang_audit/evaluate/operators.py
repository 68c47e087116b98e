"""Operators: arithmetic, comparison, equality and membership over plain data, analysed
objects (their dunders), unknowns (a decision keyed by the input) and the world's values."""

from __future__ import annotations

import operator
import re
from collections.abc import Collection
from typing import Any, Self

from sglang_audit.evaluate.core import InterpreterCore
from sglang_audit.evaluate.plaindata import SCALARS, contains_unknown, is_plain
from sglang_audit.evaluate.values import NOT_HANDLED as _NOT_NATIVE
from sglang_audit.evaluate.values import (
    AnalysisBound,
    Class,
    External,
    Function,
    HFConfig,
    Instance,
    Native,
    TypeForm,
    Unknown,
    negated,
)

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


class Operators(InterpreterCore):
    """Binary operators, comparisons, equality and membership."""

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

