"""The speculative worker SGLang builds (issue 42): the class the release's own dispatch
(``SpeculativeAlgorithm.create_worker``) picks, and its constructor's asserts and raises (the
draft worker's multi-step attention backends, the overlap/spec-v2 constraints), evaluated
(never executed) on the fixture checkout fixtures/checkouts/mini_attn and on a real release."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import shared

from sglang_audit.evaluate.interpreter import Bounds, Interpreter
from sglang_audit.evaluate.values import Class, HFConfig, Instance
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.device import Environment, parse_device
from sglang_audit.resolve.pipeline import Request
from sglang_audit.resolve.spec_worker import evaluate_spec_worker
from sglang_audit.result import LayerValue
from sglang_audit.world.native import NativeWorld

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_attn" / "python"
SPEC = "sglang/srt/speculative"


def _line(path: str, text: str) -> int:
    """The first line holding ``text`` (the whole stripped line when it ends with "$")."""
    lines = (ROOT / path).read_text().splitlines()
    if text.endswith("$"):
        return next(i for i, line in enumerate(lines, 1) if line.strip() == text[:-1])
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _worker(arch: str = "sm90", mla: bool = False, draft: bool = True, **flags: Any) -> LayerValue | None:
    world = NativeWorld(parse_device(arch), Environment(installed=frozenset({"torch"})), [])
    interp = Interpreter(ROOT, SourceCache(use_disk=False), world, {}, Bounds())
    sa_mod = interp.load_module("sglang.srt.server_args")
    server_args = interp.call(interp.getattr(sa_mod, "ServerArgs"), [], flags)
    mc = Instance(Class("ModelConfig", (), {}, None))
    mc.attrs.update(hf_config=HFConfig({"model_type": "llama"}, "test"), attention_arch="mla" if mla else "mha",
                    context_len=4096)
    return evaluate_spec_worker(interp, server_args, mc, mc if draft else None).get("speculative_algorithm")


def test_no_speculative_algorithm_builds_no_worker():
    assert _worker(draft=False, attention_backend="triton") is None


def test_the_dispatch_picks_the_worker_and_the_scheduler_builds_it():
    v = _worker(attention_backend="triton", speculative_algorithm="EAGLE", disable_overlap_schedule=True)
    assert v is not None and (v.status, v.value, v.stage) == ("resolved", "EAGLEWorker", "speculative")
    dispatch, built = v.chain[0], v.chain[1]
    # the class is the one SGLang's create_worker returns, cited at that return
    assert (dispatch.kind, dispatch.file, dispatch.line) == (
        "dispatch", f"{SPEC}/spec_info.py", _line(f"{SPEC}/spec_info.py", "return EAGLEWorker$"))
    # ... built where the scheduler calls it (its module read, never loaded)
    assert (built.kind, built.file, built.line) == (
        "worker", "sglang/srt/managers/scheduler.py",
        _line("sglang/srt/managers/scheduler.py", "DraftWorkerClass(**draft_worker_kwargs)"))
    assert v.site == f"{built.file}:{built.line}"
    # the draft worker's multi-step decode backend builds one TritonAttnBackend per step
    assert [s.value for s in v.chain if s.kind == "backend"] == ["TritonAttnBackend"] * 3


def test_the_overlap_schedule_picks_the_spec_v2_worker_and_its_constraint():
    v = _worker(attention_backend="triton", speculative_algorithm="EAGLE")
    assert v is not None and (v.status, v.value) == ("resolved", "EAGLEWorkerV2")
    bad = _worker(attention_backend="triton", speculative_algorithm="EAGLE", speculative_eagle_topk=4)
    path = f"{SPEC}/eagle_worker_v2.py"
    assert bad is not None and bad.status == "unsupported"
    assert bad.value == "ValueError: Spec v2 currently only supports topk = 1."
    assert bad.site == f"{path}:{_line(path, 'raise ValueError')}"
    assert [s.value for s in bad.chain if s.kind == "dispatch"] == ["EAGLEWorkerV2"]


def test_the_draft_workers_decode_backend_refuses_a_backend_by_sglangs_raise():
    # the target's backend passes (the attention stage's question); the draft worker's
    # DraftBackendFactory has no multi-step backend for it
    v = _worker(attention_backend="fa4", speculative_algorithm="EAGLE", disable_overlap_schedule=True)
    path = f"{SPEC}/draft_utils.py"
    assert v is not None and v.status == "unsupported"
    assert v.value == "ValueError: EAGLE is not supported in decode attention backend fa4"
    assert v.site == f"{path}:{_line(path, 'raise ValueError(error_template')}"
    assert any(s.kind == "branch" and s.guard == "backend_type not in backend_map" for s in v.chain)
    # one step: no multi-step decode backend is built, so the same backend passes the decode side
    one = _worker(attention_backend="fa4", speculative_algorithm="EAGLE", disable_overlap_schedule=True,
                  speculative_num_steps=1)
    assert one is not None and one.value == "ValueError: EAGLE is not supported in attention backend fa4"


def test_a_raise_whose_branch_reads_runtime_state_the_tool_does_not_know_is_no_verdict():
    # the factory's backend name is read off a runner no constructor the tool evaluates builds
    # (runtime state): `if backend_type not in backend_map: raise` on it is not SGLang's verdict
    # (0.5.23 MultiLayerEagleWorkerV2 was refused with "ValueError: <?>" before its model
    # worker's `model_runner_list` was built)
    v = _worker(attention_backend="triton", speculative_algorithm="EAGLE", disable_overlap_schedule=True,
                enable_multi_layer_eagle=True)
    path = f"{SPEC}/draft_utils.py"
    assert v is not None and (v.status, v.exception) == ("unknown", "")
    assert v.reason.startswith("SGLang builds EAGLEWorker; ")
    stop = f"ValueError: <?> at {path}:{_line(path, 'raise ValueError(error_template')} (its branch reads runtime state"
    assert any(c.value.startswith("unknown: ") and stop in c.value for c in v.candidates)
    # the same raise decided by known values stays the verdict
    bad = _worker(attention_backend="fa4", speculative_algorithm="EAGLE", disable_overlap_schedule=True)
    assert bad is not None and bad.status == "unsupported"


def test_the_draft_model_worker_builds_one_runner_per_draft_layer_and_each_steps_backend_is_followed():
    # 0.5.23 shape: the multi-layer EAGLE draft's model worker is built by its own __init__ (the
    # runners stood in), so `model_runner_list` holds one runner per draft step
    # (`range(1, speculative_num_steps)` after the first) and DraftBackendFactory runs on each
    v = _worker(attention_backend="triton", speculative_algorithm="EAGLE", enable_multi_layer_eagle=True)
    assert v is not None and (v.status, v.value) == ("resolved", "MultiLayerEagleWorkerV2")
    utils = f"{SPEC}/draft_utils.py"
    site = _line(utils, "return TritonAttnBackend(self.draft_model_runner)")
    assert [(s.value, s.file, s.line) for s in v.chain if s.kind == "backend"] == [("TritonAttnBackend", utils, site)] * 3
    two = _worker(attention_backend="triton", speculative_algorithm="EAGLE", enable_multi_layer_eagle=True,
                  speculative_num_steps=2)
    assert two is not None and [s.value for s in two.chain if s.kind == "backend"] == ["TritonAttnBackend"] * 2
    # the backend classes the steps build go to the kernel level (backends_built)
    fa3 = _worker(attention_backend="triton", speculative_algorithm="EAGLE", enable_multi_layer_eagle=True,
                  speculative_draft_attention_backend="fa3")
    assert fa3 is not None and fa3.status == "resolved"
    assert fa3.backends_built == (("sglang.srt.layers.attention.flashattention_backend", "FlashAttentionBackend",
                                   f"{utils}:{_line(utils, 'return FlashAttentionBackend(self.draft_model_runner)')}",
                                   (("", "?"),)),)
    # the factory's refusal, decided by known values now, is SGLang's verdict
    bad = _worker(attention_backend="triton", speculative_algorithm="EAGLE", enable_multi_layer_eagle=True,
                  speculative_draft_attention_backend="fa4")
    assert bad is not None and bad.status == "unsupported"
    assert bad.value == "ValueError: EAGLE is not supported in attention backend fa4"
    assert bad.site == f"{utils}:{_line(utils, 'raise ValueError(error_template')}"
    # the model worker's __init__ past its runners (a branch on its model config, not evaluated)
    # leaves nothing to list: it built its runners
    assert not any("no model runner built" in d for d in v.data_dependent)


def test_a_model_worker_that_stops_before_building_its_runner_ends_the_run_unknown():
    # the fixture's TpModelWorker branches on its model config (not evaluated) before its runner
    # when enable_dp_attention is on: without the runner, what its __init__ publishes
    # (use_mla_backend) is missing and ServerArgs' method of that name (truthy) would refuse the
    # triton draft backend; the run is not followed instead of that wrong verdict
    v = _worker(attention_backend="triton", speculative_algorithm="EAGLE", disable_overlap_schedule=True,
                enable_dp_attention=True)
    assert v is not None and (v.status, v.exception) == ("unknown", "")
    path = "sglang/srt/managers/tp_worker.py"
    assert v.reason.startswith("SGLang builds EAGLEWorker; ")
    assert ("TpModelWorker.__init__() of the target model worker built no model runner (not followed past a branch "
            f"on runtime state at {path}:{_line(path, 'if server_args.enable_dp_attention and')}") in v.reason


def test_the_draft_runner_copies_its_mla_flag_onto_the_published_server_args():
    # ModelRunner.__init__ writes `global_server_args.use_mla_backend = self.use_mla_backend`,
    # shadowing ServerArgs' method (truthy as a bound method): DraftBackendFactory reads it
    v = _worker(mla=True, attention_backend="triton", speculative_algorithm="EAGLE", disable_overlap_schedule=True)
    assert v is not None and v.value == "ValueError: the triton multi-step draft backend needs an MHA model"
    ok = _worker(mla=False, attention_backend="triton", speculative_algorithm="EAGLE", disable_overlap_schedule=True)
    assert ok is not None and ok.status == "resolved"


def test_an_assert_in_a_backend_the_worker_builds_is_the_verdict():
    v = _worker(attention_backend="fa3", speculative_algorithm="EAGLE", disable_overlap_schedule=True,
                speculative_eagle_topk=4, page_size=16)
    path = "sglang/srt/layers/attention/flashattention_backend.py"
    assert v is not None and v.status == "unsupported"
    assert v.value == "AssertionError: FA3 multi-step draft with topk > 1 needs page_size 1"
    assert v.site == f"{path}:{_line(path, 'assert topk == 1')}"


def test_ngram_refuses_the_overlap_schedule_in_the_dispatch_and_builds_without_it():
    bad = _worker(draft=False, attention_backend="triton", speculative_algorithm="NGRAM")
    path = f"{SPEC}/spec_info.py"
    assert bad is not None and bad.status == "unsupported"
    assert bad.value == "ValueError: Speculative algorithm NGRAM does not support overlap worker creation."
    assert bad.site == f"{path}:{_line(path, 'does not support overlap worker creation') - 1}"
    ok = _worker(draft=False, attention_backend="triton", speculative_algorithm="NGRAM", disable_overlap_schedule=True)
    assert ok is not None and (ok.status, ok.value) == ("resolved", "NGRAMWorker")
    few = _worker(draft=False, attention_backend="triton", speculative_algorithm="NGRAM", disable_overlap_schedule=True,
                  speculative_num_draft_tokens=1)
    assert few is not None and few.value == "AssertionError: NGRAM needs more than one draft token"


def test_an_algorithm_no_fact_file_names_is_found_by_the_releases_dispatch():
    # MINI_LOOKAHEAD / MiniLookaheadWorker are the fixture's own: named in no rules/ file
    rules = Path(__file__).resolve().parent.parent / "rules"
    assert not any("MiniLookahead" in p.read_text() or "MINI_LOOKAHEAD" in p.read_text() for p in rules.rglob("*.toml"))
    ok = _worker(draft=False, attention_backend="triton", speculative_algorithm="MINI_LOOKAHEAD")
    assert ok is not None and (ok.status, ok.value) == ("resolved", "MiniLookaheadWorker")
    bad = _worker(draft=False, attention_backend="triton", speculative_algorithm="MINI_LOOKAHEAD", page_size=16)
    assert bad is not None and (bad.status, bad.value) == ("unsupported", "ValueError: MINI_LOOKAHEAD needs page_size 1")


def test_a_constructor_the_evaluator_cannot_follow_leaves_the_class_known_and_the_rest_unknown():
    # EAGLE3 iterates over the target model's layers (runtime state): not followed
    v = _worker(attention_backend="triton", speculative_algorithm="EAGLE3", disable_overlap_schedule=True)
    assert v is not None and v.status == "unknown" and v.value is None
    assert v.reason.startswith("SGLang builds EAGLEWorker; ")
    path = f"{SPEC}/eagle_worker.py"
    assert f"comprehension over an unknown value at {path}:{_line(path, 'self.aux_layer_ids =')}" in v.reason
    assert [s.value for s in v.chain if s.kind in ("dispatch", "worker")] == ["EAGLEWorker", "EAGLEWorker"]


# ---- a real release (downloaded into the user cache) ----------------------------------------
@pytest.mark.real_release
def test_real_0_5_10_nextn_draft_worker_refuses_cutlass_mla_by_sglangs_raise(release):
    # read first: 0.5.10 speculative/draft_utils.py:26-37 DraftBackendFactory._create_backend
    # (`if backend_type not in backend_map: raise ValueError(error_template...)` at :35) and
    # create_decode_backend's map (:44-57: no "cutlass_mla"), called from EAGLEWorker.__init__'s
    # init_attention_backend (eagle_worker.py:218-230); the dispatch returns EAGLEWorker at
    # spec_info.py:83 (DeepSeek + NEXTN leaves the overlap schedule off without
    # SGLANG_ENABLE_SPEC_V2), built at scheduler.py:629. The attention stage resolves
    # cutlass_mla for the target and the draft runner alike: only the worker refuses it.
    tree = release("0.5.10")
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm100", model="deepseek-v3-fp8",
                                 sets=["tp_size=8", "speculative_algorithm=NEXTN", "attention_backend=cutlass_mla"]))
    s = res.settings["speculative_algorithm"]
    assert s.status == "unsupported"
    assert (s.layer.status, s.layer.stage) == ("unsupported", "speculative")
    assert s.layer.value == "ValueError: EAGLE is not supported in decode attention backend cutlass_mla"
    assert s.layer.site == "sglang/srt/speculative/draft_utils.py:35"
    steps = {st.kind: (st.value, f"{st.file}:{st.line}") for st in s.layer.chain}
    assert steps["dispatch"] == ("EAGLEWorker", "sglang/srt/speculative/spec_info.py:83")
    assert steps["worker"] == ("EAGLEWorker", "sglang/srt/managers/scheduler.py:629")
    assert res.settings["attention_backend"].layer.status == "resolved"


# ---- what check and recommend make of it ---------------------------------------------------
def _with_worker(layer: LayerValue) -> Any:
    from sglang_audit.result import ModelSummary, Resolution, Setting

    spec = Setting("speculative_algorithm", "EAGLE", None, "unsupported" if layer.status == "unsupported" else "resolved",
                   layer=layer)
    return Resolution({"version": "x"}, "s", {"platform": "cuda", "major": 10}, ModelSummary("m", "/m", "A", None, None),
                      {}, {}, None, {"speculative_algorithm": spec,
                                     "attention_backend": Setting("attention_backend", "fa4", None, "resolved")})


def test_a_refused_worker_is_never_recommended_and_an_unknown_one_is_marked():
    from sglang_audit.analyses.recommend import _caveats, _reason

    refused = LayerValue("unsupported", "ValueError: EAGLE is not supported in decode attention backend fa4",
                         site="sglang/srt/speculative/draft_utils.py:35", stage="speculative")
    # forcing attention_backend=fa4: the worker built with it refuses, whatever field was forced
    reason = _reason(_with_worker(refused), {"attention_backend": "fa4"}, ("attention_backend",), (), "single")
    assert reason is not None and (reason.kind, reason.where) == ("layer", "sglang/srt/speculative/draft_utils.py:35")
    assert "speculative worker" in reason.message and "decode attention backend fa4" in reason.message
    unknown = LayerValue("unknown", None, reason="SGLang builds EAGLEWorker; its construction could not be followed",
                         stage="speculative")
    res = _with_worker(unknown)
    assert _reason(res, {"attention_backend": "fa4"}, ("attention_backend",), (), "single") is None
    assert any("speculative worker" in c and "EAGLEWorker" in c for c in _caveats(res, ("attention_backend",)))


def test_check_reports_the_refusal_as_sglangs_own_layer_failure():
    from sglang_audit.rules.knownbad import layer_findings

    refused = LayerValue("unsupported", "ValueError: EAGLE is not supported in decode attention backend fa4",
                         site="sglang/srt/speculative/draft_utils.py:35", stage="speculative")
    (finding,) = layer_findings(_with_worker(refused))
    assert finding.rule_id == "SGA003" and finding.setting == "speculative_algorithm"
    assert "building speculative worker with speculative_algorithm fails at sglang/srt/speculative/draft_utils.py:35" \
        in finding.message


def test_what_the_scheduler_calls_on_the_worker_afterwards_is_evaluated_too():
    # 0.5.16+ shape: the draft backends are built in init_attention_backends, which the
    # scheduler calls on the worker after building it (read from its class, never loaded)
    ok = _worker(attention_backend="triton", speculative_algorithm="STANDALONE")
    assert ok is not None and (ok.status, ok.value) == ("resolved", "StandaloneWorkerV2")
    # in the scheduler's order: the target's model worker first, then the draft worker
    then = [(s.code, s.line) for s in ok.chain if s.kind == "then"]
    sched = "sglang/srt/managers/scheduler.py"
    assert then == [("self.tp_worker.init_attention_backends()", _line(sched, "self.tp_worker.init_attention_backends()")),
                    ("self.draft_worker.init_attention_backends()", _line(sched, "self.draft_worker.init_attention_backends()"))]
    assert [s.value for s in ok.chain if s.kind == "backend"] == ["TritonAttnBackend"] * 2
    # the draft model worker it builds as a class is stood in: its own method is listed, not run
    assert any(d.startswith("TpModelWorker.init_attention_backends() of the draft model worker: not evaluated") for d in ok.data_dependent)
    bad = _worker(attention_backend="fa4", speculative_algorithm="STANDALONE")
    path = f"{SPEC}/draft_utils.py"
    assert bad is not None and bad.status == "unsupported"
    assert bad.value == "ValueError: EAGLE is not supported in decode attention backend fa4"
    assert bad.site == f"{path}:{_line(path, 'raise ValueError(error_template')}"


def test_the_algorithm_is_the_one_the_schedulers_init_builds_from_the_resolved_view():
    # 0.5.19+ shape: Scheduler.__init__ reads get_spec() (NEXTN already EAGLE) while ServerArgs
    # keeps NEXTN; from_string("NEXTN") itself would raise "Unknown speculative algorithm name"
    v = _worker(attention_backend="triton", speculative_algorithm="NEXTN", disable_overlap_schedule=True)
    assert v is not None and (v.status, v.value) == ("resolved", "EAGLEWorker")


@pytest.mark.real_release
def test_real_0_5_16_draft_backends_built_after_the_constructor_refuse_torch_native(release):
    # read first: 0.5.16 scheduler.py:835-837 init_all_attention_backends calls
    # `self.draft_worker.init_attention_backends()` after building the worker (scheduler.py:798);
    # EAGLEWorkerV2 (spec_info.py:282) -> BaseSpecWorker.init_attention_backends -> the draft's
    # EagleDraftWorker.init_attention_backends (eagle_worker_v2.py:214-221) ->
    # init_attention_backend's DraftBackendFactory (:348-360), whose decode map has no
    # torch_native: `raise ValueError(error_template...)` at draft_utils.py:40
    tree = release("0.5.16")
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm90", model="qwen3-next-80b-a3b",
                                 sets=["tp_size=4", "speculative_algorithm=NEXTN", "attention_backend=torch_native"]))
    s = res.settings["speculative_algorithm"]
    assert (s.status, s.layer.status) == ("unsupported", "unsupported")
    assert s.layer.value == "ValueError: EAGLE is not supported in decode attention backend torch_native"
    assert s.layer.site == "sglang/srt/speculative/draft_utils.py:40"
    steps = {st.kind: (st.value, f"{st.file}:{st.line}") for st in s.layer.chain}
    assert steps["dispatch"] == ("EAGLEWorkerV2", "sglang/srt/speculative/spec_info.py:282")
    assert steps["then"] == ("init_attention_backends", "sglang/srt/managers/scheduler.py:837")


@pytest.mark.real_release
def test_real_0_5_23_eagle_worker_constructor_is_followed_past_draft_pp_context(release):
    # read first: 0.5.23 speculative/eagle_worker_v2.py:205-232 EagleDraftWorker.__init__:
    # `target_worker.model_runner.spec_aux_config.draft_model_config` (model_runner.py:597, an
    # annotated `self.spec_aux_config: ... = resolve_spec_aux_hidden_state_config(...)`), then
    # `with (draft_tp_context(...), draft_pp_context(), ..., draft_model_build_scope())` around
    # `TpModelWorker(..., is_draft_worker=True)`: draft_pp_context (spec_utils.py:823) holds
    # patch_pipeline_parallel_group (distributed/parallel_state.py:3089), whose yield sits in a
    # with in a try/finally; draft_model_build_scope (layers/moe/utils.py:582) enters
    # `get_exec().comm.override(...)`, a @contextmanager method (runtime_context.py:849);
    # draft_parallel.py:46 get_model_architecture imports models/registry.py, whose import walks
    # `pkgutil.iter_modules(package.__path__, ...)` (registry.py:120). The draft runner's
    # `draft_attention_backend` is TpModelWorker's default None passed on (tp_worker.py:313,
    # :497), so DraftBackendFactory takes the prefill/decode pair (draft_utils.py:55-63).
    tree = release("0.5.23")
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm90", model="deepseek-v3-fp8",
                                 sets=["tp_size=8", "speculative_algorithm=EAGLE"]))
    s = res.settings["speculative_algorithm"]
    assert (s.status, s.layer.status, s.layer.value) == ("resolved", "resolved", "EAGLEWorkerV2")
    assert s.layer.site == "sglang/srt/managers/scheduler.py:1064"
    steps = [(st.kind, st.value, f"{st.file}:{st.line}") for st in s.layer.chain]
    assert steps[:4] == [("dispatch", "EAGLEWorkerV2", "sglang/srt/speculative/spec_info.py:364"),
                         ("worker", "EAGLEWorkerV2", "sglang/srt/managers/scheduler.py:1064"),
                         ("then", "init_attention_backends", "sglang/srt/managers/scheduler.py:1115"),
                         ("then", "init_attention_backends", "sglang/srt/managers/scheduler.py:1117")]
    # the draft worker's multi-step backends, built by DraftBackendFactory after the constructor
    assert ("backend", "FlashAttentionBackend", "sglang/srt/speculative/draft_utils.py:493") in steps
    # SGLang's refusal of a decode backend the draft worker lacks, with its line
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm90", model="deepseek-v3-fp8",
                                 sets=["tp_size=8", "speculative_algorithm=NEXTN", "attention_backend=torch_native"]))
    s = res.settings["speculative_algorithm"]
    assert (s.status, s.layer.status) == ("unsupported", "unsupported")
    assert s.layer.value == "ValueError: EAGLE is not supported in decode attention backend torch_native"
    assert s.layer.site == "sglang/srt/speculative/draft_utils.py:64"


def test_explain_says_the_speculative_worker_fails_for_a_forced_algorithm():
    # explain's forced choices read the spec_worker stage's outcome like the other stages'
    from sglang_audit.analyses.explain import OUTCOME_LAYERS_FAIL, ChoiceOutcome, layer_stages_read
    from sglang_audit.render.explain import _choice_lines

    assert layer_stages_read("speculative_algorithm", frozenset())[-1] == "spec_worker"
    note = "ValueError: EAGLE is not supported in decode attention backend torch_native at sglang/srt/speculative/draft_utils.py:64"
    worker = ChoiceOutcome("NEXTN", OUTCOME_LAYERS_FAIL, note=note, stage="speculative")
    assert _choice_lines(worker, 5, "sm90")[0] == f"  NEXTN  accepted by SGLang, but the speculative worker built with it fails: {note}"


def _resolve_stages(tree: Any, arch: str, model: str, sets: list[str]) -> Any:
    """The attention and speculative worker stages only (no MoE layers: not what is asked)."""
    import dataclasses

    from sglang_audit.resolve.pipeline import prepare, resolve_target

    cache = shared.cache_for(str(tree.package_dir))
    prep = prepare(Request(source=str(tree.package_dir), arch=arch, model=model, sets=sets), cache)
    return resolve_target(dataclasses.replace(prep.target, layer_stages=("attention", "spec_worker")), cache, None, forks=False)


@pytest.mark.real_release
def test_real_0_5_23_the_kv_pool_sglang_builds_decides_flashinfers_kv_access_check(release):
    # read first: 0.5.23 FlashInferAttnBackend.__init__ reads `self.token_to_kv_pool.
    # get_kv_cache_quant_method()` (flashinfer_backend.py:351) and raises unless the method
    # resolves a "flashinfer" access (:578-582). The runner's pool is what its configurator builds
    # (model_runner.py init_kv_cache_configurator; kv_cache_configurator.py _init_pools ->
    # _build_token_to_kv_pool -> _build_mha_kv_pool: `pool_cls(...)` at :2775, an
    # MHATokenToKVPool whose quant_method defaults to UnquantizedKVCacheMethod, memory_pool.py:2289).
    # Before the pool was modelled, both the target's backend and the EAGLE worker were unknown.
    res = _resolve_stages(release("0.5.23"), "sm100", "qwen3-30b-a3b", ["speculative_algorithm=EAGLE"])
    att = res.settings["attention_backend"]
    assert (att.config, att.layer.status, att.layer.value) == ("flashinfer", "resolved", "FlashInferAttnBackend")
    steps = [(st.kind, st.value, f"{st.file}:{st.line}") for st in att.layer.chain]
    assert steps[0] == ("kvpool", "MHATokenToKVPool", "sglang/srt/mem_cache/kv_cache_configurator.py:2775")
    assert ("backend", "FlashInferAttnBackend", "sglang/srt/layers/attention/attention_registry.py:69") in steps
    s = res.settings["speculative_algorithm"]
    assert (s.status, s.layer.status, s.layer.value) == ("resolved", "resolved", "EAGLEWorkerV2")
    assert s.layer.site == "sglang/srt/managers/scheduler.py:1064"
    # the draft runner's pool too (the multi-step FlashInfer backends DraftBackendFactory builds)
    assert ("kvpool", "MHATokenToKVPool", "sglang/srt/mem_cache/kv_cache_configurator.py:2775") in \
        [(st.kind, st.value, f"{st.file}:{st.line}") for st in s.layer.chain]


# GLM-4-9B-0414's config.json (architectures Glm4ForCausalLM, whose 0.5.23 class models/glm4.py
# defines get_embed_and_head but not set_eagle3_layers_to_capture) and an EAGLE3 draft for it
_GLM4 = {"architectures": ["Glm4ForCausalLM"], "model_type": "glm4", "attention_bias": True, "head_dim": 128,
         "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 13696, "max_position_embeddings": 32768,
         "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 2, "partial_rotary_factor": 0.5,
         "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
         "vocab_size": 151552, "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338]}
_EAGLE3 = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "draft_vocab_size": 32000, "head_dim": 128,
           "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 13696, "max_position_embeddings": 32768,
           "num_attention_heads": 32, "num_hidden_layers": 1, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
           "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 151552}


@pytest.mark.real_release
def test_real_0_5_23_eagle3_on_a_target_model_class_without_the_capture_hook_is_refused(release, tmp_path):
    # read first: 0.5.23 Scheduler.init_all_attention_backends calls
    # `self.tp_worker.init_attention_backends()` (scheduler.py:1115) before the draft's (:1117);
    # the target runner's init_attention_backends runs configure_aux_hidden_state_capture
    # (model_runner.py:1109) on the loaded model, which raises for a class without
    # set_eagle3_layers_to_capture when the draft is EAGLE3 (attention_backend_setup.py:55-60;
    # eagle_use_aux_hidden_state from spec_aux_hidden_state.py:184). The model is the registry's
    # class for architectures[0]; that Glm4ForCausalLM lacks the method is read from the release.
    import json

    (tmp_path / "glm4").mkdir()
    (tmp_path / "glm4" / "config.json").write_text(json.dumps(_GLM4))
    (tmp_path / "eagle3").mkdir()
    (tmp_path / "eagle3" / "config.json").write_text(json.dumps(_EAGLE3))
    res = _resolve_stages(release("0.5.23"), "sm90", str(tmp_path / "glm4"),
                          ["speculative_algorithm=EAGLE3", f"speculative_draft_model_path={tmp_path / 'eagle3'}"])
    s = res.settings["speculative_algorithm"]
    assert (s.status, s.layer.status) == ("unsupported", "unsupported")
    assert s.layer.value == ("ValueError: Model Glm4ForCausalLM does not implement set_eagle3_layers_to_capture, "
                             "which EAGLE3 aux hidden-state capture requires.")
    assert s.layer.site == "sglang/srt/model_executor/model_runner_components/attention_backend_setup.py:56"
    steps = [(st.kind, st.value, f"{st.file}:{st.line}") for st in s.layer.chain]
    assert ("then", "init_attention_backends", "sglang/srt/managers/scheduler.py:1115") in steps
    # the target's own backend is the attention stage's value, not refused
    assert res.settings["attention_backend"].layer.status == "resolved"


@pytest.mark.real_release
def test_real_0_5_23_the_drafts_fa3_backends_go_to_the_kernel_level_and_sgl_kernel_refuses_sm100(release):
    # read first (sglang#19125): 0.5.23 DraftBackendFactory builds the draft's backends itself,
    # past the registry's fa3 assert (attention_registry.py:243): `FlashAttentionBackend(
    # self.draft_model_runner, skip_prefill=False, fa_impl_ver=fa_impl_ver)` (draft_utils.py:493,
    # fa_impl_ver 3 from _create_fa3_prefill_backend), and FlashAttentionMultiStepBackend's per-step
    # FlashAttentionBackend(..., fa_impl_ver=...) (flashattention_backend.py:3496). With fa_impl_ver
    # 3, FlashAttentionBackend.__init__ imports sgl_kernel.flash_attn (flashattention_backend.py:282);
    # sglang-kernel 0.4.10 (the release's pin) flash_attn.py:306 `if not is_fa3_supported(): raise
    # NotImplementedError`, is_fa3_supported (:25) accepting capability majors 8 and 9 only.
    import dataclasses

    from sglang_audit.resolve.pipeline import prepare, resolve_target, with_kernels

    tree = release("0.5.23")
    cache = shared.cache_for(str(tree.package_dir))
    prep = prepare(Request(source=str(tree.package_dir), arch="sm100", model="qwen3-30b-a3b",
                           sets=["speculative_algorithm=EAGLE", "speculative_draft_attention_backend=fa3"]), cache)
    target = dataclasses.replace(prep.target, layer_stages=("attention", "spec_worker"))
    res = with_kernels(resolve_target(target, cache, None, forks=False), target, cache, None)
    s = res.settings["speculative_algorithm"]
    # the worker builds (SGLang's own code accepts it); the kernel it calls refuses the device
    assert (s.layer.status, s.layer.value) == ("resolved", "EAGLEWorkerV2")
    assert ("sglang.srt.layers.attention.flashattention_backend", "FlashAttentionBackend",
            "sglang/srt/speculative/draft_utils.py:493", (("", "?"), ("skip_prefill", "False"), ("fa_impl_ver", "3"))) \
        in s.layer.backends_built
    k = s.kernel
    assert (s.status, k.status, k.library, k.version) == ("unsupported", "unsupported", "sgl-kernel", "0.4.10")
    assert k.call_site == "sglang/srt/layers/attention/flashattention_backend.py:282"
    assert k.reason.startswith("flash_attn_varlen_func refuses SM100: `if not is_fa3_supported()` holds "
                               "(is_fa3_supported at sgl_kernel/flash_attn.py:25)")
    assert k.reason.endswith("at sgl_kernel/flash_attn.py:306")
    # the target's own backend (FlashInfer, sm100's default) is not the draft's: no such verdict
    att = res.settings["attention_backend"]
    assert (att.status, att.layer.value) == ("resolved", "FlashInferAttnBackend")
    assert att.kernel is None or att.kernel.status != "unsupported"


@pytest.mark.real_release
def test_real_0_5_23_multi_layer_eagle_drafts_fa3_backends_per_layer_reach_the_kernel_level(release):
    # read first (sglang#19125, Step-3.5-Flash multi-layer EAGLE on B200: the draft-extend ran
    # FA3's Hopper kernel): 0.5.23 spec_info.py:354-359 returns MultiLayerEagleWorkerV2 for EAGLE
    # with enable_multi_layer_eagle; its MultiLayerEagleDraftWorker builds
    # `TpModelWorker(..., is_draft_worker=True, is_multi_layer_eagle=True)`
    # (multi_layer_eagle_worker_v2.py:178-183), whose __init__ builds `self._model_runner =
    # ModelRunner(...)` (tp_worker.py:487) and, in _init_multi_layer_eagle_model_runners, one more
    # per step `for i in range(1, get_spec().speculative_num_steps)` (tp_worker.py:506-508);
    # `self.draft_runner_list = self.draft_worker.model_runner_list` (:189). After the constructor,
    # BaseSpecWorker.init_attention_backends (base_spec_worker.py:110) -> init_attention_backend
    # builds `DraftBackendFactory(self.draft_runner_list[step], ...)` per step (:396) and its
    # create_draft_extend_backend (:403): the runner's draft_attention_backend (model_runner.py:379,
    # the flag) is fa3 -> `FlashAttentionBackend(self.draft_model_runner, skip_prefill=False,
    # fa_impl_ver=3)` (draft_utils.py:493), whose kernel sglang-kernel 0.4.10 refuses on SM100
    # (flash_attn.py:306). Before the model worker's runners were built, the factory's raise at
    # draft_utils.py:64 read an unknown runner: the worker was unknown.
    import dataclasses

    from sglang_audit.resolve.pipeline import prepare, resolve_target, with_kernels

    tree = release("0.5.23")
    cache = shared.cache_for(str(tree.package_dir))
    prep = prepare(Request(source=str(tree.package_dir), arch="sm100", model="qwen3-30b-a3b",
                           sets=["speculative_algorithm=EAGLE", "enable_multi_layer_eagle=true",
                                 "speculative_draft_attention_backend=fa3"]), cache)
    target = dataclasses.replace(prep.target, layer_stages=("attention", "spec_worker"))
    res = with_kernels(resolve_target(target, cache, None, forks=False), target, cache, None)
    s = res.settings["speculative_algorithm"]
    assert (s.layer.status, s.layer.value) == ("resolved", "MultiLayerEagleWorkerV2")
    steps = [(st.kind, st.value, f"{st.file}:{st.line}") for st in s.layer.chain]
    assert steps[0] == ("dispatch", "MultiLayerEagleWorkerV2", "sglang/srt/speculative/spec_info.py:359")
    # one draft-extend backend per draft layer's runner: speculative_num_steps of them, 3 as
    # _auto_choose_speculative_params picks for Qwen3MoeForCausalLM (speculative_hook.py:1461)
    fa3 = ("backend", "FlashAttentionBackend", "sglang/srt/speculative/draft_utils.py:493")
    assert steps.count(fa3) == 3
    assert s.layer.backends_built == (("sglang.srt.layers.attention.flashattention_backend", "FlashAttentionBackend",
                                       "sglang/srt/speculative/draft_utils.py:493",
                                       (("", "?"), ("skip_prefill", "False"), ("fa_impl_ver", "3"))),)
    k = s.kernel
    assert (s.status, k.status, k.library, k.version) == ("unsupported", "unsupported", "sgl-kernel", "0.4.10")
    assert k.call_site == "sglang/srt/layers/attention/flashattention_backend.py:282"
    assert k.reason.endswith("at sgl_kernel/flash_attn.py:306")
