"""Helpers every overlay shares: what counts as plain data, calling a CPython function on
plain data only, the world's small value types (paths, open files, versions, regex matches)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.values import NOT_HANDLED, Native, Unknown

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter

MISSING = NOT_HANDLED  # an overlay's answer for "not mine": the next one (or the interpreter) decides

# element types a set() can take as they are (no unknowns, no str-mixin enum members)
PLAIN_ELEMENTS = frozenset({str, int, float, bool, type(None), tuple, frozenset, bytes})

BUILTIN_TYPES: dict[str, type] = {
    "str": str, "int": int, "float": float, "bool": bool, "list": list, "tuple": tuple,
    "dict": dict, "set": set, "frozenset": frozenset, "bytes": bytes, "complex": complex,
    "NoneType": type(None),
}
NONE_TYPE_NATIVE = Native("NoneType", lambda i, a, k: None)  # type(None); not a builtin name


def plain(value: Any) -> bool:
    return isinstance(value, (type(None), bool, int, float, str, bytes, tuple, list, dict, set, frozenset, range))


def plain_deep(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(plain_deep(v) for v in value)
    if isinstance(value, dict):
        return all(plain_deep(k) and plain_deep(v) for k, v in value.items())
    return isinstance(value, (type(None), bool, int, float, str))


def plain_call(interp: Interpreter, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` run by CPython when every argument is plain data."""
    args = [interp.plain_of(a) for a in args]
    for a in [*args, *kwargs.values()]:
        if isinstance(a, Unknown):
            return a
    if all(plain(a) for a in args) and all(plain(v) for v in kwargs.values()):
        return interp.data_op(lambda: fn(*args, **kwargs))
    return Unknown(f"{getattr(fn, '__name__', fn)}() of non-data values")


def posix_join(*parts: str) -> str:
    out = ""
    for p in parts:
        if p.startswith("/"):
            out = p
        elif not out or out.endswith("/"):
            out += p
        else:
            out += "/" + p
    return out


def path_text(interp: Any, value: Any) -> Any:
    return value.text if isinstance(value, PathValue) else value


def splitext(p: str) -> tuple[str, str]:
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

    def __lt__(self, other: object) -> bool:
        # pathlib orders paths by their parts (sorted(Path(d).glob(...)))
        if not isinstance(other, PathValue):
            return NotImplemented
        return self.text.split("/") < other.text.split("/")


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


class RegexPattern:
    """``re.compile(pattern)`` (no flags): its methods run the module functions' guard."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern


class Environ:
    """``os.environ``: the user's ``--env`` values (the host world fills it), mutable by the
    analysed code."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
