"""The hardware part of a decision's guard, as the decision graph (``graph.py``) reads it: a
formula over the hardware predicates, and its truth on a device (``explain`` asks which guards
a device decides).

Shape: ``("and"|"or", [f...])`` ``("not", f)`` ``("call", predicate)`` ``("const", v)``
``("cmp", f, ops, [f...])`` ``("sub", f, f)`` ``("opaque", text)``.

The truth is the interpreter's (``formula_truth``): the formula is turned back into the Python
expression it was read from, each predicate a name bound to its value on the device, each part
the device does not decide (an opaque part, a predicate whose value is unknown) an unknown input,
and every assignment of those inputs is explored (``evaluate.explore``): the truth all paths
agree on, else undecided. The same part read twice is one input, so ``p or not p`` holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglang_audit.evaluate.explore import explore_paths
from sglang_audit.evaluate.interpreter import Frame, Interpreter, PyRaise, Unmodelled
from sglang_audit.evaluate.values import AnalysisBound, ModuleObj, Scope, Unknown
from sglang_audit.frontend import ir
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.device import Environment, parse_device
from sglang_audit.world.native import NativeWorld

Formula = tuple  # the shapes above


_MAX_PATHS = 256  # 8 independent undecided parts; a guard with more is left undecided
_interpreters: dict[str, Any] = {}  # one per process: it holds no state between formulas


def formula_truth(f: Formula, predicates: dict[str, Any]) -> bool | None:
    """The formula's truth on the device whose predicate values are ``predicates`` (a value
    ``"unknown: ..."`` is not known): True/False when every assignment of the parts the device
    does not decide gives it, else None."""
    inputs: dict[str, tuple[str, Any]] = {}  # what an input stands for -> (its name, its value)
    node = _expression(f, predicates, inputs)
    interp = _interpreter()
    scope = Scope()
    scope.vars.update(dict(inputs.values()))
    frame = Frame(module=_MODULE, scope=scope, depth=1)

    def run() -> bool | None:
        try:
            return interp.truth(interp.evaluate(node, frame), frame, 0, "formula")
        except (PyRaise, Unmodelled, AnalysisBound, RecursionError):
            return None  # e.g. an index out of range, a comparison of unorderable values

    runs, complete = explore_paths(interp, run, _MAX_PATHS)
    truths = {truth for truth, _path in runs}
    if not complete or len(truths) != 1:
        return None
    return truths.pop()


_MODULE = ModuleObj("<formula>", "<formula>", False)


def _interpreter() -> Interpreter:
    interp = _interpreters.get("")
    if interp is None:
        # the device is never read: a formula's names are bound to the predicates' values
        # before it runs, and it calls nothing
        world = NativeWorld(parse_device("sm90"), Environment(), [])
        interp = _interpreters[""] = Interpreter(Path("<formula>"), SourceCache(use_disk=False), world, top_init=False)
    return interp


def _expression(f: Formula, predicates: dict[str, Any], inputs: dict[str, tuple[str, Any]]) -> ir.Node:
    """``f`` as the expression the graph read, its predicates and opaque parts names in ``inputs``."""
    tag = f[0]
    if tag == "const":
        return ir.Const(0, f[1])
    if tag == "not":
        return ir.UnaryOp(0, "not", _expression(f[1], predicates, inputs))
    if tag in ("and", "or"):
        return ir.BoolOp(0, tag, [_expression(g, predicates, inputs) for g in f[1]])
    if tag == "sub":
        return ir.Subscript(0, _expression(f[1], predicates, inputs), _expression(f[2], predicates, inputs))
    if tag == "cmp":
        return ir.Compare(0, _expression(f[1], predicates, inputs), list(f[2]),
                          [_expression(g, predicates, inputs) for g in f[3]])
    if tag == "call":
        value = predicates.get(f[1], "unknown: not interpreted for this device")
        known = not (isinstance(value, str) and value.startswith("unknown"))
        return _input(inputs, f"call:{f[1]}", value if known else Unknown(f"{f[1]}(): {value}", f"call:{f[1]}"))
    text = f[1] if len(f) > 1 else ""
    return _input(inputs, f"opaque:{text}", Unknown(f"not decided by the device: {text}", f"opaque:{text}" if text else None))


def _input(inputs: dict[str, tuple[str, Any]], key: str, value: Any) -> ir.Node:
    if key == "opaque:":
        key = f"opaque#{len(inputs)}"  # a part with no text: never the same input as another
    if key not in inputs:
        inputs[key] = (f"_f{len(inputs)}", value)
    return ir.Name(0, inputs[key][0])


def formula_predicates(f: Formula) -> list[str]:
    """Predicate names a formula calls, in order of appearance."""
    out: list[str] = []
    stack = [f]
    while stack:
        g = stack.pop(0)
        tag = g[0]
        if tag == "call" and g[1] not in out:
            out.append(g[1])
        elif tag in ("and", "or"):
            stack.extend(g[1])
        elif tag == "not":
            stack.append(g[1])
        elif tag == "sub":
            stack.extend([g[1], g[2]])
        elif tag == "cmp":
            stack.extend([g[1], *g[3]])
    return out
