"""The attention backend SGLang builds (issue 16): the registry, each backend's constructor
(its asserts and raises), hybrid prefill/decode and the hybrid linear-attention wrapper,
evaluated (never executed) on the fixture checkout fixtures/checkouts/mini_attn and on real
releases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import shared

from sglang_audit.evaluate.interpreter import Bounds, Interpreter
from sglang_audit.evaluate.values import Class, HFConfig, Instance
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.device import Environment, parse_device
from sglang_audit.resolve import pipeline
from sglang_audit.resolve.attention import evaluate_attention
from sglang_audit.resolve.pipeline import Request
from sglang_audit.result import LayerValue
from sglang_audit.world.native import NativeWorld

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_attn" / "python"
REGISTRY = "sglang/srt/layers/attention/attention_registry.py"


def _line(path: str, text: str) -> int:
    lines = (ROOT / path).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _attention(arch: str, draft: bool = False, model_type: str = "llama", mla: bool = False,
               installed: frozenset[str] = frozenset({"torch"}), **flags: Any) -> dict[str, LayerValue]:
    world = NativeWorld(parse_device(arch), Environment(installed=installed), [])
    interp = Interpreter(ROOT, SourceCache(use_disk=False), world, {}, Bounds())
    sa_mod = interp.load_module("sglang.srt.server_args")
    server_args = interp.call(interp.getattr(sa_mod, "ServerArgs"), [], flags)
    mc = Instance(Class("ModelConfig", (), {}, None))
    hf = HFConfig({"model_type": model_type, "layer_types": ["linear_attention", "full_attention"] * 2}, "test")
    mc.attrs.update(hf_config=hf, attention_arch="mla" if mla else "mha")
    return evaluate_attention(interp, server_args, mc, mc if draft else None)


def test_a_constructor_assert_on_the_arch_is_sglangs_verdict_with_its_message_and_line():
    v = _attention("sm120", attention_backend="fa3")["attention_backend"]
    assert v.status == "unsupported" and v.exception == "AssertionError"
    assert v.value == ("AssertionError: FlashAttention v3 Backend requires SM>=80 and SM<=90. "
                       "Please use `--attention-backend flashinfer`.")
    assert v.site == f"{REGISTRY}:{_line(REGISTRY, 'assert (')}"
    assert v.stage == "attention"


def test_the_same_backend_on_hopper_is_built():
    v = _attention("sm90", attention_backend="fa3")["attention_backend"]
    assert (v.status, v.value) == ("resolved", "FlashAttentionBackend")
    assert v.chain[-1].kind == "backend" and v.chain[-1].file == REGISTRY


def test_a_raise_on_the_model_type_mla_in_the_registry():
    v = _attention("sm100", attention_backend="trtllm_mla")["attention_backend"]
    assert (v.status, v.value) == ("unsupported", "ValueError: trtllm_mla backend can only be used with MLA models.")
    assert v.site == f"{REGISTRY}:{_line(REGISTRY, 'raise ValueError')}"
    assert _attention("sm100", attention_backend="trtllm_mla", mla=True)["attention_backend"].status == "resolved"


def test_a_constructor_assert_on_the_page_size():
    ok = _attention("sm90", attention_backend="triton", page_size=16)["attention_backend"]
    assert (ok.status, ok.value) == ("resolved", "TritonAttnBackend")
    bad = _attention("sm90", attention_backend="triton", page_size=128)["attention_backend"]
    path = "sglang/srt/layers/attention/triton_backend.py"
    assert bad.status == "unsupported"
    assert bad.value == "AssertionError: Triton attention supports page sizes up to 64"
    assert bad.site == f"{path}:{_line(path, 'model_runner.page_size <= 64')}"


def test_the_backend_reads_the_server_args_the_scheduler_published():
    # 0.5.10's backends read get_global_server_args(), which the scheduler sets before it
    # builds the model runner; only the MoE stage published them, so a dense model's backend
    # was unknown ("Global server args is not set yet!", 0.5.10 llama-3.1-8b on sm120)
    v = _attention("sm90", attention_backend="triton", tp_size=2)["attention_backend"]
    assert (v.status, v.value) == ("resolved", "TritonAttnBackend")


def test_an_assert_on_runtime_state_is_assumed_and_listed_never_a_verdict():
    v = _attention("sm90", attention_backend="triton")["attention_backend"]
    assert v.status == "resolved"
    assert any("model_runner.token_to_kv_pool is not None" in d and "assumed to hold" in d for d in v.data_dependent)


def test_hybrid_prefill_and_decode_build_both_backends():
    v = _attention("sm90", attention_backend="triton", decode_attention_backend="fa3")["attention_backend"]
    assert (v.status, v.value) == ("resolved", "HybridAttnBackend(decode_backend=FlashAttentionBackend, prefill_backend=TritonAttnBackend)")
    assert [s.value for s in v.chain if s.kind == "backend"] == [
        "FlashAttentionBackend", "TritonAttnBackend",
        "HybridAttnBackend(decode_backend=FlashAttentionBackend, prefill_backend=TritonAttnBackend)"]


def test_a_hybrid_prefill_decode_pair_fails_on_the_backend_that_fails():
    v = _attention("sm120", attention_backend="triton", decode_attention_backend="fa3")["attention_backend"]
    assert v.status == "unsupported" and "FlashAttention v3 Backend requires" in v.value


def test_a_hybrid_linear_attention_model_gets_the_gdn_sub_backend():
    v = _attention("sm100", model_type="mini_next", attention_backend="triton")["attention_backend"]
    assert (v.status, v.value) == ("resolved", "HybridLinearAttnBackend(TritonAttnBackend, GDNAttnBackend)")
    gdn = next(s for s in v.chain if s.value == "GDNAttnBackend")
    assert gdn.file == REGISTRY and gdn.line == _line(REGISTRY, "linear_attn_backend = GDNAttnBackend(runner)")


def test_the_hybrid_linear_attention_wrapper_rejects_a_backend_on_blackwell():
    v = _attention("sm100", model_type="mini_next", attention_backend="fa3")["attention_backend"]
    assert v.status == "unsupported" and "FlashAttention v3" in v.value  # the registry fails first
    v = _attention("sm90", model_type="mini_next", attention_backend="fa3")["attention_backend"]
    assert v.status == "resolved" and v.value.startswith("HybridLinearAttnBackend(FlashAttentionBackend")


def test_the_draft_worker_takes_its_override_and_fails_on_its_own():
    out = _attention("sm100", draft=True, attention_backend="triton", speculative_draft_attention_backend="fa4")
    assert out["attention_backend"].status == "resolved"
    d = out["speculative_draft_attention_backend"]
    path = "sglang/srt/layers/attention/flashattention_backend.py"
    assert (d.status, d.value) == ("unsupported", "ValueError: FA4 does not support a draft attention override")
    assert d.site == f"{path}:{_line(path, 'raise ValueError')}"


# ---- real releases (downloaded into the user cache) ---------------------------------------
def _real(release: Any, version: str, arch: str, sets: list[str]) -> Any:
    tree = release(version)
    return shared.resolve(Request(source=str(tree.package_dir), arch=arch, model="qwen3.5-397b-a17b-nvfp4",
                                  sets=["tp_size=8", *sets]))


@pytest.mark.real_release
def test_real_0_5_10_fa3_on_sm120_fails_in_the_registry_with_sglangs_message(release):
    # read first: 0.5.10 attention_registry.py:130-135, create_flashattention_v3_backend asserts
    # capability major 8 (non-MLA) or 9
    res = _real(release, "0.5.10", "sm120", ["attention_backend=fa3"])
    s = res.settings["attention_backend"]
    assert s.status == "unsupported"
    assert s.layer.value == ("AssertionError: FlashAttention v3 Backend requires SM>=80 and SM<=90. "
                             "Please use `--attention-backend flashinfer`.")
    assert s.layer.site == "sglang/srt/layers/attention/attention_registry.py:130"


@pytest.mark.real_release
def test_real_0_5_10_qwen3_5_on_sm120_builds_the_gdn_linear_sub_backend(release):
    # read first: 0.5.10 attn_backend_wrapper (attention_registry.py:180-236): Qwen3.5's text
    # config subclasses Qwen3NextConfig -> hybrid_gdn_config; flashinfer is allowed on Blackwell
    # (:209-214); GDNAttnBackend(runner) at :220; HybridLinearAttnBackend at :232
    res = _real(release, "0.5.10", "sm120", [])
    v = res.settings["attention_backend"].layer
    assert (v.status, v.value) == ("resolved", "HybridLinearAttnBackend(FlashInferAttnBackend, GDNAttnBackend)")
    assert v.site == "sglang/srt/layers/attention/attention_registry.py:232"
    gdn = next(s for s in v.chain if s.value == "GDNAttnBackend")
    assert (gdn.file, gdn.line) == ("sglang/srt/layers/attention/attention_registry.py", 220)
    assert any(a.startswith("flashinfer: installed") for a in v.assumptions)


@pytest.mark.real_release
def test_real_0_5_23_fa4_prefill_on_sm120_fails_the_hybrid_gdn_assert(release):
    # read first: 0.5.23 attention_registry.py:466-476: on SM120 the allowed set is
    # {triton, trtllm_mha, flashinfer}; the pair is stamped on the runner by
    # init_attention_backends before building (model_runner.py:1119-1121)
    res = _real(release, "0.5.23", "sm120", ["prefill_attention_backend=fa4"])
    v = res.settings["attention_backend"].layer
    assert v.status == "unsupported"
    assert v.value.startswith("AssertionError: Only {") and v.value.endswith(
        "backends are supported on Blackwell GPUs for hybrid GDN models. Got prefill=fa4, decode=flashinfer.")
    assert v.site == "sglang/srt/layers/attention/attention_registry.py:473"


# ---- optional-package forks (resolve/pipeline.py with_package_forks) -----------------------
@pytest.mark.real_release
def test_real_an_absent_optional_package_is_stated_and_its_other_state_evaluated(release):
    # read first: 0.5.15 Mxfp4MoEMethod imports triton_kernels (absent from a plain install:
    # rules/packages.toml [optional]); the same target with --with triton_kernels is evaluated
    tree = release("0.5.15")
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm90", model="gpt-oss-120b"))
    v = res.settings["moe_runner_backend"].layer
    assert v.status == "unsupported" and "No module named 'triton_kernels" in v.value
    assert "triton_kernels: absent (a plain install of this release lacks it; --with triton_kernels evaluates it installed)" in v.assumptions
    assert len(v.forks) == 1 and v.forks[0].startswith("with triton_kernels installed (--with triton_kernels): ")
    assert "No module named" not in v.forks[0]  # the other state does not fail on the import
    assert v.to_json()["forks"] == list(v.forks)
    with_it = shared.resolve(Request(source=str(tree.package_dir), arch="sm90", model="gpt-oss-120b", with_packages=["triton_kernels"]))
    assert with_it.settings["moe_runner_backend"].layer.forks == ()  # the user decided the state: no fork


@pytest.mark.real_release
def test_real_a_fork_builds_the_layer_stages_up_to_those_that_assumed_the_package(release, monkeypatch):
    # the fork is read for the layer values that assumed the package only (moe_runner_backend:
    # 0.5.15 Mxfp4MoEMethod's triton_kernels import), so it builds the stages up to the one
    # giving them (the MoE stage, the first) and no later one; its outcome is a full one's
    tree = release("0.5.15")
    asked: list[Any] = []
    real = pipeline._resolve_cached

    def recording(target: Any, cache: Any, results: Any) -> Any:
        asked.append(target)
        return real(target, cache, results)

    monkeypatch.setattr(pipeline, "_resolve_cached", recording)
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm90", model="gpt-oss-120b"))
    monkeypatch.undo()
    assert [(t.layer_stages, "triton_kernels" in t.with_packages) for t in asked] == [(None, False), (("moe",), True)]
    full = shared.resolve(Request(source=str(tree.package_dir), arch="sm90", model="gpt-oss-120b",
                                  with_packages=["triton_kernels"])).settings["moe_runner_backend"].layer
    assert (full.status, full.runner) == ("unknown", "triton_kernel")
    assert res.settings["moe_runner_backend"].layer.forks == (
        f"with triton_kernels installed (--with triton_kernels): unknown ({full.reason})",)


def test_a_config_json_is_an_instance_of_a_union_member_through_a_subclass_model_type():
    # the runner's isinstance(config, MiniNextConfig | OtherHybridConfig): config.json's
    # model_type names MiniNextTextConfig, a subclass; its property full_attention_layer_ids
    # (inherited) is read from the release's class
    v = _attention("sm100", model_type="mini_next_text", attention_backend="triton")["attention_backend"]
    assert (v.status, v.value) == ("resolved", "HybridLinearAttnBackend(TritonAttnBackend, GDNAttnBackend)")
    v = _attention("sm100", model_type="other_hybrid", attention_backend="triton")["attention_backend"]
    assert v.value.startswith("HybridLinearAttnBackend(")
    v = _attention("sm100", model_type="llama", attention_backend="triton")["attention_backend"]
    assert (v.status, v.value) == ("resolved", "TritonAttnBackend")


@pytest.mark.real_release
def test_real_0_5_10_a_dense_model_builds_its_backend_with_the_published_server_args(release):
    # read first: 0.5.10 flashinfer_backend.py reads get_global_server_args() (server_args.py
    # raises "Global server args is not set yet!" before the scheduler sets them); a dense
    # model has no MoE stage, which alone published them
    tree = release("0.5.10")
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm120", model="llama-3.1-8b-nvfp4"))
    v = res.settings["attention_backend"].layer
    assert (v.status, v.value) == ("resolved", "FlashInferAttnBackend")
    assert v.site == "sglang/srt/layers/attention/attention_registry.py:37"


@pytest.mark.real_release
def test_real_0_5_23_trtllm_mla_constructor_runs_past_its_jit_kernel(release):
    # 0.5.23's TRTLLMMLABackend.__init__ JIT-builds a kernel (sglang.kernels.jit): the build is a
    # run-time kernel (rules/attention.toml kernel_modules), its dtype map keyed by torch dtypes
    # finds them (outside objects are named), so the default MLA backend on Blackwell resolves
    tree = release("0.5.23")
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm100", model="deepseek-v3-fp8",
                                 sets=["tp_size=8", "attention_backend=trtllm_mla"]))
    layer = res.settings["attention_backend"].layer
    assert (layer.status, layer.value) == ("resolved", "TRTLLMMLABackend"), layer
    assert layer.site.startswith("sglang/srt/layers/attention/attention_registry.py:")
    assert not any("cpp_args.py" in d for d in layer.data_dependent)


# ---- the runner's process set-up (dp attention's globals, 0.5.2-0.5.13) ---------------------
def test_an_mla_constructor_reads_the_globals_the_runners_process_setup_wrote():
    # the fixture's MiniMLABackend divides 128 heads by get_attention_tp_size(), which asserts
    # dp_attention's _ATTN_TP_SIZE; initialize_dp_attention (called by the runner's
    # init_torch_distributed) sets it from the server args: tp 16 -> 8 heads, refused
    v = _attention("sm100", mla=True, attention_backend="mini_mla", tp_size=16)["attention_backend"]
    path = "sglang/srt/layers/attention/mla_backend.py"
    assert (v.status, v.value) == ("unsupported", "AssertionError: MiniMLA needs at least 16 heads per attention TP rank")
    assert v.site == f"{path}:{_line(path, 'assert self.num_local_heads')}"
    runner = "sglang/srt/model_executor/model_runner.py"
    setup = v.chain[0]
    assert (setup.kind, setup.value, setup.file, setup.line) == (
        "process", "initialize_dp_attention(...)", runner, _line(runner, "initialize_dp_attention("))
    assert setup.code.startswith("initialize_dp_attention(server_args=self.server_args")
    # dp attention: the attention TP group is tp/dp = 1 rank, all 128 heads on it
    v = _attention("sm100", mla=True, attention_backend="mini_mla", tp_size=16, dp_size=16,
                   enable_dp_attention=True)["attention_backend"]
    assert (v.status, v.value) == ("resolved", "MiniMLABackend"), v
    assert not v.data_dependent  # constructed to its end: no assert left undecided


def test_a_backend_that_reads_no_process_global_has_no_setup_step():
    v = _attention("sm90", attention_backend="fa3")["attention_backend"]
    assert (v.status, v.value) == ("resolved", "FlashAttentionBackend")
    assert all(s.kind != "process" for s in v.chain)


@pytest.mark.real_release
def test_real_0_5_5_mla_backend_constructs_past_the_dp_attention_globals(release):
    # read first: 0.5.5 model_runner.py:648 init_torch_distributed calls
    # initialize_dp_attention(server_args=..., model_config=...), which sets _ATTN_TP_SIZE
    # (dp_attention.py:274); TRTLLMMLABackend.__init__ (trtllm_mla_backend.py:245) divides the
    # heads by get_attention_tp_size(), whose assert (dp_attention.py:335) stopped it before
    tree = release("0.5.5")
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm100", model="deepseek-r1-nvfp4", sets=["tp_size=8"]))
    v = res.settings["attention_backend"].layer
    assert (v.status, v.value) == ("resolved", "TRTLLMMLABackend"), v
    assert v.site == "sglang/srt/layers/attention/attention_registry.py:54"
    setup = v.chain[0]
    assert (setup.kind, setup.file, setup.line) == ("process", "sglang/srt/model_executor/model_runner.py", 648)
    assert setup.code == "initialize_dp_attention(server_args=self.server_args, model_config=self.model_config)"
    assert not any("dp_attention.py" in d for d in v.data_dependent)
    # the constructor ran on to FlashInferMLAAttnBackend.__init__ (its base), whose family for the
    # ragged prefill SGLang's own is_sm100_supported() chose on the device (flashinfer_mla_backend.py:245-251)
    assert v.library_calls[0] == ("flashinfer.BatchPrefillWithRaggedKVCacheWrapper",
                                  "sglang/srt/layers/attention/flashinfer_mla_backend.py:250",
                                  (("", "?"), ("", "'NHD'"), ("backend", "'cutlass'")))


def test_the_kernel_library_objects_a_constructor_builds_are_noted_with_sglangs_arguments():
    # MiniFlashInferMLABackend passes backend="cutlass" when SGLang's own is_sm100_supported()
    # holds on the device, else "auto": the stage evaluates it and notes the FlashInfer wrapper
    # it builds, for the kernel level (attnkernels: FlashInfer's own dispatch)
    path = "sglang/srt/layers/attention/flashinfer_mla_backend.py"
    site = f"{path}:{_line(path, 'BatchPrefillWithRaggedKVCacheWrapper(')}"
    with_fi = frozenset({"torch", "flashinfer"})
    for arch, family in (("sm100", "'cutlass'"), ("sm120", "'auto'")):
        v = _attention(arch, mla=True, attention_backend="mini_fi_mla", installed=with_fi)["attention_backend"]
        assert (v.status, v.value) == ("resolved", "MiniFlashInferMLABackend"), v
        assert v.library_calls == (("flashinfer.BatchPrefillWithRaggedKVCacheWrapper", site,
                                    (("", "?"), ("", "'NHD'"), ("backend", family))),)
    # a backend that builds none notes none
    assert _attention("sm90", attention_backend="fa3")["attention_backend"].library_calls == ()


# ---- request time (issue 42): the built backend serving a stand-in batch per forward mode --
REQT = "sglang/srt/layers/attention/request_time_backend.py"
FA3 = "sglang/kernels/ops/attention/flash_attention_v3.py"


def test_a_raise_reached_only_through_init_forward_metadata_on_a_verify_batch_is_the_verdict():
    # the constructor passes; serving a TARGET_VERIFY batch raises on the server args' topk
    v = _attention("sm90", attention_backend="reqtime", speculative_algorithm="EAGLE",
                   speculative_eagle_topk=4)["attention_backend"]
    assert v.status == "unsupported" and v.exception == "ValueError"
    assert v.value == "ValueError: RequestTimeBackend verifies with topk == 1 only, got 4"
    assert v.site == f"{REQT}:{_line(REQT, 'raise ValueError(')}"
    request = [s for s in v.chain if s.kind == "request"]
    assert [s.value for s in request] == ["RequestTimeBackend.init_forward_metadata on a TARGET_VERIFY batch"]
    assert v.chain[0].kind == "backend" and v.chain[-1].kind == "raise"


def test_the_targets_batches_are_served_after_the_draft_runner_wrote_the_published_server_args():
    # SGLang's order in one process: the target's runner is built, then the draft's, then
    # batches are served. The draft runner publishes its backend for dispatch on the server args
    # the target shares (the sglang#28559 shape); the target's prefill dispatch reads it later
    v = _attention("sm90", draft=True, attention_backend="reqtime", speculative_draft_attention_backend="triton")
    t, d = v["attention_backend"], v["speculative_draft_attention_backend"]
    assert (d.status, d.value) == ("resolved", "TritonAttnBackend")
    assert (t.status, t.exception) == ("unsupported", "ValueError")
    assert t.value == "ValueError: RequestTimeBackend's prefill is dispatched to triton"
    assert t.site == f"{REQT}:{_line(REQT, 'prefill is dispatched to')}"
    assert [s.value for s in t.chain if s.kind == "request"] == ["RequestTimeBackend.forward on a EXTEND batch"]
    # without the draft runner's write (no draft worker, or one that publishes nothing) the
    # same target serves its batches
    for out in (_attention("sm90", attention_backend="reqtime"),
                _attention("sm90", draft=True, attention_backend="reqtime")):
        assert (out["attention_backend"].status, out["attention_backend"].value) == ("resolved", "RequestTimeBackend")


def test_request_time_raises_on_unknown_batch_state_or_unexplored_modes_are_no_verdict():
    # topk 1 verifies; without speculative decoding no verify batch is served; the
    # `seq_lens_cpu is None` raise is on request-time state a real batch has
    for flags in ({"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 1}, {"speculative_eagle_topk": 4}):
        v = _attention("sm90", attention_backend="reqtime", **flags)["attention_backend"]
        assert (v.status, v.value) == ("resolved", "RequestTimeBackend"), (flags, v)
        assert not any(s.kind == "request" for s in v.chain)


def test_the_kernel_a_decode_forward_calls_refuses_the_device_at_its_own_guard():
    # dsa_decode_backend=fa3: only forward_decode reaches SGLang's FA3 wrapper, whose guard reads
    # the device; the argument sink (None unless a model passes it) does not decide the verdict
    v = _attention("sm100", attention_backend="reqtime", dsa_decode_backend="fa3")["attention_backend"]
    assert v.status == "unsupported" and v.exception == "NotImplementedError"
    assert v.value == "NotImplementedError: flash_attn at sgl-kernel is only supported on sm90 and above"
    assert v.site == f"{FA3}:{_line(FA3, 'raise NotImplementedError')}"
    assert [s.value for s in v.chain if s.kind == "request"] == ["RequestTimeBackend.forward on a DECODE batch"]
    assert any(s.file == FA3 and s.kind == "branch" for s in v.chain)  # the guard, cited
    # the same choice on Hopper, and another sub-backend on Blackwell, are served
    for arch, impl in (("sm90", "fa3"), ("sm100", "flashmla")):
        v = _attention(arch, attention_backend="reqtime", dsa_decode_backend=impl)["attention_backend"]
        assert (v.status, v.value) == ("resolved", "RequestTimeBackend"), (arch, impl, v)


def test_a_kernel_call_served_keeps_the_arguments_sglang_passes_as_far_as_they_are_known():
    # issue 44: the heads per rank (128 / tp), the page size and the dtype come from the server
    # args through the backend's own code; the batch's tensors are not known before a request
    v = _attention("sm100", attention_backend="reqtime", dsa_decode_backend="cutlass_mla", tp_size=8, page_size=64,
                   installed=frozenset({"torch", "sgl_kernel"}))["attention_backend"]
    assert (v.status, v.value) == ("resolved", "RequestTimeBackend"), v
    site = f"{REQT}:{_line(REQT, 'return cutlass_mla_decode(')}"
    assert ("sgl_kernel", "cutlass_mla_decode", site, "") in v.kernel_calls
    assert v.kernel_call_args == (("sgl_kernel.cutlass_mla_decode", site, (
        ("", "?"), ("", "?"), ("", "?"), ("num_heads", '["plain",16]'), ("page_size", '["plain",64]'),
        ("kv_dtype", '["dtype","bfloat16"]'))),)
    assert "kernel_call_args" not in v.to_json()  # read by the kernel level, not printed


@pytest.mark.real_release
def test_real_0_5_23_dsa_decode_fa3_on_sm100_is_refused_by_the_fa3_guard_its_forward_reaches(release):
    # 0.5.23 DeepseekSparseAttnBackend builds with any --dsa-decode-backend; only forward_decode
    # reaches `_forward_fa3` -> flash_attention.py -> flash_attention_v3.flash_attn_with_kvcache,
    # whose `if not _is_fa3_supported(): raise NotImplementedError(...)` (lines 137-138) reads the
    # device: Blackwell is refused there. The release's own default (trtllm on SM100,
    # arg_groups/overrides.py) is served. GLM-5 (GlmMoeDsaForCausalLM) is a DSA model.
    tree = release("0.5.23")
    glm5 = str(Path(__file__).resolve().parent / "field" / "models" / "glm-5-nvfp4")
    launch = "python -m sglang.launch_server --model-path m --tp 4"  # as tests/test_rules.py's SGA502 edge
    refused = shared.resolve(Request(source=str(tree.package_dir), arch="sm100", model=glm5,
                                     launch=launch + " --dsa-decode-backend fa3"))
    setting = refused.settings["attention_backend"]
    layer = setting.layer
    assert (setting.effective, setting.status) == ("dsa", "unsupported")
    assert refused.settings["dsa_decode_backend"].effective == "fa3"
    assert (layer.status, layer.exception) == ("unsupported", "NotImplementedError")
    assert layer.value == "NotImplementedError: flash_attn at sgl-kernel is only supported on sm90 and above"
    assert layer.site == "sglang/kernels/ops/attention/flash_attention_v3.py:138"
    assert [s.value for s in layer.chain if s.kind == "request"] == ["DeepseekSparseAttnBackend.forward on a DECODE batch"]
    assert any((s.file, s.line, s.kind) == ("sglang/kernels/ops/attention/flash_attention_v3.py", 137, "branch")
               for s in layer.chain)
    assert layer.chain[0].value == "DeepseekSparseAttnBackend"
    served = shared.resolve(Request(source=str(tree.package_dir), arch="sm100", model=glm5, launch=launch))
    setting = served.settings["attention_backend"]
    assert served.settings["dsa_decode_backend"].effective == "trtllm"
    assert (setting.status, setting.layer.status, setting.layer.value) == ("resolved", "resolved", "DeepseekSparseAttnBackend")
    assert not any(s.kind == "request" for s in setting.layer.chain)


def test_a_branch_written_over_several_lines_is_on_request_time_state_when_an_operand_is():
    # 0.5.23 flashinfer_backend.py:2335-2341: `if (\n spec_info is not None\n and use_custom_mask
    # is None\n ...):` then `raise RuntimeError`; the decisions on the unknown operands sit at
    # 2336-2338, below the guard's own line. Read as decided by known values, that raise became
    # a verdict refusing FlashInfer for Qwen3 + EAGLE on sm100 (a working deployment).
    from sglang_audit.evaluate.interpreter import PyRaise
    from sglang_audit.evaluate.values import Guard
    from sglang_audit.resolve.attention import _on_unknowns

    f = "sglang/srt/layers/attention/flashinfer_backend.py"
    raised = PyRaise(None, f, 2341)
    raised.guards = (Guard(f, 1025, "forward_batch.forward_mode.is_target_verify()", True), Guard(f, 2335, "...", True))
    test_end = {1025: 1025, 2335: 2340}.__getitem__
    assert _on_unknowns(raised, [(f, 1004), (f, 2337)], lambda file, line: test_end(line))  # an operand
    assert not _on_unknowns(raised, [(f, 1004), (f, 2231)], lambda file, line: test_end(line))  # outside both tests
    assert _on_unknowns(raised, [(f, 1025)], lambda file, line: test_end(line))
    assert not _on_unknowns(raised, [("sglang/other.py", 2337)], lambda file, line: test_end(line))
    # without the test's extent (the guard's line only) the operand at 2337 is missed
    assert not _on_unknowns(raised, [(f, 1004), (f, 2337)], lambda file, line: line)
