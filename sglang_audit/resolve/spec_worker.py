"""The speculative worker SGLang builds with the resolved settings (issue 42): the class the
release's own dispatch picks for the algorithm (``SpeculativeAlgorithm.create_worker``, called
by the scheduler's ``maybe_init_draft_worker``) and its constructor's asserts and raises.

On one resolver path, after the attention stage, the same interpreter does what the scheduler
does, without loading the scheduler's module (its import-time decorators are torch's): the
algorithm object is built by ``Scheduler.__init__``'s own ``self.spec_algorithm = ...``
statement (the names it reads taken from the module's imports), its dispatch is evaluated and
the class it returns recorded with the ``return`` that chose it, and that class is constructed
with the scheduler's keyword arguments (its target model worker a stand-in whose model runner is
the attention stage's stand-in runner), cited at the scheduler's own ``DraftWorkerClass(...)``
line; the worker methods the scheduler calls next (``rules/speculative.toml`` ``then``:
0.5.16+ ``init_attention_backends``) run too. The constructor's checks are evaluated (the
overlap/spec-v2 constraints, the draft worker's multi-step attention backends built by
``DraftBackendFactory``, ...). The model worker it builds
for the draft (``TpModelWorker``: it loads the draft model, whose layers the earlier stages
evaluated) is stood in: its own ``__init__`` runs with SGLang's arguments as far as known values
decide it, each ``ModelRunner(...)`` it makes (one per draft layer for a multi-layer EAGLE draft:
``model_runner_list``) the attention stage's stand-in runner for the draft, its other methods
and attributes unknown runtime state. An explicit raise/assert in
the speculative, scheduler or attention code decided by known values is SGLang's verdict
(``unsupported``, with its message and line); an assert decided by unknown runtime state is
assumed to hold and listed; a constructor the evaluator cannot follow to its end leaves the
class known and the rest ``unknown`` with the reason. No worker class is named by the tool:
the dispatch is the release's, so an algorithm a release adds is found the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sglang_audit import factfiles
from sglang_audit.errors import strict_mode
from sglang_audit.evaluate.ending import BOUND, EVALUATION_ENDS, ending
from sglang_audit.evaluate.explore import ONE_AT_A_TIME, explore_paths
from sglang_audit.evaluate.interpreter import (
    NOT_HOOKED,
    Frame,
    Interpreter,
    PyRaise,
    Unmodelled,
    stop_reason,
)
from sglang_audit.evaluate.values import (
    AnalysisBound,
    Class,
    Function,
    Instance,
    ModuleObj,
    Native,
    Property,
    Scope,
    Unknown,
)
from sglang_audit.frontend import ir
from sglang_audit.frontend.parse import ParseFailure
from sglang_audit.resolve import attention
from sglang_audit.resolve.stage_common import (
    TOOL_CALL,
    ImportWatch,
    at_module_level,
    guard_steps,
    is_assert,
    process_object,
    publish_server_args,
    raise_message,
    stopped,
)
from sglang_audit.result import (
    STATUS_RESOLVED,
    STATUS_UNKNOWN,
    STATUS_UNSUPPORTED,
    ChainStep,
    LayerValue,
)

if TYPE_CHECKING:
    from sglang_audit.factschema import (
        AttentionFacts,
        SpecScheduler,
        SpeculativeFacts,
        SpecWorkerFacts,
    )

SETTING = "speculative_algorithm"  # the setting whose layer value is the worker built
STAGE = "speculative"
MAX_WORKER_PATHS = 24  # branches on runtime state explored (one at a time, as the attention stage)
# CPU-time budget of the stage on one resolver path (parsing excluded), outside the
# resolution's own budget (resolver.py run_layers), as the attention stage's
WORKER_CPU_SECONDS = 30.0
WHAT = "the speculative worker's construction"


@dataclass
class _Building:
    """A stood-in model worker whose own ``__init__`` is being evaluated (``_build_model_worker``)."""

    worker: Instance
    draft: bool  # the role the tool stood it in for (SGLang's `is_draft_worker=` to the runner decides)
    builders: frozenset[str]  # its class's methods that construct a model runner: the only ones evaluated
    runners: int = 0  # model runners built so far


@dataclass
class _State:
    worker: Class | None = None  # the class the dispatch returned
    dispatch: ChainStep | None = None  # the `return` that chose it
    built: ChainStep | None = None  # the scheduler's call constructing it
    called_at: tuple[str, int] | None = None  # the scheduler's construction of the worker
    then: list[ChainStep] = field(default_factory=list)  # the scheduler's calls on it afterwards
    standins: dict[int, str] = field(default_factory=dict)  # id(model worker stood in) -> "draft"/"target"
    evaluated: set[int] = field(default_factory=set)  # stood-in workers whose methods run (the scheduler's call on the target)
    skipped: list[str] = field(default_factory=list)  # their methods called, not evaluated
    backends: attention.BuildState = field(default_factory=attention.BuildState)  # attention backends built inside
    building: list[_Building] = field(default_factory=list)  # the stood-in model workers whose __init__ runs, innermost last


def evaluate_spec_worker(interp: Interpreter, server_args: Any, model_config: Any, draft_config: Any) -> dict[str, LayerValue]:
    """The layer value of ``speculative_algorithm``: the worker class built, or SGLang's raise;
    {} without speculative decoding or for a release without the scheduler's method."""
    facts = factfiles.speculative()
    if not isinstance(server_args, Instance) or server_args.attrs.get(SETTING) is None:
        return {}  # no speculative decoding: the scheduler builds no draft worker
    sched = facts.scheduler
    if not _defines(interp, sched.module, sched.class_, sched.method):
        return {}
    if not isinstance(server_args.attrs.get(SETTING), str):
        return {SETTING: LayerValue(STATUS_UNKNOWN, None, reason="the speculative algorithm is not known here", stage=STAGE)}
    # the scheduler publishes the server args before it builds its workers
    publish_server_args(interp, factfiles.layers(), server_args)
    return {SETTING: _explore(interp, facts, server_args, model_config, draft_config)}


def _defines(interp: Interpreter, module: str, cls: str, method: str) -> bool:
    """Read structurally (the module is loaded only inside the stage's runs)."""
    found = interp.find_module_file(module)
    if found is None:
        return False
    try:
        tree = interp.cache.load(found[0])
    except (ParseFailure, OSError):
        return False
    return any(isinstance(n, ir.ClassDef) and n.name == cls
               and any(isinstance(f, ir.FunctionDef) and f.name == method for f in n.body) for n in tree.body)


def _explore(interp: Interpreter, facts: SpeculativeFacts, server_args: Instance, mc: Any, dc: Any) -> LayerValue:
    att = factfiles.attention()
    watch = ImportWatch(interp, att.backend.optional_packages)
    assumed: set[str] = set()

    def assert_on_runtime(value: Unknown, file: str, line: int, text: str) -> bool | None:
        # an assert the tool cannot decide (runtime state, tensors) is not SGLang's verdict
        if is_assert(interp, file, line):
            assumed.add(f"assert {text} at {file}:{line} (runtime state not known; assumed to hold)")
            return True
        return None

    # the constructors write the server args (0.5.10's EAGLEWorker sets context_length and
    # disable_cuda_graph): each run starts from the resolved ones, and so does what follows
    saved = dict(server_args.attrs)

    def run() -> attention.Outcome:
        start = len(interp.logs)
        try:
            return _run_once(interp, facts, att, server_args, mc, dc, assumed)
        finally:
            del interp.logs[start:]  # the worker's logs are not the path's
            server_args.attrs.clear()
            server_args.attrs.update(saved)

    with interp.watched_imports(watch), interp.filtered_decisions(assert_on_runtime):
        runs, complete = explore_paths(interp, run, MAX_WORKER_PATHS, ONE_AT_A_TIME)
    outcomes = [(outcome, tuple(f"{d.file}:{d.line} {d.text if t else f'not ({d.text})'}" for d, t in ran.taken))
                for outcome, ran in runs]
    flipped = len(runs[0][1].new_decisions) if runs else 0
    value = attention.join_outcomes(outcomes, complete, STAGE, WHAT, MAX_WORKER_PATHS)
    if value.status == STATUS_UNKNOWN and not value.chain:
        # the outcomes differ past the dispatch (runtime state the construction reads): the
        # class SGLang's dispatch chose is still known when every run chose the same one
        chosen = {tuple(s for s in o.chain if s.kind in ("dispatch", "worker")) for o, _ in outcomes if o.status != "infeasible"}
        if len(chosen) == 1 and (steps := next(iter(chosen))):
            prefix = f"SGLang builds {steps[-1].value}; "
            value = replace(value, chain=steps, reason=value.reason if value.reason.startswith(prefix) else prefix + value.reason)
    if flipped > 1:
        assumed.add(f"branches on runtime state ({flipped}) explored one at a time, not in every combination")
    value = replace(value, data_dependent=tuple(sorted(assumed)) + value.data_dependent)
    if value.status == STATUS_RESOLVED:
        value = replace(value, backends_built=_built_everywhere([o for o, _ in outcomes]))
    return replace(value, assumptions=watch.assumptions(value))


def _built_everywhere(outcomes: list[attention.Outcome]) -> tuple[tuple[str, str, str, tuple[tuple[str, str], ...]], ...]:
    """The backend classes (with SGLang's arguments) every explored run that built the worker
    built, in the first run's order: what the draft serves with whatever the runtime state
    (the attention kernel level reads their kernel imports)."""
    built = [o.backend_classes for o in outcomes if o.status == STATUS_RESOLVED]
    if not built:
        return ()
    return tuple(dict.fromkeys(c for c in built[0] if all(c in other for other in built[1:])))


def _run_once(interp: Interpreter, facts: SpeculativeFacts, att: AttentionFacts, server_args: Instance, mc: Any, dc: Any,
              notes: set[str]) -> attention.Outcome:
    state = _State()
    try:
        return _run_state(interp, facts, att, server_args, mc, dc, state)
    finally:
        notes.update(state.skipped)  # the stood-in model workers' methods, listed on the value


def _run_state(interp: Interpreter, facts: SpeculativeFacts, att: AttentionFacts, server_args: Instance, mc: Any, dc: Any,
               state: _State) -> attention.Outcome:
    # the attention stage's hook records the attention backends the worker builds (its
    # DraftBackendFactory) and follows their constructors; this stage's hook runs first
    with interp.hooked_calls(attention.backend_hook(interp, att, state.backends)), \
            interp.hooked_calls(_hook(interp, facts, att, state, server_args, mc, dc)):
        try:
            return _run_hooked(interp, facts, att, server_args, mc, state)
        except EVALUATION_ENDS as exc:
            end = ending(exc, strict_mode())  # SGLANG_AUDIT_STRICT=1: an evaluator bug fails the tests
            if end.raised is not None:
                return _raise_outcome(interp, facts, end.raised, state)
            if not end.stopped:
                return attention.Outcome(STATUS_UNKNOWN, end.reason)
            reason = str(exc)
            if end.kind == BOUND and "CPU-time budget" in reason:
                reason = f"analysis bound reached: the speculative worker stage's CPU-time budget of {WORKER_CPU_SECONDS:.0f} s"
            return _partial(state, reason)


def _run_hooked(interp: Interpreter, facts: SpeculativeFacts, att: AttentionFacts, server_args: Instance, mc: Any, state: _State) -> attention.Outcome:
    sched = facts.scheduler
    # the scheduler's module is not loaded (its import-time decorators are torch's): the
    # algorithm object is built by its __init__'s own statement, and the site of its
    # `DraftWorkerClass(**kwargs)` is read
    state.called_at = _dispatch_call(interp, sched)
    spec = _algorithm(interp, sched, server_args)
    if isinstance(spec, str):
        return attention.Outcome(STATUS_UNKNOWN, spec)
    dispatch = interp.getattr(spec, sched.dispatch)
    worker = interp.call(dispatch, [server_args], {})
    if not isinstance(worker, Class):
        return attention.Outcome(STATUS_UNKNOWN, f"{sched.dispatch}() returned no class the tool can "
                                  f"construct ({worker!r})")
    target = _model_worker(interp, facts, att, server_args, state, None, [], None)
    built = interp.call(worker, [], _worker_kwargs(worker, sched, server_args, target))
    if state.built is None:
        return attention.Outcome(STATUS_UNKNOWN, f"{sched.dispatch}() returned {worker.name}, which the tool did not construct")
    # what the scheduler calls on its workers next, in its order (0.5.16+
    # init_all_attention_backends: `self.tp_worker.init_attention_backends()`, then
    # `self.draft_worker.init_attention_backends()`, which builds the draft's backends)
    for attr, name, line in _then_calls(interp, sched):
        obj = built if attr == sched.worker_attr else target
        if isinstance(obj, Instance) and obj.cls.lookup(name)[0]:
            state.then.append(ChainStep(state.built.file, line, "", name, f"self.{attr}.{name}()", STAGE, "then"))
            if obj is built:
                interp.call(interp.getattr(built, name), [], {})
            else:
                _target_then(interp, facts, att, obj, name, state)
    return attention.Outcome(STATUS_RESOLVED, worker.name, f"{state.built.file}:{state.built.line}",
                              chain=_steps(state), partial=tuple(state.backends.partial),
                              backend_classes=tuple(state.backends.classes))


def _algorithm(interp: Interpreter, sched: SpecScheduler, server_args: Instance) -> Any:
    """The algorithm object as the scheduler's ``__init__`` builds it: its first ``self.<attr> =
    ...`` statement (``SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)``,
    0.5.19+ ``...from_string(get_spec().speculative_algorithm)``: the resolved view, where
    NEXTN is already EAGLE), evaluated with ``server_args`` bound and each other name it reads
    taken from the scheduler module's own ``from X import Y`` (X loaded, never the scheduler).
    A reason (str) when it cannot be built so."""
    tree = _scheduler_tree(interp, sched)
    cls = next((c for c in tree.body if isinstance(c, ir.ClassDef) and c.name == sched.class_), None) if tree else None
    init = next((f for f in cls.body if isinstance(f, ir.FunctionDef) and f.name == "__init__"), None) if cls else None
    node = next((n for n in ir.walk(init.body) if isinstance(n, ir.Assign) and len(n.targets) == 1
                 and isinstance(n.targets[0], ir.Attribute) and n.targets[0].attr == sched.algorithm_attr
                 and isinstance(n.targets[0].value, ir.Name) and n.targets[0].value.id == "self"), None) if init else None
    if tree is None or node is None:
        return f"{sched.class_}.__init__ builds no self.{sched.algorithm_attr} the tool can read"
    wanted = {n.id for n in ir.walk(node.value) if isinstance(n, ir.Name)}
    scope = Scope()
    scope.vars["server_args"] = server_args
    for stmt in tree.body:
        if isinstance(stmt, ir.ImportFrom) and stmt.level == 0 and stmt.module and isinstance(stmt.names, list):
            for name, asname in stmt.names:
                if (asname or name) in wanted and (asname or name) not in scope.vars:
                    mod = interp.load_module(stmt.module)
                    scope.vars[asname or name] = interp.getattr(mod, name)
    missing = sorted(wanted - set(scope.vars) - {"self"})
    if missing:
        return f"{sched.class_}.__init__'s self.{sched.algorithm_attr} reads {', '.join(missing)}, not imported by name"
    file = interp.find_module_file(sched.module)
    rel = file[0].relative_to(interp.root).as_posix() if file else sched.module
    frame = Frame(module=ModuleObj(sched.module, rel, False), scope=scope, depth=interp.depth)
    return interp.evaluate(node.value, frame)


def _scheduler_tree(interp: Interpreter, sched: SpecScheduler) -> Any:
    found = interp.find_module_file(sched.module)
    if found is None:
        return None
    try:
        return interp.cache.load(found[0])
    except (ParseFailure, OSError):
        return None


def _worker_kwargs(worker: Class, sched: SpecScheduler, server_args: Instance, target: Any) -> dict[str, Any]:
    """The scheduler's keyword arguments, by the constructor's own parameter names: the
    server args, the target's (stand-in) model worker, this rank's indices (rules), anything
    else (the NCCL port) unknown."""
    found, init = worker.lookup("__init__")
    params = [p.name for p in init.params[1:] if p.star == ""] if found and isinstance(init, Function) else []
    out: dict[str, Any] = {}
    for name in params:
        if name == "server_args":
            out[name] = server_args
        elif name == "target_worker":
            out[name] = target
        elif name in sched.params:
            out[name] = sched.params[name]
        else:
            out[name] = Unknown(f"the scheduler's {name} (not modelled)", f"sched-arg:{name}")
    return out


def _dispatch_call(interp: Interpreter, sched: SpecScheduler) -> tuple[str, int] | None:
    """Where the scheduler's method constructs the class the dispatch returned
    (``DraftWorkerClass = self.spec_algorithm.create_worker(...)`` then
    ``DraftWorkerClass(**kwargs)``), else the dispatch call: read, never loaded."""
    found = interp.find_module_file(sched.module)
    if found is None:
        return None
    try:
        tree = interp.cache.load(found[0])
    except (ParseFailure, OSError):
        return None
    file = found[0].relative_to(interp.root).as_posix()
    method = next((f for c in tree.body if isinstance(c, ir.ClassDef) and c.name == sched.class_
                   for f in c.body if isinstance(f, ir.FunctionDef) and f.name == sched.method), None)
    if method is None:
        return None
    nodes = list(ir.walk(method.body))
    call = next((n for n in nodes if isinstance(n, ir.Call) and isinstance(n.func, ir.Attribute)
                 and n.func.attr == sched.dispatch), None)
    if call is None:
        return None
    names = {t.id for n in nodes if isinstance(n, ir.Assign) and n.value is call for t in n.targets if isinstance(t, ir.Name)}
    built = next((n for n in nodes if isinstance(n, ir.Call) and isinstance(n.func, ir.Name) and n.func.id in names), None)
    return (file, (built or call).line)


def _steps(state: _State) -> tuple[ChainStep, ...]:
    return tuple(s for s in (state.dispatch, state.built) if s is not None) + tuple(state.then) + tuple(state.backends.built)


def _target_then(interp: Interpreter, facts: SpeculativeFacts, att: AttentionFacts, worker: Instance, name: str,
                 state: _State) -> None:
    """The scheduler's call on the target's (stood-in) model worker: its method evaluated, so
    what its runner's method does before building the backends is SGLang's code on the target
    (0.5.23 ModelRunner.init_attention_backends: configure_aux_hidden_state_capture(model=
    self.model, ...), whose raise for a model class without set_eagle3_layers_to_capture is
    the verdict). The backends it builds are the attention stage's value: built unevaluated
    here. A step the evaluator cannot take, or a raise that is no verdict, ends the call
    (listed), never the worker's construction."""
    def stub_backends(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if isinstance(func, Class) and attention.is_backend(func, att):
            return Instance(func)
        return NOT_HOOKED

    def known_only(value: Unknown, file: str, line: int, text: str) -> bool | None:
        # what the target's runner does is evaluated only as far as known values decide it
        # (its backends' own runtime branches are the attention stage's): no branch of the stage
        raise Unmodelled(f"a branch on runtime state at {file}:{line} ({text})")

    state.evaluated.add(id(worker))
    try:
        with interp.hooked_calls(stub_backends), interp.filtered_decisions(known_only):
            interp.call(interp.getattr(worker, name), [], {})
    except (Unmodelled, AnalysisBound) as exc:
        state.skipped.append(f"{worker.cls.name}.{name}() of the target model worker: not followed past {stop_reason(exc)}")
    except PyRaise as raised:
        # the target's backend code (its creators' raises on process state: 0.5.23's
        # create_trtllm_mla_backend on DCP) is the attention stage's question, not the worker's
        backend_code = att.backend.base_module.rsplit(".", 1)[0].replace(".", "/") + "/"
        if raised.explicit and any(raised.file.startswith(p) for p in facts.worker.verdict_files) \
                and not raised.file.startswith(backend_code) and not at_module_level(interp, raised.file, raised.line):
            raise
        name_, message = raise_message(interp, raised)
        state.skipped.append(f"{worker.cls.name}.{name}() of the target model worker: not followed past "
                             f"{raised.where or TOOL_CALL} ({name_}: {message})")
    finally:
        state.evaluated.discard(id(worker))


def _then_calls(interp: Interpreter, sched: SpecScheduler) -> list[tuple[str, str, int]]:
    """The methods of the rules' ``then`` list the scheduler calls on its workers
    (``self.<worker_attr>.<name>()``, ``self.<target_attr>.<name>()``, read from its class, never
    loaded) as (attribute, name, first line), in line order."""
    found = interp.find_module_file(sched.module)
    if found is None or not sched.then:
        return []
    try:
        tree = interp.cache.load(found[0])
    except (ParseFailure, OSError):
        return []
    attrs = tuple(a for a in (sched.target_attr, sched.worker_attr) if a)
    key = ("spec_then_calls", id(tree), sched.class_, attrs, tuple(sched.then))
    known = interp.cache.prepared.get(key)
    if known is not None and known[0] is tree:  # the tree is kept: its id is not reused while listed
        return list(known[1])
    out: dict[tuple[str, str], int] = {}
    for c in tree.body:
        if not (isinstance(c, ir.ClassDef) and c.name == sched.class_):
            continue
        for n in ir.walk(c.body):
            f = n.func if isinstance(n, ir.Call) else None
            if isinstance(f, ir.Attribute) and f.attr in sched.then and isinstance(f.value, ir.Attribute) \
                    and f.value.attr in attrs and isinstance(f.value.value, ir.Name) and f.value.value.id == "self":
                out.setdefault((str(f.value.attr), str(f.attr)), n.line)
    calls = sorted(((a, m, line) for (a, m), line in out.items()), key=lambda c: c[2])
    interp.cache.prepared[key] = (tree, calls)  # walking the Scheduler class on every run cost ~0.15 s
    return list(calls)


def _partial(state: _State, reason: str) -> attention.Outcome:
    """The evaluator stopped: the class (if the dispatch chose one) is known, the rest is not."""
    if state.worker is not None:
        reason = f"SGLang builds {state.worker.name}; its construction could not be followed to its end ({reason})"
    return attention.Outcome(STATUS_UNKNOWN, reason, chain=_steps(state), partial=tuple(state.backends.partial))


def _raise_outcome(interp: Interpreter, facts: SpeculativeFacts, raised: PyRaise, state: _State) -> attention.Outcome:
    name, message = raise_message(interp, raised)
    site = raised.where
    if site and at_module_level(interp, raised.file, raised.line):
        return attention.Outcome("infeasible", f"{name}: {message}", site, raised.text, name)
    verdict = bool(site) and raised.explicit and any(raised.file.startswith(p) for p in facts.worker.verdict_files)
    if not verdict:
        why = "outside the speculative and attention code" if raised.explicit else "not an explicit raise in SGLang"
        return _partial(state, stopped(name, message, raised, why))
    own = [g for g in raised.guards if g.file == raised.file]
    if attention.on_unknowns(own, [(d.file, d.line) for d, _ in interp.taken], lambda f, n: attention.test_end(interp, f, n)):
        # the raise's own branch was decided by runtime state the tool does not know (0.5.23
        # DraftBackendFactory's `if backend_type not in backend_map: raise`, backend_type read
        # off a runner of the stood-in model worker's `model_runner_list`): not SGLang's verdict
        return _partial(state, f"evaluation stopped: {name}: {message} at {site} (its branch reads runtime state "
                               "the tool does not know)")
    guards = guard_steps(raised.guards) + tuple(
        ChainStep(g.file, g.line, g.describe(), g.truth, "", STAGE, "branch")
        for g in raised.guards if g.file.startswith(("sglang/srt/speculative/", "sglang/srt/managers/")))
    chain = (*_steps(state), *guards, ChainStep(raised.file, raised.line, "", f"{name}: {message}", raised.text, STAGE, "raise"))
    return attention.Outcome(STATUS_UNSUPPORTED, f"{name}: {message}", site, raised.text, name, chain,
                              tuple(state.backends.partial))


# ---- the hooks ----------------------------------------------------------------------------
def _hook(interp: Interpreter, facts: SpeculativeFacts, att: AttentionFacts, state: _State, server_args: Instance, mc: Any, dc: Any) -> Any:
    sched, wf = facts.scheduler, facts.worker
    process_state = tuple(wf.process_state_modules)
    kernel_modules = tuple(wf.kernel_modules)
    registry = factfiles.layers().model_registry
    process_objects = registry.process_objects
    object_modules = registry.process_state_modules

    def hook(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        kind = func.__class__
        if kind is Function and func.name == sched.dispatch and state.worker is None:
            # SGLang's own dispatch picks the class: evaluated, and the `return` cited
            result = interp.call_function(func, args, kwargs)
            if isinstance(result, Class):
                state.worker = result
                state.dispatch = _return_step(func, result)
            return result
        if isinstance(func, Class) and func is state.worker and state.built is None:
            # the scheduler's own call (read from its method), where SGLang constructs it
            file, line = state.called_at if state.called_at is not None else interp.call_site()
            state.built = ChainStep(file, line, "", func.name, f"{func.name}(...)", STAGE, "worker")
            # attributes its (stood-in) model worker would have set read as unknown runtime state
            return interp.instantiate(_standin(func, "runtime state of the speculative worker"), args, kwargs)
        if state.building:
            # inside a stood-in model worker's own __init__ (_build_model_worker)
            if kind is Class and _is_runner(func, att):
                # SGLang's `ModelRunner(...)`: the attention stage's stand-in runner, with SGLang's arguments
                return _runner(interp, att, state, server_args, mc, dc, func, args, kwargs)
            building = next((b for b in state.building if args and args[0] is b.worker), None)
            if kind is Function and building is not None:
                if func.name in building.builders or func.name == "__init__" or _is_getter(func, building.worker):
                    return NOT_HOOKED
                # what builds no model runner (its model config, tokenizer, random seed) is not
                # evaluated: unknown if read (the draft model's config is the earlier stages')
                return Unknown(f"{func.qualname}() of the stood-in model worker (not evaluated)", f"spec:worker:{func.name}")
        if kind is Class and _is_model_worker(func, wf):
            return _model_worker(interp, facts, att, server_args, state, func, args, kwargs)
        if kind is Function and func.name == "__init__" and func.qualname == f"{wf.model_worker_class}.__init__" \
                and func.module.name == wf.model_worker_module and args and isinstance(args[0], Instance):
            # super().__init__(..., is_draft_worker=True) of a worker that is a model worker
            # (0.5.10's EAGLEWorker): its own __init__, the model runners stood in
            _build_model_worker(interp, facts, att, state, func, args[0], args[1:], kwargs, kwargs.get("is_draft_worker") is True)
            return None
        if kind is Function and args and id(args[0]) in state.standins and id(args[0]) not in state.evaluated \
                and func.name != "__init__" and not _is_getter(func, args[0]):
            # a method of a stood-in model worker (0.5.16+'s `self.draft_worker.
            # init_attention_backends()`): its runner's own backend is the attention stage's
            # question (attention_backend's draft line), not evaluated again here
            role = state.standins[id(args[0])]
            note = (f"{func.qualname}() of the {role} model worker: not evaluated (the model worker is stood in; "
                    "its runner's own attention backend is the attention stage's value)")
            if note not in state.skipped:
                state.skipped.append(note)
            return Unknown(f"{func.qualname}() of the stood-in {role} model worker (not evaluated)", f"spec:{role}:{func.name}")
        if kind is Function and func.name in process_objects and func.module.name.startswith(object_modules):
            # the pipeline group and 0.5.2x's parallel context as a single-stage worker has them
            # (rules/layers.toml [model_registry.process_objects], as the draft model's stage)
            return process_object(func.name, process_objects[func.name], server_args)
        if kind is Function and func.module.name.startswith(process_state):
            return Unknown(f"{func.qualname}(): process state (distributed groups) is not modelled", f"proc:{func.qualname}")
        if kind is Function and func.module.name.startswith(kernel_modules):
            # a kernel the release compiles or loads at run time (the n-gram corpus, ...)
            return Unknown(f"{func.qualname}(): a kernel built or loaded at run time (not evaluated)", f"kernel:{func.qualname}")
        return NOT_HOOKED

    return hook


def _is_getter(func: Function, obj: Instance) -> bool:
    """``func`` is the getter of a property of ``obj``'s class (``TpModelWorker.model_runner``)."""
    found, attr = obj.cls.lookup(func.name)
    return found and isinstance(attr, Property) and attr.fget is func


def _return_step(func: Function, cls: Class) -> ChainStep | None:
    """The dispatch's ``return <cls>`` (the statement that chose the class), else its def."""
    body = func.body if isinstance(func.body, list) else []
    for node in ir.walk(body):
        if isinstance(node, ir.Return) and isinstance(node.value, ir.Name) and node.value.id == cls.name:
            return ChainStep(func.module.file, node.line, "", cls.name, f"return {cls.name}", STAGE, "dispatch")
    return ChainStep(func.module.file, func.line, "", cls.name, f"{func.qualname}(...) returned {cls.name}", STAGE, "dispatch")


def _is_model_worker(cls: Class, wf: SpecWorkerFacts) -> bool:
    return any(k.name == wf.model_worker_class and k.module is not None and k.module.name == wf.model_worker_module
               for k in cls.mro())


def _standin(cls: Class, what: str) -> Class:
    def missing(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        name = str(args[-1])
        return Unknown(f"{cls.name}.{name} ({what} is not modelled)", f"spec:{cls.name}.{name}")

    return Class(cls.name, (cls,), {"__getattr__": Native(f"{cls.name}.__getattr__", missing)}, cls.module, cls.line,
                 external_bases=())


def _is_runner(cls: Class, att: AttentionFacts) -> bool:
    """``cls`` is the release's model runner class (or a subclass)."""
    return any(k.name == att.runner.class_ and k.module is not None and k.module.name == att.runner.module for k in cls.mro())


def _model_worker(interp: Interpreter, facts: SpeculativeFacts, att: AttentionFacts, server_args: Instance, state: _State,
                  cls: Class | None, args: list[Any], kwargs: dict[str, Any] | None) -> Any:
    """A stand-in model worker (``TpModelWorker``) built by its own ``__init__`` with SGLang's
    arguments (``_build_model_worker``); ``cls`` None: the target's, which the scheduler builds
    (its call not read: the worker's required parameters by name as ``_worker_kwargs`` binds
    them, the others their defaults). Every attribute its ``__init__`` does not set is unknown
    runtime state."""
    wf = facts.worker
    draft = kwargs is not None and kwargs.get("is_draft_worker") is True
    if cls is None:
        if interp.find_module_file(wf.model_worker_module) is None:
            return Unknown("the target's model worker (not modelled)", "spec:target_worker")
        mod = interp.load_module(wf.model_worker_module)
        cls = interp.getattr(mod, wf.model_worker_class) if isinstance(mod, ModuleObj) else None
        if not isinstance(cls, Class):
            return Unknown("the target's model worker (not modelled)", "spec:target_worker")
        kwargs = _required_kwargs(cls, facts.scheduler, server_args)
    worker = Instance(_standin(cls, "runtime state of the model worker"))
    state.standins[id(worker)] = "draft" if draft else "target"
    found, init = cls.lookup("__init__")
    if found and isinstance(init, Function):
        _build_model_worker(interp, facts, att, state, init, worker, args, kwargs or {}, draft)
    return worker


def _required_kwargs(cls: Class, sched: SpecScheduler, server_args: Instance) -> dict[str, Any]:
    """The target model worker's parameters without a default, bound as ``_worker_kwargs`` binds
    a speculative worker's (the scheduler's own call is not read)."""
    found, init = cls.lookup("__init__")
    if not found or not isinstance(init, Function):
        return {}
    out: dict[str, Any] = {}
    for p in init.params[1:]:
        if p.star in ("", "kwonly") and p.name not in init.defaults:
            out[p.name] = server_args if p.name == "server_args" else sched.params[p.name] if p.name in sched.params \
                else Unknown(f"the scheduler's {p.name} (not modelled)", f"sched-arg:{p.name}")
    return out


def _build_model_worker(interp: Interpreter, facts: SpeculativeFacts, att: AttentionFacts, state: _State, init: Function,
                        worker: Instance, args: list[Any], kwargs: dict[str, Any], draft: bool) -> None:
    """The model worker's own ``__init__`` evaluated on the stand-in with SGLang's arguments, so
    it holds its model runners as SGLang's code builds them: ``self._model_runner =
    ModelRunner(...)``, and 0.5.10+'s ``self.model_runner_list`` (one runner per draft layer of
    a multi-layer EAGLE draft, ``_init_multi_layer_eagle_model_runners``), each ``ModelRunner(...)``
    the attention stage's stand-in runner built with the arguments SGLang passes it. Of the
    worker's own methods only those that construct a model runner run (its model config, the
    draft model's loading, tokenizer and random seed are not evaluated); it is followed only as
    far as known values decide it: a branch on runtime state, a step the evaluator cannot take
    or a raise outside the speculative code ends it, what it set so far holds; one that ends
    before it built a model runner ends the speculative worker's run (``Unmodelled``)."""
    def known_only(value: Unknown, file: str, line: int, text: str) -> bool | None:
        raise Unmodelled(f"a branch on runtime state at {file}:{line} ({text})")

    building = _Building(worker, draft, _runner_builders(interp, worker.cls, att))
    state.building.append(building)
    stopped = ""
    try:
        with interp.filtered_decisions(known_only):
            interp.call_function(init, [worker, *args], kwargs)
    except (Unmodelled, AnalysisBound) as exc:
        stopped = stop_reason(exc)
    except PyRaise as raised:
        if raised.explicit and any(raised.file.startswith(p) for p in facts.worker.verdict_files) \
                and not at_module_level(interp, raised.file, raised.line):
            raise  # SGLang's refusal in the speculative or attention code (a stand-in runner's)
        name, message = raise_message(interp, raised)
        stopped = f"{raised.where or TOOL_CALL} ({name}: {message})"
    finally:
        state.building.remove(building)
    if stopped and not building.runners:
        # without its runner the process state it would leave is not SGLang's (what the
        # runner's __init__ copies onto the published server args: 0.5.5-0.5.14's
        # use_mla_backend, whose absence leaves ServerArgs' method, truthy, for
        # DraftBackendFactory to read): the run is not followed past this point
        role = "draft" if draft else "target"
        raise Unmodelled(f"{init.qualname}() of the {role} model worker built no model runner (not followed past {stopped})")


def _runner_builders(interp: Interpreter, cls: Class, att: AttentionFacts) -> frozenset[str]:
    """The methods of ``cls``'s MRO whose body constructs the model runner class by name
    (0.5.23 TpModelWorker: ``_init_model_runner``, ``_init_multi_layer_eagle_model_runners``),
    read from the release, listed once per loaded body."""
    names: set[str] = set()
    for klass in cls.mro():
        for name, method in klass.ns.items():
            if not isinstance(method, Function) or not isinstance(method.body, list):
                continue
            key = ("constructs", id(method.body), att.runner.class_)
            known = interp.cache.prepared.get(key)
            if known is None or known[0] is not method.body:  # the body is kept: its id is not reused while listed
                known = (method.body, any(isinstance(n, ir.Call) and isinstance(n.func, ir.Name) and n.func.id == att.runner.class_
                                          for n in ir.walk(method.body, into_scopes=False)))
                interp.cache.prepared[key] = known
            if known[1]:
                names.add(name)
    return frozenset(names)


# the runner's __init__ parameters the stand-in binds itself (the resolved server args, the
# role's model config): what the model worker passes for them is not taken over
_OWN_RUNNER_PARAMS = frozenset({"server_args", "model_config", "is_draft_worker"})


def _runner(interp: Interpreter, att: AttentionFacts, state: _State, server_args: Instance, mc: Any, dc: Any, rcls: Class,
            args: list[Any], kwargs: dict[str, Any]) -> Any:
    """SGLang's ``ModelRunner(...)`` in a stood-in model worker's ``__init__``: the attention
    stage's stand-in runner for the draft (``is_draft_worker=True`` as SGLang passes it) or the
    target, given the other arguments SGLang passes that are known (0.5.23:
    ``draft_attention_backend=self.draft_attention_backend``, ``draft_model_idx=i``); what the
    runner's ``__init__`` copies onto the published server args is applied (``_republish``)."""
    building = state.building[-1]
    found, init = rcls.lookup("__init__")
    names = [p.name for p in init.params[1:] if p.star == ""] if found and isinstance(init, Function) else []
    bound = {**dict(zip(names, args, strict=False)), **kwargs}  # extra positional: TypeError's, not here
    flag = bound.get("is_draft_worker", building.draft)
    draft = flag is True if isinstance(flag, bool) else building.draft
    cfg = dc if draft else mc
    building.runners += 1
    if not isinstance(cfg, Instance):
        return Unknown(f"the {'draft' if draft else 'target'} model runner (no model config)", f"spec:runner:{draft}")
    given = {k: v for k, v in bound.items() if k not in _OWN_RUNNER_PARAMS and not isinstance(v, Unknown)}
    runner = attention.standin_runner(interp, att, rcls, server_args, cfg, draft, given, state.backends.built)
    attention.stamp_runner(interp, att, runner)
    _republish(rcls, runner, server_args, factfiles.speculative().worker.published_getter)
    return runner


def _republish(rcls: Class, runner: Instance, server_args: Instance, getter: str) -> None:
    """What the model runner's ``__init__`` copies onto the server args the scheduler published
    (0.5.5-0.5.14 model_runner.py: ``global_server_args = get_global_server_args()``, then
    ``global_server_args.use_mla_backend = self.use_mla_backend``, shadowing ServerArgs' method
    of that name, which DraftBackendFactory then reads): the stand-in runner's value, unknown
    if it has none. The draft's runner is built after the target's, so the draft's stays."""
    found, init = rcls.lookup("__init__")
    if not getter or not found or not isinstance(init, Function) or not isinstance(init.body, list):
        return
    nodes = list(ir.walk(init.body))
    published = {t.id for n in nodes if isinstance(n, ir.Assign) and isinstance(n.value, ir.Call)
                 and isinstance(n.value.func, ir.Name) and n.value.func.id == getter
                 for t in n.targets if isinstance(t, ir.Name)}
    for n in nodes:
        if not (isinstance(n, ir.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ir.Attribute)):
            continue
        target, value = n.targets[0], n.value
        if isinstance(target.value, ir.Name) and target.value.id in published and isinstance(value, ir.Attribute) \
                and isinstance(value.value, ir.Name) and value.value.id == "self":
            server_args.attrs[str(target.attr)] = runner.attrs.get(str(value.attr), Unknown(
                f"ModelRunner.{value.attr} (runtime state of the model runner is not modelled)", f"runner:{value.attr}"))
