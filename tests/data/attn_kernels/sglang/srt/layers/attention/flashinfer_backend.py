# imitates sglang/srt/layers/attention/flashinfer_backend.py: the wrappers are imported at module
# level and built in the constructor (what backend= they get is the attention stage's evaluation)
from flashinfer import BatchPrefillWithRaggedKVCacheWrapper


class FlashInferAttnBackend:
    def __init__(self, model_runner):
        self.prefill_wrapper_ragged = BatchPrefillWithRaggedKVCacheWrapper(model_runner.workspace, "NHD", backend="auto")
