"""scripts/fidelity.py's comparison of the oracle's `extra` and `model_config` entries with
the tool's output: value normalisation, strict typing, and the accounting of each outcome."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from fidelity import (  # noqa: E402
    MODEL_PATH,
    ORACLE_MODELS,
    compare,
    compare_extra,
    norm_value,
    oracle_model_paths,
    same,
)


def _case(extra: dict, model_config: dict | None = None) -> dict:
    result = {"extra": extra, "runtime": {}}
    if model_config is not None:
        result["model_config"] = model_config
    return {"version": "0.5.10", "arch": "sm120", "model": "/oracle/models/m", "flags": {}, "result": result}


def _tool(settings: dict, model: dict | None = None) -> dict:
    return {"settings": {k: {"config": v, "present": True} for k, v in settings.items()},
            "model": model or {"path": "/tool/profiles/m"}}


def test_bool_never_agrees_with_int() -> None:
    # Python's True == 1 would hide a tool reporting 1 for a switch
    assert not same(True, 1)
    assert not same(8, 8.0)
    assert same([1, "a"], [1, "a"])
    out = compare_extra(_case({"disable_cuda_graph": True}), _tool({"disable_cuda_graph": 1}))
    assert out == [("disable_cuda_graph", "extra", "disagree", True, 1)]


def test_the_case_model_directory_is_a_placeholder_on_both_sides() -> None:
    # NEXTN's draft defaults to the model path: the oracle and the tool read the same
    # config.json from different directories
    assert norm_value("/oracle/models/m/", "/oracle/models/m") == MODEL_PATH
    assert norm_value(("/x", 1), "/x") == [MODEL_PATH, 1]
    # the oracle's lines name its own models by name; SGLang states the directory it loaded
    assert norm_value(str(ORACLE_MODELS / "m"), *oracle_model_paths("m")) == MODEL_PATH
    assert norm_value("/other/m", *oracle_model_paths("m")) == "/other/m"
    out = compare_extra(_case({"speculative_draft_model_path": "/oracle/models/m"}),
                        _tool({"speculative_draft_model_path": "/tool/profiles/m"}))
    assert out[0][2] == "agree"
    out = compare_extra(_case({"speculative_draft_model_path": "/oracle/models/m"}),
                        _tool({"speculative_draft_model_path": "/elsewhere"}))
    assert out[0][2] == "disagree"


def test_unknown_missing_and_absent_fields_are_counted_honestly() -> None:
    tool = _tool({"page_size": {"unknown": "depends on X"}})
    tool["settings"]["mamba_backend"] = {"config": None, "present": False}
    out = {f: o for f, _layer, o, _a, _b in compare_extra(
        _case({"page_size": 1, "mamba_backend": "triton", "chunked_prefill_size": 8192}), tool)}
    assert out == {"page_size": "unknown", "mamba_backend": "disagree", "chunked_prefill_size": "disagree"}


def test_model_config_entries_with_an_equivalent_only() -> None:
    mc = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "quantization": "modelopt_fp4",
          "dtype": "torch.bfloat16"}
    out = compare_extra(_case({}, mc), _tool({}, {"architecture": "DeepseekV3ForCausalLM", "quantization": "fp8"}))
    assert [(f, o) for f, _l, o, _a, _b in out] == [("model_config.architectures", "agree"),
                                                     ("model_config.quantization", "disagree")]


def test_core_only_leaves_extra_out() -> None:
    case, tool = _case({"tp_size": 8}), _tool({"tp_size": 8})
    assert [r[0] for r in compare(case, tool)] == ["tp_size"]
    assert compare(case, tool, core_only=True) == []
