"""Named environment profiles (issue 43): rules/env_profiles.toml, inputs/profiles.py, the
arch-dependent default (ROCm: SGLang's image, aiter installed and SGLANG_USE_AITER=1; CUDA: a
plain pip install), --env-profile, and --with/--without/--env over single facts."""

from __future__ import annotations

import re

import pytest

from sglang_audit.errors import InputError
from sglang_audit.inputs import profiles
from sglang_audit.inputs.device import Environment
from sglang_audit.resolve import pipeline
from sglang_audit.shipped import load_toml


def test_every_fact_has_a_source_and_every_image_names_the_versions_read() -> None:
    spec = load_toml("env_profiles.toml")
    assert set(spec["profile"]) >= {"pip", "image"}
    for platform, image in spec["image"].items():
        assert image["dockerfile"].startswith("docker/"), platform
        assert image["read"] and all(re.search(r"sgl-project/sglang@[0-9a-f]{40}", r) for r in image["read"]), platform
        for fact in [*image.get("package", ()), *image.get("env", ())]:
            assert fact.get("source", "").strip(), (platform, fact["name"])


def test_rocm_defaults_to_the_image_cuda_to_pip() -> None:
    rocm = profiles.select(None, "hip", "0.5.23")
    assert (rocm.name, rocm.chosen) == ("image", "the default for hip")
    assert rocm.summary == "SGLang's ROCm image, docker/rocm.Dockerfile"
    assert "aiter" in dict(rocm.installed) and "docker/rocm.Dockerfile" in dict(rocm.installed)["aiter"]
    assert ("SGLANG_USE_AITER", "1") in [(n, v) for n, v, _ in rocm.env]
    assert profiles.select(None, "cuda", "0.5.23").name == "pip"
    assert profiles.select("image", "cuda", "0.5.23").summary == "SGLang's CUDA image, docker/Dockerfile"


def test_facts_are_bounded_by_release() -> None:
    # nixl and SGLANG_DISABLE_CUDNN_CHECK appear in the v0.5.17 Dockerfile, not in v0.5.5.post3's
    assert "nixl" in dict(profiles.select(None, "hip", "0.5.17").installed)
    assert "nixl" not in dict(profiles.select(None, "hip", "0.5.16").installed)
    assert "SGLANG_DISABLE_CUDNN_CHECK" not in [n for n, _, _ in profiles.select(None, "hip", "0.5.16").env]
    # before the first version read: the default falls back to pip and says why; asked by name, an error
    old = profiles.select(None, "hip", "0.4.10")
    assert old.name == "pip" and "0.5.5+" in old.note
    with pytest.raises(InputError, match="releases 0.5.5"):
        profiles.select("image", "hip", "0.4.10")
    with pytest.raises(InputError, match="no SGLang image for platform npu"):
        profiles.select("image", "npu", "0.5.23")
    with pytest.raises(InputError, match="did you mean image"):
        profiles.select("imag", "hip", "0.5.23")


def test_user_overrides_win_over_the_profile() -> None:
    rocm = profiles.select(None, "hip", "0.5.23")
    base = Environment(env=(("SGLANG_USE_AITER", "0"),), installed=frozenset({"torch", "triton_kernels"}),
                       missing=frozenset({"aiter"}))
    env = profiles.apply(base, rocm, {"SGLANG_USE_AITER": "0"})
    assert env.env_dict()["SGLANG_USE_AITER"] == "0" and env.env_dict()["SGLANG_MOE_PADDING"] == "1"
    assert not env.has_package("aiter") and env.has_package("sgl_kernel")
    assert not env.has_package("triton_kernels")  # the image's rocm700 flavour has none
    assert profiles.assumption(env, "aiter", False) is None  # --without: the user's, worded by stage_common
    plain = profiles.apply(Environment(), rocm, {})
    assert profiles.assumption(plain, "aiter", True) == (
        "aiter: installed (SGLang's ROCm image, docker/rocm.Dockerfile; --without aiter evaluates its absence)")
    assert profiles.assumption(plain, "deep_ep", False).startswith(
        "deep_ep: absent (neither a plain install of this release nor SGLang's ROCm image")


def _layer(res, name: str):
    return res.settings[name].layer


@pytest.mark.real_release
def test_rocm_image_by_default_and_without_aiter_on_real_releases(release) -> None:
    def run(version: str, arch: str, model: str, *sets: str, **kw):
        return pipeline.resolve(pipeline.Request(source=str(release(version).package_dir), arch=arch, model=model,
                                                 sets=["tp_size=2", *sets], flashinfer_source="none", **kw))

    # 0.5.23 gfx950, BF16 MoE with a 128-aligned partition (768/2): unquant.py builds MoeRunner(AITER)
    res = run("0.5.23", "gfx950", "qwen3-30b-a3b")
    moe = _layer(res, "moe_runner_backend")
    assert (moe.status, moe.runner, moe.value) == ("resolved", "aiter", "aiter fused_moe (AMD AITER CK MoE)")
    assert any(a.startswith("aiter: installed (SGLang's ROCm image, docker/rocm.Dockerfile") for a in moe.assumptions)
    assert _layer(res, "attention_backend").value == "AiterAttnBackend"
    assert res.environment["name"] == "image" and res.to_json()["environment"]["chosen"] == "the default for hip"
    # the image's SGLANG_USE_AITER=1 without aiter: SGLang's own ImportError
    res = run("0.5.16", "gfx942", "qwen3-30b-a3b", without_packages=["aiter"])
    assert res.rejected is not None and "aiter is required when SGLANG_USE_AITER" in res.rejected.message
    # a plain pip install on ROCm: no aiter, no SGLANG_USE_AITER; quark_int4fp8_moe imports aiter under is_hip
    res = run("0.5.23", "gfx942", "qwen3-30b-a3b", env_profile="pip")
    assert res.rejected is not None and res.rejected.message == "No module named 'aiter.ops.shuffle'"
    assert res.environment["name"] == "pip"


@pytest.mark.real_release
def test_a_failure_resting_on_an_assumed_absence_depends_on_it(release) -> None:
    # issue 43: GPT-OSS MXFP4 on SM90 fails to import triton_kernels, which a plain install
    # lacks and SGLang's image ships. Nobody said which: the answer depends on it (exit 3),
    # with both outcomes; --env-profile pip or --without decide it (unsupported, exit 1)
    def run(**kw):
        return pipeline.resolve(pipeline.Request(source=str(release("0.5.23").package_dir), arch="sm90",
                                                 model="gpt-oss-120b", flashinfer_source="none", **kw))

    s = run().settings["moe_runner_backend"]
    assert s.status == "unknown" and s.layer.status == "unsupported"
    assert s.layer.exception == "ModuleNotFoundError" and "triton_kernels" in s.layer.value
    assert s.note.startswith("depends on triton_kernels: absent (assumed: a plain install lacks it) → unsupported; "
                             "triton_kernels installed: ")
    for kw in ({"env_profile": "pip"}, {"without_packages": ["triton_kernels"]}):
        decided = run(**kw).settings["moe_runner_backend"]
        assert (decided.status, decided.note) == ("unsupported", "")
