"""Attributes and items: reads and writes of attributes and subscripts, and iteration, for
every kind of value the evaluator holds."""

from __future__ import annotations

import operator
from typing import Any, Self

from sglang_audit.evaluate.core import Frame, InterpreterCore, PyRaise, Unmodelled
from sglang_audit.evaluate.plaindata import SCALARS, SEQUENCE_ITEMS, is_plain
from sglang_audit.evaluate.values import (
    AnalysisBound,
    BoundMethod,
    Cached,
    Class,
    ClassMethod,
    Event,
    External,
    Function,
    HFConfig,
    Instance,
    ModuleObj,
    Native,
    Partial,
    Property,
    StaticMethod,
    SuperProxy,
    Unknown,
)

# outside bases that give their subclasses' instances no attributes of their own
_NO_ATTR_BASES = frozenset({"ABC", "Generic", "Protocol", "object"})

# data-method names safe to call on plain values (no callbacks into analysed code except key=)
_SAFE_METHODS = {
    str: {
        "lower", "upper", "startswith", "endswith", "split", "rsplit", "strip", "lstrip",
        "rstrip", "replace", "removeprefix", "removesuffix", "join", "format", "find",
        "rfind", "index", "count", "isdigit", "isnumeric", "isalpha", "isalnum", "partition",
        "rpartition", "splitlines", "casefold", "title", "capitalize", "zfill", "isupper",
        "islower", "isspace", "encode", "center", "ljust", "rjust", "swapcase", "isidentifier",
        "format_map", "expandtabs", "isdecimal",
    },
    list: {"append", "extend", "insert", "pop", "index", "count", "copy", "remove", "clear", "reverse", "sort"},
    dict: {"get", "items", "keys", "values", "update", "pop", "setdefault", "copy", "clear", "popitem", "fromkeys"},
    set: {
        "add", "update", "discard", "remove", "union", "intersection", "difference", "issubset",
        "issuperset", "copy", "pop", "clear", "symmetric_difference", "isdisjoint",
        "intersection_update", "difference_update",
    },
    frozenset: {"union", "intersection", "difference", "issubset", "issuperset", "copy", "isdisjoint", "symmetric_difference"},
    tuple: {"index", "count"},
    bytes: {"decode", "startswith", "endswith", "split", "strip"},
    int: {"bit_length", "to_bytes"},
    float: {"is_integer"},
}


def _stable_key(value: Any) -> tuple[str, str]:
    return (type(value).__name__, repr(value))


class Attributes(InterpreterCore):
    """Attribute and item access, and iteration."""

    def getattr(self: Self, obj: Any, name: str) -> Any:
        kind = obj.__class__  # the value classes have no subclasses: `is` is isinstance here
        if kind is Instance:
            return self.instance_attr(obj, name)
        if kind is Unknown:
            return Unknown(obj.reason, f"{obj.key}.{name}" if obj.key else None)
        if kind is ModuleObj:
            return self.module_attr(obj, name)
        if kind is Class:
            return self.class_attr(obj, name)
        if isinstance(obj, External):
            return self.natives.external_attr(self, obj, name)
        if isinstance(obj, HFConfig):
            return self.natives.hf_attr(self, obj, name)
        if isinstance(obj, SuperProxy):
            mro = obj.cls.mro()
            cls_of_obj = obj.obj.cls if isinstance(obj.obj, Instance) else obj.obj if isinstance(obj.obj, Class) else obj.cls
            full = cls_of_obj.mro() if isinstance(cls_of_obj, Class) else mro
            start = full.index(obj.cls) + 1 if obj.cls in full else 1
            for klass in full[start:]:
                if name in klass.ns:
                    return self.bind(klass.ns[name], obj.obj, cls_of_obj)
            if name in self.natives.object_class.ns:
                # every class ends in object (also those built on outside bases like msgspec.Struct)
                return self.bind(self.natives.object_class.ns[name], obj.obj, cls_of_obj)
            if name == "__post_init__":
                return Native("object.__post_init__", lambda i, a, k: None)
            return Unknown(f"super().{name} resolves outside the analysed tree")
        if isinstance(obj, Function):
            if name == "__name__":
                return obj.name
            if name == "__qualname__":
                return obj.qualname
            if name in obj.attrs:
                return obj.attrs[name]
            return Unknown(f"attribute {name} of function {obj.qualname}")
        if isinstance(obj, (Native, BoundMethod, Cached, Partial)):
            if name == "__name__":
                inner = obj
                while isinstance(inner, (Cached, Partial, BoundMethod)):
                    inner = inner.func
                return getattr(inner, "name", "?")
            if isinstance(obj, Cached) and name == "cache_clear":
                return Native("cache_clear", lambda i, a, k: obj.memo.clear())
            if isinstance(obj, Partial) and name in ("func", "args", "keywords"):
                return {"func": obj.func, "args": tuple(obj.args), "keywords": obj.kwargs}[name]
            if isinstance(obj, BoundMethod) and name == "__self__":
                return obj.obj
            if isinstance(obj, BoundMethod) and name == "__func__":
                return obj.func
            return self.natives.native_attr(self, obj, name)
        if is_plain(obj):
            methods = _SAFE_METHODS.get(type(obj))
            if methods is None:
                for t, names in _SAFE_METHODS.items():
                    if isinstance(obj, t):
                        methods = names
                        break
            if methods and name in methods:
                return getattr(obj, name)
            if isinstance(obj, complex) and name in ("real", "imag"):
                return getattr(obj, name)
            raise self.make_raise("AttributeError", f"'{type(obj).__name__}' object has no attribute '{name}'")
        return self.natives.native_attr(self, obj, name)

    def instance_attr(self, obj: Instance, name: str) -> Any:
        found, custom = obj.cls.lookup("__getattribute__")
        if found and isinstance(custom, Function):
            try:
                return self.call(BoundMethod(custom, obj), [name], {})
            except PyRaise as raised:
                hook_found, getattr_fn = obj.cls.lookup("__getattr__")
                if hook_found and isinstance(raised.exc, Instance) and raised.exc.cls.name == "AttributeError":
                    return self.call(self.bind(getattr_fn, obj, obj.cls), [name], {})
                raise
        return self.default_instance_attr(obj, name)

    def default_instance_attr(self: Self, obj: Any, name: str) -> Any:
        """``object.__getattribute__`` followed by ``__getattr__``."""
        if not isinstance(obj, Instance):
            return self.getattr(obj, name)
        if name in obj.attrs:
            self.note_read(obj.events.get(name))
            return obj.attrs[name]
        if name == "__class__":
            return obj.cls
        if name == "__dict__":
            return obj.attrs
        found, attr = obj.cls.lookup(name)
        if found:
            return self.bind(attr, obj, obj.cls)
        special = self.natives.instance_special(self, obj, name)
        if special is not None:
            return special
        found, getattr_fn = obj.cls.lookup("__getattr__")
        if found:
            return self.call(self.bind(getattr_fn, obj, obj.cls), [name], {})
        # an outside base anywhere in the MRO (e.g. ModelWeightParameter -> ... -> torch.nn.Parameter)
        outside = obj.cls.external_bases or next((c.external_bases for c in obj.cls.mro()
                                                  if c.external_bases and not all(b.rsplit(".", 1)[-1] in _NO_ATTR_BASES for b in c.external_bases)), ())
        if outside and not ("enum" in obj.cls.flags or "exception" in obj.cls.flags or "dataclass" in obj.cls.flags):
            return Unknown(f"attribute {name} of {obj.cls.name} may come from {outside[0]}", f"attr:{obj.cls.name}.{name}")
        raise self.make_raise("AttributeError", f"'{obj.cls.name}' object has no attribute '{name}'")

    def class_attr(self: Self, cls: Class, name: str) -> Any:
        if name == "__name__":
            return cls.name
        if name == "__qualname__":
            return cls.ns.get("__qualname__", cls.name)
        if name == "__mro__":
            return cls.mro()
        if name == "__dict__":
            return cls.ns
        found, attr = cls.lookup(name)
        if found:
            if isinstance(attr, ClassMethod):
                return BoundMethod(attr.func, cls)
            if isinstance(attr, StaticMethod):
                return attr.func
            if isinstance(attr, Property):
                return attr
            return attr
        special = self.natives.class_special(self, cls, name)
        if special is not None:
            return special
        if cls.external_bases:
            return Unknown(f"{cls.name}.{name} may come from {cls.external_bases[0]}", f"attr:{cls.name}.{name}")
        raise self.make_raise("AttributeError", f"type object '{cls.name}' has no attribute '{name}'")

    def setattr(self: Self, obj: Any, name: str, value: Any, event: Event | None) -> None:
        if isinstance(obj, Instance):
            found, attr = obj.cls.lookup(name)
            if found and isinstance(attr, Property) and attr.fset is not None:
                self.call(attr.fset, [obj, value], {})
                return
            found, setattr_fn = obj.cls.lookup("__setattr__")
            if found and isinstance(setattr_fn, Function):
                self.call(BoundMethod(setattr_fn, obj), [name, value], {})
                if event is not None and name in obj.attrs:
                    obj.events[name] = event
                return
            self.natives.before_instance_write(self, obj, name, value, event)
            obj.attrs[name] = value
            if event is not None:
                obj.events[name] = event
        elif isinstance(obj, HFConfig):
            obj.attrs[name] = value
            if event is not None:
                obj.events[name] = event
        elif isinstance(obj, Class):
            obj.ns[name] = value
        elif isinstance(obj, ModuleObj):
            obj.globals[name] = value
            if event is not None:
                obj.events[name] = event
        elif isinstance(obj, Function):
            obj.attrs[name] = value
        elif isinstance(obj, (External, Unknown)):
            return  # writes into things outside the tree do not feed back into resolution
        else:
            self.natives.set_native_attr(self, obj, name, value)

    def getitem(self: Self, obj: Any, index: Any) -> Any:
        if isinstance(obj, Unknown):
            return Unknown(obj.reason, f"{obj.key}[{index!r}]" if obj.key and is_plain(index) else None)
        if isinstance(index, Unknown):
            return Unknown(f"subscript by an unknown ({index.reason})", None)
        if isinstance(obj, (list, tuple, str, bytes, range)):
            if isinstance(index, slice) or isinstance(index, int):
                return self.data_op(lambda: obj[index])
            index_v = self.plain_of(index)
            return self.data_op(lambda: obj[index_v])
        if isinstance(obj, dict):
            key = self.plain_of(index) if not isinstance(index, Instance) or index not in obj else index
            try:
                return obj[key]
            except KeyError:
                raise self.make_raise("KeyError", key) from None  # args == (key,), as in CPython
            except TypeError as exc:
                raise self.make_raise("TypeError", str(exc)) from None
        if isinstance(obj, Instance):
            found, meth = obj.cls.lookup("__getitem__")
            if found:
                return self.call(self.bind(meth, obj, obj.cls), [index], {})
        if isinstance(obj, Class):
            if "enum" in obj.flags:
                return self.natives.enum_by_name(self, obj, index)
            return Unknown("generic alias")
        if isinstance(obj, (External, Native)):
            return self.natives.external_item(self, obj, index)
        if isinstance(obj, HFConfig):
            return Unknown("subscript of a config object")
        if isinstance(obj, (*SCALARS, set, frozenset)):
            # `None[0]`: CPython's own TypeError (the index is never looked at)
            return self.data_op(lambda: operator.getitem(obj, 0))  # type: ignore[call-overload]  # CPython's TypeError
        return self.natives.native_item(self, obj, index)

    def setitem(self: Self, obj: Any, key: Any, value: Any) -> None:
        if isinstance(obj, Unknown):
            return
        if isinstance(key, Unknown) and not self._owns_setitem(obj):
            raise Unmodelled(f"item assignment with an unknown key ({key.reason})")
        if isinstance(obj, (dict, list)):
            k = self.plain_of(key) if isinstance(obj, dict) and isinstance(key, Instance) and "str_mixin" in key.cls.flags else key
            self.data_op(lambda: obj.__setitem__(k, value))
            return
        if isinstance(obj, Instance):
            found, meth = obj.cls.lookup("__setitem__")
            if found:
                self.call(self.bind(meth, obj, obj.cls), [key, value], {})
                return
        self.natives.set_native_item(self, obj, key, value)

    def _owns_setitem(self, obj: Any) -> bool:
        """Whether an item assignment into ``obj`` is the world's to answer whatever the key:
        a world's stand-in (``set_native_item``) or an instance whose ``__setitem__`` the
        world implements (a Native), e.g. a write into a slice of a tensor's data."""
        if isinstance(obj, Instance):
            found, meth = obj.cls.lookup("__setitem__")
            return found and isinstance(meth, Native)
        return hasattr(obj, "set_native_item")

    def iterate(self: Self, value: Any, frame: Frame | None, line: int) -> list[Any]:
        if isinstance(value, (list, tuple, str, bytes, range, set, frozenset)):
            if len(value) > self.bounds.max_seq_len:
                raise AnalysisBound("analysis bound reached: sequence too long")
            if isinstance(value, (set, frozenset)):
                try:
                    return sorted(value, key=_stable_key)
                except TypeError:
                    return list(value)
            return list(value)
        if isinstance(value, dict):
            return list(value.keys())
        if isinstance(value, Class) and "enum" in value.flags:
            return list(value.ns.get("__members_list__", []))
        if isinstance(value, HFConfig):
            return list(value.attrs.keys())
        if isinstance(value, Unknown):
            raise Unmodelled(f"iteration over an unknown value ({value.reason})")
        if isinstance(value, Instance):
            found, meth = value.cls.lookup("__iter__")
            if found:
                it = self.call(self.bind(meth, value, value.cls), [], {})
                return self.iterate(it, frame, line)
            if SEQUENCE_ITEMS in value.attrs:
                return list(value.attrs[SEQUENCE_ITEMS])
        native = self.natives.iterate_native(self, value)
        if native is not None:
            return native
        if isinstance(value, SCALARS):
            # a scalar on purpose: CPython's own TypeError for it
            self.data_op(lambda: iter(value))  # type: ignore[call-overload]  # TypeError: 'int' object is not iterable
        # a native caller has no line (0): the stop reason names where evaluation stopped
        raise Unmodelled(f"iteration over {type(value).__name__} ({value!r})" + (f" at line {line}" if line else ""))

    def mapping_items(self, value: Any) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        if isinstance(value, HFConfig):
            return dict(value.attrs)
        if isinstance(value, Instance):
            return dict(value.attrs)
        raise Unmodelled(f"** of {type(value).__name__}")

