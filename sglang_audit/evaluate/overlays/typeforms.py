"""``typing``: subscripted type forms, annotations as get_type_hints sees them, get_origin/
get_args. Annotations are evaluated lazily in their module, once per class."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from sglang_audit.evaluate.values import (
    NOT_HANDLED,
    Class,
    External,
    Instance,
    Native,
    TypeForm,
    Unknown,
)

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.evaluate.overlays.host import Host

NONE_TYPE = External("builtins.NoneType")
TYPING_NAMES = {"Annotated", "Optional", "Union", "List", "Dict", "Tuple", "Set", "Literal", "Callable", "Type", "FrozenSet", "Sequence", "Mapping", "Iterable"}


def origin_leaf(origin: Any) -> str:
    path = cast(str, getattr(origin, "path", None) or getattr(origin, "name", ""))
    return path.rsplit(".", 1)[-1]


def annotations_of(interp: Interpreter, cls: Class) -> dict[str, Any]:
    """The class's own annotations, evaluated in its module (like get_type_hints)."""
    assigned = cls.ns.get("__annotations__")
    if isinstance(assigned, dict):
        return assigned
    if cls.annotation_values is None:
        from sglang_audit.evaluate.interpreter import Frame, PyRaise, Unmodelled

        values: dict[str, Any] = {}
        for name, node in cls.annotation_nodes.items():
            try:
                values[name] = interp.evaluate(node, Frame(module=cls.module)) if cls.module else Unknown("annotation")
            except (PyRaise, Unmodelled) as exc:
                values[name] = Unknown(f"annotation of {cls.name}.{name} ({exc})")
        cls.annotation_values = values
    return cls.annotation_values


def type_hints(object_class: Class, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    target = args[0]
    cls = target.cls if isinstance(target, Instance) else target
    if not isinstance(cls, Class):
        return Unknown("get_type_hints of a non-class")
    out: dict[str, Any] = {}
    for klass in reversed(cls.mro()):
        if klass is object_class:
            continue
        for name, value in annotations_of(interp, klass).items():
            if not kwargs.get("include_extras") and isinstance(value, TypeForm) and origin_leaf(value.origin) == "Annotated":
                value = value.args[0]
            out[name] = value
    return out


def get_origin(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    tp = args[0]
    if isinstance(tp, TypeForm):
        leaf = origin_leaf(tp.origin)
        if leaf in ("List", "Dict", "Set", "Tuple", "FrozenSet", "Type"):
            return interp.builtins.get(leaf.lower(), tp.origin)
        return tp.origin
    if isinstance(tp, Unknown):
        return tp
    return None


def get_args(interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    tp = args[0]
    if isinstance(tp, TypeForm):
        return tuple(tp.args)
    if isinstance(tp, Unknown):
        return tp
    return ()


def external_item(interp: Interpreter, obj: Any, index: Any) -> Any:
    args = index if isinstance(index, tuple) else (index,)
    if isinstance(obj, External):
        leaf = obj.path.rsplit(".", 1)[-1]
        if leaf == "Optional":
            return TypeForm(External("typing.Union"), (args[0], NONE_TYPE))
        if obj.path.startswith(("typing", "collections")) or leaf in TYPING_NAMES:
            origin = External("typing.Annotated") if leaf == "Annotated" else obj
            return TypeForm(origin, tuple(args))
    if isinstance(obj, Native):
        return TypeForm(obj, tuple(args))  # a builtin generic such as list[int]
    return Unknown(f"subscript of {obj!r}")


def call_typing(path: str) -> Any:
    """A call of a typing construct (``Optional[int]``-style helpers called): the form itself."""
    if path.startswith("typing.") or path in ("typing_extensions.Literal",):
        return External(path)
    return NOT_HANDLED


def typing_attrs(host: Host) -> dict[str, Any]:
    def hints(i: Interpreter, a: list[Any], k: dict[str, Any]) -> Any:
        return type_hints(host.object_class, i, a, k)

    return {
        "typing.TYPE_CHECKING": False,
        "typing.cast": Native("cast", lambda i, a, k: a[1]),
        "typing.get_args": Native("get_args", get_args),
        "typing.get_origin": Native("get_origin", get_origin),
        "typing.get_type_hints": Native("get_type_hints", hints),
    }


def types_attrs(host: Host) -> dict[str, Any]:
    return {"types.NoneType": NONE_TYPE}


def typing_extensions_attrs(host: Host) -> dict[str, Any]:
    def hints(i: Interpreter, a: list[Any], k: dict[str, Any]) -> Any:
        return type_hints(host.object_class, i, a, k)

    return {
        "typing_extensions.get_args": Native("get_args", get_args),
        "typing_extensions.get_origin": Native("get_origin", get_origin),
        "typing_extensions.get_type_hints": Native("get_type_hints", hints),
    }
