"""Evidence you can trust (issue 15): the deciding step is the decision, on every release,
and every command cites the same one.

CASES: (release, arch, profile, --set flags, setting, effective value, deciding file, line,
step kind, how the line makes the value, the line as it reads in that release). Each line
was read in the release (``pip download sglang==X``) and is checked again here against the
tree the tool analyses; "literal" lines contain the value as a constant, "expr" lines
compute it (or read another named setting), "flag" is the user's flag cited at the field's
declaration.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import shared
from clirun import cli

from sglang_audit.evaluate.values import Event, Guard
from sglang_audit.resolve.pipeline import Request, resolve
from sglang_audit.resolve.provenance import trace
from sglang_audit.result import ROLE_APPLIED, ROLE_DECISION, ChainStep, Setting, UnknownValue

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from evidence_sweep import classify  # noqa: E402

CASES = [
    ('0.4.10', 'sm90', 'deepseek-v3-fp8', ('tp_size=8',), 'quantization', None, 'sglang/srt/server_args.py', 71, 'default', 'literal',
     'quantization: Optional[str] = None'),
    ('0.4.10', 'sm90', 'deepseek-v3-fp8', ('tp_size=8',), 'attention_backend', None, 'sglang/srt/server_args.py', 155, 'default', 'literal',
     'attention_backend: Optional[str] = None'),
    ('0.4.10', 'sm90', 'deepseek-v3-fp8', ('tp_size=8',), 'sampling_backend', 'flashinfer', 'sglang/srt/server_args.py', 370, 'write', 'literal',
     'self.sampling_backend = ('),
    ('0.4.10', 'sm100', 'qwen3-30b-a3b', (), 'quantization', None, 'sglang/srt/server_args.py', 71, 'default', 'literal',
     'quantization: Optional[str] = None'),
    ('0.4.10', 'sm100', 'qwen3-30b-a3b', (), 'attention_backend', None, 'sglang/srt/server_args.py', 155, 'default', 'literal',
     'attention_backend: Optional[str] = None'),
    ('0.4.10', 'sm100', 'qwen3-30b-a3b', (), 'sampling_backend', 'flashinfer', 'sglang/srt/server_args.py', 370, 'write', 'literal',
     'self.sampling_backend = ('),
    ('0.5.5', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8',), 'moe_runner_backend', 'auto', 'sglang/srt/server_args.py', 395, 'default', 'literal',
     'moe_runner_backend: str = "auto"'),
    ('0.5.5', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8',), 'speculative_moe_runner_backend', 'auto', 'sglang/srt/layers/moe/utils.py', 142, 'write', 'expr',
     'SPECULATIVE_MOE_RUNNER_BACKEND = ('),
    ('0.5.5', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8',), 'quantization', None, 'sglang/srt/server_args.py', 248, 'default', 'literal',
     'quantization: Optional[str] = None'),
    ('0.5.5', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8',), 'moe_a2a_backend', 'none', 'sglang/srt/server_args.py', 394, 'default', 'literal',
     'moe_a2a_backend: Literal["none", "deepep", "mooncake"] = "none"'),
    ('0.5.5', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8',), 'attention_backend', 'flashinfer', 'sglang/srt/server_args.py', 1156, 'write', 'literal',
     'self.attention_backend = ('),
    ('0.5.5', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8',), 'sampling_backend', 'flashinfer', 'sglang/srt/server_args.py', 1116, 'write', 'literal',
     'self.sampling_backend = ('),
    ('0.5.5', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'moe_runner_backend', 'auto', 'sglang/srt/server_args.py', 395, 'default', 'literal',
     'moe_runner_backend: str = "auto"'),
    ('0.5.5', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'speculative_moe_runner_backend', 'auto', 'sglang/srt/layers/moe/utils.py', 142, 'write', 'expr',
     'SPECULATIVE_MOE_RUNNER_BACKEND = ('),
    ('0.5.5', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'quantization', 'modelopt', 'sglang/srt/server_args.py', 916, 'write', 'expr',
     'quant_method = ('),
    ('0.5.5', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'moe_a2a_backend', 'none', 'sglang/srt/server_args.py', 394, 'default', 'literal',
     'moe_a2a_backend: Literal["none", "deepep", "mooncake"] = "none"'),
    ('0.5.5', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'attention_backend', 'trtllm_mla', 'sglang/srt/server_args.py', 906, 'write', 'literal',
     'self.attention_backend = "trtllm_mla"'),
    ('0.5.5', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'sampling_backend', 'flashinfer', 'sglang/srt/server_args.py', 1116, 'write', 'literal',
     'self.sampling_backend = ('),
    ('0.5.10', 'sm100', 'deepseek-v3-fp8', ('tp_size=8',), 'moe_runner_backend', 'flashinfer_trtllm', 'sglang/srt/server_args.py', 1650, 'write', 'literal',
     'self.moe_runner_backend = "flashinfer_trtllm"'),
    ('0.5.10', 'sm100', 'deepseek-v3-fp8', ('tp_size=8',), 'speculative_moe_runner_backend', 'auto', 'sglang/srt/server_args.py', 2972, 'write', 'literal',
     'self.speculative_moe_runner_backend = ('),
    ('0.5.10', 'sm100', 'deepseek-v3-fp8', ('tp_size=8',), 'fp4_gemm_runner_backend', 'flashinfer_cutlass', 'sglang/srt/layers/quantization/fp4_utils.py', 76, 'write', 'literal',
     'backend = "flashinfer_cutlass"'),
    ('0.5.10', 'sm100', 'deepseek-v3-fp8', ('tp_size=8',), 'quantization', 'fp8', 'sglang/srt/server_args.py', 1640, 'write', 'expr',
     'self.quantization = quant_method'),
    ('0.5.10', 'sm100', 'deepseek-v3-fp8', ('tp_size=8',), 'moe_a2a_backend', 'none', 'sglang/srt/server_args.py', 519, 'default', 'literal',
     'moe_a2a_backend: Literal['),
    ('0.5.10', 'sm100', 'deepseek-v3-fp8', ('tp_size=8',), 'speculative_moe_a2a_backend', 'none', 'sglang/srt/layers/moe/utils.py', 177, 'write', 'expr',
     'SPECULATIVE_MOE_A2A_BACKEND = ('),
    ('0.5.10', 'sm100', 'deepseek-v3-fp8', ('tp_size=8',), 'fp8_gemm_runner_backend', 'auto', 'sglang/srt/server_args.py', 481, 'default', 'literal',
     'fp8_gemm_runner_backend: str = "auto"'),
    ('0.5.10', 'sm100', 'deepseek-v3-fp8', ('tp_size=8',), 'attention_backend', 'trtllm_mla', 'sglang/srt/server_args.py', 1608, 'write', 'literal',
     'self.attention_backend = "trtllm_mla"'),
    ('0.5.10', 'sm100', 'deepseek-v3-fp8', ('tp_size=8',), 'sampling_backend', 'flashinfer', 'sglang/srt/server_args.py', 2213, 'write', 'literal',
     'self.sampling_backend = ('),
    ('0.5.13', 'sm120', 'deepseek-r1-nvfp4', ('tp_size=8', 'moe_runner_backend=flashinfer_cutlass'), 'moe_runner_backend', 'flashinfer_cutlass', 'sglang/srt/server_args.py', 648, 'flag', 'flag',
     'moe_runner_backend: str = "auto"'),
    ('0.5.13', 'sm120', 'deepseek-r1-nvfp4', ('tp_size=8', 'moe_runner_backend=flashinfer_cutlass'), 'speculative_moe_runner_backend', 'flashinfer_cutlass', 'sglang/srt/arg_groups/speculative_hook.py', 61, 'write', 'expr',
     'server_args.speculative_moe_runner_backend = server_args.moe_runner_backend'),
    ('0.5.13', 'sm120', 'deepseek-r1-nvfp4', ('tp_size=8', 'moe_runner_backend=flashinfer_cutlass'), 'fp4_gemm_runner_backend', 'flashinfer_cutlass', 'sglang/srt/layers/quantization/fp4_utils.py', 160, 'write', 'literal',
     'backend = "flashinfer_cutlass"'),
    ('0.5.13', 'sm120', 'deepseek-r1-nvfp4', ('tp_size=8', 'moe_runner_backend=flashinfer_cutlass'), 'quantization', None, 'sglang/srt/server_args.py', 412, 'default', 'literal',
     'quantization: Optional[str] = None'),
    ('0.5.13', 'sm120', 'deepseek-r1-nvfp4', ('tp_size=8', 'moe_runner_backend=flashinfer_cutlass'), 'moe_a2a_backend', 'none', 'sglang/srt/server_args.py', 638, 'default', 'literal',
     'moe_a2a_backend: Literal['),
    ('0.5.13', 'sm120', 'deepseek-r1-nvfp4', ('tp_size=8', 'moe_runner_backend=flashinfer_cutlass'), 'speculative_moe_a2a_backend', 'none', 'sglang/srt/layers/moe/utils.py', 282, 'write', 'expr',
     'SPECULATIVE_MOE_A2A_BACKEND = ('),
    ('0.5.13', 'sm120', 'deepseek-r1-nvfp4', ('tp_size=8', 'moe_runner_backend=flashinfer_cutlass'), 'fp8_gemm_runner_backend', 'triton', 'sglang/srt/layers/quantization/fp8_utils.py', 474, 'write', 'literal',
     'backend = "triton"'),
    ('0.5.13', 'sm120', 'deepseek-r1-nvfp4', ('tp_size=8', 'moe_runner_backend=flashinfer_cutlass'), 'attention_backend', 'triton', 'sglang/srt/server_args.py', 2830, 'return', 'literal',
     'return "triton"'),
    ('0.5.13', 'sm120', 'deepseek-r1-nvfp4', ('tp_size=8', 'moe_runner_backend=flashinfer_cutlass'), 'sampling_backend', 'flashinfer', 'sglang/srt/server_args.py', 2761, 'write', 'literal',
     'self.sampling_backend = ('),
    ('0.5.13', 'sm90', 'gpt-oss-120b', (), 'moe_runner_backend', 'auto', 'sglang/srt/server_args.py', 648, 'default', 'literal',
     'moe_runner_backend: str = "auto"'),
    ('0.5.13', 'sm90', 'gpt-oss-120b', (), 'speculative_moe_runner_backend', 'auto', 'sglang/srt/arg_groups/speculative_hook.py', 61, 'write', 'expr',
     'server_args.speculative_moe_runner_backend = server_args.moe_runner_backend'),
    ('0.5.13', 'sm90', 'gpt-oss-120b', (), 'fp4_gemm_runner_backend', 'marlin', 'sglang/srt/layers/quantization/fp4_utils.py', 158, 'write', 'literal',
     'backend = "marlin"'),
    ('0.5.13', 'sm90', 'gpt-oss-120b', (), 'quantization', None, 'sglang/srt/server_args.py', 412, 'default', 'literal',
     'quantization: Optional[str] = None'),
    ('0.5.13', 'sm90', 'gpt-oss-120b', (), 'moe_a2a_backend', 'none', 'sglang/srt/server_args.py', 638, 'default', 'literal',
     'moe_a2a_backend: Literal['),
    ('0.5.13', 'sm90', 'gpt-oss-120b', (), 'speculative_moe_a2a_backend', 'none', 'sglang/srt/layers/moe/utils.py', 282, 'write', 'expr',
     'SPECULATIVE_MOE_A2A_BACKEND = ('),
    ('0.5.13', 'sm90', 'gpt-oss-120b', (), 'fp8_gemm_runner_backend', 'auto', 'sglang/srt/server_args.py', 589, 'default', 'literal',
     'fp8_gemm_runner_backend: str = "auto"'),
    ('0.5.13', 'sm90', 'gpt-oss-120b', (), 'attention_backend', 'fa3', 'sglang/srt/server_args.py', 2129, 'write', 'literal',
     'self.attention_backend = "fa3"'),
    ('0.5.13', 'sm90', 'gpt-oss-120b', (), 'sampling_backend', 'flashinfer', 'sglang/srt/server_args.py', 2761, 'write', 'literal',
     'self.sampling_backend = ('),
    ('0.5.15', 'sm100', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'moe_runner_backend', 'flashinfer_trtllm', 'sglang/srt/arg_groups/overrides.py', 860, 'declare', 'literal',
     'overrides["moe_runner_backend"] = "flashinfer_trtllm"'),
    ('0.5.15', 'sm100', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'speculative_moe_runner_backend', 'flashinfer_trtllm', 'sglang/srt/arg_groups/overrides.py', 1957, 'declare', 'expr',
     'return {"speculative_moe_runner_backend": view.moe_runner_backend}'),
    ('0.5.15', 'sm100', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'fp4_gemm_runner_backend', 'flashinfer_cutedsl', 'sglang/srt/layers/quantization/fp4_utils.py', 156, 'write', 'literal',
     'backend = "flashinfer_cutedsl"'),
    ('0.5.15', 'sm100', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'quantization', 'modelopt_fp4', 'sglang/srt/arg_groups/overrides.py', 853, 'declare', 'expr',
     'overrides["quantization"] = quant_method'),
    ('0.5.15', 'sm100', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'moe_a2a_backend', 'none', 'sglang/srt/server_args.py', 1773, 'default', 'literal',
     'moe_a2a_backend: A['),
    ('0.5.15', 'sm100', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'speculative_moe_a2a_backend', 'none', 'sglang/srt/layers/moe/utils.py', 281, 'write', 'expr',
     'SPECULATIVE_MOE_A2A_BACKEND = ('),
    ('0.5.15', 'sm100', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'fp8_gemm_runner_backend', 'auto', 'sglang/srt/server_args.py', 1337, 'default', 'literal',
     'fp8_gemm_runner_backend: A['),
    ('0.5.15', 'sm100', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'attention_backend', 'trtllm_mha', 'sglang/srt/arg_groups/overrides.py', 812, 'write', 'literal',
     'sm100_default_attn_backend = "trtllm_mha"'),
    ('0.5.15', 'sm100', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'sampling_backend', 'flashinfer', 'sglang/srt/arg_groups/overrides.py', 1417, 'declare', 'literal',
     '"flashinfer" if is_flashinfer_available() else "pytorch"'),
    ('0.5.15', 'sm120', 'deepseek-v3-fp8', ('tp_size=8',), 'moe_runner_backend', 'auto', 'sglang/srt/server_args.py', 1790, 'default', 'literal',
     'moe_runner_backend: A['),
    ('0.5.15', 'sm120', 'deepseek-v3-fp8', ('tp_size=8',), 'speculative_moe_runner_backend', 'auto', 'sglang/srt/arg_groups/overrides.py', 1957, 'declare', 'expr',
     'return {"speculative_moe_runner_backend": view.moe_runner_backend}'),
    ('0.5.15', 'sm120', 'deepseek-v3-fp8', ('tp_size=8',), 'fp4_gemm_runner_backend', 'flashinfer_cutlass', 'sglang/srt/layers/quantization/fp4_utils.py', 160, 'write', 'literal',
     'backend = "flashinfer_cutlass"'),
    ('0.5.15', 'sm120', 'deepseek-v3-fp8', ('tp_size=8',), 'quantization', None, 'sglang/srt/server_args.py', 538, 'default', 'literal',
     'quantization: A['),
    ('0.5.15', 'sm120', 'deepseek-v3-fp8', ('tp_size=8',), 'moe_a2a_backend', 'none', 'sglang/srt/server_args.py', 1773, 'default', 'literal',
     'moe_a2a_backend: A['),
    ('0.5.15', 'sm120', 'deepseek-v3-fp8', ('tp_size=8',), 'speculative_moe_a2a_backend', 'none', 'sglang/srt/layers/moe/utils.py', 281, 'write', 'expr',
     'SPECULATIVE_MOE_A2A_BACKEND = ('),
    ('0.5.15', 'sm120', 'deepseek-v3-fp8', ('tp_size=8',), 'fp8_gemm_runner_backend', 'triton', 'sglang/srt/layers/quantization/fp8_utils.py', 548, 'write', 'literal',
     'backend = "triton"'),
    ('0.5.15', 'sm120', 'deepseek-v3-fp8', ('tp_size=8',), 'attention_backend', 'triton', 'sglang/srt/server_args.py', 4378, 'return', 'literal',
     'return "triton"'),
    ('0.5.15', 'sm120', 'deepseek-v3-fp8', ('tp_size=8',), 'sampling_backend', 'flashinfer', 'sglang/srt/arg_groups/overrides.py', 1417, 'declare', 'literal',
     '"flashinfer" if is_flashinfer_available() else "pytorch"'),
    ('0.5.19', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'moe_runner_backend', 'flashinfer_cutlass', 'sglang/srt/arg_groups/overrides.py', 1513, 'write', 'literal',
     'moe_runner_backend = "flashinfer_cutlass"'),
    ('0.5.19', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'speculative_moe_runner_backend', 'flashinfer_cutlass', 'sglang/srt/arg_groups/overrides.py', 1630, 'declare', 'expr',
     'return {"speculative_moe_runner_backend": view.moe_runner_backend}'),
    ('0.5.19', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'fp4_gemm_runner_backend', 'flashinfer_cutlass', 'sglang/srt/layers/quantization/fp4_utils.py', 156, 'write', 'literal',
     'backend = "flashinfer_cutlass"'),
    ('0.5.19', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'quantization', 'modelopt_fp4', 'sglang/srt/server_args.py', 570, 'flag', 'flag',
     'quantization: A['),
    ('0.5.19', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'moe_a2a_backend', 'none', 'sglang/srt/server_args.py', 2366, 'default', 'literal',
     'moe_a2a_backend: A['),
    ('0.5.19', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'speculative_moe_a2a_backend', 'none', 'sglang/srt/layers/moe/utils.py', 408, 'write', 'expr',
     'moe.speculative_a2a_backend = ('),
    ('0.5.19', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'fp8_gemm_runner_backend', 'cutlass', 'sglang/srt/layers/quantization/fp8_utils.py', 805, 'write', 'literal',
     'backend = "cutlass"'),
    ('0.5.19', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'attention_backend', 'flashinfer', 'sglang/srt/arg_groups/model_override_base.py', 328, 'return', 'literal',
     'return "flashinfer"'),
    ('0.5.19', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'sampling_backend', 'flashinfer', 'sglang/srt/arg_groups/overrides.py', 1024, 'declare', 'literal',
     '"flashinfer" if get_platform().has_flashinfer else "pytorch"'),
    ('0.5.19', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'moe_runner_backend', 'flashinfer_trtllm', 'sglang/srt/arg_groups/overrides.py', 835, 'declare', 'literal',
     'overrides["moe_runner_backend"] = "flashinfer_trtllm"'),
    ('0.5.19', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'speculative_moe_runner_backend', 'flashinfer_trtllm', 'sglang/srt/arg_groups/overrides.py', 1630, 'declare', 'expr',
     'return {"speculative_moe_runner_backend": view.moe_runner_backend}'),
    ('0.5.19', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'fp4_gemm_runner_backend', 'flashinfer_cutedsl', 'sglang/srt/layers/quantization/fp4_utils.py', 152, 'write', 'literal',
     'backend = "flashinfer_cutedsl"'),
    ('0.5.19', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'quantization', 'modelopt_fp4', 'sglang/srt/arg_groups/overrides.py', 821, 'declare', 'expr',
     'overrides["quantization"] = quantization = quant_method'),
    ('0.5.19', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'moe_a2a_backend', 'none', 'sglang/srt/server_args.py', 2366, 'default', 'literal',
     'moe_a2a_backend: A['),
    ('0.5.19', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'speculative_moe_a2a_backend', 'none', 'sglang/srt/layers/moe/utils.py', 408, 'write', 'expr',
     'moe.speculative_a2a_backend = ('),
    ('0.5.19', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'fp8_gemm_runner_backend', 'auto', 'sglang/srt/server_args.py', 1729, 'default', 'literal',
     'fp8_gemm_runner_backend: A['),
    ('0.5.19', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'attention_backend', 'trtllm_mla', 'sglang/srt/arg_groups/model_overrides/deepseek_v2.py', 111, 'declare', 'literal',
     'overrides["attention_backend"] = "trtllm_mla"'),
    ('0.5.19', 'sm100', 'deepseek-r1-nvfp4', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'sampling_backend', 'flashinfer', 'sglang/srt/arg_groups/overrides.py', 1024, 'declare', 'literal',
     '"flashinfer" if get_platform().has_flashinfer else "pytorch"'),
    ('0.5.23', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'moe_runner_backend', 'flashinfer_cutlass', 'sglang/srt/arg_groups/overrides.py', 1518, 'write', 'literal',
     'moe_runner_backend = "flashinfer_cutlass"'),
    ('0.5.23', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'speculative_moe_runner_backend', 'flashinfer_cutlass', 'sglang/srt/arg_groups/overrides.py', 1650, 'write', 'expr',
     'default = view.moe_runner_backend'),
    ('0.5.23', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'fp4_gemm_runner_backend', 'flashinfer_cutlass', 'sglang/srt/layers/quantization/fp4_utils.py', 160, 'write', 'literal',
     'backend = "flashinfer_cutlass"'),
    ('0.5.23', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'quantization', 'modelopt_fp4', 'sglang/srt/arg_groups/fields/model.py', 177, 'flag', 'flag',
     'quantization: A['),
    ('0.5.23', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'moe_a2a_backend', 'none', 'sglang/srt/arg_groups/fields/exec_.py', 836, 'default', 'literal',
     'moe_a2a_backend: A['),
    ('0.5.23', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'speculative_moe_a2a_backend', 'none', 'sglang/srt/layers/moe/utils.py', 498, 'write', 'expr',
     'moe.speculative_a2a_backend = ('),
    ('0.5.23', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'fp8_gemm_runner_backend', 'cutlass', 'sglang/srt/layers/quantization/fp8_utils.py', 1213, 'write', 'literal',
     'backend = "cutlass"'),
    ('0.5.23', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'attention_backend', 'flashinfer', 'sglang/srt/arg_groups/model_override_base.py', 333, 'return', 'literal',
     'return "flashinfer"'),
    ('0.5.23', 'sm120', 'qwen3.5-397b-a17b-nvfp4', ('tp_size=8', 'quantization=modelopt_fp4'), 'sampling_backend', 'flashinfer', 'sglang/srt/arg_groups/overrides.py', 1023, 'declare', 'literal',
     '"flashinfer" if get_platform().has_flashinfer else "pytorch"'),
    ('0.5.23', 'sm100', 'deepseek-v3-fp8', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'moe_runner_backend', 'flashinfer_trtllm', 'sglang/srt/arg_groups/overrides.py', 823, 'declare', 'literal',
     'overrides["moe_runner_backend"] = "flashinfer_trtllm"'),
    ('0.5.23', 'sm100', 'deepseek-v3-fp8', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'speculative_moe_runner_backend', 'flashinfer_trtllm', 'sglang/srt/arg_groups/overrides.py', 1650, 'write', 'expr',
     'default = view.moe_runner_backend'),
    ('0.5.23', 'sm100', 'deepseek-v3-fp8', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'fp4_gemm_runner_backend', 'flashinfer_cutedsl', 'sglang/srt/layers/quantization/fp4_utils.py', 156, 'write', 'literal',
     'backend = "flashinfer_cutedsl"'),
    ('0.5.23', 'sm100', 'deepseek-v3-fp8', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'quantization', 'fp8', 'sglang/srt/arg_groups/overrides.py', 809, 'declare', 'expr',
     'overrides["quantization"] = quantization = quant_method'),
    ('0.5.23', 'sm100', 'deepseek-v3-fp8', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'moe_a2a_backend', 'none', 'sglang/srt/arg_groups/fields/exec_.py', 836, 'default', 'literal',
     'moe_a2a_backend: A['),
    ('0.5.23', 'sm100', 'deepseek-v3-fp8', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'speculative_moe_a2a_backend', 'none', 'sglang/srt/layers/moe/utils.py', 498, 'write', 'expr',
     'moe.speculative_a2a_backend = ('),
    ('0.5.23', 'sm100', 'deepseek-v3-fp8', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'fp8_gemm_runner_backend', 'auto', 'sglang/srt/arg_groups/fields/exec_.py', 273, 'default', 'literal',
     'fp8_gemm_runner_backend: A['),
    ('0.5.23', 'sm100', 'deepseek-v3-fp8', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'attention_backend', 'trtllm_mla', 'sglang/srt/arg_groups/model_overrides/deepseek_v2.py', 185, 'declare', 'literal',
     'overrides["attention_backend"] = "trtllm_mla"'),
    ('0.5.23', 'sm100', 'deepseek-v3-fp8', ('tp_size=8', 'speculative_algorithm=NEXTN', 'speculative_num_steps=3', 'speculative_eagle_topk=1', 'speculative_num_draft_tokens=4'), 'sampling_backend', 'flashinfer', 'sglang/srt/arg_groups/overrides.py', 1023, 'declare', 'literal',
     '"flashinfer" if get_platform().has_flashinfer else "pytorch"'),
]

SETTINGS = {c[4] for c in CASES}
_RESOLVED: dict[tuple, object] = {}


def _resolution(release, rel: str, arch: str, model: str, sets: tuple[str, ...]):
    key = (rel, arch, model, sets)
    if key not in _RESOLVED:
        tree = release(rel)
        _RESOLVED[key] = shared.resolve(Request(source=str(tree.package_dir), arch=arch, model=model, sets=list(sets)))
    return _RESOLVED[key]


def test_the_suite_covers_every_structure():
    releases = {c[0] for c in CASES}
    assert len(CASES) >= 40
    assert {"0.4.10", "0.5.5", "0.5.10", "0.5.13", "0.5.15", "0.5.19", "0.5.23"} <= releases
    # the issue's case is in it
    assert ("0.5.23", "sm120", "qwen3.5-397b-a17b-nvfp4", ("tp_size=8", "quantization=modelopt_fp4"), "moe_runner_backend",
            "flashinfer_cutlass", "sglang/srt/arg_groups/overrides.py", 1518, "write", "literal",
            'moe_runner_backend = "flashinfer_cutlass"') in CASES


@pytest.mark.real_release
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{'+'.join(c[3]) or 'none'}-{c[4]}")
def test_deciding_step_is_the_line_that_produces_the_value(release, case):
    rel, arch, model, sets, name, value, file, line, kind, how, quoted = case
    res = _resolution(release, rel, arch, model, sets)
    s = res.settings[name]
    assert s.effective == value
    d = s.deciding
    assert d is not None, s.chain
    assert (d.file, d.line, d.kind) == (file, line, kind), [x.to_json() for x in s.chain]
    # the quoted line is that release's line
    root = Path(release(rel).package_dir).parent
    assert (root / file).read_text(encoding="utf-8").splitlines()[line - 1].strip() == quoted
    # and it makes the value there: a constant equal to it, or an expression computing it
    shown = d.value if d.kind == "default" else value
    assert classify(root, file, line, shown, d.kind, name, SETTINGS | set(res.settings)) == how
    # one decision per setting; no step without a line
    assert [x.role for x in s.chain].count(ROLE_DECISION) == 1
    assert all(x.line > 0 for x in s.chain)


@pytest.mark.real_release
def test_0523_issue_case_resolve_explain_and_check_cite_the_sm120_branch(release):
    tree = release("0.5.23")
    args = ("-s", tree.package_dir, "-a", "sm120", "-m", "qwen3.5-397b-a17b-nvfp4", "--set", "tp_size=8",
            "--set", "quantization=modelopt_fp4")
    code, out, _err = cli("resolve", *args, "--format", "json")
    data = json.loads(out)
    moe = data["settings"]["moe_runner_backend"]
    assert moe["deciding"]["file"] == "sglang/srt/arg_groups/overrides.py" and moe["deciding"]["line"] == 1518
    assert moe["deciding"]["guard"].startswith('( moe_runner_backend == "auto" and view.quantization == "modelopt_fp4"')
    # the override applier and the runtime reader are "applied at", never the decision
    applied = {(s["file"], s["line"]) for s in moe["chain"] if s["role"] == ROLE_APPLIED}
    assert ("sglang/srt/arg_groups/overrides.py", 187) in applied
    assert ("sglang/srt/layers/moe/utils.py", 492) in applied
    # no line-0 step anywhere; the user's flag is "set by you", cited at its declaration
    assert all(s["line"] > 0 for st in data["settings"].values() for s in st["chain"])
    q = data["settings"]["quantization"]["deciding"]
    assert q["guard"] == "set by you: --quantization modelopt_fp4" and q["file"] == "sglang/srt/arg_groups/fields/model.py"
    code, out, _err = cli("resolve", *args)
    assert "decided: sglang/srt/arg_groups/overrides.py:1518 if ( moe_runner_backend" in out
    # the headline too, not the override applier that copied the value last
    head = next(line for line in out.splitlines() if line.startswith("moe_runner_backend "))
    assert "decided at sglang/srt/arg_groups/overrides.py:1518" in head and "overrides.py:187" not in head
    assert ":0 " not in out
    # check cites the same line for the same setting (forced trtllm makes check speak)
    code, out, _err = cli("check", *args, "--set", "moe_runner_backend=flashinfer_trtllm", "--format", "json")
    found = [f for f in json.loads(out)["findings"] if f["rule"] == "SGA201" and f["setting"] == "moe_runner_backend"]
    assert found and found[0]["deciding"]["kind"] == "flag" and found[0]["deciding"]["line"] > 0


@pytest.mark.real_release
@pytest.mark.parametrize(("field", "expected"), [
    ("fp4_gemm_runner_backend", {"flashinfer_trtllm": "SGA103"}),
    ("moe_runner_backend", {"flashinfer_trtllm": "SGA201", "flashinfer_cutedsl": "SGA202"}),
])
def test_explain_and_check_agree_on_sm120_known_bad_choices(release, field, expected):
    from sglang_audit.analyses.explain import OUTCOME_KNOWN_BAD, explain
    from sglang_audit.render.explain import render_text
    from sglang_audit.rules.knownbad import check_resolution, load_rules

    release("0.5.23")
    sets = ["tp_size=8", "quantization=modelopt_fp4"]
    # the release as the CLI names it: the moe_runner_backend explanation is the golden's
    # (explain-0.5.23-sm120-moe.txt), whose forced resolutions the result cache then shares
    req = Request(source="sglang==0.5.23", arch="sm120", model="qwen3.5-397b-a17b-nvfp4", sets=sets)
    exp = explain(req, field)
    text = render_text(exp)
    for choice, rule in expected.items():
        forced = {c.choice: c for c in exp.choices}[choice]
        assert forced.outcome == OUTCOME_KNOWN_BAD
        checked = check_resolution(resolve(Request(**{**req.__dict__, "sets": [*sets, f"{field}={choice}"]})), load_rules())
        from_check = {str(f.rule_id) for f in checked.findings if f.setting == field and f.severity in ("error", "warning")}
        assert rule in from_check
        assert {r for r, _sev, _t in forced.known_bad} == from_check
        assert f"{choice}" in text and f"accepted by SGLang, but known-bad: {rule}" in text


@pytest.mark.real_release
def test_layer_decided_setting_is_not_resolved_anywhere(release):
    tree = release("0.5.23")
    # NVFP4 MoE with moe_runner_backend auto: the layers built with it fail (SGA210's
    # AttributeError), so the setting is unsupported, not resolved: exit 1
    args = ("-s", tree.package_dir, "-a", "sm120", "-m", "qwen3.5-397b-a17b-nvfp4", "--set", "tp_size=8",
            "--flashinfer-source", "none")
    code, out, _err = cli("resolve", *args, "--format", "json")
    moe = json.loads(out)["settings"]["moe_runner_backend"]
    assert moe["config"] == "auto" and moe["layer"]["status"] == "unsupported" and moe["status"] == "unsupported"
    assert code == 1
    code, out, _err = cli("resolve", *args)
    first = out.split("moe_runner_backend", 1)[1].splitlines()[0]
    assert "(unsupported" in first and "(resolved" not in first
    # an explicit flashinfer_trtllm: the layers are built and reach TRT-LLM-gen's MoE kernel
    # (abstract tensors, issue 41; before them the weight preparation stopped, unknown). Whether
    # that kernel exists on SM12x is the kernel library's, not SGLang's Python: `check` says it
    # (SGA201, error), the setting is not called unsupported on its layers
    code, out, _err = cli("resolve", *args, "--set", "moe_runner_backend=flashinfer_trtllm", "--format", "json")
    moe = json.loads(out)["settings"]["moe_runner_backend"]
    assert moe["layer"]["status"] == "resolved" and "trtllm_fp4_block_scale_moe" in moe["layer"]["value"]
    code, out, _err = cli("check", *args, "--set", "moe_runner_backend=flashinfer_trtllm")
    assert code == 1 and "ERROR   SGA201 moe-trtllm-sm12x" in out


@pytest.mark.real_release
def test_files_read_names_every_source_file_with_its_hash(release):
    tree = release("0.5.10")
    code, out, _err = cli("resolve", "-s", tree.package_dir, "-a", "sm120", "-m", "qwen3-30b-a3b", "--format", "json")
    files = json.loads(out)["files_read"]
    paths = [f["path"] for f in files]
    assert "sglang/srt/server_args.py" in paths and "sglang/srt/layers/moe/utils.py" in paths
    assert paths == sorted(set(paths))
    root = Path(tree.package_dir).parent
    for f in files[:20]:
        assert hashlib.sha256((root / f["path"]).read_bytes()).hexdigest() == f["sha256"]


# ---- the provenance mechanism on synthetic events (no release) ------------------------------
def _ev(seq, value, text, form, sources=(), kind="write", target="x", guards=()):
    return Event(seq, kind, target, value, "sglang/srt/m.py", seq, text, tuple(guards), tuple(sources), form)


def test_trace_follows_copies_to_the_guarded_literal():
    g = Guard("sglang/srt/m.py", 9, 'b == "auto"', True)
    produced = _ev(10, "cutlass", 'b = "cutlass"', "literal", guards=[g])
    declared = _ev(11, "cutlass", "moe=b", "copy", [produced], kind="declare")
    applied = _ev(12, "cutlass", "return", "copy", [declared], kind="return")
    p, copies = trace(applied, "cutlass")
    assert p is produced and copies == [applied, declared]


def test_trace_never_takes_a_generic_copy_for_the_producer():
    lost = _ev(5, "cutlass", "return", "copy", kind="return")  # declared[field]: no source
    p, copies = trace(lost, "cutlass")
    assert p is None and copies == [lost]
    getattr_copy = _ev(6, "cutlass", "v = getattr(obj, name)", "call")
    assert trace(getattr_copy, "cutlass")[0] is None
    boundary = _ev(7, "fp8", "q = get_quantization_config(hf_config)", "call")
    assert trace(boundary, "fp8")[0] is boundary


def test_setting_deciding_and_effective_are_one_definition():
    chain = (
        ChainStep("f.py", 3, "default", "auto", "x: str = 'auto'", "config", "default", "origin"),
        ChainStep("f.py", 9, "sm120", "cutlass", 'x = "cutlass"', "runtime", "write", ROLE_DECISION),
        ChainStep("g.py", 2, "", "cutlass", "X = x", "runtime", "write", ROLE_APPLIED),
    )
    s = Setting("x", "auto", "cutlass", "resolved", chain)
    assert s.effective == "cutlass" and s.deciding is chain[1] and s.applied == (chain[2],)
    assert s.to_json()["deciding"]["line"] == 9
    unknown = Setting("x", "auto", UnknownValue("differs"), "unknown", chain)
    assert unknown.deciding is None


def test_the_text_headline_cites_the_producing_step_not_the_last_copy():
    # 0.5.20+ ends every value's chain in resolution_result's return: the headline named that
    # copy ("decided at overrides.py:190") where the chain's decision is the field's default
    from dataclasses import replace
    from types import SimpleNamespace

    from sglang_audit.render.text import _origin

    default = ChainStep("fields.py", 884, "default", "auto", "x: str = 'auto'", "config", "default", "origin")
    copy = ChainStep("overrides.py", 190, "raw is not None", "auto", "return ...", "config", "return", ROLE_APPLIED)
    s = Setting("x", "auto", None, "resolved", (default, copy))
    assert s.produced("config") is default and s.produced("runtime") is None
    assert _origin("x", s, SimpleNamespace(flags={})) == "default"
    flag = ChainStep("spec.py", 31, "set by you: --x NEXTN", "NEXTN", "", "config", "flag", "origin")
    hook = ChainStep("hook.py", 116, 'x == "NEXTN"', "EAGLE", "return 'EAGLE'", "config", "return", ROLE_DECISION)
    s = Setting("x", "EAGLE", None, "resolved", (flag, hook, replace(copy, value="EAGLE", line=187)))
    assert _origin("x", s, SimpleNamespace(flags={"x": "NEXTN"})) == "rewritten from NEXTN at hook.py:116"
    run = ChainStep("fp4.py", 160, 'backend == "auto"', "cutlass", "", "runtime", "write", ROLE_DECISION)
    run_copy = ChainStep("fp4.py", 162, "", "cutlass", "", "runtime", "write", ROLE_APPLIED)
    s = Setting("x", "auto", "cutlass", "resolved", (default, copy, run, run_copy))
    assert _origin("x", s, SimpleNamespace(flags={})) == "default; runtime decided at fp4.py:160"


def test_a_candidates_long_path_shows_its_site_and_nearest_conditions_and_all_with_verbose():
    # a speculative worker's candidate can carry twenty branch conditions: the default text
    # keeps the site and the two nearest the outcome, says how many it left out, -v lists all
    from sglang_audit.render.text import layer_lines
    from sglang_audit.result import Candidate, LayerValue

    when = ("at sglang/x.py:582", *(f"sglang/y.py:{i} cond{i}" for i in range(1, 8)))
    v = LayerValue("unknown", None, reason="runtime state", stage="attention",
                   candidates=(Candidate("unsupported: ValueError: no", when),))
    short = "\n".join(layer_lines(v))
    assert "(when at sglang/x.py:582; … 5 earlier conditions (-v lists them); sglang/y.py:6 cond6; sglang/y.py:7 cond7)" in short
    assert "cond1" not in short
    assert "; ".join(when) in "\n".join(layer_lines(v, verbose=True))
    few = LayerValue("unknown", None, reason="r", stage="attention", candidates=(Candidate("X", when[:4]),))
    assert "; ".join(when[:4]) in "\n".join(layer_lines(few))
