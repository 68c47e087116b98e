"""Class semantics Python gets from the stdlib: dataclasses, enum, msgspec structs.

A dataclass's ``__init__`` records each field as given (a user flag) or defaulted (with the
declaration's line): that is where the evidence chain of a setting starts."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.overlays.common import plain as is_plain_data
from sglang_audit.evaluate.overlays.typeforms import annotations_of
from sglang_audit.evaluate.values import (
    Cached,
    Class,
    ClassMethod,
    External,
    FieldSpec,
    Function,
    Instance,
    Native,
    Property,
    StaticMethod,
    Unknown,
)

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.evaluate.overlays.host import Host

DC_MISSING = External("dataclasses.MISSING")
MSGSPEC_NODEFAULT = External("msgspec.NODEFAULT")


class EnumAuto:
    """``enum.auto()`` placeholder, numbered when the enum class is built."""


def class_special(interp: Interpreter, cls: Class, name: str) -> Any:
    if "enum" in cls.flags and name == "__members__":
        return {m.attrs["_name_"]: m for m in cls.ns.get("__members_list__", [])}
    if "enum" in cls.flags and name == "_value2member_map_":
        return {m.attrs["_value_"]: m for m in cls.ns.get("__members_list__", [])}
    if name == "__dataclass_fields__" and "dataclass" in cls.flags:
        return {f.attrs["name"]: f for f in dc_fields(interp, [cls], {})}
    if name == "__annotations__":
        return annotations_of(interp, cls)
    if name == "__struct_fields__" and "msgspec_struct" in cls.flags:
        return tuple(f for f, _, _ in dataclass_fields(cls))
    return None


# ---- dataclasses --------------------------------------------------------------------------
def dc_field(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    spec = FieldSpec()
    if "default" in kwargs:
        spec.default = kwargs["default"]
        spec.has_default = True
    if "default_factory" in kwargs:
        spec.default_factory = kwargs["default_factory"]
    if "init" in kwargs:
        spec.init = bool(kwargs["init"])
    return spec


def dataclass_fields(cls: Class) -> list[tuple[str, int, Class]]:
    """(name, line, owner) for each dataclass field, base classes first, as dataclasses does.

    Computed once per class (records are instantiated many thousand times in 0.5.20+)."""
    stamp = tuple(len(k.annotations) for k in cls.mro())
    if cls.dc_cache is not None and cls.dc_cache[0] == stamp:
        return cls.dc_cache[1]
    fields = _compute_dataclass_fields(cls)
    cls.dc_cache = (stamp, fields)
    return fields


def _compute_dataclass_fields(cls: Class) -> list[tuple[str, int, Class]]:
    seen: dict[str, tuple[str, int, Class]] = {}
    for klass in reversed(cls.mro()):
        if "dataclass" not in klass.flags:
            continue
        for name, line, ann in klass.annotations:
            if ann.startswith(("ClassVar", "typing.ClassVar", "InitVar")):
                continue
            seen[name] = (name, line, klass)
    return list(seen.values())


def dataclass_decorator(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    if not args:
        return Native("dataclass()", lambda i, a, k: dataclass_decorator(i, a, {}))
    cls = args[0]
    if not isinstance(cls, Class):
        return cls
    cls.flags.add("dataclass")
    found, init = cls.lookup("__init__")
    if not found or "__dataclass_init__" in getattr(init, "name", ""):
        cls.ns["__init__"] = Native("__dataclass_init__", dataclass_init, bind_self=True)
    return cls


def dataclass_default(interp: Interpreter, cls: Class, name: str) -> tuple[bool, Any]:
    found, value = cls.lookup(name)
    if not found:
        return False, None
    if isinstance(value, FieldSpec):
        if value.default_factory is not None:
            return True, interp.call(value.default_factory, [], {})
        if value.has_default:
            return True, value.default
        return False, None
    if isinstance(value, (list, dict, set)):
        return True, copy.copy(value)
    return True, value


def dataclass_init(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    obj: Instance = args[0]
    positional = list(args[1:])
    kwargs = dict(kwargs)
    cls = obj.cls
    for name, line, owner in dataclass_fields(cls):
        file = owner.module.file if owner.module else "?"
        spec_found, spec = cls.lookup(name)
        if isinstance(spec, FieldSpec) and not spec.init:
            ok, value = dataclass_default(interp, cls, name)
            if ok:
                obj.attrs[name] = value
            continue
        if positional:
            value = positional.pop(0)
            obj.attrs[name] = value
            obj.events[name] = interp.event("flag", name, value, file, line, f"{name} (given)")
        elif name in kwargs:
            value = kwargs.pop(name)
            obj.attrs[name] = value
            obj.events[name] = interp.event("flag", name, value, file, line, f"{name} (given)")
        else:
            ok, value = dataclass_default(interp, cls, name)
            if not ok:
                raise interp.make_raise("TypeError", f"{cls.name}.__init__() missing required argument: '{name}'")
            obj.attrs[name] = value
            obj.events[name] = interp.event("default", name, value, file, line, f"{name} default")
    if kwargs:
        raise interp.make_raise("TypeError", f"{cls.name}.__init__() got an unexpected keyword argument '{next(iter(kwargs))}'")
    found, post = cls.lookup("__post_init__")
    if found:
        interp.call(interp.bind(post, obj, cls), [], {})
    return None


def dc_fields(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    target = args[0]
    cls = target.cls if isinstance(target, Instance) else target
    if not isinstance(cls, Class):
        return Unknown("dataclasses.fields of a non-dataclass")
    field_cls = Class("Field", (), {}, None)
    out = []
    for name, _line, _owner in dataclass_fields(cls):
        f = Instance(field_cls)
        ok, default = dataclass_default(interp, cls, name)
        ann = annotations_of(interp, _owner).get(name, Unknown("field type"))
        spec_found, spec = cls.lookup(name)
        factory = spec.default_factory if isinstance(spec, FieldSpec) and spec.default_factory is not None else DC_MISSING
        if isinstance(spec, FieldSpec) and spec.default_factory is not None:
            ok, default = False, None
        f.attrs.update(name=name, default=default if ok else DC_MISSING, type=ann, default_factory=factory, metadata={}, init=True)
        out.append(f)
    return tuple(out)


def dc_replace(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    obj = args[0]
    if not isinstance(obj, Instance):
        return Unknown("dataclasses.replace")
    new = Instance(obj.cls)
    new.attrs = {**obj.attrs, **kwargs}
    new.events = dict(obj.events)
    return new


# ---- enums ------------------------------------------------------------------------------
def make_enum(interp: Interpreter, cls: Class) -> None:
    members: list[Instance] = []
    counter = 0
    if any(p.endswith("IntEnum") or p.endswith("IntFlag") or p == "int" for p in cls.external_bases):
        cls.flags.add("int_mixin")
    # the member values' data type when the class mixes one in and keeps its __new__
    # (a class defining __new__ makes its members from the tuple itself)
    own_new = any("__new__" in c.ns for c in cls.mro())
    mixin: type | None = None if own_new else int if "int_mixin" in cls.flags else str if "str_mixin" in cls.flags else None
    for name, value in list(cls.ns.items()):
        if name.startswith("_") or isinstance(value, (Function, StaticMethod, ClassMethod, Property, Native, Cached, Class)):
            continue
        if isinstance(value, Unknown) or isinstance(value, External):
            continue
        if isinstance(value, tuple) and mixin is not None and is_plain_data(value):
            # a data-type mixin's member value given as a tuple is the mixin's arguments:
            # EnumType builds `int(*value)` (SGLang's `class RoutingMethodType(IntEnum):
            # Default = (0,)` has the value 0, layers/moe/utils.py); a plain Enum keeps the tuple
            try:
                value = mixin(*value)
            except (TypeError, ValueError):
                pass  # CPython fails the class statement; the tuple stays (not a verdict)
        if isinstance(value, EnumAuto):
            counter += 1
            value = name.lower() if "str_mixin" in cls.flags else counter
        elif isinstance(value, int) and not isinstance(value, bool):
            counter = value
        existing = next((m for m in members if m.attrs["_value_"] == value and is_plain_data(value)), None)
        if existing is not None:  # an alias of an earlier member
            cls.ns[name] = existing
            continue
        member = Instance(cls)
        member.attrs.update(_name_=name, _value_=value, name=name, value=value)
        cls.ns[name] = member
        members.append(member)
    cls.ns["__members_list__"] = members

def enum_lookup(interp: Interpreter, cls: Class, args: list[Any]) -> Any:
    if not args:
        return Unknown("enum call without value")
    value = args[0]
    if isinstance(value, Unknown):
        return Unknown(value.reason, value.key)
    if isinstance(value, Instance) and value.cls.is_subclass_of(cls):
        return value
    plain = interp.plain_of(value)
    for m in cls.ns.get("__members_list__", []):
        if is_plain_data(plain) and m.attrs["_value_"] == plain and type(m.attrs["_value_"]) is not bool:
            return m
    found, missing = cls.lookup("_missing_")
    if found and isinstance(missing, ClassMethod):
        result = interp.call(missing.func, [cls, value], {})
        if result is not None:
            return result
    raised = interp.make_raise("ValueError", f"{plain!r} is not a valid {cls.name}")
    raised.explicit = True  # Enum's own check: SGLang's verdict on an unknown backend name
    raise raised

def enum_by_name(interp: Interpreter, cls: Class, name: Any) -> Any:
    for m in cls.ns.get("__members_list__", []):
        if m.attrs["_name_"] == name:
            return m
    raise interp.make_raise("KeyError", name)



# ---- msgspec structs (0.5.20+ ServerArgs) -------------------------------------------------
def class_created(interp: Interpreter, cls: Class) -> None:
    if any(p == "msgspec.Struct" or p.endswith(".Struct") and p.startswith("msgspec") for p in cls.external_bases) or (
        any("msgspec_struct" in b.flags for b in cls.bases if isinstance(b, Class))
    ):
        cls.flags |= {"dataclass", "msgspec_struct"}
        if "__init__" not in cls.ns:
            cls.ns["__init__"] = Native("__dataclass_init__", dataclass_init, bind_self=True)

def defstruct(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    name = args[0]
    fields = interp.iterate(args[1], None, 0) if len(args) > 1 else []
    ns = dict(kwargs.get("namespace") or {})
    bases = kwargs.get("bases") or ()
    real_bases = tuple(b for b in (bases if isinstance(bases, tuple) else ()) if isinstance(b, Class))
    module = None
    for v in ns.values():
        if isinstance(v, Function):
            module = v.module
            break
    cls = Class(str(name), real_bases, ns, module, 0)
    cls.flags |= {"dataclass", "msgspec_struct"}
    values: dict[str, Any] = {}
    for spec in fields:
        items = interp.iterate(spec, None, 0) if not isinstance(spec, str) else [spec]
        fname = items[0]
        ann = items[1] if len(items) > 1 else Unknown("field type")
        cls.annotations.append((fname, 0, ""))
        values[fname] = ann
        if len(items) > 2:
            ns[fname] = items[2]
        else:
            ns.pop(fname, None)
    cls.annotation_values = values
    ns["__init__"] = Native("__dataclass_init__", dataclass_init, bind_self=True)
    for v in ns.values():
        if isinstance(v, Function) and isinstance(v.attrs.get("__class__"), Class):
            v.attrs["__class__"] = cls  # zero-argument super() inside the new class
    return cls

def struct_fields(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    target = args[0]
    cls = target.cls if isinstance(target, Instance) else target
    if not isinstance(cls, Class):
        return Unknown("msgspec.structs.fields of a non-struct")
    out = []
    for f in dc_fields(interp, [cls], {}):
        info = Instance(Class("FieldInfo", (), {}, None))
        default = f.attrs["default"]
        factory = f.attrs["default_factory"]
        info.attrs.update(
            name=f.attrs["name"], encode_name=f.attrs["name"], type=f.attrs["type"],
            default=MSGSPEC_NODEFAULT if default is DC_MISSING else default,
            default_factory=MSGSPEC_NODEFAULT if factory is DC_MISSING else factory,
            required=default is DC_MISSING and factory is DC_MISSING,
        )
        out.append(info)
    return tuple(out)


def dataclasses_attrs(host: Host) -> dict[str, Any]:
    return {
        "dataclasses.MISSING": DC_MISSING,
        "dataclasses.dataclass": Native("dataclass", dataclass_decorator),
        "dataclasses.field": Native("field", dc_field),
        "dataclasses.fields": Native("fields", dc_fields),
        "dataclasses.asdict": Native("asdict", lambda i, a, k: dict(a[0].attrs) if isinstance(a[0], Instance) else Unknown("asdict")),
        "dataclasses.is_dataclass": Native("is_dataclass", lambda i, a, k: isinstance(a[0], (Instance, Class)) and "dataclass" in (a[0].cls.flags if isinstance(a[0], Instance) else a[0].flags)),
        "dataclasses.replace": Native("replace", dc_replace),
    }


def enum_attrs(host: Host) -> dict[str, Any]:
    return {"enum.auto": Native("enum.auto", lambda i, a, k: EnumAuto())}


def msgspec_attrs(host: Host) -> dict[str, Any]:
    return {
        "msgspec.defstruct": Native("msgspec.defstruct", defstruct),
        "msgspec.field": Native("msgspec.field", dc_field),
        "msgspec.NODEFAULT": MSGSPEC_NODEFAULT,
        "msgspec.UNSET": External("msgspec.UNSET"),
        "msgspec.structs.fields": Native("msgspec.structs.fields", struct_fields),
        "msgspec.structs.asdict": Native("msgspec.structs.asdict", lambda i, a, k: {f.attrs["name"]: a[0].attrs.get(f.attrs["name"]) for f in dc_fields(i, [a[0]], {})} if isinstance(a[0], Instance) else Unknown("asdict")),
        "msgspec.Struct.__setattr__": host.object_class.ns["__setattr__"],
        "msgspec.Struct.__getattribute__": host.object_class.ns["__getattribute__"],
        "msgspec.Struct.__init__": host.object_class.ns["__init__"],
    }
