"""What the evaluator knows about the world outside the analysed tree.

Python builtins and the few stdlib functions SGLang's configuration code uses, the
``torch``/``importlib``/``os.environ`` probes answered from the ``Device`` and
``Environment`` model, the config.json loader behind ``get_config``, and enum/dataclass
semantics.  Anything not listed here is an ``External`` whose calls yield ``Unknown``.

Why this module is long: it still holds every overlay in one class (builtins, stdlib,
typing/dataclass/msgspec semantics, the device's torch answers, SGLang's boundaries). Issue
#21 splits it into overlays registered in a table (pytype's overlays), builtins and stdlib
into evaluate/, the device and SGLang's boundaries staying here.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import json
import math
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.values import (
    NOT_HANDLED,
    BoundMethod,
    Cached,
    Class,
    ClassMethod,
    External,
    FieldSpec,
    Function,
    HFConfig,
    Instance,
    ModuleObj,
    Native,
    Partial,
    Property,
    StaticMethod,
    SuperProxy,
    TypeForm,
    Unknown,
)
from sglang_audit.shipped import load_toml  # re-exported: older call sites import it from here
from sglang_audit.target.device import Device, Environment

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter


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


def _make_exception_classes() -> dict[str, Class]:
    classes: dict[str, Class] = {}
    for name, parent in _EXCEPTION_TREE.items():
        bases = (classes[parent],) if parent else ()
        cls = Class(name, bases, {}, None, 0)
        cls.flags.add("exception")
        classes[name] = cls
    return classes


def _make_object_class() -> Class:
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


def _none_marker(value: Any) -> Any:
    return None if value == "__none__" else value


# element types a set() can take as they are (no unknowns, no str-mixin enum members)
_PLAIN_ELEMENTS = frozenset({str, int, float, bool, type(None), tuple, frozenset, bytes})


class Logger:
    """``logging.getLogger(...)``: calls are recorded as evidence, never acted on."""

    LEVELS = ("debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log")


class Environ:
    """``os.environ``: the user's ``--env`` values, mutable by the analysed code."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values


class NativeWorld:
    """Natives for one target (device + environment + model directories)."""

    package_name = "sglang"

    def __init__(self, device: Device, environment: Environment, model_dirs: list[Path], torch_version: str = "2.9.1") -> None:
        self.device = device
        self.environment = environment
        self.model_dirs = [p.resolve() for p in model_dirs]
        self.torch_version = torch_version
        self.exception_classes = _make_exception_classes()
        self.object_class = _make_object_class()
        hf = load_toml("hf_config.toml")
        self.subconfig_keys: list[str] = hf["subconfig_keys"]
        self.text_config_keys: list[str] = hf["text_config_keys"]
        self.hf_defaults: dict[str, Any] = {k: _none_marker(v) for k, v in hf["defaults"].items()}
        self.boundary_rules = load_toml("boundaries.toml")["boundary"]
        self.stdlib = set(sys.stdlib_module_names) | {"typing_extensions", "__future__"}
        self.import_names: dict[str, str] = load_toml("packages.toml")["import_names"]
        self.source_root: Path | None = None  # set by the resolver: probes inside it are answered
        self.absent_packages = set(load_toml("packages.toml")["optional"]["absent"]) - set(environment.extra)
        self._static_values: dict[str, Any] | None = None  # external_value's table, built once

    # ---- per-interpreter state --------------------------------------------------------
    def setup(self, interp: Interpreter) -> None:
        interp.environ = Environ(self.environment.env_dict())
        interp.hf_configs = {}
        interp.loggers = {}

    # ---- builtins ---------------------------------------------------------------------
    def builtins(self, interp: Interpreter) -> dict[str, Any]:
        self.setup(interp)
        b: dict[str, Any] = {}

        def native(name: str, fn: Any) -> None:
            b[name] = Native(name, fn)

        for name in self.exception_classes:
            b[name] = self.exception_classes[name]
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
        native("dict", self._dict)
        native("bytes", lambda i, a, k: self._plain_call(i, bytes, a, k))
        native("bytearray", lambda i, a, k: Unknown("bytearray"))
        native("complex", lambda i, a, k: self._plain_call(i, complex, a, k))
        native("slice", lambda i, a, k: self._plain_call(i, slice, a, k))
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
        native("sum", lambda i, a, k: self._plain_call(i, sum, [i.iterate(a[0], None, 0), *a[1:]], k))
        native("any", lambda i, a, k: self._anyall(i, a[0], True))
        native("all", lambda i, a, k: self._anyall(i, a[0], False))
        native("map", lambda i, a, k: [i.call(a[0], list(xs), {}) for xs in zip(*[i.iterate(x, None, 0) for x in a[1:]], strict=False)])
        native("filter", lambda i, a, k: [x for x in i.iterate(a[1], None, 0) if (i.truth_value(x) if a[0] is None else i.truth_value(i.call(a[0], [x], {}))) is True])
        native("zip", lambda i, a, k: list(zip(*[i.iterate(x, None, 0) for x in a], strict=False)))
        native("enumerate", lambda i, a, k: list(enumerate(i.iterate(a[0], None, 0), *(a[1:2] or [k.get("start", 0)]))))
        native("range", lambda i, a, k: self._plain_call(i, range, a, k))
        native("reversed", lambda i, a, k: list(reversed(i.iterate(a[0], None, 0))))
        native("abs", lambda i, a, k: self._plain_call(i, abs, a, k))
        native("round", lambda i, a, k: self._plain_call(i, round, a, k))
        native("divmod", lambda i, a, k: self._plain_call(i, divmod, a, k))
        native("pow", lambda i, a, k: (i.check_size("**", a[0], a[1]), self._plain_call(i, pow, a, k))[1] if len(a) >= 2 else self._plain_call(i, pow, a, k))
        native("ord", lambda i, a, k: self._plain_call(i, ord, a, k))
        native("chr", lambda i, a, k: self._plain_call(i, chr, a, k))
        native("hex", lambda i, a, k: self._plain_call(i, hex, a, k))
        native("format", lambda i, a, k: i.format_value(a[0], None, a[1] if len(a) > 1 else ""))
        native("hash", lambda i, a, k: Unknown("hash value"))
        native("id", lambda i, a, k: Unknown("object identity"))
        native("type", self._type)
        native("callable", lambda i, a, k: isinstance(a[0], (Function, BoundMethod, Native, Class, Partial, Cached, External)))
        native("iter", lambda i, a, k: list(i.iterate(a[0], None, 0)))
        native("next", self._next)
        native("vars", lambda i, a, k: a[0].attrs if isinstance(a[0], (Instance, HFConfig)) else a[0].ns if isinstance(a[0], Class) else Unknown("vars()"))
        native("open", self._open)
        native("super", self._super)
        native("property", lambda i, a, k: Property(a[0] if a else k.get("fget"), a[1] if len(a) > 1 else k.get("fset")))
        native("staticmethod", lambda i, a, k: StaticMethod(a[0]))
        native("classmethod", lambda i, a, k: ClassMethod(a[0]))
        b["object"] = self.object_class
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
            return interp.data_op(lambda: len(value))  # TypeError: object of type 'int' has no len()
        return Unknown(f"len() of {type(value).__name__}")

    def _convert(self, interp: Interpreter, typ: type, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if not args:
            return typ()
        value = interp.plain_of(args[0])
        if isinstance(value, Unknown):
            return value
        if _plain(value) and all(_plain(a) for a in args[1:]):
            return interp.data_op(lambda: typ(value, *args[1:]))
        return Unknown(f"{typ.__name__}() of {type(value).__name__}")

    def _seq(self, interp: Interpreter, value: Any, typ: type) -> Any:
        if isinstance(value, Unknown):
            return value
        items = interp.iterate(value, None, 0)
        if typ in (set, frozenset):
            if _PLAIN_ELEMENTS.issuperset(map(type, items)):
                return interp.data_op(lambda: typ(items))  # the common case, at C speed
            bad = next((x for x in items if isinstance(x, Unknown)), None)
            if bad is not None:
                return Unknown(f"set of unknown values ({bad.reason})")
            return interp.data_op(lambda: typ(interp.plain_of(x) if isinstance(x, Instance) and "str_mixin" in x.cls.flags else x for x in items))
        return typ(items)

    def _dict(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
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

    def _plain_call(self, interp: Interpreter, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        args = [interp.plain_of(a) for a in args]
        for a in [*args, *kwargs.values()]:
            if isinstance(a, Unknown):
                return a
        if all(_plain(a) for a in args) and all(_plain(v) for v in kwargs.values()):
            return interp.data_op(lambda: fn(*args, **kwargs))
        return Unknown(f"{getattr(fn, '__name__', fn)}() of non-data values")

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
            pytype = _BUILTIN_TYPES.get(typ.name)
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
                return isinstance(value, Class) or (isinstance(value, Native) and value.name in _BUILTIN_TYPES)
            return False
        if isinstance(typ, Class):
            if isinstance(value, Instance):
                return value.cls.is_subclass_of(typ)
            if isinstance(value, HFConfig):
                wanted = typ.lookup("model_type")
                if wanted[0] and isinstance(wanted[1], str):
                    if wanted[1] == value.attrs.get("model_type"):
                        return True
                    # transformers builds the config class registered for the model_type: an
                    # instance of typ when that class (if the release defines it) subclasses typ
                    return any(c.is_subclass_of(typ) for c in _config_classes(interp, value.attrs.get("model_type")))
                return False
            return False
        if isinstance(typ, External):
            if isinstance(value, HFConfig) and typ.path.endswith(("PretrainedConfig", "PreTrainedConfig")):
                return True
            if isinstance(value, Instance) and any(p == typ.path or p.endswith("." + typ.path.rsplit(".", 1)[-1]) for c in value.cls.mro() for p in c.external_bases):
                return True
            if _plain(value) or isinstance(value, (Instance, Function, Class)):
                return False
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
        if isinstance(sub, Class) and typ is self.object_class:
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
            if isinstance(raised.exc, Instance) and raised.exc.cls.is_subclass_of(self.exception_classes["AttributeError"]):
                return args[2]
            raise

    def _hasattr(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        from sglang_audit.evaluate.interpreter import PyRaise

        obj, name = args[0], args[1]
        if isinstance(obj, External):
            return self.external_hasattr(interp, obj, name)
        try:
            value = interp.getattr(obj, name)
        except PyRaise as raised:
            if isinstance(raised.exc, Instance) and raised.exc.cls.is_subclass_of(self.exception_classes["AttributeError"]):
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
            return _NONE_TYPE  # `isinstance(x, (str, type(None)))`
        for name, typ in _BUILTIN_TYPES.items():
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

    def _open(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        path = args[0] if args else kwargs.get("file")
        path = path.text if isinstance(path, PathValue) else path
        mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
        if not isinstance(path, str) or isinstance(mode, Unknown) or "w" in str(mode) or "a" in str(mode):
            return Unknown("open() outside the model directory")
        inside = self.inside_model_dir(path)
        if inside is None:
            return Unknown(f"open({path!r}) outside the model directory", f"open:{path}")
        if not inside.is_file():
            raise interp.make_raise("FileNotFoundError", f"No such file or directory: '{path}'")
        size = inside.stat().st_size
        if size > 16 * 1024 * 1024:
            return Unknown(f"{path} is too large to read")
        return OpenFile(inside.read_text(encoding="utf-8", errors="replace"))

    def _super(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if len(args) == 2 and isinstance(args[0], Class):
            return SuperProxy(args[0], args[1])
        return Unknown("super() form")

    # ---- file system: only the model directories ------------------------------------------
    def inside_model_dir(self, path: str) -> Path | None:
        try:
            p = Path(path).resolve()
        except (OSError, RuntimeError, ValueError):
            return None
        roots = [*self.model_dirs, *([self.source_root] if self.source_root else [])]
        for root in roots:
            if p == root or root in p.parents:
                return p
        return None

    def _glob(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        import glob as _globmod

        pattern = args[0].text if isinstance(args[0], PathValue) else args[0]
        if not isinstance(pattern, str):
            return Unknown("glob of an unknown pattern")
        base = pattern.split("*", 1)[0].split("[", 1)[0].rsplit("/", 1)[0] or "."
        if self.inside_model_dir(base) is None:
            return Unknown(f"glob({pattern!r}) outside the model directory", f"glob:{pattern}")
        return sorted(_globmod.glob(pattern))[:10_000]

    def path_probe(self, interp: Interpreter, fn_name: str, path: Any) -> Any:
        path = path.text if isinstance(path, PathValue) else path
        if not isinstance(path, str):
            return Unknown(f"os.path.{fn_name} of a non-string")
        inside = self.inside_model_dir(path)
        if inside is None:
            return Unknown(f"os.path.{fn_name}({path!r}): outside the model directory", f"fs:{fn_name}:{path}")
        return {"exists": inside.exists, "isfile": inside.is_file, "isdir": inside.is_dir}[fn_name]()

    # ---- boundaries (I/O functions of the analysed release) ---------------------------
    def boundary_for(self, interp: Interpreter, module: str, name: str) -> Native | None:
        for rule in self.boundary_rules:
            if rule["function"] == name and fnmatch.fnmatchcase(module, rule["module"]):
                return Native(f"{module}.{name}", self._boundary_fn(rule["kind"]))
        return None

    def _boundary_fn(self, kind: str) -> Any:
        device = self.device
        if kind == "hf_config":
            return self.load_hf_config
        if kind == "none":
            return lambda i, a, k: None
        if kind == "device_memory":
            return lambda i, a, k: float(device.memory_mib) if device.platform in ("cuda", "hip") else Unknown("device memory of this platform")
        if kind == "driver_tuple":
            return lambda i, a, k: tuple(int(x) for x in device.driver.split(".")) if device.platform == "cuda" else Unknown("driver version")
        if kind == "driver_str":
            return lambda i, a, k: device.driver
        if kind == "device_name":
            return lambda i, a, k: device.name
        raise ValueError(f"unknown boundary kind {kind}")

    def load_hf_config(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        path = args[0] if args else kwargs.get("model")
        if not isinstance(path, str):
            return Unknown("get_config() of an unknown model path")
        inside = self.inside_model_dir(path)
        if inside is None:
            return Unknown(f"config of model {path!r} (not a given model directory)", f"hf:{path}")
        key = str(inside)
        if key in interp.hf_configs:
            cfg = interp.hf_configs[key]
        else:
            from sglang_audit.userfiles import UserFileError, read_user_file

            try:
                data = json.loads(read_user_file(inside / "config.json", "model config").decode("utf-8"))
            except (UserFileError, UnicodeDecodeError, ValueError, RecursionError) as exc:
                return Unknown(f"config of model {path!r} not read ({getattr(exc, 'message', exc)})")
            cfg = self.make_hf_config(data, str(inside))
            interp.hf_configs[key] = cfg
        overrides = kwargs.get("model_override_args")
        if isinstance(overrides, dict) and overrides:
            for k, v in overrides.items():
                cfg.attrs[k] = v
        return cfg

    def make_hf_config(self, data: dict[str, Any], origin: str) -> HFConfig:
        attrs: dict[str, Any] = {}
        for k, v in data.items():
            if k in self.subconfig_keys and isinstance(v, dict):
                attrs[k] = self.make_hf_config(v, origin)
            else:
                attrs[k] = v
        cfg = HFConfig(attrs, origin)
        if "torch_dtype" in attrs and "dtype" not in attrs:
            attrs["dtype"] = attrs["torch_dtype"]
        elif "dtype" in attrs and "torch_dtype" not in attrs:
            attrs["torch_dtype"] = attrs["dtype"]
        attrs.setdefault("_name_or_path", origin)
        attrs.setdefault("name_or_path", origin)
        return cfg

    def hf_attr(self, interp: Interpreter, cfg: HFConfig, name: str) -> Any:
        if name in cfg.attrs:
            interp.note_read(cfg.events.get(name))
            return cfg.attrs[name]
        if name == "get_text_config":
            return Native("get_text_config", lambda i, a, k: self._text_config(cfg, k))
        if name == "to_dict":
            return Native("to_dict", lambda i, a, k: _hf_to_dict(cfg))
        if name == "to_diff_dict":
            return Native("to_diff_dict", lambda i, a, k: _hf_to_dict(cfg))
        if name == "update":
            return Native("update", lambda i, a, k: cfg.attrs.update(a[0] if a else k))
        if name == "__dict__":
            return cfg.attrs
        if name == "__class__":
            return External("transformers.PretrainedConfig")
        if name in self.hf_defaults:
            return copy.deepcopy(self.hf_defaults[name])
        for cls in _config_classes(interp, cfg.attrs.get("model_type")):
            # a property of the release's own config class (Qwen3NextConfig.full_attention_layer_ids)
            found, prop = cls.lookup(name)
            if found and isinstance(prop, Property) and prop.fget is not None:
                return interp.call(prop.fget, [cfg], {})
        raise interp.make_raise("AttributeError", f"'{cfg.attrs.get('model_type')}Config' object has no attribute '{name}'")

    def _text_config(self, cfg: HFConfig, kwargs: dict[str, Any]) -> Any:
        for key in self.text_config_keys:
            sub = cfg.attrs.get(key)
            if isinstance(sub, HFConfig):
                return sub
        return cfg

    # ---- external modules (torch, os, functools, ...) ---------------------------------------
    def native_module(self, interp: Interpreter, name: str) -> Any:
        top = name.split(".")[0]
        if top == self.package_name:
            return None
        if self.package_state(top) is False:
            # an optional package a plain install lacks: `import X` raises ImportError
            raised = interp.make_raise("ModuleNotFoundError", f"No module named '{name}'")
            raised.explicit = True
            raise raised
        return External(name)

    def package_state(self, top: str) -> bool | None:
        """True installed, False known absent, None: not modelled (a transitive dependency)."""
        if top in self.stdlib or top in _KNOWN_PRESENT or self.environment.has_package(top):
            return True
        if top in self.environment.missing or top in self.absent_packages:
            return False
        return None

    def external_attr(self, interp: Interpreter, obj: External, name: str) -> Any:
        path = f"{obj.path}.{name}"
        if name == "__version__" and "." not in obj.path:
            ver = self.import_version(obj.path)
            if ver is not None:
                return ver
        value = self.external_value(interp, path)
        if value is not _MISSING:
            return value
        if path in _ABSENT_ATTRS or (path in _PLATFORM_ATTRS and self.device.platform not in _PLATFORM_ATTRS[path]):
            raise interp.make_raise("AttributeError", f"module '{obj.path}' has no attribute '{name}'")
        return External(path)

    def external_hasattr(self, interp: Interpreter, obj: External, name: str) -> Any:
        path = f"{obj.path}.{name}"
        if path in _ABSENT_ATTRS:
            return False
        if path in _PLATFORM_ATTRS:
            return self.device.platform in _PLATFORM_ATTRS[path]
        if self.external_value(interp, path) is not _MISSING or path in _NATIVE_CALLS:
            return True
        if obj.path.startswith("torch.ops."):
            return False  # custom ops of GPU-only extensions are not registered on this target
        if obj.path in self.stdlib_objects or self.package_state(obj.path.split(".")[0]) is True:
            return True  # an installed package at its pinned version: assume the API is there
        return Unknown(f"hasattr({obj.path}, {name!r})", f"hasattr:{path}")

    stdlib_objects = frozenset({"torch", "torch.cuda", "torch.version", "os", "sys"})

    def external_value(self, interp: Interpreter, path: str) -> Any:
        # mutable values are made per read (per interpreter); the rest is built once
        if path == "os.environ":
            return interp.environ
        if path == "logging.Logger.handlers":
            return []
        if path == "sys.argv":
            return []
        if path == "sys.modules":
            return {}
        if self._static_values is None:
            self._static_values = self._build_static_values()
        return self._static_values.get(path, _MISSING)

    def _build_static_values(self) -> dict[str, Any]:
        d = self.device
        values: dict[str, Any] = {
            "torch.version.cuda": d.cuda if d.platform == "cuda" else None,
            "torch.version.hip": d.hip if d.platform == "hip" else None,
            "torch.version.git_version": "unknown",
            "torch.__version__": self.torch_version,
            "logging.Logger.propagate": True,
            "logging.Logger.level": 20,
            "os.sep": "/",
            "os.name": "posix",
            "sys.platform": "linux",
            "sys.version_info": (3, 11, 7),
            "sys.maxsize": sys.maxsize,
            "math.inf": math.inf,
            "math.pi": math.pi,
            "typing.TYPE_CHECKING": False,
            "logging.DEBUG": 10,
            "logging.INFO": 20,
            "logging.WARNING": 30,
            "logging.ERROR": 40,
            "logging.CRITICAL": 50,
            "dataclasses.MISSING": _DC_MISSING,
            "enum.auto": Native("enum.auto", lambda i, a, k: EnumAuto()),
            "functools.partial": Native("partial", lambda i, a, k: Partial(a[0], list(a[1:]), dict(k))),
            "functools.lru_cache": Native("lru_cache", _lru_cache),
            "functools.cache": Native("cache", lambda i, a, k: Cached(a[0])),
            "functools.cached_property": Native("cached_property", lambda i, a, k: Property(a[0])),
            "functools.wraps": Native("wraps", lambda i, a, k: Native("wraps()", lambda i2, a2, k2: a2[0])),
            "functools.reduce": Native("reduce", _reduce),
            "functools.total_ordering": Native("total_ordering", lambda i, a, k: a[0]),
            "functools.singledispatch": Native("singledispatch", lambda i, a, k: a[0]),
            "contextlib.contextmanager": Native("contextmanager", lambda i, a, k: Unknown("context manager")),
            "dataclasses.dataclass": Native("dataclass", _dataclass_decorator),
            "dataclasses.field": Native("field", _field),
            "dataclasses.fields": Native("fields", _fields),
            "dataclasses.asdict": Native("asdict", lambda i, a, k: dict(a[0].attrs) if isinstance(a[0], Instance) else Unknown("asdict")),
            "dataclasses.is_dataclass": Native("is_dataclass", lambda i, a, k: isinstance(a[0], (Instance, Class)) and "dataclass" in (a[0].cls.flags if isinstance(a[0], Instance) else a[0].flags)),
            "dataclasses.replace": Native("replace", _dc_replace),
            "typing.cast": Native("cast", lambda i, a, k: a[1]),
            "typing.get_args": Native("get_args", self.get_args),
            "typing.get_origin": Native("get_origin", self.get_origin),
            "typing.get_type_hints": Native("get_type_hints", self.type_hints),
            "typing_extensions.get_args": Native("get_args", self.get_args),
            "typing_extensions.get_origin": Native("get_origin", self.get_origin),
            "typing_extensions.get_type_hints": Native("get_type_hints", self.type_hints),
            "types.NoneType": NONE_TYPE,
            "logging.getLogger": Native("getLogger", lambda i, a, k: External("logging.Logger")),
            "json.loads": Native("json.loads", _json_loads),
            "json.load": Native("json.load", lambda i, a, k: _json_loads(i, [a[0].text] if isinstance(a[0], OpenFile) else [Unknown("json.load of an unknown file")], {})),
            "json.dumps": Native("json.dumps", lambda i, a, k: i.data_op(lambda: json.dumps(a[0], sort_keys=bool(k.get("sort_keys")))) if _plain_deep(a[0]) else Unknown("json.dumps")),
            "os.getenv": Native("os.getenv", lambda i, a, k: i.environ.values.get(a[0], a[1] if len(a) > 1 else k.get("default"))),
            "os.path.join": Native("os.path.join", lambda i, a, k: self._plain_call(i, _posix_join, a, {})),
            "os.path.basename": Native("os.path.basename", lambda i, a, k: self._plain_call(i, lambda p: p.rsplit("/", 1)[-1], a, {})),
            "os.path.dirname": Native("os.path.dirname", lambda i, a, k: self._plain_call(i, lambda p: p.rsplit("/", 1)[0] if "/" in p else "", a, {})),
            "os.path.splitext": Native("os.path.splitext", lambda i, a, k: self._plain_call(i, _splitext, a, {})),
            "os.path.isabs": Native("os.path.isabs", lambda i, a, k: self._plain_call(i, lambda p: p.startswith("/"), a, {})),
            "os.path.abspath": Native("os.path.abspath", lambda i, a, k: a[0]),
            "os.path.expanduser": Native("os.path.expanduser", lambda i, a, k: a[0]),
            "os.path.normpath": Native("os.path.normpath", lambda i, a, k: a[0]),
            "os.path.realpath": Native("os.path.realpath", lambda i, a, k: a[0]),
            "os.path.exists": Native("os.path.exists", lambda i, a, k: self.path_probe(i, "exists", a[0])),
            "os.path.isfile": Native("os.path.isfile", lambda i, a, k: self.path_probe(i, "isfile", a[0])),
            "os.path.isdir": Native("os.path.isdir", lambda i, a, k: self.path_probe(i, "isdir", a[0])),
            "pathlib.Path": Native("Path", lambda i, a, k: PathValue(_posix_join(*[_path_text(i, x) for x in a]) if a else ".") if all(isinstance(x, (str, PathValue)) for x in a) else Unknown("Path of an unknown")),
            "os.fspath": Native("fspath", lambda i, a, k: _path_text(i, a[0])),
            "glob.glob": Native("glob.glob", self._glob),
            "platform.machine": Native("platform.machine", lambda i, a, k: "x86_64"),
            "platform.system": Native("platform.system", lambda i, a, k: "Linux"),
            "platform.processor": Native("platform.processor", lambda i, a, k: "x86_64"),
            "importlib.util.find_spec": Native("find_spec", self._find_spec),
            "importlib.metadata.version": Native("metadata.version", self._dist_version),
            # a plain install has no plugin packages: no entry points in any group
            "importlib.metadata.entry_points": Native("entry_points", lambda i, a, k: []),
            "msgspec.defstruct": Native("msgspec.defstruct", self.defstruct),
            "msgspec.field": Native("msgspec.field", _field),
            "msgspec.NODEFAULT": MSGSPEC_NODEFAULT,
            "msgspec.UNSET": External("msgspec.UNSET"),
            "msgspec.structs.fields": Native("msgspec.structs.fields", self.struct_fields),
            "msgspec.structs.asdict": Native("msgspec.structs.asdict", lambda i, a, k: {f.attrs["name"]: a[0].attrs.get(f.attrs["name"]) for f in _fields(i, [a[0]], {})} if isinstance(a[0], Instance) else Unknown("asdict")),
            "msgspec.Struct.__setattr__": self.object_class.ns["__setattr__"],
            "msgspec.Struct.__getattribute__": self.object_class.ns["__getattribute__"],
            "msgspec.Struct.__init__": self.object_class.ns["__init__"],
            "importlib.metadata.PackageNotFoundError": self.exception_classes["PackageNotFoundError"],
            "importlib.import_module": Native("import_module", lambda i, a, k: i.load_module(a[0]) if isinstance(a[0], str) else Unknown("import_module of an unknown name")),
            "json.JSONDecodeError": self.exception_classes["JSONDecodeError"],
            "json.decoder.JSONDecodeError": self.exception_classes["JSONDecodeError"],
            "copy.deepcopy": Native("deepcopy", lambda i, a, k: _deepcopy(a[0])),
            "copy.copy": Native("copy", lambda i, a, k: _shallow_copy(a[0])),
            "warnings.warn": Native("warnings.warn", lambda i, a, k: None),
            "warnings.filterwarnings": Native("filterwarnings", lambda i, a, k: None),
            "collections.OrderedDict": Native("OrderedDict", self._dict),
            "collections.defaultdict": Native("defaultdict", lambda i, a, k: DefaultDict(i, a[0] if a else None, a[1] if len(a) > 1 else {})),
            "collections.namedtuple": Native("namedtuple", lambda i, a, k: Unknown("namedtuple class")),
            "itertools.chain": Native("chain", lambda i, a, k: [x for it in a for x in i.iterate(it, None, 0)]),
            "re.match": Native("re.match", lambda i, a, k: _regex(i, "match", a)),
            "re.fullmatch": Native("re.fullmatch", lambda i, a, k: _regex(i, "fullmatch", a)),
            "re.search": Native("re.search", lambda i, a, k: _regex(i, "search", a)),
            "re.sub": Native("re.sub", lambda i, a, k: _regex_sub(i, self, a)),
            "math.ceil": Native("ceil", lambda i, a, k: self._plain_call(i, math.ceil, a, {})),
            "math.floor": Native("floor", lambda i, a, k: self._plain_call(i, math.floor, a, {})),
            "math.log2": Native("log2", lambda i, a, k: self._plain_call(i, math.log2, a, {})),
            "math.sqrt": Native("sqrt", lambda i, a, k: self._plain_call(i, math.sqrt, a, {})),
            "math.isclose": Native("isclose", lambda i, a, k: self._plain_call(i, math.isclose, a, k)),
            "math.gcd": Native("gcd", lambda i, a, k: self._plain_call(i, math.gcd, a, {})),
            "math.prod": Native("prod", lambda i, a, k: self._plain_call(i, math.prod, [i.iterate(a[0], None, 0)], {})),
            "packaging.version.parse": Native("version.parse", _version_parse),
            "packaging.version.Version": Native("Version", _version_parse),
            "torch.cuda.is_available": Native("cuda.is_available", lambda i, a, k: d.platform in ("cuda", "hip")),
            "torch.cuda.device_count": Native("cuda.device_count", lambda i, a, k: d.gpu_count if d.platform in ("cuda", "hip") else 0),
            "torch.cuda.current_device": Native("cuda.current_device", lambda i, a, k: 0),
            "torch.cuda.is_initialized": Native("cuda.is_initialized", lambda i, a, k: False),
            "torch.cuda.get_device_capability": Native("cuda.get_device_capability", self._capability),
            "torch.cuda.get_device_name": Native("cuda.get_device_name", lambda i, a, k: d.name if d.platform in ("cuda", "hip") else Unknown("no CUDA device")),
            "torch.cuda.get_device_properties": Native("cuda.get_device_properties", self._device_properties),
            "torch.cuda.mem_get_info": Native("cuda.mem_get_info", lambda i, a, k: (d.memory_mib * 1024 * 1024, d.memory_mib * 1024 * 1024)),
            "torch.backends.cudnn.is_available": Native("cudnn.is_available", lambda i, a, k: d.platform == "cuda"),
            "torch.backends.cudnn.version": Native("cudnn.version", lambda i, a, k: d.cudnn if d.cudnn is not None else Unknown("the cuDNN version (pass --cudnn)", "cudnn:version")),
            "torch.cuda.is_bf16_supported": Native("is_bf16_supported", lambda i, a, k: True),
            "torch.xpu.is_available": Native("xpu.is_available", lambda i, a, k: d.platform == "xpu"),
            "torch.npu.is_available": Native("npu.is_available", lambda i, a, k: d.platform == "npu"),
            "torch.cpu.is_available": Native("cpu.is_available", lambda i, a, k: d.platform == "cpu"),
            "torch.mps.is_available": Native("mps.is_available", lambda i, a, k: False),
            "torch.backends.mps.is_available": Native("mps.is_available", lambda i, a, k: False),
            "torch.distributed.is_initialized": Native("dist.is_initialized", lambda i, a, k: False),
            "torch._C._cpu._is_amx_tile_supported": Native("amx", lambda i, a, k: Unknown("AMX support of the CPU", "cpu:amx") if d.platform == "cpu" else False),
            "torch.cpu._is_amx_tile_supported": Native("amx", lambda i, a, k: Unknown("AMX support of the CPU", "cpu:amx") if d.platform == "cpu" else False),
            # NVML (0.5.21+ reads the compute capability through it first)
            "pynvml.nvmlInit": Native("nvmlInit", lambda i, a, k: None),
            "pynvml.nvmlShutdown": Native("nvmlShutdown", lambda i, a, k: None),
            "pynvml.nvmlDeviceGetCount": Native("nvmlDeviceGetCount", lambda i, a, k: d.gpu_count),
            "pynvml.nvmlDeviceGetHandleByIndex": Native("nvmlDeviceGetHandleByIndex", lambda i, a, k: External("pynvml.handle")),
            "pynvml.nvmlDeviceGetCudaComputeCapability": Native("nvmlDeviceGetCudaComputeCapability", lambda i, a, k: (d.major, d.minor) if d.platform == "cuda" else Unknown("NVML on a non-NVIDIA device")),
            "pynvml.nvmlDeviceGetName": Native("nvmlDeviceGetName", lambda i, a, k: d.name),
            "pynvml.nvmlSystemGetDriverVersion": Native("nvmlSystemGetDriverVersion", lambda i, a, k: d.driver),
            "torch.get_device_module": Native("get_device_module", lambda i, a, k: External("torch.cuda")),
            "transformers.AutoConfig.from_pretrained": Native("AutoConfig.from_pretrained", self.load_hf_config),
        }
        return values

    def _capability(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        d = self.device
        if d.platform not in ("cuda", "hip"):
            raise interp.make_raise("RuntimeError", "Found no NVIDIA driver on your system")
        return (d.major, d.minor)

    def _device_properties(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        d = self.device
        props = Class("_CudaDeviceProperties", (), {}, None)
        inst = Instance(props)
        inst.attrs.update(
            name=d.name, major=d.major, minor=d.minor, total_memory=d.memory_mib * 1024 * 1024,
            multi_processor_count=_SM_COUNT.get(d.arch, Unknown("multiprocessor count")),
            gcnArchName=f"{d.arch}:sramecc+:xnack-" if d.platform == "hip" else "",
            is_integrated=d.arch == "sm121",
        )
        return inst

    def _find_spec(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        name = args[0]
        if not isinstance(name, str):
            return Unknown("find_spec of an unknown name")
        top = name.split(".")[0]
        if top == self.package_name:
            return External(f"spec:{name}") if interp.find_module_file(name) is not None else None
        state = self.package_state(top)
        if state is True:
            return External(f"spec:{name}")
        if state is False:
            return None
        return Unknown(f"whether package {top!r} is installed", f"pkg:{top}")

    def import_version(self, import_name: str) -> str | None:
        if import_name == "torch":
            return self.torch_version
        for dist, ver in self.environment.versions:
            norm = dist.lower().replace("-", "_")
            if norm == import_name or self.import_names.get(dist) == import_name:
                return ver
        return None

    def _dist_version(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        name = args[0]
        if not isinstance(name, str):
            return Unknown("version of an unknown distribution")
        norm = name.lower().replace("-", "_")
        for dist, ver in self.environment.versions:
            if dist.lower().replace("-", "_") == norm:
                return ver
        if norm == "torch":
            return self.torch_version
        raise interp.make_raise("PackageNotFoundError", name)

    def call_external(self, interp: Interpreter, func: External, args: list[Any], kwargs: dict[str, Any]) -> Any:
        path = func.path
        if path.startswith("logging.Logger."):
            level = path.rsplit(".", 1)[1]
            if args:
                msg = interp.to_str(args[0]) if not isinstance(args[0], Unknown) else "<?>"
                if len(args) > 1 and "%" in msg:
                    try:
                        msg = msg % tuple(interp.to_str(a) for a in args[1:])
                    except (TypeError, ValueError):
                        pass
                file, line = getattr(interp, "_call_site", ("?", 0))
                from sglang_audit.evaluate.interpreter import LogRecord

                interp.logs.append(LogRecord(file, line, level, msg))
            return None if level not in ("isEnabledFor", "getEffectiveLevel") else False
        if path.startswith("typing.") or path in ("typing_extensions.Literal",):
            return External(path)
        if path == "enum.Enum" or path == "enum.IntEnum":
            return Unknown("functional enum API")
        # an object made by an installed package: it exists and has the API its pinned
        # version has; its value is unknown (comparing it or testing its truth forks)
        return External(f"{path}()")

    def path_attr(self, interp: Interpreter, obj: PathValue, name: str) -> Any:
        text = obj.text
        if name == "parent":
            return PathValue(text.rsplit("/", 1)[0] if "/" in text.rstrip("/") else ".")
        if name == "name":
            return text.rstrip("/").rsplit("/", 1)[-1]
        if name == "suffix":
            return _splitext(text)[1]
        if name == "stem":
            return _splitext(text.rsplit("/", 1)[-1])[0]
        if name in ("exists", "is_file", "is_dir"):
            probe = {"exists": "exists", "is_file": "isfile", "is_dir": "isdir"}[name]
            return Native(f"Path.{name}", lambda i, a, k: self.path_probe(i, probe, text))
        if name in ("resolve", "absolute", "expanduser"):
            return Native(f"Path.{name}", lambda i, a, k: obj)
        if name == "joinpath":
            return Native("Path.joinpath", lambda i, a, k: PathValue(_posix_join(text, *[_path_text(i, x) for x in a])))
        if name == "read_text":
            def read(i: Interpreter, a: list[Any], k: dict[str, Any]) -> Any:
                f = self._open(i, [text], {})
                return f.text if isinstance(f, OpenFile) else f
            return Native("Path.read_text", read)
        if name == "as_posix":
            return Native("Path.as_posix", lambda i, a, k: text)
        return Unknown(f"Path.{name}")

    def binop(self, interp: Interpreter, op: str, left: Any, right: Any) -> Any:
        if op == "/" and isinstance(left, PathValue) and isinstance(right, (str, PathValue)):
            return PathValue(_posix_join(left.text, _path_text(interp, right)))
        if op == "/" and isinstance(left, str) and isinstance(right, PathValue):
            return PathValue(_posix_join(left, right.text))
        return _MISSING

    def compare(self, interp: Interpreter, op: str, left: Any, right: Any) -> Any:
        if isinstance(left, VersionValue) and isinstance(right, VersionValue):
            import operator as _op

            fn = {"<": _op.lt, "<=": _op.le, ">": _op.gt, ">=": _op.ge, "==": _op.eq, "!=": _op.ne}[op]
            return fn(left.version, right.version)
        return _MISSING

    def external_truth(self, value: External) -> Any:
        """`bool()` of an outside object the world knows, or NOT_HANDLED."""
        if value.path.startswith("torch.ops.") and "(" not in value.path:
            return True  # an op namespace object (always truthy, like any module)
        return _MISSING

    def to_str(self, value: Any) -> str | None:
        if isinstance(value, PathValue):
            return value.text
        return None

    def native_attr(self, interp: Interpreter, obj: Any, name: str) -> Any:
        if hasattr(obj, "native_attr"):  # tool-side stand-ins (e.g. the recording parser)
            return obj.native_attr(interp, name)
        if isinstance(obj, PathValue):
            return self.path_attr(interp, obj, name)
        if isinstance(obj, Environ):
            env = obj.values
            methods = {
                "get": lambda i, a, k: env.get(a[0], a[1] if len(a) > 1 else None),
                "setdefault": lambda i, a, k: env.setdefault(a[0], a[1] if len(a) > 1 else ""),
                "pop": lambda i, a, k: env.pop(a[0], a[1] if len(a) > 1 else None),
                "items": lambda i, a, k: list(env.items()),
                "keys": lambda i, a, k: list(env.keys()),
                "copy": lambda i, a, k: dict(env),
                "update": lambda i, a, k: env.update(a[0] if a else k),
            }
            if name in methods:
                return Native(f"os.environ.{name}", methods[name])
        if isinstance(obj, OpenFile):
            if name == "read":
                return Native("read", lambda i, a, k: obj.text)
            if name in ("__enter__",):
                return Native("enter", lambda i, a, k: obj)
        if isinstance(obj, VersionValue):
            if name in ("release", "major", "minor", "micro", "base_version", "public"):
                return getattr(obj.version, name)
        if isinstance(obj, RegexMatch):
            if name == "group":
                return Native("group", lambda i, a, k: obj.groups[a[0] if a else 0])
            if name == "groups":
                return Native("groups", lambda i, a, k: tuple(obj.groups[1:]))
        return Unknown(f"attribute {name} of {type(obj).__name__}")

    def set_native_attr(self, interp: Interpreter, obj: Any, name: str, value: Any) -> None:
        return None

    def external_item(self, interp: Interpreter, obj: Any, index: Any) -> Any:
        args = index if isinstance(index, tuple) else (index,)
        if isinstance(obj, External):
            leaf = obj.path.rsplit(".", 1)[-1]
            if leaf == "Optional":
                return TypeForm(External("typing.Union"), (args[0], NONE_TYPE))
            if obj.path.startswith(("typing", "collections")) or leaf in _TYPING_NAMES:
                origin = External("typing.Annotated") if leaf == "Annotated" else obj
                return TypeForm(origin, tuple(args))
        if isinstance(obj, Native):
            return TypeForm(obj, tuple(args))  # a builtin generic such as list[int]
        return Unknown(f"subscript of {obj!r}")

    # ---- typing -----------------------------------------------------------------------
    def annotations_of(self, interp: Interpreter, cls: Class) -> dict[str, Any]:
        """The class's own annotations, evaluated in its module (like get_type_hints)."""
        assigned = cls.ns.get("__annotations__")
        if isinstance(assigned, dict):
            return assigned
        if cls.annotation_values is None:
            from sglang_audit.evaluate.interpreter import Frame, PyRaise, Unmodelled

            values: dict[str, Any] = {}
            for name, node in cls.annotation_nodes.items():
                try:
                    values[name] = interp.evaluate(node, Frame(module=cls.module)) if cls.module else Unknown("annotation")
                except (PyRaise, Unmodelled) as exc:
                    values[name] = Unknown(f"annotation of {cls.name}.{name} ({exc})")
            cls.annotation_values = values
        return cls.annotation_values

    def type_hints(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        target = args[0]
        cls = target.cls if isinstance(target, Instance) else target
        if not isinstance(cls, Class):
            return Unknown("get_type_hints of a non-class")
        out: dict[str, Any] = {}
        for klass in reversed(cls.mro()):
            if klass is self.object_class:
                continue
            for name, value in self.annotations_of(interp, klass).items():
                if not kwargs.get("include_extras") and isinstance(value, TypeForm) and _leaf(value.origin) == "Annotated":
                    value = value.args[0]
                out[name] = value
        return out

    def get_origin(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        tp = args[0]
        if isinstance(tp, TypeForm):
            leaf = _leaf(tp.origin)
            if leaf in ("List", "Dict", "Set", "Tuple", "FrozenSet", "Type"):
                return interp.builtins.get(leaf.lower(), tp.origin)
            return tp.origin
        if isinstance(tp, Unknown):
            return tp
        return None

    def get_args(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        tp = args[0]
        if isinstance(tp, TypeForm):
            return tuple(tp.args)
        if isinstance(tp, Unknown):
            return tp
        return ()

    def native_item(self, interp: Interpreter, obj: Any, index: Any) -> Any:
        if isinstance(obj, Environ):
            if index in obj.values:
                return obj.values[index]
            raise interp.make_raise("KeyError", index)
        if isinstance(obj, RegexMatch) and isinstance(index, int):
            return obj.groups[index]
        return Unknown(f"subscript of {type(obj).__name__}")

    def set_native_item(self, interp: Interpreter, obj: Any, key: Any, value: Any) -> None:
        if isinstance(obj, Environ) and isinstance(key, str):
            obj.values[key] = value if isinstance(value, str) else interp.to_str(value)

    def is_environ(self, obj: Any) -> bool:
        return isinstance(obj, Environ)

    def environ_contains(self, interp: Interpreter, item: Any) -> Any:
        return item in interp.environ.values if isinstance(item, str) else Unknown("env key")

    def iterate_native(self, interp: Interpreter, value: Any) -> list[Any] | None:
        if isinstance(value, Environ):
            return list(value.values.keys())
        return None

    def instance_special(self, interp: Interpreter, obj: Instance, name: str) -> Any:
        return None

    def class_special(self, interp: Interpreter, cls: Class, name: str) -> Any:
        if "enum" in cls.flags and name == "__members__":
            return {m.attrs["_name_"]: m for m in cls.ns.get("__members_list__", [])}
        if "enum" in cls.flags and name == "_value2member_map_":
            return {m.attrs["_value_"]: m for m in cls.ns.get("__members_list__", [])}
        if name == "__dataclass_fields__" and "dataclass" in cls.flags:
            return {f.attrs["name"]: f for f in _fields(interp, [cls], {})}
        if name == "__annotations__":
            return self.annotations_of(interp, cls)
        if name == "__struct_fields__" and "msgspec_struct" in cls.flags:
            return tuple(f for f, _, _ in _dataclass_fields(cls))
        return None

    def before_instance_write(self, interp: Interpreter, obj: Instance, name: str, value: Any, event: Any) -> None:
        return None

    # ---- msgspec structs (0.5.20+ ServerArgs) -------------------------------------------
    def class_created(self, interp: Interpreter, cls: Class) -> None:
        if any(p == "msgspec.Struct" or p.endswith(".Struct") and p.startswith("msgspec") for p in cls.external_bases) or (
            any("msgspec_struct" in b.flags for b in cls.bases if isinstance(b, Class))
        ):
            cls.flags |= {"dataclass", "msgspec_struct"}
            if "__init__" not in cls.ns:
                cls.ns["__init__"] = Native("__dataclass_init__", _dataclass_init, bind_self=True)

    def defstruct(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        name = args[0]
        fields = interp.iterate(args[1], None, 0) if len(args) > 1 else []
        ns = dict(kwargs.get("namespace") or {})
        bases = kwargs.get("bases") or ()
        real_bases = tuple(b for b in (bases if isinstance(bases, tuple) else ()) if isinstance(b, Class))
        module = None
        for v in ns.values():
            if isinstance(v, Function):
                module = v.module
                break
        cls = Class(str(name), real_bases, ns, module, 0)
        cls.flags |= {"dataclass", "msgspec_struct"}
        values: dict[str, Any] = {}
        for spec in fields:
            items = interp.iterate(spec, None, 0) if not isinstance(spec, str) else [spec]
            fname = items[0]
            ann = items[1] if len(items) > 1 else Unknown("field type")
            cls.annotations.append((fname, 0, ""))
            values[fname] = ann
            if len(items) > 2:
                ns[fname] = items[2]
            else:
                ns.pop(fname, None)
        cls.annotation_values = values
        ns["__init__"] = Native("__dataclass_init__", _dataclass_init, bind_self=True)
        for v in ns.values():
            if isinstance(v, Function) and isinstance(v.attrs.get("__class__"), Class):
                v.attrs["__class__"] = cls  # zero-argument super() inside the new class
        return cls

    def struct_fields(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        target = args[0]
        cls = target.cls if isinstance(target, Instance) else target
        if not isinstance(cls, Class):
            return Unknown("msgspec.structs.fields of a non-struct")
        out = []
        for f in _fields(interp, [cls], {}):
            info = Instance(Class("FieldInfo", (), {}, None))
            default = f.attrs["default"]
            factory = f.attrs["default_factory"]
            info.attrs.update(
                name=f.attrs["name"], encode_name=f.attrs["name"], type=f.attrs["type"],
                default=MSGSPEC_NODEFAULT if default is _DC_MISSING else default,
                default_factory=MSGSPEC_NODEFAULT if factory is _DC_MISSING else factory,
                required=default is _DC_MISSING and factory is _DC_MISSING,
            )
            out.append(info)
        return tuple(out)

    # ---- enums ------------------------------------------------------------------------
    def make_enum(self, interp: Interpreter, cls: Class) -> None:
        members: list[Instance] = []
        counter = 0
        if any(p.endswith("IntEnum") or p.endswith("IntFlag") or p == "int" for p in cls.external_bases):
            cls.flags.add("int_mixin")
        for name, value in list(cls.ns.items()):
            if name.startswith("_") or isinstance(value, (Function, StaticMethod, ClassMethod, Property, Native, Cached, Class)):
                continue
            if isinstance(value, Unknown) or isinstance(value, External):
                continue
            if isinstance(value, EnumAuto):
                counter += 1
                value = name.lower() if "str_mixin" in cls.flags else counter
            elif isinstance(value, int) and not isinstance(value, bool):
                counter = value
            existing = next((m for m in members if m.attrs["_value_"] == value and _plain(value)), None)
            if existing is not None:  # an alias of an earlier member
                cls.ns[name] = existing
                continue
            member = Instance(cls)
            member.attrs.update(_name_=name, _value_=value, name=name, value=value)
            cls.ns[name] = member
            members.append(member)
        cls.ns["__members_list__"] = members

    def enum_lookup(self, interp: Interpreter, cls: Class, args: list[Any]) -> Any:
        if not args:
            return Unknown("enum call without value")
        value = args[0]
        if isinstance(value, Unknown):
            return Unknown(value.reason, value.key)
        if isinstance(value, Instance) and value.cls.is_subclass_of(cls):
            return value
        plain = interp.plain_of(value)
        for m in cls.ns.get("__members_list__", []):
            if _plain(plain) and m.attrs["_value_"] == plain and type(m.attrs["_value_"]) is not bool:
                return m
        found, missing = cls.lookup("_missing_")
        if found and isinstance(missing, ClassMethod):
            result = interp.call(missing.func, [cls, value], {})
            if result is not None:
                return result
        raised = interp.make_raise("ValueError", f"{plain!r} is not a valid {cls.name}")
        raised.explicit = True  # Enum's own check: SGLang's verdict on an unknown backend name
        raise raised

    def enum_by_name(self, interp: Interpreter, cls: Class, name: Any) -> Any:
        for m in cls.ns.get("__members_list__", []):
            if m.attrs["_name_"] == name:
                return m
        raise interp.make_raise("KeyError", name)


# ---- small native helpers ---------------------------------------------------------------
_MISSING = NOT_HANDLED
NONE_TYPE = External("builtins.NoneType")
MSGSPEC_NODEFAULT = External("msgspec.NODEFAULT")
_TYPING_NAMES = {"Annotated", "Optional", "Union", "List", "Dict", "Tuple", "Set", "Literal", "Callable", "Type", "FrozenSet", "Sequence", "Mapping", "Iterable"}


def _leaf(origin: Any) -> str:
    path = getattr(origin, "path", None) or getattr(origin, "name", "")
    return path.rsplit(".", 1)[-1]
_DC_MISSING = External("dataclasses.MISSING")
_BUILTIN_TYPES: dict[str, type] = {
    "str": str, "int": int, "float": float, "bool": bool, "list": list, "tuple": tuple,
    "dict": dict, "set": set, "frozenset": frozenset, "bytes": bytes, "complex": complex,
    "NoneType": type(None),
}
_NONE_TYPE = Native("NoneType", lambda i, a, k: None)  # type(None); not a builtin name
_KNOWN_PRESENT = {"torch", "transformers", "triton", "numpy", "packaging", "typing_extensions"}
# attributes that do not exist on a plain torch (GPU vendors' extensions)
_ABSENT_ATTRS = {"torch.hpu", "torch.musa", "torch.cuda.is_musa", "torch.version.musa", "torch.version.xpu"}
_PLATFORM_ATTRS = {"torch.npu": ("npu",)}
_NATIVE_CALLS: set[str] = set()
_SM_COUNT = {"sm80": 108, "sm86": 84, "sm89": 142, "sm90": 132, "sm100": 148, "sm103": 148, "sm110": 20, "sm120": 188, "sm121": 48, "gfx942": 304, "gfx950": 256}


def _plain(value: Any) -> bool:
    return isinstance(value, (type(None), bool, int, float, str, bytes, tuple, list, dict, set, frozenset, range))


def _plain_deep(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain_deep(v) for v in value)
    if isinstance(value, dict):
        return all(_plain_deep(k) and _plain_deep(v) for k, v in value.items())
    return isinstance(value, (type(None), bool, int, float, str))


def _posix_join(*parts: str) -> str:
    out = ""
    for p in parts:
        if p.startswith("/"):
            out = p
        elif not out or out.endswith("/"):
            out += p
        else:
            out += "/" + p
    return out


def _path_text(interp: Any, value: Any) -> Any:
    return value.text if isinstance(value, PathValue) else value


def _splitext(p: str) -> tuple[str, str]:
    base = p.rsplit("/", 1)[-1]
    if "." in base.lstrip("."):
        idx = p.rfind(".")
        return p[:idx], p[idx:]
    return p, ""


class PathValue:
    """``pathlib.Path``: string manipulation, and file probes only inside the model directory."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Path({self.text!r})"


class DefaultDict(dict):
    """``collections.defaultdict`` whose factory is an analysed or native callable."""

    def __init__(self, interp: Any, factory: Any, initial: Any) -> None:
        super().__init__(initial if isinstance(initial, dict) else {})
        self._interp = interp
        self._factory = factory

    def __missing__(self, key: Any) -> Any:
        if self._factory is None:
            raise KeyError(key)
        value = self._interp.call(self._factory, [], {})
        self[key] = value
        return value


class EnumAuto:
    """``enum.auto()`` placeholder, numbered when the enum class is built."""


class OpenFile:
    def __init__(self, text: str) -> None:
        self.text = text


class VersionValue:
    """A ``packaging.version.Version``: compared by the tool's own packaging, never eval."""

    def __init__(self, version: Any) -> None:
        self.version = version


class RegexMatch:
    def __init__(self, groups: list[Any]) -> None:
        self.groups = groups


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    # re's own cache holds 512 patterns; an exclude list of a quantized checkpoint has more
    return re.compile(pattern)


def _regex(interp: Interpreter, fn: str, args: list[Any]) -> Any:
    pattern, text = args[0], args[1]
    if not isinstance(pattern, str) or not isinstance(text, str) or len(pattern) > 500 or len(text) > 100_000:
        return Unknown("regular expression on unknown input")
    refused = _regex_refused(pattern, text)
    if refused:
        return Unknown(refused)
    m = getattr(_compiled(pattern), fn)(text)
    if m is None:
        return None
    return RegexMatch([m.group(0), *m.groups()])


def _regex_sub(interp: Interpreter, world: NativeWorld, args: list[Any]) -> Any:
    if len(args) >= 3 and isinstance(args[0], str) and isinstance(args[2], str):
        refused = _regex_refused(args[0], args[2])
        if refused:
            return Unknown(refused)
    return world._plain_call(interp, re.sub, args[:3], {})


# CPython's `re` backtracks without a budget: `(a+)+$` on 40 characters runs for hours.
# A pattern with a repetition inside a repetition (the shape of every catastrophic case)
# is run only on texts short enough that its worst case is small (2**20 steps).
_NESTED_REPEAT_TEXT = 20


def _regex_refused(pattern: str, text: str) -> str | None:
    """Why an analysed pattern is not run (invalid, or may backtrack without end), or None."""
    try:
        import re._parser as sre_parse  # type: ignore[import-not-found]
    except ImportError:  # Python 3.10
        import sre_parse  # type: ignore[no-redef]
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        return f"invalid regular expression {pattern[:60]!r} ({exc})"
    if len(text) > _NESTED_REPEAT_TEXT and _nested_repeat(parsed, 0, sre_parse):
        return (f"analysis bound reached: regular expression {pattern[:60]!r} nests a repetition in a "
                f"repetition and may backtrack without end on a {len(text)}-character text")
    return None


def _nested_repeat(items: Any, depth: int, sre_parse: Any) -> bool:
    consts = sre_parse
    for op, av in items:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = av
            unbounded = hi is consts.MAXREPEAT or hi > 1
            if unbounded and depth > 0:
                return True
            if _nested_repeat(sub, depth + (1 if unbounded else 0), sre_parse):
                return True
        elif name == "SUBPATTERN":
            if _nested_repeat(av[-1], depth, sre_parse):
                return True
        elif name == "BRANCH":
            if any(_nested_repeat(b, depth, sre_parse) for b in av[1]):
                return True
        elif name in ("ASSERT", "ASSERT_NOT"):
            if _nested_repeat(av[1], depth, sre_parse):
                return True
        elif name == "GROUPREF_EXISTS":
            if any(b is not None and _nested_repeat(b, depth, sre_parse) for b in av[1:]):
                return True
    return False


def _version_parse(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    from packaging.version import InvalidVersion, Version

    text = args[0]
    if not isinstance(text, str):
        return Unknown("version of an unknown string")
    try:
        return VersionValue(Version(text))
    except InvalidVersion:
        raise interp.make_raise("ValueError", f"Invalid version: {text!r}") from None


def _json_loads(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    text = args[0]
    if not isinstance(text, (str, bytes)):
        return Unknown("json of an unknown text")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise interp.make_raise("JSONDecodeError", str(exc)) from None


def _reduce(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    items = interp.iterate(args[1], None, 0)
    if len(args) > 2:
        acc = args[2]
    elif items:
        acc, items = items[0], items[1:]
    else:
        raise interp.make_raise("TypeError", "reduce() of empty iterable")
    for x in items:
        acc = interp.call(args[0], [acc, x], {})
    return acc


def _lru_cache(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    if args and not isinstance(args[0], (int, type(None))):
        return Cached(args[0])  # bare @lru_cache
    return Native("lru_cache()", lambda i, a, k: Cached(a[0]))


def _deepcopy(value: Any) -> Any:
    memo: dict[int, Any] = {}

    def dc(v: Any) -> Any:
        if id(v) in memo:
            return memo[id(v)]
        if isinstance(v, list):
            out: Any = []
            memo[id(v)] = out
            out.extend(dc(x) for x in v)
            return out
        if isinstance(v, dict):
            out = {}
            memo[id(v)] = out
            for k, x in v.items():
                out[k] = dc(x)
            return out
        if isinstance(v, set):
            return {dc(x) for x in v}
        if isinstance(v, tuple):
            return tuple(dc(x) for x in v)
        if isinstance(v, HFConfig):
            out = HFConfig({}, v.origin)
            memo[id(v)] = out
            out.attrs = {k: dc(x) for k, x in v.attrs.items()}
            return out
        if isinstance(v, Instance) and "enum" not in v.cls.flags:
            out = Instance(v.cls)
            memo[id(v)] = out
            out.attrs = {k: dc(x) for k, x in v.attrs.items()}
            out.events = dict(v.events)
            return out
        return v

    return dc(value)


def _shallow_copy(value: Any) -> Any:
    if isinstance(value, (list, dict, set)):
        return value.copy()
    if isinstance(value, HFConfig):
        out = HFConfig(dict(value.attrs), value.origin)
        return out
    if isinstance(value, Instance) and "enum" not in value.cls.flags:
        out2 = Instance(value.cls)
        out2.attrs = dict(value.attrs)
        out2.events = dict(value.events)
        return out2
    return value


def _config_classes(interp: Interpreter, model_type: Any) -> list[Class]:
    """The release's config classes (in the modules evaluated so far) declaring this model_type."""
    if not isinstance(model_type, str):
        return []
    out = []
    for mod in list(interp.modules.values()):
        if isinstance(mod, ModuleObj) and ".configs." in f".{mod.name}.":
            for v in mod.globals.values():
                if isinstance(v, Class) and v.ns.get("model_type") == model_type and v.module is mod:
                    out.append(v)
    return out


def _hf_to_dict(cfg: HFConfig) -> dict[str, Any]:
    return {k: _hf_to_dict(v) if isinstance(v, HFConfig) else copy.deepcopy(v) if _plain_deep(v) else v for k, v in cfg.attrs.items()}


# ---- dataclasses --------------------------------------------------------------------------
def _field(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    spec = FieldSpec()
    if "default" in kwargs:
        spec.default = kwargs["default"]
        spec.has_default = True
    if "default_factory" in kwargs:
        spec.default_factory = kwargs["default_factory"]
    if "init" in kwargs:
        spec.init = bool(kwargs["init"])
    return spec


def _dataclass_fields(cls: Class) -> list[tuple[str, int, Class]]:
    """(name, line, owner) for each dataclass field, base classes first, as dataclasses does.

    Computed once per class (records are instantiated many thousand times in 0.5.20+)."""
    stamp = tuple(len(k.annotations) for k in cls.mro())
    if cls.dc_cache is not None and cls.dc_cache[0] == stamp:
        return cls.dc_cache[1]
    fields = _compute_dataclass_fields(cls)
    cls.dc_cache = (stamp, fields)
    return fields


def _compute_dataclass_fields(cls: Class) -> list[tuple[str, int, Class]]:
    seen: dict[str, tuple[str, int, Class]] = {}
    for klass in reversed(cls.mro()):
        if "dataclass" not in klass.flags:
            continue
        for name, line, ann in klass.annotations:
            if ann.startswith(("ClassVar", "typing.ClassVar", "InitVar")):
                continue
            seen[name] = (name, line, klass)
    return list(seen.values())


def _dataclass_decorator(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    if not args:
        return Native("dataclass()", lambda i, a, k: _dataclass_decorator(i, a, {}))
    cls = args[0]
    if not isinstance(cls, Class):
        return cls
    cls.flags.add("dataclass")
    found, init = cls.lookup("__init__")
    if not found or "__dataclass_init__" in getattr(init, "name", ""):
        cls.ns["__init__"] = Native("__dataclass_init__", _dataclass_init, bind_self=True)
    return cls


def dataclass_default(interp: Interpreter, cls: Class, name: str) -> tuple[bool, Any]:
    found, value = cls.lookup(name)
    if not found:
        return False, None
    if isinstance(value, FieldSpec):
        if value.default_factory is not None:
            return True, interp.call(value.default_factory, [], {})
        if value.has_default:
            return True, value.default
        return False, None
    if isinstance(value, (list, dict, set)):
        return True, copy.copy(value)
    return True, value


def _dataclass_init(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    obj: Instance = args[0]
    positional = list(args[1:])
    kwargs = dict(kwargs)
    cls = obj.cls
    for name, line, owner in _dataclass_fields(cls):
        file = owner.module.file if owner.module else "?"
        spec_found, spec = cls.lookup(name)
        if isinstance(spec, FieldSpec) and not spec.init:
            ok, value = dataclass_default(interp, cls, name)
            if ok:
                obj.attrs[name] = value
            continue
        if positional:
            value = positional.pop(0)
            obj.attrs[name] = value
            obj.events[name] = interp.event("flag", name, value, file, line, f"{name} (given)")
        elif name in kwargs:
            value = kwargs.pop(name)
            obj.attrs[name] = value
            obj.events[name] = interp.event("flag", name, value, file, line, f"{name} (given)")
        else:
            ok, value = dataclass_default(interp, cls, name)
            if not ok:
                raise interp.make_raise("TypeError", f"{cls.name}.__init__() missing required argument: '{name}'")
            obj.attrs[name] = value
            obj.events[name] = interp.event("default", name, value, file, line, f"{name} default")
    if kwargs:
        raise interp.make_raise("TypeError", f"{cls.name}.__init__() got an unexpected keyword argument '{next(iter(kwargs))}'")
    found, post = cls.lookup("__post_init__")
    if found:
        interp.call(interp.bind(post, obj, cls), [], {})
    return None


def _fields(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    target = args[0]
    cls = target.cls if isinstance(target, Instance) else target
    if not isinstance(cls, Class):
        return Unknown("dataclasses.fields of a non-dataclass")
    field_cls = Class("Field", (), {}, None)
    out = []
    for name, _line, _owner in _dataclass_fields(cls):
        f = Instance(field_cls)
        ok, default = dataclass_default(interp, cls, name)
        ann = interp.natives.annotations_of(interp, _owner).get(name, Unknown("field type"))
        spec_found, spec = cls.lookup(name)
        factory = spec.default_factory if isinstance(spec, FieldSpec) and spec.default_factory is not None else _DC_MISSING
        if isinstance(spec, FieldSpec) and spec.default_factory is not None:
            ok, default = False, None
        f.attrs.update(name=name, default=default if ok else _DC_MISSING, type=ann, default_factory=factory, metadata={}, init=True)
        out.append(f)
    return tuple(out)


def _dc_replace(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    obj = args[0]
    if not isinstance(obj, Instance):
        return Unknown("dataclasses.replace")
    new = Instance(obj.cls)
    new.attrs = {**obj.attrs, **kwargs}
    new.events = dict(obj.events)
    return new
