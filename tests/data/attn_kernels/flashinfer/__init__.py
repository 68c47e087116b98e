# imitates flashinfer/__init__.py: re-exports the wrappers (never run by the tool)
from .prefill import BatchPrefillWithRaggedKVCacheWrapper as BatchPrefillWithRaggedKVCacheWrapper
