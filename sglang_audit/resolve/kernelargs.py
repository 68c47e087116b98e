"""The arguments SGLang passes a kernel-library function, carried from the attention stage
(which evaluates SGLang's call) to the attention kernel level (which runs the library's
guards with them, ``attnkernels``), issue 42/44.

Only what the evaluator knows of a value crosses: plain data (None, bool, int, float, str and
tuples of them), a torch dtype, and an abstract tensor's dtype and shape (a dim, the rank or
the dtype not known stays unknown); anything else is ``"?"`` and is rebuilt as an
``Unknown``. The text is JSON written by the tool itself and read back as data (never
evaluated), so a value the result cache or the kernel memo keeps is plain text.
"""

from __future__ import annotations

import json
from typing import Any

from sglang_audit.evaluate.values import Unknown
from sglang_audit.world.overlays.tensors import AbstractTensor, dtype_of, is_dtype

UNKNOWN_ARG = "?"


def encode(value: Any) -> str:
    """``value`` as the kernel level rebuilds it, or ``"?"`` when the evaluator does not know it."""
    got = _encode(value, 0)
    return UNKNOWN_ARG if got is None else json.dumps(got, separators=(",", ":"))


def _encode(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, (bool, str)) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return ["plain", value]
    if isinstance(value, tuple) and depth < 2:
        items = [_encode(v, depth + 1) for v in value]
        return ["tuple", items] if all(i is not None for i in items) else None
    if is_dtype(value):
        return ["dtype", value.path[len("torch."):]]
    if isinstance(value, AbstractTensor):
        dtype = value.dtype.path[len("torch."):] if is_dtype(value.dtype) else None
        shape = [d if isinstance(d, int) and not isinstance(d, bool) else None for d in value.shape] \
            if isinstance(value.shape, tuple) else None
        return ["tensor", dtype, shape]
    return None


def decode(text: str, what: str) -> Any:
    """The value ``encode`` wrote, as the library's interpreter sees it: plain data, a dtype
    (``External("torch.<name>")``), an ``AbstractTensor`` whose unknown parts are ``Unknown``
    (its device unknown: the library's device checks read the deployment's device, not a
    tensor's); ``"?"`` or anything unreadable is ``Unknown`` naming ``what``."""
    try:
        data = json.loads(text) if text != UNKNOWN_ARG else None
    except ValueError:
        data = None
    got = _decode(data, what)
    return Unknown(f"{what} (not known before a request)") if got is _NONE else got


_NONE = object()


def _decode(data: Any, what: str) -> Any:
    if not (isinstance(data, list) and len(data) >= 2 and isinstance(data[0], str)):
        return _NONE
    kind = data[0]
    if kind == "plain" and (data[1] is None or isinstance(data[1], (bool, int, float, str))):
        return data[1]
    if kind == "tuple" and isinstance(data[1], list):
        items = [_decode(d, what) for d in data[1]]
        return _NONE if any(i is _NONE for i in items) else tuple(items)
    if kind == "dtype" and isinstance(data[1], str):
        return dtype_of(data[1])
    if kind == "tensor" and len(data) == 3:
        dtype = dtype_of(data[1]) if isinstance(data[1], str) else Unknown(f"the dtype of {what}")
        shape: Any = Unknown(f"the shape of {what}")
        if isinstance(data[2], list):
            shape = tuple(d if isinstance(d, int) and not isinstance(d, bool) else Unknown(f"a dim of {what}")
                          for d in data[2])
        return AbstractTensor(shape, dtype, Unknown(f"the device of {what}"), origin=what)
    return _NONE


def merged(a: tuple[tuple[str, str], ...], b: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...] | None:
    """Two reaches of one call site: a value both give alike is kept, one that differs is
    ``"?"``; None when the two calls differ in shape (a ``*``/``**`` expanded differently)."""
    if [k for k, _ in a] != [k for k, _ in b]:
        return None
    return tuple((k, v if v == w else UNKNOWN_ARG) for (k, v), (_, w) in zip(a, b, strict=True))


def is_known(given: tuple[tuple[str, str], ...]) -> bool:
    """Whether any argument is known (otherwise the call says nothing a guard could use)."""
    return any(v != UNKNOWN_ARG for _, v in given)

