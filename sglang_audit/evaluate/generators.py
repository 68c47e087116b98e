"""``with`` statements and ``@contextlib.contextmanager`` generators: a generator context
runs its body to the ``yield`` on entry and from there on exit, in the same frame."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang_audit.evaluate.calls import function_locals
from sglang_audit.evaluate.core import (
    BreakSignal,
    ContinueSignal,
    Frame,
    InterpreterCore,
    PyRaise,
    ReturnSignal,
    Unmodelled,
)
from sglang_audit.evaluate.values import (
    AnalysisBound,
    External,
    Function,
    Guard,
    Instance,
    Scope,
    Unknown,
)
from sglang_audit.frontend import ir


def _yield_of(stmt: ir.Node) -> ir.Node | None:
    """The Yield of ``yield x`` / ``v = yield x`` as a statement of its own, else None."""
    value: ir.Node | None = getattr(stmt, "value", None)
    if stmt.kind in ("ExprStmt", "Assign") and value is not None and getattr(value, "kind", "") == "Yield":
        return value
    return None


def _holds_yield(stmt: ir.Node | list[Any]) -> bool:
    """Whether a yield of this generator sits in ``stmt`` (nested functions, lambdas and
    classes hold their own, not this generator's)."""
    return any(node.kind == "Yield" for node in ir.walk(stmt, into_scopes=False))


class _GenLevel:
    """One block on the way from a generator's body to its yield: the statement holding the
    block (None for the body itself), the block, the index in it of the statement the way
    goes on through (or of the yield), a ``with``'s generator contexts entered (innermost
    last) and an ``if``'s guard."""

    __slots__ = ("node", "block", "pos", "held", "guard")

    def __init__(self, node: ir.Node | None, block: list[ir.Node]) -> None:
        self.node, self.block, self.pos = node, block, -1
        self.held: list[GeneratorContext] = []
        self.guard: Guard | None = None


class GeneratorContext:
    """A call of a ``@contextlib.contextmanager`` generator function, entered by ``with``:
    its body runs to the ``yield`` on entry (the value yielded is what ``as`` binds) and
    from there on exit, in the same frame. The yield may sit at any depth of ``if``/``try``/
    ``with`` blocks (0.5.23's ``patch_pipeline_parallel_group``: a ``with`` in a ``try``);
    the way to it (``levels``, outermost first) is kept between the two phases, and on exit
    the rest of each block runs innermost first, each container closing as Python closes it
    (a ``try``'s handlers, ``else`` and ``finally``, a ``with``'s context managers exited).
    A yield in a loop, a handler or a ``finally`` is unmodelled."""

    __slots__ = ("func", "args", "kwargs", "frame", "levels")

    def __init__(self, func: Function, args: list[Any], kwargs: dict[str, Any]) -> None:
        self.func, self.args, self.kwargs = func, args, kwargs
        self.frame: Frame | None = None
        self.levels: list[_GenLevel] = []  # the way from the body to the yield, outermost first


class Generators(InterpreterCore):
    """A ``with``'s items entered and exited, generator contexts run in two phases."""

    def with_items(self, node: ir.Node, first: int, frame: Frame) -> None:
        """The items of a ``with`` from ``first`` on, then its body. A generator context
        (``GeneratorContext``) is entered and exited around the rest; other context managers
        are entered only when bound (``as``), as before."""
        for i in range(first, len(node.items)):
            expr, target = node.items[i]
            ctx = self.evaluate(expr, frame)
            if isinstance(ctx, GeneratorContext):
                entered = self.enter_generator(ctx)
                if target is not None:
                    self.assign(target, entered, frame, node.line, "with", [])
                try:
                    self.with_items(node, i + 1, frame)
                except PyRaise as raised:
                    if not self.exit_generator(ctx, raised):
                        raise
                    return  # suppressed by the generator's handler
                except (ReturnSignal, BreakSignal, ContinueSignal):
                    self.exit_generator(ctx, None)
                    raise
                self.exit_generator(ctx, None)
                return
            if target is not None:
                entered = ctx
                if isinstance(ctx, Instance):
                    found, enter = ctx.cls.lookup("__enter__")
                    if found:
                        entered = self.call(self.bind(enter, ctx, ctx.cls), [], {})
                elif isinstance(ctx, External):
                    entered = Unknown(f"value of `with {ctx.path}`", None)
                self.assign(target, entered, frame, node.line, "with", [])
        self.exec_block(node.body, frame)

    def enter_generator(self, ctx: GeneratorContext) -> Any:
        """Run a generator context's body up to its yield; the value yielded."""
        func = ctx.func
        scope = Scope(parent=func.closure, local_names=function_locals(func.body))
        frame = ctx.frame = Frame(module=func.module, scope=scope, func=func, depth=self.depth + 1)
        self.bind_params(func, ctx.args, ctx.kwargs, scope)
        ctx.levels = [_GenLevel(None, func.body)]

        def run() -> Any:
            guards = len(self.guards)
            try:
                found = self.run_to_yield(ctx, 0, frame)
            except ReturnSignal:
                found = None
            finally:
                # an if's guard on the way is the with-body's no more; exit_generator puts it back
                del self.guards[guards:]
                self.guard_tuple = None
            if found is None:
                raise Unmodelled(f"a context manager generator that ended without yielding ({func.qualname} at {func.module.file}:{func.line})")
            return None if found.value is None else self.evaluate(found.value, frame)

        return self._in_generator(run)

    def run_to_yield(self, ctx: GeneratorContext, depth: int, frame: Frame) -> ir.Node | None:
        """Execute the block of ``ctx.levels[depth]`` from its start until the yield (its Yield
        node; ``ctx.levels`` then is the way to it) or the block's end (None). A statement
        holding the yield is entered as Python enters it: an ``if``'s test decides the side,
        a ``with`` holds its items, a ``try`` catches a raise before the yield with its
        handlers (and the block goes on after it) and runs its ``finally``."""
        level = ctx.levels[depth]
        for pos, stmt in enumerate(level.block):
            level.pos = pos
            point = _yield_of(stmt)
            if point is not None:
                return point
            if not _holds_yield(stmt):
                self.exec_block([stmt], frame)
                continue
            kind = stmt.kind
            if kind == "If":
                test, reads = self.evaluate_reads(stmt.test, frame)
                truth = self.truth(test, frame, stmt.line, stmt.text)
                inner = _GenLevel(stmt, stmt.body if truth else stmt.orelse)
                inner.guard = Guard(frame.module.file, stmt.line, stmt.text, truth, tuple(reads))
                self.guards.append(inner.guard)
                self.guard_tuple = None
                ctx.levels.append(inner)
                found = self.run_to_yield(ctx, depth + 1, frame)
                if found is not None:
                    return found
                ctx.levels.pop()
                self.guards.pop()
                self.guard_tuple = None
            elif kind == "With":
                inner = _GenLevel(stmt, stmt.body)
                ctx.levels.append(inner)
                try:
                    self.hold_items(inner, stmt, frame)
                    found = self.run_to_yield(ctx, depth + 1, frame)
                except PyRaise as raised:
                    del ctx.levels[depth + 1:]
                    if not self.release_items(inner.held, raised):
                        raise
                    continue  # suppressed by a context manager held: on after the with
                except (ReturnSignal, BreakSignal, ContinueSignal):
                    del ctx.levels[depth + 1:]
                    self.release_items(inner.held, None)
                    raise
                if found is not None:
                    return found
                ctx.levels.pop()
                self.release_items(inner.held, None)
            elif kind == "Try" and not any(_holds_yield(part) for part in (stmt.handlers, stmt.orelse, stmt.finalbody)):
                ctx.levels.append(_GenLevel(stmt, stmt.body))
                try:
                    try:
                        found = self.run_to_yield(ctx, depth + 1, frame)
                    except PyRaise as raised:
                        del ctx.levels[depth + 1:]
                        handler = self.match_handler(stmt.handlers, raised, frame) if stmt.handlers else None
                        if handler is None:
                            raise
                        self.run_handler(handler, raised, frame)
                        found = None
                    else:
                        if found is not None:
                            return found  # the finally runs on exit, not now
                        ctx.levels.pop()
                        self.exec_block(stmt.orelse, frame)
                except BaseException:
                    if stmt.finalbody:
                        self.exec_block(stmt.finalbody, frame)
                    raise
                if stmt.finalbody:
                    self.exec_block(stmt.finalbody, frame)
            else:
                raise Unmodelled(f"a context manager generator whose yield is in a {kind.lower()} ({ctx.func.qualname} at {frame.module.file}:{stmt.line})")
        return None

    def exit_generator(self, ctx: GeneratorContext, raised: PyRaise | None) -> bool:
        """Resume a generator context after its yield (``raised``: the with-body's raise,
        thrown in at the yield); True when the generator suppressed it. Each block on the way
        finishes innermost first, then its container closes (``try``: a handler for what is
        pending, ``else``, ``finally``; ``with``: its context managers exited, innermost
        first, with what is pending); a raise or ``return`` there replaces what was pending."""
        frame = ctx.frame
        assert frame is not None
        levels = ctx.levels

        def run() -> bool:
            pending: BaseException | None = raised
            point = levels[-1].block[levels[-1].pos]
            if raised is None and point.kind == "Assign":  # `v = yield x`: a context manager is sent None
                for target in point.targets:
                    self.assign(target, None, frame, point.line, point.text, [])
            guards = len(self.guards)
            self.guards.extend(level.guard for level in levels if level.guard is not None)
            self.guard_tuple = None
            try:
                for level in reversed(levels):
                    if pending is None:
                        try:
                            self.exec_block(level.block[level.pos + 1:], frame)
                        except (PyRaise, ReturnSignal) as stopped:
                            pending = stopped
                    node = level.node
                    if level.guard is not None:
                        self.guards.pop()
                        self.guard_tuple = None
                    if node is None or node.kind == "If":
                        continue
                    try:
                        if node.kind == "With":
                            if self.release_items(level.held, pending if isinstance(pending, PyRaise) else None):
                                pending = None
                            continue
                        if isinstance(pending, PyRaise) and node.handlers:
                            handler = self.match_handler(node.handlers, pending, frame)
                            if handler is not None:
                                caught, pending = pending, None
                                self.run_handler(handler, caught, frame)
                        elif pending is None:
                            self.exec_block(node.orelse, frame)
                    except (PyRaise, ReturnSignal) as stopped:
                        pending = stopped
                    if node.finalbody:
                        try:
                            self.exec_block(node.finalbody, frame)
                        except (PyRaise, ReturnSignal) as stopped:
                            pending = stopped
            finally:
                del self.guards[guards:]
                self.guard_tuple = None
            if isinstance(pending, PyRaise):
                raise pending  # the raise thrown in, or one of the generator's own: out of the with
            return raised is not None  # the generator finished: a raise thrown in was suppressed

        return bool(self._in_generator(run))

    def hold_items(self, level: _GenLevel, node: ir.Node, frame: Frame) -> None:
        """Enter a ``with``'s items that hold a generator context's yield (``with_items``'
        rules: a generator context is entered and kept in ``level.held``; another context
        manager is entered only when bound); a raise entering one exits those entered."""
        for expr, target in node.items:
            try:
                value = self.evaluate(expr, frame)
                entered: Any = value
                if isinstance(value, GeneratorContext):
                    entered = self.enter_generator(value)
                    level.held.append(value)
                elif target is not None and isinstance(value, Instance):
                    found, enter = value.cls.lookup("__enter__")
                    if found:
                        entered = self.call(self.bind(enter, value, value.cls), [], {})
                elif target is not None and isinstance(value, External):
                    entered = Unknown(f"value of `with {value.path}`", None)
            except PyRaise as raised:
                if not self.release_items(level.held, raised):
                    raise
                raise Unmodelled(f"a with item's raise suppressed by the one before it at {frame.module.file}:{node.line}") from None
            if target is not None:
                self.assign(target, entered, frame, node.line, "with", [])

    def release_items(self, held: list[GeneratorContext], raised: PyRaise | None) -> bool:
        """Exit the generator contexts ``hold_items`` entered, innermost first, ``raised``
        thrown into each until one suppresses it (a raise of an exit replacing it, as
        Python's nested ``with`` does); True when it was suppressed."""
        pending = raised
        while held:
            inner = held.pop()
            try:
                if self.exit_generator(inner, pending) and pending is not None:
                    pending = None
            except PyRaise as stopped:
                pending = stopped
        if pending is not None and pending is not raised:
            raise pending
        return raised is not None and pending is None

    def _in_generator(self, run: Callable[[], Any]) -> Any:
        """A phase of a generator context, as ``call_function`` runs a body: one call deeper,
        its reads its own."""
        self.depth += 1
        if self.depth > self.bounds.max_depth:
            self.depth -= 1
            raise AnalysisBound(f"analysis bound reached: call depth over {self.bounds.max_depth}")
        saved_reads = self.reads
        self.reads = []
        try:
            return run()
        finally:
            self.reads = saved_reads
            self.depth -= 1

