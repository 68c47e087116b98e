"""inputs/checkpoint.py: the bounded safetensors header reader (issue 41)."""

from __future__ import annotations

import json
import os
import struct
import threading

import pytest
from checkpoints import write_index, write_safetensors, write_sharded

from sglang_audit.inputs.checkpoint import (
    MAX_HEADER,
    Checkpoint,
    CheckpointError,
    NotRead,
    header_digest,
    read_checkpoint,
    read_header,
    read_index,
)

EXPERT = "model.layers.1.mlp.experts.0.w1.weight"


def test_a_sharded_checkpoint_reads_as_its_index_and_headers(tmp_path):
    write_sharded(tmp_path, {
        "model-00001-of-00002.safetensors": {"model.embed_tokens.weight": ("BF16", [129280, 4096])},
        "model-00002-of-00002.safetensors": {EXPERT: ("U8", [2048, 2048]), "model.layers.1.mlp.experts.0.w1.scale": ("F8_E8M0", [2048, 128])},
    })
    found = read_checkpoint(tmp_path)
    assert isinstance(found, Checkpoint)
    assert found.index is not None and found.index.file_of(EXPERT) == "model-00002-of-00002.safetensors"
    assert [h.file for h in found.headers] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    info = found.tensor(EXPERT)
    assert info is not None and (info.dtype, info.shape, info.file) == ("U8", (2048, 2048), "model-00002-of-00002.safetensors")
    assert found.tensor("model.embed_tokens.weight").shape == (129280, 4096)


def test_without_an_index_the_safetensors_files_are_listed(tmp_path):
    write_safetensors(tmp_path / "model.safetensors", {"w": ("F8_E4M3", [4, 4])}, metadata={"format": "pt"}, data=True)
    found = read_checkpoint(tmp_path)
    assert isinstance(found, Checkpoint) and found.index is None
    (header,) = found.headers
    assert header.metadata == (("format", "pt"),)
    assert header.tensor("w").data_offsets == (0, 16)


def _raw(tmp_path, payload: bytes, name: str = "model.safetensors"):
    (tmp_path / name).write_bytes(payload)
    return name


def test_a_header_length_beyond_the_file_is_refused(tmp_path):
    name = _raw(tmp_path, struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(CheckpointError, match="header length 1000 bytes runs beyond the file's 10 bytes"):
        read_header(tmp_path, name)


def test_a_10gb_header_claim_is_refused_without_reading_it(tmp_path):
    name = _raw(tmp_path, struct.pack("<Q", 10 * 1024**3) + b"{}")
    with pytest.raises(CheckpointError, match=f"over the {MAX_HEADER}-byte limit"):
        read_header(tmp_path, name)
    assert header_digest(str(tmp_path / name)).startswith("header-too-large:")


@pytest.mark.parametrize("payload, message", [
    (b"not json at all", "header is not JSON"),
    (b"\xff\xfe{}", "header is not JSON"),
    (b"[1, 2, 3]", "header is a JSON list, not an object"),
    (b'"text"', "header is a JSON str, not an object"),
    (b'{"w": 3}', "tensor 'w' is not an object"),
    (b'{"w": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}}', "no shape of non-negative integers"),
    (b'{"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}', "data_offsets outside the file's 0 data bytes"),
    (b'{"__metadata__": {"a": 1}}', "__metadata__ is not an object of strings"),
    (b"[" * 100_000 + b"]" * 100_000, "header is not JSON"),
])
def test_a_malformed_header_is_a_one_line_error(tmp_path, payload, message):
    name = _raw(tmp_path, struct.pack("<Q", len(payload)) + payload)
    with pytest.raises(CheckpointError) as err:
        read_header(tmp_path, name)
    assert message in str(err.value) and "\n" not in str(err.value)
    found = read_checkpoint(tmp_path)
    assert isinstance(found, NotRead) and message in found.reason


@pytest.mark.parametrize("size", [0, 3, 7])
def test_a_truncated_length_prefix_is_refused(tmp_path, size):
    name = _raw(tmp_path, b"\x01" * size)
    with pytest.raises(CheckpointError, match=f"{size} bytes, too short for a safetensors header length"):
        read_header(tmp_path, name)


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "sub/../../outside.safetensors"])
def test_an_index_naming_a_file_outside_the_directory_is_refused(tmp_path, shard):
    model = tmp_path / "model"
    model.mkdir()
    write_safetensors(tmp_path / "outside.safetensors", {EXPERT: ("U8", [2, 2])})
    write_safetensors(model / "inside.safetensors", {"other": ("BF16", [2])})
    write_index(model, {"other": "inside.safetensors", EXPERT: shard})
    found = read_checkpoint(model)
    assert isinstance(found, NotRead)
    assert "outside the model directory" in found.reason and repr(shard) in found.reason
    with pytest.raises(CheckpointError, match="outside the model directory"):
        read_header(model, shard)


def test_a_link_resolving_outside_the_directory_is_refused(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    write_safetensors(tmp_path / "outside.safetensors", {EXPERT: ("U8", [2, 2])})
    (model / "model.safetensors").symlink_to(tmp_path / "outside.safetensors")
    found = read_checkpoint(model)
    assert isinstance(found, NotRead) and "resolves outside the model directory" in found.reason


def test_a_link_inside_the_directory_is_followed(tmp_path):
    write_safetensors(tmp_path / "blob", {EXPERT: ("U8", [2, 2])})
    (tmp_path / "model.safetensors").symlink_to("blob")
    assert read_header(tmp_path, "model.safetensors").tensor(EXPERT).dtype == "U8"


def test_a_missing_shard_is_named(tmp_path):
    write_safetensors(tmp_path / "a.safetensors", {"x": ("BF16", [2])})
    write_index(tmp_path, {"x": "a.safetensors", EXPERT: "b.safetensors"})
    found = read_checkpoint(tmp_path)
    assert isinstance(found, NotRead) and found.reason == "checkpoint file b.safetensors is missing"


@pytest.mark.parametrize("text, message", [
    ("{", "not JSON"),
    ('{"weight_map": []}', "no weight_map object"),
    ('{"weight_map": {"x": 3}}', "weight_map['x'] is not a file name"),
])
def test_a_malformed_index_is_a_one_line_error(tmp_path, text, message):
    (tmp_path / "model.safetensors.index.json").write_text(text)
    with pytest.raises(CheckpointError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_index(tmp_path)


def test_too_many_files_is_unknown_with_the_count(tmp_path):
    for k in range(3):
        write_safetensors(tmp_path / f"m{k}.safetensors", {f"t{k}": ("BF16", [1])})
    found = read_checkpoint(tmp_path, max_files=2)
    assert isinstance(found, NotRead) and found.reason == "3 safetensors files, over the limit of 2"


def test_no_checkpoint_is_unknown_with_the_reason(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({}))
    assert read_checkpoint(tmp_path) == NotRead(f"no safetensors files in {tmp_path}")
    assert isinstance(read_checkpoint(tmp_path / "nope"), NotRead)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_like_a_shard_does_not_hang_the_reader(tmp_path):
    os.mkfifo(tmp_path / "model.safetensors")
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(read_checkpoint(tmp_path)), daemon=True)
    worker.start()
    worker.join(10)
    assert result and isinstance(result[0], NotRead) and "is not a regular file" in result[0].reason
