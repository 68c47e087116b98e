"""torch's operator registry (``torch.library``) as the analysed code uses it: what a package
registers as an operator's implementation is what ``torch.ops.<namespace>.<name>`` runs.

SGLang wraps its kernel-library calls as custom operators so that torch.compile does not trace
them (0.5.23 ``utils/custom_op.py`` ``register_custom_op`` -> ``utils/common.py``
``direct_register_custom_op``: ``Library("sglang", "FRAGMENT").impl(name, fn, "CUDA")``, then the
caller runs ``torch.ops.sglang.<name>``). Without a model of the registry that call is an outside
object and the function body, where the library call is, is never reached. Here:

* ``torch.library.Library(ns, kind)`` is a stand-in whose ``impl(name, fn, key)`` records ``fn``
  for ``(ns, name)`` in the interpreter's registry (``define``/``_register_fake``/``fallback``
  record nothing: a schema or a fake implementation is not what a real call runs);
* ``torch.library.custom_op("ns::name", fn, mutates_args=...)`` (and its decorator form) records
  ``fn`` the same way and gives back ``fn``: the decorated function stays callable with its body
  (torch's ``CustomOpDef`` calls it);
* ``torch.library.register_fake`` / ``impl_abstract`` decorate a fake: the function is returned
  unchanged and nothing is recorded;
* ``torch.ops.<ns>.<name>`` is the recorded callable (``registered_op``), and ``hasattr`` says
  whether one is recorded.

The registry is per interpreter (``WorldState.registry``), written at module load as torch's
dispatcher is. The same for every target: never a target read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.overlays.common import MISSING
from sglang_audit.evaluate.values import External, Native

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.world.overlays.host import TargetHost

OPS_PREFIX = "torch.ops."
_KEY = "torch.library"  # the registry's entries: (_KEY, namespace, name) -> the implementation


def _arg(args: list[Any], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name, MISSING)


def _record(interp: Interpreter, namespace: Any, name: Any, fn: Any) -> None:
    if isinstance(namespace, str) and isinstance(name, str) and fn is not MISSING and fn is not None:
        interp.registry[(_KEY, namespace, name)] = fn


class OpLibrary:
    """``torch.library.Library(ns, kind)``: a tool-side stand-in (its attributes answered by
    ``native_attr``) whose ``impl`` records an implementation for its namespace."""

    def __init__(self, namespace: Any) -> None:
        self.namespace = namespace

    def __repr__(self) -> str:
        return f"<torch.library.Library {self.namespace!r}>"

    def native_attr(self, interp: Interpreter, name: str) -> Any:
        if name == "impl":
            return Native("Library.impl", self._impl)
        if name in ("define", "_register_fake", "fallback", "_destroy"):
            return Native(f"Library.{name}", lambda i, a, k: None)
        if name == "ns":
            return self.namespace
        if name == "m":
            # the C++ library handle: only its name is read (utils/common.py
            # direct_register_custom_op, `my_lib.m.name if hasattr(my_lib.m, "name")`)
            return _Handle(self.namespace)
        return External(f"torch.library.Library.{name}")

    def _impl(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        name = _arg(args, kwargs, 0, "op_name")
        if isinstance(name, str):
            name = name.split("::")[-1].split(".")[0]  # "ns::op.overload" or "op"
        _record(interp, self.namespace, name, _arg(args, kwargs, 1, "fn"))
        return None


class _Handle:
    def __init__(self, namespace: Any) -> None:
        self.namespace = namespace

    def native_attr(self, interp: Interpreter, name: str) -> Any:
        if name == "name":
            return self.namespace
        raise interp.make_raise("AttributeError", f"'torch._C._DispatchModule' object has no attribute '{name}'")


def _library(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return OpLibrary(_arg(args, kwargs, 0, "ns"))


def _custom_op(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``torch.library.custom_op(name, fn=None, /, *, mutates_args, ...)``: with ``fn`` the
    function recorded and returned, else a decorator that does so."""
    qualname = _arg(args, kwargs, 0, "name")
    namespace, _, name = qualname.partition("::") if isinstance(qualname, str) else (None, "", None)

    def decorate(fn: Any) -> Any:
        _record(interp, namespace, name, fn)
        return fn

    fn = _arg(args, kwargs, 1, "fn")
    if fn is not MISSING and fn is not None:
        return decorate(fn)
    return Native("custom_op.<decorator>", lambda i, a, k: decorate(a[0]) if a else None)


def _fake_decorator(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``register_fake(name, func=None)`` / ``impl_abstract``: the fake is not what runs."""
    func = _arg(args, kwargs, 1, "func")
    if func is not MISSING and func is not None:
        return func
    return Native("register_fake.<decorator>", lambda i, a, k: a[0] if a else None)


def registered_op(interp: Interpreter, path: str, name: str) -> Any:
    """The implementation recorded for ``torch.ops.<ns>.<name>`` (``path`` the namespace
    object's path), or MISSING."""
    namespace = path[len(OPS_PREFIX):]
    if not path.startswith(OPS_PREFIX) or not namespace or "." in namespace:
        return MISSING
    return interp.registry.get((_KEY, namespace, name), MISSING)


def oplibrary_attrs(host: TargetHost) -> dict[str, Any]:
    """torch.library's registration entry points (the same for every target: never a target read)."""
    return {
        "torch.library.Library": Native("torch.library.Library", _library),
        "torch.library.custom_op": Native("torch.library.custom_op", _custom_op),
        "torch.library.register_fake": Native("torch.library.register_fake", _fake_decorator),
        "torch.library.impl_abstract": Native("torch.library.impl_abstract", _fake_decorator),
    }
