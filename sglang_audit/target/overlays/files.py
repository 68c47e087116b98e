"""The file system as the analysed code may see it: only the model directories and the source
tree are read (``open``, ``os.path.exists``, ``glob``); anything else is ``Unknown``, never a
guess and never a read of the user's other files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.overlays.common import OpenFile, PathValue
from sglang_audit.evaluate.values import Unknown

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter

MAX_READ = 16 * 1024 * 1024


def inside(roots: list[Path], path: str) -> Path | None:
    """The resolved path when it lies inside one of the roots, else None."""
    try:
        p = Path(path).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    for root in roots:
        if p == root or root in p.parents:
            return p
    return None


def open_file(roots: list[Path], interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    path = args[0] if args else kwargs.get("file")
    path = path.text if isinstance(path, PathValue) else path
    mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
    if not isinstance(path, str) or isinstance(mode, Unknown) or "w" in str(mode) or "a" in str(mode):
        return Unknown("open() outside the model directory")
    found = inside(roots, path)
    if found is None:
        return Unknown(f"open({path!r}) outside the model directory", f"open:{path}")
    if not found.is_file():
        raise interp.make_raise("FileNotFoundError", f"No such file or directory: '{path}'")
    size = found.stat().st_size
    if size > MAX_READ:
        return Unknown(f"{path} is too large to read")
    return OpenFile(found.read_text(encoding="utf-8", errors="replace"))


def glob(roots: list[Path], interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    import glob as _globmod

    pattern = args[0].text if isinstance(args[0], PathValue) else args[0]
    if not isinstance(pattern, str):
        return Unknown("glob of an unknown pattern")
    base = pattern.split("*", 1)[0].split("[", 1)[0].rsplit("/", 1)[0] or "."
    if inside(roots, base) is None:
        return Unknown(f"glob({pattern!r}) outside the model directory", f"glob:{pattern}")
    return sorted(_globmod.glob(pattern))[:10_000]


def path_probe(roots: list[Path], fn_name: str, path: Any) -> Any:
    path = path.text if isinstance(path, PathValue) else path
    if not isinstance(path, str):
        return Unknown(f"os.path.{fn_name} of a non-string")
    found = inside(roots, path)
    if found is None:
        return Unknown(f"os.path.{fn_name}({path!r}): outside the model directory", f"fs:{fn_name}:{path}")
    return {"exists": found.exists, "isfile": found.is_file, "isdir": found.is_dir}[fn_name]()
