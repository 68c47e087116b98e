"""The dense linear layers SGLang builds with the model's quant config (issue 42/44): where
they fail, or that they build.

On one resolver path, after the other layer stages, the same interpreter evaluates the target
model class's own ``__init__`` (found in the release's model registry, as the draft's class is:
``draft.py``) with its config and the quant config the model loader hands it, down to its
first decoder layer: every ``LinearBase`` subclass that layer constructs (``QKVParallelLinear``,
``RowParallelLinear``, ``MergedColumnParallelLinear``, ``ReplicatedLinear``, ...) is recorded
with the arguments the model passes (sizes, ``quant_config`` or none, ``parallel_group``,
``tp_size``, prefix) and left a stand-in; model-package classes on the way are built for
real. Then the recorded layers are built from the release's own classes: each constructor
asks the quant config's ``get_quant_method`` (SGLang's ``is_layer_skipped`` on the prefix) and
runs ``create_weights`` on abstract tensors; then, as the model loader does after loading,
each quant method's ``process_weights_after_loading``. The tensor-parallel partition is the
release's own (its group resolution on the published sizes). A raise in the layers' own code
decided by known values is SGLang's verdict on the ``quantization`` setting (e.g. fp8.py
``validate_block_quant_shapes``: a TP shard not divisible by the weight block); branches on
unknowns are explored and joined as the MoE stage joins them. Once the layers resolve, each
quant method's forward runs on an abstract input and the kernel-library functions it calls are
noted (``LayerValue.kernel_calls``, issue 42): the kernel level reads the FP8 GEMM runner's
FlashInfer call from them (``kernels.py``, ``rules/kernels.toml [[layer_call]]``). When a
kernel runner's entry was called by none, the same forward is read on every linear layer the
model's constructor builds (``_whole_model``): no call there is the derived fact "not used".

Why this module is long: its three readings (the value's layers, their forward, the whole
model's) share one recording of the model's constructor, one construction of a layer and one
forward run; split, each would need the others' private helpers.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
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
    AnalysisBound,
    BoundMethod,
    Class,
    External,
    Function,
    HFConfig,
    Instance,
    ModuleObj,
    Unknown,
)
from sglang_audit.factfiles import LayerCall, LayersFacts, LinearFacts, LinearLayer
from sglang_audit.resolve.draft import registry_class
from sglang_audit.resolve.expected import missing_module
from sglang_audit.resolve.layer_quant import model_quant_config
from sglang_audit.resolve.layerstage import (
    NO_ARG,
    Outcome,
    Role,
    architecture,
    bound_argument,
    explore_layer,
    join,
    layer_hook,
    module_standin,
    new_state,
    raise_outcome,
    stop_text,
    submodule_hook,
    unevaluated,
)
from sglang_audit.resolve.stage_common import publish_server_args
from sglang_audit.result import (
    STATUS_RESOLVED,
    STATUS_UNKNOWN,
    STATUS_UNSUPPORTED,
    Candidate,
    LayerValue,
)
from sglang_audit.world.overlays.tensors import AbstractTensor

# its own CPU budget (0.5.23, Qwen3-4B-FP8 at TP 4, sm90: 0.6 s), outside the resolution's
LINEAR_CPU_SECONDS = 10.0
SETTING = "quantization"  # the setting whose layer value the dense layers give
MAX_RECORD_PATHS = 16  # paths of the model's constructor explored until one records its linear layers
MAX_LINEAR_PATHS = 64  # branches on unknowns explored while the layers are constructed
MAX_PREPARE_PATHS = 16  # ... while one layer's weights are prepared (runtime kernel choices, mostly)
MAX_FORWARD_PATHS = 16  # ... while one layer's forward runs (its kernel calls)
MAX_FORWARD_STOPS = 3  # why no run of the forward ended, as many shown
# the forwards' own CPU budget, inside the stage's (0.5.23 Qwen3-4B-FP8, four layers: ~2 s on
# SM100 flashinfer_trtllm); a run cut by it counts as a branch that may call another kernel
FORWARD_CPU_SECONDS = 4.0
FORWARD_STEPS = 150_000  # as the attention stage's request-time calls
# every linear layer the model builds constructed (_whole_model), on its own budget: 0.5.16
# Qwen3.5-397B-A17B's 446 would take ~760,000 steps (~8 s; its shared experts' constructions
# ~10,000 each), over a resolution's step bound with what precedes: cut at the step bound (the
# same cut on every machine), the CPU time a backstop
WHOLE_MODEL_STEPS = 200_000
WHOLE_MODEL_CPU_SECONDS = 4.0
NOT_FOLLOWED = "not followed: "
# a run whose weight preparation the evaluator could not follow to its end (a kernel library's
# outside object, ...): listed, never the verdict, while another run of the layer is followed
STATUS_NOT_FOLLOWED = "not followed"


@dataclass(frozen=True)
class _Recorded:
    """A linear layer to build: one the model's first decoder layer constructs, with what it
    passes, or one rules/layers.toml describes at config.json's shapes (``derived``: the
    loader's quant config is passed to it)."""
    name: str  # the prefix below the decoder layer (self_attn.qkv_proj)
    cls: Class
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    derived: bool = False


class _LayerDone(Exception):
    """The model began its second decoder layer: the first one's linear layers are known."""


def evaluate_linear(interp: Interpreter, server_args: Any, model_config: Any, draft_config: Any) -> dict[str, LayerValue]:
    """The layer value of ``quantization``: the target model's dense linear layers, and the
    draft model's as its ``draft`` (the draft worker builds its model with the same code:
    a raise there stops the server as well). {} when neither has a value."""
    spec = factfiles.layers()
    built: list[_Recorded] = []
    target = _target_value(interp, server_args, model_config, spec, built)
    try:
        draft = _draft_value(interp, server_args, draft_config, spec)
    except EVALUATION_ENDS as exc:
        # the stage's CPU budget spent on the draft, or an evaluator stop: the target's value stays
        ending(exc, strict_mode())  # SGLANG_AUDIT_STRICT=1: an evaluator bug fails the tests
        draft = LayerValue(STATUS_UNKNOWN, None, stage="linear", reason=(
            f"the draft's linear layer evaluation failed ({type(exc).__name__}: {exc})"))
    if target is not None and target.status == STATUS_RESOLVED and built:
        # last, on its own budget: the kernel calls never change a value, nor take the draft's time
        target = _with_forward(interp, server_args, model_config, spec, built, target)
    if _asked_entries(model_config, target) and interp.find_module_file(spec.linear.module) is not None:
        # a kernel runner setting's entry (rules/kernels.toml [[layer_call]]) no built layer
        # called: whether any layer of the model calls it is read on all the model builds
        target = _whole_model(interp, server_args, model_config, spec, target, draft_config)
    if draft is None:
        return {SETTING: target} if target is not None else {}
    if target is None:
        # nothing of the target's evaluated: the draft's value needs a layer value to ride on
        target = LayerValue(STATUS_UNKNOWN, None, stage="linear", reason=(
            "the target model's dense linear layers are not evaluated (not quantized, or no layer derived "
            "at config.json's shapes: rules/layers.toml [linear])"))
    return {SETTING: replace(target, draft=draft)}


def _draft_value(interp: Interpreter, server_args: Any, draft_config: Any, spec: LayersFacts) -> LayerValue | None:
    """The draft model's dense linear layers, always from its own class's constructor (the
    class the release's registry maps the draft's architecture to, on the draft's config:
    for NEXTN/MTP the target checkpoint's, as SGLang's draft ModelConfig has it), with the
    quant config the loader hands it: whatever the class passes on (DeepSeek's NEXTN drops
    ``modelopt_fp4``, Qwen3.5's MTP drops NVFP4) is SGLang's code, evaluated. None for an
    unquantized draft (its layers take the unquantized method) or one building no linear layer."""
    if not isinstance(draft_config, Instance) or draft_config.attrs.get("quantization") is None:
        return None
    if interp.find_module_file(spec.linear.module) is None:
        return None  # the target's value says so
    stopped: list[str] = []
    layers = _record(interp, spec, draft_config, server_args, draft=True, stopped=stopped)
    if isinstance(layers, str):
        return LayerValue(STATUS_UNKNOWN, None, stage="linear", reason=layers)
    if not layers:
        return None
    value = _explore(interp, server_args, draft_config, spec, layers)
    # a construction that stopped on the way may hold linear layers of its own: listed, since
    # the value speaks only for the layers built (never "no other layer")
    return replace(value, data_dependent=(
        *(f"{s} (its linear layers, if any, not built)" for s in stopped), *value.data_dependent))


def _target_value(interp: Interpreter, server_args: Any, model_config: Any, spec: LayersFacts,
                  built: list[_Recorded]) -> LayerValue | None:
    """The target's value for a quantized model; None for an unquantized one (its layers take
    the unquantized method), a release without the linear layer module, or a model whose
    configuration the rules derive no layer for.

    The layers are first built at the shapes config.json gives (``[[linear.layer]]``: cheap,
    no model code run). A build that does not resolve is confirmed on what the model's own
    constructor builds (``_record``: its linear layers, with the quant config, sizes and groups
    it passes them), since a model may pass its layers another quant config or none
    (gpt_oss.py's attention takes none); that build is the answer. ``built`` receives the
    layers of the value given (their forward runs last, ``_with_forward``)."""
    lin = spec.linear
    if not isinstance(model_config, Instance) or model_config.attrs.get("quantization") is None:
        return None
    shapes = _layer_args(model_config, lin)
    if not shapes:
        return None  # decided from config.json alone: no module of the release loaded (nor read)
    if interp.find_module_file(lin.module) is None:
        missing = missing_module(interp, lin.module)
        return None if missing is None else LayerValue(
            STATUS_UNKNOWN, None, reason=f"the linear layer module {lin.module} not found: {missing}", stage="linear")
    mod = interp.load_module(lin.module)
    derived = []
    for entry, args in shapes:
        cls = interp.getattr(mod, entry.class_) if isinstance(mod, ModuleObj) and entry.class_ in mod.globals else None
        if isinstance(cls, Class):
            derived.append(_Recorded(entry.name, cls, tuple(args), (("prefix", entry.prefix),), derived=True))
    if not derived:
        return None
    value = _explore(interp, server_args, model_config, spec, derived)
    if value.status == STATUS_RESOLVED:
        built.extend(derived)
        return replace(value, data_dependent=(
            "the model's own constructor (the layers built at config.json's shapes, rules/layers.toml [linear])",
            *value.data_dependent))
    layers = _record(interp, spec, model_config, server_args)
    if isinstance(layers, str):
        said = value.value if value.status == STATUS_UNSUPPORTED else value.reason
        cand = Candidate(f"{value.status}: {said}", ((f"at {value.site}",) if value.site else ()) +
                         ("with config.json's shapes and the loader's quant config",))
        return LayerValue(STATUS_UNKNOWN, None, stage="linear", candidates=(cand,), reason=(
            f"the layers built at config.json's shapes do not resolve, and {layers}"))
    if not layers:
        return None
    built.extend(layers)
    return _explore(interp, server_args, model_config, spec, layers)


def _with_forward(interp: Interpreter, server_args: Any, model_config: Instance, spec: LayersFacts,
                  layers: list[_Recorded], value: LayerValue, unended: list[str] | None = None) -> LayerValue:
    """``value`` with the kernel-library calls the built layers' forward makes
    (``LayerValue.kernel_calls``; the string keywords SGLang passes each, ``backend="trtllm"``,
    in ``library_calls``): each layer is constructed alone and its quant method's forward
    (``[linear] forward``, ``apply(layer, x)``) run on an abstract input of the layer's input
    width and an unknown number of tokens, its branches on unknowns explored. A call reached on
    every run that does not raise has no condition; one reached on some only says so, a run
    the evaluator could not follow counting as one that may call another kernel (a run that
    raises, on a type test of an unknown, say, calls no kernel and serves no request; so a
    fallback the evaluator can only follow into a raise is not seen: 0.5.23's
    flashinfer_deepgemm M >= 32 Triton fallback raises on unknown shapes, and its
    fp8_blockscale_gemm_sm90 call reads as unconditional). The
    forward runs on the layer as constructed (SGLang may choose the GEMM function in the
    constructor, 0.5.23 fp8.py ``dispatch_w8a8_block_fp8_linear``); when no run of it ends, on
    the layer with its weights prepared (``process_weights_after_loading`` on the same run: the
    forward reads what it sets, ModelOptFp4LinearMethod.apply's ``layer.input_scale_inv``), a
    run whose preparation stops counting as one that may take another kernel. When no run of
    any layer's forward ends, why not is ``forward_stops``. ``unended`` receives why a layer's
    forward was not followed to its end on any run (its name and the stops), or the budget.
    Best effort: a forward the evaluator cannot follow adds nothing and never changes the value."""
    lin = spec.linear
    if not lin.forward or not lin.kernel_libraries:
        return value
    libraries = frozenset(lin.kernel_libraries)
    runs_calls: list[dict[tuple[str, str, str], tuple[tuple[str, str], ...]]] = []
    reached: dict[tuple[str, str, str], tuple[tuple[str, str], ...]] = {}

    def observe(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        # a library function by its dotted name (not a method of what one returned: `f().view`)
        path = func.path if isinstance(func, External) else ""
        if path.split(".")[0] in libraries and "." in path and all(p.isidentifier() for p in path.split(".")):
            module, _, name = path.rpartition(".")
            file, line = interp.call_site()
            given = tuple((k, repr(v)) for k, v in kwargs.items() if isinstance(v, str))  # as attention's: a repr
            reached.setdefault((module, name, f"{file}:{line}"), given)
        return NOT_HOOKED

    def run_once(rec: _Recorded, prepare: bool, built: dict[Any, Any]) -> Outcome:
        reached.clear()
        # the calls of the forward only: the weight preparation's (shuffle_matrix_a) are not the GEMM
        outcome = _forward_once(interp, spec, server_args, model_config, rec, reached.clear if prepare else None)
        if outcome.status != STATUS_UNSUPPORTED:  # a raise: no call, and no branch SGLang serves
            runs_calls.append(dict(reached))
        if outcome.status == STATUS_RESOLVED:
            finished.append(rec.name)
        elif prepare:
            stops.setdefault(f"{rec.name}: {outcome.value}")
        if outcome.status == STATUS_UNKNOWN:
            # a run the evaluator could not follow: it may have called another kernel
            not_followed.setdefault(f"{rec.name}: {outcome.value}")
        return outcome

    calls: dict[tuple[str, str, str], str] = {}
    given_of: dict[tuple[str, str, str], tuple[tuple[str, str], ...]] = {}
    finished: list[str] = []  # the layers of the runs that ended (a return)
    stops: dict[str, None] = {}  # why the others did not, in order
    not_followed: dict[str, None] = {}  # runs the evaluator could not follow to their end
    t0, s0, outer = time.process_time(), interp.steps, interp.deadline

    def spent() -> bool:
        # the step bound first (the same cut on every machine), the CPU time a backstop
        return (outer is not None and outer()) or interp.steps - s0 > FORWARD_STEPS \
            or time.process_time() - t0 > FORWARD_CPU_SECONDS

    complete = True
    for rec in layers:
        if spent():
            complete = False
            break  # what was read so far stands: each call's condition is over its own layer's runs
        explored_all = True
        # first on the layer as constructed (SGLang may choose the GEMM in the constructor,
        # 0.5.23 fp8.py:548; the preparation's branches on unknowns would only add runs); when
        # no run of it ends (the forward reads what the preparation sets: NVFP4's
        # layer.input_scale_inv), again with the weights prepared
        for prepare in (False, True):
            runs_calls.clear()
            not_followed.clear()  # the attempt kept is the last one
            ended = len(finished)
            with interp.budget(spent), interp.hooked_calls(observe), interp.unwatched_imports():
                logged = len(interp.logs)
                explored_all = explore_layer(interp, spec, functools.partial(run_once, rec, prepare),
                                             MAX_FORWARD_PATHS).complete
                del interp.logs[logged:]
            if len(finished) > ended or spent():
                break
        if unended is not None and (rec.name not in finished or not explored_all or not_followed):
            # no run of its forward ended, a run not followed, or branches beyond the bound: a
            # call may be missed
            why = list(dict.fromkeys(s for s in (*not_followed, *stops) if s.startswith(f"{rec.name}: ")))
            unended.append("; ".join(why[:MAX_FORWARD_STOPS]) if why else
                           f"{rec.name}: its forward beyond {MAX_FORWARD_PATHS} branches" if rec.name in finished
                           else f"{rec.name}: no run of its forward ended")
        for key in dict.fromkeys(k for run in runs_calls for k in run):
            on = sum(1 for run in runs_calls if key in run)
            cond = "" if on == len(runs_calls) else f"on {on} of the {len(runs_calls)} explored branches of {rec.name}'s forward that do not raise"
            calls[key] = cond if calls.get(key, cond) else ""
            given_of.setdefault(key, next(run[key] for run in runs_calls if key in run))
    if unended is not None and not complete:
        unended.append(f"the forwards' budget ({FORWARD_STEPS:,} steps, {FORWARD_CPU_SECONDS:g} s) spent before every layer's ran")
    if not finished and stops and complete:
        # no run of any layer's forward ended: no kernel it may call is read (0.5.10 on SM90,
        # SGLang's own NVFP4 activation quantizer raises first, jit_kernel/nvfp4.py:39)
        value = replace(value, forward_stops=tuple(list(stops)[:MAX_FORWARD_STOPS]))
    if not calls:
        return value
    return replace(value, kernel_calls=tuple((m, n, site, cond) for (m, n, site), cond in calls.items()),
                   library_calls=tuple((f"{m}.{n}", site, given_of[(m, n, site)]) for m, n, site in calls))


def _asked_entries(model_config: Any, value: LayerValue | None) -> list[LayerCall]:
    """The kernel runners' entries (rules/kernels.toml ``[[layer_call]]`` of this stage's
    setting) the target's quantization may reach and the built layers' forward did not call."""
    quant = model_config.attrs.get("quantization") if isinstance(model_config, Instance) else None
    if not isinstance(quant, str) or (value is not None and value.status == STATUS_UNSUPPORTED):
        return []  # SGLang refuses the layers: no forward is served
    hf = model_config.attrs.get("hf_config")
    qcfg = hf.attrs.get("quantization_config") if isinstance(hf, HFConfig) else None
    facts = [f for f in factfiles.kernels().layer_call if f.layer == SETTING and quant in f.quantization
             # a fact that holds only for checkpoints setting a key (block FP8: weight_block_size)
             and (not f.quant_config_key or not isinstance(qcfg, dict) or qcfg.get(f.quant_config_key) is not None)]
    return [f for f in facts if value is None or not value.calls_into(f.libraries, f.functions)]


def _whole_model(interp: Interpreter, server_args: Any, model_config: Instance, spec: LayersFacts,
                 value: LayerValue | None, draft_config: Any = None) -> LayerValue:
    """``value`` with the forward read on every dense linear layer the target model's own
    constructor builds (``LayerValue.forward_scope``), not only the ones its value speaks for:
    the constructor is evaluated to its end, every ``LinearBase`` it constructs recorded under
    its full prefix (``_record(whole=True)``); the layers are constructed (each constructor
    runs the quant config's ``get_quant_method``: ``is_layer_skipped`` on the prefix), grouped
    by class, linear method and partition sizes, and the forward of one of each group runs
    (``_with_forward``): a layer's forward reads nothing of its prefix but what its method
    holds. The linear methods taken, with where each was made, are ``layer_methods``; what was
    not followed to its end (a construction, a layer's forward, the budget) is
    ``forward_gaps``: with none, a kernel entry no forward called is one no layer of the model
    calls (``LayerValue.calls_into``). The value's status and verdict never change."""
    gaps: list[str] = []
    stopped: list[str] = []
    base = value if value is not None else LayerValue(STATUS_UNKNOWN, None, stage="linear", reason=(
        "the target model's dense linear layers are not evaluated (no layer derived at config.json's shapes: "
        "rules/layers.toml [linear]); only their linear methods and forwards are read, on the model's own construction"))
    hf = model_config.attrs.get("hf_config")
    if isinstance(draft_config, Instance) and draft_config.attrs.get("hf_config") is hf:
        # the draft's ModelConfig holds the target's config object, rewritten for the draft
        # (0.5.10 NEXTN: architectures -> Qwen3_5ForCausalLMMTP): the target's class is not known here
        return replace(base, forward_scope="the linear layers the model's constructor builds", forward_gaps=(
            f"not read: the draft's ModelConfig shares the target's config, its architectures now {architecture(model_config)!r}",))
    recorded = _record(interp, spec, model_config, server_args, stopped=stopped, whole=True)
    layers = recorded if isinstance(recorded, list) else []
    if isinstance(recorded, str):
        gaps.append(recorded)
    gaps += [f"{s} (its linear layers, if any, not built)" for s in stopped]
    if gaps:
        layers = []  # the answer is unknown already: no layer constructed for it
    groups: dict[tuple[Any, ...], list[_Recorded]] = {}
    made_at: dict[str, str] = {}  # a linear method class -> where it was instantiated
    t0, s0, outer = time.process_time(), interp.steps, interp.deadline

    def spent() -> bool:
        return (outer is not None and outer()) or interp.steps - s0 > WHOLE_MODEL_STEPS \
            or time.process_time() - t0 > WHOLE_MODEL_CPU_SECONDS

    for rec in layers:
        if spent():
            gaps.append(f"the layers' construction beyond its budget ({WHOLE_MODEL_STEPS:,} steps, "
                        f"{WHOLE_MODEL_CPU_SECONDS:g} s): {rec.name} and the layers after it not constructed")
            break
        # each layer on its own branches (SGLang builds them in one model; the branches of one
        # layer's constructor on unknowns do not depend on another's)
        with interp.budget(spent):
            explored = explore_layer(interp, spec, functools.partial(_method_once, interp, spec, server_args, rec, made_at),
                                     MAX_PREPARE_PATHS)
        served = [o for o, _ in explored.outcomes if o.status != STATUS_UNSUPPORTED]  # a raise serves no request
        methods = {o.value for o in served}
        if not explored.complete or len(methods) != 1 or any(o.status != STATUS_RESOLVED for o in served):
            raised = sorted({o.value for o, _ in explored.outcomes if o.status == STATUS_UNSUPPORTED})
            said = "; ".join(sorted(methods)[:2]) or f"raises on every branch ({'; '.join(raised[:2])})"
            gaps.append(f"{rec.name}'s construction: {said}" + ("" if explored.complete else f" (beyond {MAX_PREPARE_PATHS} branches)"))
            continue
        groups.setdefault((rec.cls.name, *served[0].runner.split("|")), []).append(rec)
    scope = f"the {len(recorded)} linear layers the model's constructor builds" if isinstance(recorded, list) \
        else "the linear layers the model's constructor builds"
    if not layers or gaps:
        shown = (*gaps[:MAX_FORWARD_STOPS], *((f"and {len(gaps) - MAX_FORWARD_STOPS} more",) if len(gaps) > MAX_FORWARD_STOPS else ()))
        return replace(base, forward_scope=scope, forward_gaps=shown)
    reps = [members[0] for members in groups.values()]
    unended: list[str] = []
    read = _with_forward(interp, server_args, model_config, spec, reps, replace(base, kernel_calls=(), library_calls=()),
                         unended)
    counts: dict[str, int] = {}
    for (_, method, *_rest), members in groups.items():
        counts[method] = counts.get(method, 0) + len(members)
    calls = dict.fromkeys((*base.kernel_calls, *read.kernel_calls))
    given = dict.fromkeys((*base.library_calls, *read.library_calls))
    return replace(base, kernel_calls=tuple(calls), library_calls=tuple(given), forward_scope=scope,
                   forward_gaps=tuple(unended),
                   layer_methods=tuple((m, n, made_at.get(m, "")) for m, n in counts.items()))


def _method_once(interp: Interpreter, spec: LayersFacts, server_args: Any, rec: _Recorded,
                 made_at: dict[str, str], built: dict[Any, Any]) -> Outcome:
    """One run constructing ``rec`` as the model constructed it: its linear method's class
    (the value), with its partition sizes (``runner``: the group key); ``made_at`` gets where
    each method was instantiated (the quant config's ``get_quant_method`` return)."""
    state = new_state()
    publish_server_args(interp, spec, server_args)
    restore = _logical_groups(interp, spec)
    sites: dict[str, str] = {}

    def observe(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if func.__class__ is Class and func.name not in sites:
            file, line = interp.call_site()
            sites[func.name] = f"{file}:{line}"
        return NOT_HOOKED

    try:
        with interp.hooked_calls(layer_hook(interp, spec, state, server_args)), interp.hooked_calls(_pure(interp, spec.linear)), \
                interp.hooked_calls(observe):
            layer = _construct(interp, rec, None)
        method = layer.attrs.get("quant_method")
        if not isinstance(method, Instance):
            return Outcome(STATUS_UNKNOWN, f"the linear layer left no quant method ({method!r})")
        made_at.setdefault(method.cls.name, sites.get(method.cls.name, ""))
        sizes = (repr(layer.attrs.get("input_size_per_partition")), repr(layer.attrs.get("output_size_per_partition")))
        return Outcome(STATUS_RESOLVED, method.cls.name, runner="|".join((method.cls.name, *sizes)))
    except EVALUATION_ENDS as exc:
        end = ending(exc, strict_mode())
        if end.raised is not None:
            return Outcome(STATUS_UNSUPPORTED, stop_text(interp, end.raised))
        return Outcome(STATUS_UNKNOWN, end.reason)
    finally:
        restore()


def _forward_once(interp: Interpreter, spec: LayersFacts, server_args: Any, model_config: Instance,
                  rec: _Recorded, forward_begins: Callable[[], None] | None) -> Outcome:
    """One run of ``rec``'s quant method's forward on the layer constructed alone; with
    ``forward_begins``, its weights prepared first, and that called when they are."""
    lin = spec.linear
    state = new_state()
    publish_server_args(interp, spec, server_args)
    restore = _logical_groups(interp, spec)
    try:
        with interp.hooked_calls(layer_hook(interp, spec, state, server_args)), interp.hooked_calls(_pure(interp, lin)):
            qc = model_quant_config(interp, spec.moe, model_config, spec.model_registry) if rec.derived else None
            layer = _construct(interp, rec, qc)
            method = layer.attrs.get("quant_method")
            width = layer.attrs.get("input_size_per_partition")
            if not isinstance(method, Instance) or not method.cls.lookup(lin.forward)[0] or not _is_int(width):
                return Outcome(STATUS_UNKNOWN, "no forward to run")
            if forward_begins is not None and method.cls.lookup("process_weights_after_loading")[0]:
                # SGLang serves a request with the weights prepared: the forward reads what the
                # preparation sets (0.5.23 ModelOptFp4LinearMethod.apply: layer.input_scale_inv,
                # layer.alpha). A preparation that raises or that the evaluator cannot follow is
                # a run that may take another kernel (unknown)
                state["method"], state["preparing"] = method.cls.name, True
                interp.call(interp.getattr(method, "process_weights_after_loading"), [layer], {})
                state["preparing"] = False
                forward_begins()
            # (tokens, the layer's input width) in the dtype it was built with; the token count
            # is a forward's, unknown here (as the MoE stage's dispatch input, layers.py)
            tokens = Unknown("the token count of tensor x (not known before a forward)", "forward:x.tokens")
            x = AbstractTensor((tokens, width), layer.attrs.get("params_dtype", External("torch.bfloat16")), "cuda", False,
                               f"(the input of {rec.name})")
            interp.call(interp.getattr(method, lin.forward), [layer, x], {})
            return Outcome(STATUS_RESOLVED, "forward")
    except EVALUATION_ENDS as exc:
        end = ending(exc, strict_mode())
        said = stop_text(interp, end.raised) if end.raised is not None else end.reason
        # a raise (SGLang's, or of a branch no value takes: a type test on an unknown) ends
        # the run; a run the evaluator cannot follow may have taken another kernel
        if state.get("preparing"):
            # the weights of this branch not prepared as SGLang would (a raise there, SGLang's
            # or a kernel stand-in's, is the linear stage's value to report): the run may take
            # another kernel, never one that serves no request
            return Outcome(STATUS_UNKNOWN, f"weight preparation: {said}")
        return Outcome(STATUS_UNSUPPORTED if end.raised is not None else STATUS_UNKNOWN, said)
    finally:
        restore()


def _layer_args(model_config: Instance, lin: LinearFacts) -> list[tuple[LinearLayer, list[Any]]]:
    """The layers to build with their positional arguments, from config.json's dimensions
    (text_config first); a layer whose `unless` key the model has, or whose dimension is not
    a known int, is left out."""
    hf = model_config.attrs.get("hf_config")
    if not isinstance(hf, HFConfig):
        return []
    text = hf.attrs.get("text_config")
    sources = [text.attrs if isinstance(text, HFConfig) else text if isinstance(text, dict) else {}, hf.attrs]
    dims: dict[str, int] = {}
    for name, keys in lin.dims.items():
        hit = next((s[k] for s in sources for k in keys if _is_int(s.get(k))), None)
        if hit is not None:
            dims[name] = hit
    for name, expr in lin.derived.items():
        if name not in dims:
            value = _dim(expr, dims)
            if value is not None:
                dims[name] = value
    out: list[tuple[LinearLayer, list[Any]]] = []
    for entry in lin.layer:
        if any(s.get(k) not in (None, False, 0) for s in sources for k in entry.unless):
            continue
        args = [_arg(a, dims) for a in entry.args]
        if all(a is not None for a in args):
            out.append((entry, args))
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dim(expr: str, dims: dict[str, int]) -> int | None:
    """``a``, ``a*b`` or ``a//b`` of known dimensions (rules/layers.toml [linear.derived])."""
    for op in ("//", "*"):
        if op in expr:
            left, right = (dims.get(p.strip()) for p in expr.split(op, 1))
            if left is None or right is None or (op == "//" and right == 0):
                return None
            return left // right if op == "//" else left * right
    return dims.get(expr.strip())


def _arg(expr: str, dims: dict[str, int]) -> Any:
    if expr.startswith("[") and expr.endswith("]"):
        items = [_dim(p, dims) for p in expr[1:-1].split(",")]
        return None if any(i is None for i in items) else items
    return _dim(expr, dims)


def _record(interp: Interpreter, spec: LayersFacts, model_config: Instance, server_args: Any,
            draft: bool = False, stopped: list[str] | None = None, whole: bool = False) -> list[_Recorded] | str:
    """The linear layers the model class's ``__init__`` constructs for its first decoder layer
    (prefix matching ``[linear] first_layer``), in order, with the arguments it passes; the
    evaluation stops when a second decoder layer begins (``next_layer``). Its own unknown
    branches are explored until one path records a layer. A reason (str) when none does.

    ``draft``: a draft class names its layers its own way (DeepSeek's NEXTN builds
    ``self.decoder``, ``model.decoder.*``; others ``mtp.layers.0.*``), so every linear layer it
    constructs is recorded under its full prefix, and the stop is read off the construction
    itself: a model-package class about to be built again at the same place (the same classes
    being built around it) as one already built that constructed linear layers is the next
    decoder layer (DeepSeek's ``make_layers``, an MTP ``ModuleList``); a draft with one layer
    is evaluated to its end. ``stopped`` receives the model-package constructions that stopped
    on the path that recorded (their linear layers, if any, are not built). ``whole``: every
    linear layer the constructor builds, under its full prefix, the constructor evaluated to
    its end (``_whole_model``)."""
    lin, reg = spec.linear, spec.model_registry
    first, following = re.compile(lin.first_layer), re.compile(lin.next_layer)
    state = new_state()
    try:
        cls = registry_class(interp, reg, architecture(model_config))
    except Unmodelled as exc:
        return f"the model class is not known: {exc}"
    found, init = cls.lookup("__init__")
    if not found or not isinstance(init, Function):
        return f"the model class {cls.name} has no __init__ the tool can read"
    linear_base = interp.getattr(interp.load_module(lin.module), lin.base_class)
    if not isinstance(linear_base, Class):
        return f"{lin.base_class} is not a class in {lin.module}"
    body_files = reg.body_files
    standin = unevaluated(cls)
    recorded: list[_Recorded] = []
    skipped: list[str] = []  # model-package classes whose construction stopped (stand-ins)
    building: list[int] = []  # the model-package classes being built, outermost first (draft)
    # (the classes being built around it, the class): built, and it constructed linear layers
    built_with_layers: set[tuple[int, ...]] = set()

    def classes(func: Class, args: list[Any], kwargs: dict[str, Any]) -> Any:
        ok, body_init = func.lookup("__init__")
        if func.is_subclass_of(linear_base) and isinstance(body_init, Function):
            prefix = bound_argument(body_init, args, kwargs, "prefix")
            if draft or whole:
                name = prefix if isinstance(prefix, str) and prefix else func.name
                recorded.append(_Recorded(name, func, tuple(args), tuple(kwargs.items())))
                return Instance(unevaluated(func))
            if isinstance(prefix, str) and following.search(prefix):
                raise _LayerDone()
            if isinstance(prefix, str) and (m := first.search(prefix)):
                recorded.append(_Recorded(prefix[m.end():], func, tuple(args), tuple(kwargs.items())))
            return Instance(unevaluated(func))
        if ok and isinstance(body_init, Function) and body_init.module.file.startswith(body_files) \
                and bound_argument(body_init, args, kwargs, "quant_config") is not NO_ARG:
            place = (*building, id(func))
            if draft and place in built_with_layers:
                raise _LayerDone()  # the draft's next decoder layer begins
            before = len(recorded)
            building.append(id(func))
            try:  # a model-package class that takes a quant config: built for real
                made = interp.instantiate(func, args, kwargs)
            except (Unmodelled, AnalysisBound, PyRaise) as exc:
                skipped.append(f"{func.name}: {stop_text(interp, exc)}")
                return Instance(unevaluated(func))  # off the way (its linear layers recorded so far stay)
            finally:
                building.pop()
            if len(recorded) > before:
                built_with_layers.add(place)
            return made
        return NOT_HOOKED  # a torch module is a stand-in (submodule_hook)

    def build() -> list[_Recorded] | str:
        recorded.clear()
        skipped.clear()
        building.clear()
        built_with_layers.clear()
        try:
            qc = model_quant_config(interp, spec.moe, model_config, spec.model_registry)
            hf = model_config.attrs.get("hf_config")
            interp.call(BoundMethod(init, Instance(standin)), [hf], {"quant_config": qc, "prefix": ""})
        except _LayerDone:
            pass
        except (Unmodelled, AnalysisBound, PyRaise) as exc:
            skipped.append(f"{cls.name}: {stop_text(interp, exc)}")
        if skipped and not recorded:
            # a class that stopped may hold the layers: none recorded is not "no linear layer"
            return f"{cls.name}.__init__ was not followed to its first decoder layer's linear layers ({'; '.join(list(dict.fromkeys(skipped))[:2])})"
        return list(recorded)

    publish_server_args(interp, spec, server_args)
    with interp.hooked_calls(layer_hook(interp, spec, state, server_args)):
        # inside the layer hook: the sizes a worker knows come from it (process values)
        hook = submodule_hook(interp, reg, server_args, standin, classes, frozenset(lin.pure_functions))
        with interp.hooked_calls(hook):
            logged = len(interp.logs)
            with interp.unwatched_imports():
                runs, _ = explore_paths(interp, build, MAX_RECORD_PATHS, until=lambda r: isinstance(r, list) and bool(r))
            del interp.logs[logged:]
    lists = [r for r, _ in runs if isinstance(r, list)]
    if any(lists):
        if stopped is not None:
            # the last run's (exploration stops at the first that records): a construction that
            # stopped on it (an unknown the tool cannot follow) may hold linear layers
            stopped.extend(dict.fromkeys(skipped))
        return next(r for r in lists if r)
    if lists:
        return []  # the model's first decoder layer builds no linear layer
    return "; ".join(sorted({r for r, _ in runs if isinstance(r, str)})[:2])


def _explore(interp: Interpreter, server_args: Any, model_config: Instance, spec: LayersFacts,
             layers: list[_Recorded]) -> LayerValue:
    """First every layer constructed (SGLang builds the whole model before it loads a weight):
    a raise there is the verdict. Then each layer's weights prepared on its own exploration
    (that layer constructed alone), so that the branches of one layer's
    ``process_weights_after_loading`` are never combined with another's: a raise of SGLang's
    there is the verdict too; runs the evaluator cannot follow, or beyond the bound, are
    listed on the value."""
    built = _explore_one(interp, server_args, model_config, spec, layers, None)
    if built.status != STATUS_RESOLVED:
        return built
    notes = list(built.data_dependent)
    for rec in layers:
        value = _explore_one(interp, server_args, model_config, spec, [rec], rec.name)
        if value.status != STATUS_RESOLVED and not value.reason.startswith(NOT_FOLLOWED):
            return replace(value, reason=f"{rec.name}'s weight preparation: {value.reason}" if value.reason else "")
        notes += [n for n in (*value.data_dependent, *([value.reason[len(NOT_FOLLOWED):]] if value.reason else ())) if n not in notes]
    return replace(built, data_dependent=tuple(notes))


def _explore_one(interp: Interpreter, server_args: Any, model_config: Instance, spec: LayersFacts,
                 layers: list[_Recorded], prepared: str | None) -> LayerValue:
    role = Role(SETTING, model_config, False, server_args)
    bound = MAX_LINEAR_PATHS if prepared is None else MAX_PREPARE_PATHS
    explored = explore_layer(interp, spec, lambda built: _run_once(interp, role, spec, layers, built, prepared), bound)
    outcomes = explored.outcomes
    followed = [(o, w) for o, w in outcomes if o.status != STATUS_NOT_FOLLOWED]
    stops = sorted({o.value for o, _ in outcomes if o.status == STATUS_NOT_FOLLOWED})
    if not followed:
        return LayerValue(STATUS_UNKNOWN, None, stage="linear", paths=len(outcomes), reason=(
            f"{NOT_FOLLOWED}{prepared}'s process_weights_after_loading on every branch ({'; '.join(stops)})"))
    value = join(followed, explored.complete, bound)
    explored.assumed.update(f"{prepared}'s process_weights_after_loading: {s}" for s in stops)
    if not explored.complete and prepared is not None:
        # the first runs of the weight preparation, each followed to its end without a raise
        explored.assumed.add(f"{prepared}'s process_weights_after_loading beyond {bound} branches "
                             f"(the first {len(outcomes)} followed)")
        if value.status == STATUS_UNKNOWN and len({o.value for o, _ in followed}) == 1 and followed[0][0].status == STATUS_RESOLVED:
            first = followed[0][0]
            value = LayerValue(STATUS_RESOLVED, first.value, first.method, "", first.site, paths=len(outcomes), chain=first.chain)
    elif not explored.complete:
        value = replace(value, reason=f"analysis bound reached: more than {bound} branches of the layers")
    return explored.noted(replace(value, stage="linear"))


def _run_once(interp: Interpreter, role: Role, spec: LayersFacts, layers: list[_Recorded],
              built: dict[Any, Any], prepared: str | None) -> Outcome:
    lin = spec.linear
    state = new_state()
    publish_server_args(interp, spec, role.server_args)
    restore = _logical_groups(interp, spec)
    try:
        with interp.hooked_calls(layer_hook(interp, spec, state, role.server_args)), \
                interp.hooked_calls(_pure(interp, lin)):
            qc = model_quant_config(interp, spec.moe, role.model_config, spec.model_registry) if any(rec.derived for rec in layers) else None
            made: list[tuple[str, Instance]] = []
            for rec in layers:
                # SGLang constructs every layer of the model before it loads any weight
                made.append((rec.name, _construct(interp, rec, qc)))
            methods: dict[str, list[str]] = {}
            for name, layer in made:
                method = layer.attrs.get("quant_method")
                if not isinstance(method, Instance):
                    return Outcome(STATUS_UNKNOWN, f"{name}: the linear layer left no quant method ({method!r})")
                methods.setdefault(method.cls.name, []).append(name)
                if name != prepared:
                    continue
                state["method"] = method.cls.name
                state["preparing"] = True
                found, _ = method.cls.lookup("process_weights_after_loading")
                if found:
                    interp.call(interp.getattr(method, "process_weights_after_loading"), [layer], {})
            chain = tuple(state["chain"])
            label = "; ".join(f"{cls} ({', '.join(names)})" for cls, names in methods.items())
            site = f"{chain[0].file}:{chain[0].line}" if chain else ""
            return Outcome(STATUS_RESOLVED, f"built: {label}", site, "", "", "", ", ".join(methods), chain)
    except EVALUATION_ENDS as exc:
        end = ending(exc, strict_mode())  # SGLANG_AUDIT_STRICT=1: an evaluator bug fails the tests
        if end.raised is not None:
            out = raise_outcome(interp, end.raised, state, spec, lin.verdict_files)
            if "data_keys" in state:
                built["data_keys"] = state["data_keys"]
            if out.status == STATUS_UNKNOWN and state.get("preparing"):
                # a raise outside SGLang's own layer code (a kernel library's stand-in): not followed
                return replace(out, status=STATUS_NOT_FOLLOWED)
            return out
        if state.get("preparing"):
            return Outcome(STATUS_NOT_FOLLOWED, end.reason, method=state["method"])
        return Outcome(STATUS_UNKNOWN, end.reason, method=state["method"])
    finally:
        restore()


def _construct(interp: Interpreter, rec: _Recorded, quant_config: Any) -> Instance:
    """The release's linear class built as the model constructs it, on a stand-in whose
    unregistered attributes raise AttributeError (as torch.nn.Module does); its constructor
    picks the quant method and runs create_weights, which registers abstract tensors."""
    base = rec.cls
    layer = module_standin(base)
    found, init = base.lookup("__init__")
    if not found or not isinstance(init, Function):
        raise Unmodelled(f"{base.name}.__init__ not found")
    kwargs = dict(rec.kwargs)
    if rec.derived:
        kwargs["quant_config"] = quant_config
    if bound_argument(init, list(rec.args), kwargs, "params_dtype") is None:
        # a worker loads the model under its dtype (torch.set_default_dtype): bfloat16, as the
        # MoE stage builds its layer
        kwargs["params_dtype"] = External("torch.bfloat16")
    interp.call(BoundMethod(init, layer), list(rec.args), kwargs)
    return layer


def _pure(interp: Interpreter, lin: LinearFacts) -> Any:
    """Functions of the process-state modules that compute from their arguments only are
    evaluated (the MoE stage's hook would answer them unknown)."""
    pure = frozenset(lin.pure_functions)

    def hook(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if func.__class__ is Function and func.name in pure:
            return interp.call_function(func, args, kwargs)
        return NOT_HOOKED

    return hook


def _logical_groups(interp: Interpreter, spec: LayersFacts) -> Any:
    """While the stage builds, the parallel context's process groups that only a worker's
    distributed setup writes (``worker_groups`` leaves them unknown) read None, so the
    release's group resolution partitions over the published sizes (0.5.23 linear.py
    ``_resolve_linear_group``: ``_LogicalGroup(rank, size)``). Returns the restorer."""
    facts = spec.moe.worker_groups
    names = spec.linear.logical_groups
    if facts is None or interp.find_module_file(facts.module) is None:
        return lambda: None
    mod = interp.load_module(facts.module)
    if not isinstance(mod, ModuleObj) or facts.getter not in mod.globals:
        return lambda: None
    context = interp.call(interp.getattr(mod, facts.getter), [], {})
    stamp = context.attrs.get(facts.stamp) if isinstance(context, Instance) else None
    if not isinstance(stamp, dict):
        return lambda: None
    saved = {n: stamp[n] for n in names if isinstance(stamp.get(n), Unknown)}
    stamp.update(dict.fromkeys(saved))

    def restore() -> None:
        stamp.update(saved)
    return restore
