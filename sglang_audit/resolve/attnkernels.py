"""The attention kernel level (issue 42): which kernel-library functions an attention backend
reaches, read from the backend's own code, and what those functions' own code says of the
device. Read from the IR, never imported or run.

*Which kernel.* The backend name is looked up in the release's registry (the function
decorated ``@register_attention_backend("<name>")``, ``rules/attention.toml [kernel]``); the
class it returns is the one the attention stage built (its value names it) or, when SGLang
refused first, the one returned in the block of the refusing assert (what the creator builds
once its check holds). That class's ``__init__`` is read for ``from <library>[.sub] import f``
statements; its assignments and ``if`` tests (``self.fa_impl_ver == 3``) are run by the
interpreter (``libeval``) on what the creator's call fixes: literal keywords, else the
parameter's literal default. A test that cannot be decided that way keeps both sides, and an
import under it is conditional: it can inform, never refuse.

*What the kernel says.* Each imported function is found in the library the release pins
(``source/sglkernel.py``, ``source/flashinfer.py``) and its top-level ``if <test>: raise``
guards are run by the interpreter on the device (``libeval``: the library's own module, its
helpers such as ``is_fa3_supported``, the capability and ``torch.version.cuda`` from the device
model). A guard that holds is the kernel's own refusal (``unsupported``, cited at the guard); a
test that branches on the call's arguments or anything else the device does not decide is listed
as a condition; a ``@supported_compute_capability`` decorator is read as ``kernelread`` reads it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_audit.evaluate.interpreter import Frame, function_locals
from sglang_audit.evaluate.values import Class, Instance, ModuleObj, Scope, Unknown
from sglang_audit.frontend import ir
from sglang_audit.frontend.bindings import absolute_module
from sglang_audit.frontend.irtext import expr_text
from sglang_audit.frontend.parse import ParseFailure, SourceCache
from sglang_audit.inputs.device import Device, Environment, parse_device
from sglang_audit.resolve import kernelargs
from sglang_audit.resolve.kernelmemo import Reads
from sglang_audit.resolve.kernelread import (
    FlashInferReader,
    call_name,
    capability_layer,
    flat_text,
    load_noted,
)
from sglang_audit.resolve.libeval import LibraryEval
from sglang_audit.result import KERNEL_SUPPORTED as SUPPORTED
from sglang_audit.result import KERNEL_UNKNOWN as UNKNOWN
from sglang_audit.result import KERNEL_UNSUPPORTED as UNSUPPORTED
from sglang_audit.result import (
    STATUS_RESOLVED,
    STATUS_UNSUPPORTED,
    KernelLayer,
    KernelVerdict,
    LayerValue,
)
from sglang_audit.world.overlays.tensors import AbstractTensor


@dataclass(frozen=True)
class KernelImport:
    """One kernel-library function the backend's constructor imports."""

    module: str  # "sgl_kernel.flash_attn"
    name: str  # "flash_attn_varlen_func"
    site: str  # the SGLang file:line of the import
    condition: str = ""  # the undecided branch it sits under ("" when on the constructor's path)
    # a library object the attention stage saw the construction build (LayerValue.library_calls):
    # its arguments as SGLang passed them, repr'd ((keyword or "", repr or "?"), ...); "" for an import
    call: str = ""
    # called while the built backend served a batch (the attention stage's request time), not
    # imported by its constructor: it counts only where the library's code checks the device
    served: bool = False
    # a call served: the arguments SGLang passed it, as far as the attention stage knew them
    # (JSON of ((keyword or "", kernelargs.encode), ...); "" when none was known): the
    # library's guards on its arguments are run with them
    given: str = ""

    @property
    def package(self) -> str:
        return self.module.split(".")[0]


@dataclass(frozen=True)
class Reach:
    """The kernel functions a backend reaches, or why they are not known."""

    backend: str  # the --attention-backend name
    cls: str  # the class the registry's creator builds ("" when not found)
    imports: tuple[KernelImport, ...]
    reason: str = ""  # why no class/constructor was read


# --------------------------------------------------------------------------- the SGLang side


def _module_path(root: Path, module: str, reads: Reads | None) -> Path | None:
    base = root.joinpath(*module.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        found = cand.is_file()
        if reads is not None:
            reads.note(cand, found)
        if found:
            return cand
    return None


def _load(cache: SourceCache, root: Path, module: str, reads: Reads | None) -> tuple[str, ir.Node] | None:
    path = _module_path(root, module, reads)
    if path is None:
        return None
    try:
        return path.relative_to(root).as_posix(), load_noted(cache, path, reads)
    except (ParseFailure, OSError):
        if reads is not None:
            reads.unsteady = True  # not remembered: a later run reads it again
        return None


def _blocks(body: list[ir.Node]) -> Iterator[list[ir.Node]]:
    """Every statement list nested in ``body`` (itself first), functions and classes excluded."""
    yield body
    for node in body:
        for slot in ("body", "orelse", "finalbody"):
            inner = getattr(node, slot, None) if not isinstance(node, (ir.FunctionDef, ir.ClassDef)) else None
            if isinstance(inner, list):
                yield from _blocks(inner)
        for h in getattr(node, "handlers", None) or []:
            yield from _blocks(h.body)


def _imported(body: list[ir.Node], module: str, is_package: bool) -> dict[str, str]:
    """name -> the module it is imported from, for every ``from X import name`` in ``body``."""
    out: dict[str, str] = {}
    for block in _blocks(body):
        for node in block:
            if isinstance(node, ir.ImportFrom) and node.names != "*":
                source = absolute_module(module, is_package, node.module or "", node.level or 0)
                for name, asname in node.names:
                    out.setdefault(asname or name, source)
    return out


def _creator(tree: ir.Node, decorator: str, name: str) -> ir.Node | None:
    for node in tree.body:
        if not isinstance(node, ir.FunctionDef):
            continue
        for deco in node.decorators:
            if isinstance(deco, ir.Call) and call_name(deco) == decorator:
                first = next((v for k, v in deco.args if k == ""), None)
                if isinstance(first, ir.Const) and first.value == name:
                    return node
    return None


def _returns(block: list[ir.Node]) -> list[ir.Node]:
    return [s.value for s in block if isinstance(s, ir.Return) and isinstance(s.value, ir.Call)
            and isinstance(s.value.func, ir.Name)]


def _chosen_call(creator: ir.Node, layer: Any, registry_rel: str) -> tuple[ir.Node | None, str]:
    """The construction the creator makes on this deployment, guided by the attention stage's
    outcome; (None, why) when the code leaves more than one."""
    everywhere = [c for block in _blocks(creator.body) for c in _returns(block)]
    if isinstance(layer, LayerValue) and layer.status == STATUS_UNSUPPORTED and layer.site.startswith(registry_rel + ":"):
        line = int(layer.site.rsplit(":", 1)[1])
        for block in _blocks(creator.body):
            at = next((i for i, s in enumerate(block) if s.line == line), None)
            if at is not None:
                after = _returns(block[at + 1:])
                if after:
                    return after[0], ""
    if isinstance(layer, LayerValue) and layer.status == STATUS_RESOLVED and layer.value:
        named = [c for c in everywhere if re.search(rf"\b{re.escape(c.func.id)}\b", str(layer.value))]
        if len({c.func.id for c in named}) == 1:
            return named[0], ""
    if len({c.func.id for c in everywhere}) == 1:
        return everywhere[0], ""
    if not everywhere:
        return None, f"{creator.name} returns no class construction sglang-audit reads"
    return None, (f"{creator.name} builds one of {', '.join(sorted({c.func.id for c in everywhere}))} "
                  "and the attention stage's outcome does not say which")


# ---- the constructor's branches on its own parameters


def _call_values(init: ir.Node, call: ir.Node) -> dict[str, Any]:
    """The constructor's parameters SGLang's creator call fixes: a literal keyword, else a
    literal default."""
    keywords = {k: v for k, v in call.args if k not in ("", "*", "**")}
    known: dict[str, Any] = {}
    for param in init.params:
        given = keywords.get(param.name)
        value = given if given is not None else param.default
        if isinstance(value, ir.Const) and param.star not in ("*", "**"):
            known[param.name] = value.value
    return known


def _library_eval(root: Path, cache: SourceCache) -> LibraryEval:
    # the device is never read (``_constructor_frame``); LibraryEval wants one to build its world
    return LibraryEval(root / "sglang", cache, parse_device("sm90"), Environment())


def _constructor_frame(lib: LibraryEval, init: ir.Node, known: dict[str, Any], rel: str) -> Frame:
    """A frame of the constructor holding ``known`` (parameter -> the plain value SGLang's call
    fixes); every other parameter unknown. Its module has no globals, so a statement sees only
    those values, ``self``'s attributes set before it and builtins: nothing the device or the rest
    of the release decides (the reach is the same on every device, as its memo key says), and a
    name it cannot bind leaves the test undecided."""
    module = ModuleObj(rel.removesuffix(".py").replace("/", "."), rel, False)
    scope = Scope(local_names=function_locals(init.body))
    for param in init.params:
        scope.vars[param.name] = known[param.name] if param.name in known \
            else Unknown(f"argument {param.name} of {rel}:{init.line} (not plain data in SGLang's call)")
    if init.params:  # the first parameter is the instance: its attributes are the ones set so far
        scope.vars[init.params[0].name] = Instance(Class("self", (lib.interp.natives.object_class,), {}, module))
    return Frame(module=module, scope=scope, depth=1)


def _branch(frame: Frame) -> Frame:
    """A copy of ``frame`` for one side of an undecided ``if``: its locals and the instance's
    attributes, so what one side assigns is not seen by the other."""
    assert frame.scope is not None
    scope = Scope(local_names=frame.scope.local_names)
    for name, value in frame.scope.vars.items():
        if isinstance(value, Instance):
            copy = Instance(value.cls)
            copy.attrs = dict(value.attrs)
            value = copy
        scope.vars[name] = value
    return Frame(module=frame.module, scope=scope, depth=frame.depth)


def _kernel_imports(body: list[ir.Node], lib: LibraryEval, frame: Frame, rel: str, libraries: tuple[str, ...],
                    condition: str, out: list[KernelImport]) -> None:
    """The kernel-library imports of a constructor's body: its assignments and ``if`` tests run by
    the interpreter in ``frame`` (``libeval``: a test that branches on anything unknown is
    undecided), both sides of an undecided ``if`` read under its condition."""
    for stmt in body:
        if isinstance(stmt, ir.Assign | ir.AnnAssign):
            if lib.run_prefix(stmt, frame) is not None:
                _forget_attributes(stmt, frame, rel)
        elif isinstance(stmt, ir.ImportFrom) and stmt.names != "*" and (stmt.level or 0) == 0 \
                and (stmt.module or "").split(".")[0] in libraries:
            for name, _ in stmt.names:
                out.append(KernelImport(stmt.module or "", name, f"{rel}:{stmt.line}", condition))
        elif isinstance(stmt, ir.If):
            taken = lib.test(stmt.test, frame).holds
            if taken is None:
                text = flat_text(stmt.text)
                _kernel_imports(stmt.body, lib, _branch(frame), rel, libraries,
                                condition or f"if {text} ({rel}:{stmt.line})", out)
                _kernel_imports(stmt.orelse, lib, _branch(frame), rel, libraries,
                                condition or f"not ({text}) ({rel}:{stmt.line})", out)
                continue
            _kernel_imports(stmt.body if taken else stmt.orelse, lib, frame, rel, libraries, condition, out)
        elif isinstance(stmt, ir.Try):
            _kernel_imports(stmt.body, lib, frame, rel, libraries, condition, out)


def _forget_attributes(stmt: ir.Node, frame: Frame, rel: str) -> None:
    """An assignment that did not run leaves the instance attributes it targets unknown."""
    targets = stmt.targets if isinstance(stmt, ir.Assign) else [stmt.target]
    for target in targets:
        if isinstance(target, ir.Attribute) and isinstance(target.value, ir.Name) and frame.scope is not None:
            obj = frame.scope.vars.get(target.value.id)
            if isinstance(obj, Instance):
                obj.attrs[target.attr] = Unknown(f"{rel}:{stmt.line} not evaluated from the creator's literals")


def reach(root: Path, cache: SourceCache, facts: Any, backend: str, layer: Any, reads: Reads | None = None,
          calls: tuple[tuple[str, str, str, str], ...] = (),
          call_args: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = ()) -> Reach:
    """The kernel functions ``backend``'s constructor imports (``root``: the dir holding ``sglang/``),
    then the ones the built backend called serving a batch (``calls``: the attention stage's
    ``LayerValue.kernel_calls``, (module, name, call site, condition), with the arguments SGLang
    passed in ``call_args``, ``LayerValue.kernel_call_args``); ``reads`` notes every SGLang path
    looked at (``kernelmemo``). A call with known arguments is read even where the constructor
    imports the same function (the import is read as a call with unknown arguments)."""
    found = _reach(root, cache, facts, backend, layer, reads)
    passed = {(path, site): json.dumps([list(g) for g in given]) for path, site, given in call_args}
    served = tuple(KernelImport(m, n, site, cond, served=True, given=passed.get((f"{m}.{n}", site), ""))
                   for m, n, site, cond in calls if m.split(".")[0] in facts.libraries)
    if not served:
        return found
    known = {(i.module, i.name) for i in found.imports}
    extra = tuple(dict.fromkeys(i for i in served if (i.module, i.name) not in known or i.given))
    return Reach(found.backend, found.cls, found.imports + extra, found.reason)


def _reach(root: Path, cache: SourceCache, facts: Any, backend: str, layer: Any, reads: Reads | None = None) -> Reach:
    loaded = _load(cache, root, facts.registry_module, reads)
    if loaded is None:
        return Reach(backend, "", (), f"no {facts.registry_module} in this release")
    registry_rel, registry = loaded
    creator = _creator(registry, facts.registry_decorator, backend)
    if creator is None:
        return Reach(backend, "", (), f"no @{facts.registry_decorator}({backend!r}) in {registry_rel}")
    call, why = _chosen_call(creator, layer, registry_rel)
    if call is None:
        return Reach(backend, "", (), why)
    cls = call.func.id
    source = {**_imported(registry.body, facts.registry_module, False),
              **_imported(creator.body, facts.registry_module, False)}.get(cls, facts.registry_module)
    loaded = _load(cache, root, source, reads)
    if loaded is None:
        return Reach(backend, cls, (), f"{cls}'s module {source} not found")
    rel, tree = loaded
    node = next((n for n in tree.body if isinstance(n, ir.ClassDef) and n.name == cls), None)
    init = next((f for f in node.body if isinstance(f, ir.FunctionDef) and f.name == "__init__"), None) if node else None
    if init is None:
        return Reach(backend, cls, (), f"{cls}.__init__ not found in {rel}")
    out: list[KernelImport] = []
    lib = _library_eval(root, cache)
    _kernel_imports(init.body, lib, _constructor_frame(lib, init, _call_values(init, call), rel), rel,
                    tuple(facts.libraries), "", out)
    out += built_objects(layer, tuple(facts.libraries))
    return Reach(backend, cls, tuple(dict.fromkeys(out)))


def reach_built(root: Path, cache: SourceCache, facts: Any, built: tuple[tuple[str, str, str, tuple[tuple[str, str], ...]], ...],
                reads: Reads | None = None) -> Reach:
    """The kernel functions the backend classes a construction built import (``built``:
    ``LayerValue.backends_built``, (module, class, SGLang's site, the arguments SGLang passed)):
    each class's ``__init__`` read as the registry creator's class is, its ``if``s on its own
    parameters decided from those arguments (the draft's ``FlashAttentionBackend(...,
    fa_impl_ver=3)`` built by DraftBackendFactory, which no registry creator checks), an
    argument that was not plain data, or a parameter neither passed nor given a literal
    default, left undecided (a conditional import)."""
    out: list[KernelImport] = []
    names: list[str] = []
    lib: LibraryEval | None = None
    for module, cls, _site, given in built:
        loaded = _load(cache, root, module, reads)
        node = next((n for n in loaded[1].body if isinstance(n, ir.ClassDef) and n.name == cls), None) if loaded else None
        init = next((f for f in node.body if isinstance(f, ir.FunctionDef) and f.name == "__init__"), None) if node else None
        if loaded is None or init is None:
            continue  # an __init__ inherited or not found: it imports nothing read here
        names.append(cls)
        lib = lib or _library_eval(root, cache)
        _kernel_imports(init.body, lib, _constructor_frame(lib, init, _given_env(init, given), loaded[0]), loaded[0],
                        tuple(facts.libraries), "", out)
    return Reach(", ".join(dict.fromkeys(names)), ", ".join(dict.fromkeys(names)), tuple(dict.fromkeys(out)))


def _given_env(init: ir.Node, given: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """The constructor's parameters bound to the arguments SGLang passed (positional in order
    after ``self``, then by keyword; a value kept only when plain data), else their literal
    defaults."""
    params = [p for p in init.params[1:] if p.star not in ("*", "**")]
    bound: dict[str, str] = {}
    positional = [v for k, v in given if k == ""]
    for param, value in zip([p for p in params if p.star == ""], positional, strict=False):
        bound[param.name] = value
    bound.update({k: v for k, v in given if k})
    env: dict[str, Any] = {}
    for param in params:
        if param.name in bound:
            value = plain_literal(bound[param.name])
            if value is not _NO_LITERAL:
                env[param.name] = value
        elif isinstance(param.default, ir.Const):
            env[param.name] = param.default.value
    return env


def built_objects(layer: Any, libraries: tuple[str, ...]) -> list[KernelImport]:
    """The kernel-library objects the attention stage saw the construction build, with the
    arguments SGLang's code passed (evaluated there: 0.5.5's ``if is_sm100_supported():
    self.fmha_backend = "cutlass"`` decided on the device)."""
    if not isinstance(layer, LayerValue):
        return []
    out = []
    for path, site, given in layer.library_calls:
        module, _, name = path.rpartition(".")
        if module.split(".")[0] in libraries:
            out.append(KernelImport(module, name, site, "", json.dumps([list(g) for g in given])))
    return out


# --------------------------------------------------------------------------- the library side


@dataclass(frozen=True)
class DeviceFacts:
    """The device model the guards run on (``libeval``) and the user's environment."""

    device: Device
    environment: Environment = Environment()

    @property
    def capability(self) -> tuple[int, int]:
        return self.device.cuda_capability()


def read_function(reader: FlashInferReader, imp: KernelImport, lib: LibraryEval, dev: DeviceFacts,
                  conditions: list[str], args_only: bool = False) -> list[KernelLayer]:
    """What ``imp``'s own code says of the device: its capability decorator and the top-level
    ``if <test>: raise`` guards it runs on every call, each test evaluated by the interpreter
    on the device (``libeval``; the assignments before it run first). For a call whose
    arguments SGLang's code gave (``imp.given``), a test the device alone leaves open, and a
    top-level ``assert``, are run again with those arguments bound (the rest unknown): one that
    fails the call is the kernel's refusal of it, one the call passes is no condition.
    ``args_only``: only that second reading (the device's is the import's, read already)."""
    found = reader.find(imp.module, imp.name)
    if found is None:
        return [KernelLayer("guard", imp.name, "", 0, UNKNOWN, f"{imp.module}.{imp.name} not found")]
    layers: list[KernelLayer] = []
    ccn = dev.capability[0] * 10 + dev.capability[1]
    for deco in found.func.decorators:
        if isinstance(deco, ir.Call) and call_name(deco) == "supported_compute_capability" and not args_only:
            layers.append(capability_layer(found, deco, ccn, imp.name))
    func = lib.function(found.module, found.func)
    frame = lib.frame(func) if func is not None else None
    given = _passed(imp, func.qualname if func is not None else imp.name)
    called = lib.call_frame(func, *given) if func is not None and given is not None else None
    returned_before = False  # a statement before the guard may return: the guard may be skipped
    for stmt in found.func.body:
        is_if = isinstance(stmt, ir.If) and any(isinstance(s, ir.Raise) for s in stmt.body)
        if not is_if and not (isinstance(stmt, ir.Assert) and called is not None):
            if not returned_before:
                for f in (frame, called):
                    if f is not None:
                        lib.run_prefix(stmt, f)
            returned_before = returned_before or _may_return(stmt)
            continue
        where = f"{found.rel}:{stmt.line}"
        got = lib.test(stmt.test, frame) if frame is not None and is_if else None
        if got is not None and got.holds is not None:
            if not args_only:
                layers.append(_device_guard(imp, found.rel, stmt, got, returned_before))
            returned_before = returned_before or _may_return(stmt)
            continue
        passed = lib.test(stmt.test, called) if called is not None else None
        if passed is None or passed.holds is None:
            if is_if:
                text = f"{imp.name} raises if {flat_text(stmt.text)} ({where})"
                if not (imp.given and text in conditions):
                    conditions.append(text)
            continue
        if passed.holds != is_if:
            continue  # SGLang's call passes it
        layers.append(_argument_guard(imp, found.rel, stmt, passed, given, returned_before))
        returned_before = returned_before or _may_return(stmt)
    return layers


def _device_guard(imp: KernelImport, rel: str, stmt: ir.Node, got: Any, returned_before: bool) -> KernelLayer:
    fires = got.holds
    via = f" ({'; '.join(got.used)})" if got.used else ""
    raise_text = next((flat_text(s.text) for s in stmt.body if isinstance(s, ir.Raise)), "raise")
    says = UNSUPPORTED if fires else SUPPORTED
    what = f"`if {flat_text(stmt.text)}` {'holds' if fires else 'does not hold'}{via}: {raise_text}"
    if returned_before:
        what += " [an earlier statement may return first: not every call reaches it]"
    return KernelLayer("guard", imp.name, rel, stmt.line, says, what, enforced=not returned_before)


def _argument_guard(imp: KernelImport, rel: str, stmt: ir.Node, got: Any, given: tuple[list[Any], dict[str, Any]] | None,
                    returned_before: bool) -> KernelLayer:
    """A guard SGLang's call fails: the kernel refuses the call at ``imp.site``."""
    if isinstance(stmt, ir.If):
        test = f"`if {flat_text(stmt.text)}` holds"
        raise_text = next((flat_text(s.text) for s in stmt.body if isinstance(s, ir.Raise)), "raise")
    else:
        test = f"`assert {flat_text(stmt.text)}` fails"
        raise_text = f"AssertionError({expr_text(stmt.msg)})" if stmt.msg is not None else "AssertionError"
    via = f" ({'; '.join(got.used)})" if got.used else ""
    what = f"{test} with the arguments SGLang passes at {imp.site}{_known_text(given, stmt)}{via}: {raise_text}"
    if returned_before:
        what += " [an earlier statement may return first: not every call reaches it]"
    return KernelLayer("guard", imp.name, rel, stmt.line, UNSUPPORTED, what, enforced=not returned_before)


def _passed(imp: KernelImport, what: str) -> tuple[list[Any], dict[str, Any]] | None:
    """The call's arguments as the library's interpreter sees them (``kernelargs.decode``)."""
    if not imp.given:
        return None
    try:
        pairs = json.loads(imp.given)
    except ValueError:
        return None
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            return None
        key, text = pair
        value = kernelargs.decode(text, f"argument {key or i} of {what} at {imp.site}")
        if key:
            kwargs[key] = value
        else:
            args.append(value)
    return args, kwargs


def _known_text(given: tuple[list[Any], dict[str, Any]] | None, stmt: ir.Node) -> str:
    """The known keyword arguments the guard's text names (all known ones when it names none)."""
    if given is None:
        return ""
    known = {k: v for k, v in given[1].items() if not isinstance(v, Unknown)}
    named = {k: v for k, v in known.items() if re.search(rf"\b{re.escape(k)}\b", flat_text(stmt.text))} or known
    shown = [f"{k}={_show(v)}" for k, v in list(named.items())[:6]]
    return f" ({', '.join(shown)})" if shown else ""


def _show(value: Any) -> str:
    if isinstance(value, AbstractTensor):
        return repr(value)
    path = getattr(value, "path", None)
    return path if isinstance(path, str) else repr(value)


def _built(reader: FlashInferReader, imp: KernelImport, lib: LibraryEval, conditions: list[str]) -> list[KernelLayer]:
    """What a library class built with SGLang's arguments runs on the device: its own dispatch
    between kernel families (``libdispatch``); a function called, or a class without a
    ``backend`` choice, asks nothing here."""
    from sglang_audit.resolve.libdispatch import wrapper_dispatch

    if reader.find(imp.module, imp.name, kinds=(ir.ClassDef,)) is None:
        return []
    given = dict(json.loads(imp.call))
    chosen = given.get("backend")
    if chosen is None:
        chosen = _default(reader, imp, "backend")
    if chosen is None:
        return []  # no backend keyword: no family choice to evaluate
    if chosen == "?":
        conditions.append(f"{imp.name}(backend=...) at {imp.site}: the family SGLang passes is not known")
        return []
    family = plain_literal(chosen)
    if not isinstance(family, str):
        return []
    got = wrapper_dispatch(reader, lib, imp.module, imp.name, family)
    conditions.extend(f"{c} (built at {imp.site})" for c in got.conditions)
    return list(got.layers)


def _family(imp: KernelImport) -> str:
    """The ``backend=`` a library object was built with ("" for an import or when not literal)."""
    if not imp.call:
        return ""
    value = plain_literal(dict(json.loads(imp.call)).get("backend", "?"))
    return value if isinstance(value, str) else ""


_NO_LITERAL = object()


def plain_literal(text: str) -> Any:
    """The value of a plain literal as ``repr`` wrote it (a quoted string without escapes, an
    int, a float, True/False/None); anything else is not read (``_NO_LITERAL``). The text is
    the tool's own repr of a value SGLang passed: read as data, never evaluated."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" and "\\" not in text and text[0] not in text[1:-1]:
        return text[1:-1]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return _NO_LITERAL


def _default(reader: FlashInferReader, imp: KernelImport, param: str) -> str | None:
    """repr of the literal default of ``param`` in the class's ``__init__``, or None."""
    found = reader.find(imp.module, imp.name, kinds=(ir.ClassDef,))
    init = next((f for f in found.func.body if isinstance(f, ir.FunctionDef) and f.name == "__init__"), None) if found else None
    p = next((p for p in init.params if p.name == param), None) if init is not None else None
    if p is None or not isinstance(p.default, ir.Const):
        return None
    return repr(p.default.value)


def _may_return(stmt: ir.Node) -> bool:
    """Whether ``stmt`` holds a ``return`` of the function (nested functions excluded)."""
    if isinstance(stmt, ir.Return):
        return True
    if isinstance(stmt, ir.FunctionDef | ir.ClassDef):
        return False
    for slot in ("body", "orelse", "finalbody"):
        inner = getattr(stmt, slot, None)
        if isinstance(inner, list) and any(_may_return(s) for s in inner):
            return True
    return any(_may_return(s) for h in getattr(stmt, "handlers", None) or [] for s in h.body)


def verdict(reach_: Reach, readers: dict[str, tuple[FlashInferReader | None, str | None, str]], dev: DeviceFacts,
            library_label: Callable[[str], str], reads: Reads | None = None) -> KernelVerdict | None:
    """The kernel verdict of one backend: ``readers`` maps a library package to (its reader or
    None, its version, why it was not read). None: the backend's constructor imports no
    kernel-library function (no kernel question asked here). ``reads``: where the library files
    the interpreter loaded are noted (``kernelmemo``)."""
    if not reach_.imports:
        return None
    evaluators: dict[str, LibraryEval] = {}
    try:
        return _verdict(reach_, readers, dev, library_label, evaluators)
    finally:
        if reads is not None:
            for lib in evaluators.values():
                lib.note_reads(reads)


def _verdict(reach_: Reach, readers: dict[str, tuple[FlashInferReader | None, str | None, str]], dev: DeviceFacts,
             library_label: Callable[[str], str], evaluators: dict[str, LibraryEval]) -> KernelVerdict | None:
    sm = f"SM{dev.capability[0]}{dev.capability[1]}"
    layers: list[KernelLayer] = []
    conditions: list[str] = []
    unread: list[str] = []
    decided: list[tuple[KernelImport, KernelLayer]] = []
    first = reach_.imports[0]
    imported = {(i.module, i.name) for i in reach_.imports if not i.served and not i.call}
    for imp in reach_.imports:
        reader, _version, why = readers.get(imp.package, (None, None, "not a library sglang-audit reads"))
        if reader is None:
            if not imp.call and not imp.served:  # an object built or a call served: no question of its own
                unread.append(f"{imp.module}.{imp.name}: {library_label(imp.package)} source not read ({why})")
            continue
        if imp.package not in evaluators:
            evaluators[imp.package] = LibraryEval(reader.package_dir, reader.cache, dev.device, dev.environment)
        if imp.call:
            got = _built(reader, imp, evaluators[imp.package], conditions)
            for layer in got:
                layers.append(layer)
                decided.append((imp, layer))
            continue
        # a call with its arguments of a function the constructor imports: the device's
        # reading is the import's
        args_only = bool(imp.served and imp.given) and (imp.module, imp.name) in imported
        got = read_function(reader, imp, evaluators[imp.package], dev, conditions, args_only)
        if imp.served and not any(x.line for x in got):
            continue  # no device check of its own read (or not found): a call, no kernel question
        for layer in got:
            if imp.condition:
                # an import under an undecided branch may not be the one called: it informs only
                layer = KernelLayer(layer.mechanism, layer.function, layer.file, layer.line, layer.says,
                                    f"{layer.detail} [reached only {imp.condition}]", enforced=False)
            layers.append(layer)
            decided.append((imp, layer))

    def make(status: str, imp: KernelImport, reason: str) -> KernelVerdict:
        version = readers.get(imp.package, (None, None, ""))[1]
        return KernelVerdict(status, library_label(imp.package), version, f"{imp.module}.{imp.name}", _family(imp), reason,
                             tuple(layers), tuple(conditions), imp.site)

    refusing = [(i, x) for i, x in decided if x.says == UNSUPPORTED and x.enforced]
    if refusing:
        imp, x = refusing[0]
        return make(UNSUPPORTED, imp, f"{imp.name} refuses {sm}: {x.detail} at {x.file}:{x.line}")
    # what the verdict is about: the constructor's imports, and the calls served whose library
    # code checks the device; objects built (none refused: what the families' compiled kernels
    # support is not in the source) and calls with no device check make no verdict alone
    asked = [i for i in reach_.imports if not i.call and not i.served] + [i for i, _ in decided if i.served]
    if not asked:
        return None
    first = asked[0]
    decided = [(i, x) for i, x in decided if not i.call or x.says == UNSUPPORTED]
    if unread:
        return make(UNKNOWN, first, "; ".join(unread))
    unsure = [(i, x) for i, x in decided if x.says != SUPPORTED or not x.enforced]
    if unsure:
        imp, x = unsure[0]
        return make(UNKNOWN, imp, f"{x.detail} ({x.file}:{x.line})")
    if not decided:
        return make(UNKNOWN, first, f"{', '.join(i.name for i in asked)}: no device check sglang-audit "
                                    "reads (the kernels' own arch support is in their compiled code)")
    imp, x = decided[0]
    return make(SUPPORTED, imp, f"{imp.name} accepts {sm}: {x.detail} at {x.file}:{x.line}")
