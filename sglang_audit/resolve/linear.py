"""The dense linear layers SGLang builds with the model's quant config (issue 42/44): where
they fail, or that they build.

On one resolver path, after the MoE and attention stages, the same interpreter builds one
decoder layer's dense linear layers (``QKVParallelLinear``, ``RowParallelLinear``,
``MergedColumnParallelLinear``, ...) from the release's own classes, with the quant config the
model loader hands the model (the MoE stage's ``_quant_config``): each constructor asks the
quant config's ``get_quant_method`` (which runs SGLang's ``is_layer_skipped`` on the prefix)
and runs ``create_weights`` on abstract tensors; then, as the model loader does after loading,
each quant method's ``process_weights_after_loading``. The shapes are the ones SGLang's model
classes pass, derived from config.json (``[linear]`` in rules/layers.toml cites where SGLang
computes them); the tensor-parallel partition is the release's own (its group resolution on
the published sizes). A raise in the layers' own code decided by known values is SGLang's
verdict on the ``quantization`` setting (e.g. fp8.py ``validate_block_quant_shapes``: a TP
shard not divisible by the weight block); branches on unknowns are explored and joined as the
MoE stage joins them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sglang_audit.errors import strict_mode
from sglang_audit.evaluate.ending import EVALUATION_ENDS, ending
from sglang_audit.evaluate.explore import explore_paths
from sglang_audit.evaluate.interpreter import NOT_HOOKED, Interpreter, Unmodelled
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
from sglang_audit.resolve.expected import missing_module
from sglang_audit.resolve.layers import (
    _attribute_line,
    _hook,
    _join,
    _module_natives,
    _Outcome,
    _quant_config,
    _raise_outcome,
    _Role,
    _tensor_decided,
    _TensorBranches,
)
from sglang_audit.resolve.stage_common import ImportWatch, is_assert, publish_server_args
from sglang_audit.result import STATUS_RESOLVED, STATUS_UNKNOWN, LayerValue
from sglang_audit.shipped import load_toml

# its own CPU budget (0.5.23, Qwen3-4B-FP8 at TP 4, sm90: 0.6 s), outside the resolution's
LINEAR_CPU_SECONDS = 10.0
SETTING = "quantization"  # the setting whose layer value the dense layers give
MAX_LINEAR_PATHS = 64  # branches on unknowns explored while the layers are constructed
MAX_PREPARE_PATHS = 16  # ... while one layer's weights are prepared (runtime kernel choices, mostly)
NOT_FOLLOWED = "not followed: "
# a run whose weight preparation the evaluator could not follow to its end (a kernel library's
# outside object, ...): listed, never the verdict, while another run of the layer is followed
STATUS_NOT_FOLLOWED = "not followed"


def evaluate_linear(interp: Interpreter, server_args: Any, model_config: Any, draft_config: Any) -> dict[str, LayerValue]:
    """The layer value of ``quantization`` for a quantized model whose dense layers the rules
    describe; {} for an unquantized model (its layers take the unquantized method) or one
    whose configuration builds none of them."""
    spec = load_toml("layers.toml")
    lin = spec["linear"]
    if not isinstance(model_config, Instance) or model_config.attrs.get("quantization") is None:
        return {}
    layers = _layer_args(model_config, lin)
    if not layers:
        return {}
    if interp.find_module_file(lin["module"]) is None:
        missing = missing_module(interp, lin["module"])
        return {} if missing is None else {SETTING: LayerValue(
            STATUS_UNKNOWN, None, reason=f"the linear layer module {lin['module']} not found: {missing}", stage="linear")}
    if isinstance(server_args, Instance) and server_args.attrs.get("enable_dp_attention") is not False:
        # the models differ in the group their attention projections shard over under DP
        # attention (qwen3.py attn_tp, llama.py tp): the shapes are not derived then
        return {SETTING: LayerValue(STATUS_UNKNOWN, None, stage="linear", reason=(
            "the dense linear layers are not built under DP attention (or an unknown enable_dp_attention): "
            "which group each model's projections shard over is not derived"))}
    return {SETTING: _explore(interp, server_args, model_config, spec, layers)}


def _layer_args(model_config: Instance, lin: dict[str, Any]) -> list[tuple[dict[str, Any], list[Any]]]:
    """The layers to build with their positional arguments, from config.json's dimensions
    (text_config first); a layer whose `unless` key the model has, or whose dimension is not
    a known int, is left out."""
    hf = model_config.attrs.get("hf_config")
    if not isinstance(hf, HFConfig):
        return []
    text = hf.attrs.get("text_config")
    sources = [text.attrs if isinstance(text, HFConfig) else text if isinstance(text, dict) else {}, hf.attrs]
    dims: dict[str, int] = {}
    for name, keys in lin["dims"].items():
        hit = next((s[k] for s in sources for k in keys if _is_int(s.get(k))), None)
        if hit is not None:
            dims[name] = hit
    for name, expr in lin["derived"].items():
        if name not in dims:
            value = _dim(expr, dims)
            if value is not None:
                dims[name] = value
    out: list[tuple[dict[str, Any], list[Any]]] = []
    for entry in lin["layer"]:
        if any(s.get(k) not in (None, False, 0) for s in sources for k in entry["unless"]):
            continue
        args = [_arg(a, dims) for a in entry["args"]]
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


def _explore(interp: Interpreter, server_args: Any, model_config: Instance, spec: dict[str, Any],
             layers: list[tuple[dict[str, Any], list[Any]]]) -> LayerValue:
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
    for entry, args in layers:
        value = _explore_one(interp, server_args, model_config, spec, [(entry, args)], entry["name"])
        if value.status != STATUS_RESOLVED and not value.reason.startswith(NOT_FOLLOWED):
            return replace(value, reason=f"{entry['name']}'s weight preparation: {value.reason}" if value.reason else "")
        notes += [n for n in (*value.data_dependent, *([value.reason[len(NOT_FOLLOWED):]] if value.reason else ())) if n not in notes]
    return replace(built, data_dependent=tuple(notes))


def _explore_one(interp: Interpreter, server_args: Any, model_config: Instance, spec: dict[str, Any],
                 layers: list[tuple[dict[str, Any], list[Any]]], prepared: str | None) -> LayerValue:
    assumed: set[str] = set()
    built: dict[Any, Any] = {}  # _TensorBranches reads "data_keys" (the tensor keys of a raise)
    branches = _TensorBranches(spec, built)
    role = _Role(SETTING, model_config, False, server_args)

    def assert_on_tensors(value: Unknown, file: str, line: int, text: str) -> bool | None:
        # as in the MoE stage: an assert on tensor data holds for a checkpoint SGLang loads
        if is_assert(interp, file, line) and _tensor_decided(value, spec):
            assumed.add(f"assert {text} at {file}:{line} (tensor data; assumed to hold)")
            return True
        return None

    def run() -> _Outcome:
        with interp.filtered_decisions(assert_on_tensors):
            return _run_once(interp, role, spec, layers, built, prepared)

    watch = ImportWatch(interp, spec["moe"]["optional_packages"])
    with interp.watched_imports(watch):
        bound = MAX_LINEAR_PATHS if prepared is None else MAX_PREPARE_PATHS
        runs, complete = explore_paths(interp, run, bound, branches)
    outcomes = [(outcome, tuple(f"{d.file}:{d.line} {d.text if t else f'not ({d.text})'}" for d, t in ran.taken))
                for outcome, ran in runs]
    followed = [(o, w) for o, w in outcomes if o.status != STATUS_NOT_FOLLOWED]
    stops = sorted({o.value for o, _ in outcomes if o.status == STATUS_NOT_FOLLOWED})
    if not followed:
        return LayerValue(STATUS_UNKNOWN, None, stage="linear", paths=len(outcomes), reason=(
            f"{NOT_FOLLOWED}{prepared}'s process_weights_after_loading on every branch ({'; '.join(stops)})"))
    value = _join(followed, complete)
    assumed.update(f"{prepared}'s process_weights_after_loading: {s}" for s in stops)
    if not complete and prepared is not None:
        # the first runs of the weight preparation, each followed to its end without a raise
        assumed.add(f"{prepared}'s process_weights_after_loading beyond {bound} branches "
                    f"(the first {len(outcomes)} followed)")
        if value.status == STATUS_UNKNOWN and len({o.value for o, _ in followed}) == 1 and followed[0][0].status == STATUS_RESOLVED:
            first = followed[0][0]
            value = LayerValue(STATUS_RESOLVED, first.value, first.method, "", first.site, paths=len(outcomes), chain=first.chain)
    elif not complete:
        value = replace(value, reason=f"analysis bound reached: more than {bound} branches of the layers")
    if branches.pairwise:
        assumed.add(f"branches on tensor data ({len(branches.tensor_keys)}) explored one at a time, not in every combination")
    return replace(value, stage="linear", data_dependent=tuple(sorted(assumed)) + value.data_dependent,
                   assumptions=watch.assumptions(value))


def _run_once(interp: Interpreter, role: _Role, spec: dict[str, Any], layers: list[tuple[dict[str, Any], list[Any]]],
              built: dict[Any, Any], prepared: str | None) -> _Outcome:
    lin = spec["linear"]
    state: dict[str, Any] = {"weights_created": False, "method": "", "runner": "", "chain": []}
    publish_server_args(interp, spec, role.server_args)
    restore = _logical_groups(interp, spec)
    try:
        with interp.hooked_calls(_hook(interp, spec, state, role.server_args, {"state": state})), \
                interp.hooked_calls(_pure(interp, lin)):
            quant_config = _quant_config(interp, role, spec, state)
            mod = interp.load_module(lin["module"])
            if not isinstance(mod, ModuleObj):
                raise Unmodelled(f"{lin['module']} not in the source tree")
            made: list[tuple[str, Instance]] = []
            for entry, args in layers:
                # SGLang constructs every layer of the model before it loads any weight
                made.append((entry["name"], _construct(interp, mod, entry, args, quant_config)))
            methods: dict[str, list[str]] = {}
            for name, layer in made:
                method = layer.attrs.get("quant_method")
                if not isinstance(method, Instance):
                    return _Outcome(STATUS_UNKNOWN, f"{name}: the linear layer left no quant method ({method!r})")
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
            return _Outcome(STATUS_RESOLVED, f"built: {label}", site, "", "", "", ", ".join(methods), chain)
    except EVALUATION_ENDS as exc:
        end = ending(exc, strict_mode())  # SGLANG_AUDIT_STRICT=1: an evaluator bug fails the tests
        if end.raised is not None:
            out = _raise_outcome(interp, end.raised, state, spec, lin["verdict_files"])
            if "data_keys" in state:
                built["data_keys"] = state["data_keys"]
            if out.status == STATUS_UNKNOWN and state.get("preparing"):
                # a raise outside SGLang's own layer code (a kernel library's stand-in): not followed
                return replace(out, status=STATUS_NOT_FOLLOWED)
            return out
        if state.get("preparing"):
            return _Outcome(STATUS_NOT_FOLLOWED, end.reason, method=state["method"])
        return _Outcome(STATUS_UNKNOWN, end.reason, method=state["method"])
    finally:
        restore()


def _construct(interp: Interpreter, mod: ModuleObj, entry: dict[str, Any], args: list[Any], quant_config: Any) -> Instance:
    """The release's linear class built on a stand-in whose unregistered attributes raise
    AttributeError (as torch.nn.Module does); its constructor picks the quant method and runs
    create_weights, which registers abstract tensors."""
    base = interp.getattr(mod, entry["class"])
    if not isinstance(base, Class):
        raise Unmodelled(f"{entry['class']} is not a class in {mod.name}")

    def missing(i: Interpreter, a: list[Any], k: dict[str, Any]) -> Any:
        raised = i.make_raise("AttributeError", f"'{base.name}' object has no attribute '{a[-1]}'")
        raised.line = _attribute_line(i, raised.file, raised.line, str(a[-1]))
        raised.text = f".{a[-1]}"
        raise raised

    standin = Class(base.name, (base,), {"__getattr__": Native("Module.__getattr__", missing)}, base.module, base.line,
                    external_bases=())
    layer = Instance(standin)
    _module_natives(layer)
    found, init = base.lookup("__init__")
    if not found or not isinstance(init, Function):
        raise Unmodelled(f"{base.name}.__init__ not found")
    names = {p.name for p in init.params}
    kwargs = {k: v for k, v in (("quant_config", quant_config), ("prefix", entry["prefix"]),
                                ("params_dtype", External("torch.bfloat16"))) if k in names}
    interp.call(BoundMethod(init, layer), list(args), kwargs)
    return layer


def _pure(interp: Interpreter, lin: dict[str, Any]) -> Any:
    """Functions of the process-state modules that compute from their arguments only are
    evaluated (the MoE stage's hook would answer them unknown)."""
    pure = frozenset(lin["pure_functions"])

    def hook(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if func.__class__ is Function and func.name in pure:
            return interp.call_function(func, args, kwargs)
        return NOT_HOOKED

    return hook


def _logical_groups(interp: Interpreter, spec: dict[str, Any]) -> Any:
    """While the stage builds, the parallel context's process groups that only a worker's
    distributed setup writes (``worker_groups`` leaves them unknown) read None, so the
    release's group resolution partitions over the published sizes (0.5.23 linear.py
    ``_resolve_linear_group``: ``_LogicalGroup(rank, size)``). Returns the restorer."""
    facts = spec["moe"].get("worker_groups")
    names = spec["linear"]["logical_groups"]
    if not facts or interp.find_module_file(facts["module"]) is None:
        return lambda: None
    mod = interp.load_module(facts["module"])
    if not isinstance(mod, ModuleObj) or facts["getter"] not in mod.globals:
        return lambda: None
    context = interp.call(interp.getattr(mod, facts["getter"]), [], {})
    stamp = context.attrs.get(facts["stamp"]) if isinstance(context, Instance) else None
    if not isinstance(stamp, dict):
        return lambda: None
    saved = {n: stamp[n] for n in names if isinstance(stamp.get(n), Unknown)}
    stamp.update(dict.fromkeys(saved))

    def restore() -> None:
        stamp.update(saved)
    return restore
