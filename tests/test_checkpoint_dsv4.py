"""DeepSeek-V4's routed-expert precision read from the checkpoint's safetensors headers
(issue 41 step 3), on SGLang 0.5.23: SGLang's own ``try_detect_fp4_experts`` ->
``probe_routed_expert_weight_dtype`` (index, binary open, ``struct.unpack``, header JSON)
evaluated against tests/data/models/deepseek-v4-mxfp4, whose expert weights are MXFP4 only
in their headers. FlashInfer MegaMoE accepts an FP4-expert checkpoint and refuses a standard
FP8 one (``validate_flashinfer_megamoe_model``), so the header decides that setting."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import shared
from checkpoints import dsv4_shards, write_sharded

from sglang_audit.resolve.pipeline import Request

FIXTURE = Path(__file__).resolve().parent / "data" / "models" / "deepseek-v4-mxfp4"
MEGAMOE = ["tp_size=8", "dp_size=8", "enable_dp_attention=true", "moe_a2a_backend=flashinfer_megamoe"]
NEEDS = "needs the checkpoint's index/headers"


def test_the_fixture_is_what_the_writer_writes(tmp_path):
    write_sharded(tmp_path, dsv4_shards("U8"))
    for name in ("model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        assert (FIXTURE / name).read_bytes() == (tmp_path / name).read_bytes(), name


def _model(tmp_path: Path, expert_dtype: str | None) -> Path:
    """The fixture's config.json with the MXFP4 headers ("U8"), converted-FP8 ones
    ("F8_E4M3") or none (a profile shipping config.json alone)."""
    model = tmp_path / "dsv4"
    model.mkdir()
    shutil.copy(FIXTURE / "config.json", model / "config.json")
    if expert_dtype is not None:
        write_sharded(model, dsv4_shards(expert_dtype))
    return model


def _resolve(release, model: Path):
    tree = release("0.5.23")
    return shared.resolve(Request(source=str(tree.package_dir), arch="sm100", model=str(model), sets=list(MEGAMOE)))


@pytest.mark.real_release
def test_0523_megamoe_on_fp8_expert_headers_is_rejected_by_sglang(release, tmp_path):
    res = _resolve(release, _model(tmp_path, "F8_E4M3"))
    assert res.rejected is not None
    assert res.rejected.exception == "ValueError"
    assert "Standard FP8 MoE checkpoints are not supported" in res.rejected.message
    assert res.rejected.file == "sglang/srt/arg_groups/moe_hook.py" and res.rejected.line > 0


@pytest.mark.real_release
def test_0523_megamoe_on_mxfp4_expert_headers_is_accepted(release, tmp_path):
    res = _resolve(release, _model(tmp_path, "U8"))
    assert res.rejected is None
    assert res.model.architecture == "DeepseekV4ForCausalLM"
    a2a = res.settings["moe_a2a_backend"]
    assert (a2a.config, a2a.status) == ("flashinfer_megamoe", "resolved")
    moe = res.settings["moe_runner_backend"]
    assert moe.config == "flashinfer_megamoe"
    # the layer's Fp8Config took is_fp4_experts from the ModelConfig as the loader does
    # (model_loader/loader.py): no "standard FP8 MoE weights" verdict on an FP4 checkpoint
    assert moe.status != "unsupported", moe.layer
    assert "standard FP8 MoE" not in f"{moe.layer.value} {moe.layer.reason}"


@pytest.mark.real_release
def test_0523_megamoe_without_the_headers_is_unknown_with_the_reason(release, tmp_path):
    res = _resolve(release, _model(tmp_path, None))
    assert res.rejected is None
    a2a = res.settings["moe_a2a_backend"]
    assert a2a.status == "unknown"
    assert NEEDS in a2a.config.reason and "weight_utils.py" in a2a.config.reason
    # the model's quantization (ModelConfig) is unknown for the same reason
    assert NEEDS in res.model.quantization.reason
