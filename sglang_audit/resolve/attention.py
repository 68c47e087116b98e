"""The attention backend SGLang builds with the resolved settings: which backend classes the
model runner constructs (hybrid prefill/decode, the hybrid linear-attention sub-backend), or
the raise/assert a constructor hits (issue 16).

On one resolver path, after the runtime initialisers, the same interpreter evaluates the
release's own ``ModelRunner._get_attention_backend`` on a stand-in runner: a subclass of the
release's ``ModelRunner`` whose properties (``hybrid_gdn_config``, ``mambaish_config``, ...)
are the release's own, whose ``__init__`` assignments named in ``rules/attention.toml``
(``page_size``, ``use_mla_backend``, ...) are evaluated from the release's source, and whose
other attributes (memory pools, streams, the loaded model) are unknown runtime state. Every
class built whose MRO holds ``AttentionBackend`` is recorded with its site; its constructor
runs: an explicit raise/assert in the attention code is SGLang's verdict (``unsupported``);
a constructor the evaluator cannot follow to its end leaves the backend's class known and its
remaining checks unknown (said, never guessed). Branches on unknown runtime state are explored
inside this stage (never as resolver paths) and joined as the MoE layers are. The built
backends serve their batches in SGLang's process order: after the target's and the draft's
runners are both built, on the server args their constructions wrote (``evaluate_attention``).

Why this module is long: the stage is one evaluation in three phases that share the stand-in
runner, the backend hook and the join (the runner's process set-up, the construction, the
built backend serving a batch per forward mode); split, each part would import the others'
private state. The request-time phase (``request_time`` and below) is the candidate to move
out once the stand-ins become a module of their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sglang_audit import factfiles
from sglang_audit.errors import strict_mode
from sglang_audit.evaluate.ending import BOUND, EVALUATION_ENDS, ending
from sglang_audit.evaluate.explore import ONE_AT_A_TIME, explore, explore_paths
from sglang_audit.evaluate.interpreter import NOT_HOOKED, Frame, Interpreter, PyRaise, Unmodelled
from sglang_audit.evaluate.values import (
    AnalysisBound,
    BoundMethod,
    Class,
    Decision,
    External,
    Function,
    Instance,
    ModuleObj,
    Native,
    Scope,
    Unknown,
)
from sglang_audit.frontend import ir
from sglang_audit.frontend.irtext import expr_text
from sglang_audit.frontend.parse import ParseFailure
from sglang_audit.resolve import kernelargs, kvpool, model_standin
from sglang_audit.resolve.stage_common import (
    TOOL_CALL,
    ImportWatch,
    at_module_level,
    guard_steps,
    is_assert,
    module_nodes,
    names_in,
    process_object,
    process_value,
    publish_server_args,
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

MAX_ATTENTION_PATHS = 24  # branches on unknown runtime state explored per role
# CPU-time budget of the stage on one resolver path (parsing excluded), outside the
# resolution's own budget (resolver.py run_layers)
ATTENTION_CPU_SECONDS = 30.0
STAGE = "attention"


@dataclass(frozen=True)
class Outcome:
    status: str  # resolved | unsupported | unknown | infeasible
    value: str
    site: str = ""
    code: str = ""
    exception: str = ""
    chain: tuple[ChainStep, ...] = ()
    partial: tuple[str, ...] = ()  # constructors not evaluated to their end
    library_calls: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = ()
    # the backend classes built with SGLang's arguments (LayerValue.backends_built)
    backend_classes: tuple[tuple[str, str, str, tuple[tuple[str, str], ...]], ...] = ()


@dataclass
class BuildState:
    built: list[ChainStep] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)  # id(instance) -> its description
    # the runner's process set-up run on this path (process_setup): its steps, and the module
    # globals each set-up wrote, by module; the steps join the chain once a construction
    # calls a function of that module reading one of them
    setup: list[ChainStep] = field(default_factory=list)
    setup_globals: dict[str, frozenset[str]] = field(default_factory=dict)
    setup_read: bool = False
    setup_failed: list[str] = field(default_factory=list)  # set-ups that stopped: listed once read
    # kernel-library objects built (LayerValue.library_calls)
    library_calls: list[tuple[str, str, tuple[tuple[str, str], ...]]] = field(default_factory=list)
    # each backend class built, with the arguments SGLang passed it (Outcome.backend_classes)
    classes: list[tuple[str, str, str, tuple[tuple[str, str], ...]]] = field(default_factory=list)


def evaluate_attention(interp: Interpreter, server_args: Any, model_config: Any, draft_config: Any) -> dict[str, LayerValue]:
    """The layer value of ``attention_backend`` (target) and ``speculative_draft_attention_backend``
    (the draft worker's runner); {} when the release has no ``_get_attention_backend``."""
    spec = factfiles.attention()
    if not isinstance(server_args, Instance) or not _has_method(interp, spec.runner):
        return {}
    # the scheduler publishes the server args before the model runner builds the backend
    # (rules/layers.toml global_server_args): the MoE stage did so only for an MoE model
    publish_server_args(interp, factfiles.layers(), server_args)
    roles = [("attention_backend", model_config, False)]
    if isinstance(draft_config, Instance):
        roles.append(("speculative_draft_attention_backend", draft_config, True))
    base = dict(server_args.attrs)
    built = [(setting, _explore(interp, spec, server_args, mc, draft)) for setting, mc, draft in roles
             if isinstance(mc, Instance)]
    # SGLang's order in one process: the target's model runner is built, then the draft
    # worker's, and only then does either serve a batch. So the request-time calls of both run
    # after both constructions, on the published server args as their first (default) runs
    # left them in that order: what the draft runner's construction writes there (0.5.10-0.5.13
    # `get_global_server_args().prefill_attention_backend, ... = ...`, model_runner.py) is what
    # the target's backend reads serving a batch. What the later stages start from is unchanged
    # (the last explored run's state).
    left = dict(server_args.attrs)
    server_args.attrs.clear()
    server_args.attrs.update(base)
    for _, b in built:
        server_args.attrs.update(b.writes)
    try:
        return {setting: b.finish() for setting, b in built}
    finally:
        server_args.attrs.clear()
        server_args.attrs.update(left)


def _has_method(interp: Interpreter, run: factfiles.AttentionRunner) -> bool:
    """Read structurally (the module is loaded, i.e. its imports evaluated, only inside the
    stage, whose decisions never become resolver paths)."""
    found = interp.find_module_file(run.module)
    if found is None:
        return False
    try:
        tree = interp.cache.load(found[0])
    except (ParseFailure, OSError):
        return False
    return any(isinstance(n, ir.ClassDef) and n.name == run.class_
               and any(isinstance(f, ir.FunctionDef) and f.name == run.method for f in n.body)
               for n in tree.body)


@dataclass
class _Built:
    """One role's construction explored, its request-time phase not run yet (``finish``)."""

    writes: dict[str, Any]  # what its first run wrote to the published server args
    finish: Callable[[], LayerValue]  # the request-time calls, then the value


def _explore(interp: Interpreter, spec: factfiles.AttentionFacts, server_args: Instance, mc: Instance, draft: bool) -> _Built:
    watch = ImportWatch(interp, spec.backend.optional_packages)
    assumed: set[str] = set()

    def assert_on_runtime(value: Unknown, file: str, line: int, text: str) -> bool | None:
        # an assert the tool cannot decide (runtime state, tensor shapes) is not SGLang's
        # verdict here: assumed to hold and listed, never explored as a failure
        if is_assert(interp, file, line):
            assumed.add(f"assert {text} at {file}:{line} (runtime state not known; assumed to hold)")
            return True
        return None

    # the request-time verdict, asked of the first run's backend only (the constructor's
    # default branch: every run builds the same class when the join is resolved), on that
    # run's path, once every runner is built (evaluate_attention)
    deferred: list[tuple[Instance, dict[str, bool]]] = []
    first = [True]
    before = dict(server_args.attrs)
    writes: dict[str, Any] = {}

    def run() -> tuple[Outcome, list[Any]]:
        start = len(interp.logs)
        outcome = _run_once(interp, spec, server_args, mc, draft, deferred if first[0] else None)
        if first[0]:
            writes.update({k: v for k, v in server_args.attrs.items() if k not in before or before[k] is not v})
        first[0] = False
        # what SGLang logs while it builds the backend (the linear-attention kernel choice, ...)
        # is evidence on the value (the first branch's), never the path's own logs
        logs = interp.logs[start:]
        del interp.logs[start:]
        return outcome, logs

    # branches on runtime state are flipped one at a time from the first run, not in every
    # combination (a constructor has dozens; each run costs a second)
    with interp.watched_imports(watch), interp.filtered_decisions(assert_on_runtime):
        runs, complete = explore_paths(interp, run, MAX_ATTENTION_PATHS, ONE_AT_A_TIME)
    outcomes = [(outcome, tuple(f"{d.file}:{d.line} {d.text if t else f'not ({d.text})'}" for d, t in ran.taken))
                for (outcome, _), ran in runs]
    logged = [r for r in runs[0][0][1] if r.level in ("info", "warning")] if runs else []
    flipped = len(runs[0][1].new_decisions) if runs else 0
    joined = join_outcomes(outcomes, complete)

    def finish() -> LayerValue:
        request: list[Outcome] = []  # the verdict, or a resolved Outcome when there is none
        request_calls: list[KernelCall] = []
        request_args: list[KernelArgs] = []
        late = BuildState()  # what the request-time calls build (noted as the first run's were)
        for backend, decisions in deferred[:1]:
            saved = interp.enter_path(decisions)
            try:
                with interp.hooked_calls(backend_hook(interp, spec, late)):
                    assert spec.request is not None  # deferred only with a [request] table
                    refused, calls, passed = request_time(interp, spec, spec.request, backend, server_args, draft)
                request.append(refused if refused is not None else Outcome(STATUS_RESOLVED, ""))
                request_calls.extend(calls)
                request_args.extend(passed)
            except EVALUATION_ENDS as exc:
                # what the calls cannot follow says nothing of the constructor's outcome
                ending(exc, strict_mode())  # SGLANG_AUDIT_STRICT=1: an evaluator bug fails the tests
            finally:
                interp.leave_path(saved)
        return _finished(joined, request, (request_calls, request_args), late, runs, flipped, assumed, logged, watch)

    return _Built(writes, finish)


def _finished(value: LayerValue, request: list[Outcome], served: tuple[list[KernelCall], list[KernelArgs]], late: BuildState,
              runs: list[Any], flipped: int, assumed: set[str], logged: list[Any], watch: ImportWatch) -> LayerValue:
    """The role's value: the joined construction with its request-time outcome folded in
    (``served``: the kernel-library calls it made and the arguments it passed them)."""
    request_calls, request_args = served
    if late.built and value.status == STATUS_RESOLVED:
        value = replace(value, chain=value.chain + tuple(late.built))
    if value.status == STATUS_RESOLVED and request and request[0].status == STATUS_UNSUPPORTED:
        # the backend builds, and SGLang's code refuses the first batch it serves
        refused = request[0]  # its `partial`: the request-time asserts assumed to hold
        value = replace(value, status=STATUS_UNSUPPORTED, value=refused.value, site=refused.site, code=refused.code,
                        exception=refused.exception, chain=value.chain + refused.chain,
                        data_dependent=value.data_dependent + refused.partial)
    elif value.status == STATUS_RESOLVED and request_calls:
        # what the kernel libraries' own guards say of them is the kernel level's (attnkernels)
        value = replace(value, kernel_calls=tuple(dict.fromkeys(request_calls)),
                        kernel_call_args=tuple(dict.fromkeys(request_args)))
    if flipped > 1:
        assumed.add(f"branches on runtime state ({flipped}) explored one at a time, not in every combination")
    logs = tuple(dict.fromkeys(ChainStep(r.file, r.line, "", r.message, "", STAGE, "log") for r in logged))
    value = replace(value, data_dependent=tuple(sorted(assumed)) + value.data_dependent,
                    chain=value.chain + (logs if value.status != STATUS_UNKNOWN else ()),
                    # only from a construction that ends in a backend built (the first run's
                    # calls made before any branch on runtime state: every run makes them)
                    library_calls=runs[0][0][0].library_calls + tuple(late.library_calls)
                    if runs and value.status == STATUS_RESOLVED else ())
    return replace(value, assumptions=watch.assumptions(value))


def join_outcomes(outcomes: list[tuple[Outcome, tuple[str, ...]]], complete: bool, stage: str = STAGE,
          what: str = "the attention backend's construction", max_paths: int = MAX_ATTENTION_PATHS) -> LayerValue:
    """The outcomes of one construction's explored branches as one value (shared with the
    speculative worker stage: ``stage`` names the value's stage, ``what`` the construction)."""
    kept = [(o, w) for o, w in outcomes if o.status != "infeasible"]
    if not kept:
        return LayerValue(STATUS_UNKNOWN, None, reason="every branch ends in a failing import", paths=len(outcomes), stage=stage)
    # outcomes are told apart by what SGLang builds or raises, not by the route taken there
    distinct: list[Outcome] = []
    for o, _ in kept:
        if all((o.status, o.value) != (d.status, d.value) for d in distinct):
            distinct.append(o)
    partial_all = tuple(sorted({p for o, _ in kept for p in o.partial}))
    distinct = [replace(d, partial=partial_all) for d in distinct]
    kept = [(next(d for d in distinct if (d.status, d.value) == (o.status, o.value)), w) for o, w in kept]
    first = distinct[0]
    if complete and len(distinct) == 1 and first.status == STATUS_RESOLVED and first.partial:
        # SGLang builds these classes; a constructor not followed to its end may still raise
        return LayerValue(STATUS_UNKNOWN, None, reason=f"SGLang builds {first.value}; a constructor could not be followed to its end "
                          "(listed), so whether it passes is not known", candidates=(Candidate(first.value, (f"at {first.site}",)),),
                          paths=len(kept), chain=first.chain, data_dependent=first.partial, stage=stage)
    if complete and len(distinct) == 1 and first.status in (STATUS_RESOLVED, STATUS_UNSUPPORTED):
        return LayerValue(first.status, first.value, site=first.site, code=first.code, exception=first.exception,
                          paths=len(kept), chain=first.chain, data_dependent=first.partial, stage=stage)
    if len(distinct) > 1 and all(o.status == STATUS_UNSUPPORTED for o in distinct):
        # every branch explored ends in SGLang's own raise: the default branch's is reported,
        # the others are listed as candidates
        others = tuple(Candidate(f"{o.status}: {o.value}", (f"at {o.site}", *next(w for oo, w in kept if oo == o)))
                       for o in distinct[1:])
        return LayerValue(STATUS_UNSUPPORTED, first.value, site=first.site, code=first.code, exception=first.exception,
                          candidates=others, paths=len(kept), chain=first.chain, data_dependent=first.partial, stage=stage)
    if not complete:
        reason = f"analysis bound reached: more than {max_paths} branches of {what}"
    elif len(distinct) == 1:
        return LayerValue(STATUS_UNKNOWN, None, reason=first.value, paths=len(kept), data_dependent=first.partial, stage=stage)
    else:
        reason = f"{what} depends on runtime state the tool does not know"
    cands = []
    for o in distinct:
        whens = next(w for oo, w in kept if oo == o)
        label = o.value if o.status == STATUS_RESOLVED else f"{o.status}: {o.value}"
        cands.append(Candidate(label, ((f"at {o.site}",) if o.site else ()) + whens))
    partial = tuple(sorted({p for o in distinct for p in o.partial}))
    return LayerValue(STATUS_UNKNOWN, None, reason=reason, candidates=tuple(cands), paths=len(kept),
                      data_dependent=partial, stage=stage)


def _run_once(interp: Interpreter, spec: factfiles.AttentionFacts, server_args: Instance, mc: Instance, draft: bool,
              deferred: list[tuple[Instance, dict[str, bool]]] | None = None) -> Outcome:
    state = BuildState()
    with interp.hooked_calls(backend_hook(interp, spec, state)):
        outcome = _run_hooked(interp, spec, server_args, mc, draft, state, deferred)
    return replace(outcome, library_calls=tuple(state.library_calls))


def _run_hooked(interp: Interpreter, spec: factfiles.AttentionFacts, server_args: Instance, mc: Instance, draft: bool,
                state: BuildState, deferred: list[tuple[Instance, dict[str, bool]]] | None = None) -> Outcome:
    run = spec.runner
    try:
        mod = interp.load_module(run.module)
        cls = interp.getattr(mod, run.class_) if isinstance(mod, ModuleObj) else None
        if not isinstance(cls, Class):
            return Outcome(STATUS_UNKNOWN, f"{run.class_} is not a class in {run.module}")
        runner = standin_runner(interp, spec, cls, server_args, mc, draft, built=state.built)
        stamp_runner(interp, spec, runner)
        pending = _unchosen(interp, runner, server_args, draft)
        if pending is not None:
            return Outcome(STATUS_UNKNOWN, pending)
        if not draft:
            # the draft worker's runner skips it (`if not self.is_draft_worker`) and shares the
            # target's process: the globals the target's run wrote are its own
            process_setup(interp, spec, cls, runner, server_args, state)
        _, method = cls.lookup(spec.runner.method)
        result = interp.call(BoundMethod(method, runner), [], {})
        if not isinstance(result, Instance) or id(result) not in state.names:
            return Outcome(STATUS_UNKNOWN, f"{spec.runner.method}() returned no attention backend the tool built ({result!r})",
                            chain=tuple(state.built), partial=tuple(state.partial))
        if deferred is not None and spec.request is not None and not state.partial:
            # served once every runner is built (evaluate_attention), on this run's path
            deferred.append((result, dict(interp.decisions)))
        return Outcome(STATUS_RESOLVED, state.names[id(result)], state.built[-1].file + f":{state.built[-1].line}" if state.built else "",
                        chain=tuple(state.built), partial=tuple(state.partial))
    except EVALUATION_ENDS as exc:
        end = ending(exc, strict_mode())  # SGLANG_AUDIT_STRICT=1: an evaluator bug fails the tests
        if end.raised is not None:
            return _raise_outcome(interp, spec, end.raised, state)
        if not end.stopped:
            return Outcome(STATUS_UNKNOWN, end.reason)
        reason = str(exc)
        if end.kind == BOUND and "CPU-time budget" in reason:
            reason = f"analysis bound reached: the attention stage's CPU-time budget of {ATTENTION_CPU_SECONDS:.0f} s"
        return Outcome(STATUS_UNKNOWN, reason, chain=tuple(state.built), partial=tuple(state.partial))


# ---- request time (issue 42) ----------------------------------------------------------
REQUEST_PATHS = 24  # branches explored per method and forward mode
# CPU seconds and interpreter steps of the request-time calls on one role, inside the stage's
# budget (a 0.5.23 resolution path takes ~0.1M steps; the path's bound is 1M)
REQUEST_CPU_SECONDS = 3.0
REQUEST_STEPS = 150_000
_NOT_GIVEN = object()


KernelCall = tuple[str, str, str, str]  # LayerValue.kernel_calls: module, name, call site, condition
# LayerValue.kernel_call_args: (module.name, call site, ((keyword or "", kernelargs.encode), ...))
KernelArgs = tuple[str, str, tuple[tuple[str, str], ...]]


def request_time(interp: Interpreter, spec: factfiles.AttentionFacts, req: factfiles.AttentionRequest, backend: Instance,
                 server_args: Instance, draft: bool) -> tuple[Outcome | None, tuple[KernelCall, ...], tuple[KernelArgs, ...]]:
    """What SGLang's code says when the built backend serves its first batches: the methods of
    ``req`` called on ``backend`` with a stand-in batch per forward mode (its ``forward_mode``
    the release's member, every other attribute unknown) and a stand-in attention layer. A
    method's branches on unknown inputs are explored (an argument whose default is None is None
    first, as a caller that does not pass it has it); SGLang's own raise on every explored branch
    is the verdict (an ``unsupported`` Outcome, its chain naming the method and mode), anything
    else None: the calls never make a value unknown (what they cannot follow says nothing of the
    constructor's outcome). With it, the kernel-library functions (``[kernel] libraries``) the
    calls reached, each with its SGLang call site and, when a branch on request-time state
    encloses the call, that branch (``LayerValue.kernel_calls``); and the arguments SGLang's code
    passed each call as far as the evaluator knows them (``kernelargs``: plain data, dtypes,
    abstract tensors' shapes; a value two reaches of one site give differently is unknown)."""
    sa = server_args.attrs
    spec_algo = sa.get("speculative_algorithm")
    if not (spec_algo is None or isinstance(spec_algo, str)):
        return None, (), ()  # which modes the runner sees is not known on this path
    try:
        mod = interp.load_module(req.batch_module)
        batch_cls = interp.getattr(mod, req.batch_class) if isinstance(mod, ModuleObj) else None
        mode_cls = interp.getattr(mod, req.mode_class) if isinstance(mod, ModuleObj) else None
        layer_mod = interp.load_module(req.layer_module)
        layer_cls = interp.getattr(layer_mod, req.layer_class) if isinstance(layer_mod, ModuleObj) else None
    except EVALUATION_ENDS:
        return None, (), ()
    if not isinstance(batch_cls, Class) or not isinstance(mode_cls, Class):
        return None, (), ()
    names = req.draft_modes if draft else (req.target_speculative_modes if spec_algo else req.target_modes)
    modes = [(n, mode_cls.ns[n]) for n in names if isinstance(mode_cls.ns.get(n), Instance)]
    # the draft runner is served DRAFT_EXTEND by the v1 worker and DRAFT_EXTEND_V2 by the v2
    # one (which the speculative stage decides later): where the release has both, they are
    # alternatives, and a refusal is a verdict only when each of them refuses (0.5.5's
    # hybrid_linear_attn_backend.py:110 refuses DRAFT_EXTEND_V2, which its v1 NEXTN worker for
    # Qwen3-Next never serves)
    alternatives = draft and len(modes) > 1
    refusals: dict[str, Outcome] = {}
    calls: list[tuple[str, str, Any]] = []
    if sa.get("disable_cuda_graph") is False:
        calls += [(m, "", None) for m in req.graph_methods]
    calls += [(m, n, member) for n, member in modes for m in req.methods]
    start_logs = len(interp.logs)
    t0, s0, outer = time.process_time(), interp.steps, interp.deadline

    def spent() -> bool:
        return (outer is not None and outer()) or time.process_time() - t0 > REQUEST_CPU_SECONDS \
            or interp.steps - s0 > REQUEST_STEPS

    def assert_on_request(value: Unknown, file: str, line: int, text: str) -> bool | None:
        # an assert on request-time state holds for a batch SGLang builds (listed on a verdict)
        if is_assert(interp, file, line):
            assumed.add(f"assert {text} at {file}:{line} (request-time state not known; assumed to hold)")
            return True
        return None

    libraries = tuple(spec.kernel.libraries) if spec.kernel is not None else ()
    reached: dict[tuple[str, str, str], str] = {}  # (module, name, site) -> condition ("" wins)
    passed: dict[tuple[str, str, str], tuple[tuple[str, str], ...] | None] = {}  # -> the arguments (kernelargs)

    def observe(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        # a library function by its dotted name (not a method of what one returned: `f().squeeze`)
        if isinstance(func, External) and func.path.split(".")[0] in libraries and "." in func.path \
                and all(part.isidentifier() for part in func.path.split(".")):
            module, _, name = func.path.rpartition(".")
            file, line = interp.call_site()
            decided_unknown = {(d.file, d.line) for d, _ in interp.taken}
            cond = next((f"if {g.describe()} ({g.file}:{g.line})" for g in interp.guards
                         if (g.file, g.line) in decided_unknown), "")
            key = (module, name, f"{file}:{line}")
            reached[key] = cond if reached.get(key, cond) else ""
            args_now = tuple([("", kernelargs.encode(a)) for a in args] + [(k, kernelargs.encode(v)) for k, v in kwargs.items()])
            before = passed.get(key, args_now)
            passed[key] = kernelargs.merged(before, args_now) if before is not None else None
        return NOT_HOOKED

    def kernel_calls() -> tuple[tuple[KernelCall, ...], tuple[KernelArgs, ...]]:
        return (tuple((m, n, site, cond) for (m, n, site), cond in reached.items()),
                tuple((f"{m}.{n}", site, given) for (m, n, site), given in passed.items()
                      if given is not None and kernelargs.is_known(given)))

    assumed: set[str] = set()
    written = dict(server_args.attrs)  # what serving a batch writes there is not the next stage's
    try:
        # the imports are not the stage's: a package imported only here forks no resolution
        with interp.budget(spent), interp.filtered_decisions(assert_on_request), interp.unwatched_imports(), \
                interp.hooked_calls(observe):
            for method, mode, member in calls:
                if spent():
                    return (None, *kernel_calls())
                if mode in refusals:
                    continue  # this alternative already refused
                found, fn = backend.cls.lookup(method)
                if not found or not isinstance(fn, Function):
                    continue
                given = {"forward_mode": member, "attn_backend": backend} if member is not None else {}
                batch = _standin(batch_cls, "ForwardBatch", given)
                layer = _standin(layer_cls if isinstance(layer_cls, Class) else None, req.layer_class, {})
                refused = _request_call(interp, spec, req, backend, fn, mode, batch, layer)
                if refused is not None and not (alternatives and mode):
                    return (replace(refused, partial=tuple(sorted(assumed))), *kernel_calls())
                if refused is not None:
                    refusals[mode] = refused
        if alternatives and all(n in refusals for n, _ in modes):
            # every mode the draft runner may be served refuses: whichever worker SGLang builds
            return (replace(refusals[modes[0][0]], partial=tuple(sorted(assumed))), *kernel_calls())
        return (None, *kernel_calls())
    finally:
        # what SGLang logs serving a batch is not evidence of the construction
        del interp.logs[start_logs:]
        server_args.attrs.clear()
        server_args.attrs.update(written)


def _standin(cls: Class | None, name: str, attrs: dict[str, Any]) -> Instance:
    """An instance of ``cls`` (the release's class: its properties and methods are SGLang's)
    whose attributes not in ``attrs`` are unknown request-time state."""
    def missing(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        attr = str(args[-1])
        return Unknown(f"{name}.{attr} (request-time state, not known before a request)", f"req:{name}.{attr}")

    bases = (cls,) if cls is not None else ()
    module = cls.module if cls is not None else None
    standin = Class(name, bases, {"__getattr__": Native(f"{name}.__getattr__", missing)}, module, cls.line if cls else 0,
                    external_bases=())
    inst = Instance(standin)
    # a field the class declares with a default (``seq_lens_cpu: Optional[Tensor] = None``) is
    # set by whoever builds the batch: unknown here, not the class's default
    for c in cls.mro() if cls is not None else ():
        for fname, _, text in c.annotations:
            if "ClassVar" not in text:
                inst.attrs.setdefault(fname, Unknown(f"{name}.{fname} (request-time state, not known before a request)",
                                                     f"req:{name}.{fname}"))
    inst.attrs.update(attrs)
    return inst


def _request_args(backend: Instance, fn: Function, batch: Instance, layer: Instance,
                  forwarded: tuple[str, ...]) -> tuple[list[Any], dict[str, Any], dict[str, bool]]:
    """The arguments of ``fn`` bound by name (the batch, the layer; any other one without a
    default unknown; one whose default is None unknown, with the decisions that make it None
    first), and for ``**kwargs`` the None-default keywords every method in ``forwarded`` takes."""
    kwargs: dict[str, Any] = {}
    seeds: dict[str, bool] = {}

    def optional(pname: str) -> Unknown:
        key = f"req-arg:{pname}"
        seeds[key] = False  # `if x:` on a None argument
        seeds[f"{key} is None"] = True
        return Unknown(f"argument {pname} of {fn.name} (request-time input)", key)

    star_kw = False
    for p in fn.params[1:]:
        if p.star == "**":
            star_kw = True
            continue
        if p.star == "*":
            continue
        if p.name == "forward_batch":
            kwargs[p.name] = batch
        elif p.name == "layer":
            kwargs[p.name] = layer
        elif p.name not in fn.defaults:
            kwargs[p.name] = Unknown(f"argument {p.name} of {fn.name} (request-time input)", f"req-arg:{p.name}")
        elif fn.defaults[p.name] is None:
            kwargs[p.name] = optional(p.name)
    if star_kw:
        common: set[str] | None = None
        for other in forwarded:
            found, f = backend.cls.lookup(other)
            if found and isinstance(f, Function):
                names = {p.name for p in f.params if p.star in ("", "kwonly") and f.defaults.get(p.name, _NOT_GIVEN) is None}
                common = names if common is None else common & names
        for pname in sorted(common or ()):
            kwargs.setdefault(pname, optional(pname))
    return [], kwargs, seeds


def _request_call(interp: Interpreter, spec: factfiles.AttentionFacts, req: factfiles.AttentionRequest, backend: Instance,
                  fn: Function, mode: str, batch: Instance, layer: Instance) -> Outcome | None:
    args, kwargs, seeds = _request_args(backend, fn, batch, layer, req.forward_kwargs_from)
    base = dict(interp.decisions)
    what = f"{backend.cls.name}.{fn.name}" + (f" on a {mode} batch" if mode else "")
    base_file = spec.backend.base_module.replace(".", "/") + ".py"

    def one(decisions: dict[str, bool]) -> tuple[tuple[Outcome, tuple[str, ...]], list[Decision]]:
        saved = interp.enter_path({**base, **seeds, **decisions})
        try:
            try:
                interp.call(BoundMethod(fn, backend), list(args), dict(kwargs))
                outcome = Outcome(STATUS_RESOLVED, what)
            except EVALUATION_ENDS as exc:
                end = ending(exc, strict_mode())
                if end.raised is not None:
                    outcome = _raise_outcome(interp, spec, end.raised, BuildState(), req.verdict_files)
                    unknown_at = [(d.file, d.line) for d, _ in interp.taken]
                    if outcome.status == STATUS_UNSUPPORTED and end.raised.file == base_file:
                        # the base class only declares the method (`raise NotImplementedError()`):
                        # how a backend that does not define it is served is not read here
                        outcome = Outcome(STATUS_UNKNOWN, f"{fn.name} reaches the base class's declaration at {outcome.site}")
                    elif outcome.status == STATUS_UNSUPPORTED and _on_unknowns(end.raised, unknown_at,
                                                                               lambda f, n: _test_end(interp, f, n)):
                        # a raise under a branch on request-time state (`if forward_batch.seq_lens_cpu
                        # is None: raise`) is what a batch SGLang builds does not do: no verdict,
                        # and the path says nothing (the join drops it)
                        outcome = replace(outcome, status="infeasible")
                else:
                    outcome = Outcome(STATUS_UNKNOWN, end.reason)
                    where = str(getattr(exc, "where", "") or "")
                    file, _, line = where.rpartition(":")
                    if end.stopped and line.isdigit() and is_assert(interp, file, int(line), ir.Raise):
                        # stopped building a raise's message (`f"q={tuple(q.shape)}"`): the path
                        # raises, under guards the tool cannot check; it says nothing either way
                        outcome = replace(outcome, status="infeasible")
        finally:
            ran = interp.leave_path(saved)
        met = list(ran.new_decisions)
        taken = {d.key for d, _ in ran.taken}
        # an argument's default is a decision met too: the other side is explored as well
        met += [Decision(k, "a request-time argument", fn.module.file, fn.line, k, negated=not v)
                for k, v in seeds.items() if k in taken and k not in decisions]
        whens = tuple(f"{d.file}:{d.line} {d.text if t else f'not ({d.text})'}" for d, t in ran.taken)
        return (outcome, whens), met

    runs, complete = explore(one, REQUEST_PATHS, ONE_AT_A_TIME)
    joined = join_outcomes(list(runs), complete, what=what, max_paths=REQUEST_PATHS)
    if not complete or joined.status != STATUS_UNSUPPORTED:
        return None
    refused = next(o for o, _ in runs if o.status == STATUS_UNSUPPORTED and o.value == joined.value)
    step = ChainStep(fn.module.file, fn.line, "", what, f"{fn.name}(...)", STAGE, "request")
    return replace(refused, chain=(step, *refused.chain))


def _on_unknowns(raised: PyRaise, unknown_at: list[tuple[str, int]], test_end: Callable[[str, int], int]) -> bool:
    """Whether a branch enclosing the raise was decided by a request-time unknown."""
    return on_unknowns(raised.guards, unknown_at, test_end)


def on_unknowns(guards: Any, unknown_at: list[tuple[str, int]], test_end: Callable[[str, int], int]) -> bool:
    """Whether one of ``guards`` was decided by an unknown (``unknown_at``: the decisions taken
    on the path, by file and line). A decision sits at its operand's line, so one inside a test
    written over several lines (``if (\n spec_info is not None\n and ...):``, 0.5.23
    flashinfer_backend.py:2335) is below the guard's own line: a guard covers its test's lines
    (``test_end``: the test's last line). Shared with the speculative worker stage."""
    return any(f == g.file and g.line <= line <= test_end(g.file, g.line)
               for g in guards for f, line in unknown_at)


def test_end(interp: Interpreter, file: str, line: int) -> int:
    """The last line of the test of the ``if`` at ``file:line`` (shared with the speculative
    worker stage)."""
    return _test_end(interp, file, line)


def _test_end(interp: Interpreter, file: str, line: int) -> int:
    """The last line of the test of the ``if`` at ``file:line`` (``line`` when none is found)."""
    path = interp.root / file
    try:
        tree = interp.cache.load(path)
    except (ParseFailure, OSError):
        return line
    for node in module_nodes(interp, path, tree):
        if isinstance(node, ir.If) and node.line == line:
            return max((n.line for n in ir.walk(node.test) if n.line), default=line)
    return line


def _is_verdict(spec: factfiles.AttentionFacts, raised: PyRaise, extra: tuple[str, ...] = ()) -> bool:
    return raised.explicit and any(raised.file.startswith(p) for p in spec.backend.verdict_files + extra)


def _raise_outcome(interp: Interpreter, spec: factfiles.AttentionFacts, raised: PyRaise, state: BuildState,
                   extra_verdict_files: tuple[str, ...] = ()) -> Outcome:
    name, message = raise_message(interp, raised)
    site = raised.where
    if site and at_module_level(interp, raised.file, raised.line):
        return Outcome("infeasible", f"{name}: {message}", site, raised.text, name)
    if not site or not _is_verdict(spec, raised, extra_verdict_files):
        why = "outside the attention code" if raised.explicit else "not an explicit raise in SGLang"
        return Outcome(STATUS_UNKNOWN, stopped(name, message, raised, why),
                        chain=tuple(state.built), partial=tuple(state.partial))
    chain = (*state.built, *_guard_steps_any(raised.guards),
             ChainStep(raised.file, raised.line, "", f"{name}: {message}", raised.text, STAGE, "raise"))
    return Outcome(STATUS_UNSUPPORTED, f"{name}: {message}", site, raised.text, name, chain, tuple(state.partial))


def _guard_steps_any(guards: Any) -> tuple[ChainStep, ...]:
    steps = guard_steps(guards)  # the ones in sglang/srt/layers/
    extra = tuple(ChainStep(g.file, g.line, g.describe(), g.truth, "", STAGE, "branch")
                  for g in guards if g.file.startswith(("sglang/srt/model_executor/", "sglang/kernels/")))
    return extra + steps


def is_backend(cls: Class, spec: factfiles.AttentionFacts) -> bool:
    be = spec.backend
    return any(k.name == be.base_class and k.module is not None and k.module.name == be.base_module for k in cls.mro()[1:])


def backend_hook(interp: Interpreter, spec: factfiles.AttentionFacts, state: BuildState) -> Any:
    process_state = spec.backend.process_state_modules
    kernel_modules = spec.backend.kernel_modules
    warn_only = set(spec.backend.warn_only)
    libraries = frozenset(spec.kernel.libraries) if spec.kernel is not None else frozenset()

    def hook(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if state.setup_globals and not state.setup_read and isinstance(func, Function) and _reads_setup(interp, func, state):
            # a construction reads what the runner's process set-up wrote: that step is evidence
            # (or, when the set-up stopped, why those globals are not SGLang's)
            state.setup_read = True
            state.built[:0] = state.setup
            state.partial.extend(state.setup_failed)
        if isinstance(func, Class) and is_backend(func, spec):
            file, line = interp.call_site()
            parts = [state.names[id(a)] for a in args if isinstance(a, Instance) and id(a) in state.names]
            parts += [f"{k}={state.names[id(a)]}" for k, a in kwargs.items() if isinstance(a, Instance) and id(a) in state.names]
            label = f"{func.name}({', '.join(parts)})" if parts else func.name
            guards = " and ".join(g.describe() for g in interp.guards[-2:])
            if func.module is not None:
                # the class and SGLang's arguments, for the kernel level (which reads its
                # __init__'s kernel imports with them: fa_impl_ver=3 in DraftBackendFactory)
                given = tuple([("", _plain(a)) for a in args] + [(k, _plain(v)) for k, v in kwargs.items()])
                state.classes.append((func.module.name, func.name, f"{file}:{line}", given))
            try:
                inst = interp.instantiate(func, args, kwargs)
            except PyRaise as raised:
                if _is_verdict(spec, raised) and not at_module_level(interp, raised.file, raised.line):
                    raise
                name, message = raise_message(interp, raised)
                state.partial.append(f"{func.name}.__init__ not evaluated past {raised.where or TOOL_CALL} ({name}: {message})")
                inst = Instance(func)
            except (Unmodelled, AnalysisBound) as exc:
                state.partial.append(f"{func.name}.__init__ not evaluated to its end ({exc})")
                inst = Instance(func)
            state.names[id(inst)] = label
            state.built.append(ChainStep(file, line, guards, label, f"{func.name}(...)", STAGE, "backend"))
            return inst
        if libraries and "backend" in kwargs and isinstance(func, External) and func.path.split(".")[0] in libraries \
                and not interp.taken:
            # a kernel library's object built with SGLang's choice of its kernel family (a
            # FlashInfer wrapper's backend="auto") before any branch on runtime state (so on
            # every path): noted for the kernel level, the call itself left as it was
            file, line = interp.call_site()
            given = tuple([("", _plain(a)) for a in args] + [(k, _plain(v)) for k, v in kwargs.items()])
            state.library_calls.append((func.path, f"{file}:{line}", given))
            return NOT_HOOKED
        if isinstance(func, Function) and func.name in warn_only:
            return None
        inner = getattr(func, "func", None)
        if isinstance(inner, Function) and inner.name in warn_only:  # lru_cache-wrapped
            return None
        if isinstance(func, Function) and func.module.name.startswith(process_state):
            return Unknown(f"{func.qualname}(): process state (distributed groups) is not modelled", f"proc:{func.qualname}")
        if kernel_modules and isinstance(func, Function) and func.module.name.startswith(kernel_modules):
            # a kernel the release compiles or loads at run time (0.5.23's TRT-LLM MLA backend
            # JIT-builds one in its constructor): its handle is unknown, the build not evaluated
            return Unknown(f"{func.qualname}(): a kernel built or loaded at run time (not evaluated)", f"kernel:{func.qualname}")
        return NOT_HOOKED

    return hook


def _plain(value: Any) -> str:
    """An argument as the kernel level reads it: the repr of plain data, else "?"."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    return "?"


# ---- the runner's process set-up ---------------------------------------------------------
def process_setup(interp: Interpreter, spec: factfiles.AttentionFacts, cls: Class, runner: Instance, server_args: Instance,
                  state: BuildState) -> None:
    """The process set-up the model runner does before it builds a backend
    (``rules/attention.toml [[runner.process_init]]``: 0.5.2-0.5.13 ``init_torch_distributed``
    calls ``initialize_dp_attention(server_args=self.server_args, ...)``, which writes
    dp_attention's ``_ATTN_TP_SIZE`` and the other globals every MLA backend's constructor
    asserts): the call as written in the runner's method, evaluated on the stand-in, so the
    module globals hold what SGLang's code computes from the server args. What a worker knows
    of its process answers as in the MoE stage (this rank's indices, ``rules/layers.toml
    [moe.process_values]``); the process groups it builds are opaque objects; any other
    process state unknown. A set-up that stops leaves the globals as they were and says so."""
    process_state = tuple(spec.backend.process_state_modules)
    values = factfiles.layers().moe.process_values

    def hook(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        module = getattr(func, "module", None)
        if not isinstance(module, ModuleObj) or not module.name.startswith(process_state):
            return NOT_HOOKED
        if isinstance(func, Function) and func.name in values:
            return process_value(values[func.name], server_args)
        if isinstance(func, Class):  # a process group the worker builds (GroupCoordinator): opaque
            return process_object(f"{func.name}(...)", {}, server_args)
        return NOT_HOOKED  # other process state: the backend hook's unknown

    for init in spec.runner.process_init:
        found = _setup_call(interp, cls, init)
        if found is None:
            continue
        method, call, target = found
        frame = _method_frame(interp, method, runner)
        site = f"{method.module.file}:{call.line}"
        try:
            with interp.hooked_calls(hook):
                interp.evaluate(call, frame)
        except (PyRaise, Unmodelled, AnalysisBound) as exc:
            if isinstance(exc, PyRaise):
                name, message = raise_message(interp, exc)
                why = f"{name}: {message} at {exc.file}:{exc.line}"
            else:
                why = str(exc)
            state.setup_failed.append(f"{init.function}() at {site} not evaluated to its end ({why}): the globals it sets "
                                      "are not known")
            state.setup_globals[target.module.name] = _declared_globals(target)
            continue
        state.setup.append(ChainStep(method.module.file, call.line, "", f"{init.function}(...)", expr_text(call), STAGE, "process"))
        state.setup_globals[target.module.name] = _declared_globals(target)


def _setup_call(interp: Interpreter, cls: Class, init: Any) -> tuple[Function, ir.Node, Function] | None:
    """The runner's call of ``init.function`` (a method's statement ``f(...)`` whose name is
    that function of ``init.module``): (method, call, the function), or None."""
    calls = _named_calls(interp, cls, init.function)
    if not calls or interp.find_module_file(init.module) is None:
        return None  # a runner that does not call it (0.5.16+): its module is not loaded
    mod = interp.load_module(init.module)
    found = mod.globals.get(init.function) if isinstance(mod, ModuleObj) else None
    if not isinstance(found, Function):
        return None
    target: Function = found
    for method, node in calls:
        if interp.module_attr(method.module, init.function) is target:  # the runner's import resolved
            return method, node, target
    return None


def _named_calls(interp: Interpreter, cls: Class, name: str) -> list[tuple[Function, ir.Node]]:
    """The calls ``name(...)`` in the methods of ``cls``'s MRO whose module binds ``name``,
    listed once per loaded body (the runner's methods are walked once, not on every run)."""
    found: list[tuple[Function, ir.Node]] = []
    for klass in cls.mro():
        for method in klass.ns.values():
            if not isinstance(method, Function) or name not in method.module.globals:
                continue
            key = ("named_calls", id(method.body), name)
            known = interp.cache.prepared.get(key)
            if known is None or known[0] is not method.body:
                calls = [n for n in ir.walk(method.body, into_scopes=False)
                         if isinstance(n, ir.Call) and isinstance(n.func, ir.Name) and n.func.id == name]
                known = (method.body, calls)
                interp.cache.prepared[key] = known
            found += [(method, n) for n in known[1]]
    return found


def _method_frame(interp: Interpreter, method: Function, runner: Instance) -> Frame:
    scope = Scope(parent=method.closure)
    for p in method.params:
        scope.vars[p.name] = Unknown(f"ModelRunner.{method.name} argument {p.name} (not modelled)", f"runner-arg:{p.name}")
    scope.vars["self"] = runner
    return Frame(module=method.module, scope=scope, func=method, depth=interp.depth)


def _declared_globals(func: Function) -> frozenset[str]:
    return frozenset(n for node in ir.walk(func.body, into_scopes=False) if isinstance(node, ir.Global) for n in node.names)


def _reads_setup(interp: Interpreter, func: Function, state: BuildState) -> bool:
    """Whether ``func`` is a function of a set-up's module whose body names a global it wrote
    (``get_attention_tp_size``: ``assert _ATTN_TP_SIZE is not None``); the names listed once
    per loaded body, as ``_self_assigns``."""
    written = state.setup_globals.get(func.module.name)
    if not written:
        return False
    key = ("names_in", id(func.body))
    known = interp.cache.prepared.get(key)
    if known is None or known[0] is not func.body:
        known = (func.body, frozenset(names_in(func.body)))
        interp.cache.prepared[key] = known
    return bool(known[1] & written)


# ---- the stand-in runner ----------------------------------------------------------------
def standin_runner(interp: Interpreter, spec: factfiles.AttentionFacts, cls: Class, server_args: Instance, mc: Instance, draft: bool,
                   given: dict[str, Any] | None = None, built: list[ChainStep] | None = None) -> Instance:
    """A stand-in of the release's model runner: its ``__init__`` assignments named in the
    rules evaluated with the server args, the model config, the rules' parameters and
    ``given`` (the keyword arguments a caller the tool knows passes, e.g. the speculative
    worker's draft model worker); the KV pool and what it is built from evaluated on first read
    (``kvpool``, its class recorded in ``built``); any other attribute unknown runtime state."""
    busy: set[str] = set()
    mem = spec.runner.memory

    def missing(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        name = str(args[-1])
        if mem is not None and name == mem.model_attr and name not in busy:
            # the loaded model: a stand-in of the registry's class (resolve/model_standin.py)
            runner.attrs[name] = model_standin.loaded_model(i, mc, "draft" if draft else "target")
            return runner.attrs[name]
        if mem is not None and name in mem.statement_attrs and name not in busy:
            # set where the model is loaded (load_model): its statement evaluated on first read
            busy.add(name)
            try:
                _evaluate_assignments(i, spec, runner, cls, server_args, mc, draft, given, {name})
            finally:
                busy.discard(name)
            if name in runner.attrs:
                return runner.attrs[name]
        # the KV pool and what it is built from, by the release's own code (resolve/kvpool.py)
        derived = kvpool.runtime_attr(i, spec, runner, name, busy, built)
        if derived is not None:
            return derived
        return Unknown(f"ModelRunner.{name} (runtime state of the model runner is not modelled)", f"runner:{name}")

    standin = Class(cls.name, (cls,), {"__getattr__": Native("ModelRunner.__getattr__", missing)}, cls.module, cls.line,
                    external_bases=())
    runner = Instance(standin)
    runner.attrs.update(server_args=server_args, model_config=mc, is_draft_worker=draft)
    _evaluate_assignments(interp, spec, runner, cls, server_args, mc, draft, given, set(spec.runner.init_attrs))
    return runner


def _evaluate_assignments(interp: Interpreter, spec: factfiles.AttentionFacts, runner: Instance, cls: Class, server_args: Instance,
                          mc: Instance, draft: bool, given: dict[str, Any] | None, wanted: set[str]) -> None:
    """The first assignment in source order of each ``wanted`` attribute, evaluated with its
    method's parameters bound (``__init__``'s from the server args, the model config, the
    rules and ``given``; any other unknown); one that cannot be evaluated stays unknown."""
    found, init = cls.lookup("__init__")
    if not found or not isinstance(init, Function):
        return
    run = spec.runner
    # __init__ first, then the other methods (0.5.2x sets `self.dtype` in load_model): the first
    # assignment in source order of each attribute, evaluated with that method's parameters
    methods = [init] + [f for n, f in cls.ns.items() if isinstance(f, Function) and n != "__init__"]
    for func in methods:
        assigns = [(t, node) for t, node in _self_assigns(interp, func.body) if t.attr in wanted and t.attr not in runner.attrs]
        if not assigns:
            continue  # nothing wanted here: no frame to build
        scope = Scope(parent=func.closure)
        params = {p.name for p in func.params}
        bound: dict[str, Any] = {"self": runner}
        if func is init:
            bound.update(server_args=server_args, model_config=mc, is_draft_worker=draft)
            bound.update({k: v for k, v in run.params.items() if k in params})
            bound.update({k: server_args.attrs.get(v, Unknown(f"server args {v}")) for k, v in run.params_from_server_args.items()
                          if k in params})
            bound.update({k: v for k, v in (given or {}).items() if k in params})
        for p in params:
            scope.vars[p] = bound.get(p, Unknown(f"ModelRunner.{func.name} argument {p} (not modelled)", f"runner-arg:{p}"))
        frame = Frame(module=func.module, scope=scope, func=func, depth=interp.depth)
        for t, node in assigns:
            if t.attr in runner.attrs:
                continue  # the first assignment in the source order (the unconditional one)
            try:
                value = interp.evaluate(node.value, frame)
            except (PyRaise, Unmodelled, AnalysisBound):
                continue  # left to __getattr__: unknown
            if not isinstance(value, Unknown):
                runner.attrs[t.attr] = value


def _self_assigns(interp: Interpreter, body: list[ir.Node]) -> list[tuple[ir.Attribute, ir.Node]]:
    """The ``self.X = ...`` statements of a method body (``self.X: T = ...`` too: 0.5.23's
    ``self.spec_aux_config: SpecAuxHiddenStateConfig = ...``) in ``ir.walk`` order, as
    (target, statement), listed once per loaded body (walking every method of the runner
    again on each of the stage's runs was ~4% of a 0.5.23 resolution); a changed file loads
    as new IR and is listed again."""
    key = ("self_assigns", id(body))
    known = interp.cache.prepared.get(key)
    if known is None or known[0] is not body:  # the body is kept: its id is not reused while listed
        found: list[tuple[ir.Attribute, ir.Node]] = []
        for n in ir.walk(body):
            if isinstance(n, ir.Assign) and len(n.targets) == 1:
                t = n.targets[0]
            elif isinstance(n, ir.AnnAssign) and n.value is not None:
                t = n.target
            else:
                continue
            if isinstance(t, ir.Attribute) and isinstance(t.value, ir.Name) and t.value.id == "self":
                found.append((t, n))
        known = (body, found)
        interp.cache.prepared[key] = known
    return known[1]


def stamp_runner(interp: Interpreter, spec: factfiles.AttentionFacts, runner: Instance) -> None:
    """Releases whose runner resolves the (prefill, decode) pair before building
    (init_attention_backends: `self.prefill_attention_backend_str = resolved.prefill`): the
    release's own resolver function, its result stamped on the runner as the release does."""
    for st in spec.runner.stamp:
        if interp.find_module_file(st.module) is None:
            continue
        mod = interp.load_module(st.module)
        if not isinstance(mod, ModuleObj) or st.function not in mod.globals:
            continue
        resolved = interp.call(interp.getattr(mod, st.function), [], {st.runner_kwarg: runner})
        for field_name, attr in st.attrs.items():
            runner.attrs[attr] = interp.getattr(resolved, field_name)
        return


def _unchosen(interp: Interpreter, runner: Instance, server_args: Instance, draft: bool) -> str | None:
    """Releases that leave the backend None in ServerArgs and choose it in the model runner
    (0.4.x: ModelRunner.model_specific_adjustment) are not modelled: the reason, else None."""
    sa = server_args.attrs
    if draft and isinstance(sa.get("speculative_draft_attention_backend"), str):
        return None
    if "prefill_attention_backend_str" in runner.attrs:
        names = [runner.attrs["prefill_attention_backend_str"], runner.attrs.get("decode_attention_backend_str")]
    else:
        names = [sa.get("attention_backend")]
        found, getter = server_args.cls.lookup("get_attention_backends")
        if found and isinstance(getter, Function):
            pair = interp.call(BoundMethod(getter, server_args), [], {})
            names = list(pair) if isinstance(pair, tuple) else names
    if all(isinstance(n, str) for n in names):
        return None
    return (f"the attention backend is not chosen by ServerArgs here ({', '.join(repr(n) for n in names)}): "
            "the model runner finishes the choice, which the tool does not model for this release")
