"""The dense linear layers SGLang builds with the model's quant config (issue 42/44): the
release's linear classes at the shapes config.json gives and the TP size, each constructor's
get_quant_method (is_layer_skipped on the prefix) and create_weights on abstract tensors, then
process_weights_after_loading; a raise with known values is SGLang's verdict on `quantization`.
Evaluated on the fixture checkout fixtures/checkouts/mini_linear and on 0.5.23."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import shared

from sglang_audit.evaluate.interpreter import Bounds, Interpreter
from sglang_audit.evaluate.values import Class, HFConfig, Instance, Unknown
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.device import Environment, parse_device
from sglang_audit.resolve.linear import evaluate_linear
from sglang_audit.resolve.pipeline import Request
from sglang_audit.world.native import NativeWorld

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_linear" / "python"
FP8 = "sglang/srt/layers/quantization/fp8.py"
# a dense model: 8 heads of 128, an MLP of 1280 (10 blocks of 128)
DENSE = {"architectures": ["MiniForCausalLM"], "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 8,
         "head_dim": 128, "intermediate_size": 1280, "num_hidden_layers": 2}
BLOCK = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def _linear(tp: int, quant_cfg: dict[str, Any], config: dict[str, Any] | None = None, quant: str | None = "fp8") -> Any:
    world = NativeWorld(parse_device("sm90"), Environment(installed=frozenset({"torch"})), [])
    interp = Interpreter(ROOT, SourceCache(use_disk=False), world, {}, Bounds())
    mc = Instance(Class("ModelConfig", (), {}, None))
    mc.attrs.update(hf_config=HFConfig({**(config or DENSE), "quantization_config": quant_cfg}, "test"), quantization=quant)
    sa = Instance(Class("ServerArgs", (), {}, None))
    sa.attrs.update(tp_size=tp, ep_size=1, enable_dp_attention=False)
    return evaluate_linear(interp, sa, mc, None).get("quantization")


def _line(path: str, text: str) -> int:
    lines = (ROOT / path).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_a_tp_shard_not_divisible_by_the_block_is_sglangs_raise():
    # TP 4: the MLP's shard is 1280 / 4 = 320, not a multiple of 128; the attention's are. The
    # raise at config.json's shapes is confirmed on the layers the model class itself builds
    v = _linear(4, BLOCK)
    assert (v.status, v.exception, v.stage) == ("unsupported", "ValueError", "linear")
    assert v.value == "ValueError: Weight output_partition_size = 320 is not divisible by weight quantization block_n = 128."
    assert v.site == f"{FP8}:{_line(FP8, 'if output_partition_size % block_n != 0:') + 1}"
    assert [s.value for s in v.chain if s.kind == "method"][:3] == ["Fp8LinearMethod"] * 3


def test_a_model_that_passes_its_attention_no_quant_config_is_answered_by_its_own_constructor():
    # 6 heads of 64 at TP 2: a q shard of 192, not a multiple of 128, at config.json's shapes; but
    # the model (gpt_oss.py's shape) builds its attention unquantized: the layers it builds resolve
    odd = {**DENSE, "architectures": ["MiniPlainAttnForCausalLM"], "num_attention_heads": 6, "num_key_value_heads": 6,
           "head_dim": 64}
    v = _linear(2, BLOCK, odd)
    assert (v.status, v.value) == ("resolved", "built: UnquantizedLinearMethod (self_attn.qkv_proj, self_attn.o_proj); "
                                               "Fp8LinearMethod (mlp.gate_up_proj, mlp.down_proj)")
    # the same shapes in a model that quantizes its attention: SGLang's raise
    v = _linear(2, BLOCK, {**odd, "architectures": ["MiniForCausalLM"]})
    assert (v.status, v.value) == ("unsupported", "ValueError: Weight output_partition_size = 192 is not divisible by "
                                                  "weight quantization block_n = 128.")


def test_a_tp_that_divides_builds_every_layer_and_prepares_its_weights():
    v = _linear(2, BLOCK)  # 1280 / 2 = 640 = 5 blocks
    assert v.status == "resolved"
    assert v.value == "built: Fp8LinearMethod (qkv_proj, o_proj, gate_up_proj, down_proj)"
    assert v.site.startswith("sglang/srt/layers/linear.py:")


def test_layers_the_checkpoint_leaves_unquantized_take_sglangs_own_skip():
    # is_layer_skipped runs on each prefix: the MLP's shards ignored -> unquantized, no block check
    ignored = {**BLOCK, "ignored_layers": ["model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj",
                                           "model.layers.0.mlp.down_proj"]}
    v = _linear(4, ignored)
    assert (v.status, v.value) == ("resolved", "built: Fp8LinearMethod (qkv_proj, o_proj); UnquantizedLinearMethod (gate_up_proj, down_proj)")
    assert v.data_dependent[0].startswith("the model's own constructor (the layers built at config.json's shapes")
    # one shard of a fused layer ignored: SGLang's own refusal
    half = {**BLOCK, "ignored_layers": ["model.layers.0.mlp.gate_proj"]}
    v = _linear(2, half)
    assert (v.status, v.exception) == ("unsupported", "ValueError")
    assert v.value == "ValueError: Detected some but not all shards of model.layers.0.mlp.gate_up_proj are quantized."


def test_a_runner_entry_no_built_layer_called_is_read_on_every_layer_the_model_builds():
    # every dense layer ignored: the forwards of the layers built at config.json's shapes call no
    # FlashInfer GEMM (rules/kernels.toml [[layer_call]] fp8_gemm_runner_backend), so the
    # model's own constructor is followed to its end: its 8 layers (2 decoder layers), each
    # constructed (is_layer_skipped on its prefix), the forward of one of each kind run
    every = [f"model.layers.{i}.{n}" for i in range(2) for n in (
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
        "mlp.down_proj")]
    v = _linear(2, {**BLOCK, "ignored_layers": every})
    assert (v.status, v.value) == ("resolved", "built: UnquantizedLinearMethod (qkv_proj, o_proj, gate_up_proj, down_proj)")
    assert (v.forward_scope, v.forward_gaps, v.kernel_calls) == ("the 8 linear layers the model's constructor builds", (), ())
    made = f"{FP8}:{_line(FP8, 'return UnquantizedLinearMethod()')}"
    assert v.layer_methods == (("UnquantizedLinearMethod", 8, made),)
    assert v.never_calls(("flashinfer",)) == (
        f"no forward of the 8 linear layers the model's constructor builds calls it: they take UnquantizedLinearMethod "
        f"(8 of them, {made})")
    # layer 1's MLP quantized: its method's forward is not one the fixture can run (no apply):
    # not followed to its end, so nothing is decided
    v = _linear(2, {**BLOCK, "ignored_layers": [p for p in every if not p.startswith("model.layers.1.mlp")]})
    assert v.forward_gaps == ("model.layers.1.mlp.gate_up_proj: no forward to run", "model.layers.1.mlp.down_proj: no forward to run")
    assert v.never_calls(("flashinfer",)) == "" and dict((m, n) for m, n, _ in v.layer_methods) == {
        "UnquantizedLinearMethod": 6, "Fp8LinearMethod": 2}


def test_no_value_for_an_unquantized_model_nor_for_shapes_the_rules_do_not_derive():
    assert _linear(4, BLOCK, quant=None) is None
    # MLA attention and routed experts: neither the standard projections nor a dense MLP. The
    # FP8 GEMM runner's entry is then read on what the model's constructor builds: at TP 4 the
    # MLP shard (320) is SGLang's refusal, so nothing is decided (the value's verdict stays unknown)
    v = _linear(4, BLOCK, {**DENSE, "kv_lora_rank": 512, "n_routed_experts": 8})
    assert (v.status, v.value, v.forward_scope) == ("unknown", None, "the 8 linear layers the model's constructor builds")
    assert v.forward_gaps[0] == ("model.layers.0.mlp.gate_up_proj's construction: raises on every branch (ValueError: "
                                 "Weight output_partition_size = 320 is not divisible by weight quantization block_n = 128. "
                                 f"at {FP8}:{_line(FP8, 'if output_partition_size % block_n != 0:') + 1})")


@pytest.mark.real_release
def test_0523_fp8_block_model_refused_at_tp8_by_validate_block_quant_shapes_and_built_at_tp4(release):
    """Qwen3-4B-FP8 (intermediate 9728, blocks of 128): at TP 8 the MLP shard is 1216 = 9.5
    blocks, and 0.5.23's Fp8LinearMethod.validate_block_quant_shapes raises; at TP 4 (2432 = 19
    blocks) every layer builds."""
    tree = release("0.5.23")
    model = str(Path(__file__).resolve().parent / "data" / "models" / "qwen3-4b-fp8")
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm90", model=model, sets=["tp_size=8"]))
    s = res.settings["quantization"]
    assert (s.status, s.layer.status, s.layer.stage) == ("unsupported", "unsupported", "linear")
    assert s.layer.value == "ValueError: Weight output_partition_size = 1216 is not divisible by weight quantization block_n = 128."
    assert s.layer.site == "sglang/srt/layers/quantization/fp8.py:606"
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm90", model=model, sets=["tp_size=4"]))
    s = res.settings["quantization"]
    assert (s.status, s.layer.status) == ("resolved", "resolved")
    assert s.layer.value == "built: Fp8LinearMethod (qkv_proj, o_proj, gate_up_proj, down_proj)"
    assert s.layer.site.startswith("sglang/srt/layers/linear.py:")


@pytest.mark.real_release
def test_0523_seed_draft_moe_block_is_followed_past_its_topk_binding(release):
    """The seed (Qwen3.5-397B-A17B-NVFP4, sm120, TP 8, NEXTN) on 0.5.23: the MTP draft's
    Qwen2MoeSparseMoeBlock calls `self.topk.bind_runner_backend(...)` (qwen2_moe.py:343), which
    reads what TopK.__init__ set (topk.py:722 `_runner_backend_bound = False`): the router is
    built for real, the block goes on to its gate (`quant_config=None`, qwen2_moe.py:352) and its
    shared expert, built with the draft's quant config, which `_mtp_quant_config` drops for this
    serialized ModelOpt checkpoint: every draft layer is unquantized."""
    tree = release("0.5.23")
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm120", model="qwen3.5-397b-a17b-nvfp4",
                                 sets=["tp_size=8", "speculative_algorithm=NEXTN", "disable_radix_cache=true"]))
    d = res.settings["quantization"].layer.draft
    assert (d.status, d.stage) == ("resolved", "linear")
    assert d.value == ("built: UnquantizedLinearMethod (mtp.layers.0.self_attn.qkv_proj, mtp.layers.0.self_attn.o_proj, "
                       "mtp.layers.0.mlp.gate, mtp.layers.0.mlp.shared_expert.gate_up_proj, "
                       "mtp.layers.0.mlp.shared_expert.down_proj)")
    assert not any("topk.py" in n for n in d.data_dependent)


def test_a_weight_preparation_cut_at_its_bound_says_that_bound(monkeypatch):
    # the weight preparation stops at MAX_PREPARE_PATHS (16) runs; two outcomes seen, neither
    # the answer: the reason names 16 (it said "more than 64", the MoE layer's bound)
    from sglang_audit import factfiles
    from sglang_audit.resolve import linear
    from sglang_audit.resolve.layerstage import Explored, Outcome, TensorBranches
    from sglang_audit.resolve.stage_common import ImportWatch

    world = NativeWorld(parse_device("sm90"), Environment(installed=frozenset({"torch"})), [])
    interp = Interpreter(ROOT, SourceCache(use_disk=False), world, {}, Bounds())
    spec = factfiles.layers()
    runs = [(Outcome("resolved", "built: A", "x.py:1"), ("x.py:1 a",)),
            (Outcome("unsupported", "ValueError: no", "x.py:2"), ("x.py:1 not (a)",))]
    monkeypatch.setattr(linear, "explore_layer", lambda i, s, run, bound: Explored(
        runs, False, bound, TensorBranches(s, {}), ImportWatch(i, ())))
    v = linear._explore_one(interp, None, Instance(Class("ModelConfig", (), {}, None)), spec, [], "mlp.down_proj")
    assert (v.status, v.stage) == ("unknown", "linear")
    assert v.reason == f"analysis bound reached: more than {linear.MAX_PREPARE_PATHS} layer branches"
    assert [c.value for c in v.candidates] == ["built: A", "unsupported: ValueError: no"]
    assert "mlp.down_proj's process_weights_after_loading beyond 16 branches (the first 2 followed)" in v.data_dependent


def _draft_linear(tp: int, target: dict[str, Any], draft: dict[str, Any], quant_cfg: dict[str, Any]) -> Any:
    world = NativeWorld(parse_device("sm90"), Environment(installed=frozenset({"torch"})), [])
    interp = Interpreter(ROOT, SourceCache(use_disk=False), world, {}, Bounds())
    configs = []
    for config in (target, draft):
        mc = Instance(Class("ModelConfig", (), {}, None))
        mc.attrs.update(hf_config=HFConfig({**config, "quantization_config": quant_cfg}, "test"), quantization="fp8")
        configs.append(mc)
    sa = Instance(Class("ServerArgs", (), {}, None))
    sa.attrs.update(tp_size=tp, ep_size=1, enable_dp_attention=False)
    return evaluate_linear(interp, sa, *configs).get("quantization")


# a target whose MLP shard divides at TP 4 (2048 / 4 = 512, 4 blocks of 128)
WIDE = {**DENSE, "intermediate_size": 2048}
NEXTN = {**DENSE, "architectures": ["MiniForCausalLMNextN"]}


def test_a_nextn_draft_whose_decoder_shard_does_not_divide_is_sglangs_raise_on_the_draft():
    # the draft class builds `model.decoder` (no `layers.0.` prefix): its layers are recorded
    # from its own construction; its MLP shard (1280 / 4 = 320) is refused, the target's builds
    v = _draft_linear(4, WIDE, NEXTN, BLOCK)
    assert (v.status, v.value) == ("resolved", "built: Fp8LinearMethod (qkv_proj, o_proj, gate_up_proj, down_proj)")
    d = v.draft
    assert (d.status, d.exception, d.stage) == ("unsupported", "ValueError", "linear")
    assert d.value == "ValueError: Weight output_partition_size = 320 is not divisible by weight quantization block_n = 128."
    assert d.site == f"{FP8}:{_line(FP8, 'if output_partition_size % block_n != 0:') + 1}"
    # at TP 2 (640 = 5 blocks) the draft's four layers build, under the prefixes the class gives
    d = _draft_linear(2, WIDE, NEXTN, BLOCK).draft
    assert (d.status, d.value) == ("resolved", "built: Fp8LinearMethod (model.decoder.self_attn.qkv_proj, "
                                               "model.decoder.self_attn.o_proj, model.decoder.mlp.gate_up_proj, "
                                               "model.decoder.mlp.down_proj)")


def test_the_quant_config_the_draft_class_drops_is_what_its_layers_get():
    # the NEXTN body drops the quant config inline: unquantized layers, no block check at TP 4
    d = _draft_linear(4, WIDE, {**NEXTN, "nextn_unquantized": True}, BLOCK).draft
    assert (d.status, d.value) == ("resolved", "built: UnquantizedLinearMethod (model.decoder.self_attn.qkv_proj, "
                                               "model.decoder.self_attn.o_proj, model.decoder.mlp.gate_up_proj, "
                                               "model.decoder.mlp.down_proj)")


def test_a_draft_of_several_decoder_layers_is_stopped_at_the_second_one_it_builds():
    # the stop is read off the construction: the second MiniDecoderLayer built in the same place
    # as the first (which built linear layers) is the next decoder layer, whatever its prefix
    mtp = {**DENSE, "architectures": ["MiniForCausalLMMTP"], "num_nextn_predict_layers": 3}
    d = _draft_linear(2, WIDE, mtp, BLOCK).draft
    assert (d.status, d.value) == ("resolved", "built: Fp8LinearMethod (mtp.layers.0.self_attn.qkv_proj, "
                                               "mtp.layers.0.self_attn.o_proj, mtp.layers.0.mlp.gate_up_proj, "
                                               "mtp.layers.0.mlp.down_proj)")


def test_a_draft_value_rides_on_a_target_that_gives_none():
    # the target's shapes are not derived (MLA): its value says it is not evaluated, the draft's is built
    mla = {**WIDE, "kv_lora_rank": 512, "n_routed_experts": 8}
    v = _draft_linear(4, mla, NEXTN, BLOCK)
    assert (v.status, v.stage) == ("unknown", "linear")
    assert v.reason.startswith("the target model's dense linear layers are not evaluated")
    assert (v.draft.status, v.draft.exception) == ("unsupported", "ValueError")


def test_the_attention_tp_size_a_worker_knows_without_dp_attention():
    # what models pass their attention (and MTP/NEXTN) linear layers: rules/layers.toml's
    # process value, SGLang's compute_dp_attention_world_info with attn_dp_size 1; with DP
    # attention it is not known (the rank's DP group is not modelled)
    from sglang_audit import factfiles
    from sglang_audit.resolve.stage_common import process_value

    expr = factfiles.layers().moe.process_values["get_attn_tensor_model_parallel_world_size"]
    sa = Instance(Class("ServerArgs", (), {}, None))
    sa.attrs.update(tp_size=8, attn_cp_size=2, enable_dp_attention=False)
    assert process_value(expr, sa) == 4
    sa.attrs.update(enable_dp_attention=True)
    assert isinstance(process_value(expr, sa), Unknown)


def test_a_draft_evaluation_cut_by_the_budget_keeps_the_targets_value(monkeypatch):
    # the stage's CPU budget is shared: spent on the draft, it costs the draft's value only
    from sglang_audit.evaluate.values import AnalysisBound
    from sglang_audit.resolve import linear

    def spent(*args: Any) -> Any:
        raise AnalysisBound("analysis bound reached: CPU budget")
    monkeypatch.setattr(linear, "_draft_value", spent)
    v = _draft_linear(2, WIDE, NEXTN, BLOCK)
    assert (v.status, v.value) == ("resolved", "built: Fp8LinearMethod (qkv_proj, o_proj, gate_up_proj, down_proj)")
    assert (v.draft.status, v.draft.reason) == ("unknown", "the draft's linear layer evaluation failed "
                                                           "(AnalysisBound: analysis bound reached: CPU budget)")


def test_a_submodule_whose_method_the_block_calls_is_built_for_real_first(monkeypatch):
    # 0.5.23 qwen2_moe.py's shape: the MoE block calls `self.topk.bind_runner_backend(...)`, which
    # reads `_runner_backend_bound` set by TopK.__init__: the stand-in router is built with the
    # arguments the block gave it, the block goes on to its gate and shared expert. A submodule
    # whose constructor stops stays a stand-in (MiniUnbuildable), the block still goes on
    moe_mtp = {**DENSE, "architectures": ["MiniForCausalLMMTP"], "num_nextn_predict_layers": 1, "num_experts": 4,
               "num_experts_per_tok": 2}
    built = ("resolved", "built: Fp8LinearMethod (mtp.layers.0.self_attn.qkv_proj, mtp.layers.0.self_attn.o_proj, "
                         "mtp.layers.0.mlp.shared_expert.gate_up_proj, mtp.layers.0.mlp.shared_expert.down_proj); "
                         "UnquantizedLinearMethod (mtp.layers.0.mlp.gate)")
    d = _draft_linear(2, WIDE, moe_mtp, BLOCK).draft
    assert (d.status, d.value) == built
    # without the construction the router's state is unknown and the block stops at its raise
    from sglang_audit.resolve import layerstage

    monkeypatch.setattr(layerstage, "_construct", lambda *a: None)
    d = _draft_linear(2, WIDE, moe_mtp, BLOCK).draft
    assert "mtp.layers.0.mlp.gate" not in d.value
    assert any("TopK cannot bind a different MoE runner backend." in n for n in d.data_dependent)
