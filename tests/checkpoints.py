"""Writing header-only safetensors checkpoints for tests (no tensor data unless asked)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

# bytes per element of the dtypes the tests use (safetensors' spelling)
ELEMENT_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1, "I8": 1, "I32": 4}


def header_bytes(tensors: dict[str, tuple[str, list[int]]], metadata: dict[str, str] | None = None,
                 data: bool = False) -> tuple[bytes, int]:
    """The header JSON of ``tensors`` (name -> (dtype, shape)) and the data size it
    describes: each tensor's real byte size when ``data``, else zero-length (every
    ``data_offsets`` is [0, 0])."""
    doc: dict[str, Any] = {}
    if metadata is not None:
        doc["__metadata__"] = metadata
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = 0
        if data:
            size = ELEMENT_BYTES[dtype]
            for d in shape:
                size *= d
        doc[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    return json.dumps(doc).encode(), offset


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]], metadata: dict[str, str] | None = None,
                      data: bool = False) -> Path:
    raw, size = header_bytes(tensors, metadata, data)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * size)
    return path


def write_index(model_dir: Path, weight_map: dict[str, str], name: str = "model.safetensors.index.json") -> Path:
    path = model_dir / name
    path.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return path


def write_sharded(model_dir: Path, shards: dict[str, dict[str, tuple[str, list[int]]]]) -> None:
    """Shards (file name -> tensors) and the index mapping each tensor to its shard."""
    model_dir.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    for file, tensors in shards.items():
        write_safetensors(model_dir / file, tensors)
        weight_map.update(dict.fromkeys(tensors, file))
    write_index(model_dir, weight_map)

