"""The pure stdlib modules the configuration code calls: functools, copy, json, re, math,
collections, itertools, warnings, logging, sys, os (without the file system), contextlib,
importlib.import_module, and packaging.version (compared by the tool's own packaging).

Each ``<module>_attrs(host)`` returns that module's attributes by dotted path; the table in
``evaluate/overlays/__init__.py`` registers them. A function not listed is an ``External``
whose calls yield ``Unknown``."""

from __future__ import annotations

import functools
import json
import math
import re
import struct
import sys
from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.overlays.builtins import dict_
from sglang_audit.evaluate.overlays.common import (
    MISSING,
    Environ,
    OpenFile,
    RegexMatch,
    RegexPattern,
    VersionValue,
    path_text,
    plain_call,
    plain_deep,
)
from sglang_audit.evaluate.values import (
    Cached,
    External,
    Function,
    HFConfig,
    Instance,
    Native,
    Partial,
    Property,
    Unknown,
)

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.evaluate.overlays.host import Host


class DefaultDict(dict[Any, Any]):
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



@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    # re's own cache holds 512 patterns; an exclude list of a quantized checkpoint has more
    return re.compile(pattern)


def regex(interp: Interpreter, fn: str, args: list[Any]) -> Any:
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


def _regex_sub(interp: Interpreter, args: list[Any]) -> Any:
    if len(args) >= 3 and isinstance(args[0], str) and isinstance(args[2], str):
        refused = _regex_refused(args[0], args[2])
        if refused:
            return Unknown(refused)
    return plain_call(interp, re.sub, args[:3], {})


# CPython's `re` backtracks without a budget: `(a+)+$` on 40 characters runs for hours.
# A pattern with a repetition inside a repetition (the shape of every catastrophic case)
# is run only on texts short enough that its worst case is small (2**20 steps).
_NESTED_REPEAT_TEXT = 20


def _regex_refused(pattern: str, text: str) -> str | None:
    """Why an analysed pattern is not run (invalid, or may backtrack without end), or None."""
    invalid, nested = _pattern_facts(pattern)
    if invalid is not None:
        return f"invalid regular expression {pattern[:60]!r} ({invalid})"
    if len(text) > _NESTED_REPEAT_TEXT and nested:
        return (f"analysis bound reached: regular expression {pattern[:60]!r} nests a repetition in a "
                f"repetition and may backtrack without end on a {len(text)}-character text")
    return None


# pattern -> (why it is invalid, whether it nests a repetition): a quantized checkpoint's
# exclude list is matched thousands of times per resolution (sre_parse was ~15% of a
# 0.5.23 resolution); bounded like _compiled
_PATTERN_FACTS: dict[str, tuple[str | None, bool]] = {}


def _pattern_facts(pattern: str) -> tuple[str | None, bool]:
    known = _PATTERN_FACTS.get(pattern)
    if known is not None:
        return known
    try:
        import re._parser as sre_parse  # type: ignore[import-not-found]  # not in typeshed
    except ImportError:  # Python 3.10
        import sre_parse
    try:
        parsed = sre_parse.parse(pattern)
    except RecursionError as exc:
        return str(exc), False  # depends on the caller's stack depth: not remembered
    except (re.error, OverflowError) as exc:
        facts: tuple[str | None, bool] = (str(exc), False)
    else:
        facts = (None, _nested_repeat(parsed, 0, sre_parse))
    if len(_PATTERN_FACTS) >= 4096:
        _PATTERN_FACTS.clear()
    _PATTERN_FACTS[pattern] = facts
    return facts


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
            out.config_class = v.config_class
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
        out.config_class = value.config_class
        return out
    if isinstance(value, Instance) and "enum" not in value.cls.flags:
        out2 = Instance(value.cls)
        out2.attrs = dict(value.attrs)
        out2.events = dict(value.events)
        return out2
    return value



def functools_attrs(host: Host) -> dict[str, Any]:
    return {
        "functools.partial": Native("partial", lambda i, a, k: Partial(a[0], list(a[1:]), dict(k))),
        "functools.lru_cache": Native("lru_cache", _lru_cache),
        "functools.cache": Native("cache", lambda i, a, k: Cached(a[0])),
        "functools.cached_property": Native("cached_property", lambda i, a, k: Property(a[0])),
        "functools.wraps": Native("wraps", lambda i, a, k: Native("wraps()", lambda i2, a2, k2: a2[0])),
        "functools.reduce": Native("reduce", _reduce),
        "functools.total_ordering": Native("total_ordering", lambda i, a, k: a[0]),
        "functools.singledispatch": Native("singledispatch", lambda i, a, k: a[0]),
    }


def copy_attrs(host: Host) -> dict[str, Any]:
    return {
        "copy.deepcopy": Native("deepcopy", lambda i, a, k: _deepcopy(a[0])),
        "copy.copy": Native("copy", lambda i, a, k: _shallow_copy(a[0])),
    }


def json_attrs(host: Host) -> dict[str, Any]:
    return {
        "json.loads": Native("json.loads", _json_loads),
        "json.load": Native("json.load", lambda i, a, k: _json_loads(i, [a[0].text] if isinstance(a[0], OpenFile) else [Unknown("json.load of an unknown file")], {})),
        "json.dumps": Native("json.dumps", lambda i, a, k: i.data_op(lambda: json.dumps(a[0], sort_keys=bool(k.get("sort_keys")))) if plain_deep(a[0]) else Unknown("json.dumps")),
        "json.JSONDecodeError": host.exception_classes["JSONDecodeError"],
        "json.decoder.JSONDecodeError": host.exception_classes["JSONDecodeError"],
    }


def re_attrs(host: Host) -> dict[str, Any]:
    return {
        "re.match": Native("re.match", lambda i, a, k: regex(i, "match", a)),
        "re.fullmatch": Native("re.fullmatch", lambda i, a, k: regex(i, "fullmatch", a)),
        "re.search": Native("re.search", lambda i, a, k: regex(i, "search", a)),
        "re.sub": Native("re.sub", lambda i, a, k: _regex_sub(i, a)),
        "re.compile": Native("re.compile", _regex_compile),
    }


def _regex_compile(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """A pattern without flags is a ``RegexPattern`` (its match/search/... as ``re``'s
    functions); with flags, or not a string, an outside object as before."""
    if len(args) == 1 and not kwargs and isinstance(args[0], str):
        return RegexPattern(args[0])
    from sglang_audit.evaluate.interpreter import call_identity

    func = External("re.compile")
    return External("re.compile()", call_identity(interp, func, args, kwargs))


def _struct(interp: Interpreter, fn: Any, args: list[Any]) -> Any:
    """``struct.unpack``/``calcsize`` on plain data (a format string, bytes); struct.error
    (an Exception) raised as the analysed code would see it."""
    if not args or not isinstance(args[0], str) or not all(isinstance(a, (bytes, int)) for a in args[1:]):
        return Unknown(f"struct.{fn.__name__} of unknown data")
    try:
        return fn(*args)
    except struct.error as exc:
        raise interp.make_raise("Exception", str(exc)) from None


def struct_attrs(host: Host) -> dict[str, Any]:
    return {
        "struct.unpack": Native("struct.unpack", lambda i, a, k: _struct(i, struct.unpack, a)),
        "struct.calcsize": Native("struct.calcsize", lambda i, a, k: _struct(i, struct.calcsize, a)),
    }


def math_attrs(host: Host) -> dict[str, Any]:
    return {
        "math.inf": math.inf,
        "math.pi": math.pi,
        "math.ceil": Native("ceil", lambda i, a, k: plain_call(i, math.ceil, a, {})),
        "math.floor": Native("floor", lambda i, a, k: plain_call(i, math.floor, a, {})),
        "math.log2": Native("log2", lambda i, a, k: plain_call(i, math.log2, a, {})),
        "math.sqrt": Native("sqrt", lambda i, a, k: plain_call(i, math.sqrt, a, {})),
        "math.isclose": Native("isclose", lambda i, a, k: plain_call(i, math.isclose, a, k)),
        "math.gcd": Native("gcd", lambda i, a, k: plain_call(i, math.gcd, a, {})),
        "math.prod": Native("prod", lambda i, a, k: plain_call(i, math.prod, [i.iterate(a[0], None, 0)], {})),
    }


def collections_attrs(host: Host) -> dict[str, Any]:
    return {
        "collections.OrderedDict": Native("OrderedDict", dict_),
        "collections.defaultdict": Native("defaultdict", lambda i, a, k: DefaultDict(i, a[0] if a else None, a[1] if len(a) > 1 else {})),
        "collections.namedtuple": Native("namedtuple", lambda i, a, k: Unknown("namedtuple class")),
    }


def itertools_attrs(host: Host) -> dict[str, Any]:
    return {"itertools.chain": Native("chain", lambda i, a, k: [x for it in a for x in i.iterate(it, None, 0)])}


def warnings_attrs(host: Host) -> dict[str, Any]:
    return {
        "warnings.warn": Native("warnings.warn", lambda i, a, k: None),
        "warnings.filterwarnings": Native("filterwarnings", lambda i, a, k: None),
    }


def logging_attrs(host: Host) -> dict[str, Any]:
    return {
        "logging.Logger.propagate": True,
        "logging.Logger.level": 20,
        "logging.DEBUG": 10,
        "logging.INFO": 20,
        "logging.WARNING": 30,
        "logging.ERROR": 40,
        "logging.CRITICAL": 50,
        "logging.getLogger": Native("getLogger", lambda i, a, k: External("logging.Logger")),
    }


def sys_attrs(host: Host) -> dict[str, Any]:
    return {
        "sys.platform": "linux",
        "sys.version_info": (3, 11, 7),
        "sys.maxsize": sys.maxsize,
    }


def os_attrs(host: Host) -> dict[str, Any]:
    return {
        "os.sep": "/",
        "os.name": "posix",
        "os.fspath": Native("fspath", lambda i, a, k: path_text(i, a[0])),
        "os.getenv": Native("os.getenv", lambda i, a, k: i.environ.values.get(a[0], a[1] if len(a) > 1 else k.get("default"))),
    }


def contextlib_attrs(host: Host) -> dict[str, Any]:
    return {"contextlib.contextmanager": Native("contextmanager", _contextmanager)}


def _contextmanager(interp: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``@contextlib.contextmanager``: a function whose calls are generator contexts
    (``Interpreter.with_items`` runs the body to its yield and on from there)."""
    from sglang_audit.evaluate.interpreter import GeneratorContext

    func = args[0] if args else None
    if not isinstance(func, Function):
        return Unknown("context manager")
    # a function: bound as a method where a class holds it (`@contextmanager def override(self)`)
    return Native(f"contextmanager({func.qualname})", lambda i, a, k: GeneratorContext(func, list(a), dict(k)), bind_self=True)


def pkgutil_attrs(host: Host) -> dict[str, Any]:
    return {"pkgutil.iter_modules": Native("iter_modules", _iter_modules)}


def _iter_modules(interp: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``pkgutil.iter_modules(path, prefix)`` over an analysed package's ``__path__``: the
    modules its source directory holds (``Interpreter.package_modules``), each name once, in
    order, as ``(finder, prefix + name, ispkg)``; the finder is not modelled. Any other path
    (None: every top-level module of the interpreter's sys.path) is unknown."""
    path = args[0] if args else kwargs.get("path")
    prefix = args[1] if len(args) > 1 else kwargs.get("prefix", "")
    if not isinstance(path, (list, tuple)) or not isinstance(prefix, str):
        return Unknown("pkgutil.iter_modules over a path that is not an analysed package's __path__")
    seen: set[str] = set()
    out: list[tuple[Any, str, bool]] = []
    for entry in path:
        listed = interp.package_modules(entry)
        if listed is None:
            return Unknown(f"pkgutil.iter_modules over {entry!r}, outside the analysed source tree")
        for name, is_pkg in listed:
            if name not in seen:
                seen.add(name)
                out.append((Unknown("pkgutil's module finder (not modelled)"), prefix + name, is_pkg))
    return out


def importlib_attrs(host: Host) -> dict[str, Any]:
    return {
        "importlib.import_module": Native("import_module", lambda i, a, k: i.load_module(a[0]) if isinstance(a[0], str) else Unknown("import_module of an unknown name")),
        "importlib.metadata.PackageNotFoundError": host.exception_classes["PackageNotFoundError"],
    }


def packaging_attrs(host: Host) -> dict[str, Any]:
    return {
        "packaging.version.parse": Native("version.parse", _version_parse),
        "packaging.version.Version": Native("Version", _version_parse),
    }


def dynamic_value(interp: Interpreter, path: str) -> Any:
    """Mutable module attributes, made per read (per interpreter), or MISSING."""
    if path == "os.environ":
        return interp.environ
    if path == "logging.Logger.handlers":
        return []
    if path == "sys.argv":
        return []
    if path == "sys.modules":
        return {}
    return MISSING


def call_logger(interp: Interpreter, path: str, args: list[Any]) -> Any:
    """A ``logging.Logger`` method: the message is recorded as evidence, never acted on."""
    level = path.rsplit(".", 1)[1]
    # the logging call's site, read before the message is rendered: a __str__ it runs makes
    # calls of its own, and the last call's site would be one of them
    file, line = getattr(interp, "_call_site", ("?", 0))
    if args:
        msg = interp.to_str(args[0]) if not isinstance(args[0], Unknown) else "<?>"
        if len(args) > 1 and "%" in msg:
            try:
                msg = msg % tuple(interp.to_str(a) for a in args[1:])
            except (TypeError, ValueError):
                pass
        from sglang_audit.evaluate.interpreter import LogRecord

        interp.logs.append(LogRecord(file, line, level, msg))
    return None if level not in ("isEnabledFor", "getEffectiveLevel") else False


def environ_attr(env: dict[str, str], name: str) -> Any:
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
    return MISSING


def value_attr(interp: Interpreter, obj: Any, name: str) -> Any:
    """Attributes of the stdlib's own value types (os.environ, open files, versions, regex
    matches), or MISSING."""
    if isinstance(obj, Environ):
        return environ_attr(obj.values, name)
    if isinstance(obj, OpenFile):
        if name == "read":
            return Native("read", lambda i, a, k: obj.text)
        if name in ("__enter__",):
            return Native("enter", lambda i, a, k: obj)
    if isinstance(obj, VersionValue):
        if name in ("release", "major", "minor", "micro", "base_version", "public"):
            return getattr(obj.version, name)
    if isinstance(obj, RegexPattern):
        if name in ("match", "fullmatch", "search"):
            return Native(f"Pattern.{name}", lambda i, a, k: regex(i, name, [obj.pattern, *a]) if len(a) == 1 and not k else Unknown(f"Pattern.{name} with a position"))
        if name == "sub":
            return Native("Pattern.sub", lambda i, a, k: _regex_sub(i, [obj.pattern, *a]) if len(a) == 2 and not k else Unknown("Pattern.sub with a count"))
        if name == "pattern":
            return obj.pattern
        return External(f"re.compile().{name}")  # not modelled: an outside object, as before
    if isinstance(obj, RegexMatch):
        if name == "group":
            return Native("group", lambda i, a, k: obj.groups[a[0] if a else 0])
        if name == "groups":
            return Native("groups", lambda i, a, k: tuple(obj.groups[1:]))
    return MISSING


def compare(interp: Interpreter, op: str, left: Any, right: Any) -> Any:
    if isinstance(left, VersionValue) and isinstance(right, VersionValue):
        import operator as _op

        fn = {"<": _op.lt, "<=": _op.le, ">": _op.gt, ">=": _op.ge, "==": _op.eq, "!=": _op.ne}[op]
        return fn(left.version, right.version)
    return MISSING


def value_item(interp: Interpreter, obj: Any, index: Any) -> Any:
    if isinstance(obj, Environ):
        if index in obj.values:
            return obj.values[index]
        raise interp.make_raise("KeyError", index)
    if isinstance(obj, RegexMatch) and isinstance(index, int):
        return obj.groups[index]
    return MISSING
