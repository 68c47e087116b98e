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

from dataclasses import replace
from typing import Any

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
    Function,
    Instance,
    ModuleObj,
)
from sglang_audit.factfiles import ModelRegistryFacts
from sglang_audit.resolve.layerstage import (
    NO_ARG,
    bound_argument,
    call_site,
    stop_text,
    submodule_hook,
    unevaluated,
)
from sglang_audit.result import ChainStep


class _Passed(Exception):
    """A construction that received a quant config: the class (``body``), the value bound to
    its ``quant_config`` (``value``), the call site, the events its arguments read (for the
    step that produced the value) and, for the MoE layer, the constructions on the way to it
    (``way``, outermost first)."""

    def __init__(self, body: Class, value: Any, site: tuple[str, int], reads: list[Any],
                 way: tuple[_Passed, ...] = ()) -> None:
        super().__init__(body.name)
        self.body, self.value, self.site, self.reads, self.way = body, value, site, reads, way


MAX_DRAFT_PATHS = 64  # paths of the draft's constructor explored for its MoE layer's quant config


def draft_quant_config(interp: Interpreter, reg: ModelRegistryFacts, arch: Any, hf: Any, qc: Any, chain: list[ChainStep],
                       moe_class: Class | None = None, server_args: Any = None) -> Any:
    """The quant config the draft model's MoE layers get: the draft class (found in the
    release's own model registry) is constructed as SGLang constructs it, with the draft's
    config and this quant config, down to the first MoE layer it builds (a ``moe_class``
    instance, e.g. ``FusedMoE(..., quant_config=...)``): the value bound to that parameter is
    what the draft's experts are built with. Whatever the classes on the way do (an inline
    ``quant_config = None`` in the draft class or in its body, e.g. 0.5.10's
    ``DeepseekModelNextN`` dropping ``modelopt_fp4``; a helper such as 0.5.18's
    ``_mtp_quant_config``; an override such as an Fp8Config for the MoE only) is SGLang's code,
    evaluated. Model-package classes taking ``quant_config`` are built for real on the way;
    other torch modules (norms, embeddings, linear layers) are stand-ins, and a model-package
    class whose construction stops (an unknown the tool cannot follow) is a stand-in too: it
    is off the way to the MoE layer, or the MoE layer is never reached and the value unknown.

    ``reg``: rules/layers.toml's ``[model_registry]``; ``arch``: the draft's architecture
    (config.json ``architectures[0]``); ``hf``: the draft's config; the step that made the
    value differ from ``qc`` is appended to ``chain``. Without ``moe_class`` the first model
    body's argument is taken (the older, shallower answer)."""
    cls = registry_class(interp, reg, arch)
    found, init = cls.lookup("__init__")
    if not found or not isinstance(init, Function):
        raise Unmodelled(f"the draft model class {cls.name} has no __init__ the tool can read")
    body_files = reg.body_files
    standin = unevaluated(cls)
    skipped: list[str] = []
    way: list[_Passed] = []  # the model-package constructions being built, outermost first

    def classes(func: Class, args: list[Any], kwargs: dict[str, Any]) -> Any:
        ok, body_init = func.lookup("__init__")
        model_class = ok and isinstance(body_init, Function) and body_init.module.file.startswith(body_files)
        if moe_class is not None and func.is_subclass_of(moe_class) and isinstance(body_init, Function):
            passed = bound_argument(body_init, args, kwargs, "quant_config")
            if passed is not NO_ARG:
                raise _Passed(func, passed, call_site(interp), list(interp.reads or ()), tuple(way))
        if model_class and isinstance(body_init, Function):
            passed = bound_argument(body_init, args, kwargs, "quant_config")
            if passed is not NO_ARG:
                if moe_class is None:
                    raise _Passed(func, passed, call_site(interp), list(interp.reads or ()))
                way.append(_Passed(func, passed, call_site(interp), list(interp.reads or ())))
                try:  # maybe on the way to the MoE layer: built for real (its calls come back here)
                    return interp.instantiate(func, args, kwargs)
                except (Unmodelled, AnalysisBound, PyRaise) as exc:
                    skipped.append(f"{func.name}: {stop_text(interp, exc)}")
                    return Instance(unevaluated(func))
                finally:
                    way.pop()
        return NOT_HOOKED  # a torch module is a stand-in (submodule_hook)

    # the sizes a worker knows from its server args come from the layer stage's hook
    # (rules/layers.toml [moe.process_values]), captured here; other process state is unknown
    hook = submodule_hook(interp, reg, server_args, standin, classes)

    def build() -> _Passed | str:
        skipped.clear()
        try:
            interp.call(BoundMethod(init, Instance(standin)), [hf], {"quant_config": qc, "prefix": ""})
        except _Passed as passed:
            return passed
        except (Unmodelled, AnalysisBound, PyRaise) as exc:
            return stop_text(interp, exc)
        what = f"MoE layer ({moe_class.name})" if moe_class is not None else \
            f"model body taking quant_config (a class of {', '.join(body_files)})"
        why = f" (not followed: {'; '.join(skipped[:3])})" if skipped else ""
        return f"{cls.name}.__init__ built no {what}{why}"

    with interp.hooked_calls(hook):
        # its own branches (process state, sizes) are explored here, never on the layer's path
        # the first path that builds the MoE layer answers (process state and sizes decide
        # which submodules a rank builds, not the quant config passed down)
        # what the model body imports and logs while it is built is not the MoE layer's: no
        # package assumption of its own, no log line on the layer's value
        logged = len(interp.logs)
        with interp.unwatched_imports():
            runs, complete = explore_paths(interp, build, MAX_DRAFT_PATHS, until=lambda r: isinstance(r, _Passed))
        del interp.logs[logged:]
    reached = [r for r, _ in runs if isinstance(r, _Passed)]
    values = {id(p.value): p.value for p in reached}
    if not reached or len(values) != 1:
        stops = sorted({r for r, _ in runs if isinstance(r, str)})
        why = ("its paths pass different quant configs to it" if len(values) > 1 else
               f"more than {MAX_DRAFT_PATHS} paths of {cls.name}.__init__ (branches on "
               f"{'; '.join(dict.fromkeys(f'{d.file}:{d.line} {d.text}' for _, ran in runs for d in ran.new_decisions[:1]))})"
               if not complete else "; ".join(stops[:2]))
        raise Unmodelled(f"the draft's quant config is not known: {why}")
    step = _draft_step(reached[0], qc)
    if step is not None:
        if len(runs) > 1:
            step = replace(step, code=f"{step.code} (path {len(runs)} of {cls.name}.__init__, the first to build its MoE "
                                      f"layer; the {len(runs) - 1} before stop on process state or sizes the tool does not know)")
        chain.append(step)
    return reached[0].value


def _draft_step(passed: _Passed, given: Any) -> ChainStep | None:
    """The step that made the draft's quant config differ from the target's: on the way
    down to the MoE layer, the first construction passed another value than it was given;
    the statement that produced that value (``quant_config = None`` under its ``if``, a
    helper's ``return None``), else that construction's call. None when the target's quant
    config reaches the MoE layer."""
    if passed.value is given:
        return None
    prev = given
    changed = passed
    for rec in (*passed.way, passed):
        if rec.value is not prev:
            changed = rec
            break
        prev = rec.value
    from sglang_audit.resolve.provenance import trace

    value = changed.value
    shown = None if value is None else (value.cls.name if isinstance(value, Instance) else repr(value))
    carrying = [ev for ev in reversed(changed.reads) if ev.value is value]
    # the argument bound to quant_config: its variable's write first (a sibling argument such
    # as DeepSeek's moe_quant_config_override may hold the same None)
    carrying.sort(key=lambda ev: str(ev.target).rsplit(".", 1)[-1] != "quant_config")
    for ev in carrying:
        producer, _ = trace(ev, value) if value is None else (None, [])
        if producer is not None:
            guard = next((g for g in reversed(producer.guards) if g.file == producer.file), None)
            code = f"{producer.target} returns {shown}" if producer.kind == "return" else producer.text
            if guard is not None:
                return ChainStep(guard.file, guard.line, guard.describe(), shown, code, "layers", "draft")
            return ChainStep(producer.file, producer.line, "", shown, code, "layers", "draft")
        break
    file, line = changed.site
    return ChainStep(file, line, "", shown, f"{changed.body.name}(..., quant_config={shown})", "layers", "draft")


def registry_class(interp: Interpreter, reg: ModelRegistryFacts, arch: Any) -> Class:
    """The class SGLang's model registry maps ``arch`` to: a module of the model package whose
    ``EntryClass`` (a class or a list of classes) holds a class of that ``__name__``
    (``import_model_classes``, models/registry.py). Only modules whose text defines such a
    class are loaded."""
    if not isinstance(arch, str):
        raise Unmodelled(f"the draft model's architecture is not known ({arch!r})")
    found = interp.find_module_file(reg.package)
    if found is None:
        raise Unmodelled(f"the model package {reg.package} is not in the source tree")
    path, is_pkg = found
    pkg_dir = path if path.is_dir() else path.parent  # a namespace package is its directory
    if not is_pkg:
        raise Unmodelled(f"{reg.package} is a module, not the model package")
    for name in _defining_modules(interp, pkg_dir, arch):
        mod = interp.load_module(f"{reg.package}.{name}")
        entry = mod.globals.get(reg.entry) if isinstance(mod, ModuleObj) else None
        for cls in entry if isinstance(entry, (list, tuple)) else [entry]:
            if isinstance(cls, Class) and cls.name == arch:
                return cls
    raise Unmodelled(f"no class named {arch} in the release's model registry ({reg.entry} of {reg.package}.*)")


def _defining_modules(interp: Interpreter, pkg_dir: Any, arch: str) -> list[str]:
    """The modules of the model package whose text defines ``class <arch>(``, in
    ``pkgutil.iter_modules``' set and order; read once per package directory and name (the
    speculative worker stage asks on every one of its runs)."""
    key = ("registry_modules", str(pkg_dir), arch)
    known = interp.cache.prepared.get(key)
    if known is None:
        needle = f"class {arch}("
        known = []
        for path in sorted(pkg_dir.glob("*.py")) + sorted(pkg_dir.glob("*/__init__.py")):
            try:
                if needle not in path.read_text(encoding="utf-8", errors="replace"):
                    continue
            except OSError:
                continue
            known.append(path.stem if path.name != "__init__.py" else path.parent.name)
        interp.cache.prepared[key] = known
    return list(known)
