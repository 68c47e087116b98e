# imitates sglang/srt/layers/attention/attention_registry.py (0.5.23 shape)
from sglang.srt.utils import get_device_capability, is_musa

ATTENTION_BACKENDS = {}
_is_musa = is_musa()


def register_attention_backend(name):
    def decorator(fn):
        ATTENTION_BACKENDS[name] = fn
        return fn

    return decorator


@register_attention_backend("fa3")
def create_flashattention_v3_backend(runner):

    major, minor = get_device_capability()
    if not _is_musa:
        assert (major == 8 and not runner.use_mla_backend) or major == 9, (
            "FlashAttention v3 Backend requires SM>=80 and SM<=90."
        )
        from sglang.srt.layers.attention.flashattention_backend import (
            FlashAttentionBackend,
        )

        return FlashAttentionBackend(runner)
    else:
        from sglang.srt.hardware_backend.musa.attention import MusaFlashAttentionBackend

        return MusaFlashAttentionBackend(runner)


@register_attention_backend("fa4")
def create_flashattention_v4_backend(runner):
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    return FlashAttentionBackend(runner, fa_impl_ver=4)


@register_attention_backend("fa_any")
def create_flashattention_any_backend(runner):
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    return FlashAttentionBackend(runner, fa_impl_ver=runner.fa_version)


@register_attention_backend("triton")
def create_triton_backend(runner):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    return TritonAttnBackend(runner)


@register_attention_backend("flashinfer")
def create_flashinfer_backend(runner):
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    return FlashInferAttnBackend(runner)


@register_attention_backend("fa_legacy")
def create_legacy_flashattention_backend(runner):
    from sglang.srt.layers.attention.legacy_backend import LegacyFlashAttentionBackend

    return LegacyFlashAttentionBackend(runner, min_version=2)
