"""Python's builtins: the exception classes, ``object``, and the builtin functions.

Pure Python semantics; the one builtin that touches the outside (``open``) and ``hasattr``
on an outside object ask the host world (world/native.py), which owns the file policy and
the installed packages."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.overlays.common import (
    BUILTIN_TYPES,
    MISSING,
    NONE_TYPE_NATIVE,
    PLAIN_ELEMENTS,
    Environ,
    plain,
    plain_call,
)
from sglang_audit.evaluate.values import (
    BoundMethod,
    Cached,
    Class,
    ClassMethod,
    External,
    Function,
    HFConfig,
    Instance,
    Native,
    Partial,
    Property,
    StaticMethod,
    SuperProxy,
    TypeForm,
    Unknown,
)

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.evaluate.overlays.host import Host


_EXCEPTION_TREE: dict[str, str | None] = {
    "BaseException": None,
    "Exception": "BaseException",
    "KeyboardInterrupt": "BaseException",
    "SystemExit": "BaseException",
    "GeneratorExit": "BaseException",
    "ArithmeticError": "Exception",
    "ZeroDivisionError": "ArithmeticError",
    "OverflowError": "ArithmeticError",
    "AssertionError": "Exception",
    "AttributeError": "Exception",
    "LookupError": "Exception",
    "KeyError": "LookupError",
    "IndexError": "LookupError",
    "NameError": "Exception",
    "UnboundLocalError": "NameError",
    "ImportError": "Exception",
    "ModuleNotFoundError": "ImportError",
    "PackageNotFoundError": "ModuleNotFoundError",
    "OSError": "Exception",
    "FileNotFoundError": "OSError",
    "PermissionError": "OSError",
    "RuntimeError": "Exception",
    "NotImplementedError": "RuntimeError",
    "RecursionError": "RuntimeError",
    "StopIteration": "Exception",
    "TypeError": "Exception",
    "ValueError": "Exception",
    "UnicodeDecodeError": "ValueError",
    "JSONDecodeError": "ValueError",
    "Warning": "Exception",
    "UserWarning": "Warning",
    "DeprecationWarning": "Warning",
    "FutureWarning": "Warning",
    "EnvironmentError": "OSError",
    "IOError": "OSError",
}


def make_exception_classes() -> dict[str, Class]:
    classes: dict[str, Class] = {}
    for name, parent in _EXCEPTION_TREE.items():
        bases = (classes[parent],) if parent else ()
        cls = Class(name, bases, {}, None, 0)
        cls.flags.add("exception")
        classes[name] = cls
    return classes


def make_object_class() -> Class:
    """``object``: the default attribute protocol, callable explicitly as
    ``object.__getattribute__(self, name)`` / ``object.__setattr__(self, name, value)``."""
    cls = Class("object", (), {}, None, 0)

    def getattribute(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return interp.default_instance_attr(args[0], args[1])

    def setattr_(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        obj, name, value = args[0], args[1], args[2]
        if isinstance(obj, Instance):
            obj.attrs[name] = value
            site = getattr(interp, "_call_site", ("?", 0))
            obj.events[name] = interp.event("write", name, value, site[0], site[1], f"object.__setattr__(..., {name!r}, ...)")
        return None

    def delattr_(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if isinstance(args[0], Instance):
            args[0].attrs.pop(args[1], None)
        return None

    cls.ns.update(
        __init__=Native("object.__init__", lambda i, a, k: None, bind_self=True),
        __getattribute__=Native("object.__getattribute__", getattribute, bind_self=True),
        __setattr__=Native("object.__setattr__", setattr_, bind_self=True),
        __delattr__=Native("object.__delattr__", delattr_, bind_self=True),
        __new__=StaticMethod(Native("object.__new__", lambda i, a, k: Instance(a[0]) if a and isinstance(a[0], Class) else Unknown("object.__new__"))),
    )
    return cls


def dict_(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``dict(...)``, also ``collections.OrderedDict``."""
    out: dict[Any, Any] = {}
    if args:
        src = args[0]
        if isinstance(src, Unknown):
            return src
        if isinstance(src, dict):
            out.update(src)
        elif isinstance(src, HFConfig):
            out.update(src.attrs)
        else:
            for pair in interp.iterate(src, None, 0):
                k, v = interp.iterate(pair, None, 0)
                out[k] = v
    out.update(kwargs)
    return out


class Builtins:
    """The ``builtins`` module for one world; ``table`` makes the names for one interpreter."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def table(self, interp: Interpreter) -> dict[str, Any]:
        b: dict[str, Any] = {}

        def native(name: str, fn: Any) -> None:
            b[name] = Native(name, fn)

        for name in self.host.exception_classes:
            b[name] = self.host.exception_classes[name]
        native("len", lambda i, a, k: self._len(i, a[0]))
        native("str", self._str)
        native("repr", lambda i, a, k: a[0] if isinstance(a[0], Unknown) else i.repr_of(a[0]))
        native("int", lambda i, a, k: self._convert(i, int, a, k))
        native("float", lambda i, a, k: self._convert(i, float, a, k))
        native("bool", lambda i, a, k: False if not a else i.truth_value(a[0]))
        native("list", lambda i, a, k: [] if not a else self._seq(i, a[0], list))
        native("tuple", lambda i, a, k: () if not a else self._seq(i, a[0], tuple))
        native("set", lambda i, a, k: set() if not a else self._seq(i, a[0], set))
        native("frozenset", lambda i, a, k: frozenset() if not a else self._seq(i, a[0], frozenset))
        native("dict", dict_)
        native("bytes", lambda i, a, k: plain_call(i, bytes, a, k))
        native("bytearray", lambda i, a, k: Unknown("bytearray"))
        native("complex", lambda i, a, k: plain_call(i, complex, a, k))
        native("slice", lambda i, a, k: plain_call(i, slice, a, k))
        native("memoryview", lambda i, a, k: Unknown("memoryview"))
        native("isinstance", lambda i, a, k: self._isinstance(i, a[0], a[1]))
        native("issubclass", lambda i, a, k: self._issubclass(i, a[0], a[1]))
        native("getattr", self._getattr)
        native("hasattr", self._hasattr)
        native("setattr", lambda i, a, k: i.setattr(a[0], a[1], a[2], i.event("write", a[1], a[2], *i._call_site, f"setattr(..., {a[1]!r}, ...)")))
        native("delattr", lambda i, a, k: a[0].attrs.pop(a[1], None) if isinstance(a[0], (Instance, HFConfig)) else None)
        native("print", lambda i, a, k: None)
        native("sorted", self._sorted)
        native("min", lambda i, a, k: self._minmax(i, min, a, k))
        native("max", lambda i, a, k: self._minmax(i, max, a, k))
        native("sum", lambda i, a, k: plain_call(i, sum, [i.iterate(a[0], None, 0), *a[1:]], k))
        native("any", lambda i, a, k: self._anyall(i, a[0], True))
        native("all", lambda i, a, k: self._anyall(i, a[0], False))
        native("map", lambda i, a, k: [i.call(a[0], list(xs), {}) for xs in zip(*[i.iterate(x, None, 0) for x in a[1:]], strict=False)])
        native("filter", lambda i, a, k: [x for x in i.iterate(a[1], None, 0) if (i.truth_value(x) if a[0] is None else i.truth_value(i.call(a[0], [x], {}))) is True])
        native("zip", lambda i, a, k: list(zip(*[i.iterate(x, None, 0) for x in a], strict=False)))
        native("enumerate", lambda i, a, k: list(enumerate(i.iterate(a[0], None, 0), *(a[1:2] or [k.get("start", 0)]))))
        native("range", lambda i, a, k: plain_call(i, range, a, k))
        native("reversed", lambda i, a, k: list(reversed(i.iterate(a[0], None, 0))))
        native("abs", lambda i, a, k: plain_call(i, abs, a, k))
        native("round", lambda i, a, k: plain_call(i, round, a, k))
        native("divmod", lambda i, a, k: plain_call(i, divmod, a, k))
        native("pow", lambda i, a, k: (i.check_size("**", a[0], a[1]), plain_call(i, pow, a, k))[1] if len(a) >= 2 else plain_call(i, pow, a, k))
        native("ord", lambda i, a, k: plain_call(i, ord, a, k))
        native("chr", lambda i, a, k: plain_call(i, chr, a, k))
        native("hex", lambda i, a, k: plain_call(i, hex, a, k))
        native("format", lambda i, a, k: i.format_value(a[0], None, a[1] if len(a) > 1 else ""))
        native("hash", lambda i, a, k: Unknown("hash value"))
        native("id", lambda i, a, k: Unknown("object identity"))
        native("type", self._type)
        native("callable", lambda i, a, k: isinstance(a[0], (Function, BoundMethod, Native, Class, Partial, Cached, External)))
        native("iter", lambda i, a, k: list(i.iterate(a[0], None, 0)))
        native("next", self._next)
        native("vars", lambda i, a, k: a[0].attrs if isinstance(a[0], (Instance, HFConfig)) else a[0].ns if isinstance(a[0], Class) else Unknown("vars()"))
        native("open", self.host.open)
        native("super", self._super)
        native("property", lambda i, a, k: Property(a[0] if a else k.get("fget"), a[1] if len(a) > 1 else k.get("fset")))
        native("staticmethod", lambda i, a, k: StaticMethod(a[0]))
        native("classmethod", lambda i, a, k: ClassMethod(a[0]))
        b["object"] = self.host.object_class
        native("globals", lambda i, a, k: Unknown("globals()"))
        native("locals", lambda i, a, k: Unknown("locals()"))
        native("exec", lambda i, a, k: Unknown("exec() in analysed code is not followed"))
        native("eval", lambda i, a, k: Unknown("eval() in analysed code is not followed"))
        native("__import__", lambda i, a, k: Unknown("__import__() in analysed code"))
        b["NotImplemented"] = External("NotImplemented")
        b["Ellipsis"] = ...
        b["__debug__"] = True
        b["__name__"] = "__main__"
        return b

    # -- builtin helpers -----------------------------------------------------------------
    def _str(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if not args:
            return ""
        value = args[0]
        if isinstance(value, (str, Unknown)):
            return value
        if isinstance(value, External) and not getattr(interp, "_message_mode", False):
            # the text of an outside object is not known (only messages may show a placeholder)
            return Unknown(f"str() of {value.path} (outside the analysed source)", f"str:{value.path}")
        return interp.to_str(value)

    def _len(self, interp: Interpreter, value: Any) -> Any:
        if isinstance(value, Unknown):
            return value
        if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset, range)):
            return interp.data_op(lambda: len(value))
        if isinstance(value, Class) and "enum" in value.flags:
            return len(value.ns.get("__members_list__", []))
        if isinstance(value, Instance):
            found, meth = value.cls.lookup("__len__")
            if found:
                return interp.call(interp.bind(meth, value, value.cls), [], {})
        if isinstance(value, Environ):
            return len(value.values)
        if value is None or isinstance(value, (bool, int, float, complex)):
            # TypeError: object of type 'int' has no len(), raised by CPython on purpose
            return interp.data_op(lambda: len(value))  # type: ignore[arg-type]
        return Unknown(f"len() of {type(value).__name__}")

    def _convert(self, interp: Interpreter, typ: type, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if not args:
            return typ()
        value = interp.plain_of(args[0])
        if isinstance(value, Unknown):
            return value
        if plain(value) and all(plain(a) for a in args[1:]):
            return interp.data_op(lambda: typ(value, *args[1:]))
        return Unknown(f"{typ.__name__}() of {type(value).__name__}")

    def _seq(self, interp: Interpreter, value: Any, typ: type) -> Any:
        if isinstance(value, Unknown):
            return value
        items = interp.iterate(value, None, 0)
        if typ in (set, frozenset):
            if PLAIN_ELEMENTS.issuperset(map(type, items)):
                return interp.data_op(lambda: typ(items))  # the common case, at C speed
            bad = next((x for x in items if isinstance(x, Unknown)), None)
            if bad is not None:
                return Unknown(f"set of unknown values ({bad.reason})")
            return interp.data_op(lambda: typ(interp.plain_of(x) if isinstance(x, Instance) and "str_mixin" in x.cls.flags else x for x in items))
        return typ(items)

    def _sorted(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        items = interp.iterate(args[0], None, 0)
        interp.charge(len(items))  # the work is the size: sorting a big list in a loop
        key = kwargs.get("key")
        reverse = bool(kwargs.get("reverse", False))
        if key is not None:
            keys = [interp.call(key, [x], {}) for x in items]
        else:
            keys = [interp.plain_of(x) for x in items]
        if any(isinstance(x, Unknown) for x in keys):
            return Unknown("sorted() of unknown values")
        order = interp.data_op(lambda: sorted(range(len(items)), key=lambda j: keys[j], reverse=reverse))
        return [items[j] for j in order]

    def _minmax(self, interp: Interpreter, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        items = interp.iterate(args[0], None, 0) if len(args) == 1 else list(args)
        interp.charge(len(items))
        if any(isinstance(x, Unknown) for x in items):
            return Unknown(f"{fn.__name__}() of unknown values")
        if "key" in kwargs:
            keys = [interp.call(kwargs["key"], [x], {}) for x in items]
            if any(isinstance(x, Unknown) for x in keys):
                return Unknown(f"{fn.__name__}() with unknown keys")
            if not items:
                return kwargs.get("default", Unknown("empty"))
            idx = fn(range(len(items)), key=lambda j: keys[j])
            return items[idx]
        if not items and "default" in kwargs:
            return kwargs["default"]
        return interp.data_op(lambda: fn(items))

    def _anyall(self, interp: Interpreter, iterable: Any, is_any: bool) -> Any:
        if isinstance(iterable, Unknown):
            return iterable
        unknown: Unknown | None = None
        for x in interp.iterate(iterable, None, 0):
            t = interp.truth_value(x)
            if isinstance(t, Unknown):
                unknown = t
                continue
            if t is is_any:
                return is_any
        return unknown if unknown is not None else (not is_any)

    def _type_matches(self, interp: Interpreter, value: Any, typ: Any) -> Any:
        if isinstance(typ, TypeForm) and isinstance(typ.origin, External) and typ.origin.path == "typing.Union":
            typ = typ.args  # `A | B` (PEP 604): isinstance checks each member
        if isinstance(typ, tuple):
            results = [self._type_matches(interp, value, t) for t in typ]
            if any(r is True for r in results):
                return True
            u = next((r for r in results if isinstance(r, Unknown)), None)
            return u if u is not None else False
        if isinstance(value, Unknown):
            return value
        if isinstance(typ, External) and typ.path == "builtins.NoneType":
            return value is None
        if isinstance(typ, Native):
            pytype = BUILTIN_TYPES.get(typ.name)
            if pytype is not None:
                if typ.name == "int" and isinstance(value, bool):
                    return True
                v = value
                if isinstance(value, Instance) and "str_mixin" in value.cls.flags and typ.name == "str":
                    return True
                return isinstance(v, pytype)
            if typ.name == "object":
                return True
            if typ.name == "type":
                return isinstance(value, Class) or (isinstance(value, Native) and value.name in BUILTIN_TYPES)
            return False
        if isinstance(typ, Class):
            if isinstance(value, Instance):
                return value.cls.is_subclass_of(typ)
            if isinstance(value, HFConfig):
                wanted = typ.lookup("model_type")
                if wanted[0] and isinstance(wanted[1], str):
                    if wanted[1] == value.attrs.get("model_type"):
                        return True
                    # the config class built for the model_type: an instance of typ when that
                    # class (if the analysed tree defines it) subclasses typ
                    return any(c.is_subclass_of(typ) for c in self.host.config_classes(interp, value.attrs.get("model_type")))
                return False
            return False
        if isinstance(typ, External):
            if isinstance(value, HFConfig) and typ.path.endswith(("PretrainedConfig", "PreTrainedConfig")):
                return True
            if isinstance(value, Instance) and any(p == typ.path or p.endswith("." + typ.path.rsplit(".", 1)[-1]) for c in value.cls.mro() for p in c.external_bases):
                return True
            if plain(value) or isinstance(value, (Instance, Function, Class)):
                return False
            own = getattr(value, "native_isinstance", None)  # a world's value that knows its type
            known = own(typ.path) if own is not None else None
            if isinstance(value, External):
                answer = self.host.external_isinstance(value, typ.path)
                known = None if answer is MISSING else answer
            if known is not None:
                return known
            return Unknown(f"isinstance(..., {typ.path})", f"isinstance:{typ.path}")
        if isinstance(typ, Unknown):
            return typ
        return False

    def _isinstance(self, interp: Interpreter, value: Any, typ: Any) -> Any:
        return self._type_matches(interp, value, typ)

    def _issubclass(self, interp: Interpreter, sub: Any, typ: Any) -> Any:
        if isinstance(typ, tuple):
            results = [self._issubclass(interp, sub, t) for t in typ]
            if any(r is True for r in results):
                return True
            return next((r for r in results if isinstance(r, Unknown)), False)
        if isinstance(sub, Class) and isinstance(typ, Class):
            return sub.is_subclass_of(typ)
        if isinstance(sub, Class) and isinstance(typ, External):
            if typ.path == "msgspec.Struct":
                return "msgspec_struct" in sub.flags
            leaf = typ.path.rsplit(".", 1)[-1]
            return any(p == typ.path or p.rsplit(".", 1)[-1] == leaf for c in sub.mro() for p in c.external_bases)
        if isinstance(sub, Class) and isinstance(typ, Native):
            if typ.name == "object":
                return True
            return any(p == typ.name for c in sub.mro() for p in c.external_bases)
        if isinstance(sub, Class) and typ is self.host.object_class:
            return True
        return Unknown("issubclass()")

    def _getattr(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        from sglang_audit.evaluate.interpreter import PyRaise

        obj, name = args[0], args[1]
        if isinstance(name, Unknown):
            return name
        if len(args) < 3:
            return interp.getattr(obj, name)
        try:
            return interp.getattr(obj, name)
        except PyRaise as raised:
            if isinstance(raised.exc, Instance) and raised.exc.cls.is_subclass_of(self.host.exception_classes["AttributeError"]):
                return args[2]
            raise

    def _hasattr(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        from sglang_audit.evaluate.interpreter import PyRaise

        obj, name = args[0], args[1]
        if isinstance(obj, External):
            return self.host.external_hasattr(interp, obj, name)
        try:
            value = interp.getattr(obj, name)
        except PyRaise as raised:
            if isinstance(raised.exc, Instance) and raised.exc.cls.is_subclass_of(self.host.exception_classes["AttributeError"]):
                return False
            raise
        if isinstance(value, Unknown) and not isinstance(obj, Unknown):
            return Unknown(f"hasattr(..., {name!r}): {value.reason}", value.key)
        if isinstance(obj, Unknown):
            return Unknown(obj.reason, f"{obj.key}.hasattr({name})" if obj.key else None)
        return True

    def _type(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        value = args[0]
        if isinstance(value, Instance):
            return value.cls
        if isinstance(value, HFConfig):
            return External("transformers.PretrainedConfig")
        if isinstance(value, bool):
            return interp.builtins["bool"]
        if value is None:
            return NONE_TYPE_NATIVE  # `isinstance(x, (str, type(None)))`
        for name, typ in BUILTIN_TYPES.items():
            if type(value) is typ:
                return interp.builtins[name]
        return Unknown("type()")

    def _next(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        items = interp.iterate(args[0], None, 0)
        if items:
            return items[0]
        if len(args) > 1:
            return args[1]
        raise interp.make_raise("StopIteration", "")


    def _super(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if len(args) == 2 and isinstance(args[0], Class):
            return SuperProxy(args[0], args[1])
        return Unknown("super() form")

