"""Hardware predicates of a release, interpreted for a device (the `guards` command)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sglang_audit import factfiles
from sglang_audit.analyses.graph import DecisionGraph, build_graph
from sglang_audit.analyses.graphquery import predicate_controls
from sglang_audit.evaluate.interpreter import Interpreter, PyRaise, Unmodelled
from sglang_audit.evaluate.values import (
    AnalysisBound,
    Cached,
    Function,
    ModuleObj,
    Partial,
    Unknown,
)
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.pins import target_device
from sglang_audit.resolve.pipeline import Request, parse_env
from sglang_audit.resolve.resolver import ModelInput, Resolver, Target
from sglang_audit.source.locate import SourceTree, locate_source


@dataclass(frozen=True)
class GuardFact:
    name: str
    value: Any  # the predicate's result on this device, or "unknown: ..."
    file: str
    line: int
    definition: str  # e.g. "partial(_check_cuda_device_version, device_capability_majors=[12], ...)"
    # decision sites it controls, from the decision graph:
    # "sglang/srt/layers/quantization/fp4_utils.py:66 writes fp4_gemm_runner_backend"
    controls: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "file": self.file, "line": self.line,
                "definition": self.definition, "controls": list(self.controls)}


def _describe(value: Any) -> str:
    if isinstance(value, Cached):
        return f"lru_cache({_describe(value.func)})"
    if isinstance(value, Partial):
        kws = ", ".join(f"{k}={v!r}" for k, v in value.kwargs.items())
        return f"partial({_describe(value.func)}{', ' + kws if kws else ''})"
    if isinstance(value, Function):
        return value.qualname
    return type(value).__name__


def _where(value: Any, mod: ModuleObj, name: str) -> tuple[str, int]:
    ev = mod.events.get(name)
    if ev is not None:
        return ev.file, ev.line
    inner = value
    while isinstance(inner, (Cached, Partial)):
        inner = inner.func
    if isinstance(inner, Function):
        return inner.module.file, inner.line
    return mod.file, 0


def list_guards(resolver: Resolver, graph: DecisionGraph | None = None) -> list[GuardFact]:
    spec = factfiles.predicates()
    interp = Interpreter(resolver.root, resolver.cache, resolver.world, {}, resolver.bounds)
    mods = []
    for m in spec.modules:
        if interp.find_module_file(m) is not None:
            loaded = interp.load_module(m)
            if isinstance(loaded, ModuleObj):
                mods.append(loaded)
    out: list[GuardFact] = []
    for name in spec.names:
        mod = next((m for m in mods if name in m.globals), None)
        if mod is None:
            continue
        fn = interp.getattr(mod, name)
        shown = _fact_value(interp, partial(interp.call, fn, [], {}))
        file, line = _where(fn, mod, name)
        controls = predicate_controls(graph, name) if graph is not None else ()
        out.append(GuardFact(name, shown, file, line, _describe(fn), controls))
    out.extend(_platform_facts(interp, spec.platform))
    return out


def _fact_value(interp: Interpreter, compute: Callable[[], Any]) -> Any:
    """One predicate or fact on the device; unknown (with the reason) when it stops or
    branches on something the device model does not know."""
    try:
        value = compute()
    except (PyRaise, Unmodelled, AnalysisBound) as exc:
        value = Unknown(f"evaluation stopped: {exc}")
    if interp.new_decisions:
        value = Unknown("; ".join(d.reason for d in interp.new_decisions))
        interp.new_decisions.clear()
        interp.decisions.clear()
    return f"unknown: {value.reason}" if isinstance(value, Unknown) else value


def _platform_fact(interp: Interpreter, accessor: Any, fact: str) -> Any:
    return interp.getattr(interp.call(accessor, [], {}), fact)


def _platform_facts(interp: Interpreter, spec: factfiles.PlatformFacts | None) -> list[GuardFact]:
    """0.5.19+: ``get_platform().<fact>`` as the release evaluates it, each naming the
    predicate behind it (the decisions it controls are listed under that predicate)."""
    if spec is None or interp.find_module_file(spec.module) is None:
        return []
    mod = interp.load_module(spec.module)
    if not isinstance(mod, ModuleObj) or spec.accessor not in mod.globals:
        return []
    accessor = interp.getattr(mod, spec.accessor)
    out: list[GuardFact] = []
    for table in spec.tables:
        probes = mod.globals.get(table)
        if not isinstance(probes, dict):
            continue
        ev = mod.events.get(table)
        for fact, probe in probes.items():
            shown = _fact_value(interp, partial(_platform_fact, interp, accessor, fact))
            out.append(GuardFact(f"{spec.accessor}().{fact}", shown, ev.file if ev else mod.file,
                                 ev.line if ev else 0, f"{table}[{fact!r}] → {probe}()"))
    return out


def guards_for(request: Request, progress: Callable[[str], None] | None = None,
           cache: SourceCache | None = None) -> tuple[SourceTree, list[Any]]:
    tree = locate_source(request.source, progress=progress)
    device = target_device(request.arch, request.cuda, request.cudnn, request.driver, tree.package_dir,
                           tree.version, request.env_profile)
    target = Target(tree, device, ModelInput("-", Path(".").resolve()), {}, parse_env(request.env),
                    frozenset(request.with_packages), frozenset(request.without_packages))
    # a shared cache lets callers that also resolve (diff) parse each file once
    cache = cache or SourceCache(use_disk=request.use_cache)
    # the graph says which decisions each predicate controls
    return tree, list_guards(Resolver(target, cache), build_graph(tree.package_dir, cache))
