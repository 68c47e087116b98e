"""Calls: dispatch by the callee's kind, analysed functions run in a frame of their own,
classes instantiated, methods of plain data, and the work a data operation is charged."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Self

from sglang_audit.evaluate.core import NOT_HOOKED, Frame, InterpreterCore, PyRaise, ReturnSignal
from sglang_audit.evaluate.plaindata import (
    SEQUENCE_ITEMS,
    contains_unknown,
    first_unknown,
    is_plain,
)
from sglang_audit.evaluate.values import (
    AnalysisBound,
    BoundMethod,
    Cached,
    Class,
    ClassMethod,
    External,
    Function,
    Instance,
    KeysList,
    Native,
    Partial,
    Property,
    Scope,
    StaticMethod,
    Unknown,
)
from sglang_audit.frontend import ir
from sglang_audit.frontend.bindings import bound_names

_SEQUENCE_BASES = frozenset({"list", "tuple"})


def _walk_size(value: Any, limit: int) -> int:
    """Elements a full walk of ``value`` visits (shared parts counted at each use), up to
    ``limit``; computed per distinct container, so cheap even when the walk is not."""
    memo: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in memo and not done:
            continue
        children = list(node.items()) if isinstance(node, dict) else node
        kids = [c for pair in children for c in (pair if isinstance(node, dict) else (pair,))
                if isinstance(c, (list, tuple, dict, set, frozenset))]
        if done:
            total = len(children) + sum(memo.get(id(c), 0) for c in kids)
            memo[key] = min(total, limit)
            continue
        memo[key] = 0  # a cycle (a list holding itself) is walked once, as repr does
        stack.append((node, True))
        stack.extend((c, False) for c in kids if id(c) not in memo)
    return memo.get(id(value), 0)


def _check_format_widths(template: str, args: list[Any], limit: int) -> None:
    """``"{:>1000000000}".format(1)`` and ``"{:>{}}".format(1, 10**9)``."""
    if any(len(w) > 7 for w in re.findall(r"\d+", template)):
        raise AnalysisBound("analysis bound reached: format width too large")
    if re.search(r"\{[^{}]*:[^{}]*\{", template) and any(type(v) is int and abs(v) > limit for v in args):
        raise AnalysisBound("analysis bound reached: format width too large")


def memo_key(values: list[Any]) -> Any:
    """A hashable key for a cached call, or None when CPython's cache would not take the
    arguments either (unhashable data) or the value is not known."""
    out: list[Any] = []
    for v in values:
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) and not isinstance(v[1], (list, dict, set)):
            inner = memo_key([v[1]])
            if inner is None:
                return None
            out.append((v[0], inner))
        elif isinstance(v, Unknown) or isinstance(v, (list, dict, set)):
            return None
        elif is_plain(v):
            try:
                hash(v)
            except TypeError:
                return None
            out.append((type(v).__name__, v))
        else:
            out.append(("id", id(v)))  # the memo entry keeps the object alive
    return tuple(out)


_LOCALS: dict[int, tuple[list[ir.Node], frozenset[str]]] = {}


def function_locals(body: list[ir.Node]) -> frozenset[str]:
    """Names a function body binds (assignment, for/with/except targets, import, def,
    class), nested functions and comprehensions excluded; cached per body (the entry
    keeps the body alive, so its id is not reused)."""
    hit = _LOCALS.get(id(body))
    if hit is not None and hit[0] is body:
        return hit[1]
    found = frozenset(n for stmt in body for n in bound_names(stmt, as_targets=True))
    _LOCALS[id(body)] = (body, found)
    return found


class Calls(InterpreterCore):
    """Calls of every kind of callee, and the bounds charged for work on data."""

    def call(self: Self, func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if self.call_hook is not None:
            hooked = self.call_hook(func, args, kwargs)
            if hooked is not NOT_HOOKED:
                return hooked
        kind = func.__class__  # the value classes have no subclasses: `is` is isinstance here
        if kind is Function:
            return self.call_function(func, args, kwargs)
        if kind is BoundMethod:
            return self.call(func.func, [func.obj, *args], kwargs)
        if kind is Native:
            return func.fn(self, args, kwargs)
        if kind is Class:
            if func is self.natives.object_class and not args:
                return Instance(func)
            return self.instantiate(func, args, kwargs)
        if isinstance(func, Partial):
            return self.call(func.func, [*func.args, *args], {**func.kwargs, **kwargs})
        if isinstance(func, Cached):
            # functools.cache keys on hash/eq: data by value, analysed objects by identity
            key = memo_key([*args, *sorted(kwargs.items())])
            if key is None:
                return self.call(func.func, args, kwargs)
            if key not in func.memo:
                func.memo[key] = (self.call(func.func, args, kwargs), args, kwargs)
            return func.memo[key][0]
        if isinstance(func, External):
            return self.natives.call_external(self, func, args, kwargs)
        if isinstance(func, Unknown):
            return Unknown(f"call of an unknown ({func.reason})", func.key)
        if isinstance(func, StaticMethod):
            return self.call(func.func, args, kwargs)
        if isinstance(func, Instance):
            found, meth = func.cls.lookup("__call__")
            if found:
                return self.call(self.bind(meth, func, func.cls), args, kwargs)
            raise self.make_raise("TypeError", f"'{func.cls.name}' object is not callable")
        if callable(func) and getattr(func, "__self__", None) is not None and is_plain(func.__self__):
            return self.call_data_method(func, args, kwargs)
        return Unknown(f"call of {type(func).__name__} is not modelled")

    def call_data_method(self, method: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        owner = method.__self__
        name = method.__name__
        # a builtin-sequence subclass's instance passed to a method of plain data: its items
        args = [a.attrs[SEQUENCE_ITEMS] if isinstance(a, Instance) and SEQUENCE_ITEMS in a.attrs else a for a in args]
        self.check_method_size(owner, name, args)
        if name == "get" and isinstance(owner, dict) and args and isinstance(args[0], Unknown):
            return args[0]
        if name in ("join",) and args and contains_unknown(args[0] if not isinstance(args[0], Unknown) else [args[0]]):
            if getattr(self, "_message_mode", False):
                return owner.join(self.to_str(a) for a in args[0])
            return Unknown("join of unknown parts")
        if name == "join" and args and not isinstance(args[0], Unknown):
            parts = list(args[0])
            if all(isinstance(p, str) or (isinstance(p, Instance) and "str_mixin" in p.cls.flags) for p in parts):
                return owner.join(self.plain_of(p) for p in parts)
        u = first_unknown([*args, *kwargs.values()])
        if u is not None and name not in ("append", "extend", "add", "insert", "update", "setdefault", "__setitem__", "pop"):
            return Unknown(f"{type(owner).__name__}.{name} of an unknown ({u.reason})", None)
        if name == "format" and isinstance(owner, str):
            return self.data_op(lambda: owner.format(*[self.plain_or_str(a) for a in args], **{k: self.plain_or_str(v) for k, v in kwargs.items()}))
        if name == "sort" and "key" in kwargs:
            key = kwargs["key"]
            results = [(self.call(key, [x], {}), x) for x in owner]
            if any(isinstance(r, Unknown) for r, _ in results):
                return Unknown("sort with an unknown key")
            order = sorted(range(len(owner)), key=lambda i: results[i][0], reverse=bool(kwargs.get("reverse")))
            owner[:] = [owner[i] for i in order]
            return None
        result = self.data_op(lambda: method(*args, **kwargs))
        if name == "keys" and isinstance(owner, dict):
            return KeysList(result)  # a list with dict_keys' set operators
        if name in ("items", "values") and isinstance(owner, dict):
            return list(result)  # dict views as lists: iteration order is what matters here
        return result

    def check_method_size(self, owner: Any, name: str, args: list[Any]) -> None:
        """Refuse data methods whose result would exceed the sequence bound, before they run."""
        limit = self.bounds.max_seq_len
        size = 0
        if name in ("center", "ljust", "rjust", "zfill") and args and isinstance(args[0], int):
            size = args[0]
        elif name == "replace" and isinstance(owner, str) and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            size = len(owner) + owner.count(args[0]) * max(0, len(args[1]) - len(args[0])) if args[0] else len(owner) * (len(args[1]) + 1)
        elif name in ("extend", "join", "update") and args and isinstance(args[0], (list, tuple, str, set, dict, range)):
            size = len(owner) + (sum(len(x) for x in args[0] if isinstance(x, str)) if name == "join" else len(args[0]))
        elif name in ("append", "insert", "add"):
            size = len(owner) + 1
        elif name == "expandtabs" and isinstance(owner, str):
            tab = args[0] if args else 8
            size = len(owner) * tab if isinstance(tab, int) and "\t" in owner else 0
        elif name in ("format", "format_map") and isinstance(owner, str):
            _check_format_widths(owner, args, limit)
        if size > limit:
            raise AnalysisBound("analysis bound reached: sequence too large")
        if name in ("count", "index", "sort", "remove", "copy", "reverse") and isinstance(owner, (list, tuple)):
            self.charge(len(owner))

    def plain_or_str(self, value: Any) -> Any:
        return value if is_plain(value) else self.to_str(value)

    def charge(self, n: int) -> None:
        """Count work proportional to a value's size as steps (``x in big_list`` in a loop is
        a million steps per iteration, not one), so the step bound covers it."""
        self.steps += n
        if self.steps > self.bounds.max_steps:
            raise AnalysisBound(f"analysis bound reached: more than {self.bounds.max_steps} steps (work on large values)")

    def charge_walk(self, *values: Any) -> None:
        """Charge a walk over containers (``==``, ``str``) by their size with shared parts
        counted at each use, as CPython walks them: ``a = [a, a]`` sixty times is 2**60."""
        limit = self.bounds.max_steps
        for value in values:
            if isinstance(value, (list, tuple, dict, set, frozenset)):
                self.charge(_walk_size(value, limit + 1))

    def data_op(self, fn: Callable[[], Any]) -> Any:
        """Run an operation on plain data; its Python exceptions become analysed-code exceptions."""
        try:
            return fn()
        except (KeyError, IndexError, ValueError, TypeError, AttributeError, ZeroDivisionError, OverflowError) as exc:
            if isinstance(exc, KeyError) and len(exc.args) == 1:
                raise self.make_raise("KeyError", exc.args[0]) from None
            raise self.make_raise(type(exc).__name__, str(exc.args[0]) if exc.args else "") from None

    def call_function(self, func: Function, args: list[Any], kwargs: dict[str, Any]) -> Any:
        self.depth += 1
        if self.depth > self.bounds.max_depth:
            self.depth -= 1
            raise AnalysisBound(f"analysis bound reached: call depth over {self.bounds.max_depth} at {func.qualname}")
        scope = Scope(parent=func.closure, local_names=frozenset() if func.is_lambda else function_locals(func.body))
        frame = Frame(module=func.module, scope=scope, func=func, depth=self.depth)
        try:
            self.bind_params(func, args, kwargs, scope)
            saved_reads = self.reads
            self.reads = []
            try:
                if func.is_lambda:
                    value, reads = self.evaluate_reads(func.body, frame)
                    ev = self.event("return", f"{func.qualname}()", value, func.module.file, func.line, "lambda", reads)
                    self.reads = saved_reads
                    self.note_read(ev)
                    return value
                self.exec_block(func.body, frame)
                self.reads = saved_reads
                return None
            except ReturnSignal as ret:
                self.reads = saved_reads
                self.note_read(ret.event)
                return ret.value
            except PyRaise as raised:
                # a lambda's body is an expression: its raise is in the lambda's frame (a body's
                # statements have named theirs)
                raised.site(func.module.file, func.body.line if func.is_lambda else func.line)
                raise
            finally:
                self.reads = saved_reads
        finally:
            self.depth -= 1

    def bind_params(self, func: Function, args: list[Any], kwargs: dict[str, Any], scope: Scope) -> None:
        params = func.params
        kwargs = dict(kwargs)
        i = 0
        star_kw: str | None = None
        for p in params:
            if p.star == "":
                if i < len(args):
                    scope.vars[p.name] = args[i]
                    i += 1
                    if p.name in kwargs:
                        raise self.make_raise("TypeError", f"{func.qualname}() got multiple values for argument '{p.name}'")
                elif p.name in kwargs:
                    scope.vars[p.name] = kwargs.pop(p.name)
                elif p.name in func.defaults:
                    scope.vars[p.name] = func.defaults[p.name]
                else:
                    raise self.make_raise("TypeError", f"{func.qualname}() missing required argument: '{p.name}'")
            elif p.star == "*":
                scope.vars[p.name] = tuple(args[i:])
                i = len(args)
            elif p.star == "kwonly":
                if p.name in kwargs:
                    scope.vars[p.name] = kwargs.pop(p.name)
                elif p.name in func.defaults:
                    scope.vars[p.name] = func.defaults[p.name]
                else:
                    raise self.make_raise("TypeError", f"{func.qualname}() missing keyword argument: '{p.name}'")
            elif p.star == "**":
                star_kw = p.name
        if i < len(args):
            raise self.make_raise("TypeError", f"{func.qualname}() takes {i} positional arguments but {len(args)} were given")
        if star_kw is not None:
            scope.vars[star_kw] = kwargs
        elif kwargs:
            raise self.make_raise("TypeError", f"{func.qualname}() got an unexpected keyword argument '{next(iter(kwargs))}'")

    def instantiate(self: Self, cls: Class, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if "exception" in cls.flags:
            inst = self.instantiate_exception(cls, args)
            found, init = cls.lookup("__init__")
            if found and isinstance(init, Function):
                self.call(BoundMethod(init, inst), args, kwargs)
            return inst
        if "enum" in cls.flags:
            return self.natives.enum_lookup(self, cls, args)
        found, new = cls.lookup("__new__")
        custom_new = found and (isinstance(new, Function) or isinstance(new, StaticMethod) and isinstance(new.func, Function))
        if custom_new:
            fn = new.func if isinstance(new, StaticMethod) else new
            result = self.call(fn, [cls, *args], kwargs)
            if not (isinstance(result, Instance) and result.cls.is_subclass_of(cls)):
                return result
            inst = result
        else:
            inst = Instance(cls)
        found, init = cls.lookup("__init__")
        if found:
            self.call(self.bind(init, inst, cls), args, kwargs)
        elif _SEQUENCE_BASES.intersection(cls.external_bases) and len(args) <= 1 and not kwargs:
            # a subclass of list/tuple/set that adds methods only (0.5.23's CPPArgList, whose
            # __str__ joins itself): the instance holds its items, iterated as the base would
            inst.attrs[SEQUENCE_ITEMS] = self.iterate(args[0], None, 0) if args else []
        elif "dataclass" not in cls.flags and cls.external_bases and (args or kwargs):
            # a subclass of an outside class (e.g. a transformers config) built with arguments
            for k, v in kwargs.items():
                inst.attrs[k] = v
        return inst

    def instantiate_exception(self, cls: Class, args: list[Any]) -> Instance:
        inst = Instance(cls)
        inst.attrs["args"] = tuple(args)
        return inst

    def make_raise(self, exc_name: str, message: Any) -> PyRaise:
        cls = self.exc_classes.get(exc_name, self.exc_classes["Exception"])
        exc = self.instantiate_exception(cls, [message])
        file, line = getattr(self, "_call_site", ("?", 0))
        # unsited: the handler of the failing expression or statement (or of the call of the
        # native that raised it) gives the line, as CPython's traceback does
        return PyRaise(exc, file, line, "", explicit=False, sited=False)

    def bind(self, attr: Any, obj: Any, cls: Class) -> Any:
        if isinstance(attr, Function):
            return BoundMethod(attr, obj)
        if isinstance(attr, StaticMethod):
            return attr.func
        if isinstance(attr, ClassMethod):
            return BoundMethod(attr.func, cls)
        if isinstance(attr, Native) and attr.bind_self:
            return BoundMethod(attr, obj)
        if isinstance(attr, Cached) and isinstance(attr.func, Function):
            return BoundMethod(attr, obj)
        if isinstance(attr, Property):
            return self.call(attr.fget, [obj], {})
        return attr

