"""The checkpoint's headers as the analysed code reads them (issue 41): ``safetensors``'
``safe_open`` and a binary ``open()`` of a safetensors file, answered from
``inputs/checkpoint.py``'s bounded header reader, only inside the model directories.

What a header says (tensor names, dtypes, shapes, ``__metadata__``) is plain data; a tensor's
values are never read: ``get_tensor(name)`` is a stand-in whose ``dtype``/``shape`` are known
and whose values are ``Unknown`` with the reason. A file outside the model directories, or a
model directory without the file (a profile shipping config.json alone), gives ``Unknown``
with the reason ``NEEDS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.overlays.common import PathValue
from sglang_audit.evaluate.values import External, Native, Unknown
from sglang_audit.inputs.checkpoint import SafetensorsHeader

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.world.overlays.host import TargetHost

NEEDS = "needs the checkpoint's index/headers"

# safetensors' dtype names -> torch's (safetensors/torch.py's _TYPES, read backwards)
TORCH_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
    "U16": "uint16", "U32": "uint32", "U64": "uint64", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
    "F4": "float4_e2m1fn_x2", "C64": "complex64",
}


def safetensors_attrs(host: TargetHost) -> dict[str, Any]:
    safe_open = Native("safe_open", lambda i, a, k: open_safetensors(host, i, a, k))
    return {
        "safetensors.safe_open": safe_open,
        "safetensors.torch.safe_open": safe_open,
    }


def path_text(value: Any) -> Any:
    return value.text if isinstance(value, PathValue) else value


def open_safetensors(host: TargetHost, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``safe_open(path, framework=..., device=...)``: the file's header, or Unknown."""
    path = path_text(args[0] if args else kwargs.get("filename"))
    if not isinstance(path, str):
        return Unknown(f"safe_open of an unknown path: {NEEDS}")
    header = host.checkpoint_header(path)
    if isinstance(header, Unknown):
        return header
    return SafeOpen(header)


class SafeOpen:
    """``safetensors.safe_open``'s handle over one header (a context manager, or plain)."""

    def __init__(self, header: SafetensorsHeader) -> None:
        self.header = header

    def native_attr(self, interp: Interpreter, name: str) -> Any:
        header = self.header
        if name == "__enter__":
            return Native("safe_open.__enter__", lambda i, a, k: self)
        if name == "__exit__":
            return Native("safe_open.__exit__", lambda i, a, k: False)
        if name == "keys":
            return Native("safe_open.keys", lambda i, a, k: sorted(header.names()))  # safetensors sorts them
        if name == "offset_keys":
            return Native("safe_open.offset_keys", lambda i, a, k: [t.name for t in sorted(header.tensors, key=lambda t: t.data_offsets)])
        if name == "metadata":
            return Native("safe_open.metadata", lambda i, a, k: dict(header.metadata) if header.metadata else None)
        if name == "get_slice":
            return Native("safe_open.get_slice", lambda i, a, k: self._tensor(i, a, k, Slice))
        if name == "get_tensor":
            return Native("safe_open.get_tensor", lambda i, a, k: self._tensor(i, a, k, Tensor))
        return Unknown(f"safe_open(...).{name} is not modelled ({header.file})")

    def _tensor(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any], kind: type) -> Any:
        name = args[0] if args else kwargs.get("name")
        if not isinstance(name, str):
            return Unknown(f"a tensor of {self.header.file} named by an unknown")
        info = self.header.tensor(name)
        if info is None:
            # safetensors raises SafetensorError (an Exception) naming the tensor
            raise interp.make_raise("Exception", f"File does not contain tensor {name}")
        return kind(info.name, info.dtype, info.shape, self.header.file)


class Slice:
    """``get_slice(name)``: dtype (safetensors' spelling) and shape from the header; its
    values (indexing) are unknown."""

    def __init__(self, name: str, dtype: str, shape: tuple[int, ...], file: str) -> None:
        self.name, self.dtype, self.shape, self.file = name, dtype, shape, file

    def values(self) -> Unknown:
        return Unknown(f"the values of tensor {self.name} in {self.file} are not read (the tool reads only safetensors headers)")

    def native_attr(self, interp: Interpreter, name: str) -> Any:
        if name == "get_dtype":
            return Native("get_dtype", lambda i, a, k: self.dtype)
        if name == "get_shape":
            return Native("get_shape", lambda i, a, k: list(self.shape))
        return self.values()

    def native_item(self, interp: Interpreter, index: Any) -> Any:
        return self.values()


class Tensor(Slice):
    """``get_tensor(name)``: a tensor whose dtype (``torch.<dtype>``), shape and sizes are
    known from the header, and whose values are not."""

    def native_attr(self, interp: Interpreter, name: str) -> Any:
        if name == "dtype":
            torch_name = TORCH_DTYPES.get(self.dtype)
            return External(f"torch.{torch_name}") if torch_name else Unknown(f"torch dtype of safetensors dtype {self.dtype}")
        if name == "shape":
            return tuple(self.shape)
        if name == "ndim":
            return len(self.shape)
        if name in ("size", "dim", "numel"):
            def answer(i: Interpreter, a: list[Any], k: dict[str, Any]) -> Any:
                if name == "dim":
                    return len(self.shape)
                if name == "numel":
                    count = 1
                    for d in self.shape:
                        count *= d
                    return count
                if a and isinstance(a[0], int):
                    return i.data_op(lambda: self.shape[a[0]])
                return tuple(self.shape)
            return Native(f"Tensor.{name}", answer)
        return self.values()


class BinaryFile:
    """A file opened ``"rb"`` inside the model directory: reads within ``data`` (a
    safetensors file's length prefix and header, or the whole of a small file) give the
    file's bytes; a read beyond it is Unknown (``beyond`` says why)."""

    def __init__(self, file: str, data: bytes, beyond: str) -> None:
        self.file = file
        self.data = data
        self.beyond = beyond
        self.pos = 0

    def native_attr(self, interp: Interpreter, name: str) -> Any:
        if name == "__enter__":
            return Native("file.__enter__", lambda i, a, k: self)
        if name == "__exit__":
            return Native("file.__exit__", lambda i, a, k: False)
        if name == "close":
            return Native("file.close", lambda i, a, k: None)
        if name == "tell":
            return Native("file.tell", lambda i, a, k: self.pos)
        if name == "seek":
            return Native("file.seek", self._seek)
        if name == "read":
            return Native("file.read", self._read)
        return Unknown(f"{self.file} opened 'rb': .{name} is not modelled")

    def _seek(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        where = args[0] if args else 0
        whence = args[1] if len(args) > 1 else 0
        if not isinstance(where, int) or whence != 0 or where < 0:
            return Unknown(f"a seek in {self.file} the tool does not follow")
        self.pos = where
        return where

    def _read(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        size = args[0] if args else kwargs.get("size", -1)
        if size is None:
            size = -1
        if not isinstance(size, int):
            return Unknown(f"a read of {self.file} of an unknown size")
        end = self.pos + size if size >= 0 else None
        if end is None or end > len(self.data):
            if self.beyond:
                return Unknown(self.beyond)
            end = len(self.data)  # the whole file is here: a read past its end stops at it
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk
