# imitates flashinfer/jit/attention/modules.py: the JIT specs and the archs they compile for
def gen_jit_spec(name, sources, supported_major_versions=None):
    return name


def gen_fmha_cutlass_sm100a_module(dtype_q, dtype_kv):
    return gen_jit_spec("fmha_cutlass_sm100a", [], supported_major_versions=[10, 11])


def gen_batch_prefill_module(backend, dtype_q, dtype_kv):
    return gen_jit_spec(f"batch_prefill_{backend}", [])
