"""The quant config a speculative draft's layers receive, from SGLang's own code.

The draft class is the one the release's model registry maps the draft's architecture to
(``EntryClass`` of ``sglang.srt.models.*``, read from the release, no hand list); its
``__init__`` is evaluated on the draft's config and the target's quant config up to the
first model body it builds (a model-package class taking ``quant_config``). The value bound
to that parameter is what the draft's layers get: 0.5.18's ``_mtp_quant_config`` returning
None for a Qwen3.5 NVFP4 checkpoint makes the MTP draft's MoE BF16, an inline
``quant_config = None`` under a condition does the same on older releases. Submodules built
before the body are stand-ins (their construction does not change the quant config) and
process state (parallel groups) is unknown.
"""

from __future__ import annotations

from typing import Any

from sglang_audit.evaluate.interpreter import NOT_HOOKED, Interpreter, Unmodelled
from sglang_audit.evaluate.values import (
    BoundMethod,
    Class,
    Function,
    Instance,
    ModuleObj,
    Native,
    Unknown,
)
from sglang_audit.result import ChainStep


class _Passed(Exception):
    """The draft class built its model body: the quant config it passed (``value``), with the
    events its argument read (for the step that produced it)."""

    def __init__(self, body: Class, value: Any, site: tuple[str, int], reads: list[Any]) -> None:
        super().__init__(body.name)
        self.body, self.value, self.site, self.reads = body, value, site, reads


_NO_ARG = object()


def draft_quant_config(interp: Interpreter, reg: dict[str, Any], arch: Any, hf: Any, qc: Any, chain: list[ChainStep]) -> Any:
    """The quant config the draft model's MoE layers get: the draft class (found in the
    release's own model registry) is constructed as SGLang constructs it, with the draft's
    config and this quant config, up to the first model body it builds (a class of the model
    package taking ``quant_config``, e.g. ``Qwen3_5ForCausalLM(mtp_config, quant_config, ...)``):
    the value bound to that parameter is what its layers receive, as the target's layers
    receive the target's. Whatever the class does before (an inline ``quant_config = None``,
    a helper such as 0.5.18's ``_mtp_quant_config``, a cast) is SGLang's code, evaluated.

    ``reg``: rules/layers.toml's ``[model_registry]``; ``arch``: the draft's architecture
    (config.json ``architectures[0]``); ``hf``: the draft's config; the step that made the
    value differ from ``qc`` is appended to ``chain``."""
    cls = _registry_class(interp, reg, arch)
    found, init = cls.lookup("__init__")
    if not found or not isinstance(init, Function):
        raise Unmodelled(f"the draft model class {cls.name} has no __init__ the tool can read")
    body_files = reg["body_files"]
    process_state = tuple(reg["process_state_modules"])
    outer = interp.call_hook
    standin = Class(cls.name, (cls,), {"__getattr__": Native("Module.__getattr__", _unset_attribute)}, cls.module, cls.line,
                    external_bases=())

    def hook(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if func.__class__ is Function and func.module.name.startswith(process_state):
            return Unknown(f"{func.qualname}(): process state (parallel groups) is not modelled", f"proc:{func.qualname}")
        if func.__class__ is Class and func is not standin and not standin.is_subclass_of(func):
            ok, body_init = func.lookup("__init__")
            if ok and isinstance(body_init, Function) and body_init.module.file.startswith(tuple(body_files)):
                passed = _bound_argument(body_init, args, kwargs, "quant_config")
                if passed is not _NO_ARG:
                    raise _Passed(func, passed, getattr(interp, "_call_site", ("?", 0)), list(interp.reads or ()))
            if _is_torch_module(func):
                # a submodule the draft builds before its body (norms, projections): its
                # construction does not change the quant config and is not evaluated
                stub = Instance(Class(func.name, (func,), {"__getattr__": Native("Module.__getattr__", _unset_attribute)},
                                      func.module, func.line, external_bases=()))
                return stub
        return outer(func, args, kwargs) if outer is not None else NOT_HOOKED

    interp.call_hook = hook
    try:
        interp.call(BoundMethod(init, Instance(standin)), [hf], {"quant_config": qc, "prefix": ""})
    except _Passed as passed:
        step = _draft_step(passed, qc)
        if step is not None:
            chain.append(step)
        return passed.value
    finally:
        interp.call_hook = outer
    raise Unmodelled(f"{cls.name}.__init__ built no model body taking quant_config "
                     f"(a class of {', '.join(body_files)}): the draft's quant config is not known")


def _draft_step(passed: _Passed, given: Any) -> ChainStep | None:
    """The step that made the draft's quant config differ from the target's: the statement
    that produced the value passed (``quant_config = None`` under its ``if``, a helper's
    ``return None``), else the body's construction; None when the target's is passed on."""
    if passed.value is given:
        return None
    from sglang_audit.resolve.provenance import trace

    shown = None if passed.value is None else (passed.value.cls.name if isinstance(passed.value, Instance) else repr(passed.value))
    for ev in reversed(passed.reads):
        if ev.value is not passed.value:
            continue
        producer, _ = trace(ev, passed.value) if passed.value is None else (None, [])
        if producer is not None:
            guard = next((g for g in reversed(producer.guards) if g.file == producer.file), None)
            code = f"{producer.target} returns {shown}" if producer.kind == "return" else producer.text
            if guard is not None:
                return ChainStep(guard.file, guard.line, guard.text, shown, code, "layers", "draft")
            return ChainStep(producer.file, producer.line, "", shown, code, "layers", "draft")
        break
    file, line = passed.site
    return ChainStep(file, line, "", shown, f"{passed.body.name}(..., quant_config={shown})", "layers", "draft")


def _bound_argument(init: Function, args: list[Any], kwargs: dict[str, Any], name: str) -> Any:
    """The value a call ``Class(*args, **kwargs)`` binds to ``init``'s parameter ``name``
    (``self`` excluded), its default when not passed, ``_NO_ARG`` when it has none."""
    params = [p for p in init.params if p.star == ""][1:]
    for i, p in enumerate(params):
        if p.name != name:
            continue
        if name in kwargs:
            return kwargs[name]
        if i < len(args):
            return args[i]
        return init.defaults.get(name, _NO_ARG)
    return _NO_ARG


def _is_torch_module(cls: Class) -> bool:
    return any(b.startswith("torch.nn") for c in cls.mro() for b in c.external_bases)


def _unset_attribute(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return Unknown(f"attribute {args[-1]!r} of a module the draft builds (not evaluated)", f"draft:{args[-1]}")


def _registry_class(interp: Interpreter, reg: dict[str, Any], arch: Any) -> Class:
    """The class SGLang's model registry maps ``arch`` to: a module of the model package whose
    ``EntryClass`` (a class or a list of classes) holds a class of that ``__name__``
    (``import_model_classes``, models/registry.py). Only modules whose text defines such a
    class are loaded."""
    if not isinstance(arch, str):
        raise Unmodelled(f"the draft model's architecture is not known ({arch!r})")
    found = interp.find_module_file(reg["package"])
    if found is None:
        raise Unmodelled(f"the model package {reg['package']} is not in the source tree")
    path, is_pkg = found
    pkg_dir = path if path.is_dir() else path.parent  # a namespace package is its directory
    if not is_pkg:
        raise Unmodelled(f"{reg['package']} is a module, not the model package")
    needle = f"class {arch}("
    for path in sorted(pkg_dir.glob("*.py")) + sorted(pkg_dir.glob("*/__init__.py")):  # pkgutil.iter_modules' set
        try:
            if needle not in path.read_text(encoding="utf-8", errors="replace"):
                continue
        except OSError:
            continue
        name = path.stem if path.name != "__init__.py" else path.parent.name
        mod = interp.load_module(f"{reg['package']}.{name}")
        entry = mod.globals.get(reg["entry"]) if isinstance(mod, ModuleObj) else None
        for cls in entry if isinstance(entry, (list, tuple)) else [entry]:
            if isinstance(cls, Class) and cls.name == arch:
                return cls
    raise Unmodelled(f"no class named {arch} in the release's model registry ({reg['entry']} of {reg['package']}.*)")
