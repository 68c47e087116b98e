"""The KV-cache memory pool a model runner builds (issue 42), for the attention stage's stand-in
runner (target and draft), by the release's own code.

Attention backends read the pool in their constructors (0.5.23 ``FlashInferAttnBackend``:
``self.token_to_kv_pool.get_kv_cache_quant_method()``, whose answer decides its KV-access
check). On the stand-in runner's first read of such an attribute (``rules/attention.toml``
``[runner.memory]``):

- a ``derived_attrs`` name (the KV dtype, the configurator) is set by evaluating the runner's
  own method that assigns it (found by its ``self.<name> =`` statement, a tuple target too),
  with whatever it reads of the runner known or unknown as the stand-in has it;
- the pool is what the configurator's ``builder`` method returns (the release's choice of
  MHATokenToKVPool, MLATokenToKVPool, SWAKVPool, ... from the model, the KV dtype, the page
  size), called with the keyword arguments its ``builder_caller`` passes, each evaluated from
  that method's own assignment (``is_dsa_model = is_deepseek_dsa(...)``); a parameter of the
  caller (the sizes, which come from profiling GPU memory) is unknown.

A class whose MRO holds the pool base class is built as a stand-in subclass: its constructor is
evaluated (buffers are abstract tensors of unknown size), and an attribute it never set is
unknown runtime state. A constructor the evaluator cannot follow to its end leaves the whole
pool unknown with the reason, never a half-built object. Branches on unknown values are the
enclosing stage's (explored there, one at a time).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.interpreter import NOT_HOOKED, Frame, Interpreter, PyRaise, Unmodelled
from sglang_audit.evaluate.values import (
    AnalysisBound,
    BoundMethod,
    Class,
    Function,
    Instance,
    Native,
    Scope,
    Unknown,
)
from sglang_audit.frontend import ir
from sglang_audit.resolve.stage_common import TOOL_CALL, self_assignments
from sglang_audit.result import ChainStep

STAGE = "attention"  # the chain steps' layer: the KV pool is read by the attention backends
MAX_POOL_BRANCHES = 8  # distinct runtime-state branches a pool's construction may take before it is left unknown
# outside bases that add no instance attributes (0.5.23 `class KVCache(abc.ABC)`)
PLAIN_BASES = frozenset({"ABC", "Generic", "Protocol", "object"})

if TYPE_CHECKING:
    from sglang_audit.factschema import AttentionFacts, RunnerMemory


def runtime_attr(interp: Interpreter, spec: AttentionFacts, runner: Instance, name: str, busy: set[str],
                 built: list[Any] | None = None) -> Any:
    """The value of runner attribute ``name`` as the release's own code sets it, or None when
    ``name`` is not one the rules derive (the caller's unknown applies); ``busy``: the names
    being derived on this runner (read again inside their own derivation: unknown); ``built``:
    the stage's chain, where the pool class built is recorded (a ``kvpool`` step)."""
    mem = spec.runner.memory
    if mem is None or name not in (*mem.derived_attrs, mem.pool_attr):
        return None
    if name in busy:
        return None
    busy.add(name)
    try:
        if name == mem.pool_attr:
            value = _pool(interp, mem, runner, built)
        else:
            value = _derived(interp, runner, name)
    finally:
        busy.discard(name)
    if not isinstance(value, Unknown):
        runner.attrs[name] = value
    return value


def _derived(interp: Interpreter, runner: Instance, name: str) -> Any:
    """Evaluate the runner's own method that assigns ``self.<name>`` (no required argument)."""
    # the release's runner class (the stand-in subclass is made anew for each runner)
    real = next((k for k in runner.cls.mro() if not isinstance(k.ns.get("__getattr__"), Native)), runner.cls)
    func = _setter(interp, real, name)
    if func is None:
        return Unknown(f"ModelRunner.{name}: no method of the runner sets it without arguments", f"runner:{name}")
    if name not in runner.attrs:
        try:
            interp.call(BoundMethod(func, runner), [], {})
        except (Unmodelled, AnalysisBound) as exc:
            return Unknown(f"ModelRunner.{name}: {func.qualname}() could not be followed ({exc})", f"runner:{name}")
        except PyRaise as raised:
            # SGLang raises here before any backend is built (0.5.23 page_interleave.py on a draft
            # whose allocator, the target's, is not known): no verdict on the attention
            # backend; the attribute stays unknown on this path
            return Unknown(f"ModelRunner.{name}: {func.qualname}() raised at {raised.where or TOOL_CALL}", f"runner:{name}")
    return runner.attrs.get(name, Unknown(f"ModelRunner.{name}: {func.qualname}() left it unset", f"runner:{name}"))


def _setter(interp: Interpreter, cls: Class, name: str) -> Function | None:
    """The first method of the class's MRO (not ``__init__``, no required argument) that
    assigns ``self.<name>``; found once per class object and name."""
    key = ("kvpool_setter", id(cls), name)
    known = interp.cache.prepared.get(key)
    if known is None or known[0] is not cls:  # the class is kept: its id is not reused while listed
        known = (cls, _find_setter(cls, name))
        interp.cache.prepared[key] = known
    return known[1]


def _find_setter(cls: Class, name: str) -> Function | None:
    for klass in cls.mro():
        for func in klass.ns.values():
            if not isinstance(func, Function) or not isinstance(func.body, list) or func.name == "__init__":
                continue
            if any(p.default is None and p.star in ("", "kwonly") for p in func.params[1:]):
                continue  # needs an argument the tool does not have
            for n in ir.walk(func.body):
                if isinstance(n, ir.Assign) and any(_assigns_self(t, name) for t in n.targets):
                    return func
    return None


def _assigns_self(target: Any, name: str) -> bool:
    if isinstance(target, ir.Attribute):
        return target.attr == name and isinstance(target.value, ir.Name) and target.value.id == "self"
    if isinstance(target, (ir.TupleExpr, ir.ListExpr)):
        return any(_assigns_self(t, name) for t in target.elts)
    return False


def _pool(interp: Interpreter, mem: RunnerMemory, runner: Instance, built: list[Any] | None) -> Any:
    configurator = interp.getattr(runner, mem.configurator_attr)
    if not isinstance(configurator, Instance):
        return Unknown(f"ModelRunner.{mem.pool_attr}: the KV cache configurator is not known ({configurator!r})", "runner:kvpool")
    found, builder = configurator.cls.lookup(mem.builder)
    found_caller, caller = configurator.cls.lookup(mem.builder_caller)
    if not (found and isinstance(builder, Function) and found_caller and isinstance(caller, Function)):
        return Unknown(f"ModelRunner.{mem.pool_attr}: {configurator.cls.name} has no {mem.builder} called by "
                       f"{mem.builder_caller}", "runner:kvpool")
    # a pool whose construction branches on many runtime values (0.5.23 HybridLinearKVPool:
    # one comparison with the unknown layer range per full-attention layer) would spend the
    # stage's branch budget on sizes: a first pass answers every branch as written, without
    # making it a branch of the stage, and counts them; past the bound the pool stays unknown
    met: set[str] = set()

    def counted(value: Unknown, file: str, line: int, text: str) -> bool | None:
        met.add(value.key or f"{file}:{line}:{text}")
        if len(met) > MAX_POOL_BRANCHES:
            raise Unmodelled(f"the KV pool's construction branches on more than {MAX_POOL_BRANCHES} runtime values "
                             f"(at {file}:{line})")
        return True

    # counted once per model config and role (the stage's runs differ in runtime branches only)
    mc = runner.attrs.get("model_config")
    key = ("kvpool_branches", id(mc), runner.attrs.get("is_draft_worker"))
    known = interp.cache.prepared.get(key)
    if known is None or known[0] is not mc:  # the config is kept: its id is not reused while listed
        first = _build(interp, mem, configurator, caller, builder, None, counted)
        known = (mc, first if isinstance(first, Unknown) and len(met) > MAX_POOL_BRANCHES else None)
        interp.cache.prepared[key] = known
    if known[1] is not None:
        return known[1]
    return _build(interp, mem, configurator, caller, builder, built, None)


def _build(interp: Interpreter, mem: RunnerMemory, configurator: Instance, caller: Function, builder: Function,
           built: list[Any] | None, answer: Any) -> Any:
    logs = len(interp.logs)
    try:
        with interp.hooked_calls(_pool_hook(interp, mem, built)), \
                (interp.filtered_decisions(answer) if answer is not None else contextlib.nullcontext()):
            kwargs = _caller_kwargs(interp, caller, mem.builder, configurator)
            if kwargs is None:
                return Unknown(f"ModelRunner.{mem.pool_attr}: {caller.qualname} calls {mem.builder} in a way the tool "
                               "does not read", "runner:kvpool")
            return interp.call(BoundMethod(builder, configurator), [], kwargs)
    except (Unmodelled, AnalysisBound) as exc:
        return Unknown(f"ModelRunner.{mem.pool_attr}: the KV pool's construction could not be followed ({exc})", "runner:kvpool")
    except PyRaise as raised:
        # a raise while the pool is built (0.5.23 page_interleave.py: a draft whose allocator,
        # the target's, is not known) is not taken as a verdict on the attention backend: the
        # pool stays unknown on this path, as it was before the pool was modelled
        return Unknown(f"ModelRunner.{mem.pool_attr}: the KV pool's construction raised at {raised.where or TOOL_CALL}",
                       "runner:kvpool")
    finally:
        del interp.logs[logs:]  # the pool's allocation log is not the backend's evidence


def _builder_call(interp: Interpreter, caller: Function, builder: str) -> tuple[ir.Call | None, dict[str, ir.Node]]:
    """``caller``'s first ``self.<builder>(...)`` call and, by name, the value of the last
    single-target assignment to each name before it: read from the IR once per loaded tree
    (walking the caller's body on every resolution was ~3% of a 0.5.23 evaluation)."""
    body = caller.body if isinstance(caller.body, list) else []
    key = ("kvpool_builder_call", id(body), builder)
    known = interp.cache.prepared.get(key)
    if known is not None and known[0] is body:  # the body is kept: its id is not reused while listed
        return known[1], known[2]
    nodes = list(ir.walk(body))
    call = next((n for n in nodes if isinstance(n, ir.Call) and isinstance(n.func, ir.Attribute) and n.func.attr == builder
                 and isinstance(n.func.value, ir.Name) and n.func.value.id == "self"), None)
    assigns: dict[str, ir.Node] = {}
    if call is not None:
        for n in nodes:  # in source order: the last one before the call wins
            if isinstance(n, ir.Assign) and n.line < call.line and len(n.targets) == 1 and isinstance(n.targets[0], ir.Name):
                assigns[str(n.targets[0].id)] = n.value
    interp.cache.prepared[key] = (body, call, assigns)
    return call, assigns


def _caller_kwargs(interp: Interpreter, caller: Function, builder: str, obj: Instance) -> dict[str, Any] | None:
    """The keyword arguments ``caller`` passes to ``self.<builder>(...)``: a name it assigned
    (the last single-target assignment before the call) evaluated in the caller's frame with
    ``self`` bound, a parameter of the caller unknown, a literal as written."""
    call, assigns = _builder_call(interp, caller, builder)
    if call is None:
        return None
    params = {p.name for p in caller.params}
    scope = Scope(parent=caller.closure)
    for p in params:
        scope.vars[p] = Unknown(f"{caller.qualname} argument {p} (run-time sizes are not modelled)", f"kvpool-arg:{p}")
    scope.vars["self"] = obj
    frame = Frame(module=caller.module, scope=scope, func=caller, depth=interp.depth)
    out: dict[str, Any] = {}
    for kind, expr in call.args:
        if kind in ("", "*", "**"):
            return None  # positional or unpacked arguments: not read
        if isinstance(expr, ir.Name) and expr.id not in params:
            assign = assigns.get(str(expr.id))
            if assign is None:
                return None
            out[kind] = interp.evaluate(assign, frame)
        else:
            out[kind] = interp.evaluate(expr, frame)
    return out


def _pool_hook(interp: Interpreter, mem: RunnerMemory, built: list[Any] | None) -> Any:
    def is_pool(cls: Class) -> bool:
        return any(k.name == mem.pool_base_class and k.module is not None and k.module.name == mem.pool_base_module
                   for k in cls.mro()[1:])

    def hook(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if not (isinstance(func, Class) and is_pool(func)):
            return NOT_HOOKED
        return _standin_pool(interp, func, args, kwargs, built)

    return hook


def _standin_pool(interp: Interpreter, cls: Class, args: list[Any], kwargs: dict[str, Any], built: list[Any] | None) -> Instance:
    counts = _assign_counts(interp, cls)
    assigned = set(counts)
    plain = all(b.rsplit(".", 1)[-1] in PLAIN_BASES for k in cls.mro() for b in k.external_bases)

    def missing(i: Interpreter, a: list[Any], kw: dict[str, Any]) -> Any:
        name = str(a[-1])
        if plain and name not in assigned:
            # a plain Python class (no outside base adds attributes): a name none of its
            # methods assigns is absent, as `getattr(pool, "full_kv_pool", None)` finds it
            raise i.make_raise("AttributeError", f"'{cls.name}' object has no attribute '{name}'")
        return Unknown(f"{cls.name}.{name} (runtime state of the KV pool is not modelled)", f"kvpool:{cls.name}.{name}")

    file, line = interp.call_site()
    standin = Class(cls.name, (cls,), {"__getattr__": Native(f"{cls.name}.__getattr__", missing)}, cls.module, cls.line,
                    external_bases=())
    pool = Instance(standin)
    found, init = standin.lookup("__init__")
    note = ""
    if found:
        try:
            interp.call(interp.bind(init, pool, standin), args, kwargs)
        except (Unmodelled, AnalysisBound) as exc:
            # the buffers are sized by the model's layers and the profiled memory (unknown): what
            # the constructor set before it stopped holds only where the pool's classes assign
            # that attribute at one statement (nothing after the stop can change it)
            once = {n for n, c in counts.items() if c == 1}
            for name in [n for n in pool.attrs if n not in once]:
                del pool.attrs[name]
            note = f"; its constructor not evaluated to its end ({exc}): the attributes it assigns once and set before are kept"
    if built is not None:
        built.append(ChainStep(file, line, "", cls.name, f"{cls.name}(...){note}", STAGE, "kvpool"))
    return pool


def _assign_counts(interp: Interpreter, cls: Class) -> dict[str, int]:
    """How many statements of the pool's classes (its MRO) assign each ``self.X``; counted
    once per class object."""
    key = ("kvpool_assigns", id(cls))
    known = interp.cache.prepared.get(key)
    if known is not None and known[0] is cls:
        return known[1]
    count: dict[str, int] = {}
    for _func, _node, names in self_assignments(cls):
        for name in names:
            count[name] = count.get(name, 0) + 1
    interp.cache.prepared[key] = (cls, count)
    return count
