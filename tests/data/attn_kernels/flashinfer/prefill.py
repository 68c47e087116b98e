# imitates flashinfer/prefill.py (0.7.2 shape): a wrapper whose constructor keeps the backend SGLang
# passes, whose plan() replaces "auto" by the dispatcher's answer and builds the family's module
from .jit.attention import gen_batch_prefill_module, gen_fmha_cutlass_sm100a_module
from .utils import determine_attention_backend, is_sm100a_supported


def get_fmha_module(dtype_q, dtype_kv, device):
    if is_sm100a_supported(device):
        return gen_fmha_cutlass_sm100a_module(dtype_q, dtype_kv)
    else:
        raise ValueError("CUTLASS FMHA requires SM100a (B200/GB200). Use backend='fa2' instead.")


def get_batch_prefill_module(backend, dtype_q, dtype_kv):
    return gen_batch_prefill_module(backend, dtype_q, dtype_kv)


class BatchPrefillWithRaggedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout="NHD", backend="auto"):
        self.device = float_workspace_buffer.device
        self._requested_backend = backend
        self._backend = backend

    def plan(self, qo_indptr, kv_indptr, q_data_type, kv_data_type, pos_encoding_mode=0, custom_mask=None):
        if self._requested_backend == "auto":
            self._backend = determine_attention_backend(
                self.device, pos_encoding_mode, False, custom_mask is not None, q_data_type, kv_data_type
            )
        if self._backend == "cutlass":
            self._cached_module = get_fmha_module(q_data_type, kv_data_type, self.device)
        else:
            self._cached_module = get_batch_prefill_module(self._backend, q_data_type, kv_data_type)
