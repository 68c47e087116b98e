"""The quant config the model loader hands a model's layers (the MoE and linear layer stages,
``layers.py``, ``linear.py``): the release's quant config class for the model's
``quantization`` built from config.json's ``quantization_config``, else from the file the
class names in the model directory, then what the loader's own statements do to it (``[moe]
loader_quant_config`` in rules/layers.toml)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from sglang_audit.evaluate.interpreter import Frame, Interpreter, Unmodelled
from sglang_audit.evaluate.values import Function, HFConfig, Instance, ModuleObj, Scope, Unknown
from sglang_audit.factfiles import ModelRegistryFacts, MoeLayerFacts
from sglang_audit.frontend import ir
from sglang_audit.inputs.modeldir import HF_QUANT_CONFIG, model_checkpoint


def model_quant_config(interp: Interpreter, moe: MoeLayerFacts, model_config: Instance,
                       registry: ModelRegistryFacts | None = None) -> Any:
    """The quant config the model loader hands the model with this ModelConfig: None for an
    unquantized model; the class the release's registry maps ``quantization`` to
    (``[moe] quant_registry_function``), its ``from_config`` evaluated on the model's
    quantization config (with the model class's ``packed_modules_mapping`` when ``registry``
    finds the class: ``with_packed_modules``), then ``loader_quant_config``."""
    quant = model_config.attrs.get("quantization")
    if quant is None:
        return None
    if not isinstance(quant, str):
        raise Unmodelled(f"the model's quantization is not known ({quant!r})")
    reg = interp.load_module(moe.quant_registry_module)
    cls = interp.call(interp.getattr(reg, moe.quant_registry_function), [quant], {})
    hf = model_config.attrs.get("hf_config")
    cfg = hf.attrs.get("quantization_config") if isinstance(hf, HFConfig) else None
    if isinstance(cfg, HFConfig):
        cfg = cfg.attrs
    if not isinstance(cfg, dict):
        cfg = quant_config_file(interp, cls, model_config)
    if registry is not None:
        cfg = with_packed_modules(interp, registry, model_config, cfg)
    qc = interp.call(interp.getattr(cls, "from_config"), [cfg], {})
    return loader_quant_config(interp, moe, model_config, qc)


def with_packed_modules(interp: Interpreter, registry: ModelRegistryFacts, model_config: Instance,
                        cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` as the model loader hands it to ``from_config``: with the model class's
    ``packed_modules_mapping`` (``{}`` when the class declares none), which 0.5.10-0.5.23
    model_loader/weight_utils.py get_quant_config writes into the quantization config
    (``hf_quant_config["packed_modules_mapping"] = packed_modules_mapping``, from
    ``getattr(model_class, "packed_modules_mapping", {})`` in loader.py); ModelOpt's
    ``is_layer_skipped`` iterates it (0.5.23 quantization/utils.py:84). A class the registry
    does not give leaves ``cfg`` as read: the mapping is then not known to the config, and a
    use of it stops the evaluation (unknown), never a guessed mapping. A copy: the
    ModelConfig's dict is shared with the other stages."""
    if "packed_modules_mapping" in cfg:
        return cfg
    from sglang_audit.resolve.draft import registry_class
    from sglang_audit.resolve.layerstage import architecture

    try:
        model_cls = registry_class(interp, registry, architecture(model_config))
    except Unmodelled:
        return cfg
    found, mapping = model_cls.lookup("packed_modules_mapping")
    return {**cfg, "packed_modules_mapping": mapping if found else {}}


def quant_config_file(interp: Interpreter, cls: Any, model_config: Instance) -> dict[str, Any]:
    """The quantization config the model loader reads when config.json has none: the file the
    quant config class names (``get_config_filenames()``, evaluated; modelopt's
    ``["hf_quant_config.json"]``) in the model directory (0.5.16/0.5.23
    model_loader/weight_utils.py get_quant_config: ``quant_cls.from_config(json.load(f))``),
    read through the model directory reader. Only hf_quant_config.json is read; another file
    is unknown."""
    names = interp.call(interp.getattr(cls, "get_config_filenames"), [], {})
    path = model_config.attrs.get("model_path")
    if not isinstance(names, list) or HF_QUANT_CONFIG not in names or not isinstance(path, str) or not Path(path).is_dir():
        raise Unmodelled(f"the model's quantization_config is not in config.json and its class reads {names!r} "
                         f"(only {HF_QUANT_CONFIG} in a local model directory is modelled)")
    data = model_checkpoint(Path(path)).hf_quant
    if not isinstance(data, dict):
        raise Unmodelled(f"the model's quantization_config is neither in config.json nor in a readable {HF_QUANT_CONFIG}")
    return copy.deepcopy(data)


def loader_quant_config(interp: Interpreter, moe: MoeLayerFacts, model_config: Any, qc: Any) -> Any:
    """The quant config as the release's model loader hands it to the model: the loader
    function's imports and its ``if`` statements on the config (``isinstance(quant_config,
    Fp8Config)``: ``is_fp4_experts`` from the ModelConfig, ...) evaluated with the config
    built and the ModelConfig bound (``[moe] loader_quant_config``), when the ModelConfig
    carries a fact the loader hands on (``when_model_config``)."""
    spec = moe.loader_quant_config
    if spec is None or qc is None or interp.find_module_file(spec.module) is None:
        return qc
    attrs = model_config.attrs if isinstance(model_config, Instance) else {}
    if not any(attrs.get(name) not in (None, False) for name in spec.when_model_config):
        return qc  # no checkpoint layout fact for the loader to hand on
    mod = interp.load_module(spec.module)
    func = mod.globals.get(spec.function) if isinstance(mod, ModuleObj) else None
    if not isinstance(func, Function):
        return qc
    var = spec.variable
    bound = _assigned_names(func.body) | {p.name for p in func.params}
    stmts = _loader_statements(func.body, var, frozenset(bound - {var, "model_config"}))
    scope = Scope(parent=func.closure, local_names=frozenset(_assigned_names(func.body)))
    for p in func.params:
        scope.vars[p.name] = Unknown(f"{func.name} argument {p.name} (not modelled)", f"loader-arg:{p.name}")
    scope.vars["model_config"] = model_config
    scope.vars[var] = qc
    frame = Frame(module=func.module, scope=scope, func=func, depth=interp.depth)
    interp.exec_block(stmts, frame)
    return scope.vars[var]


def _loader_statements(body: list[ir.Node], var: str, others: frozenset[str]) -> list[ir.Node]:
    """In source order, at any depth of ``body``: its imports, and the ``if`` statements whose
    test reads ``var`` and no other local (``others``: not bound here) and whose body holds no
    return (the statements enclosing them are not run: the config they would build is the
    one given)."""
    found: list[ir.Node] = []
    for node in body:
        if isinstance(node, (ir.Import, ir.ImportFrom)):
            found.append(node)
        elif (isinstance(node, ir.If) and _reads_name(node.test, var)
              and not any(isinstance(n, ir.Name) and n.id in others for n in ir.walk(node.test))):
            if not any(isinstance(x, ir.Return) for x in ir.walk([*node.body, *node.orelse])):
                found.append(node)
        else:
            for block in ("body", "orelse", "finalbody"):
                inner = getattr(node, block, None)
                if isinstance(inner, list):
                    found.extend(_loader_statements(inner, var, others))
    return found


def _reads_name(node: Any, name: str) -> bool:
    return any(isinstance(n, ir.Name) and n.id == name for n in ir.walk(node))


def _assigned_names(body: Any) -> set[str]:
    return {t.id for n in ir.walk(body) if isinstance(n, ir.Assign) for t in n.targets if isinstance(t, ir.Name)}
