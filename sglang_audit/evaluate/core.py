"""The interpreter's core: the state one evaluation keeps (the path's decisions, the policy,
the declared extension points), decisions on unknowns and the events that are the evidence.

Each part of the interpreter is a class over ``InterpreterCore`` in a module of its own
(statements.py, generators.py, expressions.py, operators.py, calls.py, attributes.py,
modules.py); interpreter.py composes them into ``Interpreter`` and fills the dispatch tables
declared here. The methods one part calls on another are declared at the end of the class
(for the type checker only), so each part type-checks alone and a part's override is
checked against that declaration. A method that passes itself to the world is typed
``self: Self``: the world's methods take the composed class (``World[Interpreter]``). Also
here: the evaluator's exceptions and control-flow signals, and the frame."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, cast

from sglang_audit.evaluate.bounds import Bounds
from sglang_audit.evaluate.plaindata import contains_unknown, is_plain, stable_repr
from sglang_audit.evaluate.values import NEGATION as _NEGATION
from sglang_audit.evaluate.values import NOT_HANDLED as _NOT_NATIVE
from sglang_audit.evaluate.values import (
    Class,
    Decision,
    Event,
    External,
    Function,
    Guard,
    Instance,
    LazyImport,
    ModuleObj,
    Scope,
    Unknown,
)
from sglang_audit.evaluate.world_api import World
from sglang_audit.frontend import ir
from sglang_audit.frontend.parse import SourceCache


# control-flow signals: Python exceptions used only inside the evaluator (return, break,
# continue), raised by the statement handlers and caught by calls, loops and generators
class ReturnSignal(Exception):
    def __init__(self, value: Any, event: Event | None) -> None:
        self.value = value
        self.event = event


class BreakSignal(Exception):
    pass


class ContinueSignal(Exception):
    pass


class PyRaise(Exception):
    """An exception raised by the analysed code (an interpreted exception instance)."""

    def __init__(self, exc: Any, file: str, line: int, text: str = "", explicit: bool = True,
                 sited: bool = True) -> None:
        super().__init__(exc)
        self.exc = exc
        self.file = file
        self.line = line
        self.text = text
        # False: raised by the evaluator for a data operation (a KeyError, an AttributeError);
        # uncaught, that is more likely a gap in the model than SGLang's verdict
        self.explicit = explicit
        # False (make_raise): file/line are only the last call's site until the innermost
        # expression or statement it leaves names itself (``site``), CPython's traceback line
        self.sited = sited
        self.guards: tuple[Any, ...] = ()  # enclosing branch conditions (explicit raises)

    @property
    def where(self) -> str:
        """``file:line`` of the raise as CPython's traceback names it; "" when no expression or
        statement of the analysed code named one (a call the tool itself made failed: its
        file/line are only whatever call ran last)."""
        return f"{self.file}:{self.line}" if self.sited else ""

    def site(self, file: str, line: int) -> None:
        """The evaluator's raise failed at ``file:line``: kept unless a handler nearer the
        failing operation named its line first."""
        if not self.sited:
            self.file, self.line, self.sited = file, line, True


NOT_HOOKED = object()  # a call hook's answer: evaluate the call as usual


class Unmodelled(Exception):
    """The evaluator met a construct whose effects it cannot bound (e.g. a loop over an
    unknown value); the whole path becomes unknown with this reason."""


def stop_reason(exc: BaseException) -> str:
    """An Unmodelled/AnalysisBound's reason with the file:line where evaluation stopped
    (issue #23: every unknown names where), unless the reason already names one there."""
    reason = str(exc)
    where = getattr(exc, "where", None)
    if where and where not in reason:
        reason += f" (evaluation stopped at {where})"
    return reason


@dataclass(slots=True)
class Frame:
    module: ModuleObj
    scope: Scope | None = None  # None at module level
    class_ns: dict[str, Any] | None = None
    class_obj: Class | None = None
    func: Function | None = None
    depth: int = 0
    outer_scope: Scope | None = None  # a class body's enclosing function scope


@dataclass
class LogRecord:
    file: str
    line: int
    level: str
    message: str


# how a statement's value expression made its value, by IR kind (Event.form): a bare read
# only copies a value made elsewhere; anything else not listed computes it there
# (a call's value comes from the callee's return event, a source; a call with no such
# source, e.g. getattr() or dict.get(), is taken as a copy: "call")
VALUE_FORMS = {"Const": "literal", "Name": "copy", "Attribute": "copy", "Subscript": "copy", "Starred": "copy",
               "Call": "call"}


def _short_text(node: ir.Node | None) -> str:
    """A declared value's expression, when it is a name, a constant or an attribute chain
    (``view.moe_runner_backend``): the evidence names what the value was read from."""
    if node is None:
        return "..."
    if node.kind == "Name":
        return node.id
    if node.kind == "Const":
        return repr(node.value)
    if node.kind == "Attribute":
        return f"{_short_text(node.value)}.{node.attr}"
    return "..."


# dispatch tables: node class -> Interpreter method (Byterun style), filled in interpreter.py
# from the composed class; the parts' hot paths call through them
STMT_HANDLERS: dict[type, Any] = {}

EXPR_HANDLERS: dict[type, Any] = {}


def short_identity(text: str, limit: int = 120) -> str:
    """``text``, or its digest when longer than ``limit``: identities nest (a call of a call's
    result, an attribute of it), and a value rebuilt in a loop (``x = torch.cat([x, y])``)
    must not grow its key with every iteration."""
    return text if len(text) <= limit else "#" + hashlib.sha1(text.encode()).hexdigest()[:12]


def _arg_identity(value: Any) -> str | None:
    if isinstance(value, External):
        return value.identity
    if isinstance(value, Unknown):
        return f"?{value.key}" if value.key else None
    if is_plain(value) and not contains_unknown(value):
        return short_identity(stable_repr(value), 80)  # a table passed whole keys by its digest
    return None


def call_identity(interp: InterpreterCore, func: External, args: list[Any], kwargs: dict[str, Any]) -> str:
    """The identity of what a call of an outside function returns: equal arguments give the
    same input (one value per path), different ones their own. An argument with no stable
    name (an object made by the analysed code) names the call site."""
    parts = [_arg_identity(a) for a in args] + [
        None if (v := _arg_identity(value)) is None else f"{name}={v}" for name, value in kwargs.items()]
    if any(p is None for p in parts):
        file, line = getattr(interp, "_call_site", ("?", 0))
        return short_identity(f"{func.identity}(@{file}:{line})")
    return short_identity(f"{func.identity}({', '.join(p for p in parts if p is not None)})")


_UNSET = object()  # set_policy: a part not given keeps its value


@dataclass
class PathState:
    """What one path of an evaluation has decided and recorded: the truth of each unknown
    input (``decisions``), the decisions it met first (``new_decisions``, in order), the ones
    it took with the truth of each condition as written (``taken``) and the enclosing branch
    conditions (``guards``). ``Interpreter.enter_path`` installs a fresh one and returns the
    state it replaced; ``leave_path`` puts that back and returns the path that ran."""

    decisions: dict[str, bool]
    new_decisions: list[Decision]
    taken: list[tuple[Decision, bool]]
    guards: list[Guard]
    # a keyless unknown (the result of an operation on unknowns) is decided once per path: the
    # key of the first test of that object, kept with it (so its id is not reused)
    keyless: dict[int, tuple[Unknown, str]] = field(default_factory=dict)


class InterpreterCore:
    """The state of an evaluation and what every part of the interpreter shares."""

    # the site of the call being evaluated (e_Call; not restored when it returns): what a
    # native or hook cites while it runs, and where an exception the evaluator raises is
    # cited until the expression or statement that failed names itself (PyRaise.site)
    _call_site: tuple[str, int]

    def __init__(
        self,
        package_parent: Path,
        cache: SourceCache,
        natives: World[Self],
        decisions: dict[str, bool] | None = None,
        bounds: Bounds | None = None,
        top_init: bool = True,
    ) -> None:
        self.root = package_parent  # directory that holds the analysed package
        # whether the analysed package's own __init__ runs before its submodules, as in
        # CPython (SGLang's: yes). A kernel library's imports its whole API and loads its
        # compiled extension; its functions are read module by module, so it does not run
        self.top_init = top_init
        self.cache = cache
        self.natives = natives
        self.decisions = dict(decisions or {})
        self.keyless: dict[int, tuple[Unknown, str]] = {}
        self.new_decisions: list[Decision] = []
        self.taken: list[tuple[Decision, bool]] = []
        # `u == "s"` decisions by the input they test (eq_unknown): one value equals at most
        # one string, so once one of them holds on a path the others are false, not decided
        self.eq_keys: dict[str, list[str]] = {}
        self.eq_base: dict[str, str] = {}
        self.bounds = bounds or Bounds()
        self.modules: dict[str, ModuleObj | External] = {}
        self.parse_failures: dict[str, str] = {}
        self.guards: list[Guard] = []
        self.guard_tuple: tuple[Guard, ...] | None = None  # tuple(self.guards), shared by events
        self.reads: list[Event] | None = None
        self.seq = 0
        self.steps = 0
        self.deadline: Callable[[], bool] | None = None  # set by the resolver: the CPU-time budget
        self.depth = 0
        self.logs: list[LogRecord] = []
        self.notes: list[str] = []
        self.handling: list[PyRaise] = []  # exceptions being handled (for a bare `raise`)
        self.tracked_keys: frozenset[str] = frozenset()  # settings whose declarations are evidence
        self.keyed_events: dict[str, list[Event]] = {}
        # layers.py: intercepts kernel entry points and runner boundaries (None: no layer stage)
        self.call_hook: Callable[[Any, list[Any], dict[str, Any]], Any] | None = None
        # told of each decision this path takes first (the resolver's forks, pathforks.py);
        # answers True where the caller made this evaluation take the other outcome instead
        # (it has then set ``decisions[key]``)
        self.on_decision: Callable[[Self, Decision], bool] | None = None
        # extension points (declared: the stages add to them through the methods below, never
        # by replacing a method): conditions answered before a path decides them, observers of
        # each import, the stage's call interception (``call_hook``, chained by ``hooked_calls``)
        self.decision_filters: list[Callable[[Unknown, str, int, str], bool | None]] = []
        self.import_watchers: list[Callable[[str], None]] = []
        self._message_mode = False  # f-string parts rendered as SGLang's message text
        # module bodies being run (an import inside a call): a decision filter may leave
        # their top-level branches to the path, as any module load decides them
        self.loading = 0
        # `from m import y` bindings being resolved (modules.resolve_lazy), innermost last: one
        # met again is a name no module of the cycle defines, CPython's ImportError at the
        # import that found its module partially initialized (the innermost)
        self.resolving: list[LazyImport] = []
        world = natives.initial_state()
        self.environ: Any = world.environ
        self.hf_configs: dict[Any, Any] = world.hf_configs
        self.loggers: dict[str, Any] = world.loggers
        self.registry: dict[Any, Any] = world.registry
        self.builtins: dict[str, Any] = natives.builtins(self)
        self.exc_classes: dict[str, Class] = natives.exception_classes

    def call_site(self) -> tuple[str, int]:
        """Where the call being evaluated is written: the site a stage's hook or an overlay
        cites for what it answers there (read it before running interpreted code: that makes
        calls of its own)."""
        return getattr(self, "_call_site", ("?", 0))

    def enter_path(self, decisions: dict[str, bool]) -> PathState:
        """Start a path that evaluates with ``decisions`` (copied) and nothing met or taken
        yet; returns the state it replaces, for ``leave_path``."""
        saved = PathState(self.decisions, self.new_decisions, self.taken, self.guards, self.keyless)
        self.decisions, self.new_decisions, self.taken, self.guards, self.keyless = dict(decisions), [], [], [], {}
        self.guard_tuple = None
        return saved

    def leave_path(self, saved: PathState) -> PathState:
        """End the path ``enter_path`` started: ``saved`` is in force again; returns the path
        that ran (its decisions, what it met and took)."""
        ran = PathState(self.decisions, self.new_decisions, self.taken, self.guards, self.keyless)
        self.decisions, self.new_decisions, self.taken, self.guards, self.keyless = (
            saved.decisions, saved.new_decisions, saved.taken, saved.guards, saved.keyless)
        self.guard_tuple = None
        return ran

    @contextlib.contextmanager
    def hooked_calls(self, hook: Callable[[Any, list[Any], dict[str, Any]], Any]) -> Iterator[None]:
        """Every call is offered to ``hook`` first while the block runs; NOT_HOOKED leaves it
        to the hook installed before (then to the interpreter). Restored on exit."""
        outer = self.call_hook
        if outer is None:
            self.call_hook = hook
        else:
            def chained(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
                got = hook(func, args, kwargs)
                return outer(func, args, kwargs) if got is NOT_HOOKED else got
            self.call_hook = chained
        try:
            yield
        finally:
            self.call_hook = outer

    @contextlib.contextmanager
    def filtered_decisions(self, answer: Callable[[Unknown, str, int, str], bool | None]) -> Iterator[None]:
        """Branch conditions on unknowns are offered to ``answer`` (value, file, line, text)
        before the path decides them; None leaves the decision to the path."""
        self.decision_filters.append(answer)
        try:
            yield
        finally:
            self.decision_filters.remove(answer)

    @contextlib.contextmanager
    def watched_imports(self, watch: Callable[[str], None]) -> Iterator[None]:
        """``watch`` is told the name of every module loaded (or looked up) while the block runs."""
        self.import_watchers.append(watch)
        try:
            yield
        finally:
            self.import_watchers.remove(watch)

    @contextlib.contextmanager
    def unwatched_imports(self) -> Iterator[None]:
        """No import watcher is told of the imports the block makes (an inner question whose
        imports are not the stage's)."""
        saved = self.import_watchers
        self.import_watchers = []
        try:
            yield
        finally:
            self.import_watchers = saved

    @contextlib.contextmanager
    def message_mode(self) -> Iterator[None]:
        """f-string parts rendered as the text SGLang's message would show."""
        saved = self._message_mode
        self._message_mode = True
        try:
            yield
        finally:
            self._message_mode = saved

    def set_policy(self, *, deadline: Callable[[], bool] | None | object = _UNSET,
                   on_decision: Callable[[Self, Decision], bool] | None | object = _UNSET,
                   tracked_keys: frozenset[str] | object = _UNSET) -> None:
        """The evaluation's policy, each part optional: the CPU-time budget (``deadline``,
        asked every 1,024 steps), the observer of each decision a path meets first
        (``on_decision``: the resolver's forks) and the settings whose declarations are
        evidence (``tracked_keys``)."""
        if deadline is not _UNSET:
            self.deadline = deadline  # type: ignore[assignment]
        if on_decision is not _UNSET:
            self.on_decision = on_decision  # type: ignore[assignment]
        if tracked_keys is not _UNSET:
            self.tracked_keys = tracked_keys  # type: ignore[assignment]

    @contextlib.contextmanager
    def budget(self, deadline: Callable[[], bool] | None) -> Iterator[None]:
        """``deadline`` in force while the block runs (a stage's own CPU-time budget)."""
        saved = self.deadline
        self.deadline = deadline
        try:
            yield
        finally:
            self.deadline = saved

    def replay_taken(self, taken: Iterable[tuple[Decision, bool]]) -> None:
        """Record decisions a reused result took (a layer built once, copied for a later path)
        as taken on this path."""
        self.taken.extend(taken)

    def decide(self: Self, value: Unknown, file: str, line: int, text: str) -> bool:
        """The truth of ``text`` on this path. A negated unknown (``not u``, ``u != "s"``) is
        its input decided the other way; ``taken`` records the input's key with the truth of
        the condition as written (``Decision.negated`` says which way they relate)."""
        for answer in reversed(self.decision_filters):
            truth_given = answer(value, file, line, text)
            if truth_given is not None:
                return truth_given
        key = value.key
        if key is None:
            # the same object tested again on this path (``if a or b`` tests ``a`` as an
            # operand, then the ``or``'s value, which is ``a``, as the condition): one decision
            first = self.keyless.get(id(value))
            if first is not None and first[0] is value:
                key = first[1]
            else:
                key = f"{file}:{line}:{text}"
                self.keyless[id(value)] = (value, key)
        negate = key.endswith(_NEGATION)
        if negate:
            key = key[: -len(_NEGATION)]
        if key in self.decisions:
            truth = self.decisions[key]
        elif key in self.eq_base and any(self.decisions.get(k) is True for k in self.eq_keys[self.eq_base[key]] if k != key):
            truth = self.decisions[key] = False  # it equals another string on this path
        else:
            # first the condition as written holds (a path's defaults read as the source does)
            truth = not negate
            self.decisions[key] = truth
            decision = Decision(key, value.reason, file, line, text, negate)
            self.new_decisions.append(decision)
            if self.on_decision is not None and self.on_decision(self, decision):
                truth = self.decisions[key]
        shown = truth != negate
        if not any(d.key == key for d, _ in self.taken):
            self.taken.append((Decision(key, value.reason, file, line, text, negate), shown))
        return shown

    def eq_unknown(self, reason: str, base: str | None, other: Any) -> Unknown:
        """``u == other`` for an unknown input named ``base``: a decision of its own per
        compared value, correlated with the others (see ``decide``); keyless (decided where it
        is tested) when the input has no name or ``other`` is not plain data."""
        if base is None or not is_plain(other) or contains_unknown(other):
            return Unknown(reason)
        key = f"{base} == {other!r}"
        if isinstance(other, str) and key not in self.eq_base:
            self.eq_base[key] = base
            self.eq_keys.setdefault(base, []).append(key)
        return Unknown(reason, key)

    def truth(self, value: Any, frame: Frame, line: int, text: str) -> bool:
        kind = value.__class__
        if kind is bool:
            return value  # type: ignore[no-any-return]
        if kind is Unknown:
            return self.decide(value, frame.module.file, line, text)
        t = self.truth_value(value)
        if isinstance(t, Unknown):
            return self.decide(t, frame.module.file, line, text)
        return t

    def truth_value(self, value: Any) -> bool | Unknown:
        if isinstance(value, Unknown):
            return value
        if is_plain(value):
            return bool(value)
        if isinstance(value, External):
            known = self.natives.external_truth(value)
            if known is not _NOT_NATIVE:
                return cast(bool, known)  # the world's answer, when it has one: a bool
            return Unknown(f"value of {value.path} (outside the analysed source)", f"truth:{value.identity}")
        if isinstance(value, Instance):
            found, meth = value.cls.lookup("__bool__")
            if not found:
                found, meth = value.cls.lookup("__len__")
            if found and not isinstance(meth, Unknown):
                result = self.call(self.bind(meth, value, value.cls), [], {})
                return self.truth_value(result)
            return True
        native_truth = getattr(value, "native_truth", None)
        if native_truth is not None:  # a world's stand-in whose truth is data it does not hold
            return cast("bool | Unknown", native_truth())
        return True

    def event(
        self, kind: str, target: str, value: Any, file: str, line: int, text: str,
        sources: Iterable[Event] = (), form: str = "",
    ) -> Event:
        self.seq += 1
        guards = self.guard_tuple
        if guards is None:
            guards = self.guard_tuple = tuple(self.guards)
        return Event(self.seq, kind, target, value, file, line, text, guards, tuple(sources), form)

    def note_keyed(self, key: str, value: Any, frame: Frame, line: int, reads: Iterable[Event], form: str = "copy",
                   node: ir.Node | None = None, text: str | None = None) -> None:
        """A tracked setting named as a dict key or keyword (a declaration such as
        ``declare_resolution(sa, src, moe_runner_backend=...)`` or a pass's ``return {...}``):
        kept as evidence, since the value later travels through containers."""
        label = text if text is not None else f"{key}={_short_text(node)}"
        ev = self.event("declare", key, value, frame.module.file, line, label, reads, form)
        self.keyed_events.setdefault(key, []).append(ev)
        self.note_read(ev)

    def note_read(self, event: Event | None) -> None:
        if event is not None and self.reads is not None:
            self.reads.append(event)

    def evaluate_reads(self, node: ir.Node, frame: Frame) -> tuple[Any, list[Event]]:
        """``collect(lambda: self.evaluate(node, frame))`` without the closure: it runs once
        per assignment, branch and return (~120,000 times per 0.5.23 resolution)."""
        saved = self.reads
        self.reads = []
        try:
            value = EXPR_HANDLERS[node.__class__](self, node, frame)
            return value, self.reads
        finally:
            self.reads = saved

    def collect(self, fn: Callable[[], Any]) -> tuple[Any, list[Event]]:
        saved = self.reads
        self.reads = []
        try:
            value = fn()
            return value, self.reads
        finally:
            self.reads = saved

    if TYPE_CHECKING:
        # What the parts call on one another, declared for the type checker (each body is in
        # the module named; the composed Interpreter has them all, tests/test_evaluate.py checks)
        # statements.py
        def exec_block(self, stmts: list[ir.Node], frame: Frame) -> None: ...
        def make_function(
            self, name: str, params: list[ir.Node], body: Any, frame: Frame, line: int, is_lambda: bool
        ) -> Function: ...
        def assign(self, target: ir.Node, value: Any, frame: Frame, line: int, text: str, reads: Iterable[Event],
                   form: str = "copy") -> None: ...
        def match_handler(self, handlers: list[ir.Node], raised: PyRaise, frame: Frame) -> ir.Node | None: ...
        def run_handler(self, handler: ir.Node, raised: PyRaise, frame: Frame) -> None: ...
        # generators.py
        def with_items(self, node: ir.Node, first: int, frame: Frame) -> None: ...
        # expressions.py
        def evaluate(self, node: ir.Node, frame: Frame) -> Any: ...
        def to_str(self, value: Any) -> str: ...
        # operators.py
        def binop(self, op: str, left: Any, right: Any) -> Any: ...
        def check_size(self, op: str, left: Any, right: Any) -> None: ...
        def compare(self, op: str, left: Any, right: Any) -> Any: ...
        def plain_of(self, value: Any) -> Any: ...
        # calls.py
        def call(self, func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any: ...
        def charge(self, n: int) -> None: ...
        def charge_walk(self, *values: Any) -> None: ...
        def data_op(self, fn: Callable[[], Any]) -> Any: ...
        def bind_params(self, func: Function, args: list[Any], kwargs: dict[str, Any], scope: Scope) -> None: ...
        def instantiate_exception(self, cls: Class, args: list[Any]) -> Instance: ...
        def make_raise(self, exc_name: str, message: Any) -> PyRaise: ...
        def bind(self, attr: Any, obj: Any, cls: Class) -> Any: ...
        # attributes.py
        def getattr(self, obj: Any, name: str) -> Any: ...
        def setattr(self, obj: Any, name: str, value: Any, event: Event | None) -> None: ...
        def getitem(self, obj: Any, index: Any) -> Any: ...
        def setitem(self, obj: Any, key: Any, value: Any) -> None: ...
        def iterate(self, value: Any, frame: Frame | None, line: int) -> list[Any]: ...
        def mapping_items(self, value: Any) -> dict[str, Any]: ...
        # modules.py
        def load_module(self, name: str) -> ModuleObj | External: ...
        def module_attr(self, mod: ModuleObj, name: str) -> Any: ...
        def resolve_lazy(self, lazy: LazyImport) -> Any: ...
        def is_submodule(self, package: str, name: str) -> bool: ...
        def absolute_module(self, module: str, level: int, current: ModuleObj) -> str: ...
        def run_module_statements(self, stmts: list[ir.Node], frame: Frame) -> None: ...
