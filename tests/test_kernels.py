"""The kernel library's own declared support for the GPU (sglang_audit/kernels.py, issue 17).

Fixture kernel libraries (fixtures/kernels/) cover each mechanism; the real-release tests
read the FlashInfer version each SGLang release pins (downloaded into the user cache)."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import shared

from sglang_audit.errors import SourceError
from sglang_audit.factfiles import KernelRow
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.device import Device, Environment
from sglang_audit.render.text import render_resolution
from sglang_audit.resolve.kernelread import FlashInferReader, evaluate_row
from sglang_audit.resolve.kernels import attach, kernel_spec
from sglang_audit.resolve.libeval import LibraryEval
from sglang_audit.result import LayerValue, ModelSummary, Resolution, Setting, UnknownValue
from sglang_audit.rules.knownbad import check_resolution, kernel_findings
from sglang_audit.source.flashinfer import locate_flashinfer

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kernels"
FI = FIXTURES / "fi_mini" / "flashinfer"
SGLANG_SIDE = FIXTURES / "sglang_side"
GEMM = "flashinfer/gemm/gemm_base.py"
QUANT = "sglang.srt.layers.quantization.modelopt_quant"
TRTLLM_RUNNER = "sglang.srt.layers.moe.moe_runner.flashinfer_trtllm"


@pytest.fixture(scope="module")
def cache() -> SourceCache:
    return SourceCache(use_disk=False)


def row(entry: str, backend: str = "", callers: tuple[str, ...] = (QUANT,), **extra: Any) -> KernelRow:
    return KernelRow(setting="moe_runner_backend", model="target", values=(), quantization=(), callers=callers,
                     entry=entry, backend=backend, source="test", **extra)


def lib(cache: SourceCache, cc: tuple[int, int], package: Path = FI) -> LibraryEval:
    return LibraryEval(package, cache, Device("cuda", f"sm{cc[0]}{cc[1]}", *cc, "12.9", None, "test", 81920), Environment())


def verdict(cache: SourceCache, r: dict[str, Any], cc: tuple[int, int]) -> Any:
    return evaluate_row(FlashInferReader(FI, cache), r, lib(cache, cc), "9.9.9", SGLANG_SIDE, cache)


def line_of(rel: str, text: str, root: Path = FI.parent) -> int:
    lines = (root / rel).read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if text in ln)


# ---- backend_requirement + supported_compute_capability ---------------------------------


def test_backend_requirement_refuses_a_capability_the_requirement_does_not_list(cache):
    v = verdict(cache, row("flashinfer.mm_fp4", "trtllm"), (12, 0))
    assert v.status == "unsupported"
    layer = v.layers[0]
    assert (layer.mechanism, layer.function, layer.file) == ("backend_requirement", "_trtllm_requirement", GEMM)
    assert layer.line == line_of(GEMM, "@supported_compute_capability([100, 103])")
    assert "@supported_compute_capability([100, 103])" in v.reason and "SM120" in v.reason
    assert f"{GEMM}:{layer.line}" in v.reason
    # the SGLang side: where the release imports the entry
    assert v.call_site == f"sglang/srt/layers/quantization/modelopt_quant.py:{line_of('sglang/srt/layers/quantization/modelopt_quant.py', 'import mm_fp4', SGLANG_SIDE)}"


def test_backend_requirement_accepts_a_listed_capability(cache):
    v = verdict(cache, row("flashinfer.mm_fp4", "trtllm"), (10, 0))
    assert v.status == "supported"
    assert v.library == "flashinfer" and v.version == "9.9.9" and v.backend == "trtllm"


def test_requirement_function_imported_from_another_module_is_followed(cache):
    v = verdict(cache, row("flashinfer.mm_fp4", "far"), (12, 0))
    assert v.status == "supported"
    assert v.layers[0].file == "flashinfer/gemm/extra.py"
    assert verdict(cache, row("flashinfer.mm_fp4", "far"), (10, 0)).status == "unsupported"


def test_requirement_without_capability_decorator_is_unknown(cache):
    v = verdict(cache, row("flashinfer.mm_fp4", "bare"), (12, 0))
    assert v.status == "unknown"
    assert "declares no @supported_compute_capability" in v.reason


def test_backend_missing_from_the_table_is_unsupported(cache):
    v = verdict(cache, row("flashinfer.mm_fp4", "nosuch"), (10, 0))
    assert v.status == "unsupported"
    assert "has no backend 'nosuch'" in v.reason
    assert "'wide', 'trtllm', 'far', 'bare'" in v.reason


def test_argument_conditions_are_listed_not_evaluated(cache):
    v = verdict(cache, row("flashinfer.mm_fp4", "wide"), (12, 0))
    assert v.status == "supported"
    assert any("_wide_requirement raises if out_dtype is None" in c for c in v.conditions)
    assert any("_check_problem_size raises if a.shape[1] != b.shape[0]" in c and f"{GEMM}:" in c for c in v.conditions)


def test_entry_the_release_does_not_import_is_unknown(cache):
    # the fixture SGLang side does not import direct_kernel: the mapping is not trusted,
    # whatever the library declares
    v = verdict(cache, row("flashinfer.direct_kernel"), (9, 0))
    assert v.status == "unknown" and "no import of direct_kernel from flashinfer" in v.reason
    assert v.layers == () and v.call_site == ""


def test_decorator_on_the_entry_itself_refuses(cache, tmp_path):
    side = tmp_path / "sglang" / "srt"
    side.mkdir(parents=True)
    (side / "caller.py").write_text("from flashinfer import direct_kernel\n")
    reader = FlashInferReader(FI, cache)
    r = row("flashinfer.direct_kernel", callers=("sglang.srt.caller",))
    v = evaluate_row(reader, r, lib(cache, (12, 0)), "9.9.9", tmp_path, cache)
    assert v.status == "unsupported"
    assert v.layers[0].mechanism == "supported_compute_capability"
    assert v.layers[0].line == line_of(GEMM, "@supported_compute_capability([90])")
    assert evaluate_row(reader, r, lib(cache, (9, 0)), "9.9.9", tmp_path, cache).status == "supported"


# ---- helper + JIT spec + artifacts -------------------------------------------------------

TRTLLM = row("flashinfer.fused_moe.trtllm_fp4_block_scale_moe", callers=(TRTLLM_RUNNER,),
             helper="is_trtllm_moe_supported", jit="get_trtllm_moe_sm100_module")


def test_trtllm_moe_layers_disagree_with_runtime_artifacts_and_say_so(cache):
    v = verdict(cache, TRTLLM, (12, 0))
    assert v.status == "unknown"
    by = {layer.mechanism: layer for layer in v.layers}
    # FlashInfer's helper passes torch.cuda.current_device() (an int) where its
    # get_compute_capability wants a torch.device: run on the device, it raises, and says nothing
    assert by["helper"].says == "unknown" and not by["helper"].enforced
    assert "raises AttributeError: 'int' object has no attribute 'type'" in by["helper"].detail
    assert by["helper"].line == line_of("flashinfer/fused_moe/core.py", "arch = get_compute_capability(")
    assert by["jit"].says == "supported"
    assert "majors [10, 12]" in by["jit"].detail and "'fused_moe_trtllm_sm100'" in by["jit"].detail
    assert "named for SM100" in by["jit"].detail  # the name and the arch list disagree: both shown
    assert by["jit"].line == line_of("flashinfer/jit/fused_moe.py", "supported_major_versions=[10, 12]")
    assert by["artifact"].says == "unknown"
    assert "prebuilt binaries fetched at run time" in v.reason
    assert v.call_site.startswith("sglang/srt/layers/moe/moe_runner/flashinfer_trtllm.py:")


def test_trtllm_moe_below_the_jit_arch_list_is_unsupported(cache):
    v = verdict(cache, TRTLLM, (9, 0))
    assert v.status == "unsupported"
    assert "majors [10, 12]" in v.reason
    helper = next(layer for layer in v.layers if layer.mechanism == "helper")
    assert helper.says == "unknown" and "on SM90: the helper cannot answer" in helper.detail


def test_a_helpers_capability_guards_run_on_the_device(cache, tmp_path):
    # the assignments before a guard run (the capability unpacked), then each test: the first
    # that holds refuses (informing: SGLang does not call the helper), a test on an argument
    # is a condition
    fi = tmp_path / "flashinfer"
    fi.mkdir()
    (fi / "__init__.py").write_text("raise ImportError('the API module is never run')\n")
    (fi / "moe.py").write_text(
        "import torch\n\n\ndef moe_kernel(x):\n    return x\n\n\n"
        "def is_moe_supported(dtype):\n    major, minor = torch.cuda.get_device_capability()\n"
        "    if dtype != 'bf16':\n        return False\n    if (major, minor) < (10, 0):\n        return False\n"
        "    return True\n")
    side = tmp_path / "sglang"
    side.mkdir()
    (side / "c.py").write_text("from flashinfer.moe import moe_kernel\n")
    r = row("flashinfer.moe.moe_kernel", callers=("sglang.c",), helper="is_moe_supported")
    for cc, says in (((9, 0), "unsupported"), ((12, 0), "supported")):
        v = evaluate_row(FlashInferReader(fi, cache), r, lib(cache, cc, fi), "9.9.9", tmp_path, cache)
        (helper,) = v.layers
        assert (helper.says, helper.line) == (says, 12 if says == "unsupported" else 8), helper.detail
        if says == "supported":
            assert any("returns False if dtype != 'bf16'" in c for c in v.conditions), v.conditions


CUTLASS = row("flashinfer.fused_moe.cutlass_fused_moe", jit="get_cutlass_fused_moe_module", jit_arch_param="backend")


@pytest.mark.parametrize(("cc", "status", "module", "majors"), [
    ((12, 0), "supported", "gen_cutlass_fused_moe_sm120_module", "[12]"),
    ((10, 3), "supported", "gen_cutlass_fused_moe_sm100_module", "[10, 11]"),
    ((9, 0), "supported", "gen_cutlass_fused_moe_sm90_module", "[9]"),
])
def test_jit_getter_dispatch_on_the_capability_string(cache, cc, status, module, majors):
    v = verdict(cache, CUTLASS, cc)
    assert v.status == status
    (layer,) = v.layers
    assert layer.function == module and f"majors {majors}" in layer.detail


def test_jit_getter_with_no_module_for_the_device_is_unsupported(cache):
    v = verdict(cache, CUTLASS, (11, 0))
    assert v.status == "unsupported"
    assert "builds no JIT module on SM110" in v.reason


def test_missing_entry_is_unknown(cache, tmp_path):
    side = tmp_path / "sglang"
    side.mkdir()
    (side / "c.py").write_text("from flashinfer import gone\n")
    v = evaluate_row(FlashInferReader(FI, cache), row("flashinfer.gone", callers=("sglang.c",)), lib(cache, (12, 0)), "9.9.9", tmp_path, cache)
    assert v.status == "unknown" and "flashinfer.gone not found in FlashInfer 9.9.9" in v.reason


# ---- locating FlashInfer -----------------------------------------------------------------


def test_locate_flashinfer_checkout_reads_its_version():
    tree = locate_flashinfer(str(FI.parent), None)
    assert tree.package_dir == FI.resolve() and tree.version == "9.9.9"


def test_locate_flashinfer_wheel_extracts_only_python(tmp_path, isolated_cache):
    wheel = tmp_path / "flashinfer_python-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path in FI.rglob("*.py"):
            zf.write(path, path.relative_to(FI.parent).as_posix())
        zf.writestr("flashinfer/data/kernel.cubin", b"\0" * 10)
        zf.writestr("flashinfer_python-9.9.9.dist-info/METADATA", "Name: flashinfer-python\nVersion: 9.9.9\n\n")
    tree = locate_flashinfer(str(wheel), None)
    assert tree.version == "9.9.9" and tree.origin == str(wheel)
    assert (tree.package_dir / "gemm" / "gemm_base.py").is_file()
    assert not (tree.package_dir / "data" / "kernel.cubin").exists()


def test_locate_flashinfer_without_pin_or_source_says_how():
    with pytest.raises(SourceError, match="pins no flashinfer-python version; pass --flashinfer-source"):
        locate_flashinfer(None, None)
    with pytest.raises(SourceError, match="FlashInfer source not found"):
        locate_flashinfer("/nonexistent/fi", "0.6.7")


# ---- attached to a resolution: text, JSON, check ----------------------------------------


MODELOPT = "sglang/srt/layers/quantization/modelopt_quant.py"
LLAMA_NVFP4 = "llama-3.1-8b-nvfp4"  # a dense NVFP4 model (fixtures/models)


def _fp4_forward(fp4: Any, condition: str = "") -> LayerValue:
    """The linear stage's value of an NVFP4 checkpoint: ModelOptFp4LinearMethod built, its
    forward quantizing the activation (FlashInfer's fp4_quantize, backend 'cuda') and then,
    for a ``flashinfer_*`` runner, calling mm_fp4 with the backend SGLang derives from the
    runner's name (0.5.23 fp4_utils.py get_flashinfer_backend: the prefix stripped,
    cutedsl -> cute-dsl) at the fixture's call site; another runner calls sgl-kernel."""
    quantize = ("flashinfer.fp4_quantize", "cuda", "sglang/srt/layers/quantization/fp4_utils.py:40")
    if isinstance(fp4, str) and fp4.startswith("flashinfer_"):
        backend = {"cutedsl": "cute-dsl"}.get(fp4.removeprefix("flashinfer_"), fp4.removeprefix("flashinfer_"))
        gemm = ("flashinfer.mm_fp4", backend, f"{MODELOPT}:{line_of(MODELOPT, 'flashinfer_fp4_gemm(a, b', SGLANG_SIDE)}")
    else:
        gemm = ("sgl_kernel.cutlass_scaled_fp4_mm", "", "sglang/srt/layers/quantization/modelopt_quant.py:180")
    calls = (quantize, gemm)
    return LayerValue("resolved", "built: ModelOptFp4LinearMethod (qkv_proj)", "ModelOptFp4LinearMethod", stage="linear",
                      kernel_calls=tuple((e.rpartition(".")[0], e.rpartition(".")[2], site, condition) for e, _, site in calls),
                      library_calls=tuple((e, site, (("backend", repr(b)),) if b else ()) for e, b, site in calls))


def _resolution(arch: str, major: int, minor: int, fp4: Any, moe: Any = "triton", layer: Any = None,
                linear: Any = "forward") -> Resolution:
    """``linear``: the quantization setting's layer value (by default the NVFP4 forward's
    calls for ``fp4``, ``_fp4_forward``)."""
    settings = {
        "moe_runner_backend": Setting("moe_runner_backend", moe, moe, "resolved", layer=layer),
        "fp4_gemm_runner_backend": Setting("fp4_gemm_runner_backend", fp4, fp4, "resolved"),
        "quantization": Setting("quantization", "modelopt_fp4", "modelopt_fp4", "resolved",
                                layer=_fp4_forward(fp4) if linear == "forward" else linear),
    }
    return Resolution(
        source={"version": "0.0.0", "flashinfer": "9.9.9", "origin": "x"}, structure="E?",
        device={"platform": "cuda", "arch": arch, "major": major, "minor": minor, "name": arch, "cuda": "12.9",
                "hip": None, "memory_mib": 1, "gpu_count": 8, "driver": "x", "cudnn": None},
        model=ModelSummary("m", "/m", "X", "modelopt_fp4", "modelopt"), flags={}, env={},
        rejected=None, settings=settings,
    )


def _attach(res: Resolution, cache: SourceCache, source: str | None = str(FI.parent)) -> Resolution:
    return attach(res, SGLANG_SIDE, cache, source)


def test_attach_text_json_and_check(cache):
    res = _attach(_resolution("sm120", 12, 0, "flashinfer_trtllm"), cache)
    k = res.settings["fp4_gemm_runner_backend"].kernel
    assert k is not None and k.status == "unsupported" and k.function == "flashinfer.mm_fp4" and k.backend == "trtllm"
    assert res.settings["moe_runner_backend"].kernel is None  # triton: no kernel library question
    assert res.kernel_source == {"library": "flashinfer", "version": "9.9.9", "origin": str(FI.parent)}
    assert res.settings["fp4_gemm_runner_backend"].status == "unsupported"  # not "(resolved)", exit 1
    data = json.loads(json.dumps(res.to_json()))
    assert data["settings"]["fp4_gemm_runner_backend"]["kernel"]["status"] == "unsupported"
    assert data["settings"]["fp4_gemm_runner_backend"]["status"] == "unsupported"
    assert data["settings"]["moe_runner_backend"]["kernel"] is None
    text = render_resolution(res)
    assert "kernel  unsupported: flashinfer.mm_fp4 backend 'trtllm'  (flashinfer 9.9.9)" in text
    assert "kernel library read: flashinfer 9.9.9" in text
    (finding,) = kernel_findings(res)
    assert (finding.rule_id, finding.severity, finding.setting) == ("SGK101", "error", "fp4_gemm_runner_backend")
    assert "declares flashinfer.mm_fp4 backend 'trtllm' unsupported on sm120" in finding.message
    assert finding.code and finding.code[0].file == GEMM
    result = check_resolution(res, ())
    assert result.exit_code("error") == 1
    assert any(r.id == "SGK101" for r in result.rules)


@pytest.mark.parametrize(("fp4", "backend", "status"), [
    ("flashinfer_trtllm", "trtllm", "unsupported"), ("flashinfer_wide", "wide", "supported"),
    ("flashinfer_cutedsl", "cute-dsl", "unsupported")])
def test_fp4_gemm_entry_and_backend_are_the_forwards_call(cache, fp4, backend, status):
    # no row lists mm_fp4: the entry is the forward's GEMM call (not the activation's
    # fp4_quantize made before it, whose backend is 'cuda'), the backend= the one it passed
    res = _attach(_resolution("sm120", 12, 0, fp4), cache)
    k = res.settings["fp4_gemm_runner_backend"].kernel
    assert (k.status, k.function, k.backend) == (status, "flashinfer.mm_fp4", backend)
    assert k.call_site == f"{MODELOPT}:{line_of(MODELOPT, 'flashinfer_fp4_gemm(a, b', SGLANG_SIDE)}"


def test_fp4_gemm_without_a_forward_call_has_no_flashinfer_verdict(cache):
    # the layers not built (no forward run), or built and calling no mm_fp4: no listed guess
    unknown = LayerValue("unknown", None, stage="linear", reason="no layer derived at config.json's shapes")
    stopped = replace(_fp4_forward("flashinfer_trtllm"), kernel_calls=(), library_calls=(), forward_stops=(
        "qkv_proj: RuntimeError: NVFP4 JIT kernels require compute capability >= 10.0 at sglang/jit_kernel/nvfp4.py:39",))
    for linear, said in ((None, "reached a mm_fp4 call (their value: none, not built)"),
                         (unknown, "reached a mm_fp4 call (their value: no layer derived at config.json's shapes)"),
                         (stopped, "no branch of the linear layers' forward reached a mm_fp4 call (qkv_proj: RuntimeError")):
        res = _attach(_resolution("sm120", 12, 0, "flashinfer_trtllm", linear=linear), cache)
        k = res.settings["fp4_gemm_runner_backend"].kernel
        assert (k.status, k.function, k.library) == ("unknown", "", "flashinfer") and said in k.reason, k.reason
        assert "no FlashInfer verdict" in k.reason and kernel_findings(res) == []
        # a value calling another library keeps that library's reason
        k = _attach(_resolution("sm120", 12, 0, "cutlass", linear=linear), cache).settings["fp4_gemm_runner_backend"].kernel
        assert k.library.startswith("sgl-kernel") and "jit_kernel" in k.reason
    # built, its forward calling another kernel (no mm_fp4) and ending: no FlashInfer question
    other = replace(_fp4_forward("flashinfer_trtllm"), kernel_calls=(("sgl_kernel", "cutlass_scaled_fp4_mm", "x.py:1", ""),))
    assert _attach(_resolution("sm120", 12, 0, "flashinfer_trtllm", linear=other), cache).settings[
        "fp4_gemm_runner_backend"].kernel is None
    # a call on some branches only informs (as the block-FP8 runner's)
    res = _attach(_resolution("sm120", 12, 0, "flashinfer_trtllm", linear=_fp4_forward("flashinfer_trtllm", "on 1 of 2 branches")), cache)
    k = res.settings["fp4_gemm_runner_backend"].kernel
    assert k.status == "unknown" and k.reason.startswith("flashinfer.mm_fp4 is called on 1 of 2 branches only")


UNQUANT_AT = "sglang/srt/layers/quantization/modelopt_quant.py:1925"  # where the fixture's method was made


def _unquantized(gaps: tuple[str, ...] = ()) -> LayerValue:
    """The linear stage's value of a checkpoint whose every dense layer is ignored (Qwen3.5
    NVFP4: routed experts only): the forward read on all the model builds, none calling mm_fp4."""
    return LayerValue("unknown", None, stage="linear", reason="not evaluated at config.json's shapes",
                      forward_scope="the 390 linear layers the model's constructor builds",
                      layer_methods=(("UnquantizedLinearMethod", 390, UNQUANT_AT),), forward_gaps=gaps)


def test_a_gemm_no_layer_of_the_model_calls_is_not_used_and_no_rule_about_it_holds(cache):
    from sglang_audit.analyses.recommend import _matters
    from sglang_audit.rules.knownbad import load_rules

    res = _attach(_resolution("sm120", 12, 0, "flashinfer_trtllm", linear=_unquantized()), cache)
    s = res.settings["fp4_gemm_runner_backend"]
    k = s.kernel
    assert (s.effective, s.status, k.status, k.function) == ("flashinfer_trtllm", "resolved", "unknown", "flashinfer.mm_fp4")
    assert s.unused == k.unused == (
        "no dense linear layer of this model calls flashinfer.mm_fp4 (no forward of the 390 linear layers the model's "
        f"constructor builds calls it: they take UnquantizedLinearMethod (390 of them, {UNQUANT_AT}))")
    data = json.loads(json.dumps(res.to_json()))
    assert data["settings"]["fp4_gemm_runner_backend"]["kernel"]["unused"] == s.unused
    assert data["settings"]["quantization"]["layer"]["layer_methods"] == [["UnquantizedLinearMethod", 390, UNQUANT_AT]]
    assert f"kernel  not used: {s.unused}" in render_resolution(res)
    from sglang_audit.render.html import _kernel_view
    assert {k: v for k, v in (_kernel_view(s) or {}).items() if k in ("status", "reason")} == {"status": "not used", "reason": s.unused}
    # SGA103 (the trtllm FP4 GEMM on SM12x) holds only where a layer calls the GEMM; SGK101 has no verdict
    rules = [r for r in load_rules() if r.id == "SGA103"]
    assert not check_resolution(res, rules).findings
    assert _matters("fp4_gemm_runner_backend", res, Path("/nonexistent")) is False
    # one construction or forward not followed to its end: unknown, saying which; the rule holds
    gap = "model.layers.3.self_attn: ValueError: replica_size must be a positive integer at sglang/srt/layers/linear.py:72"
    res = _attach(_resolution("sm120", 12, 0, "flashinfer_trtllm", linear=_unquantized((gap,))), cache)
    s = res.settings["fp4_gemm_runner_backend"]
    assert not s.unused and s.kernel.status == "unknown" and f"not followed to its end: {gap}" in s.kernel.reason
    assert [f.rule_id for f in check_resolution(res, rules).findings] == ["SGA103"]
    assert "unused" not in json.loads(json.dumps(res.to_json()))["settings"]["fp4_gemm_runner_backend"]["kernel"]
    # a layer calling a kernel library (sgl-kernel's cutlass FP4 GEMM) uses the setting
    other = replace(_unquantized(), kernel_calls=(("sgl_kernel", "cutlass_scaled_fp4_mm", "x.py:1", ""),))
    res = _attach(_resolution("sm120", 12, 0, "flashinfer_trtllm", linear=other), cache)
    assert not res.settings["fp4_gemm_runner_backend"].unused


def test_attach_sm100_supported_gives_no_finding(cache):
    res = _attach(_resolution("sm100", 10, 0, "flashinfer_trtllm"), cache)
    assert res.settings["fp4_gemm_runner_backend"].kernel.status == "supported"
    assert kernel_findings(res) == []


def test_attach_layer_decided_auto_is_unknown_without_reading(cache):
    layer = UnknownValue("decided when the MoE layers are built")
    res = _attach(_resolution("sm120", 12, 0, "triton", moe="auto", layer=layer), cache)
    k = res.settings["moe_runner_backend"].kernel
    assert k is not None and k.status == "unknown" and "decided again when the layers are built" in k.reason
    assert res.kernel_source is None  # nothing mapped to FlashInfer: it was not located
    assert kernel_findings(res) == []  # an unknown without an entry point is no finding


def test_attach_other_library_is_unknown_with_reason(cache):
    res = _attach(_resolution("sm120", 12, 0, "cutlass"), cache)
    k = res.settings["fp4_gemm_runner_backend"].kernel
    assert k.status == "unknown" and k.library.startswith("sgl-kernel") and "jit_kernel" in k.reason


def test_attach_source_none_is_unknown_not_an_error(cache):
    res = _attach(_resolution("sm120", 12, 0, "flashinfer_trtllm"), cache, source="none")
    k = res.settings["fp4_gemm_runner_backend"].kernel
    assert k.status == "unknown" and "FlashInfer source not read" in k.reason
    assert res.kernel_source["error"].startswith("not read")
    assert kernel_findings(res) == []  # nothing read, nothing to report beyond kernel_source


def test_unknown_after_reading_is_no_finding(cache):
    res = _attach(_resolution("sm120", 12, 0, "flashinfer_trtllm", moe="flashinfer_trtllm"), cache)
    assert res.settings["moe_runner_backend"].kernel.status == "unknown"
    # only the FP4 GEMM's unsupported kernel is a finding; the unknown MoE kernel is shown by resolve
    assert [(f.rule_id, f.setting) for f in kernel_findings(res)] == [("SGK101", "fp4_gemm_runner_backend")]


# ---- remembered verdicts (kernelmemo): served only while every file read is the same ------


@pytest.fixture
def copied(tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Any]:
    """Copies of the fixture libraries, stamps counted as settled (so the stamp index keeps
    them and a same-size edit must be seen by its ctime), and a memo in the cache."""
    import shutil

    import sglang_audit.cachedir as cachedir
    from sglang_audit.resolve.kernelmemo import KernelMemo

    monkeypatch.setattr(cachedir, "RACY_NS", -10**12)
    root = Path(shutil.copytree(FIXTURES, tmp_path / "kernels"))
    return root / "fi_mini" / "flashinfer", root / "sglang_side", KernelMemo(isolated_cache / "results")


def _memo_attach(copied: tuple[Path, Path, Any], arch: str = "sm120") -> tuple[Resolution, SourceCache]:
    fi, side, memo = copied
    cache = SourceCache(use_disk=False)
    major, minor = {"sm120": (12, 0), "sm100": (10, 0)}[arch]
    return attach(_resolution(arch, major, minor, "flashinfer_trtllm"), side, cache, str(fi.parent), memo=memo), cache


def _fp4(res: Resolution) -> Any:
    return res.settings["fp4_gemm_runner_backend"].kernel


def test_a_remembered_verdict_is_served_without_reading_flashinfer(copied):
    first, _ = _memo_attach(copied)
    again, cache = _memo_attach(copied)
    assert again == first and _fp4(again).status == "unsupported"
    assert copied[2].hits == 1
    assert cache.files_read == []  # no IR loaded: neither FlashInfer's nor the call site's
    other, _ = _memo_attach(copied, "sm100")  # another capability: its own reading
    assert _fp4(other).status == "supported" and copied[2].hits == 1


@pytest.mark.parametrize("change", ["same_size_edit", "call_site", "new_module"])
def test_a_verdict_whose_reading_would_differ_is_read_again(copied, change):
    import os

    fi, side, memo = copied
    first, _ = _memo_attach(copied)
    if change == "same_size_edit":  # the requirement now lists SM120; mtime restored
        path = fi / "gemm" / "gemm_base.py"
        st = path.stat()
        path.write_text(path.read_text().replace("@supported_compute_capability([100, 103])",
                                                 "@supported_compute_capability([100, 120])", 1))
        assert path.stat().st_size == st.st_size
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif change == "call_site":  # the release no longer imports the entry
        (side / "sglang" / "srt" / "layers" / "quantization" / "modelopt_quant.py").write_text("x = 1\n")
    else:  # a module where the reading looked and found nothing: `flashinfer.gemm` is now it
        (fi / "gemm.py").write_text("x = 1\n")
    again, _ = _memo_attach(copied)
    assert memo.hits == 0
    assert _fp4(first).status == "unsupported"
    expected = {"same_size_edit": ("supported", "declared for SM120"),
                "call_site": ("unknown", "no import of mm_fp4 from flashinfer found"),
                "new_module": ("unknown", "flashinfer.mm_fp4 not found in FlashInfer 9.9.9")}[change]
    assert (_fp4(again).status, expected[1] in _fp4(again).reason) == (expected[0], True)


def test_a_file_edited_after_it_was_read_is_remembered_as_read(copied, monkeypatch):
    # the memo keeps the content the reading parsed, not the file as it is when stored
    import sglang_audit.resolve.kernelread as kernelread

    fi, _side, memo = copied
    real = kernelread.evaluate_row

    def edited_meanwhile(*args: Any, **kwargs: Any) -> Any:
        verdict = real(*args, **kwargs)
        path = fi / "gemm" / "gemm_base.py"
        path.write_text(path.read_text().replace("@supported_compute_capability([100, 103])",
                                                 "@supported_compute_capability([100, 120])", 1))
        return verdict

    monkeypatch.setattr(kernelread, "evaluate_row", edited_meanwhile)
    assert _fp4(_memo_attach(copied)[0]).status == "unsupported"
    monkeypatch.setattr(kernelread, "evaluate_row", real)
    again, _ = _memo_attach(copied)
    assert memo.hits == 0 and _fp4(again).status == "supported"


# ---- the block-FP8 GEMM runner (issue 42) -------------------------------------------------


FP8_UTILS = "sglang/srt/layers/quantization/fp8_utils.py"


def _fp8(tmp_path: Path, arch: str, cc: tuple[int, int], runner: str, block: Any = (128, 128),
         calls: tuple[tuple[str, str, str], ...] | None = None, condition: str = "") -> Resolution:
    """A resolution of an FP8 checkpoint (quantization "fp8"); ``block``: its
    quantization_config.weight_block_size (None: a per-tensor checkpoint). ``quantization``'s
    layer value is the linear stage's: its layers built, their forward calling
    ``calls`` ((entry, backend= SGLang passed, call site), by default the FlashInfer groupwise
    GEMM with the backend the runner's name says, as 0.5.23's custom op does)."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    quant = {"quant_method": "fp8", **({"weight_block_size": list(block)} if block is not None else {})}
    (model / "config.json").write_text(json.dumps({"architectures": ["X"], "quantization_config": quant}))
    res = _resolution(arch, *cc, "auto")
    if calls is None:
        site = f"{FP8_UTILS}:{line_of(FP8_UTILS, '_raw_gemm_fp8_nt_groupwise(q_input', SGLANG_SIDE)}"
        calls = (("flashinfer.gemm.gemm_fp8_nt_groupwise", runner.split("_")[-1], site),) if runner.startswith("flashinfer_") else ()
    built = LayerValue("resolved", "built: Fp8LinearMethod (qkv_proj)", "Fp8LinearMethod", stage="linear",
                       kernel_calls=tuple((e.rpartition(".")[0], e.rpartition(".")[2], site, condition) for e, _, site in calls),
                       library_calls=tuple((e, site, (("backend", repr(b)),)) for e, b, site in calls))
    settings = {"fp8_gemm_runner_backend": Setting("fp8_gemm_runner_backend", runner, runner, "resolved"),
                "quantization": Setting("quantization", "fp8", "fp8", "resolved", layer=built)}
    return replace(res, settings=settings, model=ModelSummary("m", str(model), "X", "fp8", "fp8"))


@pytest.mark.parametrize(("runner", "arch", "cc", "status", "requirement"), [
    ("flashinfer_trtllm", "sm120", (12, 0), "unsupported", "_trtllm_requirement"),
    ("flashinfer_trtllm", "sm100", (10, 0), "supported", "_trtllm_requirement"),
    ("flashinfer_cutlass", "sm90", (9, 0), "unsupported", "_cutlass_fp8_requirement"),
    ("flashinfer_cutlass", "sm120", (12, 0), "supported", "_cutlass_fp8_requirement"),
])
def test_block_fp8_runner_reads_the_call_its_layers_forward_makes(cache, tmp_path, runner, arch, cc, status,
                                                                   requirement):
    # no table row names the entry: it and its backend= are the call the linear stage's forward made
    res = _attach(_fp8(tmp_path, arch, cc, runner), cache)
    s = res.settings["fp8_gemm_runner_backend"]
    k = s.kernel
    assert (k.status, k.function, k.backend) == (status, "flashinfer.gemm.gemm_fp8_nt_groupwise", runner.split("_")[1])
    layer = k.layers[0]
    assert (layer.mechanism, layer.function, layer.file) == ("backend_requirement", requirement, GEMM)
    assert layer.line == line_of(GEMM, f"def {requirement}") - 1  # the decorator's line
    # the SGLang side: the call the forward made, not an import
    assert k.call_site == f"{FP8_UTILS}:{line_of(FP8_UTILS, '_raw_gemm_fp8_nt_groupwise(q_input', SGLANG_SIDE)}"
    text = render_resolution(res)
    assert f"kernel  {status}: flashinfer.gemm.gemm_fp8_nt_groupwise backend '{k.backend}'  (flashinfer 9.9.9)" in text
    findings = [(f.rule_id, f.setting) for f in kernel_findings(res)]
    assert findings == ([("SGK101", "fp8_gemm_runner_backend")] if status == "unsupported" else [])
    assert s.status == ("unsupported" if status == "unsupported" else "resolved")


def test_per_tensor_fp8_checkpoint_never_reaches_the_block_runner(cache, tmp_path):
    # Fp8LinearMethod dispatches the runner only when weight_block_size is set: no kernel claimed
    res = _attach(_fp8(tmp_path, "sm120", (12, 0), "flashinfer_trtllm", block=None), cache)
    assert res.settings["fp8_gemm_runner_backend"].kernel is None
    res = _attach(_fp8(tmp_path, "sm120", (12, 0), "deep_gemm", block=None), cache)
    assert res.settings["fp8_gemm_runner_backend"].kernel is None
    assert kernel_findings(res) == []


def test_block_fp8_runner_of_an_unread_checkpoint_is_unknown_not_guessed(cache, tmp_path):
    res = _fp8(tmp_path, "sm120", (12, 0), "flashinfer_trtllm")
    res = replace(res, model=replace(res.model, path=str(tmp_path / "absent")))
    k = _attach(res, cache).settings["fp8_gemm_runner_backend"].kernel
    assert k.status == "unknown" and "weight_block_size" in k.reason and "not readable" in k.reason


def test_block_fp8_runner_called_on_some_branches_only_informs(cache, tmp_path):
    # a call on some branches of the forward only (a fallback on the token count elsewhere):
    # FlashInfer's refusal is reported, never the setting's verdict; layers whose forward
    # reached no FlashInfer call (SGLang's dispatch raised first, a Triton runner) get none
    res = _attach(_fp8(tmp_path, "sm120", (12, 0), "flashinfer_trtllm", condition="on 1 of 2 branches"), cache)
    k = res.settings["fp8_gemm_runner_backend"].kernel
    assert k.status == "unknown" and k.reason.startswith(
        "flashinfer.gemm.gemm_fp8_nt_groupwise is called on 1 of 2 branches only; FlashInfer's answer for that call: unsupported")
    assert k.layers[0].function == "_trtllm_requirement" and kernel_findings(res) == []
    res = _attach(_fp8(tmp_path, "sm120", (12, 0), "triton"), cache)
    assert res.settings["fp8_gemm_runner_backend"].kernel is None and kernel_findings(res) == []


def test_block_fp8_deep_gemm_and_cutlass_runners_name_the_library_not_read(cache, tmp_path):
    k = _attach(_fp8(tmp_path, "sm90", (9, 0), "deep_gemm"), cache).settings["fp8_gemm_runner_backend"].kernel
    assert (k.status, k.library) == ("unknown", "DeepGEMM") and "declares no architecture in Python" in k.reason
    k = _attach(_fp8(tmp_path, "sm120", (12, 0), "cutlass"), cache).settings["fp8_gemm_runner_backend"].kernel
    assert k.status == "unknown" and "fp8_blockwise_scaled_mm" in k.reason


def test_shipped_mapping_is_well_formed():
    spec = kernel_spec()
    for r in spec.kernel:
        assert r.entry.startswith("flashinfer.") and r.model in ("target", "draft")
        assert r.values and r.quantization and r.callers and r.source
    assert {r.setting for r in spec.kernel} >= {"moe_runner_backend", "speculative_moe_runner_backend"}
    # the dense GEMM runners' entries are the calls the linear stage's forward makes, not rows
    assert not {"fp8_gemm_runner_backend", "fp4_gemm_runner_backend"} & {r.setting for r in spec.kernel}
    assert sorted((c.setting, c.layer, c.libraries, c.functions, c.quant_config_key) for c in spec.layer_call) == [
        ("fp4_gemm_runner_backend", "quantization", ("flashinfer",), ("mm_fp4",), ""),
        ("fp8_gemm_runner_backend", "quantization", ("flashinfer",), (), "weight_block_size")]


# ---- real releases ------------------------------------------------------------------------


def _real(release: Any, version: str, arch: str, sets: list[str], model: str = "qwen3.5-397b-a17b-nvfp4") -> Resolution:
    from sglang_audit.resolve.pipeline import Request

    tree = release(version)
    return shared.resolve(Request(source=str(tree.package_dir), arch=arch, model=model, sets=sets))


def _flashinfer_line(res: Resolution, rel: str, line: int) -> str:
    tree = locate_flashinfer(None, res.source["flashinfer"])
    return (tree.package_dir.parent / rel).read_text().splitlines()[line - 1]


@pytest.mark.real_release
@pytest.mark.parametrize(("version", "pin"), [("0.5.10", "0.6.7.post2"), ("0.5.23", "0.7.2")])
def test_real_fp4_trtllm_sm120_unsupported_sm100_supported(release, version, pin):
    # the entry and backend= are the call the NVFP4 linear layers' forward makes (a dense
    # model: the linear stage builds its layers), not a listed row
    res = _real(release, version, "sm120", ["fp4_gemm_runner_backend=flashinfer_trtllm"], LLAMA_NVFP4)
    assert res.kernel_source["version"] == pin
    k = res.settings["fp4_gemm_runner_backend"].kernel
    assert k.status == "unsupported" and k.function == "flashinfer.mm_fp4" and k.backend == "trtllm"
    # cited at SGLang's call in its fp4_gemm custom op, not at the import
    file, line = k.call_site.rsplit(":", 1)
    assert file == MODELOPT and "flashinfer_fp4_gemm(" in (Path(release(version).package_dir).parent / file).read_text().splitlines()[int(line) - 1]
    # the setting's status comes from every level: the kernel's refusal makes it unsupported
    assert res.settings["fp4_gemm_runner_backend"].status == "unsupported"
    # its layers call the GEMM: used, and the whole model is not read for it (issue 42)
    assert not res.settings["fp4_gemm_runner_backend"].unused and not res.settings["quantization"].layer.forward_scope
    layer = k.layers[0]
    assert layer.file == GEMM and layer.function == "_trtllm_gemm_fp4_requirement"
    # the cited line is the decorator as written in the pinned version
    assert _flashinfer_line(res, layer.file, layer.line).startswith("@supported_compute_capability([100, 103")
    assert "def _trtllm_gemm_fp4_requirement" in _flashinfer_line(res, layer.file, layer.line + 1)
    assert "SM120 not in _trtllm_gemm_fp4_requirement" in k.reason
    assert any(f.rule_id == "SGK101" and f.setting == "fp4_gemm_runner_backend" for f in kernel_findings(res))
    res100 = _real(release, version, "sm100", ["fp4_gemm_runner_backend=flashinfer_trtllm"], LLAMA_NVFP4)
    assert res100.settings["fp4_gemm_runner_backend"].kernel.status == "supported"


@pytest.mark.real_release
def test_real_0523_seed_fp4_gemm_use_is_read_on_the_whole_model_and_names_what_stops_it(release):
    """Qwen3.5-397B-A17B-NVFP4 quantizes only its routed experts (config.json's ignore keeps
    attention, GDN and shared experts BF16): whether any layer calls mm_fp4 is read on the
    model's own construction; on 0.5.23 three constructions are not followed to their end, so it
    is not decided (never "not used" on a guess) and the kernel says which."""
    res = _real(release, "0.5.23", "sm120", ["tp_size=8"])
    s = res.settings["fp4_gemm_runner_backend"]
    layer = res.settings["quantization"].layer
    assert layer.stage == "linear" and layer.forward_scope.endswith("linear layers the model's constructor builds")
    assert layer.forward_gaps[0].startswith("Qwen3_5GatedDeltaNet: analysis bound reached: call depth over 150 at "
                                            "_resolve_linear_group (evaluation stopped at sglang/srt/layers/linear.py:")
    assert not s.unused and s.kernel.status == "unknown" and "not followed to its end: Qwen3_5GatedDeltaNet" in s.kernel.reason


@pytest.mark.real_release
@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_real_trtllm_moe_sm120_reports_each_layer(release, version):
    res = _real(release, version, "sm120", ["moe_runner_backend=flashinfer_trtllm"])
    k = res.settings["moe_runner_backend"].kernel
    assert k.function == "flashinfer.fused_moe.trtllm_fp4_block_scale_moe"
    # the JIT arch list accepts SM12x; the kernels are prebuilt cubins: unknown. FlashInfer's
    # own helper raises when run (it passes an int device to get_compute_capability)
    assert k.status == "unknown"
    by = {layer.mechanism: layer for layer in k.layers}
    assert by["helper"].function == "is_trtllm_moe_supported" and by["helper"].says == "unknown"
    assert "raises AttributeError" in by["helper"].detail
    assert by["jit"].function == "gen_trtllm_gen_fused_moe_sm100_module" and "majors [10, 12]" in by["jit"].detail
    assert "supported_major_versions=[10, 12]" in _flashinfer_line(res, by["jit"].file, by["jit"].line)
    assert by["artifact"].says == "unknown" and "get_artifact" in by["artifact"].detail
    assert not any(f.rule_id == "SGK101" for f in kernel_findings(res))


@pytest.mark.real_release
def test_real_field_reference_deployment_has_no_unsupported_kernel(release):
    res = _real(release, "0.5.10", "sm120", [
        "tp_size=8", "speculative_algorithm=NEXTN", "disable_radix_cache=true",
        "moe_runner_backend=flashinfer_cutlass", "fp4_gemm_runner_backend=flashinfer_cudnn",
    ])
    assert res.rejected is None
    kernels = {name: s.kernel for name, s in res.settings.items() if s.kernel is not None}
    assert set(kernels) >= {"moe_runner_backend", "speculative_moe_runner_backend", "fp4_gemm_runner_backend"}
    assert all(k.status != "unsupported" for k in kernels.values())
    # the FP4 GEMM: no forward reaches mm_fp4 (only the routed experts are NVFP4), and whether
    # any layer calls it is not decided here (the whole model not read: its gap is named)
    fp4 = kernels["fp4_gemm_runner_backend"]
    assert fp4.status == "unknown" and not fp4.unused and "not followed to its end: not read: the draft's ModelConfig" in fp4.reason
    assert kernels["moe_runner_backend"].status == "supported"
    assert kernels["moe_runner_backend"].layers[0].function == "gen_cutlass_fused_moe_sm120_module"
    assert not any(f.rule_id == "SGK101" for f in check_resolution(res, ()).findings)


@pytest.mark.real_release
def test_real_explain_shows_the_kernel_of_each_forced_choice(release):
    from sglang_audit.analyses.explain import explain
    from sglang_audit.resolve.pipeline import Request

    tree = release("0.5.10")
    # a dense NVFP4 model: its linear layers' forward calls mm_fp4 (Qwen3.5's layers do not)
    exp = explain(Request(source=str(tree.package_dir), arch="sm120", model=LLAMA_NVFP4), "fp4_gemm_runner_backend")
    by = {c.choice: c for c in exp.choices}
    # SGLang's checks pass (the hand-written rule SGA103 already knows it is bad) ...
    assert by["flashinfer_trtllm"].outcome == "known_bad" and by["flashinfer_trtllm"].known_bad[0][0] == "SGA103"
    assert by["flashinfer_trtllm"].kernel.status == "unsupported"  # ... FlashInfer's do not
    assert by["flashinfer_cudnn"].kernel.status == "supported"
    assert by["cutlass"].kernel.status == "unknown" and "jit_kernel" in by["cutlass"].kernel.reason
    assert exp.setting.kernel is not None and exp.setting.kernel.status == "supported"  # auto → cudnn


@pytest.mark.real_release
def test_real_cli_check_and_flashinfer_source_none(release):
    from clirun import cli

    pkg = str(release("0.5.23").package_dir)
    code, out, _ = cli("check", "-s", pkg, "-a", "sm120", "-m", LLAMA_NVFP4, "--set", "fp4_gemm_runner_backend=flashinfer_trtllm")
    assert code == 1 and "ERROR   SGK101 kernel-unsupported-on-device" in out
    assert "flashinfer 0.7.2 declares flashinfer.mm_fp4 backend 'trtllm' unsupported on sm120" in out
    code, out, _ = cli("resolve", "-s", pkg, "-a", "sm120", "-m", LLAMA_NVFP4,
                       "--set", "fp4_gemm_runner_backend=flashinfer_trtllm", "--flashinfer-source", "none")
    assert "kernel library read: flashinfer not read: not read (--flashinfer-source none" in out
    assert "kernel  unknown: flashinfer.mm_fp4 backend 'trtllm'  (flashinfer)" in out


def test_diff_reports_a_kernel_that_loses_support(cache):
    from dataclasses import replace

    from sglang_audit.analyses.diff import SideOutcome, compare_setting
    from sglang_audit.render.diff import _setting_block

    new = _attach(_resolution("sm120", 12, 0, "flashinfer_trtllm"), cache)
    s = new.settings["fp4_gemm_runner_backend"]
    old = replace(new, settings={**new.settings, s.name: replace(s, kernel=replace(s.kernel, status="supported", version="9.9.8"))})
    sd = compare_setting(s.name, SideOutcome(old), SideOutcome(new))
    # a kernel losing support is a change of the setting (issue 39): never "unchanged"
    assert sd.change != "unchanged" and "kernel supported → unsupported" in sd.note
    lines = _setting_block(sd, ("old", "new"), 24, verbose=False)
    assert any("kernel supported (flashinfer 9.9.8) → unsupported (flashinfer 9.9.9): SM120 not in _trtllm_requirement" in ln for ln in lines)


def test_html_report_shows_the_kernel_verdict_escaped(cache):
    from sglang_audit.render.html import ReportData, render_html

    res = _attach(_resolution("sm120", 12, 0, "flashinfer_trtllm"), cache)
    page = render_html(ReportData(res, check=check_resolution(res, ())))
    assert '<span class="badge changed">unsupported</span> <code>flashinfer.mm_fp4 backend &#39;trtllm&#39;</code>' in page
    assert "SM120 not in _trtllm_requirement" in page
    assert "SGK101" in page


def test_locate_flashinfer_installed_is_found_not_imported(tmp_path, monkeypatch):
    import sys

    site = tmp_path / "site"
    (site / "flashinfer").mkdir(parents=True)
    (site / "flashinfer" / "__init__.py").write_text("raise SystemExit('imported!')\n")
    (site / "flashinfer" / "utils.py").write_text("")
    (site / "flashinfer_python-1.2.3.dist-info").mkdir()
    (site / "flashinfer_python-1.2.3.dist-info" / "METADATA").write_text("Name: flashinfer_python\nVersion: 1.2.3\n\n")
    monkeypatch.syspath_prepend(str(site))
    tree = locate_flashinfer("installed", "0.6.7")
    assert tree.version == "1.2.3" and tree.origin == "installed" and tree.package_dir == (site / "flashinfer").resolve()
    assert "flashinfer" not in sys.modules


def _fake_pip(wheel_bytes: bytes | None, calls: list[tuple[str, bool]]) -> Any:
    import subprocess

    def fake(version: str, label: str, dest: Path, *, binary_only: bool, dist: str = "sglang") -> Any:
        calls.append((f"{dist}=={version}", binary_only))
        if wheel_bytes is None:
            return subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution found for x")
        (dest / f"flashinfer_python-{version}-py3-none-any.whl").write_bytes(wheel_bytes)
        return subprocess.CompletedProcess([], 0, "", "")

    return fake


def test_pinned_flashinfer_is_downloaded_once_as_a_wheel(tmp_path, isolated_cache, monkeypatch):
    import io

    from sglang_audit.source import flashinfer as source

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path in FI.rglob("*.py"):
            zf.write(path, path.relative_to(FI.parent).as_posix())
        zf.writestr("flashinfer_python-9.9.9.dist-info/METADATA", "Name: flashinfer-python\nVersion: 9.9.9\n\n")
    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(source, "pip_download", _fake_pip(buf.getvalue(), calls))
    first = locate_flashinfer(None, "9.9.9")
    second = locate_flashinfer(None, "9.9.9")
    assert calls == [("flashinfer-python==9.9.9", True)]  # wheel only, and only once
    assert first == second and first.version == "9.9.9" and first.origin == "flashinfer-python==9.9.9"


def test_pinned_flashinfer_without_a_wheel_is_refused_not_built(isolated_cache, monkeypatch):
    from sglang_audit.source import flashinfer as source

    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(source, "pip_download", _fake_pip(None, calls))
    with pytest.raises(SourceError, match=r"flashinfer-python==0\.1\.0: no wheel on the package index"):
        locate_flashinfer(None, "0.1.0")
    assert calls == [("flashinfer-python==0.1.0", True)]  # no sdist fallback: it would run its build


# ---- a missing FlashInfer pin or package: unknown with the reason, never "supported" (issue #23)


def test_attach_without_a_flashinfer_pin_is_unknown_with_the_reason(cache):
    res = _resolution("sm100", 10, 0, "flashinfer_trtllm")
    res = attach(replace(res, source={**res.source, "flashinfer": None}), SGLANG_SIDE, cache, None)
    k = res.settings["fp4_gemm_runner_backend"].kernel
    assert k.status == "unknown"
    assert "the SGLang release pins no flashinfer-python version" in k.reason
    assert kernel_findings(res) == []  # not read: no verdict, and no "supported" either


def test_attach_flashinfer_without_the_entry_package_is_unknown(cache, tmp_path):
    import shutil

    fi = tmp_path / "fi" / "flashinfer"
    shutil.copytree(FI, fi)
    shutil.rmtree(fi / "gemm")  # the package holding mm_fp4
    res = _attach(_resolution("sm100", 10, 0, "flashinfer_trtllm"), SourceCache(), str(fi.parent))
    k = res.settings["fp4_gemm_runner_backend"].kernel
    assert k.status == "unknown" and "flashinfer.mm_fp4 not found in FlashInfer" in k.reason
    # the same deployment with the package there is supported (sm100)
    assert _attach(_resolution("sm100", 10, 0, "flashinfer_trtllm"), cache).settings[
        "fp4_gemm_runner_backend"].kernel.status == "supported"


@pytest.mark.real_release
def test_real_0510_draft_kernel_cites_the_call_the_built_layer_makes(release):
    # issue 39 item 11: the BF16 draft calls cutlass_fused_moe from unquant.py; the kernel line
    # cited modelopt_quant.py (the first importer of the entry point)
    res = _real(release, "0.5.10", "sm120", ["tp_size=8", "speculative_algorithm=NEXTN", "disable_radix_cache=true",
                                             "speculative_moe_runner_backend=flashinfer_cutlass"])
    s = res.settings["speculative_moe_runner_backend"]
    assert s.layer.method == "UnquantizedFusedMoEMethod" and s.layer.value == "FlashInfer cutlass_fused_moe"
    assert s.kernel.call_site == s.layer.site and s.kernel.call_site.startswith("sglang/srt/layers/quantization/unquant.py:")
    target = _real(release, "0.5.10", "sm120", ["tp_size=8", "moe_runner_backend=flashinfer_cutlass"]).settings["moe_runner_backend"]
    assert target.kernel.call_site == target.layer.site  # the NVFP4 method's own call


@pytest.mark.real_release
@pytest.mark.parametrize("version", ["0.5.23"])
def test_real_block_fp8_runner_kernel_is_the_call_the_linear_forward_makes(release, version):
    """Qwen3-4B-FP8 (weight_block_size [128, 128]) at TP 4. The linear stage runs the built
    layers' Fp8LinearMethod.apply: the GEMM SGLang dispatched (flashinfer_gemm_w8a8_block_fp8_
    linear_with_fallback) calls its @register_custom_op gemm_fp8_nt_groupwise, which runs as
    torch.ops.sglang's registered op and calls FlashInfer with the backend it picks. SM120,
    flashinfer_cutlass: backend="cutlass" at fp8_utils.py:629, whose requirement in FlashInfer
    0.7.2 lists [100, 103, 107, 120, 121]; SM100, flashinfer_trtllm: backend="trtllm" at :638.
    SM90, flashinfer_cutlass: SGLang's dispatch raises first (fp8_utils.py:1121), the layers'
    value says so, and no FlashInfer call is made: no kernel verdict (the retired table row
    claimed FlashInfer's refusal)."""
    from sglang_audit.resolve.pipeline import Request

    tree = release(version)
    model = str(Path(__file__).resolve().parent / "data" / "models" / "qwen3-4b-fp8")
    fp8_utils = tree.package_dir / "srt" / "layers" / "quantization" / "fp8_utils.py"
    text = fp8_utils.read_text().splitlines()

    def resolve(arch: str, runner: str) -> Resolution:
        sets = ["tp_size=4", f"fp8_gemm_runner_backend={runner}"]
        return shared.resolve(Request(source=str(tree.package_dir), arch=arch, model=model, sets=sets))

    res = resolve("sm120", "flashinfer_cutlass")
    s = res.settings["fp8_gemm_runner_backend"]
    k = s.kernel
    assert (k.status, k.function, k.backend, k.version) == ("supported", "flashinfer.gemm.gemm_fp8_nt_groupwise",
                                                            "cutlass", "0.7.2")
    assert k.call_site == "sglang/srt/layers/quantization/fp8_utils.py:629"
    assert text[628].strip() == "return _raw_gemm_fp8_nt_groupwise("  # inside the custom op's body
    layer = k.layers[0]
    assert (layer.file, layer.function) == (GEMM, "_cutlass_gemm_fp8_nt_groupwise_requirement")
    assert _flashinfer_line(res, layer.file, layer.line) == "@supported_compute_capability([100, 103, 107, 120, 121])"
    assert ("flashinfer.gemm", "gemm_fp8_nt_groupwise", k.call_site, "") in res.settings["quantization"].layer.kernel_calls
    assert not [f for f in kernel_findings(res) if f.setting == "fp8_gemm_runner_backend"]
    k = resolve("sm100", "flashinfer_trtllm").settings["fp8_gemm_runner_backend"].kernel
    assert (k.status, k.backend, k.call_site) == ("supported", "trtllm", "sglang/srt/layers/quantization/fp8_utils.py:638")
    assert k.layers[0].function == "_trtllm_gemm_fp8_nt_groupwise_requirement"
    res = resolve("sm90", "flashinfer_cutlass")
    q = res.settings["quantization"].layer
    assert (q.status, q.site) == ("unsupported", "sglang/srt/layers/quantization/fp8_utils.py:1121")
    assert "requires Blackwell GPUs" in q.value and not q.kernel_calls
    assert res.settings["fp8_gemm_runner_backend"].kernel is None
