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


# The DeepSeek-V4-style fixture (tests/data/models/deepseek-v4-mxfp4): the routed experts'
# precision shows only in the expert weights' safetensors dtype ("U8": MXFP4 packed two per
# byte, with F8_E8M0 block scales; "F8_E4M3": converted FP8 with F32 block scales).
DSV4_EXPERT = "layers.1.ffn.experts.0.w1.weight"


def dsv4_shards(expert_dtype: str = "U8") -> dict[str, dict[str, tuple[str, list[int]]]]:
    packed = expert_dtype in ("U8", "I8")
    experts: dict[str, tuple[str, list[int]]] = {}
    for e in range(2):
        for w, shape in (("w1", [2048, 4096]), ("w2", [4096, 2048]), ("w3", [2048, 4096])):
            cols = shape[1] // 2 if packed else shape[1]
            experts[f"layers.1.ffn.experts.{e}.{w}.weight"] = (expert_dtype, [shape[0], cols])
            experts[f"layers.1.ffn.experts.{e}.{w}.scale"] = (
                ("F8_E8M0", [shape[0], shape[1] // 32]) if packed else ("F32", [shape[0] // 128, shape[1] // 128]))
    return {
        "model-00001-of-00002.safetensors": {
            "embed.weight": ("BF16", [129280, 4096]),
            "layers.0.attn.wq_a.weight": ("F8_E4M3", [1024, 4096]),
            "layers.0.attn.wq_a.scale": ("F32", [8, 32]),
        },
        "model-00002-of-00002.safetensors": {
            "layers.1.ffn.gate.weight": ("BF16", [256, 4096]),
            **experts,
        },
    }
