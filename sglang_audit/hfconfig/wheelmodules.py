"""What a module of the transformers wheel binds that a config class's initialiser may use,
read (never imported) from the wheel: its constants, the functions it imports that only check
(``members.check_only``), and field defaults made by a validator factory
(``rules/hf_config.toml`` ``field_factories``). ``configclass`` attaches them to a class's
``Computed``; ``world/configrun.py`` binds them in the run's module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sglang_audit import factfiles
from sglang_audit.frontend import ir
from sglang_audit.frontend.bindings import bound_names
from sglang_audit.hfconfig.members import NOT_LITERAL, CheckFunction, check_only, dotted, literal


class WheelModules:
    """One wheel's modules as config classes' runs see them, each read once."""

    def __init__(self, wheel: Any, load: Callable[[str], Any]) -> None:
        self.wheel = wheel
        self.load = load
        self._checks: dict[str, Mapping[str, CheckFunction]] = {}
        self._constants: dict[str, Mapping[str, Any]] = {}
        self._factories: dict[tuple[str, str], bool] = {}

    def tree(self, member: str) -> Any:
        text = self.wheel.read(member)
        try:
            return self.load(text) if text is not None else None
        except Exception:  # noqa: BLE001 - a member libcst refuses is not read
            return None

    def constants(self, file: str) -> Mapping[str, Any]:
        member = file.split(" ")[-1]  # the class's own file is labelled "transformers==V path"
        if member not in self._constants:
            self._constants[member] = constants(self.tree(member))
        return self._constants[member]

    def checks(self, file: str) -> Mapping[str, CheckFunction]:
        """The names module ``file`` imports (``from ..x import f``) that are functions only
        checking (``members.check_only``)."""
        member = file.split(" ")[-1]
        if member not in self._checks:
            out: dict[str, CheckFunction] = {}
            for stmt in getattr(self.tree(member), "body", []):
                if stmt.kind != "ImportFrom" or not isinstance(stmt.names, list) or stmt.level < 1:
                    continue
                for real, alias in stmt.names:
                    found = wheel_def(self.wheel, self.load, member, alias or real, "FunctionDef")
                    if found is not None and check_only(found[0]):
                        out[alias or real] = CheckFunction(found[1], found[0], constants(found[2]))
            self._checks[member] = out
        return self._checks[member]

    def field_default(self, value: Any, file: str) -> Any:
        """``F(...)(default=D)``: the field's default is the literal D when F, as module ``file``
        of the wheel sees it, returns a function it made with a declared field factory
        (``rules/hf_config.toml`` ``field_factories``: 5.x's ``interval``); else NOT_LITERAL."""
        if value.kind != "Call" or value.func.kind != "Call" or value.func.func.kind != "Name" \
                or len(value.args) != 1 or value.args[0][0] != "default":
            return NOT_LITERAL
        default = literal(value.args[0][1])
        if default is NOT_LITERAL or isinstance(default, list | dict | set):
            return NOT_LITERAL  # a mutable default is refused by dataclasses itself
        key = (file.split(" ")[-1], value.func.func.id)
        if key not in self._factories:
            found = wheel_def(self.wheel, self.load, key[0], key[1], "FunctionDef")
            self._factories[key] = found is not None and makes_field(found[0], found[2])
        return default if self._factories[key] else NOT_LITERAL


def makes_field(func: Any, tree: Any) -> bool:
    """Whether ``func`` ends by returning a function of its own body decorated with a declared
    field factory that its module imports from the declared module."""
    factories = factfiles.hf_config().field_factories
    imported = {f"{stmt.module}.{real}": alias or real for stmt in tree.body
                if stmt.kind == "ImportFrom" and stmt.level == 0 and isinstance(stmt.names, list)
                for real, alias in stmt.names}
    names = {imported[f] for f in factories if f in imported}
    last = func.body[-1] if func.body else None
    if not names or last is None or last.kind != "Return" or last.value is None or last.value.kind != "Name":
        return False
    inner = [s for s in func.body if s.kind == "FunctionDef" and s.name == last.value.id]
    rebound = [s for s in ir.walk(func.body) if s.kind in ("Assign", "AugAssign", "AnnAssign")
               and any(t.kind == "Name" and t.id == last.value.id for t in (s.targets if s.kind == "Assign" else [s.target]))]
    decorators = inner[0].decorators if len(inner) == 1 else []
    return not rebound and len(decorators) == 1 and dotted(decorators[0]) in names


def constants(tree: Any) -> dict[str, Any]:
    """A module's constants: names its body binds once, by a top-level ``NAME = <literal>``
    (a name bound again anywhere at module level, or a ``from x import *``, is not one)."""
    out: dict[str, Any] = {}
    seen: dict[str, int] = {}
    for stmt in getattr(tree, "body", []):
        if stmt.kind == "ImportFrom" and stmt.names == "*":
            return {}
        for name in bound_names(stmt):
            seen[name] = seen.get(name, 0) + 1
        if stmt.kind == "Assign" and len(stmt.targets) == 1 and stmt.targets[0].kind == "Name":
            value = literal(stmt.value)
            if value is not NOT_LITERAL:
                out[stmt.targets[0].id] = value
    return {k: v for k, v in out.items() if seen.get(k) == 1}


def relative_module(file: str, level: int, module: str | None) -> str | None:
    """The wheel path (no suffix) of ``from <level dots><module> import ...`` in member
    ``file``, e.g. ``..llama.configuration_llama`` in ``transformers/models/x/c.py``."""
    package = file.split("/")[:-1]
    if level < 1 or level > len(package):
        return None
    return "/".join(package[: len(package) - level + 1] + (module.split(".") if module else []))


def wheel_def(wheel: Any, load: Callable[[str], Any], file: str, name: str, kind: str, depth: int = 0) -> tuple[Any, str, Any] | None:
    """The class or function (``kind``) ``name`` as module ``file`` of the wheel sees it,
    with the member defining it and that member's tree."""
    text = wheel.read(file)
    if text is None or depth > 6:
        return None
    try:
        tree = load(text)
    except Exception:  # noqa: BLE001 - a member libcst refuses is not read
        return None
    for stmt in tree.body:
        if stmt.kind == kind and stmt.name == name:
            return stmt, file, tree
    for stmt in tree.body:
        if stmt.kind == "ImportFrom" and isinstance(stmt.names, list) and stmt.level >= 1:
            real = next((n for n, a in stmt.names if (a or n) == name), None)
            if real is None:
                continue
            base = relative_module(file, stmt.level, stmt.module)
            if base is None:
                return None
            for target in (base + ".py", base + "/__init__.py"):
                if wheel.read(target) is not None:
                    return wheel_def(wheel, load, target, real, kind, depth + 1)
            return None
    return None


__all__ = ["WheelModules", "constants", "makes_field", "relative_module", "wheel_def"]
