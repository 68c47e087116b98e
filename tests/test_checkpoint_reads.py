"""The analysed code's reads of a checkpoint, answered from its headers (issue 41 step 2):
``safetensors.safe_open``, a binary ``open()`` of a shard, ``struct.unpack``, ``Path.glob``,
inside the model directory only; tensor values stay unknown with the reason."""

from __future__ import annotations

import json

import pytest
from checkpoints import write_safetensors, write_sharded

from sglang_audit.resolve.adhoc import evaluate_function

NEEDS = "needs the checkpoint's index/headers"
EXPERT = "model.layers.3.ffn.experts.7.w2.weight"
SCALE = "model.layers.3.ffn.experts.7.w2.scale"


@pytest.fixture()
def model(tmp_path):
    d = tmp_path / "model"
    write_sharded(d, {
        "model-00001-of-00002.safetensors": {"embed.weight": ("BF16", [1024, 64])},
        "model-00002-of-00002.safetensors": {EXPERT: ("U8", [64, 128]), SCALE: ("F8_E8M0", [64, 8])},
    })
    (d / "config.json").write_text(json.dumps({"model_type": "x"}))
    return d


def _call(source: str, model_dirs, *args):
    return evaluate_function(source, "f", list(args), model_dirs=model_dirs)


SAFE_OPEN_WITH = """
import os
from safetensors import safe_open

def f(model_dir):
    path = os.path.join(model_dir, "model-00002-of-00002.safetensors")
    with safe_open(path, framework="pt", device="cpu") as fh:
        names = fh.keys()
        sl = fh.get_slice(names[0])
        t = fh.get_tensor(names[1])
        return names, fh.metadata(), sl.get_dtype(), sl.get_shape(), t.shape, t.size(0), t.ndim
"""


def test_safe_open_as_a_context_manager_answers_from_the_header(model):
    out = _call(SAFE_OPEN_WITH, [model], str(model))
    assert out.kind == "value", out
    # safetensors' keys() are sorted
    assert out.value == ([SCALE, EXPERT], None, "F8_E8M0", [64, 8], (64, 128), 64, 2)


SAFE_OPEN_PLAIN = """
import torch
import safetensors

def f(path, name):
    fh = safetensors.safe_open(path, framework="pt")
    t = fh.get_tensor(name)
    return t.dtype == torch.uint8, t.dtype == torch.float8_e4m3fn
"""


def test_safe_open_plain_and_a_tensors_dtype_as_torch_names_it(model):
    out = _call(SAFE_OPEN_PLAIN, [model], str(model / "model-00002-of-00002.safetensors"), EXPERT)
    assert out.kind == "value", out
    assert out.value == (True, False)


def test_metadata_is_the_headers_own(tmp_path):
    write_safetensors(tmp_path / "model.safetensors", {"w": ("BF16", [2])}, metadata={"format": "pt"})
    src = "from safetensors.torch import safe_open\ndef f(p):\n    with safe_open(p, 'pt') as fh:\n        return fh.metadata()\n"
    out = _call(src, [tmp_path], str(tmp_path / "model.safetensors"))
    assert out.kind == "value" and out.value == {"format": "pt"}


@pytest.mark.parametrize("expr", ["t[0]", "t.sum()", "t.float().max().item()"])
def test_a_tensors_values_stay_unknown_with_the_reason(model, expr):
    src = f"from safetensors import safe_open\ndef f(p, n):\n    t = safe_open(p, 'pt').get_tensor(n)\n    return {expr}\n"
    out = _call(src, [model], str(model / "model-00002-of-00002.safetensors"), EXPERT)
    assert out.kind == "unknown"
    assert f"the values of tensor {EXPERT} in model-00002-of-00002.safetensors are not read" in out.message


def test_a_tensor_the_file_lacks_raises_as_safetensors_does(model):
    src = "from safetensors import safe_open\ndef f(p):\n    return safe_open(p, 'pt').get_tensor('nope')\n"
    out = _call(src, [model], str(model / "model-00002-of-00002.safetensors"))
    assert (out.kind, out.message) == ("raised", "File does not contain tensor nope")


def test_safe_open_outside_the_model_directory_is_unknown(model, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    write_safetensors(other / "x.safetensors", {EXPERT: ("U8", [1])})
    src = "from safetensors import safe_open\ndef f(p):\n    return safe_open(p, 'pt').keys()\n"
    out = _call(src, [model], str(other / "x.safetensors"))
    assert out.kind == "unknown" and NEEDS in out.message and "outside the model directory" in out.message


def test_safe_open_without_the_checkpoint_is_unknown(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    src = "from safetensors import safe_open\ndef f(p):\n    return safe_open(p, 'pt').keys()\n"
    out = _call(src, [tmp_path], str(tmp_path / "model.safetensors"))
    assert out.kind == "unknown" and NEEDS in out.message and "is not in the model directory" in out.message


def test_a_malformed_header_is_unknown_with_the_readers_reason(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x05\0\0\0\0\0\0\0[1,2]")
    src = "from safetensors import safe_open\ndef f(p):\n    return safe_open(p, 'pt').keys()\n"
    out = _call(src, [tmp_path], str(tmp_path / "model.safetensors"))
    assert out.kind == "unknown" and NEEDS in out.message and "header is a JSON list, not an object" in out.message


# A probe written the way configuration code reads one expert's dtype: the index, then the
# shard's length prefix and header with a binary open (no safetensors import).
RAW_PROBE = """
import json
import os
import re
import struct

PATTERN = re.compile(r"experts\\.\\d+\\.w2\\.weight$")

def f(model_dir):
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as fh:
        weight_map = json.load(fh)["weight_map"]
    name = next(k for k in weight_map if PATTERN.search(k))
    with open(os.path.join(model_dir, weight_map[name]), "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    return header[name]["dtype"], header[name]["shape"]
"""


def test_a_binary_read_of_the_length_prefix_and_header_gives_the_files_bytes(model):
    out = _call(RAW_PROBE, [model], str(model))
    assert out.kind == "value", out
    assert out.value == ("U8", [64, 128])


def test_a_binary_read_reaching_tensor_data_is_unknown(model):
    src = ("import struct\ndef f(p):\n    with open(p, 'rb') as fh:\n        (n,) = struct.unpack('<Q', fh.read(8))\n"
           "        fh.read(n)\n        return fh.read(16)\n")
    out = _call(src, [model], str(model / "model-00002-of-00002.safetensors"))
    assert out.kind == "unknown"
    assert "a read of tensor data of model-00002-of-00002.safetensors (the tool reads only safetensors headers)" in out.message
    whole = "def f(p):\n    return open(p, 'rb').read()\n"
    assert _call(whole, [model], str(model / "model-00002-of-00002.safetensors")).kind == "unknown"


def test_a_binary_read_of_a_missing_shard_is_unknown_not_a_raise(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    src = "def f(p):\n    with open(p, 'rb') as fh:\n        return fh.read(8)\n"
    out = _call(src, [tmp_path], str(tmp_path / "model-00001-of-00002.safetensors"))
    assert out.kind == "unknown" and NEEDS in out.message


def test_a_binary_read_outside_the_model_directory_is_unknown(model, tmp_path):
    write_safetensors(tmp_path / "x.safetensors", {"w": ("U8", [1])})
    src = "def f(p):\n    with open(p, 'rb') as fh:\n        return fh.read(8)\n"
    out = _call(src, [model], str(tmp_path / "x.safetensors"))
    assert out.kind == "unknown" and "outside the model directory" in out.message


def test_struct_unpack_of_too_few_bytes_raises_as_struct_does():
    src = "import struct\ndef f():\n    return struct.unpack('<Q', b'abc')\n"
    out = evaluate_function(src, "f", [])
    assert out.kind == "raised" and "8 bytes" in out.message


PATH_GLOB = """
from pathlib import Path

def f(model_dir):
    shards = sorted(Path(model_dir).glob("*.safetensors"))
    return [p.name for p in shards], str(shards[0]).endswith("model-00001-of-00002.safetensors")
"""


def test_path_glob_lists_the_shards_in_order(model):
    out = _call(PATH_GLOB, [model], str(model))
    assert out.kind == "value", out
    assert out.value == (["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"], True)


def test_path_glob_for_shards_of_a_directory_without_them_is_unknown(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    out = _call(PATH_GLOB, [tmp_path], str(tmp_path))
    assert out.kind == "unknown"
    assert NEEDS in out.message and "holds no safetensors files" in out.message
    other = "from pathlib import Path\ndef f(d):\n    return [p.name for p in Path(d).glob('*.json')]\n"
    assert _call(other, [tmp_path], str(tmp_path)).value == ["config.json"]


def test_the_result_cache_key_sees_a_large_shards_header_and_not_its_data(tmp_path):
    """A shard beyond the cache's 16 MB hashing cap is keyed by its header (which the
    evaluator reads) as well as its size; its tensor data is not read for the key."""
    from sglang_audit.cachedir import StampIndex
    from sglang_audit.resolve.resultcache import MODEL_READ_CAP, _model_digest

    shard = tmp_path / "model.safetensors"

    def write(dtype: str, data_byte: bytes) -> str:
        write_safetensors(shard, {EXPERT: (dtype, [4])})
        with open(shard, "r+b") as fh:  # a sparse tail past the cap: same size both times
            fh.truncate(MODEL_READ_CAP + 4096)
            fh.seek(MODEL_READ_CAP + 100)
            fh.write(data_byte)
        return _model_digest(str(tmp_path), StampIndex(None))

    u8 = write("U8", b"\x01")
    assert write("U8", b"\x02") == u8  # tensor data beyond the header: not part of the key
    assert write("I8", b"\x01") != u8  # the header's dtype: part of it
