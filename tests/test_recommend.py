"""``recommend``: candidates pruned with one reason each, ranked by evidence (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

import pytest
import shared
from clirun import cli

from sglang_audit.analyses.recommend import (
    NO_EVIDENCE,
    SCHEMA,
    _argv_without,
    load_measurements,
    read_bench,
    recommend,
)
from sglang_audit.errors import InputError
from sglang_audit.render.recommend import render_text
from sglang_audit.resolve.pipeline import Request

NEXTN = ["tp_size=8", "speculative_algorithm=NEXTN", "speculative_num_steps=3", "speculative_eagle_topk=1",
         "speculative_num_draft_tokens=4", "disable_radix_cache=true"]
MOE, FP4, DRAFT = "moe_runner_backend", "fp4_gemm_runner_backend", "speculative_moe_runner_backend"


# ---- published measurements ----------------------------------------------------------------
def test_every_published_measurement_has_a_source_url_and_hardware():
    found = load_measurements()
    assert len(found) >= 20
    for m in found:
        url = urlparse(m.source)
        assert url.scheme == "https" and url.netloc and url.path.strip("/"), m.id
        assert m.hardware.strip(), m.id
    assert len({m.id for m in found}) == len(found)


def test_a_measurement_without_its_source_is_refused(tmp_path: Path):
    (tmp_path / "x.yaml").write_text(
        "setting: moe_runner_backend\nmeasurements:\n  - {id: a, choice: triton, arch_family: sm9x, model_family: m,"
        " quantization: fp8, metric: tok/s, better: higher, value: 1, unit: tok/s, hardware: H100,"
        " workload: w, comparison: c}\n")
    with pytest.raises(InputError, match="lacks source"):
        load_measurements(tmp_path)


# ---- --bench --------------------------------------------------------------------------------
def _bench_line(tag: str | None, value: float, **server: str) -> str:
    # the fields sglang/benchmark/serving.py writes (a subset)
    return json.dumps({"tag": tag, "backend": "sglang", "dataset_name": "random", "server_info": server or None,
                       "completed": 256, "request_throughput": 1.0, "output_throughput": value,
                       "total_throughput": value * 2, "median_ttft_ms": 100.0, "median_itl_ms": 10.0})


def test_bench_lines_are_read_with_their_metric_and_tag(tmp_path: Path):
    f = tmp_path / "b.jsonl"
    f.write_text(_bench_line("a=1", 1234.5) + "\n\n" + _bench_line(None, 99.0, moe_runner_backend="triton") + "\n")
    lines = read_bench(str(f))
    assert [(b.tag, b.metric, b.value, b.line) for b in lines] == [("a=1", "output_throughput", 1234.5, 1),
                                                                     (None, "output_throughput", 99.0, 3)]
    assert lines[1].server == {"moe_runner_backend": "triton"}


def test_a_bench_line_without_a_result_is_an_input_error(tmp_path: Path):
    f = tmp_path / "b.jsonl"
    f.write_text('{"tag": "x"}\n')
    with pytest.raises(InputError, match=r"b.jsonl:1: no result field"):
        read_bench(str(f))
    f.write_text("not json\n")
    with pytest.raises(InputError, match=r"b.jsonl:1: not a JSON line"):
        read_bench(str(f))


def test_the_users_command_loses_only_the_replaced_flags():
    argv = ["--model-path", "M", "--moe-runner-backend", "triton", "--tp", "8", "--fp4-gemm-backend=cutlass"]
    assert _argv_without(argv, {"--moe-runner-backend", "--fp4-gemm-backend"}) == ["--model-path", "M", "--tp", "8"]


# ---- real releases -----------------------------------------------------------------------------
_CACHE: dict[tuple, object] = {}


def run(release, version: str, arch: str, model: str, sets: list[str], bench: str | None = None):
    key = (version, arch, model, tuple(sets), bench)
    if key not in _CACHE:
        release(version)
        # the release as the CLI names it, so the result key is that of the CLI runs of the same
        # deployment (`recommend --help`'s example, the recommend report golden): they share
        # their resolutions through the result cache
        req = Request(source=f"sglang=={version}", arch=arch, model=model, sets=list(sets))
        _CACHE[key] = recommend(req, bench=bench, cache=shared.cache_for(req.source))
    return _CACHE[key]


def by_id(cands) -> dict:
    return {c.id: c for c in cands}


@pytest.mark.real_release
@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_sm120_qwen35_nextn_rejects_what_fails_and_keeps_the_field_config(release, version):
    rec = run(release, version, "sm120", "qwen3.5-397b-a17b-nvfp4", NEXTN)
    assert rec.fields == (MOE, FP4, DRAFT)  # the release declares --speculative-moe-runner-backend
    rejected = by_id(rec.rejected)
    # TRT-LLM MoE: known-bad on SM12x, with the rule's sources
    trt = rejected[f"{MOE}=flashinfer_trtllm"].reason
    assert (trt.kind, trt.rule) == ("known_bad", "SGA201") and trt.sources
    # TRT-LLM FP4 GEMM: no layer of this model is read to call mm_fp4 (its dense layers are all in
    # config.json's ignore), but the whole model's construction is not followed to its end on
    # these releases, so its use is not decided: no FlashInfer verdict (there is no call to read),
    # the field is explored, and the known-bad rule (SGA103) holds as written
    fp4 = rejected[f"{FP4}=flashinfer_trtllm"].reason
    assert (fp4.kind, fp4.rule) == ("known_bad", "SGA103") and fp4.sources
    assert not any(n.startswith(f"{FP4}: not explored") for n in rec.notes)
    # CuTe-DSL MoE: removed with one reason and where it comes from
    cute = rejected[f"{MOE}=flashinfer_cutedsl"].reason
    assert cute.kind in ("known_bad", "rejected") and (cute.rule or cute.where.startswith("sglang/"))
    # nothing known to fail is viable; the configuration that works in the field is
    for c in rec.viable:
        assert c.value(MOE) not in ("flashinfer_trtllm", "flashinfer_trtllm_routed", "flashinfer_cutedsl")
        # the draft inherits the target's runner unless forced on its own
        assert c.value(DRAFT) == dict(c.flags).get(DRAFT, c.value(MOE))
        assert c.value(DRAFT) not in ("flashinfer_trtllm", "flashinfer_trtllm_routed", "flashinfer_cutedsl")
        assert c.value(FP4) not in ("flashinfer_trtllm", "flashinfer_cutlass")
    field_config = f"{MOE}=flashinfer_cutlass,{FP4}=flashinfer_cudnn"
    assert field_config in by_id(rec.viable)
    assert rec.recommended is not None and rec.recommended.value(MOE) == "flashinfer_cutlass"
    # what separates each ranked pair is said, or "benchmark both"
    assert len(rec.steps) == len(rec.viable) - 1
    assert all(s.decided_by != "none" or s.text == NO_EVIDENCE for s in rec.steps)
    assert rec.resolutions <= rec.max_resolutions
    text = render_text(rec)
    assert "--moe-runner-backend flashinfer_cutlass" in rec.launch and "--disable-radix-cache" in rec.launch
    assert "Rejected (" in text and "Benchmark plan" in text and "--bench recommend-bench.jsonl" in text


@pytest.mark.real_release
def test_0510_sm120_fp4_between_the_viable_is_decided_by_sglangs_auto(release):
    rec = run(release, "0.5.10", "sm120", "qwen3.5-397b-a17b-nvfp4", NEXTN)
    assert rec.viable[0].id == f"{MOE}=flashinfer_cutlass,{FP4}=flashinfer_cudnn"
    # with the MoE runners (target, draft) the same, FP4 cudnn ranks above FP4 cutlass; what puts
    # the first cutlass candidate below is SGLang's own pick on SM120 (fp4_utils.py); the
    # candidates above it (MoE runners, a draft forced on its own) nothing separates
    rank = {c.id: i for i, c in enumerate(rec.viable)}
    others = {c.id: (c.value(MOE), c.value(DRAFT)) for c in rec.viable}
    pairs = [(a.id, b.id) for a in rec.viable for b in rec.viable if others[a.id] == others[b.id]
             and (a.value(FP4), b.value(FP4)) == ("flashinfer_cudnn", "cutlass")]
    assert pairs and all(rank[a] < rank[b] for a, b in pairs)
    fp4 = [c.value(FP4) for c in rec.viable]
    first_cutlass = fp4.index("cutlass")
    assert set(fp4[:first_cutlass]) == {"flashinfer_cudnn"}
    step = rec.steps[first_cutlass - 1]
    assert step.decided_by == "sglang_auto" and "fp4_utils.py:" in step.text
    assert all(s.decided_by == "none" and s.text == NO_EVIDENCE for s in rec.steps[:first_cutlass - 1])
    assert (FP4, "flashinfer_cudnn") in [(f, v) for f, v, _w in rec.auto]


@pytest.mark.real_release
@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_sm100_deepseek_r1_trtllm_moe_is_viable_and_ranked_with_its_source(release, version):
    rec = run(release, version, "sm100", "deepseek-r1-nvfp4", ["tp_size=8"])
    trt = [c for c in rec.viable if c.value(MOE) == "flashinfer_trtllm"]
    assert trt and rec.viable[0].value(MOE) == "flashinfer_trtllm"
    auto = [e for e in trt[0].evidence if e.kind == "sglang_auto" and e.text.startswith(MOE)]
    # server_args.py in 0.5.10, arg_groups/overrides.py in 0.5.23
    assert auto and auto[0].source.startswith("sglang/srt/") and auto[0].source.rsplit(":", 1)[1].isdigit()
    # the FP4 GEMM between the viable: published kernel measurements on SM100, with their URL
    published = [e for e in rec.viable[0].evidence if e.kind == "published"]
    assert published and all(e.source.startswith("https://") and e.hardware for e in published)


@pytest.mark.real_release
def test_with_a_bench_file_the_ranking_follows_the_measurements(release, tmp_path: Path):
    base = run(release, "0.5.10", "sm120", "qwen3.5-397b-a17b-nvfp4", NEXTN)
    ids = [c.id for c in base.viable]
    low, high = ids[0], ids[1]  # measure the second faster than the first
    f = tmp_path / "bench.jsonl"
    f.write_text(_bench_line(low, 900.0) + "\n" + _bench_line(high, 1100.0) + "\n")
    code, out, err = cli("recommend", "-s", release("0.5.10").package_dir, "-a", "sm120", "-m", "qwen3.5-397b-a17b-nvfp4",
                         *[a for s in NEXTN for a in ("--set", s)], "--bench", f, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["schema"] == SCHEMA and data["bench_lines"] == 2
    assert [c["id"] for c in data["viable"][:2]] == [high, low]
    assert data["ranking"][0]["decided_by"] == "bench" and "1100" in data["ranking"][0]["text"]
    assert data["recommended"]["id"] == high


@pytest.mark.real_release
def test_the_recommended_command_is_the_users_launch_with_the_changed_flags(release):
    launch = ("CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 python3 -m sglang.launch_server --model-path nvidia/Qwen3.5-397B-A17B-NVFP4 "
              "--tp 8 --moe-runner-backend triton --speculative-algorithm NEXTN --speculative-num-steps 3 "
              "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --disable-radix-cache")
    req = Request(source=str(release("0.5.10").package_dir), arch="sm120", model=None, launch=launch)
    rec = recommend(req, cache=shared.cache_for(req.source))
    assert rec.current[0] == (MOE, "triton")
    assert (MOE, "triton", "flashinfer_cutlass") in rec.changes
    assert rec.launch.startswith("CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 ")
    assert "--tp 8" in rec.launch and "triton" not in rec.launch
    assert rec.launch.endswith("--moe-runner-backend flashinfer_cutlass --fp4-gemm-backend flashinfer_cudnn")


def test_a_layer_the_release_fails_to_build_rejects_the_candidate():
    # the layer stage (another branch) reports status "unsupported" with SGLang's raise
    from dataclasses import dataclass

    from sglang_audit.analyses.recommend import _reason
    from sglang_audit.result import ModelSummary, Resolution, Setting

    @dataclass(frozen=True)
    class Layer:
        status: str
        value: str
        site: str

    layer = Layer("unsupported", "NotImplementedError: no kernel", "sglang/srt/layers/quantization/modelopt_quant.py:1908")
    res = Resolution({"version": "x"}, "s", {"platform": "cuda", "major": 12}, ModelSummary("m", "/m", "A", "modelopt_fp4", None),
                     {}, {}, None, {MOE: Setting(MOE, "triton", None, "resolved", layer=layer)})
    reason = _reason(res, {MOE: "triton"}, (MOE,), (), "single")
    assert reason is not None and reason.kind == "layer"
    assert reason.where == "sglang/srt/layers/quantization/modelopt_quant.py:1908" and "NotImplementedError" in reason.message


@pytest.mark.parametrize(("stage", "said"), [
    ("attention", "the attention backend built with it fails: ValueError: no"),
    ("", "the MoE layers built with it fail: ValueError: no"),
])
def test_the_rejection_names_what_was_built_with_its_verb(stage: str, said: str):
    # recommend words a layer failure as explain does (result.built_fails): an attention backend
    # "fails", the MoE layers "fail"
    from sglang_audit.analyses.recommend import _reason
    from sglang_audit.result import LayerValue, ModelSummary, Resolution, Setting

    layer = LayerValue("unsupported", "ValueError: no", site="sglang/srt/layers/attention/x.py:7", stage=stage)
    res = Resolution({"version": "x"}, "s", {"platform": "cuda", "major": 12}, ModelSummary("m", "/m", "A", None, None),
                     {}, {}, None, {"attention_backend": Setting("attention_backend", "fa4", None, "unsupported", layer=layer)})
    reason = _reason(res, {"attention_backend": "fa4"}, ("attention_backend",), (), "single")
    assert reason is not None and reason.message == f"attention_backend=fa4: {said}"


# ---- the draft runner forced on its own (fixture: mini_e5 declares --speculative-moe-runner-backend) ---
MINI_E5 = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_e5"


def test_the_draft_runner_is_forced_independently_of_the_target():
    req = Request(source=str(MINI_E5), arch="sm120", model="deepseek-r1-nvfp4", sets=["speculative_algorithm=NEXTN"],
                  use_cache=False)
    rec = recommend(req)
    assert rec.fields == (MOE, FP4, DRAFT)
    viable = by_id(rec.viable)
    # "target X + draft Y": the draft forced to a runner the target does not use
    mixed = viable[f"{MOE}=flashinfer_cutlass,{FP4}=flashinfer_cudnn,{DRAFT}=triton"]
    assert (mixed.value(MOE), mixed.value(DRAFT)) == ("flashinfer_cutlass", "triton")
    assert f"{MOE}=triton,{FP4}=flashinfer_cudnn,{DRAFT}=flashinfer_cutlass" in viable
    # not forcing it, the draft inherits the target's runner (and that one ranks first: fewer changes)
    inherits = viable[f"{MOE}=flashinfer_cutlass,{FP4}=flashinfer_cudnn"]
    assert inherits.value(DRAFT) == "flashinfer_cutlass" and rec.viable[0] is inherits
    # a draft forced to the target's own runner is not a second candidate
    assert not [c for c in (*rec.viable, *rec.rejected, *rec.not_evaluated)
                if dict(c.flags).get(DRAFT) is not None and dict(c.flags).get(DRAFT) == dict(c.flags).get(MOE)]
    # a runner removed for the target on this device (SGA201 on SM12x) is not forced again for the
    # draft (same checkpoint, same precision); the note names it
    assert by_id(rec.rejected)[f"{MOE}=flashinfer_trtllm"].reason.rule == "SGA201"
    assert not [c for c in (*rec.viable, *rec.rejected, *rec.not_evaluated) if dict(c.flags).get(DRAFT) == "flashinfer_trtllm"]
    assert f"{DRAFT}: 1 choice(s) not forced on their own" in " ".join(rec.notes) and "flashinfer_trtllm" in " ".join(rec.notes)
    assert rec.resolutions <= rec.max_resolutions


def test_the_all_to_all_backend_is_explored_only_with_expert_parallelism(tmp_path: Path):
    from sglang_audit.analyses.recommend import A2A, _matters
    from sglang_audit.result import ModelSummary, Resolution

    (tmp_path / "config.json").write_text('{"n_routed_experts": 256}')

    def res(flags: dict) -> Resolution:
        return Resolution({"version": "x"}, "s", {"platform": "cuda", "major": 10},
                          ModelSummary("m", str(tmp_path), "A", None, None), flags, {}, None, {})

    assert not _matters(A2A, res({}), tmp_path)
    assert not _matters(A2A, res({"ep_size": 1}), tmp_path)
    assert _matters(A2A, res({"ep_size": 8}), tmp_path)
    (tmp_path / "config.json").write_text('{"hidden_size": 4096}')  # a dense model has nothing to dispatch
    assert not _matters(A2A, res({"ep_size": 8}), tmp_path)


# ---- attention backends (--explore attention), pruned by SGLang's support matrix first ----------
ATTN_CHOICES = '["triton", "fa3", "flashinfer", "trtllm_mha", "trtllm_mla", "flashmla", "aiter", "dsa"]'


@pytest.fixture()
def mini_attention(tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "mini_e5"
    shutil.copytree(MINI_E5, dst)
    sa = dst / "python" / "sglang" / "srt" / "server_args.py"
    text = sa.read_text(encoding="utf-8")
    old = 'parser.add_argument("--attention-backend", type=str)'
    assert old in text
    sa.write_text(text.replace(old, f'parser.add_argument("--attention-backend", type=str, choices={ATTN_CHOICES})'),
                  encoding="utf-8")
    return dst


def test_attention_choices_are_pruned_by_the_support_matrix_then_resolved(mini_attention: Path):
    from sglang_audit.analyses.recommend import attention_kind

    req = Request(source=str(mini_attention), arch="sm100", model="deepseek-r1-nvfp4", sets=[], use_cache=False)
    plain = recommend(req)
    assert "attention_backend" not in plain.fields  # only on request: each choice is a resolution
    rec = recommend(req, explore=("attention",), max_resolutions=64)
    assert rec.fields == (MOE, FP4, "attention_backend")
    assert attention_kind(Path(rec.resolution.model.path)) == "mla"
    removed = {dict(c.flags).get("attention_backend"): c.reason for c in rec.rejected
               if c.reason is not None and c.reason.kind == "support_matrix"}
    # an MHA-only backend for an MLA model, a ROCm backend on CUDA: removed without a resolution, with the source
    assert set(removed) == {"trtllm_mha", "aiter"}
    assert "MHA models only" in removed["trtllm_mha"].message and "hip platform" in removed["aiter"].message
    assert removed["aiter"].sources == ("https://docs.sglang.io/advanced_features/attention_backend.html",)
    # one the matrix does not list (model-specific) is not explored, and the note says it
    assert any(n.startswith("attention_backend: 1 choice(s) not explored") and "dsa" in n for n in rec.notes)
    viable_attn = {c.value("attention_backend") for c in rec.viable}
    assert viable_attn == {"triton", "fa3", "flashinfer", "trtllm_mla", "flashmla"}
    assert rec.resolutions <= rec.max_resolutions


def test_an_unknown_explore_value_is_an_input_error(mini_attention: Path):
    req = Request(source=str(mini_attention), arch="sm100", model="deepseek-r1-nvfp4", sets=[], use_cache=False)
    with pytest.raises(InputError, match="--explore sampling"):
        recommend(req, explore=("sampling",))


def test_published_attention_measurements_rank_an_mha_model_and_ignore_the_weights_precision(mini_attention: Path):
    req = Request(source=str(mini_attention), arch="sm100", model="qwen3-30b-a3b", sets=[], use_cache=False)
    rec = recommend(req, explore=("attention",), max_resolutions=64)
    removed = {dict(c.flags)["attention_backend"] for c in rec.rejected if c.reason and c.reason.kind == "support_matrix"}
    assert removed == {"trtllm_mla", "flashmla", "aiter"}  # MLA-only backends for an MHA model; ROCm on CUDA
    # SGLang #25005 (Gemma4, bf16) and #19030 (Qwen3.5, FP8) both measured trtllm_mha above triton on SM100;
    # an attention measurement counts whatever the checkpoint's precision
    assert rec.viable[0].value("attention_backend") == "trtllm_mha"
    sources = {e.source for e in rec.viable[0].evidence if e.kind == "published"}
    assert sources == {"https://github.com/sgl-project/sglang/pull/25005", "https://github.com/sgl-project/sglang/pull/19030"}
    triton = next(i for i, c in enumerate(rec.viable) if c.value("attention_backend") == "triton")
    step = rec.steps[triton - 1]  # what puts the triton candidate below the one above it
    assert step.decided_by == "published" and "attention_backend=triton" in step.text and "pull/" in step.text


@pytest.mark.real_release
def test_choices_whose_layers_run_the_same_kernel_are_one_candidate(release):
    # issue 39 item 4: on 0.5.10 NVFP4 SM120, apply() runs sgl-kernel cutlass_moe_fp4 for
    # deep_gemm, cutlass, triton and triton_kernel: one candidate, the others duplicates of it
    rec = run(release, "0.5.10", "sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8"])
    same = {"deep_gemm", "cutlass", "triton", "triton_kernel"}
    viable = {c.value(MOE) for c in rec.viable}
    assert len(viable & same) == 1
    dups = [c for c in rec.rejected if c.reason.kind == "duplicate" and dict(c.flags).get(MOE) in same]
    assert len(dups) >= 2 and all("cutlass_moe_fp4" in c.reason.message for c in dups)
    # the kernel line names what the layer calls, not the flag: no DeepGEMM question
    tree = release("0.5.10")
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm120", model="qwen3.5-397b-a17b-nvfp4",
                                 sets=["tp_size=8", "moe_runner_backend=deep_gemm"]))
    moe = res.settings[MOE]
    assert moe.layer.value == "sgl-kernel cutlass_moe_fp4" and moe.kernel is None


# ---- the result cache: a repeated recommend evaluates nothing ---------------------------------


def test_a_second_recommend_is_answered_from_the_result_cache(isolated_cache, monkeypatch):
    from sglang_audit.resolve.resolver import Resolver

    req = Request(source=str(MINI_E5), arch="sm120", model="deepseek-r1-nvfp4", sets=["speculative_algorithm=NEXTN"])
    first = recommend(req, jobs=2)
    assert first.resolutions > 2  # more than one to prefetch: the workers' path is the one checked

    def never(*_args: object, **_kw: object) -> None:
        raise AssertionError("done again on a repeated run")

    import sglang_audit.analyses.recommend as rec_module
    from sglang_audit.resolve import attnkernels

    monkeypatch.setattr(Resolver, "resolve", never)  # no resolution evaluated
    monkeypatch.setattr(attnkernels, "reach", never)  # the kernel verdicts remembered (kernelmemo)
    monkeypatch.setattr(rec_module, "run_all", never)  # no workers forked to answer hits
    again = recommend(req, jobs=2)
    assert render_text(again) == render_text(first)
    assert json.dumps(again.to_json(), sort_keys=True) == json.dumps(first.to_json(), sort_keys=True)
