"""One ModelCheckpoint per model directory (issue 40 step 4): config.json and
hf_quant_config.json read once under the user-file policy, by every stage that asks."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from sglang_audit.analyses.recommend import attention_kind
from sglang_audit.inputs.modeldir import model_checkpoint
from sglang_audit.rules.facts import checkpoint_dtype, checkpoint_quant


def _model(tmp_path: Path, config: dict, hfq: dict | None = None) -> Path:
    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    if hfq is not None:
        (d / "hf_quant_config.json").write_text(json.dumps(hfq))
    return d


def test_one_read_per_directory_until_the_file_changes(tmp_path: Path) -> None:
    d = _model(tmp_path, {"architectures": ["A"], "torch_dtype": "bfloat16"})
    first = model_checkpoint(d)
    assert model_checkpoint(d) is first
    assert first.architecture == "A"
    (d / "config.json").write_text(json.dumps({"architectures": ["Bee"], "torch_dtype": "float16"}))
    assert model_checkpoint(d).architecture == "Bee"
    assert checkpoint_dtype(d) == "float16"


def test_a_copy_is_private(tmp_path: Path) -> None:
    d = _model(tmp_path, {"architectures": ["A"], "text_config": {"num_experts": 8}})
    copy = model_checkpoint(d).config_copy()
    assert copy is not None
    copy["text_config"]["num_experts"] = 1
    assert model_checkpoint(d).first_key(("num_experts",), bool) == 8


def test_text_config_is_read_after_the_top_level(tmp_path: Path) -> None:
    d = _model(tmp_path, {"architectures": ["A"], "text_config": {"kv_lora_rank": 512,
                                                                  "quantization_config": {"quant_algo": "FP8"}}})
    assert attention_kind(d) == "mla"
    assert checkpoint_quant(d)["model.quant_algo"] == "FP8"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_quant_config_is_refused_not_read(tmp_path: Path) -> None:
    # the rules' checkpoint facts read hf_quant_config.json with a plain read_text before: a FIFO
    # there blocked the command forever; now every reader goes through read_user_file
    d = _model(tmp_path, {"architectures": ["A"]})
    os.mkfifo(d / "hf_quant_config.json")
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(checkpoint_quant(d)), daemon=True)
    t.start()
    t.join(10)
    assert out, "checkpoint_quant blocked on a FIFO"
    assert out[0] == dict.fromkeys(out[0], None)  # read as an unquantized checkpoint: no quant block found
    assert "not a regular file" in (model_checkpoint(d).hf_quant_file.error or "")


def test_unreadable_config_is_unknown_with_the_directory(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{not json")
    found = model_checkpoint(d)
    assert found.config is None and "not valid JSON" in (found.config_file.error or "")
    why = checkpoint_quant(d)["model.quant_algo"]
    assert f"config.json at {d} could not be read" in why.reason
    assert attention_kind(d) == "unknown"


def test_an_edit_in_place_that_keeps_size_and_mtime_is_read(tmp_path: Path) -> None:
    d = _model(tmp_path, {"architectures": ["AAAA"]})
    st = (d / "config.json").stat()
    assert model_checkpoint(d).architecture == "AAAA"
    (d / "config.json").write_text(json.dumps({"architectures": ["BBBB"]}))
    os.utime(d / "config.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert model_checkpoint(d).architecture == "BBBB"
