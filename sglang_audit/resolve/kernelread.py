"""Reading a kernel library's declared requirements for one entry (``kernels``, issue 17):
follow the entry by name into the FlashInfer source, read its decorators, helpers and JIT
module getters from the IR, and decide the verdict for the device's capability. Imported
only when ``kernelmemo`` has no verdict for the same reads."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sglang_audit.evaluate.interpreter import Frame
from sglang_audit.factfiles import KernelRow
from sglang_audit.frontend import ir
from sglang_audit.frontend.bindings import absolute_module
from sglang_audit.frontend.parse import ParseFailure, SourceCache
from sglang_audit.resolve.kernelmemo import Reads
from sglang_audit.resolve.libeval import LibraryEval
from sglang_audit.result import KERNEL_SUPPORTED as SUPPORTED
from sglang_audit.result import KERNEL_UNKNOWN as UNKNOWN
from sglang_audit.result import KERNEL_UNSUPPORTED as UNSUPPORTED
from sglang_audit.result import KernelLayer, KernelVerdict

_MAX_IMPORT_HOPS = 8
_MAX_CALL_DEPTH = 3


# --------------------------------------------------------------------------- reading FlashInfer


@dataclass(frozen=True)
class Found:
    rel: str  # file relative to the dir holding the package
    module: str  # dotted module name
    func: ir.Node  # FunctionDef


class FlashInferReader:
    """Finds functions by dotted name in a FlashInfer tree, following ``from X import Y``;
    ``reads`` notes every path it looks at (``kernelmemo``)."""

    def __init__(self, package_dir: Path, cache: SourceCache, reads: Reads | None = None) -> None:
        self.package_dir = package_dir
        self.base = package_dir.parent
        self.cache = cache
        self.reads = reads

    def _path(self, module: str) -> Path | None:
        parts = module.split(".")
        if parts[0] != self.package_dir.name:
            return None
        sub = self.package_dir.joinpath(*parts[1:])
        for cand in (sub.with_suffix(".py") if len(parts) > 1 else None, sub / "__init__.py"):
            if cand is None:
                continue
            found = cand.is_file()
            if self.reads is not None:
                self.reads.note(cand, found)
            if found:
                return cand
        return None

    def module(self, module: str) -> tuple[str, ir.Node] | None:
        path = self._path(module)
        if path is None:
            return None
        try:
            return path.relative_to(self.base).as_posix(), load_noted(self.cache, path, self.reads)
        except ParseFailure:
            return None

    def find(self, module: str, name: str, hops: int = 0, kinds: tuple[type, ...] = (ir.FunctionDef,)) -> Found | None:
        """The top-level definition ``name`` of ``module`` (a function; ``kinds`` for a class)."""
        loaded = self.module(module)
        if loaded is None or hops > _MAX_IMPORT_HOPS:
            return None
        rel, tree = loaded
        for node in _top_level(tree.body):
            if isinstance(node, kinds) and node.name == name:
                return Found(rel, module, node)
        is_package = rel.endswith("__init__.py")
        for node in _top_level(tree.body):
            if isinstance(node, ir.ImportFrom) and node.names != "*":
                for imported, asname in node.names:
                    if (asname or imported) == name:
                        target = absolute_module(module, is_package, node.module or "", node.level or 0)
                        found = self.find(target, imported, hops + 1, kinds)
                        if found is not None:
                            return found
        # `from ._core import *` (FlashInfer 0.7's flashinfer/mla/__init__.py): the name may come
        # from there (a name the star module does not define is simply not found in it)
        for node in _top_level(tree.body):
            if isinstance(node, ir.ImportFrom) and node.names == "*":
                target = absolute_module(module, is_package, node.module or "", node.level or 0)
                found = self.find(target, name, hops + 1)
                if found is not None:
                    return found
        return None


def _top_level(body: list[ir.Node]) -> Iterator[ir.Node]:
    """Module-level statements, including those inside if/try blocks."""
    for node in body:
        yield node
        if isinstance(node, ir.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ir.Try):
            yield from _top_level(node.body)
            for h in node.handlers:
                yield from _top_level(h.body)
            yield from _top_level(node.orelse)


# --------------------------------------------------------------------------- evaluation


def evaluate_row(reader: FlashInferReader, row: KernelRow, lib: LibraryEval, version: str | None,
                 sglang_root: Path, cache: SourceCache, reads: Reads | None = None) -> KernelVerdict:
    """The verdict of one ``rules/kernels.toml`` row on ``lib``'s device: the entry's declared
    requirements read from its decorators, its helper and JIT getter run by the interpreter."""
    try:
        return _evaluate_row(reader, row, lib, version, sglang_root, cache, reads)
    finally:
        if reads is not None:
            lib.note_reads(reads)


def _evaluate_row(reader: FlashInferReader, row: KernelRow, lib: LibraryEval, version: str | None,
                  sglang_root: Path, cache: SourceCache, reads: Reads | None) -> KernelVerdict:
    cc = lib.capability
    entry, backend = row.entry, row.backend
    module, _, name = entry.rpartition(".")
    layers: list[KernelLayer] = []
    conditions: list[str] = []
    call_site = _call_site(sglang_root, cache, list(row.callers), module, name, reads)

    def verdict(status: str, reason: str) -> KernelVerdict:
        return KernelVerdict(status, "flashinfer", version, entry, backend, reason, tuple(layers),
                             tuple(conditions), call_site)

    if not call_site:
        return verdict(UNKNOWN, f"no import of {name} from {module} found in {', '.join(row.callers)}: "
                                "the release's call site differs from rules/kernels.toml")
    found = reader.find(module, name)
    if found is None:
        return verdict(UNKNOWN, f"{entry} not found in FlashInfer {version}")
    ccn = cc[0] * 10 + cc[1]
    decorators = {call_name(d): d for d in found.func.decorators if isinstance(d, ir.Call)}
    req = decorators.get("backend_requirement")
    if req is not None:
        layers.extend(backend_requirement_layers(reader, found, req, backend, ccn, conditions))
    elif backend:
        layers.append(KernelLayer("backend_requirement", name, found.rel, found.func.line, UNKNOWN,
                                  f"{name} has no @backend_requirement table; backend={backend!r} is checked inside"))
    sc = decorators.get("supported_compute_capability")
    if sc is not None:
        layers.append(capability_layer(found, sc, ccn, name))
    if row.helper:
        layers.append(_helper(reader, lib, found.module, row.helper, conditions))
    if row.jit:
        layers.extend(_jit(reader, lib, found, row.jit, row.jit_arch_param))
    return _decide(layers, verdict, name, backend, cc)


def _decide(layers: list[KernelLayer], verdict: Callable[[str, str], KernelVerdict], name: str, backend: str,
            cc: tuple[int, int]) -> KernelVerdict:
    sm = f"SM{cc[0]}{cc[1]}"
    refusing = [x for x in layers if x.says == UNSUPPORTED and x.enforced]
    if refusing:
        x = refusing[0]
        return verdict(UNSUPPORTED, f"{sm} not in {x.function} {x.detail} at {x.file}:{x.line}")
    if not layers:
        return verdict(UNKNOWN, f"{name} declares no architecture requirement that sglang-audit reads")
    helper_no = [x for x in layers if x.says == UNSUPPORTED]
    if helper_no:
        x = helper_no[0]
        return verdict(UNKNOWN, f"the enforced checks accept {sm} but {x.function} says no ({x.file}:{x.line})")
    # an enforced layer that cannot be read outranks a helper that cannot be evaluated
    unsure = sorted((x for x in layers if x.says == UNKNOWN), key=lambda x: not x.enforced)
    if unsure:
        x = unsure[0]
        accepted = [y for y in layers if y.says == SUPPORTED]
        pre = f"declared for {sm} by {', '.join(sorted({y.function for y in accepted}))}; " if accepted else ""
        return verdict(UNKNOWN, f"{pre}{x.detail} ({x.file}:{x.line})")
    x = layers[0]
    key = f" backend {backend!r}" if backend else ""
    return verdict(SUPPORTED, f"{name}{key} declared for {sm}: {x.function} {x.detail} at {x.file}:{x.line}")


def call_name(node: ir.Node) -> str:
    func = node.func
    if isinstance(func, ir.Name):
        return str(func.id)
    if isinstance(func, ir.Attribute):
        return str(func.attr)
    return ""


def _int_list(node: ir.Node | None) -> list[int] | None:
    if isinstance(node, (ir.ListExpr, ir.TupleExpr, ir.SetExpr)):
        out = [e.value for e in node.elts if isinstance(e, ir.Const)]
        if len(out) == len(node.elts) and all(isinstance(v, int) and not isinstance(v, bool) for v in out):
            return out
    return None


def _arg(call: ir.Node, index: int, keyword: str) -> ir.Node | None:
    positional = [v for k, v in call.args if k == ""]
    for k, v in call.args:
        if k == keyword:
            return v
    return positional[index] if index < len(positional) else None


def capability_layer(found: Found, deco: ir.Node, ccn: int, label: str, enforced: bool = True) -> KernelLayer:
    ccs = _int_list(_arg(deco, 0, "supported_ccs"))
    line = deco.line
    if ccs is None:
        return KernelLayer("supported_compute_capability", label, found.rel, line, UNKNOWN,
                           "@supported_compute_capability(...) with a list that is not literal", enforced)
    says = SUPPORTED if ccn in ccs else UNSUPPORTED
    return KernelLayer("supported_compute_capability", label, found.rel, line, says,
                       f"@supported_compute_capability({sorted(ccs)})", enforced)


def backend_requirement_layers(reader: FlashInferReader, entry: Found, deco: ir.Node, backend: str, ccn: int,
                               conditions: list[str]) -> list[KernelLayer]:
    """The layers a ``@backend_requirement`` declaration (``deco``) on ``entry`` says for
    ``backend`` at capability ``ccn`` (the entry points' and libdispatch.py's wrapper classes')."""
    name = entry.func.name
    table = _arg(deco, 0, "backend_checks")
    if not isinstance(table, ir.DictExpr):
        return [KernelLayer("backend_requirement", name, entry.rel, deco.line, UNKNOWN,
                            "@backend_requirement table is not a literal dict")]
    keys = {k.value: v for k, v in table.items if isinstance(k, ir.Const) and isinstance(k.value, str)}
    layers: list[KernelLayer] = []
    if backend not in keys:
        declared = ", ".join(repr(k) for k in keys)
        return [KernelLayer("backend_requirement", name, entry.rel, deco.line, UNSUPPORTED,
                            f"@backend_requirement has no backend {backend!r} (declares {declared})")]
    fn = keys[backend]
    fn_name = fn.id if isinstance(fn, ir.Name) else ""
    req = reader.find(entry.module, fn_name) if fn_name else None
    if req is None:
        return [KernelLayer("backend_requirement", name, entry.rel, deco.line, UNKNOWN,
                            f"requirement for {backend!r} ({fn_name or 'not a name'}) not found")]
    cap = next((d for d in req.func.decorators
                if isinstance(d, ir.Call) and call_name(d) == "supported_compute_capability"), None)
    if cap is None:
        # backend_requirement's is_backend_supported(backend, cc) answers False for a
        # requirement without the decorator; say so rather than guess which way it goes
        layers.append(KernelLayer("backend_requirement", fn_name, req.rel, req.func.line, UNKNOWN,
                                  f"{fn_name} (backend {backend!r} of {name}) declares no @supported_compute_capability"))
    else:
        layer = capability_layer(req, cap, ccn, fn_name)
        layers.append(replace(layer, mechanism="backend_requirement",
                              detail=f"{layer.detail}, the requirement of backend {backend!r} in {name}'s "
                                     f"@backend_requirement ({entry.rel}:{deco.line})"))
    conditions.extend(_conditions(req))
    common = _arg(deco, 1, "common_check")
    if isinstance(common, ir.Name):
        found = reader.find(entry.module, common.id)
        if found is not None:
            conditions.extend(_conditions(found))
    return layers


def _conditions(found: Found) -> list[str]:
    """The checks a requirement function makes on the call's arguments, as written."""
    out: list[str] = []
    for stmt in found.func.body:
        if isinstance(stmt, ir.If) and any(isinstance(s, ir.Raise) or _returns_false(s) for s in stmt.body):
            what = "raises" if any(isinstance(s, ir.Raise) for s in stmt.body) else "returns False"
            out.append(f"{found.func.name} {what} if {flat_text(stmt.text)} "
                       f"({found.rel}:{stmt.line})")
        elif isinstance(stmt, ir.ExprStmt) and isinstance(stmt.value, ir.Call):
            out.append(f"{found.func.name} calls {call_name(stmt.value) or 'a function'}(...) ({found.rel}:{stmt.line})")
    return out


def _returns_false(stmt: ir.Node) -> bool:
    return isinstance(stmt, ir.Return) and isinstance(stmt.value, ir.Const) and stmt.value.value is False


def flat_text(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= 160 else flat[:157] + "..."


# ---- the entry's `is_*_supported` helper, run on the device


def _helper(reader: FlashInferReader, lib: LibraryEval, module: str, name: str, conditions: list[str]) -> KernelLayer:
    """The helper's ``if <test>: return False`` guards, each test run by the interpreter on the
    device after the assignments before it (``libeval``); a test on the call's arguments is a
    condition. Informs, never refuses (SGLang does not call it)."""
    found = reader.find(module, name)
    if found is None:
        return KernelLayer("helper", name, "", 0, UNKNOWN, f"{name} not found next to the entry", enforced=False)
    sm = f"SM{lib.capability[0]}{lib.capability[1]}"
    func = lib.function(found.module, found.func)
    if func is None:
        return KernelLayer("helper", name, found.rel, found.func.line, UNKNOWN,
                           f"{found.module} could not be evaluated", enforced=False)
    frame = lib.frame(func)
    passed: list[str] = []
    rest: list[str] = []
    for stmt in found.func.body:
        if not isinstance(stmt, ir.If) or not any(_returns_false(s) for s in stmt.body):
            stopped = lib.run_prefix(stmt, frame)
            if stopped is not None and stopped.raised:
                # the helper's own code fails on the device before any guard: it answers nothing
                return KernelLayer("helper", name, found.rel, stmt.line, UNKNOWN,
                                   f"`{flat_text(stmt.text)}` {stopped.why} on {sm}: the helper cannot answer",
                                   enforced=False)
            continue
        got = lib.test(stmt.test, frame)
        if got.holds is None:
            rest.append(f"{name} returns False if {flat_text(stmt.text)} ({found.rel}:{stmt.line})")
            continue
        if got.holds:
            return KernelLayer("helper", name, found.rel, stmt.line, UNSUPPORTED,
                               f"returns False: `{flat_text(stmt.text)}` holds on {sm}", enforced=False)
        passed.append(f"`{flat_text(stmt.text)}` is false ({found.rel}:{stmt.line})")
    conditions.extend(rest)
    if not passed:
        return KernelLayer("helper", name, found.rel, found.func.line, UNKNOWN,
                           "no capability guard sglang-audit can evaluate", enforced=False)
    return KernelLayer("helper", name, found.rel, found.func.line, SUPPORTED,
                       f"capability check passes: {'; '.join(passed)}", enforced=False)


# ---- the JIT module the entry builds


def calls_in(node: Any) -> Iterator[ir.Node]:
    """Every Call inside a statement/expression (nested function bodies excluded)."""
    if isinstance(node, list):
        for item in node:
            yield from calls_in(item)
        return
    if isinstance(node, tuple):
        for item in node:
            yield from calls_in(item)
        return
    if not isinstance(node, ir.Node) or isinstance(node, (ir.FunctionDef, ir.ClassDef, ir.Lambda)):
        return
    if isinstance(node, ir.Call):
        yield node
    for slot in node._all_slots():
        if slot == "line":
            continue
        yield from calls_in(getattr(node, slot, None))


def _chosen_body(lib: LibraryEval, frame: Frame, body: list[ir.Node]) -> tuple[list[ir.Node], str]:
    """The statements run, taking the if/elif branches the device decides (the interpreter
    runs each test, and the assignments on the way); a branch it cannot decide stops the walk
    (reason returned)."""
    out: list[ir.Node] = []
    for stmt in body:
        if isinstance(stmt, ir.If):
            got = lib.test(stmt.test, frame)
            if got.holds is None:
                return out, f"`{flat_text(stmt.text)}` (line {stmt.line}) depends on more than the device"
            inner, why = _chosen_body(lib, frame, stmt.body if got.holds else stmt.orelse)
            out.extend(inner)
            if why:
                return out, why
            continue
        lib.run_prefix(stmt, frame)
        out.append(stmt)
    return out, ""


def _jit(reader: FlashInferReader, lib: LibraryEval, entry: Found, getter: str, arch_param: str) -> list[KernelLayer]:
    cc = lib.capability
    sm = f"SM{cc[0]}{cc[1]}"
    calls = [c for c in calls_in(entry.func.body) if call_name(c) == getter]
    if not calls:
        return [KernelLayer("jit", entry.func.name, entry.rel, entry.func.line, UNKNOWN,
                            f"{entry.func.name} does not call {getter} in this version")]
    found = reader.find(entry.module, getter)
    if found is None:
        return [KernelLayer("jit", getter, entry.rel, calls[0].line, UNKNOWN, f"{getter} not found")]
    gens = gen_calls(reader, lib, found, arch_param, 0)
    if isinstance(gens, str):
        return [KernelLayer("jit", getter, found.rel, found.func.line, UNKNOWN, gens)]
    if not gens:
        return [KernelLayer("jit", getter, found.rel, found.func.line, UNSUPPORTED,
                            f"builds no JIT module on {sm} (no gen_*_module call on its path)")]
    layers: list[KernelLayer] = []
    for gen, via in gens:
        majors, line = major_versions(gen)
        spec_name = jit_spec_name(gen)
        named = f" (module {spec_name!r})" if spec_name else ""
        if majors is None:
            layers.append(KernelLayer("jit", gen.func.name, gen.rel, gen.func.line, UNKNOWN,
                                      f"JIT spec{named} built via {via}: no literal supported_major_versions"))
        else:
            says = SUPPORTED if cc[0] in majors else UNSUPPORTED
            # the spec's own name may say less than its arch list (…_sm100_module compiling
            # for majors [10, 12]): report both, the arch list decides what is compiled
            tag = re.search(r"_sm(\d{2,3})(?:_|$)", gen.func.name)
            named_for = (f"; named for SM{tag.group(1)}" if tag and tag.group(1) != f"{cc[0]}{cc[1]}" else "")
            layers.append(KernelLayer("jit", gen.func.name, gen.rel, line, says,
                                      f"nvcc archs for majors {majors}{named}, built via {via}{named_for}"))
        artifacts = [c for c in calls_in(gen.func.body) if call_name(c) == "get_artifact"]
        if artifacts:
            layers.append(KernelLayer(
                "artifact", gen.func.name, gen.rel, artifacts[0].line, UNKNOWN,
                f"the kernels{named} are prebuilt binaries fetched at run time (get_artifact); "
                "which architectures they exist for is not in the source"))
    return layers


def gen_calls(reader: FlashInferReader, lib: LibraryEval, found: Found, arch_param: str,
              depth: int) -> list[tuple[Found, str]] | str:
    """The JIT generators (``gen_*_module``) a module getter calls on the branch the device
    takes, with where; a reason (str) when the branch is not decided."""
    func = lib.function(found.module, found.func)
    if func is None:
        return f"{found.module} could not be evaluated"
    frame = lib.frame(func)
    if arch_param and frame.scope is not None:
        cc = lib.capability
        frame.scope.vars[arch_param] = f"{cc[0] * 10 + cc[1]}"  # what SGLang passes: the capability as a string
    body, why = _chosen_body(lib, frame, found.func.body)
    if why:
        return f"{found.func.name}: {why}"
    out: list[tuple[Found, str]] = []
    for call in calls_in(body):
        callee = call_name(call)
        if not isinstance(call.func, ir.Name):
            continue
        if callee.startswith("gen_") and callee.endswith("_module"):
            gen = reader.find(found.module, callee)
            if gen is not None:
                out.append((gen, f"{found.func.name} ({found.rel}:{call.line})"))
        elif depth < _MAX_CALL_DEPTH and "module" in callee:
            # a module getter it delegates to (0.7.2: _get_trtllm_moe_sm100_module_impl);
            # other calls (cubin loaders, ...) are not followed
            inner = reader.find(found.module, callee)
            if inner is not None:
                more = gen_calls(reader, lib, inner, "", depth + 1)
                if isinstance(more, str):
                    return more
                out.extend(more)
    return out


def major_versions(gen: Found) -> tuple[list[int] | None, int]:
    """A JIT generator's ``supported_major_versions`` list and its line (None: not declared)."""
    for call in calls_in(gen.func.body):
        for key, value in call.args:
            if key == "supported_major_versions":  # cite the list's own line
                return _int_list(value), value.line
    return None, gen.func.line


def jit_spec_name(gen: Found) -> str:
    """The module name a JIT generator passes ``gen_jit_spec`` ("" when not a literal)."""
    for call in calls_in(gen.func.body):
        if call_name(call) == "gen_jit_spec":
            first = _arg(call, 0, "name")
            if isinstance(first, ir.Const) and isinstance(first.value, str):
                return first.value
    return ""


# ---- the SGLang side: where the release imports the entry


def load_noted(cache: SourceCache, path: Path, reads: Reads | None) -> ir.Node:
    """``cache.load``, noting the content parsed (the sha256 of the very bytes read)."""
    try:
        tree = cache.load(path)
    except ParseFailure:
        if reads is not None:
            reads.unsteady = True  # a file that does not parse: read again rather than remembered
        raise
    if reads is not None:
        reads.parsed(path, cache.content_sha256(path))
    return tree


def _call_site(root: Path, cache: SourceCache, callers: list[str], module: str, name: str,
               reads: Reads | None = None) -> str:
    """``file:line`` of the first ``from <library>[.sub] import name`` in the listed modules."""
    package = module.split(".")[0]
    for caller in callers:
        rel = caller.replace(".", "/") + ".py"
        path = root / rel
        found = path.is_file()
        if reads is not None:
            reads.note(path, found)
        if not found:
            continue
        try:
            tree = load_noted(cache, path, reads)
        except ParseFailure:
            continue
        for node in _walk_statements(tree.body):
            if not isinstance(node, ir.ImportFrom) or node.names == "*" or (node.level or 0) != 0:
                continue
            source = node.module or ""
            if (source == package or source.startswith(package + ".")) and any(n == name for n, _ in node.names):
                return f"{rel}:{node.line}"
    return ""


def _walk_statements(body: list[ir.Node]) -> Iterator[ir.Node]:
    for node in body:
        yield node
        for slot in ("body", "orelse", "finalbody"):
            inner = getattr(node, slot, None)
            if isinstance(inner, list):
                yield from _walk_statements(inner)
        for h in getattr(node, "handlers", None) or []:
            yield from _walk_statements(h.body)
