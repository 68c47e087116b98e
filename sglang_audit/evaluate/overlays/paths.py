"""``os.path``, ``pathlib.Path`` and ``glob``: path arithmetic as POSIX strings; every probe
of the file system (exists, open, glob) is asked of the host, which answers only inside the
model directories and the source tree."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.overlays.common import (
    MISSING,
    OpenFile,
    PathValue,
    path_text,
    plain_call,
    posix_join,
    splitext,
)
from sglang_audit.evaluate.values import Native, Unknown

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.evaluate.overlays.host import Host


def os_path_attrs(host: Host) -> dict[str, Any]:
    return {
        "os.path.join": Native("os.path.join", lambda i, a, k: plain_call(i, posix_join, a, {})),
        "os.path.basename": Native("os.path.basename", lambda i, a, k: plain_call(i, lambda p: p.rsplit("/", 1)[-1], a, {})),
        "os.path.dirname": Native("os.path.dirname", lambda i, a, k: plain_call(i, lambda p: p.rsplit("/", 1)[0] if "/" in p else "", a, {})),
        "os.path.splitext": Native("os.path.splitext", lambda i, a, k: plain_call(i, splitext, a, {})),
        "os.path.isabs": Native("os.path.isabs", lambda i, a, k: plain_call(i, lambda p: p.startswith("/"), a, {})),
        "os.path.abspath": Native("os.path.abspath", lambda i, a, k: a[0]),
        "os.path.expanduser": Native("os.path.expanduser", lambda i, a, k: a[0]),
        "os.path.normpath": Native("os.path.normpath", lambda i, a, k: a[0]),
        "os.path.realpath": Native("os.path.realpath", lambda i, a, k: a[0]),
        "os.path.exists": Native("os.path.exists", lambda i, a, k: host.path_probe(i, "exists", a[0])),
        "os.path.isfile": Native("os.path.isfile", lambda i, a, k: host.path_probe(i, "isfile", a[0])),
        "os.path.isdir": Native("os.path.isdir", lambda i, a, k: host.path_probe(i, "isdir", a[0])),
    }


def pathlib_attrs(host: Host) -> dict[str, Any]:
    return {
        "pathlib.Path": Native("Path", lambda i, a, k: PathValue(posix_join(*[path_text(i, x) for x in a]) if a else ".") if all(isinstance(x, (str, PathValue)) for x in a) else Unknown("Path of an unknown")),
    }


def glob_attrs(host: Host) -> dict[str, Any]:
    return {"glob.glob": Native("glob.glob", host.glob)}


def path_attr(host: Host, interp: Interpreter, obj: PathValue, name: str) -> Any:
    text = obj.text
    if name == "parent":
        return PathValue(text.rsplit("/", 1)[0] if "/" in text.rstrip("/") else ".")
    if name == "name":
        return text.rstrip("/").rsplit("/", 1)[-1]
    if name == "suffix":
        return splitext(text)[1]
    if name == "stem":
        return splitext(text.rsplit("/", 1)[-1])[0]
    if name in ("exists", "is_file", "is_dir"):
        probe = {"exists": "exists", "is_file": "isfile", "is_dir": "isdir"}[name]
        return Native(f"Path.{name}", lambda i, a, k: host.path_probe(i, probe, text))
    if name in ("resolve", "absolute", "expanduser"):
        return Native(f"Path.{name}", lambda i, a, k: obj)
    if name == "glob":
        def glob(i: Interpreter, a: list[Any], k: dict[str, Any]) -> Any:
            pattern = a[0] if a else k.get("pattern")
            if not isinstance(pattern, str) or pattern.startswith("/") or "**" in pattern:
                return Unknown("Path.glob of a pattern the tool does not follow")
            found = host.path_glob(i, posix_join(text, pattern))
            return found if isinstance(found, Unknown) else [PathValue(p) for p in found]
        return Native("Path.glob", glob)
    if name == "joinpath":
        return Native("Path.joinpath", lambda i, a, k: PathValue(posix_join(text, *[path_text(i, x) for x in a])))
    if name == "read_text":
        def read(i: Interpreter, a: list[Any], k: dict[str, Any]) -> Any:
            f = host.open(i, [text], {})
            return f.text if isinstance(f, OpenFile) else f
        return Native("Path.read_text", read)
    if name == "as_posix":
        return Native("Path.as_posix", lambda i, a, k: text)
    return Unknown(f"Path.{name}")


def binop(interp: Interpreter, op: str, left: Any, right: Any) -> Any:
    if op == "/" and isinstance(left, PathValue) and isinstance(right, (str, PathValue)):
        return PathValue(posix_join(left.text, path_text(interp, right)))
    if op == "/" and isinstance(left, str) and isinstance(right, PathValue):
        return PathValue(posix_join(left, right.text))
    return MISSING


def to_str(value: Any) -> str | None:
    if isinstance(value, PathValue):
        return value.text
    return None
