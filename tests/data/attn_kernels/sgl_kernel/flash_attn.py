# imitates sgl_kernel/flash_attn.py (sgl-kernel 0.4.10 shape)
from functools import lru_cache

import torch


@lru_cache(maxsize=1)
def is_fa3_supported(device=None) -> bool:
    # fa3 is built for sm80/sm86/sm89/sm90a
    return (torch.version.cuda >= "12.3") and (
        torch.cuda.get_device_capability(device)[0] == 9
        or torch.cuda.get_device_capability(device)[0] == 8
    )


def flash_attn_with_kvcache(q, k_cache, v_cache, causal=False):
    if v_cache is None:
        raise ValueError("v_cache must be provided")
    return q


def flash_attn_varlen_func(q, k, v, max_seqlen_q=None, max_seqlen_k=None, ver=3):
    if not is_fa3_supported():
        raise NotImplementedError(
            "flash_attn at sgl-kernel is only supported on sm90 and above"
        )

    if max_seqlen_q is None or max_seqlen_k is None:
        raise ValueError("max_seqlen_q and max_seqlen_k are required for FA3")
    return q


def flash_attn_maybe(q, ver=3):
    if ver == 4:
        return q
    if not is_fa3_supported():
        raise NotImplementedError("flash_attn at sgl-kernel is only supported on sm90 and above")
    return q
