"""The MoE layers SGLang builds with the resolved settings: which kernel they call, or where
they fail (issue 16).

On one resolver path, after the runtime initialisers, the same interpreter evaluates the
release's own ``FusedMoE.__init__`` on a stand-in layer (the quant config's
``get_quant_method``, ``create_weights``, ``create_moe_runner``), then
``process_weights_after_loading`` and ``apply``. Nothing is executed: tensors are unknown
values; a branch on one is explored both ways (a layer-local decision that never reaches the
resolver's paths), and the outcomes are joined: one kernel on every branch is ``resolved``,
one SGLang raise on every branch is ``unsupported``, anything else is ``unknown`` with the
candidates and the branch conditions that lead to each (the exploration, the join and the
stand-in are ``layerstage.py``'s, shared with the linear stage). Which classes, functions and
boundaries are involved is data (``rules/layers.toml``), never line numbers.

The stand-in layer is a subclass of the release's ``FusedMoE`` whose missing attributes raise
AttributeError, as ``torch.nn.Module.__getattr__`` does for a name never registered: its
attributes are exactly those SGLang's own code sets (``create_weights`` registers the
parameters through ``register_parameter``, modelled here). An AttributeError is reported as
unsupported only when ``create_weights`` ran to its end; otherwise the outcome is unknown.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from sglang_audit import factfiles
from sglang_audit.errors import strict_mode
from sglang_audit.evaluate.ending import EVALUATION_ENDS, ending
from sglang_audit.evaluate.interpreter import (
    NOT_HOOKED,
    Interpreter,
    PyRaise,
    Unmodelled,
)
from sglang_audit.evaluate.values import (
    BoundMethod,
    Class,
    External,
    Function,
    HFConfig,
    Instance,
    ModuleObj,
    Native,
    Unknown,
)
from sglang_audit.factfiles import A2aBatch, A2aFormat, LayersFacts, MoeLayerFacts
from sglang_audit.frontend import ir
from sglang_audit.frontend.parse import ParseFailure
from sglang_audit.resolve.a2adispatch import batch_output, built_dispatcher, output_instance
from sglang_audit.resolve.draft import draft_quant_config
from sglang_audit.resolve.expected import missing_module
from sglang_audit.resolve.layer_quant import model_quant_config
from sglang_audit.resolve.layerstage import (
    STATUS_DATA,
    KernelReached,
    Outcome,
    Role,
    architecture,
    call_site,
    explore_layer,
    guards_text,
    join,
    kernel_tensors,
    layer_hook,
    module_natives,
    module_standin,
    new_state,
    raise_outcome,
)
from sglang_audit.resolve.stage_common import (
    TOOL_CALL,
    guard_steps,
    module_nodes,
    publish_server_args,
)
from sglang_audit.result import (
    STATUS_RESOLVED,
    STATUS_UNKNOWN,
    STATUS_UNSUPPORTED,
    ChainStep,
    LayerValue,
)
from sglang_audit.world.overlays import tensors

TOKENS_KEY = "dispatch:hidden_states.tokens"  # the stand-in forward's token count (any value, 0 too)
MAX_LAYER_PATHS = 64  # branches on unknown tensors explored per layer (each is a few ms)


def evaluate_layers(interp: Interpreter, server_args: Any, model_config: Any, draft_config: Any) -> dict[str, LayerValue]:
    """The layer value of ``moe_runner_backend`` (target) and ``speculative_moe_runner_backend``
    (draft), for an MoE model; {} when the model has no MoE layers or the release lacks the
    classes named in rules/layers.toml."""
    spec = factfiles.layers()
    roles = [Role("moe_runner_backend", model_config, False, server_args)]
    if isinstance(draft_config, Instance):
        roles.append(Role("speculative_moe_runner_backend", draft_config, True, server_args))
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


Format = A2aFormat | A2aBatch | None  # a DeepEP format, a batch kind (any other all-to-all), the standard output


def _explore(interp: Interpreter, role: Role, spec: LayersFacts) -> LayerValue:
    """The layer run once per assignment of its own unknown branches, the runs joined; under
    a DeepEP all-to-all, once per dispatch format the release's DeepEP mode enables
    (``_a2a_formats``), under any other, once per batch kind while the dispatcher the layer
    built hands it per-batch outputs; the formats' values joined (``_join_formats``)."""
    formats = _a2a_formats(interp, role, spec)
    if isinstance(formats, LayerValue):
        return formats
    values: list[tuple[Format, LayerValue]] = []
    for fmt in formats:
        per_batch: dict[str, bool] = {}
        values.append((fmt, _explore_format(interp, role, spec, fmt, per_batch)))
        if isinstance(fmt, A2aBatch) and not per_batch:
            # no run reached a per-batch output (a standard dispatcher, or the build ended):
            # the value is the same on every batch
            return values[0][1]
    return values[0][1] if len(values) == 1 else _join_formats(values)


def _explore_format(interp: Interpreter, role: Role, spec: LayersFacts, fmt: Format,
                    per_batch: dict[str, bool] | None = None) -> LayerValue:
    # "state": the state of the run under way; "per_batch": set when a run's dispatcher hands per-batch outputs
    current: dict[str, Any] = {"per_batch": per_batch if per_batch is not None else {}}
    explored = explore_layer(interp, spec, lambda built: _run_once(interp, role, spec, built, current, fmt), MAX_LAYER_PATHS)
    return explored.noted(join(explored.outcomes, explored.complete, explored.bound))


def _a2a_formats(interp: Interpreter, role: Role, spec: LayersFacts) -> list[Format] | LayerValue:
    """The dispatch outputs the layer's dispatcher hands it: ``[None]`` (the standard one)
    when the release's ``get_moe_a2a_backend()`` is none; under one of ``[moe.a2a_dispatch]
    backends``, each format whose mode method (``get_deepep_mode().enable_normal()``, ...)
    holds, as SGLang's own code answers it for the published server args; under any other,
    the batch kinds (the dispatcher the layer builds says what each gets: ``_run_hooked``). A
    mode the evaluation cannot answer leaves the layer unknown (never a guessed format)."""
    facts = spec.moe.a2a_dispatch
    if facts is None or interp.find_module_file(facts.mode_module) is None or interp.find_module_file(facts.module) is None:
        return [None]
    try:
        publish_server_args(interp, spec, role.server_args)
        mod = interp.load_module(facts.mode_module)
        if not isinstance(mod, ModuleObj) or not all(n in mod.globals for n in (facts.a2a_getter, facts.mode_getter)):
            return [None]
        backend = interp.call(interp.getattr(mod, facts.a2a_getter), [], {})
        value = backend.attrs.get("_value_") if isinstance(backend, Instance) else backend
        if value not in facts.backends:
            # a backend without the method is a release before the other all-to-alls (0.4.x)
            has_none = facts.none_method and isinstance(backend, Instance) and backend.cls.lookup(facts.none_method)[0]
            if not facts.batches or not has_none or interp.call(interp.getattr(backend, facts.none_method), [], {}) is True:
                return [None]
            return list(facts.batches)
        mode = interp.call(interp.getattr(mod, facts.mode_getter), [], {})
        enabled = [(f, interp.call(interp.getattr(mode, f.mode_method), [], {})) for f in facts.formats]
    except EVALUATION_ENDS as exc:
        return LayerValue(STATUS_UNKNOWN, None, reason=f"the {facts.a2a_getter}()/{facts.mode_getter}() of the release: {ending(exc, False).reason}")
    if not all(isinstance(on, bool) for _, on in enabled):
        return LayerValue(STATUS_UNKNOWN, None, reason=f"which DeepEP dispatch formats the layer sees: {facts.mode_getter}() is {_short(mode)}")
    return [f for f, on in enabled if on] or [None]


def _join_formats(values: list[tuple[Format, LayerValue]]) -> LayerValue:
    """The layer's value over the dispatch formats it sees at run time (auto: prefill batches
    the normal one, decode batches the low-latency one): a format SGLang's code refuses makes
    the layer unsupported (the server fails on those batches), every format reaching a kernel
    is resolved (the first format's kernel, the others named in ``data_dependent``), anything
    else unknown with each format's outcome."""
    def told(fmt: Format, v: LayerValue) -> str:
        what = f"{v.status}: {v.value}" + (f" at {v.site}" if v.site else "") if v.status != STATUS_UNKNOWN else f"unknown ({v.reason})"
        return f"{fmt.label if fmt else 'standard dispatch'}: {what}"

    lines = tuple(told(f, v) for f, v in values)
    refused = [(f, v) for f, v in values if v.status == STATUS_UNSUPPORTED]
    if refused and len(refused) == len(values) and len({(v.value, v.site) for _, v in refused}) == 1:
        return replace(refused[0][1], data_dependent=(*refused[0][1].data_dependent, *lines))  # whatever the format
    if refused:
        f, v = refused[0]
        return replace(v, value=f"{v.value} (on the {f.label if f else 'standard dispatch'})", data_dependent=(*v.data_dependent, *lines))
    if all(v.status == STATUS_RESOLVED for _, v in values):
        first = values[0][1]
        return replace(first, data_dependent=(*first.data_dependent, *lines))
    first = next(v for _, v in values if v.status == STATUS_UNKNOWN)
    return replace(first, reason=f"the dispatch formats the layer sees: {'; '.join(lines)}",
                   assumptions=tuple(sorted({a for _, v in values for a in v.assumptions})))


# ---- one evaluation of the layer ----------------------------------------------------------
def _run_once(interp: Interpreter, role: Role, spec: LayersFacts, built: dict[Any, Any], current: dict[str, Any],
              fmt: Format = None) -> Outcome:
    """One branch assignment. ``built`` keeps the layer as FusedMoE.__init__ left it when
    building it took no decision: later branches start from a copy instead of rebuilding."""
    state = new_state()
    publish_server_args(interp, spec, role.server_args)
    current["state"] = state  # a runner stand-in kept from an earlier run reports to this run's state
    with interp.hooked_calls(layer_hook(interp, spec, state, role.server_args, _runner(interp, spec, state, current))):
        return _run_hooked(interp, role, spec, built, state, fmt, current["per_batch"])


def _run_hooked(interp: Interpreter, role: Role, spec: LayersFacts, built: dict[Any, Any], state: dict[str, Any],
                fmt: Format, per_batch: dict[str, bool]) -> Outcome:
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
            return Outcome(STATUS_UNKNOWN, f"FusedMoE.__init__ left no quant method ({method!r})", runner=state["runner"])
        state["method"] = method.cls.name
        found, _ = method.cls.lookup("process_weights_after_loading")
        if found:
            interp.call(interp.getattr(method, "process_weights_after_loading"), [layer], {})
        a2a = _batch_dispatch_output(interp, spec, layer, fmt, state) if isinstance(fmt, A2aBatch) else None
        if a2a is not None:
            per_batch["seen"] = True
        if isinstance(fmt, A2aFormat):
            a2a = _a2a_dispatch_output(interp, spec, fmt)
        if a2a is not None:
            # the layer's own run_moe_core (DeepEPMoE's checks the format before apply)
            result = interp.call(interp.getattr(layer, "run_moe_core"), [a2a], {})
        else:
            dispatch = _dispatch_output(interp, spec, layer, (_moe_args(role.model_config, spec) or {}).get("hidden_size"))
            result = interp.call(interp.getattr(method, "apply"), [layer, dispatch], {})
        return _no_kernel(interp, Outcome(STATUS_UNKNOWN, f"apply() returned without reaching a kernel entry point listed in rules/layers.toml ({_short(result)})",
                                           runner=state["runner"], method=state["method"]))
    except KernelReached as hit:
        o = _no_kernel(interp, hit.outcome) if hit.outcome.status == STATUS_UNKNOWN else hit.outcome
        return Outcome(o.status, o.value, o.site, o.code, o.exception, state["runner"], state["method"], (*state["chain"], *o.chain),
                        o.tensors)
    except EVALUATION_ENDS as exc:
        end = ending(exc, strict_mode())  # SGLANG_AUDIT_STRICT=1: an evaluator bug fails the tests
        if end.raised is not None:
            out = raise_outcome(interp, end.raised, state, spec)
            if "data_keys" in state:
                built["data_keys"] = state["data_keys"]
            return out
        # the runner create_moe_runner built is named only where the evaluator stopped in it
        return Outcome(STATUS_UNKNOWN, end.reason, runner=state["runner"] if end.stopped else "", method=state["method"])
    finally:
        if restore is not None:
            restore()


def _no_kernel(interp: Interpreter, outcome: Outcome) -> Outcome:
    """A run that ended without a kernel after a branch on the forward's token count (``if
    x.shape[0] == 0: return``, an empty batch) says nothing about the layer's kernel: reported
    with the tensor-data outcomes, never the answer. Any other such run stays unknown."""
    if any(TOKENS_KEY in (d.key or "") for d, _ in interp.taken):
        return replace(outcome, status=STATUS_DATA, value=f"no kernel on an empty batch: {outcome.value}")
    return outcome


def _runner(interp: Interpreter, spec: LayersFacts, state: dict[str, Any], current: dict[str, Any]) -> Any:
    """The classes the MoE layer's code constructs (``layer_hook``'s ``classes``): the
    runner create_moe_runner builds (``[moe] runner``) is a stand-in whose ``run`` finds the
    kernel (``_runner_standin``), except while the release's own runner is being built."""
    runner = spec.moe.runner

    def classes(func: Class, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if func.name == runner.class_ and func.module is not None and func.module.name == runner.module \
                and not state.get("real_runner"):
            backend = args[0] if args else kwargs.get("runner_backend")
            value = backend.attrs.get("_value_") if isinstance(backend, Instance) else backend
            state["runner"] = value if isinstance(value, str) else repr(value)
            file, line = call_site(interp)
            state["chain"].append(ChainStep(file, line, guards_text(interp.guards), state["runner"], "MoeRunner(...)", "layers", "runner"))
            config = args[1] if len(args) > 1 else kwargs.get("config")
            return _runner_standin(interp, spec, func, backend, value, config, current)
        return NOT_HOOKED

    return classes


def _kernel(interp: Interpreter, label: str, code: str, tensors: tuple[str, ...] = ()) -> Outcome:
    file, line = call_site(interp)
    steps = (*guard_steps(interp.guards), ChainStep(file, line, guards_text(interp.guards), label, code, "layers", "kernel"))
    return Outcome(STATUS_RESOLVED, label, f"{file}:{line}", code, chain=steps, tensors=tensors)


def _runner_standin(interp: Interpreter, spec: LayersFacts, cls: Class, backend: Any, value: Any, config: Any,
                    current: dict[str, Any]) -> Instance:
    inst = Instance(Class(cls.name, (), {}, cls.module))
    inst.attrs["runner_backend"] = backend

    def run(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        file, line = call_site(i)
        info = args[1] if len(args) > 1 else kwargs.get("quant_info")
        info_name = info.cls.name if isinstance(info, Instance) else type(info).__name__
        for rk in spec.runner_kernel:
            if rk.backend == value and rk.quant_info == info_name:
                where = _find_call(i, rk.module, rk.call)
                code = f"MoeRunner({value}).run(..., {info_name}) -> {rk.call}" + (f" at {where}" if where else "")
                raise KernelReached(_kernel(i, rk.label, code, kernel_tensors([info], {})))
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
                    raise KernelReached(Outcome(
                        STATUS_UNKNOWN, f"MoeRunner({value}) raised at {raised.where or TOOL_CALL}, but {elsewhere} registers a fused "
                        f"function for {value!r} and was not imported here: whether a worker has imported it is not known",
                        f"{file}:{line}")) from None
                raise
            finally:
                state["real_runner"] = False
            fused = real.attrs.get("fused_func") if isinstance(real, Instance) else None
            how = (f"its fused function {fused.name} ({fused.module.file}:{fused.line})" if isinstance(fused, Function)
                   else "its runner core")
            state["chain"].append(ChainStep(file, line, guards_text(i.guards), value,
                                            f"MoeRunner({value}).run(..., {info_name}) -> {how}", "layers", "runner"))
            result = i.call(i.getattr(real, "run"), args, kwargs)
            raise KernelReached(Outcome(STATUS_UNKNOWN, f"MoeRunner({value}).run with {info_name} returned without reaching a "
                                                          f"kernel entry point listed in rules/layers.toml ({_short(result)})",
                                          f"{file}:{line}"))
        raise KernelReached(Outcome(STATUS_UNKNOWN, f"MoeRunner({value}).run with {info_name}: the runner's fused function is not listed in rules/layers.toml",
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


def _build_layer(interp: Interpreter, role: Role, spec: LayersFacts, state: dict[str, Any]) -> Instance:
    moe = spec.moe
    mod = interp.load_module(moe.layer_module)
    if not isinstance(mod, ModuleObj):
        raise Unmodelled(f"{moe.layer_module} not in the source tree")
    base = interp.getattr(mod, moe.layer_class)
    if not isinstance(base, Class):
        raise Unmodelled(f"{moe.layer_class} is not a class in {moe.layer_module}")
    quant_config = _quant_config(interp, role, spec, state)
    base = _impl_class(interp, moe, quant_config, base)
    layer = module_standin(base)
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


def _impl_class(interp: Interpreter, moe: MoeLayerFacts, quant_config: Any, base: Class) -> Class:
    """The class the model builds its MoE layers with, as its code asks the release
    (``get_moe_impl_class(quant_config)``: DeepEPMoE under a DeepEP-style all-to-all, whose
    own ``__init__`` asserts and ``run_moe_core`` then run); ``base`` when the release has no
    such function or it returns ``base``. Anything but a subclass of ``base`` stops the run
    (unknown): the stand-in would not be the layer SGLang builds."""
    facts = moe.impl_class
    if facts is None or interp.find_module_file(facts.module) is None:
        return base
    mod = interp.load_module(facts.module)
    if not isinstance(mod, ModuleObj) or facts.function not in mod.globals:
        return base
    func = interp.getattr(mod, facts.function)
    # 0.5.2+: get_moe_impl_class(quant_config); 0.4.x: get_moe_impl_class() (no parameter)
    takes = isinstance(func, Function) and any(p.name == "quant_config" for p in func.params)
    cls = interp.call(func, [], {"quant_config": quant_config} if takes else {})
    if isinstance(cls, Class) and base in cls.mro():
        return cls
    raise Unmodelled(f"{facts.function}() returned {_short(cls)}, not a subclass of {base.name}")


def _copy_layer(layer: Instance) -> Instance:
    """The layer and its quant method, one level deep (process_weights_after_loading sets
    attributes on both; parameters are shared: their values are unknown anyway)."""
    new = Instance(layer.cls)
    new.attrs.update(layer.attrs)
    new.events.update(layer.events)
    module_natives(new)
    method = layer.attrs.get("quant_method")
    if isinstance(method, Instance):
        copy = Instance(method.cls)
        copy.attrs.update(method.attrs)
        copy.events.update(method.events)
        new.attrs["quant_method"] = copy
    return new


def _quant_config(interp: Interpreter, role: Role, spec: LayersFacts, state: dict[str, Any]) -> Any:
    """The quant config the loader hands the model; for the draft, the one its class passes
    down to its MoE layer (``draft.draft_quant_config``)."""
    qc = model_quant_config(interp, spec.moe, role.model_config)
    if not role.draft or role.model_config.attrs.get("quantization") is None:
        return qc
    moe = spec.moe
    hf = role.model_config.attrs.get("hf_config")
    layer_cls = interp.getattr(interp.load_module(moe.layer_module), moe.layer_class)
    return draft_quant_config(interp, spec.model_registry, architecture(role.model_config), hf, qc, state["chain"],
                              layer_cls if isinstance(layer_cls, Class) else None, role.server_args)


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


def _a2a_dispatch_output(interp: Interpreter, spec: LayersFacts, fmt: A2aFormat) -> Instance:
    """SGLang's dispatch output class of ``fmt``, its fields unknown (``output_instance``):
    DeepEP's outputs (``[moe.a2a_dispatch]``)."""
    facts = spec.moe.a2a_dispatch
    assert facts is not None  # a format comes from these facts
    mod = interp.load_module(facts.module)
    cls = interp.getattr(mod, fmt.class_) if isinstance(mod, ModuleObj) and fmt.class_ in mod.globals else None
    if not isinstance(cls, Class):
        raise Unmodelled(f"{fmt.class_} not found in {facts.module}")
    return output_instance(cls, fmt.label, "DeepEP's output")


def _batch_dispatch_output(interp: Interpreter, spec: LayersFacts, layer: Instance, batch: A2aBatch,
                           state: dict[str, Any]) -> Instance | None:
    """Under an all-to-all other than DeepEP's: what the dispatcher the layer built hands it
    on ``batch`` (``a2adispatch.batch_output``), or None for a standard dispatcher (a class of
    ``[moe] dispatch_module``), whose output is the standard one. A layer without a
    dispatcher stops the run (unknown): the standard output would be a guess."""
    facts = spec.moe.a2a_dispatch
    assert facts is not None  # a batch comes from these facts
    dispatcher = built_dispatcher(layer, facts)
    if dispatcher is None:
        raise Unmodelled(f"the layer built no dispatcher ({facts.dispatcher_attr!r}): which dispatch output the "
                         f"all-to-all backend hands it is not known")
    module = dispatcher.cls.module
    if module is not None and module.name == spec.moe.dispatch_module:
        return None
    return batch_output(interp, facts, dispatcher, batch, state["chain"])


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
