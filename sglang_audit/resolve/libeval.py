"""A kernel library's own code, run by the interpreter on the deployment's device.

The kernel levels (``attnkernels``, ``kernelread``) find a library function in the IR and ask
what its guards say of the device. The guards are Python — ``if not is_fa3_supported():
raise``, ``major, minor = get_compute_capability(device)`` then ``if major < 10: return
False`` — so they are evaluated by the same interpreter that runs SGLang, with the same world
(``world/native.py``: the device's capability, ``torch.version.cuda``, the user's environment
variables), over the library's tree instead of SGLang's. The library's own ``__init__`` is not
run (it imports the whole API and loads the compiled extension); each function's module is, so
its constants, helpers and imports are the library's own.

A guard is read as the function's first statements would run on a call whose arguments are not
known: the simple assignments before it run (a name they cannot bind is unknown), its test is
evaluated, and any branch on an unknown — an argument, a tensor, a value outside the library —
makes the test *opaque*: listed as a condition, never decided. Where the test is decided, the
library functions whose ``return`` it used are named, with their lines (the evidence).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_audit.evaluate.interpreter import (
    Frame,
    Interpreter,
    PyRaise,
    Unmodelled,
    function_locals,
)
from sglang_audit.evaluate.values import AnalysisBound, Function, ModuleObj, Scope, Unknown
from sglang_audit.frontend import ir
from sglang_audit.frontend.bindings import bound_names
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.device import Device, Environment
from sglang_audit.resolve.kernelmemo import Reads
from sglang_audit.resolve.stage_common import raise_message
from sglang_audit.world.native import NativeWorld


class _Opaque(Exception):
    """The test branched on something the device does not decide."""


@dataclass(frozen=True)
class GuardValue:
    """A guard's test on the device: ``holds`` True/False, or None (opaque, ``why``); ``used``:
    the library functions whose return decided it (``name at file:line``), in call order."""

    holds: bool | None
    used: tuple[str, ...] = ()
    why: str = ""


@dataclass(frozen=True)
class Stopped:
    """Why a statement before the guards did not run: ``raised`` when the library's own code
    raised on the device (``why`` then says ``raises <Exception>: <message>``)."""

    why: str
    raised: bool


class LibraryEval:
    """One library tree (``package_dir``: the directory of its top-level package) evaluated for
    one device; functions are bound in their modules as the interpreter loads them."""

    def __init__(self, package_dir: Path, cache: SourceCache, device: Device, environment: Environment) -> None:
        world = NativeWorld(device, environment, [], package_name=package_dir.name)
        world.source_root = package_dir.parent
        self.interp = Interpreter(package_dir.parent, cache, world, top_init=False)
        self.package = package_dir.name
        self.device = device
        self.cache = cache

    @property
    def capability(self) -> tuple[int, int]:
        return self.device.cuda_capability()

    def note_reads(self, reads: Reads) -> None:
        """Every file of the library the interpreter loaded, and every module of it looked for
        and not found, into ``reads`` (``kernelmemo``: a verdict is remembered by them)."""
        root = self.interp.root
        for name, mod in self.interp.modules.items():
            if name.split(".")[0] != self.package:
                continue
            if isinstance(mod, ModuleObj):
                if mod.unrun:
                    continue  # its body was not read (the library's own __init__)
                path = Path(str(mod.globals.get("__file__", "")))
                if path.is_file():
                    reads.note(path, True)
                    reads.parsed(path, self.cache.content_sha256(path))
            else:
                base = root.joinpath(*name.split("."))
                for cand in (base.with_suffix(".py"), base / "__init__.py"):
                    reads.note(cand, cand.is_file())

    def function(self, module: str, node: ir.Node) -> Function | None:
        """``node`` (a top-level FunctionDef of ``module``) as the interpreter binds it, without
        its decorators: the guards are the body's, whatever wraps it."""
        try:
            mod = self.interp.load_module(module)
        except (PyRaise, Unmodelled, AnalysisBound, RecursionError):
            return None
        if not isinstance(mod, ModuleObj) or mod.failed:
            return None
        return self.interp.make_function(node.name, node.params, node.body, Frame(module=mod), node.line, False)

    def frame(self, func: Function) -> Frame:
        """A frame of ``func`` whose arguments are unknown: the caller may pass any parameter,
        so a default is not the value either."""
        scope = Scope(parent=func.closure, local_names=function_locals(func.body))
        for p in func.params:
            scope.vars[p.name] = Unknown(f"argument {p.name} of {func.qualname} (the caller's)")
        return Frame(module=func.module, scope=scope, func=func, depth=1)

    def call_frame(self, func: Function, args: list[Any], kwargs: dict[str, Any]) -> Frame | None:
        """A frame of ``func`` called with ``args``/``kwargs`` (the whole call, as SGLang's code
        made it: a parameter it does not pass has its default), bound as Python binds them;
        None when they do not bind (the call is then read with unknown arguments)."""
        scope = Scope(parent=func.closure, local_names=function_locals(func.body))
        try:
            self.interp.bind_params(func, args, kwargs, scope)
        except (PyRaise, Unmodelled, AnalysisBound):
            return None
        return Frame(module=func.module, scope=scope, func=func, depth=1)

    def run_prefix(self, stmt: ir.Node, frame: Frame) -> Stopped | None:
        """Run one statement before the guards if it only binds names (an assignment); a name it
        cannot bind on the device alone is unknown. None when it ran (or is not an
        assignment), else what stopped it."""
        if not isinstance(stmt, ir.Assign | ir.AnnAssign):
            return None
        try:
            with self._opaque_branches():
                self.interp.exec_block([stmt], frame)
        except (_Opaque, PyRaise, Unmodelled, AnalysisBound, RecursionError) as exc:
            why = self._why(exc)
            for name in bound_names(stmt, as_targets=True):
                if frame.scope is not None:
                    frame.scope.vars[name] = Unknown(f"{frame.module.file}:{stmt.line} not evaluated on the device "
                                                     f"alone ({why})")
            return Stopped(why, isinstance(exc, PyRaise))
        return None

    def test(self, node: ir.Node, frame: Frame) -> GuardValue:
        """The truth of a guard's test in ``frame``."""
        try:
            with self._opaque_branches():
                value, reads = self.interp.evaluate_reads(node, frame)
                truth = self.interp.truth_value(value)
        except (_Opaque, PyRaise, Unmodelled, AnalysisBound, RecursionError) as exc:
            return GuardValue(None, why=self._why(exc))
        if isinstance(truth, Unknown):
            return GuardValue(None, why=truth.reason)
        return GuardValue(bool(truth), tuple(_returns(reads)))

    def _why(self, exc: BaseException) -> str:
        if isinstance(exc, PyRaise):
            name, message = raise_message(self.interp, exc)
            # an evaluator-made raise (an attribute missing, a bad operand) is placed only
            # approximately: the caller cites its own statement
            where = f" at {exc.file}:{exc.line}" if exc.explicit else ""
            return f"raises {name}: {message}{where}"
        return str(exc) or type(exc).__name__

    def _opaque_branches(self) -> Any:
        def refuse(value: Unknown, file: str, line: int, text: str) -> bool | None:
            if self.interp.loading:
                return None  # a module the test imports: its body's branches as any load takes them
            raise _Opaque(value.reason)

        return self.interp.filtered_decisions(refuse)


def _returns(reads: list[Any]) -> Iterator[str]:
    """The library functions whose return value the test read (nested first, as called)."""
    seen: set[str] = set()
    for ev in _walk(reads):
        if ev.kind == "return" and ev.target.endswith("()"):
            text = f"{ev.target[:-2].rsplit('.', 1)[-1]} at {ev.file}:{ev.line}"
            if text not in seen:
                seen.add(text)
                yield text


def _walk(reads: list[Any]) -> Iterator[Any]:
    for ev in reads:
        if ev is None:
            continue
        yield ev
        yield from _walk(list(ev.sources))


