# imitates a backend constructor that picks its kernel through a local and an ordering test
# (no real backend: written for the interpreter-run reading of constructor branches)


class LegacyFlashAttentionBackend:
    def __init__(self, model_runner, min_version=3):
        version = min_version
        if version >= 3 and model_runner.use_mla_backend:
            from sgl_kernel.flash_attn import flash_attn_with_kvcache
        else:
            from sgl_kernel.flash_attn import flash_attn_varlen_func
        self.kernel = flash_attn_varlen_func if version < 3 else flash_attn_with_kvcache
