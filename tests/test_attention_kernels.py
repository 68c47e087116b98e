"""The attention kernel level (issue 42): which kernel-library functions a backend's constructor
imports (read from the registry's creator and the class's ``__init__``), and the device guards
those functions' own code runs (sgl-kernel's ``is_fa3_supported``), on the small files of
tests/data/attn_kernels and on a real release with the sgl-kernel it pins."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import shared

from sglang_audit import factfiles
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.device import Device, Environment
from sglang_audit.resolve import attnkernels, kernelargs
from sglang_audit.resolve.kernelread import FlashInferReader
from sglang_audit.resolve.libeval import LibraryEval
from sglang_audit.resolve.pipeline import Request
from sglang_audit.result import LayerValue
from sglang_audit.source.sglkernel import locate_sgl_kernel

ROOT = Path(__file__).resolve().parent / "data" / "attn_kernels"
REGISTRY = "sglang/srt/layers/attention/attention_registry.py"
BACKEND = "sglang/srt/layers/attention/flashattention_backend.py"
WRAPPER = "sgl_kernel/flash_attn.py"


def _line(rel: str, text: str) -> int:
    lines = (ROOT / rel).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _reach(backend: str, layer: object = None) -> attnkernels.Reach:
    facts = factfiles.attention().kernel
    assert facts is not None
    return attnkernels.reach(ROOT, SourceCache(use_disk=False), facts, backend, layer)


def _device(capability: tuple[int, int], cuda: str) -> attnkernels.DeviceFacts:
    return attnkernels.DeviceFacts(Device("cuda", f"sm{capability[0]}{capability[1]}", *capability, cuda, None, "test", 81920))


def _verdict(backend: str, capability: tuple[int, int], cuda: str = "12.9", layer: object = None):
    cache = SourceCache(use_disk=False)
    readers = {"sgl_kernel": (FlashInferReader(ROOT / "sgl_kernel", cache), "0.0.test", "")}
    return attnkernels.verdict(_reach(backend, layer), readers, _device(capability, cuda),
                               lambda p: {"sgl_kernel": "sgl-kernel"}.get(p, p))


def _refused_in_registry() -> LayerValue:
    # what the attention stage reports when the creator's own assert refuses the device
    return LayerValue("unsupported", "AssertionError: FlashAttention v3 Backend requires SM>=80 and SM<=90.",
                      site=f"{REGISTRY}:{_line(REGISTRY, 'assert (major == 8')}", stage="attention")


def test_the_class_returned_after_the_refusing_assert_is_read_and_its_fa3_branch_imports_sgl_kernel():
    # the creator builds FlashAttentionBackend or (MUSA) MusaFlashAttentionBackend; the block
    # of the assert that refused decides which, and fa_impl_ver's default (3) decides the branch
    r = _reach("fa3", _refused_in_registry())
    assert r.cls == "FlashAttentionBackend"
    site = f"{BACKEND}:{_line(BACKEND, 'from sgl_kernel.flash_attn import')}"
    assert [(i.module, i.name, i.site, i.condition) for i in r.imports] == [
        ("sgl_kernel.flash_attn", "flash_attn_varlen_func", site, ""),
        ("sgl_kernel.flash_attn", "flash_attn_with_kvcache", site, "")]


def test_without_the_stage_outcome_a_creator_building_two_classes_is_not_guessed():
    r = _reach("fa3", None)
    assert r.imports == () and "builds one of FlashAttentionBackend, MusaFlashAttentionBackend" in r.reason


def test_fa4_passes_fa_impl_ver_4_so_the_sgl_kernel_branch_is_not_reached():
    r = _reach("fa4")
    assert r.cls == "FlashAttentionBackend" and r.imports == ()
    assert _verdict("fa4", (10, 0)) is None  # no kernel-library question asked


def test_a_backend_class_built_outside_the_registry_is_read_with_the_arguments_sglang_passed():
    # the speculative worker's draft backends (DraftBackendFactory's `FlashAttentionBackend(runner,
    # skip_prefill=False, fa_impl_ver=fa_impl_ver)`) reach no registry creator: the class is read
    # with the arguments the construction passed, positional ones bound in order after self
    facts = factfiles.attention().kernel
    assert facts is not None
    module = "sglang.srt.layers.attention.flashattention_backend"
    site = f"{BACKEND}:{_line(BACKEND, 'from sgl_kernel.flash_attn import')}"

    def reach(*given: tuple[str, str]) -> attnkernels.Reach:
        return attnkernels.reach_built(ROOT, SourceCache(use_disk=False), facts,
                                       ((module, "FlashAttentionBackend", "draft_utils.py:493", given),))

    fa3 = reach(("", "?"), ("skip_prefill", "False"), ("fa_impl_ver", "3"))
    assert fa3.cls == "FlashAttentionBackend"
    assert [(i.module, i.name, i.site, i.condition) for i in fa3.imports] == [
        ("sgl_kernel.flash_attn", "flash_attn_varlen_func", site, ""),
        ("sgl_kernel.flash_attn", "flash_attn_with_kvcache", site, "")]
    assert reach(("", "?"), ("fa_impl_ver", "4")).imports == ()  # FA4's branch imports no sgl-kernel
    assert reach(("", "?"), ("", "False"), ("", "4")).imports == ()  # positional, in order
    # a value that was not plain data decides nothing: both branches kept, the import conditional
    unknown = reach(("", "?"), ("fa_impl_ver", "?"))
    assert unknown.imports and all(i.condition.startswith("if self.fa_impl_ver == 3") for i in unknown.imports)


def test_fa3_on_blackwell_is_refused_by_the_kernels_own_guard_with_its_line():
    v = _verdict("fa3", (10, 0), layer=_refused_in_registry())
    assert v is not None and v.status == "unsupported" and v.library == "sgl-kernel"
    assert v.function == "sgl_kernel.flash_attn.flash_attn_varlen_func"
    guard = _line(WRAPPER, "if not is_fa3_supported()")
    helper = _line(WRAPPER, 'return (torch.version.cuda >= "12.3")')
    assert v.reason.startswith("flash_attn_varlen_func refuses SM100: `if not is_fa3_supported()` holds "
                               f"(is_fa3_supported at {WRAPPER}:{helper})")
    assert v.reason.endswith(f"at {WRAPPER}:{guard}")
    assert v.call_site == f"{BACKEND}:{_line(BACKEND, 'from sgl_kernel.flash_attn import')}"
    # the guard on the call's arguments is listed, not evaluated
    assert any("max_seqlen_q is None" in c for c in v.conditions)


def test_fa3_on_hopper_passes_the_guard_and_old_cuda_fails_it_as_the_string_comparison_does():
    built = LayerValue("resolved", "FlashAttentionBackend", stage="attention")  # the stage's value names the class
    ok = _verdict("fa3", (9, 0), layer=built)
    assert ok is not None and ok.status == "supported"
    assert f"does not hold (is_fa3_supported at {WRAPPER}:" in ok.reason
    # torch.version.cuda >= "12.3" compares strings, as the wrapper does
    old = _verdict("fa3", (9, 0), cuda="12.2", layer=built)
    assert old is not None and old.status == "unsupported"


def test_an_import_under_a_branch_the_call_does_not_decide_informs_but_never_refuses():
    r = _reach("fa_any")
    assert r.imports and all(i.condition.startswith("if self.fa_impl_ver == 3") for i in r.imports)
    v = _verdict("fa_any", (10, 0))
    assert v is not None and v.status == "unknown"
    assert "[reached only if self.fa_impl_ver == 3" in v.reason


def test_a_constructor_branch_on_a_local_and_an_ordering_is_decided_by_the_interpreter():
    # ``version = min_version`` then ``if version >= 3 and model_runner.use_mla_backend``: the
    # interpreter runs the assignment and short-circuits on the creator's literal (2), so the
    # runner's unknown attribute is never read and only the else branch's import is reached
    legacy = "sglang/srt/layers/attention/legacy_backend.py"
    r = _reach("fa_legacy")
    assert r.cls == "LegacyFlashAttentionBackend"
    assert [(i.module, i.name, i.site, i.condition) for i in r.imports] == [
        ("sgl_kernel.flash_attn", "flash_attn_varlen_func",
         f"{legacy}:{_line(legacy, 'import flash_attn_varlen_func')}", "")]


def test_a_backend_name_the_registry_lacks_says_so():
    r = _reach("no_such_backend")
    assert r.imports == () and r.reason == f"no @register_attention_backend('no_such_backend') in {REGISTRY}"


def test_the_wrappers_are_extracted_from_a_wheel_without_its_shared_objects(tmp_path, isolated_cache):
    wheel = tmp_path / "sglang_kernel-9.9.9-cp310-abi3-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sgl_kernel/__init__.py", "")
        zf.writestr("sgl_kernel/flash_attn.py", (ROOT / WRAPPER).read_text())
        zf.writestr("sgl_kernel/flash_ops.abi3.so", b"\0" * 64)
        zf.writestr("sglang_kernel-9.9.9.dist-info/METADATA", "Name: sglang-kernel\nVersion: 9.9.9\n\n")
    tree = locate_sgl_kernel(str(wheel), None)
    assert tree.version == "9.9.9" and (tree.package_dir / "flash_attn.py").is_file()
    assert not (tree.package_dir / "flash_ops.abi3.so").exists()


@pytest.mark.real_release
def test_real_0_5_23_fa3_on_sm100_is_refused_by_sgl_kernels_is_fa3_supported(release):
    # read first: sglang 0.5.23 pins sglang-kernel==0.4.10; FlashAttentionBackend.__init__
    # (flashattention_backend.py:282) imports sgl_kernel.flash_attn's functions for fa_impl_ver 3;
    # sgl-kernel 0.4.10 flash_attn.py:306 `if not is_fa3_supported(): raise NotImplementedError`,
    # is_fa3_supported (:25) accepts capability majors 8 and 9 only
    tree = release("0.5.23")
    res = shared.resolve(Request(source=str(tree.package_dir), arch="sm100", model="llama-3.1-8b-nvfp4",
                                 sets=["attention_backend=fa3"]))
    k = res.settings["attention_backend"].kernel
    assert (k.status, k.library, k.version) == ("unsupported", "sgl-kernel", "0.4.10")
    assert k.call_site == "sglang/srt/layers/attention/flashattention_backend.py:282"
    assert k.reason.startswith("flash_attn_varlen_func refuses SM100: `if not is_fa3_supported()` holds "
                               "(is_fa3_supported at sgl_kernel/flash_attn.py:25)")
    assert k.reason.endswith("at sgl_kernel/flash_attn.py:306")


def test_explain_says_the_attention_backend_fails_not_the_moe_layers():
    from sglang_audit.analyses.explain import OUTCOME_LAYERS_FAIL, ChoiceOutcome
    from sglang_audit.render.explain import _choice_lines

    note = f"AssertionError: FlashAttention v3 Backend requires SM>=80 and SM<=90. at {REGISTRY}:20"
    attn = ChoiceOutcome("fa3", OUTCOME_LAYERS_FAIL, note=note, stage="attention")
    assert _choice_lines(attn, 3, "sm100")[0] == f"  fa3  accepted by SGLang, but the attention backend built with it fails: {note}"
    assert attn.to_json()["stage"] == "attention"
    moe = ChoiceOutcome("triton", OUTCOME_LAYERS_FAIL, note="NotImplementedError: x at y:1", stage="moe")
    assert "but the MoE layers built with it fail: NotImplementedError" in _choice_lines(moe, 6, "sm120")[0]


def test_a_guard_an_earlier_return_may_skip_informs_but_does_not_refuse():
    cache = SourceCache(use_disk=False)
    reader = FlashInferReader(ROOT / "sgl_kernel", cache)
    imp = attnkernels.KernelImport("sgl_kernel.flash_attn", "flash_attn_maybe", "x.py:1")
    dev = _device((10, 0), "12.9")
    lib = LibraryEval(ROOT / "sgl_kernel", cache, dev.device, dev.environment)
    layers = attnkernels.read_function(reader, imp, lib, dev, [])
    guard = _line(WRAPPER, "def flash_attn_maybe") + 3  # the second `if` of the function
    assert [(x.says, x.enforced, x.line) for x in layers] == [("unsupported", False, guard)]
    assert "an earlier statement may return first" in layers[0].detail


# ---- remembered verdicts (kernelmemo): a second run reads neither SGLang's nor the library's IR


def _attached(root: Path, memo: object, capability: tuple[int, int] = (10, 0)) -> tuple[object, SourceCache]:
    from sglang_audit.resolve.kernels import attach
    from sglang_audit.result import ModelSummary, Resolution, Setting

    cache = SourceCache(use_disk=False)
    res = Resolution(
        source={"version": "0.0.0", "origin": "x"}, structure="E?",
        device={"platform": "cuda", "arch": "x", "major": capability[0], "minor": capability[1], "name": "x",
                "cuda": "12.9", "hip": None, "memory_mib": 1, "gpu_count": 1, "driver": "x", "cudnn": None},
        model=ModelSummary("m", "/m", "X", None, None), flags={}, env={}, rejected=None,
        settings={"attention_backend": Setting("attention_backend", "fa3", "fa3", "resolved",
                                               layer=_refused_in_registry())})
    return attach(res, root, cache, "none", memo=memo).settings["attention_backend"].kernel, cache  # type: ignore[arg-type]


@pytest.mark.parametrize("change", ["none", "library", "backend"])
def test_an_attention_verdict_is_remembered_until_a_file_it_read_changes(tmp_path, isolated_cache, monkeypatch, change):
    import shutil

    import sglang_audit.cachedir as cachedir
    from sglang_audit.resolve.kernelmemo import KernelMemo

    monkeypatch.setattr(cachedir, "RACY_NS", -10**12)  # stamps settle at once: an edit is seen by content
    root = Path(shutil.copytree(ROOT, tmp_path / "attn"))
    monkeypatch.setenv("SGLANG_AUDIT_SGL_KERNEL_SOURCE", str(root))
    memo = KernelMemo(isolated_cache / "results")
    first, _ = _attached(root, memo)
    assert first is not None and first.status == "unsupported" and memo.hits == 0
    if change == "library":  # the kernel's guard now accepts every device
        wrapper = root / WRAPPER
        wrapper.write_text(wrapper.read_text().replace("if not is_fa3_supported()", "if False"))
    elif change == "backend":  # the constructor no longer imports the kernel
        backend = root / BACKEND
        backend.write_text(backend.read_text().replace("from sgl_kernel.flash_attn import", "from other_lib import"))
    again, cache = _attached(root, memo)
    if change == "none":
        assert again == first and memo.hits == 2  # the reach and the verdict
        assert cache.files_read == []  # no IR loaded at all
    elif change == "library":
        assert memo.hits == 1 and again is not None and again.status != "unsupported"  # the reach only
    else:
        assert memo.hits == 0 and again is None  # no kernel question asked
    if change != "backend":
        other, _ = _attached(root, memo, (9, 0))  # another device: its own verdict
        assert other is not None and other.status == "supported"


# ---- FlashInfer's own dispatch between kernel families (libdispatch, flashinfer#2555) ---------
FI_PREFILL = "flashinfer/prefill.py"
FI_UTILS = "flashinfer/utils.py"
FI_BACKEND = "sglang/srt/layers/attention/flashinfer_backend.py"


def _dispatch(capability: tuple[int, int], backend: str, root: Path = ROOT / "flashinfer", cache: SourceCache | None = None):
    from sglang_audit.resolve.libdispatch import wrapper_dispatch

    cache = cache if cache is not None else SourceCache(use_disk=False)
    dev = _device(capability, "12.9").device
    lib = LibraryEval(root, cache, dev, Environment())
    return wrapper_dispatch(FlashInferReader(root, cache), lib, "flashinfer", "BatchPrefillWithRaggedKVCacheWrapper", backend)


def test_flashinfer_auto_is_dispatched_on_the_device_and_stays_a_condition_where_the_call_decides():
    # determine_attention_backend: `is_sm90a_supported(device) and is_fa3_backend_supported(...)`
    got = _dispatch((12, 0), "auto")
    assert got.family == "fa2"
    chose = got.layers[0]
    assert (chose.mechanism, chose.function, chose.file) == ("dispatch", "determine_attention_backend", FI_UTILS)
    assert chose.line == _line(FI_UTILS, 'return "fa2"') and not chose.enforced
    assert "is_sm90a_supported at flashinfer/utils.py:" in chose.detail
    # on SM90 the FA3 test reads the call's mask and encoding: a condition, no family
    got = _dispatch((9, 0), "auto")
    assert got.family == "" and not any(x.says == "unsupported" for x in got.layers)
    assert len(got.conditions) == 1 and "is_fa3_backend_supported" in got.conditions[0]


def test_a_family_whose_module_getter_raises_on_the_device_is_refused_at_that_raise():
    got = _dispatch((12, 0), "cutlass")
    refusal = got.layers[-1]
    assert (refusal.says, refusal.enforced, refusal.function, refusal.file) == ("unsupported", True, "get_fmha_module", FI_PREFILL)
    assert refusal.line == _line(FI_PREFILL, "raise ValueError(")
    assert "CUTLASS FMHA requires SM100a" in refusal.detail
    # on SM100 the same family builds its JIT module, compiled for majors [10, 11]
    got = _dispatch((10, 0), "cutlass")
    assert [(x.mechanism, x.says) for x in got.layers] == [("jit", "supported")]
    assert "nvcc archs for majors [10, 11]" in got.layers[0].detail


def _fi_verdict(capability: tuple[int, int], family: str):
    cache = SourceCache(use_disk=False)
    readers = {"flashinfer": (FlashInferReader(ROOT / "flashinfer", cache), "0.0.test", "")}
    site = f"{FI_BACKEND}:{_line(FI_BACKEND, 'BatchPrefillWithRaggedKVCacheWrapper(')}"
    layer = LayerValue("resolved", "FlashInferAttnBackend", stage="attention", library_calls=(
        ("flashinfer.BatchPrefillWithRaggedKVCacheWrapper", site, (("", "?"), ("", "'NHD'"), ("backend", repr(family)))),))
    return attnkernels.verdict(_reach("flashinfer", layer), readers, _device(capability, "12.9"), lambda p: p), site


def test_the_wrapper_sglang_built_refuses_the_device_through_its_family_and_says_where():
    v, site = _fi_verdict((12, 0), "cutlass")
    assert v is not None and v.status == "unsupported"
    assert v.function == "flashinfer.BatchPrefillWithRaggedKVCacheWrapper" and v.call_site == site and v.backend == "cutlass"
    assert f"at {FI_PREFILL}:{_line(FI_PREFILL, 'raise ValueError(')}" in v.reason
    # a family the device accepts makes no verdict of its own (its compiled kernels decide)
    assert _fi_verdict((10, 0), "cutlass")[0] is None
    assert _fi_verdict((12, 0), "auto")[0] is None


@pytest.mark.real_release
def test_real_flashinfer_0_7_2_cutlass_fmha_family_is_refused_on_sm120_by_its_getter():
    # read first: FlashInfer 0.7.2 (SGLang 0.5.23's pin) prefill.py:191-206 get_fmha_module builds
    # the CUTLASS FMHA module if is_sm100a_supported or is_sm110a_supported, else raises (:204);
    # BatchPrefillWithRaggedKVCacheWrapper.plan calls it for backend "cutlass" (:4897); "auto"
    # goes through determine_attention_backend (utils.py:616-629), FA3 only on SM90
    from sglang_audit.source.flashinfer import locate_flashinfer

    root = locate_flashinfer(None, "0.7.2").package_dir
    cache = SourceCache()  # the IR of FlashInfer's large modules from the user cache, once for the three
    got = _dispatch((12, 0), "cutlass", root, cache)
    refusal = got.layers[-1]
    assert (refusal.says, refusal.enforced, refusal.function) == ("unsupported", True, "get_fmha_module")
    assert (refusal.file, refusal.line) == (FI_PREFILL, 204)
    assert "CUTLASS FMHA requires SM100a (B200/GB200) or SM110a" in refusal.detail
    assert "is_sm100a_supported at flashinfer/utils.py:670" in refusal.detail
    got = _dispatch((10, 0), "cutlass", root, cache)
    assert [(x.says, x.function, x.file, x.line) for x in got.layers] == [
        ("supported", "gen_fmha_cutlass_sm100a_module", "flashinfer/jit/attention/modules.py", 2299)]
    got = _dispatch((12, 0), "auto", root, cache)
    assert got.family == "fa2" and (got.layers[0].file, got.layers[0].line) == (FI_UTILS, 628)
    assert not any(x.says == "unsupported" for x in got.layers)


def _served_verdict(calls: tuple[tuple[str, str, str, str], ...], capability: tuple[int, int]):
    cache = SourceCache(use_disk=False)
    facts = factfiles.attention().kernel
    assert facts is not None
    reach = attnkernels.reach(ROOT, cache, facts, "triton", None, calls=calls)
    readers = {"sgl_kernel": (FlashInferReader(ROOT / "sgl_kernel", cache), "0.0.test", "")}
    return reach, attnkernels.verdict(reach, readers, _device(capability, "12.9"), lambda p: p)


def test_a_kernel_the_backend_calls_serving_a_batch_is_read_as_an_import_is():
    # the attention stage's request-time calls (LayerValue.kernel_calls) join the constructor's
    # imports: sgl-kernel's own guard refuses Blackwell at the SGLang call site that reached it
    site = "sglang/srt/layers/attention/triton_backend.py:99"
    assert _reach("triton").imports == ()  # its constructor imports no kernel
    reach, v = _served_verdict((("sgl_kernel.flash_attn", "flash_attn_varlen_func", site, ""),), (10, 0))
    assert [(i.name, i.served) for i in reach.imports] == [("flash_attn_varlen_func", True)]
    assert v is not None and (v.status, v.function, v.call_site) == ("unsupported", "sgl_kernel.flash_attn.flash_attn_varlen_func", site)
    assert v.reason.endswith(f"at {WRAPPER}:{_line(WRAPPER, 'if not is_fa3_supported()')}")
    _, ok = _served_verdict((("sgl_kernel.flash_attn", "flash_attn_varlen_func", site, ""),), (9, 0))
    assert ok is not None and ok.status == "supported"
    # under a branch on request-time state it informs only
    _, cond = _served_verdict((("sgl_kernel.flash_attn", "flash_attn_varlen_func", site, "if q_rope is not None (x.py:1)"),), (10, 0))
    assert cond is not None and cond.status == "unknown" and "[reached only if q_rope is not None" in cond.reason
    # a called function whose code checks nothing of the device asks no kernel question
    _, none = _served_verdict((("sgl_kernel.flash_attn", "flash_attn_with_kvcache", site, ""),), (10, 0))
    assert none is None


# ---- a call served with the arguments SGLang passes (issue 44) ------------------------------
MLA = "sgl_kernel/attention.py"
MLA_SITE = "sglang/srt/layers/attention/cutlass_mla_backend.py:120"


def _given(q_shape: list[int | None] | None = None, **known: str) -> tuple[tuple[str, str], ...]:
    q = json.dumps(["tensor", "bfloat16", q_shape], separators=(",", ":")) if q_shape is not None else "?"
    return (("", q), ("", "?"), ("", "?"), *known.items())


def _mla_verdict(given: tuple[tuple[str, str], ...], condition: str = ""):
    calls = (("sgl_kernel", "cutlass_mla_decode", MLA_SITE, condition),)
    passed = (("sgl_kernel.cutlass_mla_decode", MLA_SITE, given),)
    cache = SourceCache(use_disk=False)
    facts = factfiles.attention().kernel
    assert facts is not None
    reach = attnkernels.reach(ROOT, cache, facts, "triton", None, calls=calls, call_args=passed)
    readers = {"sgl_kernel": (FlashInferReader(ROOT / "sgl_kernel", cache), "0.0.test", "")}
    return attnkernels.verdict(reach, readers, _device((10, 0), "12.9"), lambda p: p)


def test_a_guard_on_the_calls_arguments_refuses_the_heads_per_rank_sglang_passes():
    # 128 heads / tp 8 = 16 per rank: the kernel's assert fails at SGLang's call site
    v = _mla_verdict(_given(num_heads='["plain",16]'))
    assert v is not None and (v.status, v.function, v.call_site) == ("unsupported", "sgl_kernel.cutlass_mla_decode", MLA_SITE)
    assert v.reason == (f"cutlass_mla_decode refuses SM100: `assert num_heads == 128` fails with the arguments SGLang "
                        f"passes at {MLA_SITE} (num_heads=16): AssertionError(f'H must be 128, got {{num_heads}}') "
                        f"at {MLA}:{_line(MLA, 'assert num_heads == 128')}")


def test_a_call_that_passes_its_guards_leaves_only_what_its_arguments_do_not_decide():
    # 128 heads pass; the query's head dim is not known: that guard stays a condition, and
    # the call asks no device question (no verdict)
    assert _mla_verdict(_given(num_heads='["plain",128]')) is None
    # the dims SGLang's view gives decide it: 576 passes, 512 is refused at its line
    assert _mla_verdict(_given([None, 128, 576], num_heads='["plain",128]')) is None
    v = _mla_verdict(_given([None, 128, 512], num_heads='["plain",128]'))
    assert v is not None and v.status == "unsupported"
    assert v.reason.endswith(f"at {MLA}:{_line(MLA, 'if D != 576')}") and "`if D != 576` holds" in v.reason


def test_a_dtype_and_a_page_size_passed_decide_a_guard_together():
    fp8, bf16 = '["dtype","float8_e4m3fn"]', '["dtype","bfloat16"]'
    v = _mla_verdict(_given(kv_dtype=fp8, page_size='["plain",1]'))
    assert v is not None and v.status == "unsupported" and "(kv_dtype=torch.float8_e4m3fn, page_size=1)" in v.reason
    assert v.reason.endswith(f"at {MLA}:{_line(MLA, 'if kv_dtype == torch.float8_e4m3fn')}")
    assert _mla_verdict(_given(kv_dtype=fp8, page_size='["plain",64]')) is None
    assert _mla_verdict(_given(kv_dtype=bf16, page_size='["plain",1]')) is None
    # a page size the stage did not know leaves the guard a condition, never a refusal
    assert _mla_verdict(_given(kv_dtype=fp8, page_size="?")) is None


def test_a_refusing_call_under_a_branch_on_request_time_state_informs_only():
    v = _mla_verdict(_given(num_heads='["plain",16]'), condition="if forward_batch.spec_info is None (x.py:1)")
    assert v is not None and v.status == "unknown" and "[reached only if forward_batch.spec_info is None" in v.reason


def test_two_reaches_of_one_site_keep_only_the_arguments_they_agree_on():
    a = (("", '["plain",16]'), ("page_size", '["plain",1]'))
    b = (("", '["plain",16]'), ("page_size", '["plain",64]'))
    assert kernelargs.merged(a, b) == (("", '["plain",16]'), ("page_size", "?"))
    assert kernelargs.merged(a, a[:1]) is None  # a call of another shape: nothing kept
    assert kernelargs.decode("?", "q").__class__.__name__ == "Unknown"
