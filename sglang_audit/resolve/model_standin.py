"""The model a model runner loads, as a stand-in of the release's own model class (issue 42).

The class is the one SGLang's model registry maps the checkpoint's ``architectures[0]`` to
(``resolve/draft.py`` ``registry_class``: the module of ``sglang.srt.models`` whose
``EntryClass`` holds it). The model is never constructed: its methods are the class's own
(evaluated as SGLang's code when called), an attribute its methods assign (``self.model``,
``self.lm_head``) is unknown runtime state, and a name the class lacks is decided as
``torch.nn.Module.__getattr__`` decides it for a module: absent (SGLang's ``AttributeError``,
so ``hasattr(model, "set_eagle3_layers_to_capture")`` is False) when it is a method some model
class of the release defines (``def <name>(`` in the model package, never reached through
``super()``, so not torch's own API), unknown otherwise (torch's attributes, which the tool
does not list). That is how the speculative worker's calls on the target model
(``get_embed_and_head``, ``set_eagle3_layers_to_capture``) and the runner's probes
(``get_attention_sliding_window_size``) are answered from the release.
"""

from __future__ import annotations

import re
from typing import Any

from sglang_audit import factfiles
from sglang_audit.evaluate.interpreter import Interpreter, PyRaise, Unmodelled
from sglang_audit.evaluate.values import (
    AnalysisBound,
    Class,
    HFConfig,
    Instance,
    Native,
    Unknown,
)
from sglang_audit.frontend import ir
from sglang_audit.resolve.draft import registry_class
from sglang_audit.resolve.stage_common import self_assignments


def loaded_model(interp: Interpreter, model_config: Any, role: str) -> Any:
    """The stand-in of the model the runner for ``model_config`` loads, or Unknown (the class
    not found in the registry, or its module not loadable here)."""
    reg = factfiles.layers().model_registry
    hf = model_config.attrs.get("hf_config") if isinstance(model_config, Instance) else None
    archs = hf.attrs.get("architectures") if isinstance(hf, HFConfig) else None
    arch = archs[0] if isinstance(archs, list) and archs else None
    try:
        cls = registry_class(interp, reg, arch)
    except (Unmodelled, AnalysisBound, PyRaise) as exc:
        return Unknown(f"the {role} model (its class not found in the release's registry: {exc})", f"model:{role}")
    model = _standin(interp, cls, reg.package, frozenset(reg.torch_module_attrs))
    if model_config.attrs.get("quantization", ...) is None and _copies_param(interp, cls, "quant_config"):
        # an unquantized checkpoint: the loader hands the model no quant config
        # (model_loader's _get_quantization_config returns None), which the class keeps as given
        model.attrs["quant_config"] = None
    return model


def _copies_param(interp: Interpreter, cls: Class, name: str) -> bool:
    """Every ``self.<name> = ...`` of the class's MRO is ``self.<name> = <name>`` in an
    ``__init__`` taking ``<name>`` (and there is one)."""
    found = False
    for func, n, names in self_assignments(cls):
        if name not in names:
            continue
        if not (func.name == "__init__" and isinstance(n, ir.Assign) and isinstance(n.value, ir.Name)
                and n.value.id == name and any(p.name == name for p in func.params)):
            return False
        found = True
    return found


def _standin(interp: Interpreter, cls: Class, package: str, torch_attrs: frozenset[str]) -> Instance:
    assigned = _assigned(interp, cls)

    def missing(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        name = str(args[-1])
        if name in assigned or name.startswith("__") or not _model_hook(i, package, name, torch_attrs):
            return Unknown(f"{cls.name}.{name} (runtime state of the loaded model is not modelled)", f"model:{cls.name}.{name}")
        # torch.nn.Module.__getattr__ on a name the module never registered: the class lacks a
        # method other model classes of the release define
        raised = i.make_raise("AttributeError", f"'{cls.name}' object has no attribute '{name}'")
        raised.text = f".{name}"
        raised.explicit = True  # SGLang's own call on its model class, not a gap of the tool
        raise raised

    standin = Class(cls.name, (cls,), {"__getattr__": Native(f"{cls.name}.__getattr__", missing)}, cls.module, cls.line,
                    external_bases=())
    return Instance(standin)


def _assigned(interp: Interpreter, cls: Class) -> set[str]:
    """The ``self.X`` the class's analysed MRO assigns anywhere (its submodules, config, ...),
    listed once per class object."""
    key = ("model_assigns", id(cls))
    known = interp.cache.prepared.get(key)
    if known is not None and known[0] is cls:
        return known[1]
    out: set[str] = set()
    for _func, _node, names in self_assignments(cls):
        out.update(names)
    interp.cache.prepared[key] = (cls, out)
    return out




def _model_hook(interp: Interpreter, package: str, name: str, torch_attrs: frozenset[str]) -> bool:
    """``name`` is SGLang's own model API: a method some model class of the release defines or
    an attribute one assigns (``self.start_layer``), none reaches through ``super()``, and not
    torch.nn.Module's own (the rules' list); read as text, once per name."""
    if name in torch_attrs:
        return False
    found = interp.find_module_file(package)
    pkg_dir = (found[0] if found[0].is_dir() else found[0].parent) if found is not None else None
    key = ("model_hook", str(pkg_dir), name)
    known = interp.cache.prepared.get(key)
    if known is None:
        defined = overridden = False
        if pkg_dir is not None:
            for path in sorted(pkg_dir.glob("*.py")):
                try:
                    text = path.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                defined = defined or f"def {name}(" in text or _assigns(text, name)
                overridden = overridden or f"super().{name}(" in text
        known = defined and not overridden
        interp.cache.prepared[key] = known
    return bool(known)


def _assigns(text: str, name: str) -> bool:
    """``self.<name> = ...`` (annotated, or one of a tuple's targets) somewhere in ``text``."""
    if f"self.{name}" not in text:
        return False
    target = rf"self\.{re.escape(name)}\b"
    return re.search(rf"^\s*(?:self\.\w+\s*,\s*)*{target}(?:\s*,\s*self\.\w+)*\s*(?::[^=\n]*)?=(?!=)", text, re.M) is not None
