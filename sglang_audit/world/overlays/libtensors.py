"""Kernel libraries' pure tensor helpers SGLang calls while it prepares weights, answered with
the shapes their own Python bodies give (each cited to the library's source), on the abstract
tensors of ``tensors.py``; the same for every target, so never a target read. A helper that
runs a kernel, or one not listed here, stays an outside call (unknown)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.values import Native, Unknown
from sglang_audit.world.overlays.tensors import AbstractTensor, Dim, tensor_of

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.world.overlays.host import TargetHost


def site(interp: Interpreter, name: str) -> str:
    file, line = interp.call_site()
    return f"({name} at {file}:{line})"


def _convert_to_block_layout(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """FlashInfer's ``convert_to_block_layout(input_tensor, blockK)``, a view and a permute in
    Python (flashinfer/fused_moe/core.py, the same body in 0.5.3 and 0.6.x):
    ``M, K = input_tensor.shape; assert K % blockK == 0; return
    input_tensor.view(M, K // blockK, blockK).permute(1, 0, 2).contiguous()``: a tensor of
    shape (K // blockK, M, blockK) and the input's dtype. Unknown when the input is not a 2-D
    tensor or ``blockK`` not a positive int, or FlashInfer's assert would fail."""
    t = tensor_of(args[0] if args else kwargs.get("input_tensor"))
    block = args[1] if len(args) > 1 else kwargs.get("blockK")
    if not isinstance(t, AbstractTensor) or t.rank != 2 or not isinstance(block, int) or isinstance(block, bool) or block <= 0:
        return Unknown("flashinfer convert_to_block_layout of a value that is not a 2-D tensor with an int blockK",
                       f"flashinfer:convert_to_block_layout@{site(interp, 'convert_to_block_layout')}")
    assert isinstance(t.shape, tuple)  # its rank is known
    m, k = t.shape
    if isinstance(k, int) and k % block:
        return Unknown(f"flashinfer convert_to_block_layout: K={k} is not divisible by blockK={block} (FlashInfer's assert)")
    blocks: Dim = k // block if isinstance(k, int) else Unknown(f"a tensor's dimension // {block} (the dimension is not known)")
    return t.like(shape=(blocks, m, block))


def flashinfer_attrs(host: TargetHost) -> dict[str, Any]:
    """FlashInfer's pure tensor helpers SGLang calls while it prepares weights, as the shapes
    their Python bodies give (the same for every target: never a target read)."""
    return {"flashinfer.fused_moe.core.convert_to_block_layout": Native("convert_to_block_layout", _convert_to_block_layout)}
