"""A config class's initialiser run by the interpreter on one config.json (issue #23, issue 40).

``hfconfig/configclass.py`` finds the class and the body that computes an attribute
(``Computed``); this module runs that body — the class's ``__init__``/``__post_init__`` and, for
a transformers 5 class, the statement of ``PreTrainedConfig``'s initialiser that turns
config.json's rope keys into ``rope_parameters`` with the methods it calls
(``rules/hf_config.toml [transformers_rope]``) — on the same interpreter that runs SGLang, in a
world of its own: no device, no files, and module globals holding only what is listed below.
The class object is not built (transformers' class decorators, its package ``__init__`` and
``PreTrainedConfig``'s whole initialiser are not run); what stands in for it is declared here:

- ``self`` is a ``ConfigSelf``: the object as the initialiser sees it. The class's own body
  reads config.json's value or the class default for an attribute not yet assigned (``attr_of``,
  as before the base class runs); a method of the base machinery, and ``getattr``/``hasattr`` on
  the object, read only what is set at that point (what was assigned, the dataclass fields,
  literal class attributes), because ``PreTrainedConfig`` sets config.json's remaining keys
  last (configuration_utils.py, the ``setattr(self, key, value)`` loop over ``kwargs`` at the
  end of its initialiser: 5.19.0 configuration_utils.py:377-381). ``attribute_map`` aliases
  apply there as ``PreTrainedConfig.__setattr__``/``__getattribute__`` do (5.19.0 lines
  517-525). Those are a stand-in, not run from the wheel: they call ``object``'s
  ``__getattribute__`` on a class object the interpreter does not build (the dataclass and
  ``huggingface_hub`` ``@strict`` decorators, ``PreTrainedConfig``'s module importing torch
  and the hub client).
- ``super().__init__``/``super().__post_init__`` from the initialiser copy what they are passed
  (the base classes' own defaults are ``Computed.inherited``), after running the rope
  conversion statement on the keys its ``**kwargs`` receives; ``super().m()`` in a base method
  continues along the MRO the wheel defines (``Members.chain``).
- calls that only log or check (``logger.``, ``warnings.warn``, the rope validators,
  ``rules/hf_config.toml`` ``checks``) do nothing.
- the module's own names the run can use: for SGLang's class, the plain data and own functions
  of its module as the release's evaluation left it (``own_globals``); for a transformers class,
  its module's literal constants and the functions it imports that only check
  (``members.check_only``, ``run_check``).

Anything the interpreter cannot decide (a branch on an unknown, a name the module does
not bind here, a bound reached) stops the run with its ``file:line``; an assignment in the class's
own body that stops makes only its target unknown (the rest of the body still runs). The
caller answers ``unknown`` naming where it stopped.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.bounds import Bounds
from sglang_audit.evaluate.interpreter import (
    Frame,
    Interpreter,
    PyRaise,
    Unmodelled,
    function_locals,
)
from sglang_audit.evaluate.values import (
    AnalysisBound,
    Class,
    Function,
    Instance,
    ModuleObj,
    Native,
    Scope,
    Unknown,
)
from sglang_audit.frontend import ir
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.hfconfig.members import NOT_LITERAL, PLAIN, CheckFunction, literal

if TYPE_CHECKING:
    from sglang_audit.hfconfig.configclass import Computed, ConfigClass

# bounds of one run: a config initialiser is short; config.json is untrusted input, so a list
# as long as it says (["dense"] * num_hidden_layers) is refused past this length
_BOUNDS = Bounds(max_steps=20_000, max_depth=60, max_loop=100_000, max_seq_len=100_000, max_int_bits=256)
# callees that only log or check, whatever the class (the rope block's own are in the facts)
SKIPPED_CALLS = ("logger.", "warnings.warn", "rope_config_validation", "self._rope_scaling_validation")
_ROPE_NAMES = ("rope_scaling", "rope_parameters")
NOT_SET = object()  # the body did not set the attribute on this config.json (a branch not taken)
_INITIALISERS = ("__init__", "__post_init__")


# the world config code runs in, made by ``world/native.py`` (which imports this module through
# the boundaries, so it registers the factory instead of being imported here)
_WORLD_FACTORY: list[Callable[[], Any]] = []


def register_world(factory: Callable[[], Any]) -> None:
    _WORLD_FACTORY[:] = [factory]
    _world.cache_clear()


@functools.cache
def _world() -> Any:
    if not _WORLD_FACTORY:
        raise RuntimeError("world/native.py registers the config world; import it first")
    return _WORLD_FACTORY[0]()


class _Silent:
    """A logger or ``warnings`` stand-in: every attribute is a call that does nothing."""

    def native_attr(self, interp: Interpreter, name: str) -> Any:
        return _NOOP


_NOOP = Native("no-op (a log line or a check)", lambda i, a, k: None)


@dataclass
class _Run:
    """One run of ``recipe`` on config.json's keys ``given``."""

    recipe: Computed
    given: Mapping[str, Any]
    attr_of: Callable[[str], Any]
    state: dict[str, Any] = field(default_factory=dict)
    strict: list[bool] = field(default_factory=lambda: [False])  # the reads' mode, innermost last
    leftover: dict[str, Any] | None = None  # config.json keys the rope conversion left
    rope_unknown: str | None = None  # the super() call is not the one holding the conversion

    def __post_init__(self) -> None:
        self.interp = Interpreter(Path("."), SourceCache(use_disk=False), _world(), {}, _BOUNDS)
        self.obj = ConfigSelf(self)
        rope = self.recipe.rope
        own = self.recipe.members
        self.members = rope.members.then(own) if rope is not None else own
        self.checks = SKIPPED_CALLS + (rope.checks if rope is not None else ())
        self.modules: dict[str, ModuleObj] = {}
        self.at = (self.recipe.file, self.recipe.func.line)  # the initialiser's statement being run
        self.classes: dict[str, Class] = {}
        # the class chain as interpreter classes (most derived first): their methods, for
        # ``super().m()``; the initialisers past the running one are ``super_call``
        chain = self.members.chain
        top = Class("<bases>", (), {m: Native(f"super().{m}", functools.partial(self.super_call, m), bind_self=True)
                                    for m in _INITIALISERS}, None)
        below: Class = top
        for cls_name, methods in reversed(chain):
            klass = Class(cls_name, (below,), {}, None)
            for mname, (mfile, node) in methods.items():
                if mname not in _INITIALISERS:
                    klass.ns[mname] = Native(f"{cls_name}.{mname}", functools.partial(self.call_method, mfile, node, klass),
                                             bind_self=True)
            self.classes[cls_name] = klass
            below = klass
        self.init_class = Class("<initialiser>", (top,), {}, None)

    # ---- the code's module: what it binds that the run can use, and the stand-ins ----------
    def module(self, file: str) -> ModuleObj:
        mod = self.modules.get(file)
        if mod is None:
            mod = self.modules[file] = ModuleObj(f"<config class {file}>", file, False)
            mod.loaded = True
            evaluated = self.recipe.modules.get(file)
            if evaluated is not None:
                mod.globals.update(self.own_globals(evaluated, mod))
            for name, value in self.recipe.constants.get(file, {}).items():
                mod.globals[name] = _own(value)  # a transformers module's literal constants
            for name, check in self.recipe.checks.get(file, {}).items():
                mod.globals[name] = Native(name, functools.partial(self.run_check, check))
            for callee in self.checks:
                name = callee.split(".")[0]
                if name != "self":
                    mod.globals[name] = _Silent() if "." in callee else _NOOP
            # getattr/hasattr on the object read what is set on it at that point
            for name in ("getattr", "hasattr"):
                mod.globals[name] = Native(name, functools.partial(self.strict_builtin, name))
        return mod

    def own_globals(self, evaluated: ModuleObj, mod: ModuleObj) -> dict[str, Any]:
        """What SGLang's module (as the release's evaluation left it) binds that the run can
        use without importing: plain data, and the module's own functions, run here in ``mod``
        (so nothing they read is resolved, or written, in the release's interpreter). Any other
        name is left unbound: the run stops there naming the line."""
        out: dict[str, Any] = {}
        for name, value in evaluated.globals.items():
            if isinstance(value, Function) and value.module is evaluated and not value.is_lambda:
                out[name] = replace(value, module=mod, interp=self.interp, attrs=dict(value.attrs))
            elif _not_plain(value) is None:
                out[name] = _own(value)
        return out

    def run_check(self, check: CheckFunction, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> None:
        """A function that only checks (``members.check_only``): run in its own module's
        literal constants. It sets nothing, so a run that stops inside it (a name it cannot
        bind, a branch on an unknown) goes on past the call; a raise of its own is the class
        refusing this config.json, and stops the run with its line."""
        mod = self.module(check.file)
        for name, value in check.constants.items():
            mod.globals.setdefault(name, _own(value))
        fn = self.function(check.file, check.func, self.init_class)
        try:
            interp.call(fn, args, kwargs)
        except PyRaise as exc:
            if exc.explicit:
                raise
        except (Unmodelled, AnalysisBound):
            pass
        return None

    def function(self, file: str, node: Any, owner: Class) -> Function:
        defaults = {}
        for p in node.params:
            value = literal(p.default) if p.default is not None else NOT_LITERAL
            if value is not NOT_LITERAL:
                defaults[p.name] = value  # a default not a literal: the caller must pass it
        fn = Function(name=node.name, qualname=f"{owner.name}.{node.name}", params=node.params, body=node.body,
                      module=self.module(file), closure=None, defaults=defaults, line=node.line, interp=self.interp)
        fn.attrs["__class__"] = owner  # what zero-argument super() starts after
        return fn

    def strict_builtin(self, name: str, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        on_self = bool(args) and args[0] is self.obj
        if on_self and name == "hasattr" and len(args) == 2 and isinstance(args[1], str):
            return self.has(args[1])
        if on_self:
            self.strict.append(True)
        try:
            return interp.call(interp.builtins[name], args, kwargs)
        finally:
            if on_self:
                self.strict.pop()

    # ---- self ------------------------------------------------------------------------------
    def alias(self, name: str) -> str:
        return self.recipe.attribute_map.get(name, name)

    def is_field(self, name: str) -> bool:
        # a v5 dataclass field is set by the generated __init__ before __post_init__ runs
        return self.recipe.func.name == "__post_init__" and name in self.members.fields

    def read(self, interp: Interpreter, name: str) -> Any:
        strict = self.strict[-1]
        if f"self.{name}" in self.checks:
            return _NOOP  # a check or a log line of the base machinery
        key = self.alias(name) if strict else name
        if self.alias(name) in self.state:
            # PretrainedConfig's __getattribute__ maps an alias to what __setattr__ set
            return self.state[self.alias(name)]
        found = self.members.method(key)
        if found is not None:
            return self.method(key, *found)
        recipe = self.recipe
        if not strict:
            if name not in self.given and name in recipe.fields:
                return _own(recipe.fields[name])
            if name not in self.given and name in recipe.inherited:
                return _own(recipe.inherited[name])  # set by the base class (unknown if it computes it)
            return _own(self.attr_of(name))
        members = self.members
        if self.is_field(key):
            if key in self.given:
                return _own(self.given[key])
            if key in recipe.fields:
                return _own(recipe.fields[key])
            return Unknown(f"the field {key}'s default is not a literal")
        if key in members.properties:
            return Unknown(f"property {key} not evaluated")
        if key in members.values:
            value = members.values[key]
            return Unknown(f"class attribute {key} is not a literal") if value is NOT_LITERAL else _own(value)
        has = self.has(key)
        if has is not False:
            return has if isinstance(has, Unknown) else Unknown(f"self.{key} not evaluated")
        raise interp.make_raise("AttributeError", f"self.{key} is not set here")

    def has(self, name: str) -> Any:
        """``hasattr(self, name)``: set on the object at this point, or defined by its classes."""
        key = self.alias(name)
        if key in self.state or self.is_field(key) or key in self.members.names:
            return True
        rope = self.recipe.rope
        hooks = [h for h in self.members.getattr_hooks if h not in (rope.plain_hooks if rope else ())]
        return Unknown(f"{hooks[0]} defines its own attribute lookup") if hooks else False

    def write(self, name: str, value: Any) -> None:
        # PretrainedConfig's __setattr__ maps attribute_map aliases in every initialiser, the
        # class's own body included (4.57.1 configuration_utils.py:199-202, 5.19.0:517-520)
        self.state[self.alias(name)] = value

    def method(self, name: str, owner: str, file: str, node: Any) -> Any:
        if node.decorators:
            return Unknown(f"self.{name}() is decorated")
        bound = self.classes[owner].ns.get(name)
        return Native(f"self.{name}", lambda i, a, k: i.call(bound, [self.obj, *a], k))

    def call_method(self, file: str, node: Any, owner: Class, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """A method of the class chain or of PreTrainedConfig's MRO, run with strict reads."""
        self.strict.append(True)
        try:
            return interp.call(self.function(file, node, owner), args, kwargs)
        finally:
            self.strict.pop()

    # ---- super().__init__/__post_init__ from the initialiser ------------------------------
    def super_call(self, called: str, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> None:
        """The base classes copy what they are passed (a base that computes an attribute has an
        unknown in ``inherited``, which stays unknown). For a transformers 5 class
        PreTrainedConfig's rope conversion runs first on what its ``**kwargs`` receives; the
        keys it leaves become attributes after it, as PreTrainedConfig sets them at its end."""
        if len(args) > 1:
            raise Unmodelled("super() call with positional arguments")
        passed = dict(kwargs)
        rope = self.recipe.rope
        if rope is not None and rope.why_not is None:
            if called != rope.func.name:
                self.rope_unknown = f"super().{called} is called, while the conversion is in {rope.where}"
            else:
                passed = self.convert(passed)
        for attr, value in passed.items():
            base = self.recipe.inherited.get(attr)
            self.state[attr] = base if isinstance(base, Unknown) else value

    def convert(self, passed: dict[str, Any]) -> dict[str, Any]:
        rope = self.recipe.rope
        assert rope is not None
        params = rope.func.params[1:] if rope.func.params else []
        star = next((p.name for p in params if p.star == "**"), None)
        if star is None:
            raise Unmodelled(f"{rope.where} takes no **kwargs")
        named = {p.name for p in params if p.star in ("", "kwonly")}
        # the class on the chain whose initialiser holds the conversion (for its super() calls)
        owner = next((self.classes[c] for c, methods in self.members.chain
                      if any(node is rope.func for _f, node in methods.values())), self.init_class)
        func = self.function(rope.file, rope.func, owner)
        scope = Scope(local_names=function_locals(rope.func.body))
        scope.vars[rope.func.params[0].name if rope.func.params else "self"] = self.obj
        scope.vars[star] = {k: v for k, v in passed.items() if k not in named}
        self.strict.append(True)
        try:
            self.interp.exec_block([rope.block], Frame(module=func.module, scope=scope, func=func, depth=1))
        finally:
            self.strict.pop()
        left = scope.vars.get(star)
        if not isinstance(left, dict):
            raise Unmodelled(f"the conversion left no keyword mapping ({rope.file}:{rope.block.line})")
        self.leftover = left
        return {**{k: v for k, v in passed.items() if k in named}, **left}

    # ---- the initialiser ------------------------------------------------------------------
    def run(self) -> None:
        recipe = self.recipe
        func = self.function(recipe.file, recipe.func, self.init_class)
        scope = Scope(local_names=function_locals(recipe.func.body))
        for pname, default in recipe.params.items():
            if pname in self.given and recipe.func.name == "__init__":
                scope.vars[pname] = _own(self.given[pname])
            else:
                scope.vars[pname] = default if default is not NOT_LITERAL else Unknown(
                    f"{pname}'s default is not a literal ({recipe.file}:{recipe.func.line})")
        if recipe.kwargs:
            named = set(recipe.params)
            if recipe.func.name == "__post_init__":
                named |= self.members.fields  # the dataclass __init__ took the fields
            scope.vars[recipe.kwargs] = {k: _own(v) for k, v in self.given.items() if k not in named}
        scope.vars[recipe.func.params[0].name if recipe.func.params else "self"] = self.obj
        frame = Frame(module=func.module, scope=scope, func=func, depth=1)
        with self.interp.filtered_decisions(_refuse):
            self.own_block(recipe.func.body, frame)

    def own_block(self, body: list[Any], frame: Frame) -> bool:
        """The class's own body: the interpreter runs each statement; an ``if`` is followed
        into the branch its test takes, so an assignment that stops inside it still taints
        only its target. False once a ``return`` ends the body."""
        for stmt in body:
            self.at = (frame.module.file, stmt.line)
            if isinstance(stmt, ir.If):
                test = self.interp.evaluate(stmt.test, frame)
                truth = self.interp.truth(test, frame, stmt.line, "if")
                if not self.own_block(stmt.body if truth else stmt.orelse, frame):
                    return False
            elif isinstance(stmt, ir.Return):
                return False
            elif isinstance(stmt, ir.Assign) and len(stmt.targets) == 1 and _taintable(stmt.targets[0], frame):
                try:
                    self.interp.exec_block([stmt], frame)
                except (Unmodelled, AnalysisBound, PyRaise) as exc:
                    value = Unknown(f"not evaluated past {_where(exc, frame.module.file, stmt.line)} ({_why(exc)})")
                    target = stmt.targets[0]
                    if isinstance(target, ir.Name):
                        assert frame.scope is not None
                        frame.scope.vars[target.id] = value
                    else:
                        self.write(target.attr, value)
            else:
                self.interp.exec_block([stmt], frame)
        return True


class ConfigSelf:
    """The config object while its initialiser runs (``_Run`` answers its attributes)."""

    def __init__(self, run: _Run) -> None:
        self._run = run

    def native_attr(self, interp: Interpreter, name: str) -> Any:
        return self._run.read(interp, name)

    def set_native_attr(self, interp: Interpreter, name: str, value: Any) -> None:
        self._run.write(name, value)


def _taintable(target: Any, frame: Frame) -> bool:
    if isinstance(target, ir.Name):
        return True
    self_name = frame.func.params[0].name if frame.func is not None and frame.func.params else "self"
    return isinstance(target, ir.Attribute) and isinstance(target.value, ir.Name) and target.value.id == self_name


def _refuse(value: Unknown, file: str, line: int, text: str) -> bool | None:
    exc = Unmodelled(f"a branch on an unknown: {value.reason}")
    exc.where = f"{file}:{line}"  # type: ignore[attr-defined]
    raise exc


def _where(exc: BaseException, file: str, line: int) -> str:
    """Where the run stopped: an explicit raise's line, the innermost statement the
    interpreter names, else the statement of the initialiser being run (an evaluator-made
    raise, a NameError, is placed only approximately by the interpreter)."""
    if isinstance(exc, PyRaise):
        return f"{exc.file}:{exc.line}" if exc.explicit else f"{file}:{line}"
    return getattr(exc, "where", None) or f"{file}:{line}"


def _why(exc: BaseException) -> str:
    if isinstance(exc, PyRaise):
        inst = exc.exc
        name = inst.cls.name if isinstance(inst, Instance) else type(inst).__name__
        args = inst.attrs.get("args") if isinstance(inst, Instance) else None
        message = args[0] if isinstance(args, tuple | list) and args else ""
        return f"{name}: {message}" if message else name
    return str(exc)


def _own(value: Any) -> Any:
    """The run's own copy of plain data (the code mutates dicts it reads: config.json's and
    the class defaults must not change); other objects as they are."""
    return copy.deepcopy(value) if isinstance(value, list | dict | set) else value


def computed_value(found: ConfigClass, name: str, given: Mapping[str, Any], attr_of: Callable[[str], Any]) -> Any:
    """``name`` as the config class computes it for this config.json (``given``): its
    __init__/__post_init__ run by the interpreter, ``self.Y`` read through ``attr_of``; for a
    transformers 5 class, PreTrainedConfig's rope conversion from the wheel with it. The unknown
    in ``found.defaults`` (naming the class's line) with where the run stopped, when it did."""
    recipe = found.computed.get(name)
    fallback = found.defaults.get(name)
    if recipe is None:
        return fallback
    reason = fallback.reason if isinstance(fallback, Unknown) else f"config.json omits {name!r}"
    key = fallback.key if isinstance(fallback, Unknown) else None
    rope = recipe.rope
    converts = recipe.transformers and name in _ROPE_NAMES
    gives = "/".join(k for k in _ROPE_NAMES if k in given)
    if converts and gives and (rope is None or rope.why_not is not None):
        # transformers 5's PreTrainedConfig renames config.json's rope_scaling to
        # rope_parameters itself (configuration_utils.py convert_rope_params_to_dict)
        why = f" ({rope.why_not})" if rope is not None else ""
        return Unknown(f"{reason}; config.json gives {gives}, which transformers' PreTrainedConfig converts "
                       f"(not evaluated{why})", key)
    run = _Run(recipe, given, attr_of)
    try:
        run.run()
    except (Unmodelled, AnalysisBound, PyRaise) as exc:
        where = _where(exc, *run.at)
        return Unknown(f"{reason}; not evaluated past {where} ({_why(exc)})", key)
    except RecursionError:
        return fallback
    if converts and run.rope_unknown is not None:
        return Unknown(f"{reason}; PreTrainedConfig's rope conversion not evaluated ({run.rope_unknown})", key)
    if converts and run.leftover is not None and any(k in run.leftover for k in _ROPE_NAMES):
        # PreTrainedConfig sets the keys its conversion left as attributes afterwards
        return Unknown(f"{reason}; config.json's {'/'.join(k for k in _ROPE_NAMES if k in run.leftover)} is set "
                       f"again after PreTrainedConfig's rope conversion (not evaluated)", key)
    if run.alias(name) not in run.state:
        # the body did not set it on this config.json (a branch not taken): not an attribute
        # of this class here; the caller goes on as for any missing attribute
        return NOT_SET
    value = run.state[run.alias(name)]
    unknown = _not_plain(value)
    if unknown is not None:
        return Unknown(f"{reason}; {unknown}", key)
    return copy.deepcopy(value)


def _not_plain(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` is not plain data (an unknown in it, or an evaluator object), or None."""
    if isinstance(value, Unknown):
        return value.reason
    if not isinstance(value, PLAIN) or depth > 20:
        return f"{type(value).__name__} is not plain data"
    items = value.items() if isinstance(value, dict) else () if isinstance(value, str) else \
        ((v, v) for v in value) if isinstance(value, list | tuple | set | frozenset) else ()
    for k, v in items:
        why = _not_plain(k, depth + 1) or _not_plain(v, depth + 1)
        if why is not None:
            return why
    return None


__all__ = ["NOT_SET", "ConfigSelf", "computed_value"]
