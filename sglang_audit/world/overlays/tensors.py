"""Abstract tensors (issue 41): torch's tensors as the layer code sees them, with a shape
(each dim an int or an ``Unknown``), a dtype (``External("torch.<dtype>")``) and a device,
and no data.

SGLang's weight preparation (``create_weights``, ``process_weights_after_loading``) makes,
views, casts, pads and concatenates tensors, and branches on their shapes and dtypes far more
than on their values: with the metadata known, those branches decide and the kernel call
reached carries its dtypes and shapes. A read of the *values* (``.item()``, ``bool(t)``, a
comparison's result tested, ``tolist()``) is an ``Unknown`` whose reason says "tensor" (the
layer stage's marker of a branch on tensor data). Nothing here runs torch: this is a model of
its metadata rules (the shapes of views, reshapes, permutes, concatenations, broadcasts).

``torch.nn.Parameter`` is an analysed ``Class`` (not an External), so SGLang's own parameter
classes (``BasevLLMParameter(Parameter)`` and its subclasses, ``sglang/srt/layers/
parameter.py``) run as SGLang code: ``super().__new__(cls, data=..., requires_grad=...)`` finds
the ``__new__`` below, which keeps the tensor in ``data`` (as torch's ``param.data``), and any
tensor attribute the class does not define is read from that tensor (``__getattr__``).

Why this module is long: torch's tensor metadata rules are one surface (factories, views,
shape-changing methods, ``Parameter``); split, each half would import the other's class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.values import (
    NOT_HANDLED,
    Class,
    External,
    Instance,
    Native,
    StaticMethod,
    Unknown,
)

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.world.overlays.host import TargetHost

Dim = Any  # int | Unknown
Shape = Any  # tuple[Dim, ...] | Unknown (the rank itself unknown)

# bytes per element (torch.dtype.itemsize); a dtype not listed has an unknown size
ITEMSIZE = {
    "float64": 8, "float32": 4, "float": 4, "double": 8, "float16": 2, "half": 2, "bfloat16": 2,
    "int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2, "short": 2, "int8": 1, "uint8": 1,
    "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1,
    "float8_e4m3fn": 1, "float8_e4m3fnuz": 1, "float8_e5m2": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1,
}
DTYPES = sorted(ITEMSIZE)


def dtype_isinstance(path: str, typ: str) -> Any:
    """``isinstance(torch.<dtype>, typ)``: a dtype is a ``torch.dtype`` and nothing else outside
    (0.5.23 jit_kernel cpp_args.py ``make_cpp_args`` maps a dtype argument by that test);
    NOT_HANDLED for any other outside value."""
    if path.startswith("torch.") and path[len("torch."):] in ITEMSIZE:
        return typ == "torch.dtype"
    return NOT_HANDLED
# casts by method name -> dtype
CASTS = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
         "int": "int32", "long": "int64", "short": "int16", "bool": "bool", "byte": "uint8", "char": "int8"}
# methods that return a tensor of the same shape and dtype (elementwise, copies, in-place ops)
SAME = frozenset({
    "contiguous", "clone", "detach", "cpu", "cuda", "abs", "neg", "exp", "log", "sqrt", "rsqrt",
    "reciprocal", "sign", "relu", "sigmoid", "clamp", "clamp_", "clamp_min", "clamp_max", "round",
    "copy_", "fill_", "zero_", "normal_", "uniform_", "mul_", "add_", "sub_", "div_", "abs_",
    "requires_grad_", "pin_memory", "share_memory_", "float_power", "nan_to_num", "masked_fill",
    "masked_fill_", "index_fill_", "scatter_", "mul", "add", "sub", "div", "pow", "maximum", "minimum",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "floor", "ceil", "trunc", "tanh",
    "record_stream", "detach_", "cumsum", "flip", "roll", "tril", "triu", "where",
})
# reductions: without ``dim`` a 0-dim tensor, with it the dim dropped (or kept)
REDUCTIONS = frozenset({"max", "min", "sum", "mean", "amax", "amin", "prod", "norm", "std", "var", "any", "all", "argmax", "argmin"})
# reads of values: unknown, with the reason
VALUE_READS = frozenset({"item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__"})
# the properties native_attr answers
MODELLED = frozenset({"shape", "dtype", "device", "is_cuda", "data", "T", "mT", "requires_grad", "ndim", "itemsize", "grad"})


def is_dtype(value: Any) -> bool:
    return isinstance(value, External) and value.path.startswith("torch.") and value.path[6:] in ITEMSIZE


def dtype_of(name: str) -> External:
    return External(f"torch.{name}")


def itemsize(dtype: Any) -> int | None:
    return ITEMSIZE.get(dtype.path[6:]) if is_dtype(dtype) else None


def known(dims: Any) -> bool:
    return isinstance(dims, tuple) and all(isinstance(d, int) and not isinstance(d, bool) for d in dims)


def numel(shape: Shape) -> Any:
    if not known(shape):
        return Unknown("the element count of a tensor whose shape is not known")
    count = 1
    for d in shape:
        count *= d
    return count


def shape_arg(args: list[Any]) -> Shape:
    """A shape given as ``f(2, 3)``, ``f((2, 3))``, ``f([2, 3])`` or ``f(torch.Size)``."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = list(args[0])
    if len(args) == 1 and isinstance(args[0], Unknown):
        return Unknown(f"a tensor shape ({args[0].reason})")
    dims: list[Dim] = []
    for a in args:
        if isinstance(a, External):  # a size from outside (process state, a library call)
            a = Unknown(f"a tensor dim given by {a.path}")
        if isinstance(a, bool) or not isinstance(a, (int, Unknown)):
            return Unknown(f"a tensor shape given as {type(a).__name__}")
        dims.append(a)
    return tuple(dims)


def norm_dim(d: Any, rank: int) -> int | None:
    if isinstance(d, bool) or not isinstance(d, int):
        return None
    if d < 0:
        d += rank
    return d if 0 <= d < rank else None


class AbstractTensor:
    """A tensor's metadata: shape, dtype, device, ``requires_grad``; never its values.
    ``origin`` names where it was made, for the reason of a value read."""

    __slots__ = ("shape", "dtype", "device", "requires_grad", "origin", "attrs")

    def __init__(self, shape: Shape, dtype: Any, device: Any = None, requires_grad: bool = False, origin: str = "") -> None:
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.requires_grad = requires_grad
        self.origin = origin
        # attributes the analysed code set on the tensor (SGLang's weight_loader, output_dim, ...)
        self.attrs: dict[str, Any] = {}

    def __repr__(self) -> str:
        dtype = self.dtype.path if isinstance(self.dtype, External) else "?"
        shape = tuple(d if isinstance(d, int) else "?" for d in self.shape) if isinstance(self.shape, tuple) else "?"
        return f"<tensor {dtype} {shape}>"

    def like(self, shape: Shape | None = None, dtype: Any = None, device: Any = None) -> AbstractTensor:
        return AbstractTensor(self.shape if shape is None else shape, self.dtype if dtype is None else dtype,
                              self.device if device is None else device, False, self.origin)

    def values(self, what: str) -> Unknown:
        # "tensor " marks a branch on tensor data for the layer stage (rules/layers.toml)
        return Unknown(f"{what} of a tensor {self.origin or ''} (the tool models shapes and dtypes, never values)".replace("  ", " "))

    @property
    def rank(self) -> int | None:
        return len(self.shape) if isinstance(self.shape, tuple) else None

    # ---- the evaluator's questions -------------------------------------------------------
    def native_isinstance(self, path: str) -> bool | None:
        # a plain tensor is a torch.Tensor (torch.nn.Parameter is a Class: answered as one)
        return True if path in ("torch.Tensor", "torch._C.TensorBase") else None

    def native_truth(self) -> Unknown:
        return self.values("the truth value")

    def native_item(self, interp: Interpreter, index: Any) -> Any:
        return self.like(shape=index_shape(self.shape, index))

    def set_native_item(self, interp: Interpreter, key: Any, value: Any) -> None:
        return None  # writes data only: shape, dtype and device stay

    def native_binop(self, interp: Interpreter, op: str, other: Any, reflected: bool) -> Any:
        if op in ("==", "!=", "<", "<=", ">", ">="):
            shape = broadcast(self.shape, other.shape) if isinstance(other, AbstractTensor) else self.shape
            return self.like(shape=shape, dtype=dtype_of("bool"))
        if op == "@":
            if isinstance(other, AbstractTensor) and self.rank == 2 and other.rank == 2:
                a, b = (other, self) if reflected else (self, other)
                return self.like(shape=(a.shape[0], b.shape[1]))
            return self.like(shape=Unknown("the shape of a matmul"))
        if isinstance(other, AbstractTensor):
            dtype = self.dtype if _same(self.dtype, other.dtype) else Unknown("the dtype of arithmetic between tensors of different dtypes")
            return self.like(shape=broadcast(self.shape, other.shape), dtype=dtype)
        if isinstance(other, (int, float, bool)):
            # a Python scalar keeps the tensor's dtype, except int tensor / float -> float
            if isinstance(other, float) and itemsize(self.dtype) is not None and not self.dtype.path.startswith(("torch.float", "torch.bfloat", "torch.half", "torch.double")):
                return self.like(dtype=Unknown("the dtype of an integer tensor combined with a float"))
            if op == "/" and not (isinstance(self.dtype, External) and self.dtype.path.startswith(("torch.float", "torch.bfloat"))):
                return self.like(dtype=Unknown("the dtype of a true division"))
            return self.like()
        return self.like(shape=Unknown("the shape of an operation with an unknown operand"), dtype=Unknown("the dtype of an operation with an unknown operand"))

    def set_native_attr(self, interp: Interpreter, name: str, value: Any) -> None:
        if name == "data" and isinstance(value, AbstractTensor):
            self.shape, self.dtype, self.device = value.shape, value.dtype, value.device  # t.data = other
        elif name == "requires_grad":
            self.requires_grad = value is True
        else:
            self.attrs[name] = value

    def has_attr(self, name: str) -> bool:
        """Whether the model answers ``name`` (an attribute torch has, or one the code set):
        the layer stage takes any other name as absent (an ad hoc attribute never set)."""
        return (name in self.attrs or name in MODELLED or hasattr(self, f"m_{name}") or name in SAME
                or name in CASTS or name in REDUCTIONS or name in VALUE_READS)

    def native_attr(self, interp: Interpreter, name: str) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        if name == "shape":
            return self.shape
        if name == "dtype":
            return self.dtype
        if name == "device":
            return self.device if self.device is not None else Unknown("the device of a tensor made without one")
        if name == "is_cuda":
            return self.device_is("cuda")
        if name == "data":
            return self
        if name == "T" or name == "mT":
            return self.like(shape=self.shape[::-1] if isinstance(self.shape, tuple) else self.shape)
        if name == "requires_grad":
            return self.requires_grad
        if name == "ndim":
            return self.rank if self.rank is not None else self.shape
        if name == "itemsize":
            return itemsize(self.dtype) or Unknown("the item size of an unknown dtype")
        if name == "grad":
            return None
        if name in VALUE_READS:
            return Native(f"Tensor.{name}", lambda i, a, k: self.values(f".{name}()"))
        method = getattr(self, f"m_{name}", None)
        if method is not None:
            return Native(f"Tensor.{name}", lambda i, a, k: method(i, a, k))
        if name in SAME:
            return Native(f"Tensor.{name}", lambda i, a, k: self.like())
        if name in CASTS:
            return Native(f"Tensor.{name}", lambda i, a, k: self.like(dtype=dtype_of(CASTS[name])))
        if name in REDUCTIONS:
            return Native(f"Tensor.{name}", lambda i, a, k: self.reduce(name, a, k))
        return Unknown(f"tensor attribute {name} is not modelled")

    def device_is(self, kind: str) -> Any:
        dev = self.device
        if isinstance(dev, str):
            return dev.split(":")[0] == kind
        return Unknown("the device of a tensor")

    # ---- methods ------------------------------------------------------------------------
    def m_size(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        d = args[0] if args else kwargs.get("dim")
        if d is None:
            return self.shape
        if self.rank is None:
            return Unknown("a size of a tensor whose rank is not known")
        i = norm_dim(d, self.rank)
        if i is None:
            raise interp.make_raise("IndexError", f"Dimension out of range (got {d})")
        return self.shape[i]

    def m_dim(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return self.rank if self.rank is not None else Unknown("the rank of a tensor")

    m_ndimension = m_dim

    def m_numel(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return numel(self.shape)

    def m_element_size(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return itemsize(self.dtype) or Unknown("the element size of an unknown dtype")

    def m_stride(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return Unknown("a tensor's strides (views are not tracked)")

    def m_is_contiguous(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return Unknown("whether a tensor is contiguous (views are not tracked)")

    def m_to(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        dtype, device = kwargs.get("dtype"), kwargs.get("device")
        for a in args:
            if isinstance(a, AbstractTensor):
                dtype, device = a.dtype, a.device
            elif is_dtype(a):
                dtype = a
            elif isinstance(a, (str, External)):
                device = a
            elif isinstance(a, Unknown):
                return self.like(dtype=Unknown(f"the dtype of .to({a.reason})"))
        return self.like(dtype=dtype, device=device)

    def m_type(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if args and is_dtype(args[0]):
            return self.like(dtype=args[0])
        return Unknown("Tensor.type() without a dtype")

    def m_view(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if len(args) == 1 and is_dtype(args[0]):
            return self.view_dtype(interp, args[0])
        return self.like(shape=reshaped(interp, self.shape, shape_arg(args)))

    m_reshape = m_view

    def m_view_as(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        other = args[0] if args else None
        return self.like(shape=other.shape if isinstance(other, AbstractTensor) else Unknown("view_as of an unknown"))

    m_reshape_as = m_view_as
    m_expand_as = m_view_as

    def view_dtype(self, interp: Interpreter, dtype: Any) -> AbstractTensor:
        # torch: the last dim scales by the ratio of the item sizes
        old, new = itemsize(self.dtype), itemsize(dtype)
        shape = self.shape
        if old == new:
            return self.like(dtype=dtype)
        if old is None or new is None or self.rank in (None, 0):
            return self.like(shape=Unknown("the shape of a dtype view"), dtype=dtype)
        last = shape[-1]
        if isinstance(last, int):
            if (last * old) % new:
                raise interp.make_raise("RuntimeError", "self.size(-1) must be divisible by the ratio of the element sizes")
            last = last * old // new
        return self.like(shape=(*shape[:-1], last), dtype=dtype)

    def m_permute(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        order = shape_arg(args)
        if self.rank is None or not known(order) or sorted(norm_dim(d, self.rank) or 0 for d in order) != list(range(self.rank)):
            return self.like(shape=Unknown("the shape of a permute"))
        return self.like(shape=tuple(self.shape[norm_dim(d, self.rank) or 0] for d in order))

    def m_transpose(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if self.rank is None or len(args) != 2:
            return self.like(shape=Unknown("the shape of a transpose"))
        a, b = norm_dim(args[0], self.rank), norm_dim(args[1], self.rank)
        if a is None or b is None:
            return self.like(shape=Unknown("the shape of a transpose"))
        dims = list(self.shape)
        dims[a], dims[b] = dims[b], dims[a]
        return self.like(shape=tuple(dims))

    m_swapaxes = m_transpose

    def m_t(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if self.rank is not None and self.rank > 2:
            raise interp.make_raise("RuntimeError", "t() expects a tensor with <= 2 dimensions")
        return self.like(shape=self.shape[::-1] if isinstance(self.shape, tuple) else self.shape)

    def m_unsqueeze(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        d = args[0] if args else kwargs.get("dim")
        i = norm_dim(d, self.rank + 1) if self.rank is not None else None
        if i is None or self.rank is None:
            return self.like(shape=Unknown("the shape of an unsqueeze"))
        dims = list(self.shape)
        dims.insert(i, 1)
        return self.like(shape=tuple(dims))

    def m_squeeze(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if self.rank is None:
            return self.like()
        d = args[0] if args else kwargs.get("dim")
        if d is None:
            if not known(self.shape):
                return self.like(shape=Unknown("the shape of a squeeze of unknown dims"))
            return self.like(shape=tuple(x for x in self.shape if x != 1))
        i = norm_dim(d, self.rank)
        if i is None or not isinstance(self.shape[i], int):
            return self.like(shape=Unknown("the shape of a squeeze"))
        return self.like(shape=self.shape[:i] + self.shape[i + 1:] if self.shape[i] == 1 else self.shape)

    def m_flatten(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if self.rank is None:
            return self.like(shape=Unknown("the shape of a flatten"))
        start = norm_dim(args[0] if args else kwargs.get("start_dim", 0), self.rank) if self.rank else 0
        end = norm_dim(args[1] if len(args) > 1 else kwargs.get("end_dim", -1), self.rank) if self.rank else 0
        if start is None or end is None:
            return self.like(shape=Unknown("the shape of a flatten"))
        if self.rank == 0:
            return self.like(shape=(1,))
        return self.like(shape=(*self.shape[:start], numel(self.shape[start:end + 1]), *self.shape[end + 1:]))

    def m_expand(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        target = shape_arg(args)
        if not isinstance(target, tuple) or self.rank is None:
            return self.like(shape=Unknown("the shape of an expand"))
        lead = len(target) - self.rank
        return self.like(shape=tuple(self.shape[i - lead] if (isinstance(d, int) and d == -1) else d for i, d in enumerate(target)))

    def m_repeat(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        times = shape_arg(args)
        if not isinstance(times, tuple) or self.rank is None or len(times) < self.rank:
            return self.like(shape=Unknown("the shape of a repeat"))
        own = (1,) * (len(times) - self.rank) + self.shape
        return self.like(shape=tuple(mul(a, b) for a, b in zip(own, times, strict=True)))

    def m_repeat_interleave(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        repeats, dim = args[0] if args else kwargs.get("repeats"), args[1] if len(args) > 1 else kwargs.get("dim")  # flattened if None
        i = None if dim is None or self.rank is None else norm_dim(dim, self.rank)
        if not isinstance(repeats, int) or isinstance(repeats, bool) or self.rank is None or (dim is not None and i is None):
            return self.like(shape=Unknown("the shape of a repeat_interleave"))  # a tensor of repeats: its values decide
        return self.like(shape=(mul(numel(self.shape), repeats),) if i is None else (*self.shape[:i], mul(self.shape[i], repeats), *self.shape[i + 1:]))

    def m_narrow(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if self.rank is None or len(args) < 3:
            return self.like(shape=Unknown("the shape of a narrow"))
        i = norm_dim(args[0], self.rank)
        if i is None:
            return self.like(shape=Unknown("the shape of a narrow"))
        return self.like(shape=(*self.shape[:i], args[2], *self.shape[i + 1:]))

    def m_chunk(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        n = args[0] if args else kwargs.get("chunks")
        d = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        i = norm_dim(d, self.rank) if self.rank is not None else None
        if not isinstance(n, int) or i is None or not isinstance(self.shape[i], int) or self.shape[i] % n:
            return Unknown("the pieces of a chunk of a tensor")
        part = self.shape[i] // n
        return tuple(self.like(shape=(*self.shape[:i], part, *self.shape[i + 1:])) for _ in range(n))

    def m_split(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        sizes = args[0] if args else kwargs.get("split_size_or_sections")
        d = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        i = norm_dim(d, self.rank) if self.rank is not None else None
        if i is not None and isinstance(sizes, int) and not isinstance(sizes, bool) and sizes > 0 and isinstance(self.shape[i], int):
            # split(size): pieces of that size, the last one what remains
            n = self.shape[i]
            sizes = [min(sizes, n - start) for start in range(0, n, sizes)]
            if len(sizes) > 4096:
                return Unknown("the pieces of a split of a tensor into more than 4096")
        if i is None or not isinstance(sizes, (list, tuple)) or not known(tuple(sizes)):
            return Unknown("the pieces of a split of a tensor")
        return tuple(self.like(shape=(*self.shape[:i], s, *self.shape[i + 1:])) for s in sizes)

    def m_new_empty(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return AbstractTensor(shape_arg(args[:1] if args and isinstance(args[0], (tuple, list)) else args),
                              kwargs.get("dtype", self.dtype), kwargs.get("device", self.device), False, self.origin)

    m_new_zeros = m_new_empty
    m_new_ones = m_new_empty

    def m_new_full(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return self.m_new_empty(interp, args[:1], kwargs)

    def m_new_tensor(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return AbstractTensor(data_shape(args[0] if args else None), kwargs.get("dtype", self.dtype), kwargs.get("device", self.device))

    def reduce(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        d = args[0] if args and not isinstance(args[0], AbstractTensor) else kwargs.get("dim")
        if args and isinstance(args[0], AbstractTensor):  # torch.max(a, b): elementwise
            return self.like(shape=broadcast(self.shape, args[0].shape))
        dtype = dtype_of("int64") if name in ("argmax", "argmin") else dtype_of("bool") if name in ("any", "all") else None
        if d is None:
            return self.like(shape=(), dtype=dtype)
        keep = kwargs.get("keepdim", args[1] if len(args) > 1 and isinstance(args[1], bool) else False)
        if isinstance(d, (tuple, list)) and self.rank is not None and isinstance(keep, bool) and name not in ("max", "min"):
            # a reduction over several dims (amax(dim=(1, 3), keepdim=True))
            dims = {norm_dim(x, self.rank) for x in d}
            if None in dims:
                return self.like(shape=Unknown("the shape of a reduction"), dtype=dtype)
            kept = tuple((1 if keep else None) if j in dims else x for j, x in enumerate(self.shape))
            return self.like(shape=tuple(x for x in kept if x is not None), dtype=dtype)
        i = norm_dim(d, self.rank) if self.rank is not None else None
        if i is None or not isinstance(keep, bool):
            return self.like(shape=Unknown("the shape of a reduction"), dtype=dtype)
        shape = (*self.shape[:i], 1, *self.shape[i + 1:]) if keep else (*self.shape[:i], *self.shape[i + 1:])
        reduced = self.like(shape=shape, dtype=dtype)
        if name in ("max", "min"):  # torch.return_types.max: a named (values, indices)
            return ValuesIndices(reduced, self.like(shape=shape, dtype=dtype_of("int64")))
        return reduced


class ValuesIndices:
    """``torch.return_types.max/min``: a named tuple ``(values, indices)``."""

    def __init__(self, values: AbstractTensor, indices: AbstractTensor) -> None:
        self.items = (values, indices)

    def native_attr(self, interp: Interpreter, name: str) -> Any:
        if name in ("values", "indices"):
            return self.items[0 if name == "values" else 1]
        return Unknown(f"attribute {name} of torch.return_types")

    def native_item(self, interp: Interpreter, index: Any) -> Any:
        if isinstance(index, int) and not isinstance(index, bool) and -2 <= index < 2:
            return self.items[index]
        return Unknown("an item of torch.return_types")

    def native_iter(self, interp: Interpreter) -> tuple[AbstractTensor, AbstractTensor]:
        return self.items


def _same(a: Any, b: Any) -> bool:
    return isinstance(a, External) and isinstance(b, External) and a.path == b.path


def mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return Unknown("a tensor dim computed from an unknown one")


def broadcast(a: Shape, b: Shape) -> Shape:
    if not isinstance(a, tuple) or not isinstance(b, tuple):
        return Unknown("the shape of a broadcast of a tensor of unknown rank")
    out: list[Dim] = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if isinstance(x, int) and isinstance(y, int):
            out.append(max(x, y) if 1 in (x, y) else x)  # a mismatch is torch's error; not a verdict here
        elif x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        else:
            out.append(Unknown("a broadcast dim of an unknown size"))
    return tuple(reversed(out))


def reshaped(interp: Interpreter, old: Shape, new: Shape) -> Shape:
    """``view``/``reshape``'s shape: ``-1`` inferred from the element count when it is known."""
    if not isinstance(new, tuple):
        return new
    holes = [i for i, d in enumerate(new) if isinstance(d, int) and d == -1]
    if not holes:
        return new
    if len(holes) > 1:
        raise interp.make_raise("RuntimeError", "only one dimension can be inferred")
    total = numel(old)
    rest = numel(tuple(d for d in new if not (isinstance(d, int) and d == -1)))
    if isinstance(total, int) and isinstance(rest, int) and rest:
        if total % rest:
            raise interp.make_raise("RuntimeError", f"shape '{list(new)}' is invalid for input of size {total}")
        inferred: Dim = total // rest
    else:
        inferred = Unknown("an inferred (-1) dim of a view of unknown size")
    return tuple(inferred if i == holes[0] else d for i, d in enumerate(new))


def slice_len(s: slice, n: Dim) -> Dim:
    if isinstance(n, int) and all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (s.start, s.stop, s.step)):
        return len(range(*s.indices(n)))
    if s.start is None and s.stop is None and s.step is None:
        return n
    return Unknown("the length of a slice of a tensor")


def index_shape(shape: Shape, index: Any) -> Shape:
    """The shape of ``t[index]``: ints drop a dim, slices keep one, ``None`` adds one,
    ``...`` fills; an index tensor (advanced indexing) gives its own shape in front."""
    if not isinstance(shape, tuple):
        return Unknown("the shape of an index into a tensor of unknown rank")
    items = list(index) if isinstance(index, tuple) else [index]
    if any(isinstance(x, External) and x.path == "builtins.Ellipsis" for x in items) or Ellipsis in items:
        at = next(i for i, x in enumerate(items) if x is Ellipsis or isinstance(x, External))
        used = sum(1 for x in items if x is not None and x is not Ellipsis and not isinstance(x, External))
        items = items[:at] + [slice(None)] * (len(shape) - used) + items[at + 1:]
    out: list[Dim] = []
    dim = 0
    for x in items:
        if x is None:
            out.append(1)
            continue
        if dim >= len(shape):
            return Unknown("an index into a tensor with more indices than dims")
        if isinstance(x, slice):
            out.append(slice_len(x, shape[dim]))
        elif isinstance(x, int) and not isinstance(x, bool):
            pass  # an int drops the dim
        elif isinstance(x, AbstractTensor):
            if _same(x.dtype, dtype_of("bool")):
                out.append(Unknown("the number of elements a boolean mask selects (tensor values)"))
            elif isinstance(x.shape, tuple):
                out.extend(x.shape)
            else:
                return Unknown("the shape of an index by a tensor of unknown rank")
        else:
            return Unknown("the shape of an index by an unknown")
        dim += 1
    out.extend(shape[dim:])
    return tuple(out)


def data_shape(data: Any) -> Shape:
    if isinstance(data, (int, float, bool)):
        return ()
    if isinstance(data, (list, tuple)):
        if not data:
            return (0,)
        inner = data_shape(data[0])
        return (len(data), *inner) if isinstance(inner, tuple) else inner
    if isinstance(data, AbstractTensor):
        return data.shape
    return Unknown("the shape of torch.tensor(data) of unknown data")


# ---- torch's functions -------------------------------------------------------------------
def _site(interp: Interpreter, name: str) -> str:
    file, line = interp.call_site()
    return f"(torch.{name} at {file}:{line})"


def _default_dtype() -> Unknown:
    # SGLang sets torch's default dtype to the model's while it loads (set_default_torch_dtype)
    return Unknown("torch's default dtype at this point (SGLang sets it while the model loads)")


def _factory(name: str) -> Native:
    def make(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        # full(size, fill_value) and empty_strided(size, stride) take the size first, as one
        shape_args = args[:1] if name in ("full", "empty_strided") else args
        if "size" in kwargs:
            shape_args = [kwargs["size"]]
        dtype = kwargs.get("dtype") or _default_dtype()
        return AbstractTensor(shape_arg(list(shape_args)), dtype, kwargs.get("device"),
                              kwargs.get("requires_grad") is True, _site(interp, name))
    return Native(f"torch.{name}", make)


def _like(name: str) -> Native:
    def make(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        src = args[0] if args else kwargs.get("input")
        if isinstance(src, Instance):
            src = src.attrs.get("data")
        if not isinstance(src, AbstractTensor):
            return Unknown(f"torch.{name} of an unknown tensor")
        return src.like(dtype=kwargs.get("dtype"), device=kwargs.get("device"))
    return Native(f"torch.{name}", make)


def tensor_of(value: Any) -> Any:
    """The tensor behind a value: a parameter's data, or the tensor itself."""
    if isinstance(value, Instance) and isinstance(value.attrs.get("data"), AbstractTensor):
        return value.attrs["data"]
    return value


def _cat(stack: bool) -> Native:
    name = "stack" if stack else "cat"

    def join(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        seq = args[0] if args else kwargs.get("tensors")
        d = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        if not isinstance(seq, (list, tuple)) or not seq:
            return Unknown(f"torch.{name} of an unknown sequence of tensors")
        parts = [tensor_of(t) for t in seq]
        if not all(isinstance(t, AbstractTensor) for t in parts):
            return Unknown(f"torch.{name} of values that are not known tensors")
        first = parts[0]
        dtype = first.dtype if all(_same(t.dtype, first.dtype) for t in parts) else Unknown(f"the dtype of torch.{name} of mixed dtypes")
        if first.rank is None:
            return first.like(shape=Unknown(f"the shape of torch.{name}"), dtype=dtype)
        if stack:
            i = norm_dim(d, first.rank + 1)
            if i is None:
                return first.like(shape=Unknown("the shape of torch.stack"), dtype=dtype)
            return first.like(shape=(*first.shape[:i], len(parts), *first.shape[i:]), dtype=dtype)
        i = norm_dim(d, first.rank)
        if i is None or any(t.rank != first.rank for t in parts):
            return first.like(shape=Unknown("the shape of torch.cat"), dtype=dtype)
        total: Dim = 0
        for t in parts:
            total = total + t.shape[i] if isinstance(total, int) and isinstance(t.shape[i], int) else Unknown("a concatenated dim of an unknown size")
        return first.like(shape=(*first.shape[:i], total, *first.shape[i + 1:]), dtype=dtype)
    return Native(f"torch.{name}", join)


def _method_as_function(name: str) -> Native:
    # torch.permute(t, ...), torch.transpose(t, a, b), ...: the method of the first argument
    def call(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        t = tensor_of(args[0]) if args else None
        if not isinstance(t, AbstractTensor):
            return Unknown(f"torch.{name} of an unknown tensor")
        return interp.call(t.native_attr(interp, name), list(args[1:]), kwargs)
    return Native(f"torch.{name}", call)


def _tensor(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    data = args[0] if args else kwargs.get("data")
    dtype = kwargs.get("dtype")
    if dtype is None:
        dtype = dtype_of("int64") if isinstance(data, int) or (isinstance(data, (list, tuple)) and data and all(isinstance(x, int) for x in data)) else _default_dtype()
    return AbstractTensor(data_shape(data), dtype, kwargs.get("device"), False, _site(interp, "tensor"))


def _arange(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    ends = [a for a in args if not isinstance(a, AbstractTensor)]
    if len(ends) == 1 and isinstance(ends[0], int):
        n: Dim = max(ends[0], 0)
    elif len(ends) == 2 and all(isinstance(e, int) for e in ends):
        n = max(ends[1] - ends[0], 0)
    else:
        n = Unknown("the length of torch.arange")
    return AbstractTensor((n,), kwargs.get("dtype") or dtype_of("int64"), kwargs.get("device"), False, _site(interp, "arange"))


# ---- torch.nn.Parameter ----------------------------------------------------------------
def _param_new(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    cls = args[0] if args else None
    if not isinstance(cls, Class):
        return Unknown("Parameter.__new__ without a class")
    inst = Instance(cls)
    _param_fill(inst, args[1:], kwargs)
    return inst


def _param_fill(inst: Instance, args: list[Any], kwargs: dict[str, Any]) -> None:
    data = args[0] if args else kwargs.get("data")
    data = tensor_of(data)
    if data is None:
        data = AbstractTensor((0,), Unknown("the dtype of an empty parameter"), None)
    if isinstance(data, AbstractTensor):
        rg = args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
        data = AbstractTensor(data.shape, data.dtype, data.device, rg is True, data.origin)
    inst.attrs["data"] = data


def _param_init(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    inst = args[0] if args else None
    if isinstance(inst, Instance) and "data" not in inst.attrs:
        _param_fill(inst, args[1:], kwargs)
    return None


def _param_getattr(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    inst, name = args[0], args[1]
    data = inst.attrs.get("data") if isinstance(inst, Instance) else None
    if isinstance(data, AbstractTensor):
        return data.native_attr(interp, name)
    if isinstance(data, Unknown):
        return Unknown(f"attribute {name} of a parameter whose tensor is not known ({data.reason})")
    if isinstance(data, External):
        # a parameter made from a kernel library's output (aiter's weight shuffle): a tensor the
        # overlay cannot see into, never a missing attribute of SGLang's
        return Unknown(f"attribute {name} of a parameter holding {data.path} (a library's output)")
    raise interp.make_raise("AttributeError", f"'Parameter' object has no attribute '{name}'")


def parameter_class() -> Class:
    """``torch.nn.Parameter`` as an analysed class (see the module's docstring)."""
    ns: dict[str, Any] = {
        "__qualname__": "Parameter", "__module__": "torch.nn.parameter",
        "__new__": StaticMethod(Native("Parameter.__new__", _param_new)),
        "__init__": Native("Parameter.__init__", _param_init, bind_self=True),
        "__getattr__": Native("Parameter.__getattr__", _param_getattr, bind_self=True),
        "__bool__": Native("Parameter.__bool__", lambda i, a, k: a[0].attrs["data"].native_truth() if isinstance(a[0].attrs.get("data"), AbstractTensor) else Unknown("the truth value of a parameter tensor"), bind_self=True),
        "__getitem__": Native("Parameter.__getitem__", lambda i, a, k: tensor_item(i, a[0], a[1]), bind_self=True),
        "__setitem__": Native("Parameter.__setitem__", lambda i, a, k: None, bind_self=True),  # data only
    }
    return Class("Parameter", (), ns, None, external_bases=("torch.Tensor",))


def tensor_item(interp: Interpreter, param: Any, index: Any) -> Any:
    data = tensor_of(param)
    if isinstance(data, AbstractTensor):
        return data.native_item(interp, index)
    return Unknown("an item of a parameter whose tensor is not known")


FACTORIES = ("empty", "zeros", "ones", "randn", "rand", "full", "empty_strided")
LIKES = ("empty_like", "zeros_like", "ones_like", "full_like", "randn_like", "rand_like")
AS_FUNCTIONS = ("permute", "transpose", "reshape", "narrow", "flatten", "unsqueeze", "squeeze", "chunk",
                "split", "t", "clone", "abs", "max", "min", "sum", "amax", "amin", "exp", "sqrt", "clamp", "repeat_interleave")


def tensor_attrs(host: TargetHost) -> dict[str, Any]:
    attrs: dict[str, Any] = {f"torch.{n}": _factory(n) for n in FACTORIES}
    attrs.update({f"torch.{n}": _like(n) for n in LIKES})
    attrs.update({f"torch.{n}": _method_as_function(n) for n in AS_FUNCTIONS})
    attrs["torch.cat"] = attrs["torch.concat"] = attrs["torch.concatenate"] = _cat(stack=False)
    attrs["torch.stack"] = _cat(stack=True)
    attrs["torch.tensor"] = Native("torch.tensor", _tensor)
    attrs["torch.arange"] = Native("torch.arange", _arange)
    param = parameter_class()
    attrs["torch.nn.Parameter"] = attrs["torch.nn.parameter.Parameter"] = param
    return attrs


def tensor_binop(interp: Interpreter, op: str, left: Any, right: Any) -> Any:
    """An arithmetic or comparison operator with a tensor (or a parameter) on either side: a
    tensor of the result's shape and dtype; NOT_HANDLED when neither side is one."""
    a, b = tensor_of(left), tensor_of(right)
    if isinstance(a, AbstractTensor):
        return a.native_binop(interp, op, b, False)
    if isinstance(b, AbstractTensor):
        flipped = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
        return b.native_binop(interp, flipped, a, True)
    return NOT_HANDLED


def describe(t: AbstractTensor) -> str:
    """``dtype (d0, d1, ...)``: what a kernel's checks read of a tensor, "?" where unknown."""
    dtype = t.dtype.path.removeprefix("torch.") if isinstance(t.dtype, External) else "?"
    if isinstance(t.shape, tuple):
        dims = ", ".join(str(d) if isinstance(d, int) else "?" for d in t.shape)
        return f"{dtype} ({dims}{',' if len(t.shape) == 1 else ''})"
    return f"{dtype} (?)"


def has_tensor_attr(value: Any, name: str) -> bool | None:
    """``hasattr`` of a tensor or a parameter for the layer stage's rule that a tensor carries
    none of SGLang's ad hoc attributes until SGLang sets one; None: not a tensor."""
    t = tensor_of(value)
    if not isinstance(t, AbstractTensor):
        return None
    if isinstance(value, Instance) and (name in value.attrs or value.cls.lookup(name)[0]):
        return True
    return t.has_attr(name)
