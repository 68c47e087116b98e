# imitates the argument guards of an sgl-kernel MLA decode wrapper: the 0.1.x-era
# cutlass_mla_decode's `assert H == 128` (sglang#6096: DeepSeek-V3 at tp 8 has 16 heads per
# rank), a page-size condition on an FP8 KV cache, and a head-dim check on the query's shape
import torch


def cutlass_mla_decode(q_nope, kv_cache, seq_lens, num_heads=128, page_size=1, kv_dtype=None):
    if kv_dtype == torch.float8_e4m3fn and page_size != 64:
        raise ValueError(f"an FP8 KV cache needs page_size 64, got {page_size}")
    assert num_heads == 128, f"H must be 128, got {num_heads}"
    B, H, D = q_nope.shape
    if D != 576:
        raise ValueError(f"head dim must be 576, got {D}")
    return q_nope
