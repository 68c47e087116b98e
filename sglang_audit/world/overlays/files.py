"""The file system as the analysed code may see it: only the model directories and the source
tree are read (``open``, ``os.path.exists``, ``glob``); anything else is ``Unknown``, never a
guess and never a read of the user's other files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.overlays.common import OpenFile, PathValue
from sglang_audit.evaluate.values import Unknown
from sglang_audit.inputs.checkpoint import (
    CheckpointError,
    SafetensorsHeader,
    read_header_raw,
)
from sglang_audit.inputs.modeldir import model_checkpoint
from sglang_audit.world.overlays.checkpoint import NEEDS, BinaryFile

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
    if "b" in str(mode):
        return open_binary(roots, interp, path)
    found = inside(roots, path)
    if found is None:
        return Unknown(f"open({path!r}) outside the model directory", f"open:{path}")
    if not found.is_file():
        raise interp.make_raise("FileNotFoundError", f"No such file or directory: '{path}'")
    size = found.stat().st_size
    if size > MAX_READ:
        return Unknown(f"{path} is too large to read")
    return OpenFile(found.read_text(encoding="utf-8", errors="replace"))


def _split(roots: list[Path], path: str) -> tuple[Path, str] | None:
    """The root holding ``path`` (links resolved) and the path relative to it."""
    found = inside(roots, path)
    if found is None:
        return None
    for root in roots:
        if found == root or root in found.parents:
            return root, found.relative_to(root).as_posix()
    return None


def checkpoint_header(model_dirs: list[Path], path: str) -> SafetensorsHeader | Unknown:
    """The header of the safetensors file ``path`` inside a model directory, or Unknown
    with the reason (outside, absent, refused by the reader)."""
    where = _split(model_dirs, path)
    if where is None:
        return Unknown(f"{path}: {NEEDS} (outside the model directory)")
    root, rel = where
    if not (root / rel).exists():
        return Unknown(f"{path}: {NEEDS} ({rel} is not in the model directory)")
    try:
        return model_checkpoint(root).header(rel)
    except CheckpointError as exc:
        return Unknown(f"{path}: {NEEDS} ({exc})")


def open_binary(roots: list[Path], interp: Interpreter, path: str) -> Any:
    """``open(path, "rb")``: a safetensors file inside a model directory reads as its length
    prefix and header (tensor data unknown); another small file inside the roots as its
    bytes; anything else Unknown."""
    where = _split(roots, path)
    if where is None:
        reason = f"open({path!r}, 'rb') outside the model directory"
        return Unknown(f"{reason}: {NEEDS}" if path.endswith(".safetensors") else reason, f"open:{path}")
    root, rel = where
    found = root / rel
    if path.endswith(".safetensors"):
        if not found.exists():
            return Unknown(f"{path}: {NEEDS} ({rel} is not in the model directory)")
        try:
            _header, data = read_header_raw(root, rel)
        except CheckpointError as exc:
            return Unknown(f"{path}: {NEEDS} ({exc})")
        return BinaryFile(rel, data, f"a read of tensor data of {rel} (the tool reads only safetensors headers)")
    if not found.is_file():
        raise interp.make_raise("FileNotFoundError", f"No such file or directory: '{path}'")
    if found.stat().st_size > MAX_READ:
        return Unknown(f"{path} is too large to read")
    return BinaryFile(rel, found.read_bytes(), "")


def glob(roots: list[Path], interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    import glob as _globmod

    pattern = args[0].text if isinstance(args[0], PathValue) else args[0]
    if not isinstance(pattern, str):
        return Unknown("glob of an unknown pattern")
    base = pattern.split("*", 1)[0].split("[", 1)[0].rsplit("/", 1)[0] or "."
    if inside(roots, base) is None:
        return Unknown(f"glob({pattern!r}) outside the model directory", f"glob:{pattern}")
    return sorted(_globmod.glob(pattern))[:10_000]


def path_glob(roots: list[Path], model_dirs: list[Path], interp: Interpreter, pattern: str) -> Any:
    """``Path(d).glob(pattern)``: as ``glob.glob``, except that a pattern for checkpoint files
    (``*.safetensors``) in a model directory holding none (a profile shipping config.json
    alone) is Unknown: the deployment's directory has them, this one does not say what.
    (``glob.glob`` still answers from the directory as it is: 0.5.2x asks it of every model
    for ``consolidated*.safetensors``.)"""
    if pattern.endswith(".safetensors"):
        base = pattern.rsplit("/", 1)[0] if "/" in pattern else "."
        where = _split(model_dirs, base)
        if where is not None and not _has_checkpoint(where[0]):
            return Unknown(f"Path({base!r}).glob({pattern.rsplit('/', 1)[-1]!r}): {NEEDS} "
                           f"(the model directory {where[0].name} holds no safetensors files)")
    found = glob(roots, interp, [pattern], {})
    return found


def _has_checkpoint(model_dir: Path) -> bool:
    try:
        return any(p.name.endswith((".safetensors", ".safetensors.index.json")) for p in model_dir.iterdir())
    except OSError:
        return False


def path_probe(roots: list[Path], fn_name: str, path: Any) -> Any:
    path = path.text if isinstance(path, PathValue) else path
    if not isinstance(path, str):
        return Unknown(f"os.path.{fn_name} of a non-string")
    found = inside(roots, path)
    if found is None:
        return Unknown(f"os.path.{fn_name}({path!r}): outside the model directory", f"fs:{fn_name}:{path}")
    return {"exists": found.exists, "isfile": found.is_file, "isdir": found.is_dir}[fn_name]()
