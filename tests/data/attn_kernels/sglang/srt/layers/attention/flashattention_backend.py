# imitates sglang/srt/layers/attention/flashattention_backend.py (0.5.23 shape)


class FlashAttentionBackend:
    def __init__(self, model_runner, skip_prefill=False, fa_impl_ver=3):
        self.page_size = model_runner.page_size
        self.fa_impl_ver = fa_impl_ver
        if self.fa_impl_ver == 3:
            from sgl_kernel.flash_attn import (
                flash_attn_varlen_func,
                flash_attn_with_kvcache,
            )
        elif self.fa_impl_ver == 4:
            from sglang.jit_kernel.flash_attention_v4 import (
                flash_attn_varlen_func,
                flash_attn_with_kvcache,
            )
        else:
            raise ValueError(f"Invalid version: {self.fa_impl_ver=}")
        self.flash_attn_varlen_func = flash_attn_varlen_func
        self.flash_attn_with_kvcache = flash_attn_with_kvcache
