"""A kernel library's own dispatch between kernel families (flashinfer#2555), evaluated on the
device: which family a FlashInfer wrapper built with SGLang's ``backend=`` runs, and what the
family's own code says of the device.

FlashInfer's wrappers (``BatchPrefillWithRaggedKVCacheWrapper(..., backend="auto")``) choose
FA2/FA3, CUTLASS, trtllm-gen, ... in Python. The wrapper class is read from the IR (never
imported or run); its ``__init__`` stores the ``backend`` argument on ``self`` (``self._backend =
backend``: the holders). Then, on the device (``libeval``: the same interpreter over the
library's tree, the device's capability and CUDA version):

* the value SGLang passes, when the class branches on it to choose (``if self._requested_backend
  == "auto": self._backend = determine_attention_backend(self.device, ...)``), is resolved by
  running that function: its ``device`` parameter is a CUDA device, every other argument
  unknown; a branch on the device decides, a branch on anything else makes the choice a
  condition (FA3 on SM90 depends on the call's dtypes and masks: ``is_fa3_backend_supported``);
* the family's module getter (the library function whose name holds ``module`` that the
  class calls under ``if <holder> == "<family>"``, else with the holder as its first argument:
  ``get_batch_prefill_module(self._backend, ...)``) is walked the same way, its ``device``
  parameter the CUDA device and the family parameter bound: a ``raise`` on the path the device
  takes is the family's refusal, cited at the raise (``get_fmha_module``: "CUTLASS FMHA
  requires SM100a ... SM12x lacks tcgen05", flashinfer/prefill.py in 0.7.2); the JIT specs it
  reaches are read as ``kernelread`` reads an entry's (``supported_major_versions``);
* a ``@supported_compute_capability`` or ``@backend_requirement`` declaration on the class's
  methods is read as ``kernelread`` reads one on an entry.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sglang_audit.evaluate.interpreter import Frame
from sglang_audit.evaluate.values import Class, Instance
from sglang_audit.frontend import ir
from sglang_audit.frontend.irtext import expr_text
from sglang_audit.resolve.kernelread import (
    FlashInferReader,
    Found,
    backend_requirement_layers,
    call_name,
    calls_in,
    capability_layer,
    flat_text,
    gen_calls,
    jit_spec_name,
    major_versions,
)
from sglang_audit.resolve.libeval import LibraryEval
from sglang_audit.result import KERNEL_SUPPORTED as SUPPORTED
from sglang_audit.result import KERNEL_UNKNOWN as UNKNOWN
from sglang_audit.result import KERNEL_UNSUPPORTED as UNSUPPORTED
from sglang_audit.result import KernelLayer

DEVICE_PARAM = "device"  # the parameter FlashInfer's dispatchers and getters take the device in
_MAX_DELEGATION = 3  # module getters a getter delegates to, followed


@dataclass(frozen=True)
class Dispatch:
    """What the wrapper does on the device: the family it runs ("" when not decided), the
    layers (each cited at the library's line) and the conditions left to the call."""

    family: str
    layers: tuple[KernelLayer, ...]
    conditions: tuple[str, ...]


def cuda_device(lib: LibraryEval) -> Instance:
    """The ``torch.device`` a wrapper holds (SGLang's workspace buffer is on the GPU): its
    ``type`` and ``index``, as ``get_compute_capability(device)`` reads them."""
    dev = Instance(Class("device", (), {}, None, 0, external_bases=()))
    dev.attrs.update(type="cuda", index=0)
    return dev


def wrapper_dispatch(reader: FlashInferReader, lib: LibraryEval, module: str, name: str, backend: str,
                     keyword: str = "backend") -> Dispatch:
    """The family ``name(..., <keyword>=backend)`` runs on ``lib``'s device and what its code says."""
    found = reader.find(module, name, kinds=(ir.ClassDef,))
    if found is None:
        return Dispatch("", (KernelLayer("dispatch", name, "", 0, UNKNOWN, f"{module}.{name} not found", enforced=False),), ())
    label = f"{name}({keyword}={backend!r})"
    methods: list[ir.Node] = [f for f in found.func.body if isinstance(f, ir.FunctionDef)]
    holders = _holders(methods, keyword)
    layers: list[KernelLayer] = []
    conditions: list[str] = []
    layers += _declarations(reader, found, methods, backend, lib, conditions)
    family = backend
    chooser = _chooser(methods, holders, backend)
    if chooser is not None:
        family, layer, why = _run_chooser(reader, lib, found, chooser, label)
        if layer is not None:
            layers.append(layer)
        if not family:
            conditions.append(why)
            return Dispatch("", tuple(layers), tuple(conditions))
    getters = _getters(reader, found, methods, holders, family)
    if not getters:
        conditions.append(f"{label}: no module getter of family {family!r} found in {name} ({found.rel})")
        return Dispatch(family, tuple(layers), tuple(conditions))
    if len(getters) > 1:
        conditions.append(f"{label}: {name} builds family {family!r} with one of "
                          f"{', '.join(g.func.name for g, _, _ in getters)}, chosen on the call's arguments")
    for got, call, passes_family in getters:
        more = _run_getter(reader, lib, got, family if passes_family else None, f"{label} runs {family!r}",
                           f"{found.rel}:{call.line}", conditions)
        if len(getters) > 1:  # maybe not the getter the call runs: informs, never refuses
            more = [replace(x, enforced=False) for x in more]
        layers += more
    return Dispatch(family, tuple(layers), tuple(conditions))


# ---- the wrapper class


def _holders(methods: list[ir.Node], keyword: str) -> set[str]:
    """``self.<a>`` the constructor stores the backend argument in."""
    init = next((f for f in methods if f.name == "__init__"), None)
    if init is None or not any(p.name == keyword for p in init.params):
        return set()
    out: set[str] = set()
    for node in ir.walk(init.body, into_scopes=False):
        if isinstance(node, ir.Assign) and len(node.targets) == 1 and isinstance(node.value, ir.Name) \
                and node.value.id == keyword and _self_attr(node.targets[0]):
            out.add(node.targets[0].attr)
    return out


def _self_attr(node: Any) -> bool:
    return isinstance(node, ir.Attribute) and isinstance(node.value, ir.Name) and node.value.id == "self"


def _compares(test: ir.Node, holders: set[str], value: str, op: str = "==") -> bool:
    """``self.<holder> == "<value>"`` (either side)."""
    if not isinstance(test, ir.Compare) or len(test.ops) != 1 or test.ops[0] != op:
        return False
    sides = (test.left, test.comparators[0])
    return any(_self_attr(a) and a.attr in holders and isinstance(b, ir.Const) and b.value == value
               for a, b in (sides, sides[::-1]))


def _ifs(methods: list[ir.Node]) -> list[ir.Node]:
    return [n for m in methods for n in ir.walk(m.body, into_scopes=False) if isinstance(n, ir.If)]


def _chooser(methods: list[ir.Node], holders: set[str], value: str) -> ir.Node | None:
    """The call that replaces ``value`` by a family: ``self.<h> = f(...)`` (or a local) under
    ``if self.<holder> == "<value>"``."""
    for stmt in _ifs(methods):
        if not _compares(stmt.test, holders, value):
            continue
        for inner in stmt.body:
            # the family replaces the value in its holder (``self._backend = f(...)``)
            if isinstance(inner, ir.Assign) and len(inner.targets) == 1 and _self_attr(inner.targets[0]) \
                    and inner.targets[0].attr in holders and isinstance(inner.value, ir.Call) \
                    and isinstance(inner.value.func, ir.Name):
                return inner.value
    return None


def _run_chooser(reader: FlashInferReader, lib: LibraryEval, wrapper: Found, call: ir.Node,
                 label: str) -> tuple[str, KernelLayer | None, str]:
    """(family, its layer, why not decided) from running the chooser on the device."""
    fn = call.func.id
    found = reader.find(wrapper.module, fn)
    if found is None:
        return "", None, f"{label}: the family is chosen by {fn} ({wrapper.rel}:{call.line}), not found"
    frame = _frame(lib, found, None)
    if frame is None:
        return "", None, f"{label}: {found.module} could not be evaluated"
    result = _walk(lib, frame, found.func.body)
    sm = _sm(lib)
    if result.stop is not None and isinstance(result.stop, ir.Return) and isinstance(result.stop.value, ir.Const) \
            and isinstance(result.stop.value.value, str):
        family = result.stop.value.value
        via = "; ".join(result.taken)
        return family, KernelLayer("dispatch", fn, found.rel, result.stop.line, SUPPORTED,
                                   f"{label} runs {family!r} on {sm}: {fn} returns it ({via})" if via else
                                   f"{label} runs {family!r} on {sm}: {fn} returns it", enforced=False), ""
    why = result.why or "its return is not a literal family"
    return "", None, f"{label}: the family {fn} chooses on {sm} depends on the call: {why} ({found.rel})"


def _getters(reader: FlashInferReader, wrapper: Found, methods: list[ir.Node], holders: set[str],
             family: str) -> list[tuple[Found, ir.Node, bool]]:
    """The family's module getters: (function, the call in the wrapper, whether the family is
    its first argument). Those under ``if self.<holder> == "<family>"`` first; else every getter
    called with the holder as its first argument (several when the wrapper chooses between
    them on something else, ``use_tensor_cores``: then none is the one)."""
    def getters(nodes: list[ir.Node]) -> list[tuple[Found, ir.Node]]:
        out = []
        for call in calls_in(nodes):
            callee = call_name(call)
            if isinstance(call.func, ir.Name) and "module" in callee:
                found = reader.find(wrapper.module, callee)
                if found is not None:
                    out.append((found, call))
        return out

    def distinct(found: list[tuple[Found, ir.Node, bool]]) -> list[tuple[Found, ir.Node, bool]]:
        seen: dict[tuple[str, str], tuple[Found, ir.Node, bool]] = {}
        for f in found:
            seen.setdefault((f[0].module, f[0].func.name), f)
        return list(seen.values())

    named = [(f, c, False) for stmt in _ifs(methods) if _compares(stmt.test, holders, family)
             for f, c in getters(stmt.body)]
    if named:
        return distinct(named)
    passed = []
    for found, call in getters([stmt for m in methods for stmt in m.body]):
        first = next((v for k, v in call.args if k == ""), None)
        if isinstance(first, ir.Attribute) and _self_attr(first) and first.attr in holders:
            passed.append((found, call, True))
    return distinct(passed)


def _declarations(reader: FlashInferReader, wrapper: Found, methods: list[ir.Node], backend: str, lib: LibraryEval,
                  conditions: list[str]) -> list[KernelLayer]:
    ccn = lib.capability[0] * 10 + lib.capability[1]
    out: list[KernelLayer] = []
    for method in methods:
        here = Found(wrapper.rel, wrapper.module, method)
        for deco in method.decorators:
            if isinstance(deco, ir.Call) and call_name(deco) == "supported_compute_capability":
                out.append(capability_layer(here, deco, ccn, f"{wrapper.func.name}.{method.name}"))
            elif isinstance(deco, ir.Call) and call_name(deco) == "backend_requirement" and backend != "auto":
                out += backend_requirement_layers(reader, here, deco, backend, ccn, conditions)
    return out


# ---- the family's module getter


def _run_getter(reader: FlashInferReader, lib: LibraryEval, getter: Found, family: str | None, label: str,
                site: str, conditions: list[str]) -> list[KernelLayer]:
    sm = _sm(lib)
    frame = _frame(lib, getter, family)
    name = getter.func.name
    if frame is None:
        return [KernelLayer("dispatch", name, getter.rel, getter.func.line, UNKNOWN, f"{getter.module} could not be evaluated")]
    result = _walk(lib, frame, getter.func.body)
    via = f" ({'; '.join(result.taken)})" if result.taken else ""
    if isinstance(result.stop, ir.Raise):
        return [KernelLayer("dispatch", name, getter.rel, result.stop.line, UNSUPPORTED,
                            f"{label} (its module from {name}, called at {site}) on {sm}{via}: "
                            f"{flat_text(result.stop.text)}")]
    if result.why:
        conditions.append(f"{label}: {name} ({getter.rel}) {result.why}")
        return [KernelLayer("dispatch", name, getter.rel, getter.func.line, UNKNOWN,
                            f"{label}: {name} {result.why}", enforced=False)]
    layers: list[KernelLayer] = []
    for gen, how in _gens(reader, lib, getter, result.ran):
        majors, line = major_versions(gen)
        spec = jit_spec_name(gen)
        named = f" (module {spec!r})" if spec else ""
        if majors is None:
            layers.append(KernelLayer("jit", gen.func.name, gen.rel, gen.func.line, UNKNOWN,
                                      f"{label}: JIT spec{named} built via {how}: no literal supported_major_versions",
                                      enforced=False))
        else:
            says = SUPPORTED if lib.capability[0] in majors else UNSUPPORTED
            layers.append(KernelLayer("jit", gen.func.name, gen.rel, line, says,
                                      f"{label}: nvcc archs for majors {majors}{named}, built via {how}"))
    if not layers:
        layers.append(KernelLayer("dispatch", name, getter.rel, getter.func.line, SUPPORTED,
                                  f"{label} (its module from {name}, called at {site}): no refusal on {sm}{via}",
                                  enforced=False))
    return layers


def _gens(reader: FlashInferReader, lib: LibraryEval, getter: Found, ran: list[ir.Node]) -> list[tuple[Found, str]]:
    out: list[tuple[Found, str]] = []
    for call in calls_in(ran):
        callee = call_name(call)
        if not isinstance(call.func, ir.Name) or "module" not in callee:
            continue
        found = reader.find(getter.module, callee)
        if found is None:
            continue
        how = f"{getter.func.name} ({getter.rel}:{call.line})"
        if callee.startswith("gen_") and callee.endswith("_module"):
            out.append((found, how))
        else:
            more = gen_calls(reader, lib, found, "", _MAX_DELEGATION - 1)
            if isinstance(more, list):
                out += more
    return out


# ---- walking a body on the device


@dataclass
class _Walked:
    ran: list[ir.Node]  # the statements run, in order
    taken: list[str]  # the branches the device decided ("`test` holds (line)")
    stop: ir.Node | None = None  # the return or raise reached
    why: str = ""  # a branch the device does not decide


def _walk(lib: LibraryEval, frame: Frame, body: list[ir.Node], out: _Walked | None = None) -> _Walked:
    """The statements a call runs, the device deciding each ``if`` (the assignments on the way
    run, ``libeval``); stops at a ``return``/``raise`` or at a branch on anything else."""
    out = out if out is not None else _Walked([], [])
    for stmt in body:
        if isinstance(stmt, ir.If):
            got = lib.test(stmt.test, frame)
            if got.holds is None:
                out.why = f"branches on `{flat_text(expr_text(stmt.test))}` (line {stmt.line}), which the device does not decide"
                return out
            used = f", {', '.join(got.used)}" if got.used else ""
            out.taken.append(f"`{flat_text(expr_text(stmt.test))}` {'holds' if got.holds else 'is false'} "
                             f"(line {stmt.line}{used})")
            _walk(lib, frame, stmt.body if got.holds else stmt.orelse, out)
            if out.stop is not None or out.why:
                return out
            continue
        out.ran.append(stmt)
        if isinstance(stmt, (ir.Return, ir.Raise)):
            out.stop = stmt
            return out
        if _exits(stmt):
            # a return or raise inside a loop, `with` or `try`: where the call goes on is not
            # followed (a statement after it may never run)
            out.why = f"may return or raise inside the statement at line {stmt.line}, which is not followed"
            return out
        lib.run_prefix(stmt, frame)
    return out


def _exits(stmt: ir.Node) -> bool:
    """Whether a compound statement (not a function or class) holds a return or raise."""
    if isinstance(stmt, ir.FunctionDef | ir.ClassDef):
        return False
    for slot in ("body", "orelse", "finalbody"):
        inner = getattr(stmt, slot, None)
        if isinstance(inner, list) and any(isinstance(x, ir.Return | ir.Raise) or _exits(x) for x in inner):
            return True
    return any(isinstance(x, ir.Return | ir.Raise) or _exits(x) for h in getattr(stmt, "handlers", None) or [] for x in h.body)


def _frame(lib: LibraryEval, found: Found, family: str | None) -> Frame | None:
    func = lib.function(found.module, found.func)
    if func is None:
        return None
    frame = lib.frame(func)
    if frame.scope is not None:
        if any(p.name == DEVICE_PARAM for p in func.params):
            frame.scope.vars[DEVICE_PARAM] = cuda_device(lib)
        positional = [p for p in func.params if p.star not in ("*", "**")]
        if family is not None and positional:
            frame.scope.vars[positional[0].name] = family
    return frame


def _sm(lib: LibraryEval) -> str:
    return f"SM{lib.capability[0]}{lib.capability[1]}"
