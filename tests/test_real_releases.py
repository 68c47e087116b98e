"""The core user story on real SGLang releases (wheels from the package index).

Each expectation was derived by reading the release and confirmed with the oracle in
../shared/oracle (SGLang's own ServerArgs run with the GPU faked); see docs/fidelity.md.
"""

from __future__ import annotations

import pytest
import shared

from sglang_audit.resolve.pipeline import Request

pytestmark = pytest.mark.real_release

NEXTN = [
    "tp_size=8", "speculative_algorithm=NEXTN", "speculative_num_steps=3",
    "speculative_eagle_topk=1", "speculative_num_draft_tokens=4",
]


def run(release, version, arch, model, sets=(), launch=None):
    tree = release(version)
    return shared.resolve(Request(source=str(tree.package_dir), arch=arch, model=model, sets=list(sets), launch=launch))


def test_0510_sm120_qwen35_nextn_is_rejected_with_sglangs_message(release):
    res = run(release, "0.5.10", "sm120", "qwen3.5-397b-a17b-nvfp4", NEXTN)
    assert res.rejected is not None
    assert "not compatible with radix cache" in res.rejected.message
    assert "no_buffer" in res.rejected.message
    assert res.rejected.file == "sglang/srt/server_args.py"
    assert res.rejected.exception == "ValueError"
    assert res.rejected.line > 0
    assert all(s.status == "rejected" for s in res.settings.values())


def test_0510_sm120_qwen35_nextn_no_radix(release):
    res = run(release, "0.5.10", "sm120", "qwen3.5-397b-a17b-nvfp4", [*NEXTN, "disable_radix_cache=true"])
    assert res.rejected is None
    s = res.settings
    assert s["moe_runner_backend"].config == "auto"
    assert s["speculative_moe_runner_backend"].config == "auto"
    assert s["speculative_algorithm"].config == "EAGLE"
    fp4 = s["fp4_gemm_runner_backend"]
    assert (fp4.config, fp4.runtime, fp4.status) == ("auto", "flashinfer_cudnn", "resolved")
    deciding = [c for c in fp4.chain if c.value == "flashinfer_cudnn" and c.file.endswith("fp4_utils.py")]
    assert deciding, fp4.chain
    assert "is_sm120_supported()" in deciding[0].guard
    assert res.model.quantization == "modelopt_fp4"  # the 0.5.10 in-place modelopt → modelopt_fp4
    assert res.model.draft_architecture == "Qwen3_5ForCausalLMMTP"


@pytest.mark.parametrize(
    "moe, draft",
    [("flashinfer_cutlass", "flashinfer_cutlass"), ("flashinfer_trtllm", "auto")],
)
def test_0510_draft_moe_runner_follows_target(release, moe, draft):
    res = run(release, "0.5.10", "sm120", "qwen3.5-397b-a17b-nvfp4",
              [*NEXTN, "disable_radix_cache=true", f"moe_runner_backend={moe}"])
    assert res.settings["moe_runner_backend"].config == moe
    assert res.settings["speculative_moe_runner_backend"].config == draft
    chain = res.settings["speculative_moe_runner_backend"].chain
    assert any(c.file == "sglang/srt/server_args.py" and "speculative_moe_runner_backend is None" in c.guard for c in chain)


@pytest.mark.parametrize("version, expected", [("0.5.10", "flashinfer_trtllm"), ("0.5.5", "auto")])
def test_sm100_deepseek_r1_nvfp4_moe(release, version, expected):
    res = run(release, version, "sm100", "deepseek-r1-nvfp4", ["tp_size=8"])
    assert res.rejected is None
    assert res.settings["moe_runner_backend"].config == expected
    if version == "0.5.5":
        # the layers fail: quantization "modelopt" picks ModelOptFp8Config, whose from_config
        # rejects the NVFP4 quant_algo of config.json (0.5.10 rewrites modelopt -> modelopt_fp4)
        layer = res.settings["moe_runner_backend"].layer
        assert res.settings["moe_runner_backend"].status == "unsupported"
        assert (layer.exception, layer.site) == ("ValueError", "sglang/srt/layers/quantization/modelopt_quant.py:233")
        assert layer.value.startswith("ValueError: ModelOptFp8Config only supports static FP8 quantization in SGLang.")
    else:
        assert res.settings["moe_runner_backend"].status == "resolved"
    if version == "0.5.5":
        # before 0.5.10 the config.json quant_method "modelopt" is not rewritten
        assert res.model.quantization == "modelopt"
        assert not res.settings["fp4_gemm_runner_backend"].present


def test_launch_command_equals_set(release):
    a = run(release, "0.5.10", "sm120", "qwen3.5-397b-a17b-nvfp4",
            ["tp_size=8", "moe_runner_backend=flashinfer_cutlass", "fp4_gemm_runner_backend=flashinfer_trtllm"])
    b = run(release, "0.5.10", "sm120", None, launch=(
        "python -m sglang.launch_server --model-path qwen3.5-397b-a17b-nvfp4 --tp 8 "
        "--moe-runner-backend flashinfer_cutlass --fp4-gemm-backend flashinfer_trtllm"))
    assert a.flags == b.flags
    assert a.to_json()["settings"] == b.to_json()["settings"]
    assert a.settings["fp4_gemm_runner_backend"].runtime == "flashinfer_trtllm"


def _guards(release, version, arch, cuda="12.9"):
    from sglang_audit.analyses.guards import guards_for as guards

    tree = release(version)
    _, facts = guards(Request(source=str(tree.package_dir), arch=arch, model=None, cuda=cuda))
    return {f.name: f for f in facts}


def test_guards_are_interpreted_from_the_release(release):
    g = _guards(release, "0.5.10", "sm121")
    assert g["is_sm120_supported"].value is True  # GB10 counts as SM120 in this release
    assert g["is_sm100_supported"].value is False
    assert g["is_musa"].value is False
    assert g["is_sm120_supported"].file == "sglang/srt/utils/common.py"
    assert "device_capability_majors=[12]" in g["is_sm120_supported"].definition
    # 0.5.5 compares the CUDA version as a string: "12.10" >= "12.8" is False there
    old = _guards(release, "0.5.5", "sm120", cuda="12.10")
    assert old["is_sm120_supported"].value is False
    assert _guards(release, "0.5.5", "sm120", cuda="12.9")["is_sm120_supported"].value is True


@pytest.mark.parametrize(
    "version, era, fp4_runtime, fp8_runtime",
    [
        # E5 (resolve_once pipeline) and E6 (msgspec record, run_hook): confirmed by the oracle
        ("0.5.19", "E5", "flashinfer_cutlass", "cutlass"),
        ("0.5.23", "E6", "flashinfer_cutlass", "cutlass"),
    ],
)
def test_pipeline_releases_sm120_qwen35(release, version, era, fp4_runtime, fp8_runtime):
    res = run(release, version, "sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8"])
    assert res.structure.startswith(era)
    assert res.rejected is None
    s = res.settings
    # ServerArgs resolves `auto`; the MoE layers built with it fail (SGA209 on 0.5.19, SGA210 on 0.5.23)
    assert (s["moe_runner_backend"].config, s["moe_runner_backend"].status) == ("auto", "unsupported")
    assert s["moe_runner_backend"].layer.exception == {"0.5.19": "NotImplementedError", "0.5.23": "AttributeError"}[version]
    assert s["fp4_gemm_runner_backend"].runtime == fp4_runtime
    assert s["fp8_gemm_runner_backend"].runtime == fp8_runtime
    assert s["attention_backend"].config == "flashinfer"


def test_e4_release_sm100_deepseek(release):
    """0.5.15: the DeepSeek rule is a post-process pass whose declaration is replayed."""
    res = run(release, "0.5.15", "sm100", "deepseek-r1-nvfp4", ["tp_size=8"])
    assert res.structure.startswith("E4")
    assert res.settings["moe_runner_backend"].config == "flashinfer_trtllm"
    assert res.settings["speculative_moe_runner_backend"].config == "flashinfer_trtllm"
    assert res.settings["fp4_gemm_runner_backend"].runtime == "flashinfer_cutedsl"


def test_e0_release_runs_and_has_no_moe_runner_field(release):
    res = run(release, "0.4.10", "sm100", "deepseek-r1-nvfp4", ["tp_size=8"])
    assert res.structure.startswith("E0/E1")
    assert res.rejected is None
    assert not res.settings["moe_runner_backend"].present  # E0 only has boolean MoE flags
    assert res.settings["attention_backend"].status in ("resolved", "unknown")


def test_set_values_are_typed_by_the_field_annotation(release):
    """0.5.23's generated CLI declares no argparse type for Optional[int] fields; --set must
    still pass ints (the record converts them), or the pipeline compares str with int."""
    res = run(release, "0.5.23", "sm120", "qwen3.5-397b-a17b-nvfp4", NEXTN)
    assert res.flags["speculative_num_steps"] == 3
    assert res.rejected is None
    assert res.settings["speculative_algorithm"].config == "EAGLE"
    assert res.settings["speculative_moe_runner_backend"].config == "auto"
