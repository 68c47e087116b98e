"""What a layer stage builds on: SGLang's own layer code run on a stand-in layer, its branches
on unknowns explored, each run's end turned into an ``Outcome`` and the runs joined into one
``LayerValue``. The MoE stage (``layers.py``), the MoE draft's quant config (``draft.py``) and
the dense linear stage (``linear.py``) use it; a new layer stage should too, so that the same
branch is explored, assumed and told the same way in every stage.

- a run's end: ``Outcome`` (``raise_outcome`` for a raise, ``KernelReached`` for a kernel
  entry point), its ``Role`` (the setting, the config it builds with, target or draft);
- the paths: ``explore_layer`` runs a stage's ``run_once`` once per branch assignment
  (``TensorBranches``), asserts on tensor data assumed to hold, the imports watched;
  ``join`` makes one value of the outcomes;
- what the layer code calls: ``layer_hook`` (kernel entry points, process state,
  ``create_weights``, attributes of tensors); the layer itself is ``module_standin``;
- a model class's constructor evaluated with stand-in submodules (the draft's and the linear
  stage's walk to the layers it builds): ``submodule_hook``, ``bound_argument``.

Which classes, functions and kernels are involved is data (``rules/layers.toml``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sglang_audit.evaluate.explore import explore_paths
from sglang_audit.evaluate.interpreter import (
    NOT_HOOKED,
    Interpreter,
    PyRaise,
    Unmodelled,
    stop_reason,
)
from sglang_audit.evaluate.values import (
    AnalysisBound,
    BoundMethod,
    Class,
    Decision,
    External,
    Function,
    HFConfig,
    Instance,
    Native,
    Unknown,
)
from sglang_audit.factfiles import LayersFacts, ModelRegistryFacts
from sglang_audit.resolve.stage_common import (
    ImportWatch,
    at_module_level,
    guard_steps,
    is_assert,
    process_object,
    process_value,
    raise_message,
    stopped,
)
from sglang_audit.result import (
    STATUS_RESOLVED,
    STATUS_UNKNOWN,
    STATUS_UNSUPPORTED,
    Candidate,
    ChainStep,
    LayerValue,
)
from sglang_audit.world.overlays import tensors

STATUS_DATA = "data"  # a raise decided by tensor data: reported, never the layer's verdict
STATUS_INFEASIBLE = "infeasible"  # a module body that raises: the real import did not

Hook = Callable[[Any, list[Any], dict[str, Any]], Any]


# ---- a run's end ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """How one run of a layer ended; ``join`` makes the stage's value of a path's outcomes."""
    status: str  # resolved | unsupported | unknown | data | infeasible (or a stage's own, filtered before join)
    value: str  # the kernel label, "raise: <message>", or the reason
    site: str = ""  # file:line
    code: str = ""
    exception: str = ""
    runner: str = ""  # the runner backend create_moe_runner built, if any
    method: str = ""
    chain: tuple[ChainStep, ...] = ()
    tensors: tuple[str, ...] = ()  # the kernel call's tensor arguments (LayerValue.tensors)


@dataclass(frozen=True)
class Role:
    """What a stage builds a layer for: the setting its value answers, the ModelConfig (the
    target's or the draft's) and the ServerArgs the worker builds the layers with."""
    setting: str
    model_config: Any
    draft: bool
    server_args: Any  # the ServerArgs the worker builds the layers with (published, sizes)


class KernelReached(Exception):
    """Evaluation reached a kernel entry point: the layer's answer on this branch (raised out
    of the layer code, so nothing after the call is evaluated)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.value)
        self.outcome = outcome


def new_state() -> dict[str, Any]:
    """A run's state, written by ``layer_hook`` (the chain of steps, ``create_weights`` run,
    the runner built) and read by ``raise_outcome``."""
    return {"weights_created": False, "method": "", "runner": "", "chain": []}


def architecture(model_config: Instance) -> Any:
    """config.json's ``architectures[0]``: the name SGLang's model registry maps to a class."""
    hf = model_config.attrs.get("hf_config")
    archs = hf.attrs.get("architectures") if isinstance(hf, HFConfig) else None
    return archs[0] if isinstance(archs, list) and archs else None


def raise_outcome(interp: Interpreter, raised: PyRaise, state: dict[str, Any], spec: LayersFacts,
                  verdict_files: Sequence[str] | None = None) -> Outcome:
    """A raise that ended a run: SGLang's verdict when explicit and in the stage's own code
    (``verdict_files``, the MoE layer's by default), data-dependent, or unknown. A raise in a
    branch on tensor data leaves its keys in ``state["data_keys"]`` (``TensorBranches`` makes
    the other side the default)."""
    name, message = raise_message(interp, raised)
    site = raised.where
    if not site:  # the stage's own call failed: no SGLang line decided anything
        return Outcome(STATUS_UNKNOWN, stopped(name, message, raised, ""), runner=state["runner"], method=state["method"])
    if at_module_level(interp, raised.file, raised.line):
        # an import that fails on this branch: the real import succeeded, so the branch is not taken
        return Outcome(STATUS_INFEASIBLE, f"{name}: {message}", site, raised.text, name)
    tensor_sites = {(d.file, d.line): (d.key, d.input_truth(t)) for d, t in interp.taken if tensor_decided(d, spec)}
    enclosing = {(g.file, g.line) for g in raised.guards} | {(raised.file, raised.line)}
    if set(tensor_sites) & enclosing:
        state["data_keys"] = [tensor_sites[s] for s in enclosing if s in tensor_sites]
        # an assert on tensor data/metadata: fails only for a checkpoint that violates it
        return Outcome(STATUS_DATA, f"{name}: {message}", site, raised.text, name, state["runner"], state["method"])
    verdict = any(raised.file.startswith(prefix) for prefix in (verdict_files or spec.moe.verdict_files))
    chain = (*state["chain"], *guard_steps(raised.guards),
             ChainStep(raised.file, raised.line, "", f"{name}: {message}", raised.text, "layers", "raise"))
    if raised.explicit and verdict:
        return Outcome(STATUS_UNSUPPORTED, f"{name}: {message}", site, raised.text, name, state["runner"], state["method"], chain)
    if name == "AttributeError" and verdict and state["weights_created"] and f"'{spec.moe.layer_class}' object" in message:
        # a parameter SGLang never registered on the MoE layer (create_weights ran to its end)
        return Outcome(STATUS_UNSUPPORTED, f"{name}: {message}", site, raised.text, name, state["runner"], state["method"], chain)
    why = "outside the layer's own code" if raised.explicit else "not an explicit raise in SGLang"
    return Outcome(STATUS_UNKNOWN, stopped(name, message, raised, why), runner=state["runner"], method=state["method"])


# ---- the paths ----------------------------------------------------------------------------------
def tensor_decided(decision: Any, spec: LayersFacts) -> bool:
    """Whether a decision (or an unknown) is on tensor data or metadata (``[moe]
    tensor_markers``): a checkpoint SGLang can load decides it, not the configuration."""
    text = f"{decision.reason} {decision.key or ''}"
    return any(m in text for m in spec.moe.tensor_markers)


class TensorBranches:
    """The layer's paths (``evaluate/explore.py`` strategy): every combination of its own
    branches, except on tensor data. A tensor branch whose side ends in an assert on data
    has the other side as its default (a loadable checkpoint takes it), forced on later
    paths and never counted as a combination; once a tensor branch is flipped, the tensor
    branches it meets are flipped one at a time, not in every combination."""

    def __init__(self, spec: LayersFacts, built: dict[Any, Any]) -> None:
        self.spec = spec
        self.built = built  # a run leaves "data_keys" there: the tensor keys of its raise
        self.defaults: dict[str, bool] = {}
        self.tensor_keys: set[str] = set()
        self.first_truth: dict[str, bool] = {}  # a tensor key's truth on the path that met it
        self.pairwise = False

    def forced(self) -> dict[str, bool]:
        return dict(self.defaults)

    def alternatives(self, extra: dict[str, bool], new: Sequence[Decision]) -> list[dict[str, bool]]:
        for key, truth in self.built.pop("data_keys", ()):
            self.defaults.setdefault(key, not truth)
        flipped = any(k in self.tensor_keys and k not in self.defaults and v != self.first_truth.get(k, True)
                      for k, v in extra.items())
        out: list[dict[str, bool]] = []
        prefix = dict(extra)
        for d in new:
            if tensor_decided(d, self.spec):
                self.tensor_keys.add(d.key)
                self.first_truth[d.key] = d.first
                if flipped:
                    prefix[d.key] = d.first
                    self.pairwise = True
                    continue
            alt = dict(prefix)
            alt[d.key] = not d.first
            out.append(alt)
            prefix[d.key] = d.first
        return out


@dataclass
class Explored:
    """A layer's runs: each outcome with the branch conditions its path took, whether every
    path was run, and what the runs assumed (asserts on tensor data, optional packages)."""
    outcomes: list[tuple[Outcome, tuple[str, ...]]]
    complete: bool
    bound: int
    branches: TensorBranches
    watch: ImportWatch
    assumed: set[str] = field(default_factory=set)

    def noted(self, value: LayerValue) -> LayerValue:
        """``value`` with what the runs assumed: asserts on tensor data held, tensor branches
        flipped one at a time, and the optional packages the layer code imported."""
        assumed = set(self.assumed)
        if self.branches.pairwise:
            assumed.add(f"branches on tensor data ({len(self.branches.tensor_keys)}) explored one at a time, not in every combination")
        return replace(value, data_dependent=tuple(sorted(assumed)) + value.data_dependent,
                       assumptions=self.watch.assumptions(value))


def explore_layer(interp: Interpreter, spec: LayersFacts, run_once: Callable[[dict[Any, Any]], Outcome],
                  bound: int) -> Explored:
    """Run the layer once per assignment of its own unknown branches (depth first, at most
    ``bound`` runs, ``TensorBranches``); the resolver's decisions, taken and new lists are
    restored afterwards. ``run_once(built)`` is one run; ``built`` is the stage's memo across
    runs, where a run that ends in a raise on tensor data leaves ``data_keys``. An assert on
    tensor data/metadata holds for a checkpoint SGLang can load: assumed, reported, not
    explored (its failing side says nothing about the configuration). The imports of the
    optional packages the layer code makes are watched (``[moe] optional_packages``)."""
    built: dict[Any, Any] = {}
    assumed: set[str] = set()
    branches = TensorBranches(spec, built)

    def assert_on_tensors(value: Unknown, file: str, line: int, text: str) -> bool | None:
        if is_assert(interp, file, line) and tensor_decided(value, spec):
            assumed.add(f"assert {text} at {file}:{line} (tensor data; assumed to hold)")
            return True
        return None

    def run() -> Outcome:
        with interp.filtered_decisions(assert_on_tensors):
            return run_once(built)

    watch = ImportWatch(interp, spec.moe.optional_packages)
    with interp.watched_imports(watch):
        runs, complete = explore_paths(interp, run, bound, branches)
    outcomes = [(outcome, tuple(f"{d.file}:{d.line} {d.text if t else f'not ({d.text})'}" for d, t in ran.taken))
                for outcome, ran in runs]
    return Explored(outcomes, complete, bound, branches, watch, assumed)


def join(outcomes: list[tuple[Outcome, tuple[str, ...]]], complete: bool, bound: int) -> LayerValue:
    """One value of a layer's outcomes: one kernel (or one SGLang raise) on every branch is
    resolved (unsupported); anything else is unknown with the candidates and the branch
    conditions leading to each. Outcomes on tensor data and failing imports are never the
    answer (listed as data-dependent)."""
    data = sorted({f"{o.value} at {o.site}" for o, _ in outcomes if o.status == STATUS_DATA})
    kept = [(o, w) for o, w in outcomes if o.status not in (STATUS_DATA, STATUS_INFEASIBLE)]
    if not kept:
        imports = sorted({f"{o.value} at {o.site}" for o, _ in outcomes if o.status == STATUS_INFEASIBLE})
        reason = ("every branch ends in an assert on tensor data or a failing import" if data
                  else f"every branch ends in a failing import ({'; '.join(imports)})" if imports else "no branch")
        return LayerValue(STATUS_UNKNOWN, None, reason=reason, paths=len(outcomes), data_dependent=tuple(data))
    outcomes = kept
    distinct: list[Outcome] = []
    for o, _ in outcomes:
        if o not in distinct:
            distinct.append(o)
    first = distinct[0]
    # paths that split on tensor metadata (a shape compared) may reach the same kernel by other
    # branches: the same answer, told with the first path's chain (and the tensors all agree on)
    same = {(o.status, o.value, o.method, o.runner, o.site, o.code, o.exception) for o in distinct}
    if complete and len(same) == 1 and first.status != STATUS_UNKNOWN:
        tensors = first.tensors if all(o.tensors == first.tensors for o in distinct) else ()
        return LayerValue(first.status, first.value, first.method, first.runner, first.site, first.code,
                          first.exception, paths=len(outcomes), data_dependent=tuple(data), chain=first.chain,
                          tensors=tensors)
    reason = first.value if len(distinct) == 1 else "the layer's outcome depends on values the tool does not know"
    if not complete:
        reason = f"analysis bound reached: more than {bound} layer branches"
    cands: list[Candidate] = []
    for o in distinct:
        whens = next(w for oo, w in outcomes if oo == o)
        label = o.value if o.status == STATUS_RESOLVED else f"{o.status}: {o.value}"
        cands.append(Candidate(label, ((f"at {o.site}",) if o.site else ()) + whens))
    methods = {o.method for o in distinct if o.method}
    runners = {o.runner for o in distinct if o.runner}
    return LayerValue(STATUS_UNKNOWN, None, methods.pop() if len(methods) == 1 else "", runners.pop() if len(runners) == 1 else "",
                      reason=reason, candidates=tuple(cands), paths=len(outcomes), data_dependent=tuple(data))


# ---- what the layer code calls ------------------------------------------------------------------
def call_site(interp: Interpreter) -> tuple[str, int]:
    """The file:line of the call being made (the interpreter's own record of it)."""
    return interp.call_site()


def guards_text(guards: Any) -> str:
    """The innermost two branch conditions of a step, as the chain shows them."""
    return " and ".join(g.describe() for g in guards[-2:])


def kernel_tensors(args: list[Any], kwargs: dict[str, Any]) -> tuple[str, ...]:
    """The tensor arguments of a kernel call as the abstract tensors know them; a quant-info
    object's tensor fields (MoeRunner.run's second argument) by their names."""
    named: list[tuple[str, Any]] = [(f"#{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    for name, value in list(named):
        if isinstance(value, Instance) and tensors.tensor_of(value) is value:  # not a parameter: its fields
            named.remove((name, value))
            named += [(k, v) for k, v in value.attrs.items() if isinstance(tensors.tensor_of(v), tensors.AbstractTensor)]
    return tuple(f"{name}: {tensors.describe(tensors.tensor_of(v))}" for name, v in named
                 if isinstance(tensors.tensor_of(v), tensors.AbstractTensor))


def layer_hook(interp: Interpreter, spec: LayersFacts, state: dict[str, Any], server_args: Any,
               classes: Hook | None = None) -> Hook:
    """The hook a layer's code runs under (``interp.hooked_calls``): a kernel entry point of
    ``[[kernel]]`` ends the run (``KernelReached``); a JIT builder is outside code; process
    state is the worker's (``[moe] process_values``) or unknown; ``create_weights`` is recorded
    on the chain; the regex aliases are the overlay's; attributes set on tensors torch made are
    remembered. ``classes`` is offered the classes the code constructs (the MoE stage's runner
    stand-in); ``state`` is the run's (``new_state``)."""
    functions = {k.function: k.label for k in spec.kernel if k.function}
    externals = {k.external: k.label for k in spec.kernel if k.external}
    process_state = spec.moe.process_state_modules
    process_values = spec.moe.process_values
    jit_builders = frozenset(spec.moe.jit_builders)
    regex_aliases = spec.moe.regex_aliases
    regex_compile = set(spec.moe.regex_compile)
    external_attrs: set[tuple[int, str]] = set()  # attributes set on outside objects (tensors)

    def hook(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        # runs on every call the layer makes (~28,000 per 0.5.23 resolution): one class test
        # first (the value classes have no subclasses), the checks of that class in order
        kind = func.__class__
        if kind is Function:
            qual = f"{func.module.name}.{func.name}"
            if qual in functions:
                file, line = call_site(interp)
                raise KernelReached(Outcome(STATUS_RESOLVED, functions[qual], f"{file}:{line}", f"{func.name}(...)",
                                            tensors=kernel_tensors(args, kwargs)))
            if qual in jit_builders:
                # a native module compiled from the tree's C++ at first use: outside code
                return External(f"{qual}({', '.join(a for a in args if isinstance(a, str))})")
            if func.module.name.startswith(process_state):
                if func.name in process_values:
                    return process_value(process_values[func.name], server_args)
                return Unknown(f"{func.qualname}(): process state (distributed groups) is not modelled", f"proc:{func.qualname}")
            if func.name == "create_weights":
                file, line = call_site(interp)
                owner = func.qualname.rsplit(".", 1)[0]
                state["chain"].append(ChainStep(file, line, guards_text(interp.guards), owner, f"{owner}.create_weights(...)", "layers", "method"))
                result = interp.call_function(func, args, kwargs)
                state["weights_created"] = True
                return result
            return NOT_HOOKED
        if kind is External:
            path = func.path
            if path in regex_aliases:
                native = interp.natives.external_value(interp, regex_aliases[path])
                if isinstance(native, Native):
                    return native.fn(interp, args, kwargs)
            if path in regex_compile and args and isinstance(args[0], str):
                return _compiled_pattern(args[0])
            if path in externals:
                file, line = call_site(interp)
                raise KernelReached(Outcome(STATUS_RESOLVED, externals[path], f"{file}:{line}", f"{path}(...)",
                                            tensors=kernel_tensors(args, kwargs)))
            return NOT_HOOKED
        if kind is Class:
            return NOT_HOOKED if classes is None else classes(func, args, kwargs)
        if kind is Native and func.name == "hasattr" and len(args) >= 2 and isinstance(args[1], str):
            # the same rule for an abstract tensor or a parameter: what torch has, or SGLang set
            has = tensors.has_tensor_attr(args[0], args[1])
            if has is not None:
                return has
        if kind is Native and func.name in ("setattr", "hasattr") and len(args) >= 2 and _made_outside(args[0]):
            # a tensor made by torch carries none of SGLang's ad hoc attributes (weight_loader,
            # ...) until SGLang sets one: remembered here, since an outside object keeps no state
            if func.name == "setattr":
                external_attrs.add((id(args[0]), str(args[1])))
                return None
            return (id(args[0]), str(args[1])) in external_attrs
        return NOT_HOOKED

    return hook


def _compiled_pattern(pattern: str) -> Instance:
    from sglang_audit.evaluate.overlays.stdlib import regex

    inst = Instance(Class("Pattern", (), {}, None))
    for fn in ("fullmatch", "match", "search"):
        inst.attrs[fn] = Native(f"Pattern.{fn}", lambda i, a, k, fn=fn: regex(i, fn, [pattern, *a[:1]]))
    inst.attrs["pattern"] = pattern
    return inst


def _made_outside(value: Any) -> bool:
    return isinstance(value, External) and value.path.endswith(")")


# ---- the layer ----------------------------------------------------------------------------------
def module_standin(base: Class) -> Instance:
    """An instance of a stand-in subclass of ``base`` (a torch.nn.Module of SGLang's) whose
    constructor is then evaluated: an attribute never registered raises AttributeError at the
    line that reads it, as torch.nn.Module.__getattr__ does; register_parameter/register_buffer
    make attributes."""
    def missing(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        raised = i.make_raise("AttributeError", f"'{base.name}' object has no attribute '{args[-1]}'")
        raised.text = f".{args[-1]}"
        raise raised

    standin = Class(base.name, (base,), {"__getattr__": Native("Module.__getattr__", missing)}, base.module, base.line,
                    external_bases=())
    layer = Instance(standin)
    module_natives(layer)
    return layer


def module_natives(layer: Instance) -> None:
    """torch.nn.Module.register_parameter / register_buffer: the name becomes an attribute
    (set again on a copy of the layer: the natives close over the instance)."""
    def register(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if len(args) >= 2 and isinstance(args[0], str):
            layer.attrs[args[0]] = args[1]
        return None

    layer.attrs["register_parameter"] = Native("Module.register_parameter", register)
    layer.attrs["register_buffer"] = Native("Module.register_buffer", register)


# ---- a model's constructor with stand-in submodules ---------------------------------------------
NO_ARG = object()  # bound_argument: the constructor has no such parameter, or it has no default


def bound_argument(init: Function, args: list[Any], kwargs: dict[str, Any], name: str) -> Any:
    """The value a call ``Class(*args, **kwargs)`` binds to ``init``'s parameter ``name``
    (``self`` excluded), its default when not passed, ``NO_ARG`` when it has none."""
    params = [p for p in init.params if p.star == ""][1:]
    for i, p in enumerate(params):
        if p.name != name:
            continue
        if name in kwargs:
            return kwargs[name]
        if i < len(args):
            return args[i]
        return init.defaults.get(name, NO_ARG)
    return NO_ARG


def _is_torch_module(cls: Class) -> bool:
    return any(b.startswith("torch.nn") for c in cls.mro() for b in c.external_bases)


def stop_text(interp: Interpreter, exc: BaseException) -> str:
    """Why a construction stopped, one line: SGLang's raise with its site, or the evaluator's
    reason."""
    if isinstance(exc, PyRaise):
        name, message = raise_message(interp, exc)
        return f"{name}: {message} at {exc.file}:{exc.line}"
    return stop_reason(exc)


def _unset_attribute(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return Unknown(f"attribute {args[-1]!r} of a module the draft builds (not evaluated)", f"draft:{args[-1]}")


def unevaluated(cls: Class) -> Class:
    """A subclass of ``cls`` whose attributes nothing set are unknown: the model class whose
    constructor is evaluated, and the submodules it builds that are not (``submodule_hook``)."""
    return Class(cls.name, (cls,), {"__getattr__": Native("Module.__getattr__", _unset_attribute)}, cls.module, cls.line,
                 external_bases=())


def submodule_hook(interp: Interpreter, reg: ModelRegistryFacts, server_args: Any, model: Class,
                   classes: Hook, pure: frozenset[str] = frozenset()) -> Hook:
    """The hook a model class's constructor runs under (``model``: its ``unevaluated`` class)
    when a stage walks it to the layers it builds (the draft's MoE layer, the target's linear
    layers). Process-state functions: the objects a worker has (``process_objects``), the pure
    ones evaluated (``pure_functions``, ``pure``), the sizes the hook installed before knows
    (the layer stage's, ``[moe] process_values``), any other unknown. A class constructed is
    offered to ``classes(cls, args, kwargs)`` first; a torch module it does not take is a
    stand-in (not evaluated) until the construction calls one of its own methods on it: it is
    built for real then (``_construct``). Install it inside the layer stage's ``hooked_calls``."""
    process_state = reg.process_state_modules
    process_objects = reg.process_objects
    pure = frozenset(reg.pure_functions) | pure
    outer = interp.call_hook  # the layer stage's: it knows the sizes a worker has (process values)
    # stand-ins not built yet, by id (the entry keeps the instance alive): (instance, class, arguments)
    pending: dict[int, tuple[Instance, Class, list[Any], dict[str, Any]]] = {}

    def hook(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if func.__class__ is BoundMethod and pending and id(func.obj) in pending and func.func.__class__ is Function:
            _construct(interp, *pending.pop(id(func.obj)))
            return NOT_HOOKED
        if func.__class__ is Function and func.module.name.startswith(process_state):
            if func.name in process_objects:
                return process_object(func.name, process_objects[func.name], server_args)
            if func.name in pure:  # arithmetic on its arguments: SGLang's code, evaluated
                return interp.call_function(func, args, kwargs)
            known = outer(func, args, kwargs) if outer is not None else NOT_HOOKED
            if known is not NOT_HOOKED:
                return known
            return Unknown(f"{func.qualname}(): process state (parallel groups) is not modelled", f"proc:{func.qualname}")
        if func.__class__ is Class and func is not model and not model.is_subclass_of(func):
            got = classes(func, args, kwargs)
            if got is not NOT_HOOKED:
                return got
            if _is_torch_module(func):
                # a submodule that takes no quant config (norms, projections) or is not
                # SGLang's model code: not evaluated, unless a method of its own is called
                standin = Instance(unevaluated(func))
                pending[id(standin)] = (standin, func, list(args), dict(kwargs))
                return standin
        return NOT_HOOKED  # the layer stage's hook, then the interpreter

    return hook


def _construct(interp: Interpreter, standin: Instance, cls: Class, args: list[Any], kwargs: dict[str, Any]) -> None:
    """A stand-in submodule whose own method the model's constructor calls (0.5.23
    qwen2_moe.py: ``self.topk.bind_runner_backend(...)`` reads ``_runner_backend_bound``,
    which ``TopK.__init__`` sets): that method reads the state its ``__init__`` set, so the
    ``__init__`` is evaluated first, with the arguments the construction gave, and the
    attributes it set are the stand-in's. A constructor that stops leaves the stand-in as it
    was (its attributes unknown): not SGLang's verdict, the tool's limit."""
    found, init = cls.lookup("__init__")
    if not found or not isinstance(init, Function):
        return
    made = Instance(standin.cls)  # unset attributes stay unknown, as on the stand-in
    try:
        interp.call(BoundMethod(init, made), args, kwargs)
    except (Unmodelled, AnalysisBound, PyRaise):
        return
    # what the construction set on the stand-in since (minimax_m3.py:440 `self.experts._minimax_activation
    # = ...`) was set after the real __init__ ran: it stays
    for name, value in made.attrs.items():
        if name not in standin.attrs:
            standin.attrs[name] = value
            if name in made.events:
                standin.events[name] = made.events[name]
