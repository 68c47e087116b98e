"""Abstract tensors (issue 41, world/overlays/tensors.py): shape, dtype and device without
data; SGLang's parameter classes (imitated below, the shape of sglang/srt/layers/parameter.py)
run as analysed code on them; reads of values stay unknown with a reason."""

from __future__ import annotations

from typing import Any

from sglang_audit.evaluate.values import Unknown
from sglang_audit.resolve.adhoc import evaluate_function

# the shape of sglang/srt/layers/parameter.py (BasevLLMParameter.__new__ through super())
PARAMETERS = """
import torch
from torch.nn import Parameter

class BasevLLMParameter(Parameter):
    def __new__(cls, data, **kwargs):
        return super().__new__(cls, data=data, requires_grad=False)

    def __init__(self, data, weight_loader):
        self._weight_loader = weight_loader

    @property
    def weight_loader(self):
        return self._weight_loader

class _ColumnvLLMParameter(BasevLLMParameter):
    def __init__(self, output_dim, **kwargs):
        self._output_dim = output_dim
        super().__init__(**kwargs)

class ModelWeightParameter(_ColumnvLLMParameter):
    def __init__(self, input_dim, **kwargs):
        self._input_dim = input_dim
        super().__init__(**kwargs)
"""


def _value(body: str) -> Any:
    outcome = evaluate_function(PARAMETERS + body, "f", [])
    assert outcome.kind == "value", outcome
    return outcome.value


def test_sglang_parameter_classes_run_on_abstract_tensors_and_keep_shape_and_dtype() -> None:
    # the shape of flashinfer_trtllm.py's FP4 weight alignment: size(-2), new_zeros, a write
    # into a slice (before issue 41: "item assignment with an unknown key (... size of
    # ModelWeightParameter may come from torch.nn.Parameter)")
    got = _value("""
def f():
    w2 = ModelWeightParameter(data=torch.empty(8, 256, 64, dtype=torch.uint8), input_dim=2, output_dim=1, weight_loader=None)
    num_experts, hidden_size, intermediate_packed = w2.shape
    padded = w2.new_zeros((num_experts, w2.size(-2), intermediate_packed * 2))
    padded[:, :, :intermediate_packed] = w2
    return (w2.size(-2), padded.shape, padded.dtype, w2.weight_loader, w2._input_dim, isinstance(w2, Parameter),
            w2.data.shape, w2.numel(), w2.dim(), w2.requires_grad)
""")
    assert got[:2] == (256, (8, 256, 128)) and got[2].path == "torch.uint8"
    assert got[3:] == (None, 2, True, (8, 256, 64), 8 * 256 * 64, 3, False)


def test_views_casts_permutes_and_concatenations_follow_torchs_shape_rules() -> None:
    got = _value("""
def f():
    w = torch.nn.Parameter(torch.empty(4, 32, 16, dtype=torch.uint8), requires_grad=False)
    v = w.view(torch.float8_e4m3fn)           # same item size: same shape
    b = w.view(torch.bfloat16)                # the last dim halves
    r = w.reshape(-1, 16).t().contiguous()
    p = w.permute(0, 2, 1)
    c = torch.cat([w.data, w.data[:, :8]], dim=1)
    s = torch.stack([w, w], dim=0)
    x = w.transpose(1, 2).unsqueeze(0).to(torch.float32)
    return (v.dtype, b.shape, r.shape, p.shape, c.shape, s.shape, x.shape, x.dtype, w[0].shape, w[..., 0].shape,
            isinstance(c, torch.Tensor), isinstance(c, Parameter), isinstance(w, torch.Tensor))
""")
    assert got[-3:] == (True, False, True)
    got = (got[0].path, *got[1:7], got[7].path, *got[8:-3])
    assert got == ("torch.float8_e4m3fn", (4, 32, 8), (16, 128), (4, 16, 32), (4, 40, 16), (2, 4, 32, 16),
                   (1, 4, 16, 32), "torch.float32", (32, 16), (4, 32))


def test_unknown_dims_stay_unknown_while_dtype_and_known_dims_are_kept() -> None:
    got = _value("""
def f():
    t = torch.empty(torch.distributed.get_world_size(), 128, dtype=torch.float8_e4m3fn)
    return t.shape[1], t.dtype, t.shape[0], t.numel()
""")
    assert got[0] == 128 and got[1].path == "torch.float8_e4m3fn"
    assert isinstance(got[2], Unknown) and isinstance(got[3], Unknown)


def test_reads_of_tensor_values_are_unknown_with_a_reason_never_a_guess() -> None:
    for body in ("""
def f():
    t = torch.zeros(4, dtype=torch.float32)
    if (t == 0).all():
        return 1
    return 2
""", """
def f():
    t = torch.ones(1, dtype=torch.float32)
    return t.item()
""", """
def f():
    t = torch.ones(3, dtype=torch.float32)
    if t.max() > 2:
        return 1
    return 2
"""):
        outcome = evaluate_function(PARAMETERS + body, "f", [])
        assert outcome.kind == "unknown", (body, outcome)


def test_the_default_dtype_is_unknown_not_float32() -> None:
    # SGLang sets torch's default dtype to the model's while it loads (set_default_torch_dtype)
    got = _value("""
def f():
    return torch.empty(4).dtype, torch.empty(4).shape
""")
    assert isinstance(got[0], Unknown) and "default dtype" in got[0].reason and got[1] == (4,)


def test_max_over_a_dim_is_a_named_values_indices_pair() -> None:
    # modelopt_quant.py: layer.w13_input_scale.max(dim=-1).values.to(torch.float32)
    got = _value("""
def f():
    s = torch.nn.Parameter(torch.empty(8, 2, dtype=torch.float32), requires_grad=False)
    v = s.max(dim=-1).values.to(torch.bfloat16)
    a, i = s.max(dim=1)
    return v.shape, v.dtype, i.dtype, a.shape, s.max().shape
""")
    assert (got[0], got[1].path, got[2].path, got[3], got[4]) == ((8,), "torch.bfloat16", "torch.int64", (8,), ())


def test_hasattr_and_setattr_on_tensors_and_split_by_size() -> None:
    got = _value("""
def f():
    t = torch.empty(4, 10, dtype=torch.bfloat16)
    t.weight_loader = 1
    w = torch.nn.Parameter(torch.empty(2, 2, dtype=torch.float32), requires_grad=False)
    w.output_dim = 0
    return [p.shape for p in t.split(4, dim=1)], t.weight_loader, w.output_dim, w.shape
""")
    assert got == ([(4, 4), (4, 4), (4, 2)], 1, 0, (2, 2))


def test_elementwise_comparisons_and_bit_operations_stay_tensors() -> None:
    # fp8_utils.py ceil_to_ue8m0: (exp != 0) & (mantissa != 0) ... .to(...)
    got = _value("""
def f():
    bits = torch.empty(4, 8, dtype=torch.float32).view(torch.int32)
    exp = (bits >> 23) & 0xFF
    keep = (exp != 0) & (bits == 1)
    view = torch.zeros(256, 512, dtype=torch.bfloat16).view(-1, 128, 4, 128)
    return keep.dtype, keep.shape, keep.to(torch.int32).dtype, view.abs().float().amax(dim=(1, 3), keepdim=True).shape
""")
    assert (got[0].path, got[1], got[2].path, got[3]) == ("torch.bool", (4, 8), "torch.int32", (2, 1, 4, 1))


def test_flashinfer_convert_to_block_layout_gives_the_shape_its_python_body_gives() -> None:
    # flashinfer/fused_moe/core.py: input.view(M, K // blockK, blockK).permute(1, 0, 2).contiguous();
    # 0.5.16/0.5.23 unquant.py's TRT-LLM BF16 block layout iterates the result's shape
    got = _value("""
def f():
    from flashinfer.fused_moe.core import convert_to_block_layout
    tile = torch.empty(1536, 4096, dtype=torch.uint8)
    blocked = convert_to_block_layout(tile, 128)
    a, b, c = blocked.view(torch.bfloat16).shape
    return blocked.shape, blocked.dtype, (a, b, c), convert_to_block_layout(torch.empty(8, 100), 128)
""")
    assert got[:3] == ((32, 1536, 128), got[1], (32, 1536, 64)) and got[1].path == "torch.uint8"
    assert isinstance(got[3], Unknown) and "not divisible by blockK=128" in got[3].reason


def test_repeat_interleave_scales_the_dim_it_repeats() -> None:
    # fp8_utils.py block_quant_dequant (0.5.23): a scale per 128x128 block spread over the weight,
    # whose shape the DeepGEMM requant unpacks next (`*batch_dims, n, k = weight_dequant.shape`)
    got = _value("""
def f():
    s = torch.empty(19, 20, dtype=torch.float32)
    r = s.repeat_interleave(128, dim=-2).repeat_interleave(128, dim=-1)
    return (r.shape, s.repeat_interleave(2).shape, torch.repeat_interleave(s, 3, 0).shape)
""")
    assert got == ((19 * 128, 20 * 128), (19 * 20 * 2,), (57, 20))
