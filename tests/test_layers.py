"""The MoE layers SGLang builds (issue 16): quant method selection, runner creation,
attribute-dependent dispatch and the raises the layer code hits, evaluated (never executed)
on the fixture checkout fixtures/checkouts/mini_layers and on real releases; SGA209/SGA210
must agree with the evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import shared

import sglang_audit.resolve.layers as layers_mod
from sglang_audit.evaluate.interpreter import Bounds, Interpreter
from sglang_audit.evaluate.values import Class, HFConfig, Instance
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.device import Environment, parse_device
from sglang_audit.resolve.layers import evaluate_layers
from sglang_audit.resolve.pipeline import Request
from sglang_audit.result import LayerValue
from sglang_audit.rules.knownbad import check_resolution, load_rules
from sglang_audit.world.native import NativeWorld

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_layers" / "python"
FP4 = "sglang/srt/layers/quantization/fp4q.py"
TEXT = {"num_experts": 8, "hidden_size": 256, "moe_intermediate_size": 128, "num_experts_per_tok": 2}


def _interp(arch: str, backend: str, speculative: str | None = None, env: Environment | None = None,
            a2a: str = "none", deepep_mode: str = "auto") -> Interpreter:
    world = NativeWorld(parse_device(arch), env or Environment(installed=frozenset({"torch", "flashinfer"})), [])
    interp = Interpreter(ROOT, SourceCache(use_disk=False), world, {}, Bounds())
    utils = interp.load_module("sglang.srt.layers.moe.utils")
    interp.call(interp.getattr(utils, "initialize_moe_config"), [backend, speculative, a2a, deepep_mode], {})
    return interp


def _config(quant: str | None, quant_cfg: dict[str, Any] | None = None, arch: str = "MiniForCausalLM") -> Instance:
    # the text model's keys at the top too: a draft's body reads them from the config it is given
    data: dict[str, Any] = {"architectures": [arch], "text_config": TEXT, **TEXT, "num_attention_heads": 8}
    if quant_cfg is not None:
        data["quantization_config"] = quant_cfg
    mc = Instance(Class("ModelConfig", (), {}, None))
    mc.attrs.update(hf_config=HFConfig(data, "test"), quantization=quant)
    return mc


def _server_args() -> Instance:
    sa = Instance(Class("ServerArgs", (), {}, None))
    sa.attrs.update(tp_size=1, ep_size=1)
    return sa


def _layer(arch: str, backend: str, quant_cfg: dict[str, Any] | None = None, quant: str | None = "fp4q") -> LayerValue:
    interp = _interp(arch, backend)
    out = evaluate_layers(interp, _server_args(), _config(quant, quant_cfg if quant_cfg is not None else {}), None)
    return out["moe_runner_backend"]


def _line(path: str, text: str) -> int:
    lines = (ROOT / path).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


# ---- quant method selection --------------------------------------------------------------
def test_quant_method_is_picked_by_the_quant_configs_get_quant_method():
    v = _layer("sm100", "flashinfer_trtllm")
    assert v.method == "Fp4MoEMethod"
    step = v.chain[0]
    assert (step.kind, step.value, step.file) == ("method", "Fp4MoEMethod", "sglang/srt/layers/moe/fused_moe_triton/layer.py")


def test_an_excluded_prefix_falls_back_to_the_unquantized_method_and_triton():
    v = _layer("sm100", "auto", {"ignore": ["model.layers"]})
    assert (v.status, v.method, v.runner) == ("resolved", "UnquantizedFusedMoEMethod", "triton")
    assert v.value.startswith("Triton")
    assert "invoke_fused_moe_kernel at sglang/srt/layers/moe/moe_runner/triton.py:" in v.code


def test_an_unquantized_model_builds_the_unquantized_method():
    v = _layer("sm100", "auto", quant=None)
    assert v.method == "UnquantizedFusedMoEMethod" and v.status == "resolved"


# ---- runner creation ----------------------------------------------------------------------
def test_auto_becomes_trtllm_in_create_moe_runner_and_apply_raises_sglangs_message():
    """0.5.16's shape: the runner is FLASHINFER_TRTLLM, apply() dispatches on the __init__ flag
    (False for auto) and ends in NotImplementedError — SGA209's outcome, found by evaluation."""
    v = _layer("sm120", "auto")
    assert (v.status, v.runner, v.exception) == ("unsupported", "flashinfer_trtllm", "NotImplementedError")
    assert v.value == ("NotImplementedError: Unsupported moe_runner_backend for NVFP4 MoE: MoeRunnerBackend.FLASHINFER_TRTLLM. "
                       "Use --moe-runner-backend flashinfer_cutlass instead.")
    final = next(i for i, line in enumerate((ROOT / FP4).read_text().splitlines(), 1) if line.strip() == "raise NotImplementedError(")
    assert v.site == f"{FP4}:{final}"
    runner = next(s for s in v.chain if s.kind == "runner")
    assert (runner.file, runner.line) == (FP4, _line(FP4, "self.runner = MoeRunner(moe_runner_backend"))


def test_a_raise_in_create_moe_runner_is_the_verdict():
    v = _layer("sm90", "auto")  # (8,0) <= capability < (10,0) -> MARLIN -> raise
    assert v.status == "unsupported"
    assert v.value == "NotImplementedError: moe_runner_backend=marlin is not supported for FP4 MoE."
    marlin = _line(FP4, 'raise NotImplementedError("moe_runner_backend=marlin')
    assert v.site == f"{FP4}:{marlin}"


def test_the_runner_registry_filled_by_imports_is_a_boundary_not_a_failure():
    # MoeRunner.__init__ raises when its registry is empty (as in any stand-in run): the tool
    # must not report that (session 1's false "unsupported")
    v = _layer("sm100", "flashinfer_trtllm")
    assert "requires a fused func" not in (v.value or "") + v.reason


# ---- the all-to-all backend's class and dispatch formats (issue 42) ---------------------------
EP = "sglang/srt/layers/moe/ep_moe/layer.py"


def _a2a_layer(a2a: str, mode: str) -> LayerValue:
    interp = _interp("sm90", "auto", a2a=a2a, deepep_mode=mode)
    return evaluate_layers(interp, _server_args(), _config(None), None)["moe_runner_backend"]


def test_without_an_all_to_all_the_layer_is_fusedmoe_on_the_standard_dispatch():
    v = _a2a_layer("none", "auto")
    assert (v.status, v.value, v.runner) == ("resolved", "Triton fused_moe_kernel (SGLang's Triton MoE)", "triton")
    assert not any("DeepEP" in d for d in v.data_dependent)


def test_deepep_low_latency_runs_deepepmoe_on_the_ll_format_and_reaches_the_kernel():
    v = _a2a_layer("deepep", "low_latency")
    assert (v.status, v.value, v.runner) == ("resolved", "Triton fused_moe_kernel (SGLang's Triton MoE)", "triton")


def test_deepep_normal_format_refused_by_deepepmoe_is_the_verdict_with_its_line():
    v = _a2a_layer("deepep", "normal")  # one format: SGLang's raise as it is
    assert v.status == "unsupported"
    assert v.value == "NotImplementedError: Unquantized DeepEP MoE currently supports low_latency mode only"
    assert v.site == f"{EP}:{_line(EP, 'raise NotImplementedError(')}"


def test_deepep_auto_sees_both_formats_and_a_refused_one_fails_the_layer():
    v = _a2a_layer("deepep", "auto")  # prefill batches normal, decode batches low-latency
    assert v.status == "unsupported"
    assert v.value == ("NotImplementedError: Unquantized DeepEP MoE currently supports low_latency mode only "
                       "(on the DeepEP normal dispatch (prefill batches))")
    assert v.site == f"{EP}:{_line(EP, 'raise NotImplementedError(')}"
    assert "DeepEP low-latency dispatch (decode batches): resolved: Triton fused_moe_kernel (SGLang's Triton MoE)" \
        in " ".join(v.data_dependent)


MOONCAKE = "sglang/srt/layers/moe/token_dispatcher/mooncake.py"


def test_another_all_to_all_runs_the_layer_on_the_output_its_dispatcher_returns():
    """--moe-a2a-backend mooncake: not DeepEP's formats, not the standard output, but the class
    the implementation the built dispatcher picks returns (MooncakeDispatchOutput, the DeepEP
    low-latency format), which DeepEPMoE's own check lets through to the kernel, per batch kind."""
    v = _a2a_layer("mooncake", "low_latency")
    assert (v.status, v.value, v.runner) == ("resolved", "Triton fused_moe_kernel (SGLang's Triton MoE)", "triton")
    step = next(s for s in v.chain if s.kind == "dispatch")
    assert (step.file, step.line, step.value) == (MOONCAKE, _line(MOONCAKE, "output = MooncakeDispatchOutput("), "MooncakeDispatchOutput")
    assert step.code == "_MooncakeEPDispatcherImpl.dispatch_b(...) returns MooncakeDispatchOutput(...) on prefill batches"
    assert [d.split(":")[0] for d in v.data_dependent] == ["prefill batches", "decode batches"]


def test_another_all_to_all_refusing_a_mode_when_built_is_the_verdict():
    v = _a2a_layer("mooncake", "auto")  # MooncakeEPDispatcher.__init__ refuses normal mode
    assert (v.status, v.value) == ("unsupported", "NotImplementedError: Normal mode is not supported for Mooncake EP yet.")
    assert v.site == f"{MOONCAKE}:{_line(MOONCAKE, 'raise NotImplementedError(')}"


def test_a_dispatcher_whose_output_class_is_not_one_named_class_leaves_the_layer_unknown():
    """FlashinferDispatcher.dispatch returns its own output or another method's: never the
    standard output's verdict, unknown with the line of the return it cannot name."""
    v = _a2a_layer("flashinfer", "auto")
    fi = "sglang/srt/layers/moe/token_dispatcher/flashinfer.py"
    assert (v.status, v.value) == ("unknown", None)
    assert v.reason == (f"which dispatch output FlashinferDispatcher.dispatch ({fi}:{_line(fi, 'def dispatch(')}) returns: "
                        f"a return that constructs no class by name at line {_line(fi, 'return self._dispatch_prefill_allgather')}")


def test_an_all_to_all_whose_built_dispatcher_is_the_standard_one_gets_the_standard_output_once():
    v = _a2a_layer("megamoe", "auto")  # create_moe_dispatcher builds StandardDispatcher for it
    assert (v.status, v.value) == ("resolved", "Triton fused_moe_kernel (SGLang's Triton MoE)")
    assert not v.data_dependent and not any(s.kind == "dispatch" for s in v.chain)


# ---- attribute-dependent dispatch ----------------------------------------------------------
def test_trtllm_weights_prepared_then_apply_reaches_the_trtllm_entry_point():
    v = _layer("sm100", "flashinfer_trtllm")
    assert (v.status, v.value) == ("resolved", "FlashInfer trtllm_fp4_block_scale_moe")
    assert v.site == f"{FP4}:{_line(FP4, 'return self.runner.run(dispatch_output, quant_info)')}"
    branch = [s for s in v.chain if s.kind == "branch"]
    assert branch and branch[-1].guard == 'self.enable_flashinfer_trtllm_moe and hasattr(layer, "g1_scale_c")'
    # the weights are abstract tensors (issue 41): the assert on the scale's dtype and the
    # branch on its rank are decided from create_weights' shapes and dtypes, not assumed
    assert not any("Weight Blockscale" in d or "float8_e4m3fn" in d for d in v.data_dependent)
    assert v.paths == 1
    # apply() imports the TRT-LLM runner module, which imports flashinfer: the state is said
    assert v.assumptions == ("flashinfer: installed (a plain install of this release has it; --without flashinfer evaluates its absence)",)


def test_cutlass_branch_calls_the_flashinfer_entry_point():
    v = _layer("sm120", "flashinfer_cutlass")
    assert (v.status, v.value) == ("resolved", "FlashInfer cutlass_fused_moe")
    assert v.site == f"{FP4}:{_line(FP4, 'return flashinfer_cutlass_fused_moe(') }"


def test_unregistered_attribute_on_the_cached_backend_path_is_an_attribute_error_at_its_line():
    """0.5.23's shape (SGA210): apply() takes the TRT-LLM branch on the cached backend but the
    weights were prepared on the __init__ flag: layer.g1_scale_c was never registered."""
    v = _layer("sm120", "auto", {"cached": True})
    assert (v.status, v.exception) == ("unsupported", "AttributeError")
    assert v.value == "AttributeError: 'FusedMoE' object has no attribute 'g1_scale_c'"
    assert v.site == f"{FP4}:{_line(FP4, 'g1_scale_c=layer.g1_scale_c.data,')}"


def test_a_branch_decided_by_tensor_values_stays_unknown_with_both_kernels():
    v = _layer("sm120", "flashinfer_cutlass", {"cached": True})
    assert v.status == "unknown" and v.value is None
    assert sorted(c.value for c in v.candidates) == ["FlashInfer cutlass_fused_moe", "sgl-kernel cutlass_moe_fp4"]
    assert all(any("hidden_states.shape[0] > 1024" in w for w in c.when) for c in v.candidates)


def test_without_flashinfer_the_cutlass_branch_calls_none_and_says_so():
    interp = _interp("sm120", "flashinfer_cutlass", env=Environment(installed=frozenset({"torch"}), missing=frozenset({"flashinfer"})))
    v = evaluate_layers(interp, _server_args(), _config("fp4q", {}), None)["moe_runner_backend"]
    # apply() imports the TRT-LLM runner module first, which imports flashinfer: no branch
    # gets past that import, which is not SGLang's verdict (a failing import is taken as a
    # branch the real run does not take) and the reason says so; the absent package is named
    # as the assumption that decided it. (Before abstract tensors a second path, opened by a
    # branch on the scale's rank, re-imported the half-loaded module and called None.)
    assert v.status == "unknown" and "No module named 'flashinfer.fused_moe'" in v.reason
    assert v.assumptions == ("flashinfer: absent (--without flashinfer)",)


# ---- constructor asserts, process state, import-time asserts -------------------------------
def test_process_state_asserts_are_not_verdicts_and_sizes_come_from_server_args():
    v = _layer("sm100", "flashinfer_trtllm")
    assert v.status == "resolved"  # parallel_state's asserts never fire; num_experts % ep_size decided


def test_constructor_assert_on_known_sizes_is_a_verdict():
    interp = _interp("sm100", "flashinfer_trtllm")
    sa = _server_args()
    sa.attrs["ep_size"] = 3  # 8 experts over 3 ranks: FusedMoE.__init__'s assert fails
    v = evaluate_layers(interp, sa, _config("fp4q", {}), None)["moe_runner_backend"]
    assert (v.status, v.exception) == ("unsupported", "AssertionError")
    assert v.site == f"sglang/srt/layers/moe/fused_moe_triton/layer.py:{_line('sglang/srt/layers/moe/fused_moe_triton/layer.py', 'assert num_experts % self.moe_ep_size')}"


def test_no_layer_value_for_a_dense_model():
    interp = _interp("sm100", "auto")
    mc = _config(None)
    mc.attrs["hf_config"] = HFConfig({"architectures": ["Dense"], "hidden_size": 8}, "t")
    assert evaluate_layers(interp, _server_args(), mc, None) == {}


def test_resolver_decisions_are_untouched_by_layer_branches():
    interp = _interp("sm100", "flashinfer_trtllm")
    evaluate_layers(interp, _server_args(), _config("fp4q", {}), None)
    assert interp.new_decisions == [] and interp.call_hook is None


# ---- the draft model -----------------------------------------------------------------------
def test_draft_drops_its_quant_config_and_uses_the_speculative_backend():
    interp = _interp("sm100", "flashinfer_trtllm", speculative="triton")
    out = evaluate_layers(interp, _server_args(), _config("fp4q", {}), _config("fp4q", {}, arch="MiniForCausalLMMTP"))
    target, draft = out["moe_runner_backend"], out["speculative_moe_runner_backend"]
    assert target.value == "FlashInfer trtllm_fp4_block_scale_moe"
    # the class is found in the registry (EntryClass), its __init__ evaluated: the inline
    # drop, the process state read (get_parallel().pp_group) and a submodule it builds first
    # (MiniNorm, whose __init__ would raise) do not stop it
    assert (draft.method, draft.runner, draft.status) == ("UnquantizedFusedMoEMethod", "triton", "resolved")
    drop = next(s for s in draft.chain if s.kind == "draft")
    assert drop.file == "sglang/srt/models/mini_mtp.py" and drop.guard == 'quant_config and quant_config.get_name() == "fp4q"'
    assert (drop.line, drop.code, drop.value) == (_line("sglang/srt/models/mini_mtp.py", "if quant_config and"), "quant_config = None", None)
    # the swap is undone: the target's backend is back
    utils = interp.load_module("sglang.srt.layers.moe.utils")
    assert utils.globals["MOE_RUNNER_BACKEND"].attrs["_value_"] == "flashinfer_trtllm"
    assert interp.call_hook is None


@pytest.mark.parametrize("cached, method", [(False, "UnquantizedFusedMoEMethod"), (True, "Fp4CachedMoEMethod")])
def test_a_draft_class_no_fact_file_names_is_derived_and_its_helper_evaluated(cached, method):
    # MiniHelperMTP is named nowhere in rules/: the registry finds it, and the quant config
    # is what its module-level helper returns (0.5.18+ qwen3_5_mtp.py's _mtp_quant_config shape)
    assert "MiniHelperMTP" not in "".join(p.read_text() for p in (Path(layers_mod.__file__).parents[2] / "rules").glob("*.toml"))
    interp = _interp("sm100", "flashinfer_trtllm", speculative="triton")
    out = evaluate_layers(interp, _server_args(), _config("fp4q", {}), _config("fp4q", {"cached": cached}, arch="MiniHelperMTP"))
    draft = out["speculative_moe_runner_backend"]
    assert draft.method == method
    steps = [s for s in draft.chain if s.kind == "draft"]
    if cached:
        assert steps == []  # the target's quant config is passed on: no step of its own
    else:
        assert (steps[0].file, steps[0].line) == ("sglang/srt/models/mini_helper_mtp.py", _line("sglang/srt/models/mini_helper_mtp.py", "if quant_config and"))
        assert steps[0].code.startswith("_mtp_quant_config() returns None")


def test_a_body_that_drops_the_quant_config_below_the_draft_class_is_followed_to_the_moe_layer():
    # DeepseekV3ForCausalLMNextN passes the NVFP4 config on; DeepseekModelNextN drops it: the
    # MoE layer gets None (the first body's argument alone said NVFP4). Its sibling attention
    # module stops on a size the tool does not know, and is a stand-in.
    interp = _interp("sm100", "flashinfer_trtllm", speculative="triton")
    out = evaluate_layers(interp, _server_args(), _config("fp4q", {}), _config("fp4q", {}, arch="MiniNextN"))
    draft = out["speculative_moe_runner_backend"]
    assert (draft.status, draft.method, draft.runner) == ("resolved", "UnquantizedFusedMoEMethod", "triton")
    (drop,) = [s for s in draft.chain if s.kind == "draft"]
    assert (drop.file, drop.line) == ("sglang/srt/models/mini_body.py", _line("sglang/srt/models/mini_body.py", "if quant_config is not None"))
    assert drop.code.startswith("quant_config = None") and drop.value is None
    assert interp.call_hook is None and interp.new_decisions == []  # the descent's branches stay its own


@pytest.mark.parametrize("arch, reason", [
    ("MiniUnregisteredMTP", "no class named MiniUnregisteredMTP in the release's model registry"),
    ("MiniNoBodyMTP", "MiniNoBodyMTP.__init__ built no MoE layer (FusedMoE)"),
])
def test_a_draft_whose_quant_config_cannot_be_followed_is_unknown_with_the_reason(arch, reason):
    interp = _interp("sm100", "flashinfer_trtllm", speculative="triton")
    draft = evaluate_layers(interp, _server_args(), _config("fp4q", {}), _config("fp4q", {}, arch=arch))["speculative_moe_runner_backend"]
    assert draft.status == "unknown" and reason in draft.reason


# ---- real releases (derived by reading; the tool must agree) ---------------------------------
RULES = load_rules()
NEXTN = ["tp_size=8", "speculative_algorithm=NEXTN", "speculative_num_steps=3",
         "speculative_eagle_topk=1", "speculative_num_draft_tokens=4"]
MQ = "sglang/srt/layers/quantization/modelopt_quant.py"


def _findings(res):
    return {f.rule_id: f for f in check_resolution(res, RULES).findings}


def _run(release, version: str, arch: str, model: str, sets: list[str]):
    tree = release(version)
    return shared.resolve(Request(source=str(tree.package_dir), arch=arch, model=model, sets=sets))


@pytest.mark.real_release
def test_0510_sm120_qwen35_target_cutlass_moe_fp4_and_bf16_draft_triton(release):
    res = _run(release, "0.5.10", "sm120", "qwen3.5-397b-a17b-nvfp4", [*NEXTN, "disable_radix_cache=true"])
    moe = res.settings["moe_runner_backend"]
    assert moe.runtime == "auto" and moe.status == "resolved"
    # auto: no TRT-LLM flag, no shuffled weights, no cutlass flag -> sgl-kernel cutlass_moe_fp4
    assert (moe.layer.status, moe.layer.value, moe.layer.site) == ("resolved", "sgl-kernel cutlass_moe_fp4", f"{MQ}:2020")
    assert moe.layer.method == "ModelOptNvFp4FusedMoEMethod" and moe.layer.runner == ""
    draft = res.settings["speculative_moe_runner_backend"].layer
    # Qwen3_5ForCausalLMMTP drops the modelopt_fp4 quant config -> unquantized -> Triton runner
    assert (draft.method, draft.runner, draft.site) == ("UnquantizedFusedMoEMethod", "triton", "sglang/srt/layers/quantization/unquant.py:493")
    drop = next(s for s in draft.chain if s.kind == "draft")
    assert (drop.file, drop.line) == ("sglang/srt/models/qwen3_5_mtp.py", 54)


@pytest.mark.real_release
def test_0516_sm120_qwen35_auto_raises_not_implemented_found_by_evaluation(release):
    res = _run(release, "0.5.16", "sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8"])
    moe = res.settings["moe_runner_backend"]
    assert (moe.config, moe.runtime, moe.status) == ("auto", "auto", "unsupported")
    layer = moe.layer
    assert (layer.status, layer.site, layer.runner) == ("unsupported", f"{MQ}:2621", "flashinfer_trtllm")
    assert layer.value == ("NotImplementedError: Unsupported moe_runner_backend for NVFP4 MoE: MoeRunnerBackend.FLASHINFER_TRTLLM. "
                           "Use --moe-runner-backend flashinfer_cutlass instead.")
    runner = next(s for s in layer.chain if s.kind == "runner")
    assert (runner.file, runner.line) == (MQ, 2458)
    # the rule agrees, on the same lines
    found = _findings(res)
    assert "SGA209" in found
    lines = {e.fingerprint: e.line for e in found["SGA209"].code}
    assert lines["apply_final_not_implemented"] == int(layer.site.rsplit(":", 1)[1])
    # and check reports the evaluation's own verdict, with SGLang's message and line
    derived = found["SGA003"]
    assert derived.setting == "moe_runner_backend" and derived.severity == "error"
    assert layer.value in derived.message and f"at {MQ}:2621" in derived.message
    assert [(e.file, e.line) for e in derived.code] == [(MQ, 2621)]


@pytest.mark.real_release
def test_a_raise_that_rests_on_an_absent_optional_package_is_a_warning_that_says_so(release):
    """0.5.16 SM90 DeepSeek-V3 FP8 with --moe-a2a-backend deepep: the dispatcher raises
    "DeepEP is not installed" because a plain install lacks deep_ep (sglang#32843's table ran
    this deployment with DeepEP present). The assumption is recorded, the other state is
    evaluated, and SGA003 is a warning naming both, not an error."""
    res = _run(release, "0.5.16", "sm90", "deepseek-v3-fp8", ["tp_size=4", "moe_a2a_backend=deepep", "fp8_gemm_runner_backend=triton"])
    layer = res.settings["moe_runner_backend"].layer
    assert layer.status == "unsupported" and layer.value.startswith("ImportError: DeepEP is not installed")
    assert any(a.startswith("deep_ep: absent (a plain install") for a in layer.assumptions)
    assert layer.unsettled_absences == ("deep_ep",)
    assert layer.fork_outcome("deep_ep") is not None and not layer.fork_outcome("deep_ep").startswith("unsupported: ImportError: DeepEP")
    derived = _findings(res)["SGA003"]
    assert (derived.severity, derived.confidence) == ("warning", "medium")
    assert "assuming deep_ep not installed" in derived.message and "with deep_ep installed: " in derived.message
    assert derived.fix.startswith("Install deep_ep")


def test_sga003_is_an_error_when_the_other_state_fails_the_same_way():
    from sglang_audit.result import Resolution, Setting
    from sglang_audit.rules.knownbad import layer_findings

    def one(forks: tuple[str, ...], value: str = "ValueError: no", exception: str = "ValueError") -> Any:
        lv = LayerValue("unsupported", value, site="a.py:3", exception=exception,
                        assumptions=("kt_kernel: absent (a plain install of this release lacks it; --with kt_kernel evaluates it installed)",),
                        forks=forks)
        s = Setting("moe_runner_backend", "auto", "auto", "unsupported", layer=lv)
        res = Resolution({"version": "9.9"}, "E", {"arch": "sm90"}, None, {}, {}, None, {"moe_runner_backend": s})
        (f,) = layer_findings(res)
        return f

    same = one(("with kt_kernel installed (--with kt_kernel): unsupported: ValueError: no at a.py:3 (the same outcome)",))
    assert (same.severity, same.confidence) == ("error", "high") and "assuming" not in same.message
    # installed, SGLang refuses it another way (DeepEPMoE's own raise): it fails either way
    both = one(("with kt_kernel installed (--with kt_kernel): unsupported: NotImplementedError: other at c.py:5",))
    assert (both.severity, both.confidence) == ("error", "high")
    assert both.message.endswith(" — and with kt_kernel installed: unsupported: NotImplementedError: other at c.py:5")
    differs = one(("with kt_kernel installed (--with kt_kernel): resolved: k at b.py:9",))
    assert differs.severity == "warning" and "with kt_kernel installed: resolved: k at b.py:9" in differs.message
    # the other state not evaluated (explain): a raise that is not about a missing module stays an error
    assert one(()).severity == "error"
    missing = one((), "ModuleNotFoundError: No module named 'kt_kernel.x'", "ModuleNotFoundError")
    assert missing.severity == "warning" and "not evaluated (--with kt_kernel)" in missing.message


@pytest.mark.real_release
def test_0516_sm120_with_quantization_flag_is_pinned_and_the_layer_runs_cutlass(release):
    res = _run(release, "0.5.16", "sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8", "quantization=modelopt_fp4"])
    moe = res.settings["moe_runner_backend"]
    assert moe.config == "flashinfer_cutlass" and moe.layer.status == "resolved"
    assert moe.layer.value == "FlashInfer cutlass_fused_moe"
    assert not {"SGA209", "SGA003"} & set(_findings(res))


@pytest.mark.real_release
def test_explain_shows_which_forced_choices_fail_in_the_layers(release):
    """explain's per-choice outcome carries the layer verdict resolve and check report:
    on 0.5.16 SM120 (NVFP4, no --quantization) only flashinfer_cutlass builds layers that run."""
    from sglang_audit.analyses.explain import OUTCOME_LAYERS_FAIL, explain

    release("0.5.16")
    exp = explain(Request(source="sglang==0.5.16", arch="sm120", model="qwen3.5-397b-a17b-nvfp4", sets=["tp_size=8"],
                          flashinfer_source="none"), "moe_runner_backend")
    by = {c.choice: c for c in exp.choices}
    assert by["triton"].outcome == OUTCOME_LAYERS_FAIL
    assert by["triton"].note == ("NotImplementedError: Unsupported moe_runner_backend for NVFP4 MoE: MoeRunnerBackend.TRITON. "
                                 f"Use --moe-runner-backend flashinfer_cutlass instead. at {MQ}:2621")
    assert by["cutlass"].outcome == OUTCOME_LAYERS_FAIL and by["cutlass"].note.endswith(f"{MQ}:2453")
    assert by["flashinfer_cutlass"].outcome == "accepted"


@pytest.mark.real_release
def test_0523_sm120_qwen35_auto_and_modelopt_fp4(release):
    res = _run(release, "0.5.23", "sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8"])
    layer = res.settings["moe_runner_backend"].layer
    assert (layer.status, layer.exception, layer.site) == ("unsupported", "AttributeError", f"{MQ}:3260")
    assert layer.value == "AttributeError: 'FusedMoE' object has no attribute 'g1_scale_c'"
    found = _findings(res)
    assert "SGA210" in found and {e.fingerprint: e.line for e in found["SGA210"].code}["reads_g1_scale_c"] == 3260

    res = _run(release, "0.5.23", "sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8", "quantization=modelopt_fp4"])
    layer = res.settings["moe_runner_backend"].layer
    assert (layer.status, layer.value, layer.runner, layer.site) == (
        "resolved", "FlashInfer cutlass_fused_moe", "flashinfer_cutlass", f"{MQ}:3364")
    assert "SGA210" not in _findings(res)


@pytest.mark.real_release
def test_0510_sm100_deepseek_r1_trtllm_reaches_trtllm_fp4_block_scale_moe(release):
    res = _run(release, "0.5.10", "sm100", "deepseek-r1-nvfp4", ["tp_size=8"])
    moe = res.settings["moe_runner_backend"]
    assert moe.config == "flashinfer_trtllm"
    layer = moe.layer
    assert (layer.status, layer.value, layer.site) == ("resolved", "FlashInfer trtllm_fp4_block_scale_moe", f"{MQ}:1954")
    assert "trtllm_fp4_block_scale_moe at sglang/srt/layers/moe/moe_runner/flashinfer_trtllm.py:659" in layer.code
    assert [s.guard for s in layer.chain if s.kind == "branch"][-1] == 'hasattr(layer, "gemm1_weights_fp4_shuffled")'
    assert layer.assumptions == ("flashinfer: installed (a plain install of this release has it; --without flashinfer evaluates its absence)",)


@pytest.mark.real_release
def test_diff_0515_to_0516_reports_the_new_layer_failure(release):
    from sglang_audit.analyses.diff import Deployment, diff_releases

    old, new = release("0.5.15"), release("0.5.16")
    dep = Deployment(name="", arch="sm120", model="qwen3.5-397b-a17b-nvfp4", sets=("tp_size=8",))
    d = diff_releases(str(old.package_dir), str(new.package_dir), [dep]).deployments[0]
    # the evaluation's own verdict (SGA003) and the rule that describes it (SGA209), both new
    assert [f.rule_id for f in d.findings_added] == ["SGA003", "SGA209"] and d.status == "changed"


@pytest.mark.real_release
@pytest.mark.parametrize("version, expected", [
    ("0.5.15", ("resolved", "sgl-kernel cutlass_moe_fp4", set())),  # fallback, no rule
    ("0.5.19", ("unsupported", "NotImplementedError", {"SGA209"})),
])
def test_evaluation_and_rules_agree_across_releases(release, version, expected):
    """SGA209 fires exactly where evaluation finds the NotImplementedError, SGA210 exactly
    where it finds the AttributeError (0.5.16 and 0.5.23 are checked above)."""
    res = _run(release, version, "sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8"])
    layer = res.settings["moe_runner_backend"].layer
    status, what, rules = expected
    assert layer.status == status
    assert (layer.value if status == "resolved" else layer.exception) == what
    found = set(_findings(res)) & {"SGA209", "SGA210"}
    assert found == rules
    assert ("SGA209" in found) == (layer.exception == "NotImplementedError")
    assert ("SGA210" in found) == (layer.exception == "AttributeError")


def test_a_draft_class_missing_from_the_registry_is_unknown_not_guessed():
    interp = _interp("sm100", "flashinfer_trtllm")
    out = evaluate_layers(interp, _server_args(), _config("fp4q", {}), _config("fp4q", {}, arch="OtherNextN"))
    draft = out["speculative_moe_runner_backend"]
    assert draft.status == "unknown" and "no class named OtherNextN in the release's model registry" in draft.reason
    assert out["moe_runner_backend"].status == "resolved"


@pytest.mark.real_release
@pytest.mark.parametrize("version", ["0.5.17", "0.5.18", "0.5.23"])
def test_qwen35_mtp_draft_is_built_bf16_as_its_constructor_passes(release, version):
    # 0.5.10-0.5.17 drop the NVFP4 quant config inline; 0.5.18+ through _mtp_quant_config
    # (serialized modelopt_fp4 -> None): either way the draft's experts are BF16 (issue 39)
    res = _run(release, version, "sm120", "qwen3.5-397b-a17b-nvfp4", NEXTN)
    draft = res.settings["speculative_moe_runner_backend"].layer
    assert (draft.status, draft.method, draft.runner) == ("resolved", "UnquantizedFusedMoEMethod", "triton")
    drop = next(s for s in draft.chain if s.kind == "draft")
    assert drop.file == "sglang/srt/models/qwen3_5_mtp.py" and drop.value is None
    assert "modelopt_fp4" in drop.guard
    if version != "0.5.17":
        assert drop.code.startswith("_mtp_quant_config() returns None")
    found = _findings(res)
    assert "SGA003" not in found or "draft" not in found["SGA003"].message


@pytest.mark.real_release
@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_deepseek_nextn_draft_of_an_nvfp4_checkpoint_is_built_bf16_below_its_class(release, version):
    # DeepseekV3ForCausalLMNextN passes the modelopt_fp4 config to DeepseekModelNextN, whose
    # __init__ drops it (deepseek_nextn.py "Overriding DeepseekV3ForCausalLMNextN quant config
    # for modelopt_fp4"): the draft's experts are BF16 (the first body's argument said NVFP4)
    res = _run(release, version, "sm120", "deepseek-r1-nvfp4", NEXTN)
    draft = res.settings["speculative_moe_runner_backend"].layer
    assert (draft.status, draft.method) == ("resolved", "UnquantizedFusedMoEMethod")
    (drop,) = [s for s in draft.chain if s.kind == "draft"]
    assert drop.file == "sglang/srt/models/deepseek_nextn.py" and drop.value is None
    assert 'quant_config.get_name() == "modelopt_fp4"' in drop.guard and drop.code.startswith("quant_config = None")
    # its dense linear layers too (issue 42): built from the NEXTN class's own construction
    # (`model.decoder`, no `layers.0.` prefix) with the quant config it passes, None: unquantized
    linear = res.settings["quantization"].layer
    assert (linear.stage, linear.status) == ("linear", "unknown")  # MLA: the target's shapes are not derived
    assert linear.reason.startswith("the target model's dense linear layers are not evaluated")
    d = linear.draft
    assert (d.status, d.stage) == ("resolved", "linear")
    assert d.value == ("built: UnquantizedLinearMethod (model.decoder.self_attn.fused_qkv_a_proj_with_mqa, "
                       "model.decoder.self_attn.q_b_proj, model.decoder.self_attn.kv_b_proj, model.decoder.self_attn.o_proj)")
    assert d.site.startswith("sglang/srt/layers/linear.py:")
    # a construction on the way that stopped is listed, never taken for "no other layer"
    assert any("(its linear layers, if any, not built)" in n for n in d.data_dependent)
    assert res.settings["quantization"].status == "resolved"


@pytest.mark.real_release
def test_a_release_without_the_model_class_says_so(release):
    # issue 39 item 6: 0.5.5 has no qwen3_5.py; the answer says the release cannot load the
    # architecture natively instead of only blaming a quant-config error
    old = _run(release, "0.5.5", "sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8"])
    (note,) = [n for n in old.analysis_notes if n.startswith("model architecture")]
    assert "Qwen3_5MoeForConditionalGeneration: no module of sglang/srt/models defines it" in note
    new = _run(release, "0.5.23", "sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8"])
    assert not any(n.startswith("model architecture") for n in new.analysis_notes)


@pytest.mark.real_release
def test_0523_sm100_deepseek_r1_trtllm_prepares_weights_on_abstract_tensors(release):
    """Issue 41: 0.5.23's TRT-LLM FP4 weight preparation (FP4 alignment, shuffles, copy_or_rebind_param
    on SGLang's ModelWeightParameter) runs on abstract tensors; before, it stopped at "item assignment
    with an unknown key (... attribute size of ModelWeightParameter may come from torch.nn.Parameter)"."""
    res = _run(release, "0.5.23", "sm100", "deepseek-r1-nvfp4", ["moe_runner_backend=flashinfer_trtllm"])
    layer = res.settings["moe_runner_backend"].layer
    assert (layer.status, layer.value, layer.site) == ("resolved", "FlashInfer trtllm_fp4_block_scale_moe", f"{MQ}:3276")
    kinds = dict(t.split(": ", 1) for t in layer.tensors)
    # the kernel call carries the dtypes create_weights gave (packed FP4 in uint8, FP8 block scales)
    assert kinds["w13_weight"].startswith("uint8 (256, ") and kinds["w13_weight_scale"].startswith("float8_e4m3fn (256, ")


FP8 = "sglang/srt/layers/quantization/fp8.py"
# fp8.py Fp8MoEMethod.create_weights: `intermediate_size_per_partition % block_n != 0` -> ValueError
_SHARD_RAISE = {"0.5.8": 648, "0.5.10": 819}


@pytest.mark.real_release
@pytest.mark.parametrize("version", ["0.5.8", "0.5.10"])
def test_minimax_fp8_expert_shard_follows_expert_parallelism(release, version):
    """MiniMax-M2 FP8 (intermediate_size 1536, weight_block_size [128, 128]) at TP 8: the MoE
    layer's per-rank shard is 1536 / moe_tp_size, moe_tp_size = tp_size / ep_size. Without EP it
    is 192, which Fp8MoEMethod refuses (the 128 block); with EP 8 (every spelling the release's
    parser accepts) it is 1536 and the Triton FP8 kernel is reached: EP reaches the layer stage."""
    tree = release(version)
    src = str(tree.package_dir)
    launch = "python -m sglang.launch_server --model-path MiniMaxAI/MiniMax-M2 --tp 8"
    alone = shared.resolve(Request(source=src, arch="sm90", model="minimax-m2", launch=launch))
    layer = alone.settings["moe_runner_backend"].layer
    assert (layer.status, layer.site) == ("unsupported", f"{FP8}:{_SHARD_RAISE[version]}")
    assert "weight = 192 is not divisible by weight quantization block_n = 128" in layer.value
    assert _findings(alone)["SGA003"].severity == "error"
    for ep in ("--ep 8", "--ep-size 8", "--expert-parallel-size 8"):
        res = shared.resolve(Request(source=src, arch="sm90", model="minimax-m2", launch=f"{launch} {ep}"))
        assert res.flags["ep_size"] == 8
        moe = res.settings["moe_runner_backend"]
        assert (moe.status, moe.layer.status, moe.layer.runner) == ("resolved", "resolved", "triton"), ep
        assert moe.layer.value == "Triton fused_moe_kernel (SGLang's Triton MoE)"
        assert "SGA003" not in _findings(res)
    # EP 4 leaves moe_tp_size 2: a 768-wide shard, divisible by the block
    half = shared.resolve(Request(source=src, arch="sm90", model="minimax-m2", launch=f"{launch} --ep 4"))
    assert half.settings["moe_runner_backend"].layer.status == "resolved"


# ---- issue 41's work queue: 0.5.23 and 0.5.16 layers that stopped before a kernel -----------
FI_TRTLLM = "sglang/srt/layers/moe/moe_runner/flashinfer_trtllm.py"
FI_CUTLASS = "sglang/srt/layers/moe/moe_runner/flashinfer_cutlass.py"


@pytest.mark.real_release
@pytest.mark.parametrize(("arch", "kernel", "site", "info"), [
    ("sm100", "FlashInfer trtllm_fp4_block_scale_moe", f"{FI_TRTLLM}:1306", "FlashInferTrtllmGenMxfp4MoeQuantInfo"),
    ("sm120", "FlashInfer cutlass_fused_moe", f"{FI_CUTLASS}:585", "FlashInferCutlassMxfp4MoeQuantInfo"),
])
def test_0523_gpt_oss_mxfp4_runner_runs_the_fused_function_its_release_registered(release, arch, kernel, site, info):
    """0.5.23 gpt-oss (MXFP4): create_moe_runner builds MoeRunner(flashinfer_mxfp4), whose fused
    function rules/layers.toml does not list; the release's own MoeRunner is built (its __init__
    imports flashinfer_cutlass, whose @register_fused_func("none", "flashinfer_mxfp4") fills
    the registry) and its run() evaluated down to FlashInfer's entry point. Before: "the
    runner's fused function is not listed in rules/layers.toml". On SM120 the CUTLASS path's
    `if x.shape[0] == 0: return` (an empty batch) reaches no kernel: reported, not the answer."""
    layer = _run(release, "0.5.23", arch, "gpt-oss-120b", []).settings["moe_runner_backend"].layer
    assert (layer.status, layer.value, layer.site) == ("resolved", kernel, site)
    assert (layer.method, layer.runner) == ("Mxfp4MoEMethod", "flashinfer_mxfp4")
    step = next(c for c in layer.chain if c.code.startswith("MoeRunner(flashinfer_mxfp4).run("))
    assert step.code == (f"MoeRunner(flashinfer_mxfp4).run(..., {info}) -> its fused function "
                         f"fused_experts_none_to_flashinfer_mxfp4 ({FI_CUTLASS}:452)")
    if arch == "sm120":
        assert any(d.startswith("no kernel on an empty batch: ") for d in layer.data_dependent)


@pytest.mark.real_release
def test_0523_fp8_trtllm_routing_method_int_enum_and_fused_function(release):
    """0.5.23 DeepSeek-V3 FP8 on SM100 (flashinfer_trtllm): fp8.py calls
    int(layer.routing_method_type), a member of `class RoutingMethodType(IntEnum): DeepSeekV3 =
    (2,)`; CPython makes its value int(*(2,)), the tool kept the tuple ("int() argument must be
    ... not 'tuple'"). Now the runner's fused function is reached and one branch calls FlashInfer's
    routed FP8 kernel; the other stops on the TopK output format the stand-in forward does not
    know, so the layer stays unknown with both candidates."""
    layer = _run(release, "0.5.23", "sm100", "deepseek-v3-fp8", []).settings["moe_runner_backend"].layer
    values = [c.value for c in layer.candidates]
    assert "FlashInfer trtllm_fp8_block_scale_routed_moe" in values
    assert not any("int() argument" in v or "has not been written" in v for v in values)


@pytest.mark.real_release
def test_0523_worker_process_groups_are_unknown_process_state_not_a_stop(release):
    """0.5.23 reads the worker's process groups from its parallel context
    (`use_symmetric_memory(get_parallel().tp_group, ...)`); the tool stopped at "parallel name
    'tp_group' has not been written in this process", which a worker never sees (it builds its
    groups first). Now the layer reaches the DeepEP dispatcher's import, as on 0.5.16 (the test
    above): the deep_ep fork decides."""
    res = _run(release, "0.5.23", "sm90", "deepseek-v3-fp8", ["tp_size=4", "moe_a2a_backend=deepep", "fp8_gemm_runner_backend=triton"])
    layer = res.settings["moe_runner_backend"].layer
    assert layer.status == "unsupported" and layer.value.startswith("ImportError: DeepEP is not available")
    assert layer.site == "sglang/srt/layers/moe/token_dispatcher/deepep.py:382"
    assert layer.unsettled_absences == ("deep_ep",)


@pytest.mark.real_release
def test_0523_mooncake_output_its_dispatcher_returns_reaches_deepepmoes_check(release):
    """--moe-a2a-backend mooncake (low_latency, mooncake installed), Qwen3-30B-A3B BF16: the
    dispatcher the layer built (MaybeTboDeepEPDispatcher -> MooncakeEPDispatcher) hands the
    layer MooncakeDispatchOutput (mooncake.py:217), the DeepEP low-latency format, and
    DeepEPMoE.run_moe_core (deprecate_flag False: not deepep/pplx with the deep_gemm runner)
    asserts on it. Before, the layer ran on the standard output straight into apply:
    "resolved, Triton"."""
    tree = release("0.5.23")
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm90", model="qwen3-30b-a3b", with_packages=["mooncake"],
                                 sets=["tp_size=8", "ep_size=8", "moe_a2a_backend=mooncake", "deepep_mode=low_latency"]))
    layer = res.settings["moe_runner_backend"].layer
    assert (layer.status, layer.value, layer.site) == (
        "unsupported", "AssertionError: forward_deepgemm_masked is deprecated", f"{EP}:301")
    step = next(s for s in layer.chain if s.kind == "dispatch")
    assert (step.file, step.line, step.value) == ("sglang/srt/layers/moe/token_dispatcher/mooncake.py", 217, "MooncakeDispatchOutput")
    assert [d.split(":")[0] for d in layer.data_dependent] == ["prefill batches", "decode batches"]


@pytest.mark.real_release
def test_0516_gpt_oss_sm120_marlin_past_the_jit_kernel_import(release):
    """0.5.16 gpt-oss on SM120: the Marlin weight repack imports sglang.jit_kernel, whose
    module body finds its C++ sources through importlib.util.find_spec("sglang.jit_kernel").origin
    (now the file in the analysed tree; before, "Cannot find sglang.jit_kernel path"), and
    load_jit, which compiles them at first use, is a boundary (rules/layers.toml jit_builders)."""
    layer = _run(release, "0.5.16", "sm120", "gpt-oss-120b", []).settings["moe_runner_backend"].layer
    assert (layer.status, layer.value, layer.site) == ("resolved", "Marlin fused_marlin_moe", "sglang/srt/layers/quantization/mxfp4.py:1169")
    assert (layer.method, layer.runner) == ("Mxfp4MoEMethod", "marlin")


@pytest.mark.real_release
def test_0516_quant_config_only_in_hf_quant_config_json_is_read_as_the_loader_reads_it(release):
    """A ModelOpt checkpoint whose config.json has no quantization_config (nvidia/DeepSeek-R1-0528-FP4:
    hf_quant_config.json only): the model loader builds the quant config from the file the class
    names (ModelOptFp4Config.get_config_filenames() -> ["hf_quant_config.json"]). Before, the layer
    was unknown ("hf_quant_config.json is not modelled"); now SM120's auto backend reaches the same
    NotImplementedError the Qwen3.5 NVFP4 checkpoint does on 0.5.16 (the test above)."""
    model = Path(__file__).resolve().parent / "field" / "models" / "deepseek-r1-0528-fp4-hfquant"
    layer = _run(release, "0.5.16", "sm120", str(model), ["tp_size=8"]).settings["moe_runner_backend"].layer
    assert (layer.status, layer.method, layer.runner) == ("unsupported", "ModelOptNvFp4FusedMoEMethod", "flashinfer_trtllm")
    assert layer.value.startswith("NotImplementedError: Unsupported moe_runner_backend for NVFP4 MoE: MoeRunnerBackend.FLASHINFER_TRTLLM")
    assert layer.site == f"{MQ}:2621"


@pytest.mark.real_release
def test_0516_bf16_trtllm_block_layout_runs_on_abstract_tensors_to_the_bf16_kernel(release):
    """0.5.16 Qwen3-30B-A3B (BF16) on SM100: the TRT-LLM BF16 weight preparation iterates the shape
    of FlashInfer's convert_to_block_layout(...) (unquant.py); FlashInfer's Python body gives it
    (world/overlays/tensors.py). Before: "iteration over External (<external
    flashinfer.fused_moe.core.convert_to_block_layout().view().shape>)". The runner's fused
    function then reaches FlashInfer's BF16 entry point."""
    layer = _run(release, "0.5.16", "sm100", "qwen3-30b-a3b", []).settings["moe_runner_backend"].layer
    assert (layer.status, layer.value, layer.site) == ("resolved", "FlashInfer trtllm_bf16_moe", f"{FI_TRTLLM}:1247")
    assert (layer.method, layer.runner) == ("UnquantizedFusedMoEMethod", "flashinfer_trtllm")


@pytest.mark.real_release
def test_0516_deepep_formats_run_on_deepepmoe_refused_and_resolved_with_file_line(release):
    """--moe-a2a-backend deepep (deep_ep installed): the layer is the class the model asks
    get_moe_impl_class for (DeepEPMoE) and apply sees DeepEP's dispatch outputs, one run per
    format the DeepEP mode enables. NVFP4 CuTe DSL in low_latency reaches the masked kernel;
    FP8 with DeepGEMM absent hits DeepEPMoE's own assert (SGA217's code, by evaluation)."""
    tree = release("0.5.16")
    ll = shared.resolve(Request(source=str(tree.package_dir), arch="sm100", model="deepseek-r1-nvfp4", with_packages=["deep_ep"],
                                sets=["tp_size=8", "ep_size=8", "quantization=modelopt_fp4", "moe_runner_backend=flashinfer_cutedsl",
                                      "moe_a2a_backend=deepep", "deepep_mode=low_latency"]))
    layer = ll.settings["moe_runner_backend"].layer
    assert (layer.status, layer.value, layer.site) == (
        "resolved", "FlashInfer CuTe DSL grouped_gemm_nt_masked (flashinfer_cutedsl_moe_masked)",
        "sglang/srt/layers/moe/moe_runner/flashinfer_cutedsl.py:504")
    assert ll.settings["moe_runner_backend"].status == "resolved"
    fp8 = shared.resolve(Request(source=str(tree.package_dir), arch="sm100", model="deepseek-v3-fp8", with_packages=["deep_ep"],
                                 without_packages=["deep_gemm"], sets=["tp_size=8", "moe_a2a_backend=deepep"]))
    layer = fp8.settings["moe_runner_backend"].layer
    assert layer.status == "unsupported"
    assert layer.value == "AssertionError: DeepEP DeepEPMode.AUTO mode requires deep_gemm"  # DeepEPMoE.__init__: every format
    assert layer.site == "sglang/srt/layers/moe/ep_moe/layer.py:154"
