"""A config class's body run on config.json's values, statement by statement, on plain data.

``configclass`` finds the class and what it computes; this module runs that code: the
class's ``__init__``/``__post_init__`` and, for a transformers 5 class, the part of
``PreTrainedConfig``'s own initialiser that turns config.json's rope keys into
``rope_parameters`` with the methods it calls (``rules/hf_config.toml [transformers_rope]``),
all read from the wheel's source. Anything that is not plain data (a call it does not know, a
loop over an unknown, an attribute it cannot place) stops the evaluation with the line, and
the caller answers ``unknown`` naming it.

Two ways of reading ``self.x``: the class's own body reads config.json's value or the class
default (``attr_of``), as before the base class runs; a method of the base machinery reads
only what is set on the object at that point (what the body assigned, the dataclass fields,
class attributes), because config.json's other keys become attributes only after it.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from sglang_audit.evaluate.values import Unknown

NOT_LITERAL = object()
MAX_STATEMENTS = 2000  # a config initialiser is short straight-line code; more is not evaluated
_BIN_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b, "/": lambda a, b: a / b, "%": lambda a, b: a % b,
    "|": lambda a, b: a | b, "&": lambda a, b: a & b,
}
_CMP_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "is": lambda a, b: a is b, "is not": lambda a, b: a is not b, "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
}
# calls whose only effect is a check or a log line (they set no attribute): skipped
SKIPPED_CALLS = ("logger.", "warnings.warn", "rope_config_validation", "self._rope_scaling_validation",
                 "super().__init__", "super().__post_init__")
PLAIN = (int, float, str, bool, type(None), list, tuple, dict, set, frozenset)
# methods of plain values the conversion code calls; a method that mutates is listed so the
# values it reaches are the evaluation's own copies (config.json's dicts are copied on entry)
_METHODS: dict[type, frozenset[str]] = {
    dict: frozenset({"get", "setdefault", "pop", "keys", "values", "items", "copy", "update"}),
    set: frozenset({"issubset", "issuperset", "union", "intersection", "add", "copy"}),
    frozenset: frozenset({"issubset", "issuperset", "union", "intersection"}),
    list: frozenset({"append", "copy", "index", "count"}),
    str: frozenset({"startswith", "endswith", "lower", "upper"}),
}
_MAX_RANGE = 100_000  # a layer list is short; a longer range() is not evaluated


def _repeated_length(left: Any, right: Any) -> int:
    """The length of ``left * right`` when it repeats a sequence, else 0."""
    seq, n = (left, right) if isinstance(right, int) else (right, left)
    if isinstance(seq, (list, tuple, str)) and isinstance(n, int) and not isinstance(n, bool):
        return len(seq) * n
    return 0


def _range(*args: int) -> list[int]:
    r = range(*args)
    if len(r) > _MAX_RANGE:
        raise ValueError(f"range of {len(r)} items")
    return list(r)


_BUILTINS: dict[str, Callable[..., Any]] = {"set": set, "list": list, "tuple": tuple, "len": len, "bool": bool,
                                            "sorted": sorted, "frozenset": frozenset, "range": _range, "float": float,
                                            "int": int, "str": str, "min": min, "max": max, "abs": abs}


@dataclass(frozen=True)
class Members:
    """What a chain of class bodies defines (a later class overriding an earlier one)."""

    values: Mapping[str, Any] = field(default_factory=dict)  # class attribute -> literal (NOT_LITERAL otherwise)
    properties: frozenset[str] = frozenset()
    fields: frozenset[str] = frozenset()  # annotated (dataclass) fields
    getattr_hooks: tuple[str, ...] = ()  # classes defining __getattribute__/__getattr__
    # each class's own methods (name -> (file, ir.FunctionDef)), most derived first: what
    # ``self.m`` finds and where ``super().m()`` continues
    chain: tuple[tuple[str, Mapping[str, tuple[str, Any]]], ...] = ()

    @functools.cached_property
    def methods(self) -> dict[str, tuple[str, Any]]:
        """name -> (file, def) as ``self.name`` finds it."""
        out: dict[str, tuple[str, Any]] = {}
        for _cls, methods in reversed(self.chain):
            out.update(methods)
        return out

    @functools.cached_property
    def names(self) -> frozenset[str]:
        return frozenset(self.values) | frozenset(self.methods) | self.properties | self.fields

    def then(self, later: Members) -> Members:
        return Members({**self.values, **later.values}, (self.properties - later.names) | later.properties,
                       self.fields | later.fields, self.getattr_hooks + later.getattr_hooks, later.chain + self.chain)

    def method(self, name: str, after: str | None = None) -> tuple[str, str, Any] | None:
        """(class, file, def) of ``name`` as ``self.name`` finds it, or as ``super().name``
        does from class ``after``."""
        seen = after is None
        for cls, methods in self.chain:
            if seen and name in methods:
                return (cls, *methods[name])
            seen = seen or cls == after
        return None


@dataclass(frozen=True)
class RopeBase:
    """transformers' PreTrainedConfig as its rope conversion needs it, read from the wheel."""

    where: str  # e.g. "transformers==5.19.0 transformers/configuration_utils.py:314 PreTrainedConfig.__post_init__"
    file: str
    func: Any  # the initialiser holding the conversion (ir.FunctionDef)
    block: Any  # its top-level statement that calls the converter
    members: Members  # over PreTrainedConfig's MRO (its bases first)
    checks: tuple[str, ...] = ()  # calls that only check or log (rules/hf_config.toml)
    plain_hooks: tuple[str, ...] = ()  # classes whose __getattribute__ leaves these reads plain (same file)
    why_not: str | None = None  # the conversion cannot be evaluated: why


class Stop(Exception):
    def __init__(self, node: Any, why: str, file: str | None = None) -> None:
        super().__init__(why)
        self.node, self.why, self.file = node, why, file


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


@dataclass
class _Frame:
    env: dict[str, Any]
    selfname: str
    file: str
    kwargs: str | None  # the ``**kwargs`` parameter's name
    base: bool  # a method of the base machinery: strict reads of ``self``
    owner: str | None = None  # the class defining the running method (for ``super()``)


class Body:
    """One evaluation of a config class's initialiser on one config.json (``given``)."""

    def __init__(self, recipe: Any, given: Mapping[str, Any], attr_of: Callable[[str], Any]) -> None:
        self.recipe = recipe
        self.given = given
        self.attr_of = attr_of
        self.state: dict[str, Any] = {}
        self.count = 0
        self.rope_ran = False  # the base's rope conversion ran (at the super() call)
        self.leftover: dict[str, Any] | None = None  # config.json keys the conversion left
        self.rope_unknown: str | None = None  # the conversion is not where the body's super() call goes
        self._merged: Members | None = None  # PreTrainedConfig's MRO, then the class chain

    # ---- entry -------------------------------------------------------------------------
    def run_init(self) -> None:
        recipe = self.recipe
        func = recipe.func
        env: dict[str, Any] = {}
        for pname, default in recipe.params.items():
            env[pname] = _own(self.given[pname]) if pname in self.given and func.name == "__init__" else default
        if recipe.kwargs:
            named = set(recipe.params)
            if func.name == "__post_init__":
                named |= self._members().fields  # the dataclass __init__ took the fields
            env[recipe.kwargs] = {k: _own(v) for k, v in self.given.items() if k not in named}
        frame = _Frame(env, func.params[0].name if func.params else "self", recipe.file, recipe.kwargs, False)
        self.run(func.body, frame)

    # ---- self --------------------------------------------------------------------------
    def _members(self) -> Members:
        if self._merged is None:
            own, base = self.recipe.members, self.recipe.rope
            self._merged = base.members.then(own) if base is not None else own
        return self._merged

    def _is_field(self, name: str) -> bool:
        # a v5 dataclass field is set by the generated __init__ before __post_init__ runs
        return self.recipe.func.name == "__post_init__" and name in self._members().fields

    def _alias(self, name: str) -> str:
        return self.recipe.attribute_map.get(name, name)

    def has_attr(self, node: Any, name: str) -> bool:
        """``hasattr(self, name)`` while the base initialiser runs."""
        name = self._alias(name)
        members = self._members()
        if name in self.state or self._is_field(name) or name in members.names:
            return True
        hooks = [h for h in members.getattr_hooks if h not in (self.recipe.rope.plain_hooks if self.recipe.rope else ())]
        if hooks:
            raise Stop(node, f"{hooks[0]} defines its own attribute lookup")
        return False

    def read_self(self, node: Any, name: str, frame: _Frame) -> Any:
        name = self._alias(name) if frame.base else name
        if name in self.state:
            return self.state[name]
        recipe = self.recipe
        if not frame.base:
            if name not in self.given and name in recipe.fields:
                return _own(recipe.fields[name])
            if name not in self.given and name in recipe.inherited:
                return _own(recipe.inherited[name])  # set by the base class (unknown if it computes it)
            return _own(self.attr_of(name))
        members = self._members()
        if self._is_field(name):
            if name in self.given:
                return _own(self.given[name])
            if name in recipe.fields:
                return _own(recipe.fields[name])
            raise Stop(node, f"the field {name}'s default is not a literal")
        if name in members.properties:
            raise Stop(node, f"property {name} not evaluated")
        if name in members.values:
            value = members.values[name]
            if value is NOT_LITERAL:
                raise Stop(node, f"class attribute {name} is not a literal")
            return _own(value)
        if name in members.methods:
            raise Stop(node, f"method {name} read as a value")
        if not self.has_attr(node, name):
            raise _Missing(node, name)
        raise Stop(node, f"self.{name} not evaluated")

    # ---- expressions -------------------------------------------------------------------
    def ev(self, node: Any, frame: _Frame) -> Any:
        kind = node.kind
        if kind == "Const":
            return node.value
        if kind == "Name":
            if node.id in ("None", "True", "False"):
                return {"None": None, "True": True, "False": False}[node.id]
            value: Any = frame.env.get(node.id, NOT_LITERAL)
            if value is NOT_LITERAL:
                raise Stop(node, f"{node.id} is not a literal")
            if isinstance(value, Unknown):
                raise Stop(node, f"{node.id}: {value.reason}")
            return value
        if kind == "Attribute" and node.value.kind == "Name" and node.value.id == frame.selfname:
            try:
                value = self.read_self(node, node.attr, frame)
            except _Missing as missing:
                raise Stop(node, f"self.{missing.name} is not set here (AttributeError)") from None
            if isinstance(value, Unknown):
                raise Stop(node, f"self.{node.attr}: {value.reason}")
            return value
        if kind in ("ListExpr", "TupleExpr", "SetExpr"):
            items = [self.ev(e, frame) for e in node.elts]
            return items if kind == "ListExpr" else tuple(items) if kind == "TupleExpr" else set(_hashable(items, node))
        if kind == "DictExpr" and all(k is not None for k, _ in node.items):
            out = {}
            for k, v in node.items:
                key = plain(self.ev(k, frame), node)
                _hashable([key], node)
                out[key] = self.ev(v, frame)
            return out
        if kind == "Subscript" and node.index.kind != "Slice":
            container, index = plain(self.ev(node.value, frame), node), plain(self.ev(node.index, frame), node)
            try:
                return container[index]
            except (KeyError, IndexError, TypeError) as exc:
                raise Stop(node, f"{type(exc).__name__}: {exc}") from None
        if kind == "BinOp" and node.op in _BIN_OPS:
            left, right = plain(self.ev(node.left, frame), node), plain(self.ev(node.right, frame), node)
            if isinstance(left, int) and isinstance(right, int) and max(abs(left), abs(right)) > 1 << 64:
                raise Stop(node, "integer too large")
            if node.op == "*" and _repeated_length(left, right) > _MAX_RANGE:
                # ["dense"] * num_hidden_layers: a config.json is untrusted input
                raise Stop(node, "sequence too long")
            try:
                return _BIN_OPS[node.op](left, right)
            except (ArithmeticError, TypeError, ValueError) as exc:
                raise Stop(node, f"{type(exc).__name__}: {exc}") from None
        if kind == "UnaryOp" and node.op in ("not", "-", "USub", "Not"):
            value = plain(self.ev(node.operand, frame), node)
            return (not value) if node.op in ("not", "Not") else -value
        if kind == "BoolOp":
            value = None
            for part in node.values:
                value = plain(self.ev(part, frame), node)
                if bool(value) == (node.op == "or"):
                    return value
            return value
        if kind == "Compare":
            left = plain(self.ev(node.left, frame), node)
            for op, comp in zip(node.ops, node.comparators, strict=True):
                right = plain(self.ev(comp, frame), node)
                if op not in _CMP_OPS:
                    raise Stop(node, f"operator {op}")
                try:
                    if not _CMP_OPS[op](left, right):
                        return False
                except TypeError as exc:
                    raise Stop(node, f"TypeError: {exc}") from None
                left = right
            return True
        if kind == "NamedExpr" and node.target.kind == "Name":
            # `if (n := kwargs.get("num_experts")) is not None:` (transformers 5.19's GLM-5)
            value = self.ev(node.value, frame)
            frame.env[node.target.id] = value
            return value
        if kind == "IfExp":
            return self.ev(node.body, frame) if plain(self.ev(node.test, frame), node) else self.ev(node.orelse, frame)
        if kind in ("ListComp", "SetComp") and len(node.generators) == 1:
            target, iterable, ifs = node.generators[0]
            if target.kind != "Name":
                raise Stop(node, "comprehension target not evaluated")
            found = []
            inner = replace(frame, env=dict(frame.env))
            for item in _iterable(plain(self.ev(iterable, frame), node), node):
                inner.env[target.id] = item
                if all(plain(self.ev(c, inner), node) for c in ifs):
                    found.append(self.ev(node.elt, inner))
            return found if kind == "ListComp" else set(_hashable(found, node))
        if kind == "Call":
            return self.call(node, frame)
        raise Stop(node, f"{kind} not evaluated")

    def call(self, node: Any, frame: _Frame) -> Any:
        func = node.func
        # kwargs.pop / kwargs.get: the one call a class's own body makes
        if func.kind == "Attribute" and func.value.kind == "Name" and func.value.id == frame.kwargs \
                and func.attr in ("pop", "get") and not frame.base:
            args = [self.ev(a, frame) for k, a in node.args if k == ""]
            if not args or len(args) > 2 or any(k != "" for k, _ in node.args):
                raise Stop(node, "kwargs call not evaluated")
            bag = frame.env[cast(str, frame.kwargs)]  # equal to a Name's id: set
            default = args[1] if len(args) > 1 else None
            return bag.pop(args[0], default) if func.attr == "pop" else bag.get(args[0], default)
        if self.recipe.rope is None:
            raise Stop(node, "Call not evaluated")  # only the base machinery calls more
        if func.kind == "Name" and func.id in ("hasattr", "getattr") and node.args and node.args[0][1].kind == "Name" \
                and node.args[0][1].id == frame.selfname and func.id not in frame.env:
            rest = [self.ev(a, frame) for k, a in node.args[1:] if k == ""]
            if len(rest) != len(node.args) - 1 or not rest or not isinstance(rest[0], str) \
                    or len(rest) > (1 if func.id == "hasattr" else 2):
                raise Stop(node, f"{func.id}() call not evaluated")
            if func.id == "hasattr":
                return self.has_attr(node, rest[0])
            try:
                value = self.read_self(node, rest[0], replace(frame, base=True))
            except _Missing:
                if len(rest) == 2:
                    return rest[1]
                raise Stop(node, f"self.{rest[0]} is not set here (AttributeError)") from None
            if isinstance(value, Unknown):
                raise Stop(node, f"self.{rest[0]}: {value.reason}")
            return value
        if func.kind == "Name" and func.id in _BUILTINS and func.id not in frame.env:
            args, kwargs = self._args(node, frame)
            if kwargs:
                raise Stop(node, f"{func.id}() with keywords")
            try:
                return _BUILTINS[func.id](*[plain(a, node) for a in args])
            except (TypeError, ValueError) as exc:
                raise Stop(node, f"{type(exc).__name__}: {exc}") from None
        if func.kind == "Attribute" and func.value.kind == "Name" and func.value.id == frame.selfname:
            return self.call_method(node, func.attr, frame)
        if func.kind == "Attribute" and func.value.kind == "Call" and dotted(func.value.func) == "super" \
                and not func.value.args and frame.owner is not None:
            return self.call_method(node, func.attr, frame, after=frame.owner)
        if func.kind == "Attribute":
            receiver = self.ev(func.value, frame)
            allowed = _METHODS.get(type(receiver), frozenset())
            if func.attr not in allowed:
                raise Stop(node, f"{type(receiver).__name__}.{func.attr}() not evaluated")
            args, kwargs = self._args(node, frame)
            try:
                got = getattr(receiver, func.attr)(*args, **kwargs)
            except (KeyError, TypeError, ValueError) as exc:
                raise Stop(node, f"{type(exc).__name__}: {exc}") from None
            # a dict view as a list: iterated, tested with `in`, or passed to set() here
            return list(got) if func.attr in ("keys", "values", "items") and isinstance(receiver, dict) else got
        raise Stop(node, "Call not evaluated")

    def _args(self, node: Any, frame: _Frame) -> tuple[list[Any], dict[str, Any]]:
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for key, arg in node.args:
            value = self.ev(arg, frame)
            if key == "":
                args.append(value)
            elif key == "*":
                args.extend(_iterable(plain(value, node), node))
            elif key == "**":
                if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                    raise Stop(node, "** of a value that is not a mapping")
                kwargs.update(value)
            else:
                kwargs[key] = value
        return args, kwargs

    def call_method(self, node: Any, name: str, frame: _Frame, after: str | None = None) -> Any:
        """``self.name(...)`` (or ``super().name(...)`` from class ``after``): a method of the
        class chain or of PreTrainedConfig's MRO, run."""
        found = self._members().method(name, after)
        if found is None or (after is None and name in self.state):
            raise Stop(node, f"{'super()' if after else 'self'}.{name}() not found in the config classes read")
        owner, file, func = found
        if func.decorators:
            raise Stop(node, f"self.{name}() is decorated")
        args, kwargs = self._args(node, frame)
        env: dict[str, Any] = {}
        params = func.params[1:] if func.params else []
        star = next((p.name for p in params if p.star == "**"), None)
        positional = [p for p in params if p.star == ""]
        if len(args) > len(positional) or any(p.star == "*" for p in params):
            raise Stop(node, f"self.{name}() called with positional arguments it does not take")
        for p, value in zip(positional, args, strict=False):
            env[p.name] = value
        for p in params:
            if p.star in ("", "kwonly") and p.name not in env:
                if p.name in kwargs:
                    env[p.name] = kwargs.pop(p.name)
                elif p.default is not None:
                    default = literal(p.default)
                    if default is NOT_LITERAL:
                        raise Stop(p, f"default of {p.name} is not a literal", file)
                    env[p.name] = default
                else:
                    raise Stop(node, f"self.{name}() misses its argument {p.name}")
        if star is not None:
            env[star] = kwargs
        elif kwargs:
            raise Stop(node, f"self.{name}() got unexpected keywords")
        inner = _Frame(env, func.params[0].name if func.params else "self", file, star, True, owner)
        try:
            self.run(func.body, inner)
        except _Return as ret:
            return ret.value
        return None

    # ---- statements --------------------------------------------------------------------
    def run(self, body: list[Any], frame: _Frame) -> None:
        recipe = self.recipe
        for stmt in body:
            self.count += 1
            if self.count > MAX_STATEMENTS:
                raise Stop(stmt, "too many statements")
            kind = stmt.kind
            try:
                self._statement(stmt, kind, frame, recipe)
            except Stop as stop:
                if stop.file is None:
                    stop.file = frame.file
                raise

    def _statement(self, stmt: Any, kind: str, frame: _Frame, recipe: Any) -> None:
        selfname = frame.selfname
        if kind == "Assign" and len(stmt.targets) == 1:
            target = stmt.targets[0]
            try:
                value = self.ev(stmt.value, frame)
            except Stop as stop:
                # in the class's own body a value not evaluated taints its target only (a read of it stops)
                if frame.base or not (target.kind == "Name" or (target.kind == "Attribute" and target.value.kind == "Name"
                                                                and target.value.id == selfname)):
                    raise
                value = Unknown(f"not evaluated past {frame.file}:{getattr(stop.node, 'line', stmt.line)} ({stop.why})")
            self.assign(target, value, frame, stmt)
        elif kind == "If":
            self.run(stmt.body if plain(self.ev(stmt.test, frame), stmt) else stmt.orelse, frame)
        elif kind == "ExprStmt" and stmt.value.kind == "Const":
            return  # a docstring
        elif kind == "ExprStmt" and stmt.value.kind == "Call" and dotted(stmt.value.func) in ("super().__init__", "super().__post_init__") \
                and not frame.base:
            self.super_call(stmt, frame)
        elif kind == "ExprStmt" and stmt.value.kind == "Call" and dotted(stmt.value.func).startswith(
                SKIPPED_CALLS + (recipe.rope.checks if recipe.rope is not None else ())):
            return
        elif kind == "ExprStmt" and stmt.value.kind == "Call" and stmt.value.func.kind == "Attribute" \
                and stmt.value.func.attr == "pop" and stmt.value.func.value.kind == "Name" \
                and stmt.value.func.value.id == frame.kwargs and not frame.base:
            self.ev(stmt.value, frame)
        elif kind == "ExprStmt" and stmt.value.kind == "Call" and (frame.base or recipe.rope is not None):
            self.ev(stmt.value, frame)  # kwargs.setdefault(...), self.m(...), d.setdefault(...)
        elif kind == "Return" and frame.base:
            raise _Return(self.ev(stmt.value, frame) if stmt.value is not None else None)
        elif kind == "For" and frame.base and not stmt.orelse and stmt.target.kind == "Name":
            for item in list(_iterable(plain(self.ev(stmt.iter, frame), stmt), stmt)):
                frame.env[stmt.target.id] = item
                self.run(stmt.body, frame)  # no break/continue in this code: they stop below
        elif kind == "Pass":
            return
        else:
            raise Stop(stmt, f"{kind} statement not evaluated")

    def assign(self, target: Any, value: Any, frame: _Frame, stmt: Any) -> None:
        if target.kind == "Attribute" and target.value.kind == "Name" and target.value.id == frame.selfname:
            self.state[self._alias(target.attr) if frame.base else target.attr] = value
        elif target.kind == "Name":
            frame.env[target.id] = value
        elif (target.kind == "Subscript" and target.value.kind == "Name" and target.value.id == frame.kwargs
              and target.index.kind == "Const" and not frame.base):
            frame.env[cast(str, frame.kwargs)][target.index.value] = value  # equal to a Name's id: set
        elif target.kind == "Subscript" and frame.base and target.index.kind != "Slice":
            container = plain(self.ev(target.value, frame), stmt)
            index = plain(self.ev(target.index, frame), stmt)
            if not isinstance(container, (dict, list)):
                raise Stop(stmt, f"item assignment on {type(container).__name__}")
            try:
                container[index] = value
            except (IndexError, TypeError) as exc:
                raise Stop(stmt, f"{type(exc).__name__}: {exc}") from None
        else:
            raise Stop(stmt, "assignment target not evaluated")

    def super_call(self, stmt: Any, frame: _Frame) -> None:
        """``super().__init__(...)``/``super().__post_init__(**kwargs)``: the base classes copy
        what they are passed (a base that computes an attribute has an unknown in
        ``inherited``, which stays unknown here). For a transformers 5 class PreTrainedConfig's
        rope conversion runs first, on what its ``**kwargs`` receives; the keys it leaves become
        attributes after it, as PreTrainedConfig sets them at its end."""
        recipe = self.recipe
        passed_all: dict[str, Any] = {}
        for key, arg in stmt.value.args:
            if key == "**":
                bag = self.ev(arg, frame)
                if not isinstance(bag, dict):
                    raise Stop(stmt, "super() call with an unknown **mapping")
                passed_all.update(bag)
            elif key in ("", "*"):
                raise Stop(stmt, "super() call with positional arguments")
            else:
                passed_all[key] = self.ev(arg, frame)
        rope = recipe.rope
        if rope is not None and rope.why_not is None:
            if dotted(stmt.value.func) != f"super().{rope.func.name}":
                self.rope_unknown = f"{dotted(stmt.value.func)} is called, while the conversion is in {rope.where}"
            else:
                passed_all = self._convert(stmt, rope, passed_all)
        for attr, value in passed_all.items():
            base = recipe.inherited.get(attr)
            self.state[attr] = base if isinstance(base, Unknown) else value

    def _convert(self, stmt: Any, rope: RopeBase, passed: dict[str, Any]) -> dict[str, Any]:
        params = rope.func.params[1:] if rope.func.params else []
        star = next((p.name for p in params if p.star == "**"), None)
        if star is None:
            raise Stop(stmt, f"{rope.where} takes no **kwargs")
        named = {p.name for p in params if p.star in ("", "kwonly")}
        bag = {k: v for k, v in passed.items() if k not in named}
        base = _Frame({star: bag}, rope.func.params[0].name if rope.func.params else "self", rope.file, star, True)
        self.run([rope.block], base)
        self.rope_ran = True
        left = base.env.get(star)
        if not isinstance(left, dict):
            raise Stop(rope.block, "the conversion left no keyword mapping", rope.file)
        self.leftover = left
        return {**{k: v for k, v in passed.items() if k in named}, **left}


class _Missing(Exception):
    """An attribute not set on the object at this point (``AttributeError`` in Python)."""

    def __init__(self, node: Any, name: str) -> None:
        super().__init__(name)
        self.node, self.name = node, name


def _own(value: Any) -> Any:
    """The evaluation's own copy of plain data (the code here mutates dicts it reads:
    config.json's and the class defaults must not change); other objects as they are."""
    return copy.deepcopy(value) if isinstance(value, (list, dict, set)) else value


def literal(node: Any) -> Any:
    """A literal default (numbers, strings, None/True/False, lists/tuples/dicts of them)."""
    if node is None:
        return NOT_LITERAL
    kind = node.kind
    if kind == "Const":
        return node.value
    if kind == "Name" and node.id in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[node.id]
    if kind == "UnaryOp" and node.op in ("-", "USub") and node.operand.kind == "Const" and isinstance(node.operand.value, (int, float)):
        return -node.operand.value
    if kind in ("ListExpr", "TupleExpr"):
        items = [literal(e) for e in node.elts]
        if any(i is NOT_LITERAL for i in items):
            return NOT_LITERAL
        return items if kind == "ListExpr" else tuple(items)
    if kind == "DictExpr":
        out = {}
        for k, v in node.items:
            kv, vv = literal(k), literal(v)
            if k is None or kv is NOT_LITERAL or vv is NOT_LITERAL:
                return NOT_LITERAL
            out[kv] = vv
        return out
    if kind == "Call" and node.func.kind == "Name" and node.func.id == "set" and not node.args:
        return set()  # `ignore_keys_at_rope_validation = set()`
    return NOT_LITERAL


def dotted(node: Any) -> str:
    """``logger.warning``, ``super().__init__``: a callee as written (enough to match a prefix)."""
    if node.kind == "Name":
        return node.id
    if node.kind == "Attribute":
        return f"{dotted(node.value)}.{node.attr}"
    if node.kind == "Call":
        return f"{dotted(node.func)}()"
    return "?"


def plain(value: Any, node: Any) -> Any:
    if not isinstance(value, PLAIN):
        raise Stop(node, f"{type(value).__name__} is not plain data")
    return value


def _hashable(items: list[Any], node: Any) -> list[Any]:
    for item in items:
        if isinstance(item, (list, dict, set)):
            raise Stop(node, "unhashable key")
    return items


def _iterable(value: Any, node: Any) -> Any:
    if isinstance(value, (list, tuple, str)):
        return value
    if isinstance(value, (set, frozenset)):
        # set order follows the hash seed; the loops run here write one key per item
        return sorted(value, key=repr)
    if isinstance(value, dict):
        return list(value)
    raise Stop(node, f"iteration over {type(value).__name__}")


__all__ = ["Body", "Members", "RopeBase", "Stop", "dotted", "literal", "plain"]
