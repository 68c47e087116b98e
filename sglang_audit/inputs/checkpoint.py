"""A model checkpoint's layout as its headers describe it, never its tensor data.

SGLang reads a checkpoint on disk to decide some settings (DeepSeek-V4's routed-expert
precision is the dtype of one expert weight in a safetensors header). This module reads,
for a local model directory, ``model.safetensors.index.json`` (its ``weight_map``) and each
safetensors file's header only: the first 8 bytes, a little-endian u64 length, then that
many bytes of JSON (``{name: {dtype, shape, data_offsets}, "__metadata__": {...}}``).

Bounded and confined: a header over ``MAX_HEADER`` bytes or beyond the file's end, an
index over ``MAX_INDEX`` bytes, more than ``MAX_FILES`` files, a name that is absolute,
holds ``..`` or resolves (links followed) outside the model directory, anything but a
regular file: each is a one-line ``CheckpointError`` (``read_header``, ``read_index``) or a
``NotRead`` with the reason (``read_checkpoint``), never a read outside the directory or of
tensor data. Files are opened non-blocking and checked to be regular after opening (a FIFO
named ``*.safetensors`` does not hang the reader).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

INDEX_NAME = "model.safetensors.index.json"
MAX_HEADER = 100 * 1024 * 1024  # safetensors itself refuses headers over 100 MB
MAX_INDEX = 64 * 1024 * 1024
MAX_FILES = 4096
PREFIX = 8  # the u64 header length


class CheckpointError(ValueError):
    """A checkpoint file the reader refuses; the message is one line naming the file."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # as the header spells it: "F8_E4M3", "U8", "BF16", ...
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]  # relative to the end of the header, as in the file
    file: str  # the file holding it, relative to the model directory


@dataclass(frozen=True)
class SafetensorsHeader:
    file: str  # relative to the model directory
    header_length: int  # the u64 prefix: the JSON's length in bytes
    tensors: tuple[TensorInfo, ...]  # in the header's order
    metadata: tuple[tuple[str, str], ...]  # ``__metadata__``

    def tensor(self, name: str) -> TensorInfo | None:
        for info in self.tensors:
            if info.name == name:
                return info
        return None

    def names(self) -> list[str]:
        return [t.name for t in self.tensors]


@dataclass(frozen=True)
class CheckpointIndex:
    weight_map: tuple[tuple[str, str], ...]  # tensor name -> file, in the index's order
    metadata: tuple[tuple[str, object], ...]

    def files(self) -> list[str]:
        return sorted({f for _, f in self.weight_map})

    def file_of(self, name: str) -> str | None:
        for tensor, file in self.weight_map:
            if tensor == name:
                return file
        return None


@dataclass(frozen=True)
class Checkpoint:
    directory: str
    index: CheckpointIndex | None  # None: no index, the ``*.safetensors`` files listed
    headers: tuple[SafetensorsHeader, ...]

    def tensor(self, name: str) -> TensorInfo | None:
        for header in self.headers:
            found = header.tensor(name)
            if found is not None:
                return found
        return None


@dataclass(frozen=True)
class NotRead:
    """The checkpoint's layout is unknown; ``reason`` says why (one line)."""

    reason: str


def contained(model_dir: Path, name: str) -> Path:
    """The file ``name`` (relative, as an index names it) inside ``model_dir``, links
    resolved; a CheckpointError when it is absolute, climbs with ``..`` or lands outside."""
    if not isinstance(name, str) or not name or "\0" in name or "\\" in name:
        raise CheckpointError(f"refusing checkpoint file name {name!r}: not a plain relative name")
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts:
        raise CheckpointError(f"refusing checkpoint file name {name!r}: outside the model directory")
    root = model_dir.resolve()
    try:
        found = (root / pure).resolve()
    except (OSError, RuntimeError) as exc:
        raise CheckpointError(f"cannot resolve checkpoint file {name!r}: {exc}") from None
    if found != root and root not in found.parents:
        raise CheckpointError(f"refusing checkpoint file {name!r}: it resolves outside the model directory")
    return found


@contextmanager
def _open_regular(path: Path, shown: str) -> Iterator[tuple[BinaryIO, int]]:
    """The regular file ``path`` opened for binary reading, and its size (non-blocking open,
    checked after opening: a FIFO or device is refused, never waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {shown} is missing") from None
    except OSError as exc:
        raise CheckpointError(f"cannot open checkpoint file {shown}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"checkpoint file {shown} is not a regular file")
        yield fh, st.st_size


def _read_prefix(path: Path, shown: str, limit: int) -> tuple[bytes, int]:
    """Up to ``limit`` bytes from the start of the regular file ``path``, and its size."""
    with _open_regular(path, shown) as (fh, size):
        return fh.read(min(limit, size)), size


def read_header(model_dir: Path, name: str, max_header: int = MAX_HEADER) -> SafetensorsHeader:
    """The header of the safetensors file ``name`` inside ``model_dir``."""
    return read_header_raw(model_dir, name, max_header)[0]


def read_header_raw(model_dir: Path, name: str, max_header: int = MAX_HEADER) -> tuple[SafetensorsHeader, bytes]:
    """The header of the safetensors file ``name`` inside ``model_dir``, and the file's bytes
    it was read from (the length prefix and the header: nothing of the tensor data)."""
    path = contained(model_dir, name)
    with _open_regular(path, name) as (fh, size):
        prefix = fh.read(PREFIX)
        if len(prefix) < PREFIX:
            raise CheckpointError(f"{name}: {len(prefix)} bytes, too short for a safetensors header length")
        (length,) = struct.unpack("<Q", prefix)
        if length > max_header:
            raise CheckpointError(f"{name}: header length {length} bytes is over the {max_header}-byte limit")
        if length > size - PREFIX:
            raise CheckpointError(f"{name}: header length {length} bytes runs beyond the file's {size} bytes")
        raw = fh.read(length)
    if len(raw) < length:
        raise CheckpointError(f"{name}: the file ended inside its header")
    data_size = size - PREFIX - length
    return _parse_header(name, length, raw, data_size), prefix + raw


def _parse_header(name: str, length: int, raw: bytes, data_size: int) -> SafetensorsHeader:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(f"{name}: header is not JSON ({first})") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{name}: header is a JSON {type(doc).__name__}, not an object")
    tensors: list[TensorInfo] = []
    metadata: tuple[tuple[str, str], ...] = ()
    for key, entry in doc.items():
        if key == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise CheckpointError(f"{name}: __metadata__ is not an object of strings")
            metadata = tuple(entry.items())
            continue
        if not isinstance(entry, dict):
            raise CheckpointError(f"{name}: tensor {key!r} is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str):
            raise CheckpointError(f"{name}: tensor {key!r} has no dtype string")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise CheckpointError(f"{name}: tensor {key!r} has no shape of non-negative integers")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= data_size):
            raise CheckpointError(f"{name}: tensor {key!r} has data_offsets outside the file's {data_size} data bytes")
        tensors.append(TensorInfo(key, dtype, tuple(shape), (offsets[0], offsets[1]), name))
    return SafetensorsHeader(name, length, tuple(tensors), metadata)


def read_index(model_dir: Path, name: str = INDEX_NAME) -> CheckpointIndex | None:
    """``model.safetensors.index.json`` of ``model_dir``; None when it has none."""
    path = contained(model_dir, name)
    if not path.exists():
        return None
    raw, size = _read_prefix(path, name, MAX_INDEX + 1)
    if size > MAX_INDEX:
        raise CheckpointError(f"{name}: {size} bytes is over the {MAX_INDEX}-byte limit for an index")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(f"{name}: not JSON ({first})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("weight_map"), dict):
        raise CheckpointError(f"{name}: no weight_map object")
    weight_map = doc["weight_map"]
    for tensor, file in weight_map.items():
        if not isinstance(file, str):
            raise CheckpointError(f"{name}: weight_map[{tensor!r}] is not a file name")
    metadata = doc.get("metadata")
    return CheckpointIndex(tuple(weight_map.items()),
                           tuple(metadata.items()) if isinstance(metadata, dict) else ())


def read_checkpoint(model_dir: Path, max_files: int = MAX_FILES) -> Checkpoint | NotRead:
    """The index (if any) and every safetensors header of a local model directory."""
    if not model_dir.is_dir():
        return NotRead(f"{model_dir} is not a local model directory")
    try:
        index = read_index(model_dir)
        if index is not None:
            names = index.files()
            for file in names:
                contained(model_dir, file)  # every name the index gives, before any read
        else:
            names = sorted(p.name for p in model_dir.iterdir() if p.name.endswith(".safetensors"))
        if not names:
            return NotRead(f"no safetensors files in {model_dir}")
        if len(names) > max_files:
            return NotRead(f"{len(names)} safetensors files, over the limit of {max_files}")
        headers = tuple(read_header(model_dir, n) for n in names)
    except CheckpointError as exc:
        return NotRead(str(exc))
    return Checkpoint(str(model_dir), index, headers)


def header_digest(path: str, max_header: int = MAX_HEADER) -> str:
    """The sha256 of a safetensors file's prefix and header bytes (what the reader may see of
    it), or a one-line reason when it has no readable header: for cache keys."""
    try:
        raw, _size = _read_prefix(Path(path), path, PREFIX)
        if len(raw) < PREFIX:
            return "short"
        (length,) = struct.unpack("<Q", raw)
        if length > max_header:
            return f"header-too-large:{length}"
        head, _size = _read_prefix(Path(path), path, PREFIX + length)
    except CheckpointError as exc:
        return f"error:{exc}"
    return hashlib.sha256(head).hexdigest()
