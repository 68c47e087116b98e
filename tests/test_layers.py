"""The runtime layer (issue 3): where a published `auto` is decided again when the layers
are built — the layer note from rules/layers.toml and the known-bad verdicts SGA209/SGA210."""

from __future__ import annotations

import pytest

from sglang_audit.frontend.parse import SourceCache
from sglang_audit.resolve.layers import layer_values
from sglang_audit.resolve.pipeline import Request, resolve
from sglang_audit.result import ModelSummary, UnknownValue
from sglang_audit.rules.knownbad import check_resolution, load_rules

NVFP4_METHOD = '''\
class ModelOptNvFp4FusedMoEMethod:
    def __init__(self, quant_config):
        self.quant_config = quant_config

    def create_moe_runner(self, layer, config):
        if backend.is_cutlass():
            raise NotImplementedError("cutlass is not supported")

    def apply(self, layer, dispatch_output):
        if self.flag:
            return run(layer)
        try:
            pass
        except KeyError:
            raise
        raise NotImplementedError(f"Unsupported moe_runner_backend: {backend}")
'''


def _model(quant: str | None, draft: str | None = None) -> ModelSummary:
    return ModelSummary("m", "/m", "X", quant, None, "XMTP" if draft else None, draft)


@pytest.fixture
def checkout(tmp_path):
    pkg = tmp_path / "sglang" / "srt" / "layers" / "quantization"
    pkg.mkdir(parents=True)
    (pkg / "modelopt_quant.py").write_text(NVFP4_METHOD)
    return tmp_path


def test_auto_nvfp4_names_the_deciding_methods_and_their_raises(checkout):
    out = layer_values(checkout, SourceCache(use_disk=False), {"moe_runner_backend": "auto"}, _model("modelopt_fp4"))
    layer = out["moe_runner_backend"]
    assert isinstance(layer, UnknownValue)
    rel = "sglang/srt/layers/quantization/modelopt_quant.py"
    assert f"ModelOptNvFp4FusedMoEMethod.create_moe_runner ({rel}:5)" in layer.reason
    assert f"ModelOptNvFp4FusedMoEMethod.apply ({rel}:9)" in layer.reason
    # explicit raises only (a bare re-raise is not a verdict), each with its line
    assert [(c.value.split("(")[0], c.when) for c in layer.candidates] == [
        ("raise NotImplementedError", (f"{rel}:7 in create_moe_runner",)),
        ("raise NotImplementedError", (f"{rel}:16 in apply",)),
    ]


@pytest.mark.parametrize("value, quant", [("flashinfer_cutlass", "modelopt_fp4"), ("auto", None), ("auto", "awq")])
def test_no_layer_note_for_a_concrete_value_or_another_method(checkout, value, quant):
    assert layer_values(checkout, SourceCache(use_disk=False), {"moe_runner_backend": value}, _model(quant)) == {}


def test_draft_note_needs_a_draft_model(checkout):
    values = {"speculative_moe_runner_backend": "auto"}
    assert layer_values(checkout, SourceCache(use_disk=False), values, _model("modelopt_fp4")) == {}
    out = layer_values(checkout, SourceCache(use_disk=False), values, _model("modelopt_fp4", draft="modelopt_fp4"))
    assert "speculative_moe_runner_backend" in out


RULES = load_rules()


def _findings(res):
    return {f.rule_id: f for f in check_resolution(res, RULES).findings}


@pytest.mark.real_release
def test_0516_sm120_qwen35_auto_reaches_the_layers_and_raises(release):
    tree = release("0.5.16")
    res = resolve(Request(source=str(tree.package_dir), arch="sm120", model="qwen3.5-397b-a17b-nvfp4", sets=["tp_size=8"]))
    moe = res.settings["moe_runner_backend"]
    assert (moe.config, moe.runtime) == ("auto", "auto")
    assert isinstance(moe.layer, UnknownValue)
    assert any(c.when == ("sglang/srt/layers/quantization/modelopt_quant.py:2621 in apply",) for c in moe.layer.candidates)
    found = _findings(res)
    assert "SGA209" in found and "SGA210" not in found
    lines = {e.fingerprint: e.line for e in found["SGA209"].code}
    assert lines == {"create_auto_to_trtllm": 2436, "apply_trtllm_on_init_flag": 2514, "apply_final_not_implemented": 2621}


@pytest.mark.real_release
def test_0516_sm120_with_quantization_flag_is_pinned_and_silent(release):
    tree = release("0.5.16")
    res = resolve(Request(source=str(tree.package_dir), arch="sm120", model="qwen3.5-397b-a17b-nvfp4",
                          sets=["tp_size=8", "quantization=modelopt_fp4"]))
    moe = res.settings["moe_runner_backend"]
    assert moe.config == "flashinfer_cutlass" and moe.layer is None
    assert "SGA209" not in _findings(res)


@pytest.mark.real_release
def test_0523_sm120_qwen35_auto_runs_trtllm_on_unprepared_weights(release):
    tree = release("0.5.23")
    res = resolve(Request(source=str(tree.package_dir), arch="sm120", model="qwen3.5-397b-a17b-nvfp4", sets=["tp_size=8"]))
    found = _findings(res)
    assert "SGA210" in found and "SGA209" not in found
    assert {e.fingerprint: e.line for e in found["SGA210"].code}["reads_g1_scale_c"] == 3260


@pytest.mark.real_release
def test_diff_0515_to_0516_reports_the_new_layer_failure(release):
    from sglang_audit.analyses.diff import Deployment, diff_releases

    old, new = release("0.5.15"), release("0.5.16")
    dep = Deployment(name="", arch="sm120", model="qwen3.5-397b-a17b-nvfp4", sets=("tp_size=8",))
    d = diff_releases(str(old.package_dir), str(new.package_dir), [dep]).deployments[0]
    moe = next(s for s in d.settings if s.name == "moe_runner_backend")
    assert moe.change == "unchanged"  # `auto` on both sides: the difference is in the layers
    assert [f.rule_id for f in d.findings_added] == ["SGA209"] and d.status == "changed"
