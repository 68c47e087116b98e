"""The MoE layers SGLang builds with the resolved settings: which kernel they call, or where
they fail (issue 16).

On one resolver path, after the runtime initialisers, the same interpreter evaluates the
release's own ``FusedMoE.__init__`` on a stand-in layer (the quant config's
``get_quant_method``, ``create_weights``, ``create_moe_runner``), then
``process_weights_after_loading`` and ``apply``. Nothing is executed: tensors are unknown
values; a branch on one is explored both ways (a layer-local decision that never reaches the
resolver's paths), and the outcomes are joined: one kernel on every branch is ``resolved``,
one SGLang raise on every branch is ``unsupported``, anything else is ``unknown`` with the
candidates and the branch conditions that lead to each. Which classes, functions and
boundaries are involved is data (``rules/layers.toml``), never line numbers.

The stand-in layer is a subclass of the release's ``FusedMoE`` whose missing attributes raise
AttributeError, as ``torch.nn.Module.__getattr__`` does for a name never registered: its
attributes are exactly those SGLang's own code sets (``create_weights`` registers the
parameters through ``register_parameter``, modelled here). An AttributeError is reported as
unsupported only when ``create_weights`` ran to its end; otherwise the outcome is unknown.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sglang_audit import factfiles
from sglang_audit.errors import strict_mode
from sglang_audit.evaluate.ending import EVALUATION_ENDS, ending
from sglang_audit.evaluate.explore import explore_paths
from sglang_audit.evaluate.interpreter import (
    NOT_HOOKED,
    Interpreter,
    PyRaise,
    Unmodelled,
)
from sglang_audit.evaluate.values import (
    BoundMethod,
    Class,
    Decision,
    External,
    Function,
    HFConfig,
    Instance,
    ModuleObj,
    Native,
    Unknown,
)
from sglang_audit.factfiles import LayersFacts, MoeLayerFacts
from sglang_audit.frontend import ir
from sglang_audit.frontend.parse import ParseFailure
from sglang_audit.resolve.draft import draft_quant_config
from sglang_audit.resolve.expected import missing_module
from sglang_audit.resolve.layer_quant import loader_quant_config, quant_config_file
from sglang_audit.resolve.stage_common import (
    ImportWatch,
    at_module_level,
    guard_steps,
    is_assert,
    module_nodes,
    process_value,
    publish_server_args,
    raise_message,
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
TOKENS_KEY = "dispatch:hidden_states.tokens"  # the stand-in forward's token count (any value, 0 too)
MAX_LAYER_PATHS = 64  # branches on unknown tensors explored per layer (each is a few ms)


class _KernelReached(Exception):
    """Evaluation reached a kernel entry point: the layer's answer on this branch."""

    def __init__(self, outcome: _Outcome) -> None:
        super().__init__(outcome.value)
        self.outcome = outcome


@dataclass(frozen=True)
class _Outcome:
    status: str  # resolved | unsupported | unknown
    value: str  # the kernel label, "raise: <message>", or the reason
    site: str = ""  # file:line
    code: str = ""
    exception: str = ""
    runner: str = ""  # the runner backend create_moe_runner built, if any
    method: str = ""
    chain: tuple[ChainStep, ...] = ()
    tensors: tuple[str, ...] = ()  # the kernel call's tensor arguments (LayerValue.tensors)


@dataclass(frozen=True)
class _Role:
    setting: str
    model_config: Any
    draft: bool
    server_args: Any  # the ServerArgs the worker builds the layers with (published, sizes)


def evaluate_layers(interp: Interpreter, server_args: Any, model_config: Any, draft_config: Any) -> dict[str, LayerValue]:
    """The layer value of ``moe_runner_backend`` (target) and ``speculative_moe_runner_backend``
    (draft), for an MoE model; {} when the model has no MoE layers or the release lacks the
    classes named in rules/layers.toml."""
    spec = factfiles.layers()
    roles = [_Role("moe_runner_backend", model_config, False, server_args)]
    if isinstance(draft_config, Instance):
        roles.append(_Role("speculative_moe_runner_backend", draft_config, True, server_args))
    out: dict[str, LayerValue] = {}
    for role in roles:
        if not isinstance(role.model_config, Instance) or _moe_args(role.model_config, spec) is None:
            continue
        if interp.find_module_file(spec.moe.layer_module) is None:
            # an MoE model in a tree that should have the layer module: unknown, never skipped
            # (a skipped layer reads as a setting nothing contradicts); a partial tree without
            # its package or a scheduler is a release without this layer
            missing = missing_module(interp, spec.moe.layer_module)
            if missing is not None:
                out[role.setting] = LayerValue(STATUS_UNKNOWN, None, reason=(
                    f"the MoE layer class {spec.moe.layer_class} not found: {missing}"))
            continue
        out[role.setting] = _explore(interp, role, spec)
    return out


class _TensorBranches:
    """The layer's paths (``evaluate/explore.py`` strategy): every combination of its own
    branches, except on tensor data. A tensor branch whose side ends in an assert on data
    has the other side as its default (a loadable checkpoint takes it), forced on later
    paths and never counted as a combination; once a tensor branch is flipped, the tensor
    branches it meets are flipped one at a time, not in every combination."""

    def __init__(self, spec: LayersFacts, built: dict[Any, Any]) -> None:
        self.spec = spec
        self.built = built  # _run_once leaves "data_keys" there: the tensor keys of its raise
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
            if _tensor_decided(d, self.spec):
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


def _explore(interp: Interpreter, role: _Role, spec: LayersFacts) -> LayerValue:
    """Run the layer once per assignment of its own unknown branches (depth-first, bounded);
    the resolver's decisions, taken and new lists are restored afterwards."""
    assumed: set[str] = set()
    # the decisions taken, as (key, truth) pairs -> the layer FusedMoE.__init__ left; and
    # "data_keys" -> the tensor keys of the raise that ended the last run
    built: dict[Any, Any] = {}
    current: dict[str, Any] = {}  # "state": the state of the run under way
    branches = _TensorBranches(spec, built)

    def assert_on_tensors(value: Unknown, file: str, line: int, text: str) -> bool | None:
        # an assert on tensor data/metadata holds for a checkpoint SGLang can load: assumed,
        # reported, not explored (its failing side says nothing about the configuration)
        if is_assert(interp, file, line) and _tensor_decided(value, spec):
            assumed.add(f"assert {text} at {file}:{line} (tensor data; assumed to hold)")
            return True
        return None

    def run() -> _Outcome:
        with interp.filtered_decisions(assert_on_tensors):
            return _run_once(interp, role, spec, built, current)

    watch = ImportWatch(interp, spec.moe.optional_packages)
    with interp.watched_imports(watch):
        runs, complete = explore_paths(interp, run, MAX_LAYER_PATHS, branches)
    outcomes = [(outcome, tuple(f"{d.file}:{d.line} {d.text if t else f'not ({d.text})'}" for d, t in ran.taken))
                for outcome, ran in runs]
    value = _join(outcomes, complete)
    if branches.pairwise:
        assumed.add(f"branches on tensor data ({len(branches.tensor_keys)}) explored one at a time, not in every combination")
    return replace(value, data_dependent=tuple(sorted(assumed)) + value.data_dependent, assumptions=watch.assumptions(value))


def _join(outcomes: list[tuple[_Outcome, tuple[str, ...]]], complete: bool) -> LayerValue:
    data = sorted({f"{o.value} at {o.site}" for o, _ in outcomes if o.status == STATUS_DATA})
    kept = [(o, w) for o, w in outcomes if o.status not in (STATUS_DATA, STATUS_INFEASIBLE)]
    if not kept:
        imports = sorted({f"{o.value} at {o.site}" for o, _ in outcomes if o.status == STATUS_INFEASIBLE})
        reason = ("every branch ends in an assert on tensor data or a failing import" if data
                  else f"every branch ends in a failing import ({'; '.join(imports)})" if imports else "no branch")
        return LayerValue(STATUS_UNKNOWN, None, reason=reason, paths=len(outcomes), data_dependent=tuple(data))
    outcomes = kept
    distinct: list[_Outcome] = []
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
        reason = f"analysis bound reached: more than {MAX_LAYER_PATHS} layer branches"
    cands: list[Candidate] = []
    for o in distinct:
        whens = next(w for oo, w in outcomes if oo == o)
        label = o.value if o.status == STATUS_RESOLVED else f"{o.status}: {o.value}"
        cands.append(Candidate(label, ((f"at {o.site}",) if o.site else ()) + whens))
    methods = {o.method for o in distinct if o.method}
    runners = {o.runner for o in distinct if o.runner}
    return LayerValue(STATUS_UNKNOWN, None, methods.pop() if len(methods) == 1 else "", runners.pop() if len(runners) == 1 else "",
                      reason=reason, candidates=tuple(cands), paths=len(outcomes), data_dependent=tuple(data))


# ---- one evaluation of the layer ----------------------------------------------------------
def _run_once(interp: Interpreter, role: _Role, spec: LayersFacts, built: dict[Any, Any], current: dict[str, Any]) -> _Outcome:
    """One branch assignment. ``built`` keeps the layer as FusedMoE.__init__ left it when
    building it took no decision: later branches start from a copy instead of rebuilding."""
    state: dict[str, Any] = {"weights_created": False, "method": "", "runner": "", "chain": []}
    publish_server_args(interp, spec, role.server_args)
    current["state"] = state  # a runner stand-in kept from an earlier run reports to this run's state
    with interp.hooked_calls(_hook(interp, spec, state, role.server_args, current)):
        return _run_hooked(interp, role, spec, built, state)


def _run_hooked(interp: Interpreter, role: _Role, spec: LayersFacts, built: dict[Any, Any], state: dict[str, Any]) -> _Outcome:
    restore = None
    try:
        if role.draft:
            restore = _swap_to_speculative(interp, spec)
        hit = next((b for b in built.values() if all(interp.decisions.get(d.key or "") == d.input_truth(t) for d, t in b[2])), None)
        if hit is not None:
            layer = _copy_layer(hit[0])
            state.update(hit[1])
            state["chain"] = list(hit[1]["chain"])
            interp.replay_taken(hit[2])
        else:
            layer = _build_layer(interp, role, spec, state)
            if all(d.key for d, _ in interp.taken):
                taken = tuple(interp.taken)
                built[tuple((d.key, d.input_truth(t)) for d, t in taken)] = (_copy_layer(layer), {**state, "chain": list(state["chain"])}, taken)
        method = layer.attrs.get("quant_method")
        if not isinstance(method, Instance):
            return _Outcome(STATUS_UNKNOWN, f"FusedMoE.__init__ left no quant method ({method!r})", runner=state["runner"])
        state["method"] = method.cls.name
        found, _ = method.cls.lookup("process_weights_after_loading")
        if found:
            interp.call(interp.getattr(method, "process_weights_after_loading"), [layer], {})
        dispatch = _dispatch_output(interp, spec, layer, (_moe_args(role.model_config, spec) or {}).get("hidden_size"))
        result = interp.call(interp.getattr(method, "apply"), [layer, dispatch], {})
        return _no_kernel(interp, _Outcome(STATUS_UNKNOWN, f"apply() returned without reaching a kernel entry point listed in rules/layers.toml ({_short(result)})",
                                           runner=state["runner"], method=state["method"]))
    except _KernelReached as hit:
        o = _no_kernel(interp, hit.outcome) if hit.outcome.status == STATUS_UNKNOWN else hit.outcome
        return _Outcome(o.status, o.value, o.site, o.code, o.exception, state["runner"], state["method"], (*state["chain"], *o.chain),
                        o.tensors)
    except EVALUATION_ENDS as exc:
        end = ending(exc, strict_mode())  # SGLANG_AUDIT_STRICT=1: an evaluator bug fails the tests
        if end.raised is not None:
            out = _raise_outcome(interp, end.raised, state, spec)
            if "data_keys" in state:
                built["data_keys"] = state["data_keys"]
            return out
        # the runner create_moe_runner built is named only where the evaluator stopped in it
        return _Outcome(STATUS_UNKNOWN, end.reason, runner=state["runner"] if end.stopped else "", method=state["method"])
    finally:
        if restore is not None:
            restore()


def _no_kernel(interp: Interpreter, outcome: _Outcome) -> _Outcome:
    """A run that ended without a kernel after a branch on the forward's token count (``if
    x.shape[0] == 0: return``, an empty batch) says nothing about the layer's kernel: reported
    with the tensor-data outcomes, never the answer. Any other such run stays unknown."""
    if any(TOKENS_KEY in (d.key or "") for d, _ in interp.taken):
        return replace(outcome, status=STATUS_DATA, value=f"no kernel on an empty batch: {outcome.value}")
    return outcome


def _raise_outcome(interp: Interpreter, raised: PyRaise, state: dict[str, Any], spec: LayersFacts,
                   verdict_files: Sequence[str] | None = None) -> _Outcome:
    """A raise that ended a run: SGLang's verdict when explicit and in the stage's own code
    (``verdict_files``, the MoE layer's by default), data-dependent, or unknown."""
    name, message = raise_message(interp, raised)
    site = f"{raised.file}:{raised.line}"
    if at_module_level(interp, raised.file, raised.line):
        # an import that fails on this branch: the real import succeeded, so the branch is not taken
        return _Outcome(STATUS_INFEASIBLE, f"{name}: {message}", site, raised.text, name)
    tensor_sites = {(d.file, d.line): (d.key, d.input_truth(t)) for d, t in interp.taken if _tensor_decided(d, spec)}
    enclosing = {(g.file, g.line) for g in raised.guards} | {(raised.file, raised.line)}
    if set(tensor_sites) & enclosing:
        state["data_keys"] = [tensor_sites[s] for s in enclosing if s in tensor_sites]
        # an assert on tensor data/metadata: fails only for a checkpoint that violates it
        return _Outcome(STATUS_DATA, f"{name}: {message}", site, raised.text, name, state["runner"], state["method"])
    verdict = any(raised.file.startswith(prefix) for prefix in (verdict_files or spec.moe.verdict_files))
    chain = (*state["chain"], *guard_steps(raised.guards),
             ChainStep(raised.file, raised.line, "", f"{name}: {message}", raised.text, "layers", "raise"))
    if raised.explicit and verdict:
        return _Outcome(STATUS_UNSUPPORTED, f"{name}: {message}", site, raised.text, name, state["runner"], state["method"], chain)
    if name == "AttributeError" and verdict and state["weights_created"] and "'FusedMoE' object" in message:
        # a parameter SGLang never registered on the layer (create_weights ran to its end)
        return _Outcome(STATUS_UNSUPPORTED, f"{name}: {message}", site, raised.text, name, state["runner"], state["method"], chain)
    why = "outside the layer's own code" if raised.explicit else "not an explicit raise in SGLang"
    return _Outcome(STATUS_UNKNOWN, f"evaluation stopped: {name}: {message} at {site} ({why})",
                    runner=state["runner"], method=state["method"])


def _hook(interp: Interpreter, spec: LayersFacts, state: dict[str, Any], server_args: Any, current: dict[str, Any]) -> Any:
    functions = {k.function: k.label for k in spec.kernel if k.function}
    externals = {k.external: k.label for k in spec.kernel if k.external}
    runner = spec.moe.runner
    process_state = spec.moe.process_state_modules
    process_values = spec.moe.process_values
    jit_builders = frozenset(spec.moe.jit_builders)
    regex_aliases = spec.moe.regex_aliases
    regex_compile = set(spec.moe.regex_compile)
    external_attrs: set[tuple[int, str]] = set()  # attributes set on outside objects (tensors)

    def site() -> tuple[str, int]:
        return getattr(interp, "_call_site", ("?", 0))

    def hook(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        # runs on every call the layer makes (~28,000 per 0.5.23 resolution): one class test
        # first (the value classes have no subclasses), the checks of that class in order
        kind = func.__class__
        if kind is Function:
            qual = f"{func.module.name}.{func.name}"
            if qual in functions:
                file, line = site()
                raise _KernelReached(_Outcome(STATUS_RESOLVED, functions[qual], f"{file}:{line}", f"{func.name}(...)",
                                              tensors=kernel_tensors(args, kwargs)))
            if qual in jit_builders:
                # a native module compiled from the tree's C++ at first use: outside code
                return External(f"{qual}({', '.join(a for a in args if isinstance(a, str))})")
            if func.module.name.startswith(process_state):
                if func.name in process_values:
                    return process_value(process_values[func.name], server_args)
                return Unknown(f"{func.qualname}(): process state (distributed groups) is not modelled", f"proc:{func.qualname}")
            if func.name == "create_weights":
                file, line = site()
                owner = func.qualname.rsplit(".", 1)[0]
                state["chain"].append(ChainStep(file, line, _guards_text(interp.guards), owner, f"{owner}.create_weights(...)", "layers", "method"))
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
                file, line = site()
                raise _KernelReached(_Outcome(STATUS_RESOLVED, externals[path], f"{file}:{line}", f"{path}(...)",
                                              tensors=kernel_tensors(args, kwargs)))
            return NOT_HOOKED
        if kind is Class:
            if func.name == runner.class_ and func.module is not None and func.module.name == runner.module \
                    and not state.get("real_runner"):
                backend = args[0] if args else kwargs.get("runner_backend")
                value = backend.attrs.get("_value_") if isinstance(backend, Instance) else backend
                state["runner"] = value if isinstance(value, str) else repr(value)
                file, line = site()
                state["chain"].append(ChainStep(file, line, _guards_text(interp.guards), state["runner"], "MoeRunner(...)", "layers", "runner"))
                config = args[1] if len(args) > 1 else kwargs.get("config")
                return _runner_standin(interp, spec, func, backend, value, config, current)
            return NOT_HOOKED
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


def _tensor_decided(decision: Any, spec: LayersFacts) -> bool:
    text = f"{decision.reason} {decision.key or ''}"
    return any(m in text for m in spec.moe.tensor_markers)


def _compiled_pattern(pattern: str) -> Instance:
    from sglang_audit.evaluate.overlays.stdlib import regex

    inst = Instance(Class("Pattern", (), {}, None))
    for fn in ("fullmatch", "match", "search"):
        inst.attrs[fn] = Native(f"Pattern.{fn}", lambda i, a, k, fn=fn: regex(i, fn, [pattern, *a[:1]]))
    inst.attrs["pattern"] = pattern
    return inst


def _kernel(interp: Interpreter, label: str, code: str, tensors: tuple[str, ...] = ()) -> _Outcome:
    file, line = getattr(interp, "_call_site", ("?", 0))
    steps = (*guard_steps(interp.guards), ChainStep(file, line, _guards_text(interp.guards), label, code, "layers", "kernel"))
    return _Outcome(STATUS_RESOLVED, label, f"{file}:{line}", code, chain=steps, tensors=tensors)


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


def _guards_text(guards: Any) -> str:
    return " and ".join(g.describe() for g in guards[-2:])


def _made_outside(value: Any) -> bool:
    return isinstance(value, External) and value.path.endswith(")")


def _runner_standin(interp: Interpreter, spec: LayersFacts, cls: Class, backend: Any, value: Any, config: Any,
                    current: dict[str, Any]) -> Instance:
    inst = Instance(Class(cls.name, (), {}, cls.module))
    inst.attrs["runner_backend"] = backend

    def run(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        file, line = getattr(i, "_call_site", ("?", 0))
        info = args[1] if len(args) > 1 else kwargs.get("quant_info")
        info_name = info.cls.name if isinstance(info, Instance) else type(info).__name__
        for rk in spec.runner_kernel:
            if rk.backend == value and rk.quant_info == info_name:
                where = _find_call(i, rk.module, rk.call)
                code = f"MoeRunner({value}).run(..., {info_name}) -> {rk.call}" + (f" at {where}" if where else "")
                raise _KernelReached(_kernel(i, rk.label, code, kernel_tensors([info], {})))
        if isinstance(backend, Instance) and config is not None:
            state = current["state"]  # the run calling it (the layer may be a copy of an earlier run's)
            # not listed: the release's own MoeRunner, built as create_moe_runner built it (its
            # __init__ imports the module registering the backend's fused function and looks
            # it up), then its run() evaluated down to a kernel entry point ([[kernel]])
            state["real_runner"] = True
            try:
                real = i.instantiate(cls, [backend, config], {})
            except PyRaise as raised:
                elsewhere = _registered_unimported(i, value)
                if elsewhere:
                    # the registry is filled by imports: a module this evaluation did not import
                    # may register it in a real process; SGLang's raise is not the verdict then
                    raise _KernelReached(_Outcome(
                        STATUS_UNKNOWN, f"MoeRunner({value}) raised at {raised.file}:{raised.line}, but {elsewhere} registers a fused "
                        f"function for {value!r} and was not imported here: whether a worker has imported it is not known",
                        f"{file}:{line}")) from None
                raise
            finally:
                state["real_runner"] = False
            fused = real.attrs.get("fused_func") if isinstance(real, Instance) else None
            how = (f"its fused function {fused.name} ({fused.module.file}:{fused.line})" if isinstance(fused, Function)
                   else "its runner core")
            state["chain"].append(ChainStep(file, line, _guards_text(i.guards), value,
                                            f"MoeRunner({value}).run(..., {info_name}) -> {how}", "layers", "runner"))
            result = i.call(i.getattr(real, "run"), args, kwargs)
            raise _KernelReached(_Outcome(STATUS_UNKNOWN, f"MoeRunner({value}).run with {info_name} returned without reaching a "
                                                          f"kernel entry point listed in rules/layers.toml ({_short(result)})",
                                          f"{file}:{line}"))
        raise _KernelReached(_Outcome(STATUS_UNKNOWN, f"MoeRunner({value}).run with {info_name}: the runner's fused function is not listed in rules/layers.toml",
                                      f"{file}:{line}"))

    inst.attrs["run"] = Native("MoeRunner.run", run)
    return inst


def _registered_unimported(interp: Interpreter, backend: Any) -> str:
    """A file of the release whose text registers a fused function for ``backend``
    (``@register_fused_func(..., "<backend>")``) and that this evaluation did not load, or "".
    A text scan (cached per tree), used only to withhold a verdict, never to give one."""
    key = ("fused_func_registrations", interp.root)
    found = interp.cache.prepared.get(key)
    if found is None:
        found = {}
        pattern = re.compile(r"register_fused_func\(\s*[\"'][^\"']*[\"']\s*,\s*[\"']([^\"']+)[\"']")
        for path in sorted(interp.root.rglob("*.py")):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            for name in pattern.findall(text) if "register_fused_func" in text else ():
                found.setdefault(name, []).append(path)
        interp.cache.prepared[key] = found
    loaded = {getattr(m, "file", None) for m in interp.modules.values()}
    for path in found.get(backend, []) if isinstance(backend, str) else ():
        rel = path.relative_to(interp.root).as_posix()
        if rel not in loaded and str(path) not in loaded:
            return rel
    return ""


def _find_call(interp: Interpreter, module: str, name: str) -> str:
    found = interp.find_module_file(module)
    if found is None:
        return ""
    path, _ = found
    try:
        tree = interp.cache.load(path)
    except ParseFailure:
        return ""
    rel = path.relative_to(interp.root).as_posix()
    for node in module_nodes(interp, path, tree):
        if isinstance(node, ir.Call) and isinstance(node.func, ir.Name) and node.func.id == name:
            return f"{rel}:{node.line}"
    return ""


# ---- the stand-ins --------------------------------------------------------------------------
def _architecture(model_config: Instance) -> Any:
    hf = model_config.attrs.get("hf_config")
    archs = hf.attrs.get("architectures") if isinstance(hf, HFConfig) else None
    return archs[0] if isinstance(archs, list) and archs else None


def _first_moe_layer(model_config: Instance, moe: MoeLayerFacts) -> int:
    hf = model_config.attrs.get("hf_config")
    if not isinstance(hf, HFConfig):
        return 0
    text = hf.attrs.get("text_config")
    for source in (text.attrs if isinstance(text, HFConfig) else text if isinstance(text, dict) else {}, hf.attrs):
        for key in moe.first_moe_layer_keys:
            if isinstance(source.get(key), int):
                return source[key]
    return 0


def _moe_args(model_config: Instance, spec: LayersFacts) -> dict[str, Any] | None:
    hf = model_config.attrs.get("hf_config")
    if not isinstance(hf, HFConfig):
        return None
    text = hf.attrs.get("text_config")
    sources = [text.attrs if isinstance(text, HFConfig) else text if isinstance(text, dict) else {}, hf.attrs]
    if not any(k in s for s in sources for k in spec.moe.moe_keys):
        return None
    args: dict[str, Any] = {}
    for kw, keys in spec.moe.init_args.items():
        value: Any = Unknown(f"{kw} of the model", f"layer:{kw}")
        for s in sources:
            hit = next((s[k] for k in keys if k in s and isinstance(s[k], int)), None)
            if hit is not None:
                value = hit
                break
        args[kw] = value
    return args


def _build_layer(interp: Interpreter, role: _Role, spec: LayersFacts, state: dict[str, Any]) -> Instance:
    moe = spec.moe
    mod = interp.load_module(moe.layer_module)
    if not isinstance(mod, ModuleObj):
        raise Unmodelled(f"{moe.layer_module} not in the source tree")
    base = interp.getattr(mod, moe.layer_class)
    if not isinstance(base, Class):
        raise Unmodelled(f"{moe.layer_class} is not a class in {moe.layer_module}")
    layer = module_standin(base)
    quant_config = _quant_config(interp, role, spec, state)
    kwargs = dict(_moe_args(role.model_config, spec) or {})
    first = _first_moe_layer(role.model_config, moe)
    prefix = moe.draft_prefix if role.draft else moe.prefix.format(layer=first)
    kwargs.update(layer_id=0 if role.draft else first, quant_config=quant_config, prefix=prefix,
                  params_dtype=External("torch.bfloat16"))
    found, init = base.lookup("__init__")
    if not found or not isinstance(init, Function):
        raise Unmodelled(f"{base.name}.__init__ not found")
    names = {p.name for p in init.params}
    interp.call(BoundMethod(init, layer), [], {k: v for k, v in kwargs.items() if k in names})
    return layer


def attribute_line(interp: Interpreter, file: str, line: int, name: str) -> int:
    """The line of the first `.name` read at or after the call site (make_raise knows only
    the site of the last call)."""
    try:
        tree = interp.cache.load(interp.root / file)
    except (ParseFailure, OSError):
        return line
    lines = _attribute_lines(interp, interp.root / file, tree).get(name, ())
    at = bisect.bisect_left(lines, line)
    return lines[at] if at < len(lines) else line


def _attribute_lines(interp: Interpreter, path: Any, tree: ir.Node) -> dict[str, list[int]]:
    """Attribute name -> the sorted lines reading it, per loaded module (scanning every node
    of the module per missing attribute was ~3% of a 0.5.23 resolution)."""
    known = interp.cache.prepared.get(("attribute_lines", path))
    if known is None or known[0] is not tree:
        index: dict[str, list[int]] = {}
        for n in module_nodes(interp, path, tree):
            if isinstance(n, ir.Attribute):
                index.setdefault(n.attr, []).append(n.line)
        known = (tree, {k: sorted(v) for k, v in index.items()})
        interp.cache.prepared[("attribute_lines", path)] = known
    return known[1]


def module_standin(base: Class) -> Instance:
    """An instance of a stand-in subclass of ``base`` (a torch.nn.Module of SGLang's) whose
    constructor is then evaluated: an attribute never registered raises AttributeError at the
    line that reads it, as torch.nn.Module.__getattr__ does; register_parameter/register_buffer
    make attributes."""
    def missing(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        raised = i.make_raise("AttributeError", f"'{base.name}' object has no attribute '{args[-1]}'")
        raised.line = attribute_line(i, raised.file, raised.line, str(args[-1]))
        raised.text = f".{args[-1]}"
        raise raised

    standin = Class(base.name, (base,), {"__getattr__": Native("Module.__getattr__", missing)}, base.module, base.line,
                    external_bases=())
    layer = Instance(standin)
    _module_natives(layer)
    return layer


def _module_natives(layer: Instance) -> None:
    """torch.nn.Module.register_parameter / register_buffer: the name becomes an attribute."""
    def register(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if len(args) >= 2 and isinstance(args[0], str):
            layer.attrs[args[0]] = args[1]
        return None

    layer.attrs["register_parameter"] = Native("Module.register_parameter", register)
    layer.attrs["register_buffer"] = Native("Module.register_buffer", register)


def _copy_layer(layer: Instance) -> Instance:
    """The layer and its quant method, one level deep (process_weights_after_loading sets
    attributes on both; parameters are shared: their values are unknown anyway)."""
    new = Instance(layer.cls)
    new.attrs.update(layer.attrs)
    new.events.update(layer.events)
    _module_natives(new)
    method = layer.attrs.get("quant_method")
    if isinstance(method, Instance):
        copy = Instance(method.cls)
        copy.attrs.update(method.attrs)
        copy.events.update(method.events)
        new.attrs["quant_method"] = copy
    return new


def _quant_config(interp: Interpreter, role: _Role, spec: LayersFacts, state: dict[str, Any]) -> Any:
    quant = role.model_config.attrs.get("quantization")
    if quant is None:
        return None
    if not isinstance(quant, str):
        raise Unmodelled(f"the model's quantization is not known ({quant!r})")
    moe = spec.moe
    reg = interp.load_module(moe.quant_registry_module)
    cls = interp.call(interp.getattr(reg, moe.quant_registry_function), [quant], {})
    hf = role.model_config.attrs.get("hf_config")
    cfg = hf.attrs.get("quantization_config") if isinstance(hf, HFConfig) else None
    if isinstance(cfg, HFConfig):
        cfg = cfg.attrs
    if not isinstance(cfg, dict):
        cfg = quant_config_file(interp, cls, role.model_config)
    qc = interp.call(interp.getattr(cls, "from_config"), [cfg], {})
    qc = loader_quant_config(interp, moe, role.model_config, qc)
    if role.draft:
        hf = role.model_config.attrs.get("hf_config")
        layer_cls = interp.getattr(interp.load_module(moe.layer_module), moe.layer_class)
        qc = draft_quant_config(interp, spec.model_registry, _architecture(role.model_config), hf, qc, state["chain"],
                                layer_cls if isinstance(layer_cls, Class) else None, role.server_args)
    return qc


def _swap_to_speculative(interp: Interpreter, spec: LayersFacts) -> Any:
    for sw in spec.moe.speculative_swap:
        if interp.find_module_file(sw.module) is None:
            continue
        mod = interp.load_module(sw.module)
        if not isinstance(mod, ModuleObj) or sw.getter not in mod.globals:
            continue
        if sw.global_ and sw.global_ in mod.globals:
            value = interp.call(interp.getattr(mod, sw.getter), [], {})
            old = mod.globals[sw.global_]
            mod.globals[sw.global_] = value

            def restore_global(m: ModuleObj = mod, k: str = sw.global_, v: Any = old) -> None:
                m.globals[k] = v
            return restore_global
        if sw.flags and sw.flags in mod.globals:
            value = interp.call(interp.getattr(mod, sw.getter), [], {})
            obj = interp.call(interp.getattr(mod, sw.flags), [], {})
            for step in sw.path[:-1]:
                obj = interp.getattr(obj, step)
            if not isinstance(obj, Instance):
                continue
            key = sw.path[-1]
            old = obj.attrs.get(key)
            obj.attrs[key] = value

            def restore_attr(o: Instance = obj, k: str = key, v: Any = old) -> None:
                o.attrs[k] = v
            return restore_attr
    raise Unmodelled("the speculative MoE runner swap of this release is not described in rules/layers.toml")


def _dispatch_output(interp: Interpreter, spec: LayersFacts, layer: Instance, hidden: Any) -> Any:
    moe = spec.moe
    fields: dict[str, Any] = {f: Unknown(f"tensor {f} (values are not known before a forward)", f"dispatch:{f}") for f in moe.dispatch_fields}
    if "hidden_states" in fields and isinstance(hidden, int) and not isinstance(hidden, bool):
        # the activations entering the MoE layer: (tokens, the model's hidden_size, as the
        # constructor was given it: never the layer's padded one) in the dtype the layer was
        # built with (params_dtype); the token count is a forward's, unknown here
        tokens = Unknown("the token count of tensor hidden_states (not known before a forward)", TOKENS_KEY)
        fields["hidden_states"] = tensors.AbstractTensor((tokens, hidden), layer.attrs.get("params_dtype", External("torch.bfloat16")),
                                                         "cuda", False, "(the MoE layer's input hidden_states)")
    if interp.find_module_file(moe.dispatch_module) is not None:
        mod = interp.load_module(moe.dispatch_module)
        cls = interp.getattr(mod, moe.dispatch_class) if isinstance(mod, ModuleObj) else None
        if isinstance(cls, Class):
            inst = Instance(Class(cls.name, (cls,), {}, cls.module, cls.line))
            inst.attrs.update(fields)
            return inst
    raise Unmodelled(f"{moe.dispatch_class} not found in {moe.dispatch_module}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
