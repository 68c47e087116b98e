"""What an all-to-all dispatcher other than DeepEP's hands the MoE layer (issue 42): the
dispatcher the layer's own ``__init__`` built (``self.dispatcher = create_moe_dispatcher(...)``,
evaluated with the layer), the implementation its ``_get_impl()`` picks for a batch kind, and
the class that implementation's ``dispatch_b`` (or the dispatcher's ``dispatch``) returns, read
from its ``return`` statements. ``[moe.a2a_dispatch]`` in rules/layers.toml names the hooks;
nothing here knows a backend."""

from __future__ import annotations

from typing import Any

from sglang_audit.evaluate.interpreter import NOT_HOOKED, Interpreter, Unmodelled
from sglang_audit.evaluate.plaindata import SEQUENCE_ITEMS
from sglang_audit.evaluate.values import Class, Function, Instance, Unknown
from sglang_audit.factfiles import A2aBatch, A2aDispatch
from sglang_audit.frontend import ir
from sglang_audit.result import ChainStep


def output_instance(cls: Class, label: str, whose: str) -> Instance:
    """An instance of SGLang's dispatch output class ``cls`` (its ``format`` property is the
    release's), its annotated fields in order, each unknown: the dispatcher's tensors (``whose``)
    have values and dtypes its communication and quantisation decide, which are not evaluated."""
    inst = Instance(Class(cls.name, (cls,), {}, cls.module, cls.line))
    names = [name for name, _, _ in cls.annotations]  # a NamedTuple's fields, in order
    if not names:
        raise Unmodelled(f"{cls.name} declares no fields")
    fields = {f: Unknown(f"tensor {f} of the {label} ({whose}: values and dtype not known)", f"dispatch:{f}") for f in names}
    inst.attrs.update(fields)
    # a NamedTuple: SGLang unpacks it (0.5.16 flashinfer_cutedsl.py `hidden_states, ..., _ = dispatch_output`)
    inst.attrs[SEQUENCE_ITEMS] = list(fields.values())
    return inst


def built_dispatcher(layer: Instance, facts: A2aDispatch) -> Instance | None:
    """The dispatcher the layer's ``__init__`` built (a wrapper's first one: it stands for
    the others outside two-batch overlap), or None when the layer holds none."""
    found = layer.attrs.get(facts.dispatcher_attr)
    inner = found.attrs.get(facts.wrapper_attr) if isinstance(found, Instance) and facts.wrapper_attr else None
    if isinstance(inner, list) and inner and isinstance(inner[0], Instance):
        found = inner[0]
    return found if isinstance(found, Instance) else None


def batch_output(interp: Interpreter, facts: A2aDispatch, dispatcher: Instance, batch: A2aBatch,
                 chain: list[ChainStep]) -> Instance:
    """The dispatch output ``dispatcher`` hands the layer on ``batch``: the implementation its
    ``impl_getter`` picks with the batch getter answering ``batch.extend`` (SGLang's raise
    there is the batch's verdict, left to propagate), then the one class that
    implementation's output method returns. The step naming the class is added to ``chain``."""
    owner = dispatcher
    found, _ = dispatcher.cls.lookup(facts.impl_getter) if facts.impl_getter else (False, None)
    if found:
        module, _, name = facts.batch_getter.rpartition(".")

        def batch_kind(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
            if isinstance(func, Function) and func.name == name and func.module.name == module:
                return batch.extend
            return NOT_HOOKED

        with interp.hooked_calls(batch_kind):
            impl = interp.call(interp.getattr(dispatcher, facts.impl_getter), [], {})
        if not isinstance(impl, Instance):
            raise Unmodelled(f"{dispatcher.cls.name}.{facts.impl_getter}() on {batch.label} is {impl!r}, not a dispatcher implementation")
        owner = impl
    cls, func, line = returned_class(owner.cls, facts.output_methods)
    chain.append(ChainStep(func.module.file, line, "", cls.name, f"{owner.cls.name}.{func.name}(...) returns {cls.name}(...) on {batch.label}",
                           "layers", "dispatch"))
    return output_instance(cls, f"{cls.name} ({batch.label})", f"{dispatcher.cls.name}'s output")


def returned_class(owner: Class, methods: tuple[str, ...]) -> tuple[Class, Function, int]:
    """The one class the first of ``methods`` ``owner`` has constructs in its ``return``
    statements (``return Cls(...)``, or ``out = Cls(...); return out``), with the line of
    that return. Any other return, or more than one class, is Unmodelled, naming the lines."""
    func = next((f for m in methods for ok, f in [owner.lookup(m)] if ok and isinstance(f, Function)), None)
    if func is None:
        raise Unmodelled(f"{owner.name} has none of {', '.join(methods)}: the dispatch output it returns is not known")
    nodes = list(ir.walk(func.body, into_scopes=False))
    assigned: dict[str, list[Any]] = {}
    for node in nodes:
        if node.kind == "Assign" and len(node.targets) == 1 and node.targets[0].kind == "Name":
            assigned.setdefault(node.targets[0].id, []).append(node.value)
    found: dict[str, tuple[Class, int]] = {}
    other: list[int] = []
    for node in nodes:
        if node.kind != "Return":
            continue
        value = node.value
        if value is not None and value.kind == "Name" and len(assigned.get(value.id, [])) == 1:
            value = assigned[value.id][0]
        target = func.module.globals.get(value.func.id) if value is not None and value.kind == "Call" and value.func.kind == "Name" else None
        if isinstance(target, Class):
            found.setdefault(target.name, (target, value.line))  # the construction, as the chain cites it
        else:
            other.append(node.line)
    where = f"{owner.name}.{func.name} ({func.module.file}:{func.line})"
    if other or len(found) != 1:
        lines = ", ".join(str(n) for n in sorted(other))
        raise Unmodelled(f"which dispatch output {where} returns: "
                         + (f"a return that constructs no class by name at line {lines}" if other else
                            f"{len(found)} classes ({', '.join(sorted(found))})"))
    cls, line = next(iter(found.values()))
    return cls, func, line
