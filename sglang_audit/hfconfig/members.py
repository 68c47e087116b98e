"""What a config class's source declares, read without running it: the members of a class
chain (``Members``: class attributes, fields, properties, methods, attribute hooks), where
transformers 5's ``PreTrainedConfig`` converts the rope keys (``RopeBase``), literal defaults
and callees as written. ``configclass`` fills these from the source; ``world/configrun.py``
runs the code they point at on the interpreter.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sglang_audit.frontend import ir

NOT_LITERAL = object()
PLAIN = (int, float, str, bool, type(None), list, tuple, dict, set, frozenset)


@dataclass(frozen=True)
class Members:
    """What a chain of class bodies defines (a later class overriding an earlier one)."""

    values: Mapping[str, Any] = field(default_factory=dict)  # class attribute -> literal (NOT_LITERAL otherwise)
    properties: frozenset[str] = frozenset()
    fields: frozenset[str] = frozenset()  # annotated (dataclass) fields
    getattr_hooks: tuple[str, ...] = ()  # classes defining __getattribute__/__getattr__
    # each class's own methods (name -> (file, ir.FunctionDef)), most derived first: what
    # ``self.m`` finds and where ``super().m()`` continues
    chain: tuple[tuple[str, Mapping[str, tuple[str, Any]]], ...] = ()

    @functools.cached_property
    def methods(self) -> dict[str, tuple[str, Any]]:
        """name -> (file, def) as ``self.name`` finds it."""
        out: dict[str, tuple[str, Any]] = {}
        for _cls, methods in reversed(self.chain):
            out.update(methods)
        return out

    @functools.cached_property
    def names(self) -> frozenset[str]:
        return frozenset(self.values) | frozenset(self.methods) | self.properties | self.fields

    def then(self, later: Members) -> Members:
        return Members({**self.values, **later.values}, (self.properties - later.names) | later.properties,
                       self.fields | later.fields, self.getattr_hooks + later.getattr_hooks, later.chain + self.chain)

    def method(self, name: str, after: str | None = None) -> tuple[str, str, Any] | None:
        """(class, file, def) of ``name`` as ``self.name`` finds it, or as ``super().name``
        does from class ``after``."""
        seen = after is None
        for cls, methods in self.chain:
            if seen and name in methods:
                return (cls, *methods[name])
            seen = seen or cls == after
        return None


@dataclass(frozen=True)
class RopeBase:
    """transformers' PreTrainedConfig as its rope conversion needs it, read from the wheel."""

    where: str  # e.g. "transformers==5.19.0 transformers/configuration_utils.py:314 PreTrainedConfig.__post_init__"
    file: str
    func: Any  # the initialiser holding the conversion (ir.FunctionDef)
    block: Any  # its top-level statement that calls the converter
    members: Members  # over PreTrainedConfig's MRO (its bases first)
    checks: tuple[str, ...] = ()  # calls that only check or log (rules/hf_config.toml)
    plain_hooks: tuple[str, ...] = ()  # classes whose __getattribute__ leaves these reads plain (same file)
    why_not: str | None = None  # the conversion cannot be evaluated: why


@dataclass(frozen=True)
class CheckFunction:
    """A module-level function of the wheel that only checks (``check_only``), with the
    literal constants of its module it may read."""

    file: str  # its wheel member
    func: Any  # ir.FunctionDef
    constants: Mapping[str, Any] = field(default_factory=dict)


# calls a check may make and still set nothing: builtins that only read what they are passed,
# and methods that return a new value without changing the object they are called on
_READ_BUILTINS = frozenset({"all", "any", "len", "isinstance", "issubclass", "str", "repr", "int", "float", "bool",
                            "sorted", "set", "list", "tuple", "dict", "frozenset", "range", "enumerate", "zip", "min",
                            "max", "sum", "abs", "type", "hasattr", "getattr", "callable"})
_READ_METHODS = frozenset({"join", "format", "keys", "values", "items", "get", "startswith", "endswith", "lower",
                           "upper", "strip", "split", "count", "index", "issubset", "issuperset", "difference",
                           "intersection", "union"})
_SILENT_PREFIXES = ("logger.", "warnings.warn")


def check_only(func: Any) -> bool:
    """Whether ``func`` (an ir.FunctionDef) only checks: it returns nothing, binds only its
    own locals and calls only what reads (``_READ_BUILTINS``/``_READ_METHODS``, an exception
    class, a log line), so a call of it either raises or does nothing (transformers 4.x's
    ``layer_type_validation``). Read from its code, whatever its name."""
    if func is None or func.kind != "FunctionDef" or func.decorators:
        return False
    for node in ir.walk(func.body):
        kind = node.kind
        if kind in ("Yield", "Await", "Global", "Nonlocal", "Delete", "FunctionDef", "ClassDef", "Lambda", "With",
                    "NamedExpr", "Import", "ImportFrom", "Unsupported", "UnsupportedExpr"):
            return False
        if kind == "Return" and node.value is not None and literal(node.value) is not None:
            return False
        if kind in ("Assign", "AugAssign", "AnnAssign", "For"):
            targets = node.targets if kind == "Assign" else [node.target]
            if any(n.kind not in ("Name", "TupleExpr", "ListExpr", "Starred") for n in ir.walk(list(targets))):
                return False  # an attribute or an item: it would change something
        if kind == "Call":
            callee = dotted(node.func)
            ok = (node.func.kind == "Name" and (callee in _READ_BUILTINS or callee.endswith(("Error", "Exception", "Warning"))))
            ok = ok or callee.startswith(_SILENT_PREFIXES)
            ok = ok or (node.func.kind == "Attribute" and node.func.attr in _READ_METHODS)
            if not ok:
                return False
    return True


def literal(node: Any) -> Any:
    """A literal default (numbers, strings, None/True/False, lists/tuples/dicts of them)."""
    if node is None:
        return NOT_LITERAL
    kind = node.kind
    if kind == "Const":
        return node.value
    if kind == "Name" and node.id in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[node.id]
    if kind == "UnaryOp" and node.op in ("-", "USub") and node.operand.kind == "Const" and isinstance(node.operand.value, (int, float)):
        return -node.operand.value
    if kind in ("ListExpr", "TupleExpr"):
        items = [literal(e) for e in node.elts]
        if any(i is NOT_LITERAL for i in items):
            return NOT_LITERAL
        return items if kind == "ListExpr" else tuple(items)
    if kind == "DictExpr":
        out = {}
        for k, v in node.items:
            kv, vv = literal(k), literal(v)
            if k is None or kv is NOT_LITERAL or vv is NOT_LITERAL:
                return NOT_LITERAL
            out[kv] = vv
        return out
    if kind == "Call" and node.func.kind == "Name" and node.func.id == "set" and not node.args:
        return set()  # `ignore_keys_at_rope_validation = set()`
    return NOT_LITERAL


def dotted(node: Any) -> str:
    """``logger.warning``, ``super().__init__``: a callee as written (enough to match a prefix)."""
    if node.kind == "Name":
        return node.id
    if node.kind == "Attribute":
        return f"{dotted(node.value)}.{node.attr}"
    if node.kind == "Call":
        return f"{dotted(node.func)}()"
    return "?"


__all__ = ["NOT_LITERAL", "PLAIN", "CheckFunction", "Members", "RopeBase", "check_only", "dotted", "literal"]
