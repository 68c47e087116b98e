"""explain FIELD: resolved value and chain, every choice forced, and the branches in the
code with the guard that keeps each from firing; on the fixture checkout and on 0.5.10."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from clirun import cli

from sglang_audit.analyses.explain import (
    BRANCH_BLOCKED,
    BRANCH_FIRED,
    OUTCOME_ACCEPTED,
    OUTCOME_KNOWN_BAD,
    OUTCOME_REJECTED,
    OUTCOME_REWRITTEN,
    explain,
    explain_fields,
)
from sglang_audit.errors import InputError
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.render.explain import render_text
from sglang_audit.resolve.pipeline import Request

MINI_E2 = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_e2"
SA = "sglang/srt/server_args.py"
FP4 = "sglang/srt/layers/quantization/fp4_utils.py"


def by_choice(exp):
    return {c.choice: c for c in exp.choices}


# ---- fixture checkout -------------------------------------------------------------------
@pytest.fixture()
def fixture_req(isolated_cache):
    def make(arch: str, model: str, sets=(), env=()):
        return Request(source=str(MINI_E2), arch=arch, model=model, sets=list(sets), env=list(env))

    return make


def test_fixture_fp4_auto_becomes_cudnn_on_sm120(fixture_req):
    exp = explain(fixture_req("sm120", "deepseek-r1-nvfp4"), "fp4_gemm_runner_backend")
    assert (exp.setting.config, exp.setting.runtime) == ("auto", "flashinfer_cudnn")
    assert exp.choices_source == "release"
    assert [c.choice for c in exp.choices] == ["auto", "flashinfer_cudnn", "flashinfer_cutlass", "flashinfer_trtllm"]
    auto = by_choice(exp)["auto"]
    assert (auto.outcome, auto.layer, auto.runtime, auto.overridden) == (OUTCOME_REWRITTEN, "runtime", "flashinfer_cudnn", False)
    assert (auto.where.file, auto.where.line) == (FP4, 22)
    assert ("is_sm120_supported", True) in [p for c in auto.reason for p in c.predicates]
    assert all(by_choice(exp)[c].outcome in (OUTCOME_ACCEPTED, OUTCOME_KNOWN_BAD) for c in ("flashinfer_cudnn", "flashinfer_cutlass"))
    # SGLang accepts FP4 flashinfer_trtllm on SM120, but it is known-bad there (check's SGA103)
    trtllm = by_choice(exp)["flashinfer_trtllm"]
    assert trtllm.outcome == OUTCOME_KNOWN_BAD and "SGA103" in [r for r, _s, _t in trtllm.known_bad]
    # the resolved value's reason: the sm120 guard, true on this device
    assert (exp.deciding.file, exp.deciding.line) == (FP4, 22)
    sm120 = [c for c in exp.reason if c.line == 21]
    assert sm120 and sm120[0].value is True and sm120[0].holds is True
    branches = {(b.line, b.value): b for b in exp.branches}
    assert branches[(22, "flashinfer_cudnn")].status == BRANCH_FIRED
    cutlass = branches[(24, "flashinfer_cutlass")]
    assert cutlass.status == BRANCH_BLOCKED and [(c.line, c.needed, c.value) for c in cutlass.blocked_by] == [(21, False, True)]


def test_fixture_moe_sm100_branch_is_blocked_on_sm120(fixture_req):
    exp = explain(fixture_req("sm120", "deepseek-r1-nvfp4"), "moe_runner_backend")
    assert exp.setting.config == "auto" and exp.deciding.kind == "default"
    trtllm = [b for b in exp.branches if b.value == "flashinfer_trtllm"]
    assert len(trtllm) == 1 and trtllm[0].status == BRANCH_BLOCKED and trtllm[0].applies_to_model
    (blocked,) = trtllm[0].blocked_by
    assert (blocked.guard, blocked.value, blocked.predicates) == ("is_sm100_supported()", False, (("is_sm100_supported", False),))
    text = render_text(exp)
    assert "server_args.py:51 → 'flashinfer_trtllm'" in text and "is_sm100_supported() = False" in text
    # on sm100 the same branch fires
    exp100 = explain(fixture_req("sm100", "deepseek-r1-nvfp4"), "moe_runner_backend")
    assert [b.status for b in exp100.branches if b.value == "flashinfer_trtllm"] == [BRANCH_FIRED]
    assert exp100.setting.config == "flashinfer_trtllm" and not exp100.overridden


def test_fixture_user_flag_overridden(fixture_req):
    req = fixture_req("sm120", "deepseek-r1-nvfp4", ["moe_runner_backend=flashinfer_cutlass"], ["SGLANG_FIXTURE_FORCE_TRITON=1"])
    exp = explain(req, "moe_runner_backend")
    assert exp.user_set and exp.user_value == "flashinfer_cutlass"
    assert exp.overridden and exp.setting.config == "triton"
    assert (exp.deciding.file, exp.deciding.line, exp.deciding.value) == (SA, 58, "triton")
    forced = by_choice(exp)
    assert forced["flashinfer_trtllm"].outcome == OUTCOME_REWRITTEN and forced["flashinfer_trtllm"].overridden
    assert forced["flashinfer_trtllm"].where.line == 58
    assert forced["auto"].outcome == OUTCOME_REWRITTEN and not forced["auto"].overridden  # auto: SGLang's to pick
    assert forced["triton"].outcome == OUTCOME_ACCEPTED
    assert "OVERRIDDEN: you set 'flashinfer_cutlass'" in render_text(exp)


def test_fixture_forced_choice_rejected(fixture_req):
    exp = explain(fixture_req("sm100", "gpt-oss-120b", ["quantization=mxfp4"]), "moe_runner_backend")
    rej = by_choice(exp)["flashinfer_cutlass"]
    assert rej.outcome == OUTCOME_REJECTED
    assert (rej.rejection.file, rej.rejection.line) == (SA, 56)
    assert rej.rejection.message == "modelopt_fp4 quantization is required for Flashinfer Cutlass MOE"
    assert by_choice(exp)["triton"].outcome == OUTCOME_ACCEPTED


def test_fixture_unknown_field(fixture_req):
    with pytest.raises(InputError, match="did you mean moe_runner_backend") as err:
        explain(fixture_req("sm120", "deepseek-r1-nvfp4"), "moe_runner_backnd")
    assert str(err.value).count("moe_runner_backend") == 1  # a setting is also a field: named once


def test_cli_explain_text_and_json(isolated_cache):
    args = ["explain", "fp4_gemm_runner_backend", "-s", str(MINI_E2), "-a", "sm120", "-m", "deepseek-r1-nvfp4"]
    code, out, _ = cli(*args)
    assert code == 0
    assert "Resolved: fp4_gemm_runner_backend = auto → runtime flashinfer_cudnn" in out
    assert f"decided at {FP4}:22" in out and "If you force it" in out and "✗ blocked" in out
    code, out, _ = cli(*args, "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["field"] == "fp4_gemm_runner_backend" and data["setting"]["runtime"] == "flashinfer_cudnn"
    assert {c["choice"]: c["outcome"] for c in data["choices"]}["auto"] == "rewritten"
    assert any(b["status"] == "blocked" and b["blocked_by"] == [f"{FP4}:21"] for b in data["branches"])
    code, _out, err = cli("explain", "nope", "-s", str(MINI_E2), "-a", "sm120", "-m", "deepseek-r1-nvfp4")
    assert code == 2 and "cannot explain 'nope'" in err


# ---- real releases ------------------------------------------------------------------------
def real_req(release, arch: str, model: str, sets=()):
    return Request(source=str(release("0.5.10").package_dir), arch=arch, model=model, sets=list(sets))


@pytest.mark.real_release
def test_0510_sm120_qwen35_fp4_every_choice_and_the_sm120_branch(release):
    exp = explain(real_req(release, "sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8"]), "fp4_gemm_runner_backend")
    assert exp.choices_source == "release"
    forced = by_choice(exp)
    assert set(forced) == {"auto", "flashinfer_cudnn", "flashinfer_cutlass", "flashinfer_trtllm", "cutlass"}
    auto = forced["auto"]
    assert (auto.outcome, auto.layer, auto.runtime) == (OUTCOME_REWRITTEN, "runtime", "flashinfer_cudnn")
    assert auto.where.file == FP4 and "is_sm120_supported()" in auto.where.guard
    for choice in ("flashinfer_cudnn", "flashinfer_cutlass", "cutlass"):
        assert forced[choice].outcome in (OUTCOME_ACCEPTED, OUTCOME_KNOWN_BAD), forced[choice]
    assert forced["flashinfer_trtllm"].outcome == OUTCOME_KNOWN_BAD
    assert "SGA103" in [r for r, _s, _t in forced["flashinfer_trtllm"].known_bad]
    assert "accepted by SGLang, but known-bad: SGA103" in render_text(exp)
    # the reason auto becomes flashinfer_cudnn: the is_sm120_supported() branch in fp4_utils.py
    assert exp.deciding.file == FP4 and exp.deciding.value == "flashinfer_cudnn"
    sm120 = [c for c in exp.reason if c.file == FP4 and c.guard == "is_sm120_supported()"]
    assert sm120 and sm120[0].holds is True and sm120[0].predicates == (("is_sm120_supported", True),)
    fired = [b for b in exp.branches if b.status == BRANCH_FIRED]
    assert [(b.file, b.value) for b in fired] == [(FP4, "flashinfer_cudnn")]
    text = render_text(exp)
    for choice in forced:
        assert f"  {choice} " in text
    assert "fp4_utils.py:66 if is_sm120_supported()" in text


@pytest.mark.real_release
def test_0510_sm120_qwen35_moe_names_the_sm100_branch(release):
    exp = explain(real_req(release, "sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8"]), "moe_runner_backend")
    assert exp.setting.config == "auto"
    assert len(exp.choices) >= 8 and all(c.outcome in (OUTCOME_ACCEPTED, OUTCOME_KNOWN_BAD, OUTCOME_REWRITTEN, OUTCOME_REJECTED) for c in exp.choices)
    forced = by_choice(exp)
    # accepted by SGLang, flagged by check on SM120: explain says so
    assert forced["flashinfer_trtllm"].outcome == OUTCOME_KNOWN_BAD and "SGA201" in [r for r, _s, _t in forced["flashinfer_trtllm"].known_bad]
    sm100 = [b for b in exp.branches
             if b.value == "flashinfer_trtllm" and b.status == BRANCH_BLOCKED and b.applies_to_model
             and any(c.guard == "is_sm100_supported()" for c in b.blocked_by)]
    assert sm100, [(b.line, b.status, b.value) for b in exp.branches]
    cond = next(c for c in sm100[0].blocked_by if c.guard == "is_sm100_supported()")
    assert cond.needed is True and cond.value is False and cond.predicates == (("is_sm100_supported", False),)
    text = render_text(exp)
    assert f"server_args.py:{sm100[0].line} → 'flashinfer_trtllm'" in text
    assert "must be true, but is false on sm120 (is_sm100_supported() = False)" in text


@pytest.mark.real_release
def test_0510_mxfp8_overrides_the_users_moe_runner(release):
    # 0.5.10 _handle_moe_kernel_config: mxfp8 rewrites any runner but cutlass/flashinfer_trtllm(_routed)
    exp = explain(real_req(release, "sm100", "qwen3-30b-a3b", ["quantization=mxfp8", "moe_runner_backend=triton"]), "moe_runner_backend")
    assert exp.overridden and exp.setting.config == "flashinfer_trtllm"
    assert exp.deciding.file == SA and exp.deciding.code == 'self.moe_runner_backend = "flashinfer_trtllm"'
    assert "mxfp8" in exp.deciding.guard
    forced = by_choice(exp)
    assert forced["triton"].outcome == OUTCOME_REWRITTEN and forced["triton"].overridden
    assert forced["triton"].where.line == exp.deciding.line
    assert forced["cutlass"].outcome == OUTCOME_ACCEPTED and forced["flashinfer_trtllm"].outcome == OUTCOME_ACCEPTED
    assert forced["auto"].outcome == OUTCOME_REWRITTEN and not forced["auto"].overridden
    assert "OVERRIDDEN: you set 'triton'" in render_text(exp)


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_second_explain_is_answered_from_the_result_cache(isolated_cache, monkeypatch, use_cache, process_log):
    from sglang_audit.resolve.resolver import Resolver

    req = Request(source=str(MINI_E2), arch="sm120", model="deepseek-r1-nvfp4", use_cache=use_cache)
    first = explain(req, "fp4_gemm_runner_backend")
    calls = process_log  # forced choices resolve in processes forked for them
    real = Resolver.resolve

    def counted(self):
        calls.append(1)
        return real(self)

    monkeypatch.setattr(Resolver, "resolve", counted)
    again = explain(req, "fp4_gemm_runner_backend")
    # the base resolution and one per forced choice (four choices, the default among them)
    assert len(calls) == (0 if use_cache else 4)
    assert json.dumps(again.to_json(), sort_keys=True) == json.dumps(first.to_json(), sort_keys=True)


# ---- which layers a forced choice builds (issue 22) ---------------------------------------
def _stages_resolved(monkeypatch, log) -> None:
    from sglang_audit.resolve.resolver import Resolver

    real = Resolver.resolve

    def spied(self):
        stages = self.target.layer_stages
        log.append(None if stages is None else list(stages))
        return real(self)

    monkeypatch.setattr(Resolver, "resolve", spied)


# the FP4 GEMM's kernel is read off the linear stage's forward (rules/kernels.toml [[layer_call]]),
# the last stage: every stage runs for its forced choices
ALL_STAGES = ["moe", "moe_draft", "attention", "spec_worker", "linear"]


@pytest.mark.parametrize(("field", "stages"), [("fp4_gemm_runner_backend", ALL_STAGES), ("moe_runner_backend", ["moe", "moe_draft"])])
def test_forced_choices_build_only_the_layers_their_outcome_reads(fixture_req, monkeypatch, field, stages, process_log):
    _stages_resolved(monkeypatch, process_log)
    exp = explain(replace(fixture_req("sm120", "deepseek-r1-nvfp4"), use_cache=False), field)
    seen = process_log.items()
    assert seen[0] is None  # the base resolution: every layer, as `resolve` shows it
    assert len(seen) == 1 + sum(1 for c in exp.choices if c.choice != exp.setting.config)
    assert all(s == stages for s in seen[1:])


def test_a_rule_reading_another_settings_layer_keeps_that_stage(tmp_path, monkeypatch):
    from sglang_audit.analyses import explain as ex

    # the draft's MoE layers take the target's runner unless the speculative one is set
    # (0.5.23 moe/utils.py _default_speculative_moe_runner_backend): built with it again
    assert ex.layer_stages_read("moe_runner_backend", frozenset()) == ("moe", "moe_draft")
    assert ex.layer_stages_read("moe_runner_backend", frozenset({"attention_backend"})) == ("moe", "moe_draft", "attention")
    assert ex.layer_stages_read("fp4_gemm_runner_backend", frozenset({"moe_runner_backend"})) == tuple(ALL_STAGES)
    # a later stage runs on what the earlier ones left: it is never built without them
    assert ex.layer_stages_read("speculative_moe_runner_backend", frozenset()) == ("moe", "moe_draft")
    # the speculative worker builds the draft's attention backends with the same choice
    assert ex.layer_stages_read("attention_backend", frozenset()) == ("moe", "moe_draft", "attention", "spec_worker")
    assert ex.layer_stages_read("fp4_gemm_runner_backend", frozenset({"attention_backend"})) == tuple(ALL_STAGES)
    # the shipped rule files: only their `when` counts (examples name layer facts as inputs)
    rules = tmp_path / "known-bad"
    rules.mkdir()
    (rules / "SGA999-x.yaml").write_text(
        "id: SGA999\nsubject: moe_runner_backend\nwhen:\n  all:\n    - fact: settings.attention_backend.layer\n"
        "      eq: TritonAttnBackend\nexamples:\n  pass:\n    - {settings.speculative_moe_runner_backend.layer: x}\n")
    monkeypatch.setattr(ex, "known_bad_dir", lambda: rules)
    assert ex._layers_rules_name(None) == frozenset({"attention_backend"})

    class Rule:
        when = ("all", (("leaf", "settings.moe_runner_backend.layer", "eq", "x"),))

    assert ex._layers_rules_name((Rule(),)) == frozenset({"moe_runner_backend"})


@pytest.mark.real_release
def test_0510_forced_choices_without_the_attention_stage_explain_the_same(release, monkeypatch, process_log):
    # with NEXTN (a draft model): a forced target MoE runner builds the draft's MoE layers
    # (they take the target's runner) but not the attention backends, and explains the same
    # as one that builds them all
    from sglang_audit.analyses import explain as ex
    from sglang_audit.resolve import layers as layers_module
    from sglang_audit.resolve import resolver as resolver_module
    from sglang_audit.resolve.attention import evaluate_attention

    req = replace(real_req(release, "sm120", "qwen3.5-397b-a17b-nvfp4",
                           ["tp_size=8", "speculative_algorithm=NEXTN", "disable_radix_cache=true"]),
                  use_cache=False, flashinfer_source="none")
    built = process_log
    real_explore = layers_module._explore

    def counted(*args, **kwargs):
        built.append("attention")
        return evaluate_attention(*args, **kwargs)

    def explored(interp, role, spec):
        built.append(role.setting)  # pickled: a forced choice runs in a process forked for it
        return real_explore(interp, role, spec)

    monkeypatch.setattr(resolver_module, "STAGES", tuple(
        replace(s, evaluate=counted) if s.name == "attention" else s for s in resolver_module.STAGES))
    monkeypatch.setattr(layers_module, "_explore", explored)
    def explained():
        # evaluated (no result cache), on the release's IR from the disk cache: parsing the
        # release's files from source again would cost ~35 s of CPU per call
        out = explain_fields(req, ["moe_runner_backend"], cache=SourceCache(use_disk=True))["moe_runner_backend"]
        assert not isinstance(out, Exception), out
        return out

    fewer = explained()
    forced = len([c for c in fewer.choices if c.choice != fewer.setting.config])
    # the base resolution's only, and the target's and the draft's MoE layers once per forced choice
    assert sorted(built.items()) == sorted(["attention"] + ["speculative_moe_runner_backend"] * (1 + forced)
                                           + ["moe_runner_backend"] * (1 + forced))
    monkeypatch.setattr(ex, "layer_stages_read", lambda field, named: None)
    every = explained()
    assert built.items().count("attention") == 2 + forced
    assert built.items().count("speculative_moe_runner_backend") == 2 * (1 + forced)
    assert json.dumps(fewer.to_json(), sort_keys=True) == json.dumps(every.to_json(), sort_keys=True)


@pytest.mark.real_release
def test_0523_a_forced_attention_backend_the_eagle_worker_refuses_says_so(release):
    # read first: 0.5.23 DraftBackendFactory.create_decode_backend's map (draft_utils.py:96-113)
    # has no "torch_native"; _create_backend raises at :64 when the name is not in it. The
    # attention stage alone accepts torch_native for Qwen3-30B-A3B on sm100: the choice fails
    # only through the speculative worker, which builds the draft's backends with it
    from sglang_audit.analyses import explain as ex
    from sglang_audit.analyses.explain import ChoiceOutcome
    from sglang_audit.render.explain import _choice_lines
    from sglang_audit.resolve.pipeline import prepare, resolve_target
    from sglang_audit.result import STATUS_UNSUPPORTED

    tree = release("0.5.23")
    cache = SourceCache(use_disk=True)
    prep = prepare(Request(source=str(tree.package_dir), arch="sm100", model="qwen3-30b-a3b",
                           sets=["speculative_algorithm=EAGLE", "attention_backend=torch_native"]), cache)
    # the stages explain runs for a forced attention backend, less the MoE layers (not read here)
    assert ex.layer_stages_read("attention_backend", frozenset())[-2:] == ("attention", "spec_worker")
    res = resolve_target(replace(prep.target, layer_stages=("attention", "spec_worker")), cache, None, forks=False)
    assert res.settings["attention_backend"].layer.status == "resolved"
    built = {"speculative_algorithm"}
    fails = ex._other_layers(res, "attention_backend", built, STATUS_UNSUPPORTED)
    assert fails == (("speculative_algorithm", "speculative",
                      "ValueError: EAGLE is not supported in decode attention backend torch_native at "
                      "sglang/srt/speculative/draft_utils.py:64"),)
    # a setting outside what the choices were built with is never listed
    assert ex._other_layers(res, "attention_backend", set(), STATUS_UNSUPPORTED) == ()
    lines = _choice_lines(ChoiceOutcome("torch_native", ex.OUTCOME_ACCEPTED, "torch_native", also_fails=fails), 12, "sm100")
    assert lines[1].strip() == ("with it, the speculative worker (speculative_algorithm) fails: ValueError: EAGLE is "
                                "not supported in decode attention backend torch_native at "
                                "sglang/srt/speculative/draft_utils.py:64")
    assert ChoiceOutcome("x", ex.OUTCOME_ACCEPTED, also_fails=fails).to_json()["also_fails"] == [
        {"setting": "speculative_algorithm", "stage": "speculative", "failure": fails[0][2]}]
