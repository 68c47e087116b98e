"""The rules issue 44's harvest ledger turned into rules (`candidate-rule` mechanisms): each
fires on a real release inside its bounds and stays silent on one outside them.

Cheap by design: the rule's first flag example is evaluated with its `code.*` facts read from
the release's own text (the fingerprints, as `check` reads them), so a case costs one file read;
four cases resolve a whole deployment to show the rule fires through a real resolution."""

from __future__ import annotations

from pathlib import Path

import pytest
import shared

from sglang_audit.rules.knownbad import (
    check_example,
    check_resolution,
    load_rules,
    probe_fingerprint,
)

RULES = {r.id: r for r in load_rules()}

# (rule, release, fires): the first release each rule fires on, the release its fix lands in
# (or the last before its code appears); SGA241 has no fix in any release, so both are inside.
FINGERPRINT_EDGES = [
    ("SGA140", "0.4.10", True),   # VLLM_QUANTIZATION_METHODS + the vLLM raise (0.4.6-0.5.0rc0)
    ("SGA140", "0.5.5", False),   # AWQ/GPTQ without vLLM (PR #9191)
    ("SGA144", "0.4.10", True),   # Marlin off for block FP8, Triton FP8 below SM90
    ("SGA144", "0.5.5", False),   # Marlin auto-enabled on SM80-SM88 (0.5.1)
    ("SGA145", "0.5.5", True),    # ... but imported from vLLM
    ("SGA145", "0.5.6", False),   # SGLang's own Marlin FP8
    ("SGA240", "0.5.5", True),    # MXFP4 swizzle with the default (persistent/TMA) layouts
    ("SGA240", "0.5.9", True),
    ("SGA240", "0.5.10", False),  # PR #20040's SM120 StridedLayout
    ("SGA240", "0.5.14", False),  # MXFP4 Marlin on SM120 (PR #28231)
    ("SGA242", "0.5.1.post3", True),  # EPMoE calls a helper its deep_gemm_wrapper lacks
    ("SGA242", "0.5.2", False),   # the call is gone (PR #9340)
    ("SGA243", "0.5.6", True),    # no piecewise branch in FlashInferFusedMoE
    ("SGA243", "0.5.8", True),    # the standard-top-k assertion
    ("SGA243", "0.5.9", False),   # bypassed top-k run eagerly
    ("SGA245", "0.5.4", True),    # fusion auto-enabled for DeepSeek-V3 without an nnodes test
    ("SGA245", "0.5.5", True),
    ("SGA245", "0.5.6", False),   # PR #12724's nnodes == 1
    ("SGA241", "0.5.7", True),    # the release sglang#17494 reports
    ("SGA241", "0.5.23", True),   # no fix yet
    ("SGA560", "0.5.3", True),    # csgmv kernels cached without num_segs
    ("SGA560", "0.5.4", False),   # PR #11579's do_not_specialize
    ("SGA561", "0.4.10", True),   # LoRA CUDA-graph info for one token per request
    ("SGA561", "0.5.5", True),
    ("SGA561", "0.5.6", False),   # PR #12903's num_tokens_per_bs
    ("SGA562", "0.5.15", True),   # DCP without the KimiK25 wrapper hook
    ("SGA562", "0.5.14", False),  # no DCP yet
    ("SGA562", "0.5.16", False),  # PR #31514's hook
    ("SGA440", "0.4.10", True),
    ("SGA440", "0.5.6", True),
    ("SGA440", "0.5.7", False),   # PR #12596's key/value cast
    ("SGA441", "0.5.8", True),
    ("SGA441", "0.5.9", False),   # PR #14311's SM12x tiles
    ("SGA441", "0.5.16", False),  # the extend kernel moved: the shape is not there
    ("SGA444", "0.5.2", True),    # the runner forces FA3 for Qwen3-Next's full attention
    ("SGA444", "0.5.3", False),   # PR #10816
    ("SGA447", "0.5.9", True),    # aiter fused RoPE+cache for any non-absorb backend (deepseek_v2.py)
    ("SGA447", "0.5.14", True),   # (forward_mla.py)
    ("SGA447", "0.5.16", False),  # PR #30355: only for the aiter backend
    ("SGA448", "0.5.10", True),   # prepare keeps RoPE for DSA under aiter on gfx95
    ("SGA448", "0.5.11", True),
    ("SGA448", "0.5.12", False),  # PR #24148's _skip_rope_for_aiter_fused_mla
    ("SGA442", "0.5.5", True),
    ("SGA442", "0.5.23", True),
    ("SGA442", "0.4.10", False),  # before VisionAttention's Blackwell check
    ("SGA443", "0.5.5", True),
    ("SGA443", "0.5.10", True),
    ("SGA443", "0.5.11", False),  # PR #21589's return_logprob reset
    ("SGA449", "0.5.5", True),    # spec v2 (SGLANG_ENABLE_SPEC_V2) with no topk check
    ("SGA449", "0.5.6", True),
    ("SGA449", "0.5.7", False),   # ServerArgs rejects topk > 1 with spec v2 (SGA001)
    ("SGA449", "0.5.11", False),  # ServerArgs falls back to the v1 worker
    ("SGA450", "0.5.8", True),    # FA4 page-size force tests the prefill field only
    ("SGA450", "0.5.14", True),
    ("SGA450", "0.5.7", False),   # FA4 is still prefill-only (ServerArgs rejects it, SGA001)
    ("SGA450", "0.5.15", False),  # PR #28825/#28976: the force tests all three fields
]


def test_every_harvest_rule_has_a_real_release_edge():
    covered = {rid for rid, _, fires in FINGERPRINT_EDGES if fires}
    assert covered == {rid for rid, _, _ in FINGERPRINT_EDGES}
    assert covered <= set(RULES)


@pytest.mark.real_release
@pytest.mark.parametrize("rule_id, version, fires", FINGERPRINT_EDGES)
def test_harvest_rule_fingerprints_on_real_releases(release, rule_id, version, fires):
    rule = RULES[rule_id]
    root = Path(release(version).package_dir).parent
    example = dict(rule.examples_flag[0])
    for fp in rule.fingerprints:
        example[f"code.{fp.id}"] = probe_fingerprint(root, fp).found
    assert check_example(rule, example) is fires, example


@pytest.mark.real_release
@pytest.mark.parametrize(
    "rule_id, version, arch, model, launch, fires",
    [
        ("SGA440", "0.5.6", "sm90", "qwen3-30b-a3b", "--attention-backend torch_native --kv-cache-dtype fp8_e4m3", True),
        ("SGA440", "0.5.7", "sm90", "qwen3-30b-a3b", "--attention-backend torch_native --kv-cache-dtype fp8_e4m3", False),
        # 0.5.8 picks triton attention for Kimi-K2 on SM120 by itself
        ("SGA441", "0.5.8", "sm120", "kimi-k2-instruct", "--tp 8", True),
        ("SGA561", "0.5.5", "sm90", "qwen3-30b-a3b", "--enable-lora --lora-paths a=/tmp/a --speculative-algorithm NGRAM", True),
        # sglang PR #28825's deployment: FA4 through the combined flag, page size left at 1
        ("SGA450", "0.5.10", "sm100", "qwen3-30b-a3b", "--attention-backend fa4 --moe-runner-backend triton", True),
        ("SGA450", "0.5.10", "sm100", "qwen3-30b-a3b", "--attention-backend fa4 --page-size 128 --moe-runner-backend triton", False),
    ],
)
def test_harvest_rules_through_a_resolution(release, rule_id, version, arch, model, launch, fires):
    from sglang_audit.resolve.pipeline import Request

    tree = release(version)
    res = shared.resolve(Request(source=str(tree.package_dir), arch=arch, model=model,
                                 launch=f"python -m sglang.launch_server --model-path m {launch}"))
    assert res.rejected is None, res.rejected
    result = check_resolution(res, [RULES[rule_id]])
    assert {f.rule_id for f in result.findings} == ({rule_id} if fires else set()), result.findings
    assert result.undecided == ()


@pytest.mark.real_release
@pytest.mark.parametrize("version, topk, fires", [("0.5.6", 4, True), ("0.5.6", 1, False)])
def test_spec_v2_topk_tree_through_a_resolution(release, version, topk, fires):
    """sglang#14077's launch (EAGLE3, SGLANG_ENABLE_SPEC_V2=1): SGA449 names the draft tree (topk
    > 1) the v2 worker of 0.5.5-0.5.6 cannot verify, and only that."""
    from sglang_audit.resolve.pipeline import Request

    draft = Path(__file__).parent / "field" / "models" / "gemma-2-eagle3-draft"
    res = shared.resolve(Request(
        source=str(release(version).package_dir), arch="sm90", model="qwen3-30b-a3b",
        env=["SGLANG_ENABLE_SPEC_V2=1"],
        launch=("python -m sglang.launch_server --model-path m --speculative-algorithm EAGLE3 "
                f"--speculative-draft-model-path {draft} --speculative-num-steps 3 "
                f"--speculative-eagle-topk {topk} --speculative-num-draft-tokens 4")))
    assert res.rejected is None, res.rejected
    result = check_resolution(res, [RULES["SGA449"]])
    assert {f.rule_id for f in result.findings} == ({"SGA449"} if fires else set()), result.findings
    if fires:
        assert "verifies draft chains only" in result.findings[0].message


def test_a_rule_reading_the_default_profiles_variable_is_a_warning_that_says_if(release):
    """Issue 44: SGA447 reads SGLANG_USE_AITER, which SGLang leaves off unless set; SGLang's ROCm
    image sets it, and that image is the default environment on ROCm, an assumption: unset on the
    command line, the finding is a warning naming where the value came from; set, an error."""
    from sglang_audit.resolve.pipeline import Request

    tree = release("0.5.14")
    launch = "python -m sglang.launch_server --model-path m --tp 8 --attention-backend triton"
    for prefix, severity in (("", "warning"), ("SGLANG_USE_AITER=1 ", "error")):
        res = shared.resolve(Request(source=str(tree.package_dir), arch="gfx950", model="deepseek-v3-fp8",
                                     launch=prefix + launch))
        (f,) = check_resolution(res, [RULES["SGA447"]]).findings
        assert f.severity == severity, prefix
        assumed = " — if SGLANG_USE_AITER=1 (image profile, the default for hip; --env or --env-profile states it)"
        assert f.message.endswith(assumed) is (severity == "warning")

