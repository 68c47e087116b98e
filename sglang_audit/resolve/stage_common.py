"""What the build stages (the MoE layers, ``layers.py``; the attention backend,
``attention.py``; the speculative worker, ``spec_worker.py``) share: which optional packages
their code imported and what that assumes, the message of the raise they stop at, where a
raise or an assert sits in the IR, the branch steps of a chain, the process state a worker
has, and the publication of the server args their code reads. The machinery of a layer
stage itself (a layer built, its branches explored and joined) is ``layerstage.py``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

from sglang_audit.evaluate.interpreter import Interpreter, PyRaise
from sglang_audit.evaluate.values import Class, Function, Instance, ModuleObj, Native, Unknown
from sglang_audit.factfiles import LayersFacts
from sglang_audit.frontend import ir
from sglang_audit.frontend.parse import ParseFailure
from sglang_audit.result import STATUS_UNSUPPORTED, ChainStep, LayerValue


class ImportWatch:
    """The optional packages a stage's code imports, with the state assumed: the listed ones
    always; any other only when a plain install lacks it (deep_ep, mooncake, ...), kept as an
    assumption when the outcome's raise names it (``names_package``)."""

    def __init__(self, interp: Interpreter, optional: Sequence[str]) -> None:
        self.interp = interp
        self.optional = set(optional)
        self.imported: dict[str, bool | None] = {}

    def __call__(self, name: str) -> None:
        """An import the stage's code makes (``Interpreter.watched_imports``)."""
        top = name.split(".")[0]
        if top not in self.imported:
            state = self.interp.natives.package_state(top)
            if top in self.optional or state is False:
                self.imported[top] = state

    def assumptions(self, value: LayerValue) -> tuple[str, ...]:
        return tuple(package_assumption(self.interp, top, st) for top, st in sorted(self.imported.items())
                     if top in self.optional or names_package(value, top))


def names_package(value: LayerValue, top: str) -> bool:
    """Whether a raise is about ``top`` (its message names it: "No module named 'deep_ep...'",
    "DeepEP is not installed"). An absent package outside the listed ones is an assumption
    only then: most modules import some probe (kt_kernel, ...) that decides nothing here, and
    each assumption costs a forked resolution."""
    def norm(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())

    return value.status == STATUS_UNSUPPORTED and norm(top) in norm(value.value or "")


def package_assumption(interp: Interpreter, top: str, state: bool | None) -> str:
    """The state of an optional package the layer code imported, and why it is assumed:
    "<package>: <state> (<why>)" (resolve/pipeline.py's package forks read the state)."""
    from sglang_audit.inputs.profiles import assumption as profile_assumption

    env = interp.natives.environment
    stated = profile_assumption(env, top, state)  # a fact of the environment profile, with its source
    if stated is not None:
        return stated
    if state and top in env.extra:
        return f"{top}: installed (--with {top})"
    if state:
        return f"{top}: installed (a plain install of this release has it; --without {top} evaluates its absence)"
    if state is False and top in env.missing:
        return f"{top}: absent (--without {top})"
    if state is False:
        return f"{top}: absent (a plain install of this release lacks it; --with {top} evaluates it installed)"
    return f"{top}: not modelled (assumed importable; --without {top} evaluates its absence)"


def raise_message(interp: Interpreter, raised: PyRaise) -> tuple[str, str]:
    """The exception class name and SGLang's message of a raise, f-string parts as text."""
    exc = raised.exc
    name = exc.cls.name if isinstance(exc, Instance) else "Exception"
    args: tuple[Any, ...] = exc.attrs.get("args", ()) if isinstance(exc, Instance) else ()
    with interp.message_mode():  # f-string parts as text
        message = interp.to_str(args[0]) if len(args) == 1 else ", ".join(interp.to_str(a) for a in args)
    return name, message


# where a raise no line of SGLang's made is said to come from (``PyRaise.where`` is empty)
TOOL_CALL = "the tool's own call"


def stopped(name: str, message: str, raised: PyRaise, why: str) -> str:
    """The reason of an unknown a raise left (no verdict): the line CPython's traceback would
    name, or, for a raise no line of SGLang's made (the stage's own call into it failed, e.g. a
    signature another release changed), that it has none: a stale line would be false evidence."""
    if raised.where:
        return f"evaluation stopped: {name}: {message} at {raised.where} ({why})"
    return f"evaluation stopped: {name}: {message} (raised by the tool's own call into SGLang's code, at no line of SGLang's)"


def process_value(expr: Any, server_args: Any) -> Any:
    """A value a worker knows from its server args (rules/layers.toml): an int or bool
    literal, a server-args field, ``a/b`` (integer division of fields) or ``a==N`` (a field,
    int or bool, compared with an int); unknown when a field is not known."""
    if isinstance(expr, (bool, int)):
        return expr
    text = str(expr)
    if text.startswith("when "):  # "when a==N: value": known only for such a worker
        cond, _, value = text[5:].partition(":")
        holds = process_value(cond.strip(), server_args)
        if holds is True:
            return process_value(_literal(value.strip()), server_args)
        return Unknown(f"{expr} (this worker: {cond.strip()} is {holds if isinstance(holds, bool) else 'not known'})",
                       f"proc:{expr}")
    left, eq, right = text.partition("==")
    parts = [server_args.attrs.get(p) if isinstance(server_args, Instance) else None for p in left.split("/")]
    if eq and len(parts) == 1 and isinstance(parts[0], bool):
        return int(parts[0]) == int(right)  # a flag: "enable_dp_attention==0"
    if not all(isinstance(p, int) and not isinstance(p, bool) for p in parts) or any(p == 0 for p in parts[1:]):
        return Unknown(f"{expr} (server args not known)", f"proc:{expr}")
    ints = cast("list[int]", parts)  # each a known int: checked above
    quotient = ints[0]
    for p in ints[1:]:
        quotient //= p
    return quotient == int(right) if eq else quotient


def process_object(name: str, attrs: Mapping[str, Any], server_args: Any) -> Instance:
    """A process-state object (rules/layers.toml ``process_objects``): the listed attributes
    as a worker with these server args has them, any other unknown."""
    def missing(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return Unknown(f"{name}().{args[-1]}: process state (parallel groups) is not modelled", f"proc:{name}.{args[-1]}")

    obj = Instance(Class(f"{name}()", (), {"__getattr__": Native("process state", missing)}, None, 0, external_bases=()))
    for key, value in attrs.items():
        obj.attrs[key] = process_object(f"{name}().{key}", value, server_args) if isinstance(value, dict) \
            else process_value(value, server_args)
    return obj


def _literal(text: str) -> Any:
    return {"true": True, "false": False}.get(text, int(text) if text.isdigit() else text)


# ---- the IR facts and the publication every build stage asks for ---------------------------
_ASSERT_SITES: dict[tuple[int, str, type], frozenset[int]] = {}


def is_assert(interp: Interpreter, file: str, line: int, kind: type = ir.Assert) -> bool:
    """Whether an ``assert`` (or a statement of ``kind``: ``ir.Raise``) starts at ``file:line``."""
    key = (id(interp.cache), file, kind)
    if key not in _ASSERT_SITES:
        try:
            tree = interp.cache.load(interp.root / file)
            _ASSERT_SITES[key] = frozenset(n.line for n in ir.walk(tree.body) if isinstance(n, kind))
        except (ParseFailure, OSError):
            _ASSERT_SITES[key] = frozenset()
    return line in _ASSERT_SITES[key]


def at_module_level(interp: Interpreter, file: str, line: int) -> bool:
    path = interp.root / file
    try:
        tree = interp.cache.load(path)
    except (ParseFailure, OSError):
        return False
    return not any(isinstance(n, ir.FunctionDef) and n.line <= line <= n.end_line for n in module_nodes(interp, path, tree))


def guard_steps(guards: Any) -> tuple[ChainStep, ...]:
    """The branch conditions around a dispatch, innermost last (the ones in the layer's code)."""
    return tuple(ChainStep(g.file, g.line, g.describe(), g.truth, "", "layers", "branch")
                 for g in guards if g.file.startswith("sglang/srt/layers/"))


def module_nodes(interp: Interpreter, path: Any, tree: ir.Node) -> list[ir.Node]:
    """Every node of a loaded module, in ``ir.walk`` order, listed once per tree (walking
    whole modules again per raise or per call site was ~5% of a 0.5.23 resolution); a
    changed file loads as a new tree and is walked again."""
    known = interp.cache.prepared.get(("module_nodes", path))
    if known is None or known[0] is not tree:
        known = (tree, list(ir.walk(tree.body)))
        interp.cache.prepared[("module_nodes", path)] = known
    return known[1]


def publish_server_args(interp: Interpreter, spec: LayersFacts, server_args: Any) -> None:
    """What a worker has done before it builds its layers: the server args published (releases
    before the publish() bag: the global setter) and its process groups built
    (``worker_groups``)."""
    worker_groups(interp, spec)
    gsa = spec.moe.global_server_args
    if server_args is None or interp.find_module_file(gsa.module) is None:
        return
    mod = interp.load_module(gsa.module)
    if isinstance(mod, ModuleObj) and gsa.setter in mod.globals:
        setter = interp.getattr(mod, gsa.setter)
        if isinstance(setter, Function) and "publish" not in [n for n in names_in(setter.body)]:
            interp.call(setter, [server_args], {})


def worker_groups(interp: Interpreter, spec: LayersFacts) -> None:
    """The names a worker writes into the release's parallel context when it builds its
    process groups (0.5.23: ``initialize_model_parallel`` ends with
    ``get_parallel().override_permanently(tp_group=_TP, ...)``), written as unknown process
    state into the context's permanent values (rules/layers.toml ``[moe] worker_groups``).
    The names are the release's: its declarations without a function (``Derived(doc=...)``:
    set at runtime) that the context cannot answer after the publication (a rank the rank
    bundle wrote answers, and keeps its value). Without this a read such as
    ``use_symmetric_memory(get_parallel().tp_group, ...)`` raises "has not been written in
    this process", which no worker sees. A release without the context skips this."""
    facts = spec.moe.worker_groups
    if facts is None or interp.find_module_file(facts.module) is None:
        return
    mod = interp.load_module(facts.module)
    if not isinstance(mod, ModuleObj) or not all(k in mod.globals for k in (facts.getter, facts.declarations)):
        return
    context = interp.call(interp.getattr(mod, facts.getter), [], {})
    declared = interp.call(interp.getattr(mod, facts.declarations), [], {})
    if not isinstance(context, Instance) or not isinstance(declared, dict):
        return
    unwritten: dict[str, Any] = {}
    for name, decl in declared.items():
        if not isinstance(name, str) or interp.getattr(decl, facts.computed_by) != "":
            continue  # a width computed from the configuration at publication
        try:
            interp.getattr(context, name)
        except PyRaise:  # nothing published or built it: the worker's groups
            unwritten[name] = Unknown(f"get_parallel().{name}: process state a worker builds (its process groups) is not modelled",
                                      f"proc:parallel.{name}")
    stamp = context.attrs.get(facts.stamp)
    if unwritten and isinstance(stamp, dict):
        # into the permanent values directly, as override_permanently stores them: its topology
        # check reads each group's world_size, unknown here, and would split the path on
        # values that hold for any worker's groups
        stamp.update(unwritten)


def self_names(target: Any) -> list[str]:
    """The ``self.x`` names an assignment target writes (tuples and lists unpacked)."""
    if isinstance(target, ir.Attribute) and isinstance(target.value, ir.Name) and target.value.id == "self":
        return [str(target.attr)]
    if isinstance(target, (ir.TupleExpr, ir.ListExpr)):
        return [n for t in target.elts for n in self_names(t)]
    return []


def self_assignments(cls: Any) -> Iterator[tuple[Function, ir.Node, list[str]]]:
    """Every assignment statement of the methods of ``cls``'s MRO that writes ``self.x``
    names: (the method, the statement, the names it writes)."""
    for klass in cls.mro():
        for func in klass.ns.values():
            if not isinstance(func, Function) or not isinstance(func.body, list):
                continue
            for n in ir.walk(func.body):
                targets = n.targets if isinstance(n, ir.Assign) else [n.target] if isinstance(n, (ir.AnnAssign, ir.AugAssign)) else []
                names = [name for t in targets for name in self_names(t)]
                if names:
                    yield func, n, names


def names_in(body: Any) -> list[str]:
    return [n.id for n in ir.walk(body) if isinstance(n, ir.Name)]
