"""A partial evaluator for the Python subset of SGLang's configuration code.

Byterun-style: one ``s_<Kind>`` method per statement and one ``e_<Kind>`` method per
expression of the IR, dispatched by name.  Known values are concrete; anything that
depends on an input the tool does not model is ``Unknown(reason)``.  A branch on an
unknown asks ``decide()``: the resolver re-runs the evaluation once per outcome (bounded)
and joins the results, so nothing is ever guessed.

The evaluator knows no command line and no output format; it reads analysed source only
through the IR and never imports, executes or evaluates analysed text.

Why this module is long: it is one class, the interpreter, with one method per IR node kind;
as in Byterun's pyvm2, the whole dispatch reads in one place. What the interpreter may ask
of the world outside the tree is not here (world/native.py).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import operator
import os
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from sglang_audit.evaluate.bounds import Bounds  # noqa: F401 - the evaluator's bounds, imported from here too
from sglang_audit.evaluate.values import NEGATION as _NEGATION
from sglang_audit.evaluate.values import NOT_HANDLED as _NOT_NATIVE
from sglang_audit.evaluate.values import (
    AnalysisBound,
    BoundMethod,
    Cached,
    Class,
    ClassMethod,
    Decision,
    Event,
    External,
    FieldSpec,
    Function,
    Guard,
    HFConfig,
    Instance,
    KeysList,
    LazyImport,
    ModuleObj,
    Native,
    Partial,
    Property,
    Scope,
    StaticMethod,
    SuperProxy,
    TypeForm,
    Unknown,
    negated,
)
from sglang_audit.frontend import ir
from sglang_audit.frontend.bindings import absolute_module, bound_names
from sglang_audit.frontend.parse import ParseFailure, SourceCache


# ---- control-flow signals (Python exceptions used only inside the evaluator) -----------
class _Return(Exception):
    def __init__(self, value: Any, event: Event | None) -> None:
        self.value = value
        self.event = event


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class PyRaise(Exception):
    """An exception raised by the analysed code (an interpreted exception instance)."""

    def __init__(self, exc: Any, file: str, line: int, text: str = "", explicit: bool = True) -> None:
        super().__init__(exc)
        self.exc = exc
        self.file = file
        self.line = line
        self.text = text
        # False: raised by the evaluator for a data operation (a KeyError, an AttributeError);
        # uncaught, that is more likely a gap in the model than SGLang's verdict
        self.explicit = explicit
        self.guards: tuple[Any, ...] = ()  # enclosing branch conditions (explicit raises)


# outside bases that give their subclasses' instances no attributes of their own
_NO_ATTR_BASES = frozenset({"ABC", "Generic", "Protocol", "object"})
NOT_HOOKED = object()  # a call hook's answer: evaluate the call as usual


class Unmodelled(Exception):
    """The evaluator met a construct whose effects it cannot bound (e.g. a loop over an
    unknown value); the whole path becomes unknown with this reason."""


_SITE = re.compile(r"\.py:\d+")


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


_BIN = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "<<": operator.lshift,
    ">>": operator.rshift, "|": operator.or_, "&": operator.and_, "^": operator.xor,
}
_IBIN: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.iadd, "-": operator.isub, "*": operator.imul, "/": operator.itruediv,
    "//": operator.ifloordiv, "%": operator.imod, "**": operator.ipow, "<<": operator.ilshift,
    ">>": operator.irshift, "|": operator.ior, "&": operator.iand, "^": operator.ixor,
}
_CMP = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}
PLAIN_TYPES = (type(None), bool, int, float, complex, str, bytes, tuple, list, dict, set, frozenset, range)
# how a statement's value expression made its value, by IR kind (Event.form): a bare read
# only copies a value made elsewhere; anything else not listed computes it there
# (a call's value comes from the callee's return event, a source; a call with no such
# source, e.g. getattr() or dict.get(), is taken as a copy: "call")
_FORMS = {"Const": "literal", "Name": "copy", "Attribute": "copy", "Subscript": "copy", "Starred": "copy",
          "Call": "call"}
_SCALARS = (type(None), bool, int, float, complex)  # plain values that are neither containers nor iterable


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
# dict/set keys that may equal a str without being one (a missed `in` must look at them)
_EXACT_KEYS = frozenset({Unknown, Instance})
# dispatch tables: node class -> Interpreter method (Byterun style), filled below the class
_STMT: dict[type, Any] = {}
_EXPR: dict[type, Any] = {}
# data-method names safe to call on plain values (no callbacks into analysed code except key=)
_SAFE_METHODS = {
    str: {
        "lower", "upper", "startswith", "endswith", "split", "rsplit", "strip", "lstrip",
        "rstrip", "replace", "removeprefix", "removesuffix", "join", "format", "find",
        "rfind", "index", "count", "isdigit", "isnumeric", "isalpha", "isalnum", "partition",
        "rpartition", "splitlines", "casefold", "title", "capitalize", "zfill", "isupper",
        "islower", "isspace", "encode", "center", "ljust", "rjust", "swapcase", "isidentifier",
        "format_map", "expandtabs", "isdecimal",
    },
    list: {"append", "extend", "insert", "pop", "index", "count", "copy", "remove", "clear", "reverse", "sort"},
    dict: {"get", "items", "keys", "values", "update", "pop", "setdefault", "copy", "clear", "popitem", "fromkeys"},
    set: {
        "add", "update", "discard", "remove", "union", "intersection", "difference", "issubset",
        "issuperset", "copy", "pop", "clear", "symmetric_difference", "isdisjoint",
        "intersection_update", "difference_update",
    },
    frozenset: {"union", "intersection", "difference", "issubset", "issuperset", "copy", "isdisjoint", "symmetric_difference"},
    tuple: {"index", "count"},
    bytes: {"decode", "startswith", "endswith", "split", "strip"},
    int: {"bit_length", "to_bytes"},
    float: {"is_integer"},
}


def is_plain(value: Any) -> bool:
    return isinstance(value, PLAIN_TYPES)


_CONTAINERS = (list, tuple, dict, set, frozenset)


def _hash_seeded(value: Any) -> bool:
    """Its hash, so its place in a set, depends on the process's hash seed (PYTHONHASHSEED)."""
    if isinstance(value, (str, bytes)):
        return True
    return isinstance(value, (tuple, frozenset)) and any(_hash_seeded(v) for v in value)


def stable_repr(value: Any, active: set[int] | None = None) -> str:
    """``repr`` of plain data, except that a set of strings lists them sorted: CPython's order
    there changes with every process's hash seed, so a message SGLang builds from a set
    (``f"Only {SUPPORTED} backends ..."``) would read differently on each run of the tool.
    Sorted is one order CPython may print; the text is the same every run."""
    t = type(value)
    if t not in _CONTAINERS:
        return repr(value)
    active = active if active is not None else set()
    if id(value) in active:  # as CPython prints a container that holds itself
        return "[...]" if t is list else "{...}"
    active.add(id(value))
    try:
        if t is list:
            return "[" + ", ".join(stable_repr(v, active) for v in value) + "]"
        if t is tuple:
            inner = ", ".join(stable_repr(v, active) for v in value)
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        if t is dict:
            return "{" + ", ".join(f"{stable_repr(k, active)}: {stable_repr(v, active)}" for k, v in value.items()) + "}"
        if not value:
            return "set()" if t is set else "frozenset()"
        items = [stable_repr(v, active) for v in value]
        if any(_hash_seeded(v) for v in value):
            items.sort()
        body = "{" + ", ".join(items) + "}"
        return body if t is set else f"frozenset({body})"
    finally:
        active.discard(id(value))


def _in_unknown(item: Unknown, container: Any) -> Unknown:
    """``item in container`` for an unknown item: a decision of its own, not the item's truth."""
    if item.key is None or contains_unknown(container):
        return Unknown(item.reason)
    elems = container if isinstance(container, str) else sorted(map(repr, container)) if isinstance(container, (set, frozenset, dict)) else list(map(repr, container))
    return Unknown(item.reason, f"{item.key} in {elems!r}")


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


def call_identity(interp: Interpreter, func: External, args: list[Any], kwargs: dict[str, Any]) -> str:
    """The identity of what a call of an outside function returns: equal arguments give the
    same input (one value per path), different ones their own. An argument with no stable
    name (an object made by the analysed code) names the call site."""
    parts = [_arg_identity(a) for a in args] + [
        None if (v := _arg_identity(value)) is None else f"{name}={v}" for name, value in kwargs.items()]
    if any(p is None for p in parts):
        file, line = getattr(interp, "_call_site", ("?", 0))
        return short_identity(f"{func.identity}(@{file}:{line})")
    return short_identity(f"{func.identity}({', '.join(p for p in parts if p is not None)})")


def contains_unknown(value: Any, depth: int = 0) -> bool:
    if isinstance(value, Unknown):
        return True
    if depth > 3:
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(contains_unknown(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(contains_unknown(v, depth + 1) for v in value.values())
    return False


def first_unknown(values: Iterable[Any]) -> Unknown | None:
    for v in values:
        if isinstance(v, Unknown):
            return v
    return None


@dataclass
class WorldState:
    """The state a world's overlays keep for one interpreter, made by the world
    (``World.initial_state``) and held by the interpreter: ``os.environ`` as SGLang sees it
    (None: the world models no environment), the transformers config objects made so far
    (by model path and kind) and the loggers made."""

    environ: Any = None
    hf_configs: dict[Any, Any] = field(default_factory=dict)
    loggers: dict[str, Any] = field(default_factory=dict)


class World(Protocol):
    """What the interpreter may ask of the world outside the analysed tree — everything else
    it decides itself. Implemented by world/native.py (builtins, stdlib, the device model and
    SGLang's boundaries). A hook answering NOT_HANDLED leaves the operation to the
    interpreter's own semantics."""

    package_name: str  # the analysed top-level package; imports outside it are External
    object_class: Class
    exception_classes: dict[str, Class]
    # what the stages outside evaluate/ ask of it through an interpreter (interp.natives)
    environment: Any  # the deployment modelled (the target's own type); never read here

    def initial_state(self) -> WorldState: ...  # the state its overlays keep, per interpreter
    def builtins(self, interp: Interpreter) -> dict[str, Any]: ...
    def native_module(self, interp: Interpreter, name: str) -> ModuleObj | External | None: ...  # None: not the world's
    def boundary_for(self, interp: Interpreter, module: str, name: str) -> Any: ...
    # classes and instances
    def class_created(self, interp: Interpreter, cls: Class) -> None: ...
    def make_enum(self, interp: Interpreter, cls: Class) -> None: ...
    def enum_lookup(self, interp: Interpreter, cls: Class, args: list[Any]) -> Any: ...
    def enum_by_name(self, interp: Interpreter, cls: Class, name: Any) -> Any: ...
    def class_special(self, interp: Interpreter, cls: Class, name: str) -> Any: ...
    def instance_special(self, interp: Interpreter, obj: Instance, name: str) -> Any: ...
    def before_instance_write(self, interp: Interpreter, obj: Instance, name: str, value: Any, event: Any) -> None: ...
    # operations on values the world owns
    def to_str(self, value: Any) -> str | None: ...
    def binop(self, interp: Interpreter, op: str, left: Any, right: Any) -> Any: ...
    def compare(self, interp: Interpreter, op: str, left: Any, right: Any) -> Any: ...
    def external_truth(self, value: External) -> Any: ...
    def call_external(self, interp: Interpreter, func: External, args: list[Any], kwargs: dict[str, Any]) -> Any: ...
    def external_attr(self, interp: Interpreter, obj: External, name: str) -> Any: ...
    def external_item(self, interp: Interpreter, obj: Any, index: Any) -> Any: ...
    def hf_attr(self, interp: Interpreter, cfg: HFConfig, name: str) -> Any: ...
    def native_attr(self, interp: Interpreter, obj: Any, name: str) -> Any: ...
    def set_native_attr(self, interp: Interpreter, obj: Any, name: str, value: Any) -> None: ...
    def native_item(self, interp: Interpreter, obj: Any, index: Any) -> Any: ...
    def set_native_item(self, interp: Interpreter, obj: Any, key: Any, value: Any) -> None: ...
    def iterate_native(self, interp: Interpreter, value: Any) -> list[Any] | None: ...
    def is_environ(self, obj: Any) -> bool: ...
    def environ_contains(self, interp: Interpreter, item: Any) -> Any: ...
    # read by the stages (resolve/), not by the interpreter
    def package_state(self, top: str) -> bool | None: ...  # an optional package: installed, absent, None (not modelled)
    def external_value(self, interp: Interpreter, path: str) -> Any: ...  # the overlays' value of an outside path


_UNSET = object()  # set_policy: a part not given keeps its value
# an instance of a subclass of a builtin sequence keeps its items under this attribute name
# (not a Python identifier: SGLang's code cannot read or write it)
_ITEMS = "<items>"
_SEQUENCE_BASES = frozenset({"list", "tuple"})


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


class Interpreter:
    """Evaluates analysed modules for one path (one assignment of unknown decisions)."""

    def __init__(
        self,
        package_parent: Path,
        cache: SourceCache,
        natives: World,
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
        self.on_decision: Callable[[Interpreter, Decision], bool] | None = None
        # extension points (declared: the stages add to them through the methods below, never
        # by replacing a method): conditions answered before a path decides them, observers of
        # each import, the stage's call interception (``call_hook``, chained by ``hooked_calls``)
        self.decision_filters: list[Callable[[Unknown, str, int, str], bool | None]] = []
        self.import_watchers: list[Callable[[str], None]] = []
        self._message_mode = False  # f-string parts rendered as SGLang's message text
        # module bodies being run (an import inside a call): a decision filter may leave
        # their top-level branches to the path, as any module load decides them
        self.loading = 0
        world = natives.initial_state()
        self.environ: Any = world.environ
        self.hf_configs: dict[Any, Any] = world.hf_configs
        self.loggers: dict[str, Any] = world.loggers
        self.builtins: dict[str, Any] = natives.builtins(self)
        self.exc_classes: dict[str, Class] = natives.exception_classes

    # ---- paths: the state one assignment of decisions evaluates with --------------------
    def enter_path(self, decisions: dict[str, bool]) -> PathState:
        """Start a path that evaluates with ``decisions`` (copied) and nothing met or taken
        yet; returns the state it replaces, for ``leave_path``."""
        saved = PathState(self.decisions, self.new_decisions, self.taken, self.guards)
        self.decisions, self.new_decisions, self.taken, self.guards = dict(decisions), [], [], []
        self.guard_tuple = None
        return saved

    def leave_path(self, saved: PathState) -> PathState:
        """End the path ``enter_path`` started: ``saved`` is in force again; returns the path
        that ran (its decisions, what it met and took)."""
        ran = PathState(self.decisions, self.new_decisions, self.taken, self.guards)
        self.decisions, self.new_decisions, self.taken, self.guards = saved.decisions, saved.new_decisions, saved.taken, saved.guards
        self.guard_tuple = None
        return ran

    # ---- extension points and policy: how a stage changes what the interpreter does ------
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
                   on_decision: Callable[[Interpreter, Decision], bool] | None | object = _UNSET,
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

    # ---- decisions on unknowns --------------------------------------------------------
    def decide(self, value: Unknown, file: str, line: int, text: str) -> bool:
        """The truth of ``text`` on this path. A negated unknown (``not u``, ``u != "s"``) is
        its input decided the other way; ``taken`` records the input's key with the truth of
        the condition as written (``Decision.negated`` says which way they relate)."""
        for answer in reversed(self.decision_filters):
            truth_given = answer(value, file, line, text)
            if truth_given is not None:
                return truth_given
        key = value.key or f"{file}:{line}:{text}"
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

    # ---- events (evidence) ------------------------------------------------------------
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
            value = _EXPR[node.__class__](self, node, frame)
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

    # ---- modules ----------------------------------------------------------------------
    def find_module_file(self, name: str) -> tuple[Path, bool] | None:
        return _find_module_file(self.root, name)

    def package_modules(self, directory: Any) -> list[tuple[str, bool]] | None:
        """The modules of a package directory of the analysed tree (a ``__path__`` entry), as
        pkgutil's file finder lists them: (name, is a package), sorted; None for a directory
        outside the tree (never read)."""
        if not isinstance(directory, str) or not _inside_tree(directory, str(self.root)):
            return None
        return _package_modules(directory)

    def load_module(self, name: str) -> ModuleObj | External:
        for watch in self.import_watchers:
            watch(name)
        if name in self.modules:
            mod = self.modules[name]
            return mod
        native = self.natives.native_module(self, name)
        if native is not None:
            self.modules[name] = native
            return native
        top = name.split(".")[0]
        if top != self.natives.package_name:
            ext = External(name)
            self.modules[name] = ext
            return ext
        parent: ModuleObj | External | None = None
        if "." not in name and not self.top_init:
            found_top = self.find_module_file(name)
            if found_top is not None and found_top[1]:
                mod = ModuleObj(name, found_top[0].parent.relative_to(self.root).as_posix() + "/", True)
                mod.globals["__file__"] = str(found_top[0])
                mod.unrun = f"{mod.file}__init__.py is not evaluated (a kernel library's API module)"
                mod.loaded = True
                self.modules[name] = mod
                return mod
        if "." in name:
            # as in CPython, the parent package is fully imported first (its __init__ may
            # import this very module, e.g. `from .common import *`)
            parent = self.load_module(name.rsplit(".", 1)[0])
            if name in self.modules:
                return self.modules[name]
        found = self.find_module_file(name)
        if found is None:
            # a module the checkout does not have (e.g. a compiled extension)
            ext = External(name)
            self.modules[name] = ext
            return ext
        path, is_pkg = found
        rel = path.relative_to(self.root).as_posix() if path.is_file() else path.relative_to(self.root).as_posix() + "/"
        mod = ModuleObj(name, rel, is_pkg)
        mod.globals["__file__"] = str(path)
        if is_pkg:  # where its submodules are found (pkgutil.iter_modules walks it)
            mod.globals["__path__"] = [str(path.parent if path.is_file() else path)]
        self.modules[name] = mod
        if isinstance(parent, ModuleObj):
            parent.globals.setdefault(name.rsplit(".", 1)[1], mod)
        if path.is_file():
            self.run_module_body(mod, path)
        mod.loaded = True
        return mod

    def run_module_body(self, mod: ModuleObj, path: Path) -> None:
        if not _inside_tree(str(path), str(self.root)):
            # the tree is a boundary: a module linked out of it (into the user's home, say)
            # is never read; what depends on it is unknown
            self.parse_failures[mod.file] = f"{mod.file}: not read: its real path leaves the source tree"
            mod.failed = "its real path leaves the source tree"
            return
        try:
            tree = self.cache.load(path)
        except ParseFailure as exc:
            where = f"{mod.file}:{exc.line}" if exc.line else mod.file
            self.parse_failures[mod.file] = f"{where}: {exc.message}"
            mod.failed = exc.message
            return
        frame = Frame(module=mod)
        self.loading += 1
        try:
            self._run_body(mod, tree, frame)
        finally:
            self.loading -= 1

    def _run_body(self, mod: ModuleObj, tree: ir.Node, frame: Frame) -> None:
        for stmt in tree.body:
            try:
                self.exec_block([stmt], frame)
            except Unmodelled as exc:
                # one top-level statement the evaluator cannot follow (e.g. a loop over a
                # third-party object) does not sink the whole module: the names it would
                # bind become unknown, the rest of the module still loads
                reason = f"{mod.file}:{stmt.line} not evaluated ({exc})"
                self.notes.append(reason)
                for name in bound_names(stmt):
                    mod.globals[name] = Unknown(reason, f"unbound:{mod.name}.{name}")

    def module_attr(self, mod: ModuleObj, name: str) -> Any:
        if name in mod.globals:
            value = mod.globals[name]
            if isinstance(value, LazyImport):
                value = self.resolve_lazy(value)
                mod.globals[name] = value
            self.note_read(mod.events.get(name))
            return value
        getattr_hook = mod.globals.get("__getattr__")
        if isinstance(getattr_hook, Function) and not name.startswith("__"):
            # PEP 562 module __getattr__ (e.g. a lazily created current_platform)
            return self.call(getattr_hook, [name], {})
        if mod.is_package:
            sub = self.load_module(f"{mod.name}.{name}")
            if isinstance(sub, ModuleObj) or name not in ("__path__",):
                if isinstance(sub, ModuleObj) or not mod.failed:
                    if isinstance(sub, ModuleObj):
                        return sub
        if mod.failed:
            return Unknown(f"{mod.file} could not be parsed ({mod.failed})", f"parse:{mod.file}")
        if mod.unrun:
            return Unknown(f"{mod.name}.{name}: {mod.unrun}")
        raise self.make_raise("AttributeError", f"module '{mod.name}' has no attribute '{name}'")

    def resolve_lazy(self, lazy: LazyImport) -> Any:
        mod = self.load_module(lazy.module)
        if lazy.attr is None:
            return mod
        if isinstance(mod, External):
            try:
                return self.getattr(mod, lazy.attr)
            except PyRaise as raised:
                if not (isinstance(raised.exc, Instance) and raised.exc.cls.is_subclass_of(self.exc_classes["AttributeError"])):
                    raise
                # CPython's import_from: the module's __file__, or "unknown location"
                where = self.getattr(mod, "__file__")
                failed = self.make_raise("ImportError", f"cannot import name {lazy.attr!r} from {lazy.module!r} "
                                         f"({where if isinstance(where, str) else 'unknown location'})")
                failed.explicit = raised.explicit
                raise failed from None
        if lazy.attr in mod.globals:
            return self.module_attr(mod, lazy.attr)
        sub = self.load_module(f"{lazy.module}.{lazy.attr}")
        if isinstance(sub, ModuleObj):
            return sub
        if isinstance(mod.globals.get("__getattr__"), Function):
            return self.module_attr(mod, lazy.attr)
        if mod.failed:
            return Unknown(f"{mod.file} could not be parsed ({mod.failed})", f"parse:{mod.file}")
        if mod.unrun:
            return Unknown(f"{lazy.module}.{lazy.attr}: {mod.unrun}")
        return Unknown(f"{lazy.module}.{lazy.attr} not found in the source", f"missing:{lazy.module}.{lazy.attr}")

    # ---- statements -------------------------------------------------------------------
    def exec_block(self, stmts: list[ir.Node], frame: Frame) -> None:
        max_steps = self.bounds.max_steps
        for stmt in stmts:
            steps = self.steps = self.steps + 1
            if steps > max_steps:
                raise AnalysisBound(f"analysis bound reached: more than {max_steps} steps")
            if not steps & 1023 and self.deadline is not None and self.deadline():
                raise AnalysisBound(f"analysis bound reached: CPU-time budget of {self.bounds.cpu_seconds:.0f} s per resolution")
            try:
                _STMT[stmt.__class__](self, stmt, frame)
            except (Unmodelled, AnalysisBound) as exc:
                # the innermost statement names where evaluation stopped (free unless raised)
                if getattr(exc, "where", None) is None:
                    # an attribute of this exception object only, read back with getattr (stop_reason)
                    exc.where = f"{frame.module.file}:{stmt.line}"  # type: ignore[union-attr]
                raise

    def s_ExprStmt(self, node: ir.Node, frame: Frame) -> None:
        value = node.value
        _EXPR[value.__class__](self, value, frame)

    def s_Pass(self, node: ir.Node, frame: Frame) -> None:
        return None

    def s_Unsupported(self, node: ir.Node, frame: Frame) -> None:
        raise Unmodelled(f"unsupported statement {node.what} at {frame.module.file}:{node.line}")

    def s_Break(self, node: ir.Node, frame: Frame) -> None:
        raise _Break()

    def s_Continue(self, node: ir.Node, frame: Frame) -> None:
        raise _Continue()

    def s_Global(self, node: ir.Node, frame: Frame) -> None:
        if frame.scope is not None:
            frame.scope.globals_decl.update(node.names)

    def s_Nonlocal(self, node: ir.Node, frame: Frame) -> None:
        if frame.scope is not None:
            frame.scope.nonlocal_decl.update(node.names)

    def s_Delete(self, node: ir.Node, frame: Frame) -> None:
        for target in node.targets:
            if isinstance(target, ir.Name):
                if frame.scope is not None:
                    frame.scope.vars.pop(target.id, None)
                else:
                    frame.module.globals.pop(target.id, None)
            elif isinstance(target, ir.Subscript):
                obj = self.evaluate(target.value, frame)
                key = self.evaluate(target.index, frame)
                if isinstance(obj, (dict, list)) and not isinstance(key, Unknown):
                    self.data_op(functools.partial(obj.__delitem__, key))
            elif isinstance(target, ir.Attribute):
                obj = self.evaluate(target.value, frame)
                if isinstance(obj, (Instance, HFConfig)):
                    obj.attrs.pop(target.attr, None)

    def s_Import(self, node: ir.Node, frame: Frame) -> None:
        with self._importing(frame, node):
            for dotted, asname in node.names:
                if asname:
                    self.bind_name(frame, asname, LazyImport(dotted, None) if frame.scope is None else self.load_module(dotted), node.line, "")
                else:
                    # `import a.b.c` loads a.b.c (and its parents) and binds `a`
                    self.load_module(dotted)
                    self.bind_name(frame, dotted.split(".")[0], self.load_module(dotted.split(".")[0]), node.line, "")

    @contextlib.contextmanager
    def _importing(self, frame: Frame, node: ir.Node) -> Iterator[None]:
        """A raise made while this statement imports (ModuleNotFoundError, ImportError) names
        the statement, not the last call; the last call's site is restored afterwards, as
        what a later raise outside any call names."""
        saved = getattr(self, "_call_site", ("?", 0))
        self._call_site = (frame.module.file, node.line)
        try:
            yield
        finally:
            self._call_site = saved

    def s_ImportFrom(self, node: ir.Node, frame: Frame) -> None:
        module = self.absolute_module(cast(str, node.module), node.level, frame.module)  # "" for `from . import x`
        if node.names == "*":
            mod = self.load_module(module)
            if isinstance(mod, ModuleObj):
                names = mod.globals.get("__all__")
                if not isinstance(names, (list, tuple)):
                    names = [n for n in mod.globals if not n.startswith("_")]
                for n in names:
                    if isinstance(n, str) and n in mod.globals:
                        self.bind_name(frame, n, mod.globals[n], node.line, "")
            return
        # only imports inside the analysed tree are deferred; an outside import is cheap and
        # must fail where it stands (inside its `try: ... except ImportError`)
        lazy = frame.scope is None and frame.class_ns is None and module.split(".")[0] == self.natives.package_name
        with self._importing(frame, node):
            for name, asname in node.names:
                target = asname or name
                # `from package import submodule` runs the submodule now, as CPython does: its
                # body may register providers (decorators) whose order is import order
                if lazy and not self.is_submodule(module, name):
                    value: Any = LazyImport(module, name)
                else:
                    value = self.resolve_lazy(LazyImport(module, name))
                self.bind_name(frame, target, value, node.line, "")

    def is_submodule(self, package: str, name: str) -> bool:
        if package.split(".")[0] != self.natives.package_name:
            return False
        found = self.find_module_file(package)
        return found is not None and found[1] and self.find_module_file(f"{package}.{name}") is not None

    def absolute_module(self, module: str, level: int, current: ModuleObj) -> str:
        return absolute_module(current.name, current.is_package, module, level)

    def s_FunctionDef(self, node: ir.Node, frame: Frame) -> None:
        func = self.make_function(node.name, node.params, node.body, frame, node.line, False)
        value: Any = func
        for dec_node in reversed(node.decorators):
            dec = self.evaluate(dec_node, frame)
            value = self.apply_decorator(dec, value, frame, node.line)
        if frame.class_obj is not None:
            func.attrs["__class__"] = frame.class_obj  # for zero-argument super()
        if frame.scope is None and frame.class_ns is None:
            boundary = self.natives.boundary_for(self, frame.module.name, node.name)
            if boundary is not None:
                value = boundary
        self.bind_name(frame, node.name, value, node.line, "")

    def make_function(
        self, name: str, params: list[ir.Node], body: Any, frame: Frame, line: int, is_lambda: bool
    ) -> Function:
        defaults = {}
        for p in params:
            if p.default is not None:
                defaults[p.name] = self.evaluate(p.default, frame)
        qual = f"{frame.class_obj.name}.{name}" if frame.class_obj is not None else name
        if frame.class_ns is not None and frame.class_obj is None:
            qual = f"{frame.class_ns.get('__qualname__', '?')}.{name}"
        return Function(
            name=name, qualname=qual, params=params, body=body, module=frame.module,
            closure=frame.scope, defaults=defaults, line=line, is_lambda=is_lambda, interp=self,
        )

    def apply_decorator(self, dec: Any, func: Any, frame: Frame, line: int) -> Any:
        if isinstance(dec, External) or isinstance(dec, Unknown):
            # decorators from outside the tree (torch.compile, ...) keep the function's behaviour
            return func
        result = self.call(dec, [func], {})
        if isinstance(result, Unknown):
            return func
        return result

    def s_ClassDef(self, node: ir.Node, frame: Frame) -> None:
        bases = []
        external: list[str] = []
        for b in node.bases:
            value = self.evaluate(b, frame)
            if isinstance(value, External):
                external.append(value.path)
            elif isinstance(value, Native) and value.name in ("str", "int", "dict", "float", "tuple", "list"):
                external.append(value.name)
            bases.append(value)
        real_bases = tuple(b for b in bases if isinstance(b, Class))
        for b in bases:
            if isinstance(b, Native) and b.name in self.exc_classes:
                real_bases += (self.exc_classes[b.name],)
        if sum(len(b.mro()) for b in real_bases if isinstance(b, Class)) > self.bounds.max_mro:
            # C3 linearisation is quadratic in the depth per class: a 5,000-class chain is cubic
            raise AnalysisBound(f"analysis bound reached: class hierarchy deeper than {self.bounds.max_mro} at {frame.module.file}:{node.line}")
        cls = Class(node.name, real_bases, {}, frame.module, node.line, external_bases=tuple(external))
        for base in real_bases:
            cls.flags |= base.flags & {"enum", "exception", "str_mixin", "dataclass"}
        if any(p.endswith("Enum") or p.endswith("IntEnum") or p.endswith("StrEnum") or p.endswith("Flag") for p in external):
            cls.flags.add("enum")
        if "str" in external or any(p.endswith("StrEnum") for p in external):
            cls.flags.add("str_mixin")
        ns: dict[str, Any] = {"__qualname__": node.name, "__module__": frame.module.name}
        cls.ns = ns
        # a class body sees its own namespace, then the enclosing function's locals, then globals
        body_frame = Frame(module=frame.module, class_ns=ns, class_obj=cls, depth=frame.depth, outer_scope=frame.scope)
        self.exec_block(node.body, body_frame)
        if "enum" in cls.flags:
            self.natives.make_enum(self, cls)
        self.natives.class_created(self, cls)
        for attr_name, attr_value in list(ns.items()):
            if isinstance(attr_value, Instance):
                found, set_name = attr_value.cls.lookup("__set_name__")
                if found:
                    self.call(self.bind(set_name, attr_value, attr_value.cls), [cls, attr_name], {})
        value = cls
        for dec_node in reversed(node.decorators):
            dec = self.evaluate(dec_node, frame)
            value = self.apply_decorator(dec, value, frame, node.line)
        self.bind_name(frame, node.name, value, node.line, "")

    def s_Return(self, node: ir.Node, frame: Frame) -> None:
        if node.value is None:
            raise _Return(None, None)
        value, reads = self.evaluate_reads(node.value, frame)
        fname = frame.func.qualname if frame.func else "?"
        ev = self.event("return", f"{fname}()", value, frame.module.file, node.line, "return", reads,
                        _FORMS.get(node.value.kind, "expr"))
        raise _Return(value, ev)

    def s_Assign(self, node: ir.Node, frame: Frame) -> None:
        value, reads = self.evaluate_reads(node.value, frame)
        form = _FORMS.get(node.value.kind, "expr")
        for target in node.targets:
            self.assign(target, value, frame, node.line, node.text, reads, form)

    def s_AnnAssign(self, node: ir.Node, frame: Frame) -> None:
        if frame.class_obj is not None and isinstance(node.target, ir.Name):
            ann = node.annotation
            ann_text = _annotation_text(ann)
            frame.class_obj.annotations.append((node.target.id, node.line, ann_text))
            # evaluated on demand (get_type_hints, __annotations__), in the class's module
            frame.class_obj.annotation_nodes[node.target.id] = ann
        if node.value is None:
            return
        value, reads = self.evaluate_reads(node.value, frame)
        self.assign(node.target, value, frame, node.line, node.text, reads, _FORMS.get(node.value.kind, "expr"))

    def s_AugAssign(self, node: ir.Node, frame: Frame) -> None:
        def compute() -> Any:
            current = self.evaluate(node.target, frame)
            rhs = self.evaluate(node.value, frame)
            if isinstance(current, list) and node.op == "+" and isinstance(rhs, (list, tuple)):
                self.check_size("+", current, rhs)
                current.extend(rhs)  # in-place, like list.__iadd__
                return current
            if isinstance(current, set) and node.op == "|" and isinstance(rhs, (set, frozenset)):
                current |= rhs
                return current
            if isinstance(current, dict) and node.op == "|" and isinstance(rhs, dict):
                current.update(rhs)
                return current
            if is_plain(current) and is_plain(rhs) and node.op in _IBIN:
                # in place, as CPython: `lst += "ab"` extends, errors name the operator "+="
                self.check_size(node.op, current, rhs)
                return self.data_op(lambda: _IBIN[node.op](current, rhs))
            return self.binop(node.op, current, rhs)

        value, reads = self.collect(compute)
        self.assign(node.target, value, frame, node.line, node.text, reads, "expr")

    def assign(self, target: ir.Node, value: Any, frame: Frame, line: int, text: str, reads: Iterable[Event],
               form: str = "copy") -> None:
        kind = target.kind
        if kind == "Name":
            self.bind_name(frame, target.id, value, line, text, reads, form)
        elif kind == "Attribute":
            obj = self.evaluate(target.value, frame)
            ev = self.event("write", target.attr, value, frame.module.file, line, text, reads, form)
            self.setattr(obj, target.attr, value, ev)
        elif kind == "Subscript":
            obj = self.evaluate(target.value, frame)
            key = self.evaluate(target.index, frame)
            if isinstance(key, str) and key in self.tracked_keys:
                # a store under a key written as a constant names the setting: keep its text
                self.note_keyed(key, value, frame, line, reads, form,
                                text=text if target.index.kind == "Const" else f"<{key}>=...")
            self.setitem(obj, key, value)
        elif kind in ("TupleExpr", "ListExpr"):
            # an item of an unpacked value: a copy of whatever made the whole
            items = self.unpack(value, target.elts, frame, line)
            for sub, item in zip(target.elts, items, strict=False):
                if isinstance(sub, ir.Starred):
                    self.assign(sub.value, item, frame, line, text, reads)
                else:
                    self.assign(sub, item, frame, line, text, reads)
        elif kind == "Starred":
            self.assign(target.value, value, frame, line, text, reads)
        else:
            raise Unmodelled(f"assignment to {kind} at {frame.module.file}:{line}")

    def unpack(self, value: Any, targets: list[ir.Node], frame: Frame, line: int) -> list[Any]:
        n = len(targets)
        star = [i for i, t in enumerate(targets) if isinstance(t, ir.Starred)]
        if isinstance(value, Unknown):
            return [value] * n
        if isinstance(value, External) and self.call_hook is not None and not star:
            # layer stage (layers.py): a tensor's shape unpacks into unknown sizes
            return [Unknown(f"element {i} of {value.path}", f"{value.identity}[{i}]") for i in range(n)]
        if isinstance(value, _SCALARS):
            raise self.make_raise("TypeError", f"cannot unpack non-iterable {type(value).__name__} object")
        items = self.iterate(value, frame, line)
        if star:
            i = star[0]
            after = n - i - 1
            if len(items) < n - 1:
                raise self.make_raise("ValueError", f"not enough values to unpack (expected at least {n - 1}, got {len(items)})")
            return items[:i] + [list(items[i: len(items) - after])] + items[len(items) - after:]
        if len(items) < n:
            raise self.make_raise("ValueError", f"not enough values to unpack (expected {n}, got {len(items)})")
        if len(items) > n:
            raise self.make_raise("ValueError", f"too many values to unpack (expected {n})")
        return items

    def bind_name(
        self, frame: Frame, name: str, value: Any, line: int, text: str, reads: Iterable[Event] = (),
        form: str = "copy",
    ) -> None:
        ev = self.event("write", name, value, frame.module.file, line, text, reads, form) if text else None
        if frame.class_ns is not None:
            frame.class_ns[name] = value
            return
        scope = frame.scope
        if scope is None or name in scope.globals_decl:
            frame.module.globals[name] = value
            if ev is not None:
                frame.module.events[name] = ev
            return
        if name in scope.nonlocal_decl:
            s = scope.parent
            while s is not None and name not in s.vars:
                s = s.parent
            if s is not None:
                s.vars[name] = value
                if ev is not None:
                    s.events[name] = ev
                return
        scope.vars[name] = value
        if ev is not None:
            scope.events[name] = ev

    def s_If(self, node: ir.Node, frame: Frame) -> None:
        test, reads = self.evaluate_reads(node.test, frame)
        truth = self.truth(test, frame, node.line, node.text)
        self.guards.append(Guard(frame.module.file, node.line, node.text, truth, tuple(reads)))
        self.guard_tuple = None
        try:
            block = node.body if truth else node.orelse
            if block:
                self.exec_block(block, frame)
        finally:
            self.guards.pop()
            self.guard_tuple = None

    def s_While(self, node: ir.Node, frame: Frame) -> None:
        count = 0
        while True:
            test = self.evaluate(node.test, frame)
            if isinstance(test, Unknown):
                raise Unmodelled(f"while-loop on an unknown condition at {frame.module.file}:{node.line} ({test.reason})")
            if not self.truth(test, frame, node.line, node.text):
                self.exec_block(node.orelse, frame)
                return
            count += 1
            if count > self.bounds.max_loop:
                raise AnalysisBound(f"analysis bound reached: loop at {frame.module.file}:{node.line} ran {count} times")
            try:
                self.exec_block(node.body, frame)
            except _Break:
                return
            except _Continue:
                continue

    def s_For(self, node: ir.Node, frame: Frame) -> None:
        iterable, reads = self.evaluate_reads(node.iter, frame)
        if isinstance(iterable, Unknown) and self.call_hook is not None:
            # layer stage (layers.py): a loop over unknown tensor sizes (experts, shards) runs
            # one representative iteration; each iteration runs the same code
            items: list[Any] = [Unknown(f"an element of {iterable.reason}", f"{iterable.key}[*]" if iterable.key else None)]
        elif isinstance(iterable, Unknown):
            raise Unmodelled(f"loop over an unknown value at {frame.module.file}:{node.line} ({iterable.reason})")
        else:
            items = self.iterate(iterable, frame, node.line)
        max_loop = self.bounds.max_loop
        target = node.target
        name = target.id if target.__class__ is ir.Name else None
        # `for a, b in pairs`: names bound straight from a tuple of that length, as assign's
        # unpacking would (the same events); anything else goes through assign
        names = (tuple(e.id for e in target.elts)
                 if target.__class__ is ir.TupleExpr and all(e.__class__ is ir.Name for e in target.elts) else None)
        sources = tuple(reads)  # each binding's event shares it (tuple() of a tuple is itself)
        for count, item in enumerate(items):
            if count > max_loop:
                raise AnalysisBound(f"analysis bound reached: loop at {frame.module.file}:{node.line}")
            if name is not None:
                self.bind_name(frame, name, item, node.line, "for", sources)
            elif names is not None and item.__class__ is tuple and len(item) == len(names):
                for sub, value in zip(names, item, strict=True):
                    self.bind_name(frame, sub, value, node.line, "for", sources)
            else:
                self.assign(target, item, frame, node.line, "for", sources)
            try:
                self.exec_block(node.body, frame)
            except _Break:
                return
            except _Continue:
                continue
        self.exec_block(node.orelse, frame)

    def s_Try(self, node: ir.Node, frame: Frame) -> None:
        try:
            try:
                self.exec_block(node.body, frame)
            except PyRaise as raised:
                handler = self.match_handler(node.handlers, raised, frame)
                if handler is None:
                    raise
                self.run_handler(handler, raised, frame)
            else:
                self.exec_block(node.orelse, frame)
        finally:
            if node.finalbody:
                self.exec_block(node.finalbody, frame)

    def match_handler(self, handlers: list[ir.Node], raised: PyRaise, frame: Frame) -> ir.Node | None:
        exc = raised.exc
        for h in handlers:
            if h.type is None:
                return h
            types = self.evaluate(h.type, frame)
            if not isinstance(types, tuple):
                types = (types,)
            for t in types:
                if isinstance(t, Class) and isinstance(exc, Instance) and exc.cls.is_subclass_of(t):
                    return h
                if isinstance(t, Native) and t.name in self.exc_classes and isinstance(exc, Instance):
                    if exc.cls.is_subclass_of(self.exc_classes[t.name]):
                        return h
        return None

    def s_With(self, node: ir.Node, frame: Frame) -> None:
        self.with_items(node, 0, frame)

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
                except (_Return, _Break, _Continue):
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
            except _Return:
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
                except (_Return, _Break, _Continue):
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

    def run_handler(self, handler: ir.Node, raised: PyRaise, frame: Frame) -> None:
        """An ``except`` block handling ``raised`` (``s_Try``'s rules: the name bound, a bare
        ``raise`` re-raises it)."""
        if handler.name:
            self.bind_name(frame, handler.name, raised.exc, handler.line, "")
        self.handling.append(raised)
        try:
            self.exec_block(handler.body, frame)
        finally:
            self.handling.pop()

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
                        except (PyRaise, _Return) as stopped:
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
                    except (PyRaise, _Return) as stopped:
                        pending = stopped
                    if node.finalbody:
                        try:
                            self.exec_block(node.finalbody, frame)
                        except (PyRaise, _Return) as stopped:
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

    def s_Raise(self, node: ir.Node, frame: Frame) -> None:
        if node.exc is None:
            if self.handling:
                raise self.handling[-1]
            raise self.make_raise("RuntimeError", "No active exception to reraise")
        exc = self.eval_message_expr(node.exc, frame)
        if isinstance(exc, Class):
            exc = self.instantiate_exception(exc, [])
        if isinstance(exc, Native) and exc.name in self.exc_classes:
            exc = self.instantiate_exception(self.exc_classes[exc.name], [])
        if not isinstance(exc, Instance):
            exc = self.instantiate_exception(self.exc_classes["Exception"], [f"(unmodelled exception {exc!r})"])
        raised = PyRaise(exc, frame.module.file, node.line, node.text)
        raised.guards = tuple(self.guards)  # the branches it is in (layers.py weighs them)
        raise raised

    def s_Assert(self, node: ir.Node, frame: Frame) -> None:
        if frame.scope is None and self.call_hook is not None:
            return  # layer stage (layers.py): an import-time assert held when SGLang imported the module
        test = self.evaluate(node.test, frame)
        if self.truth(test, frame, node.line, node.text):
            return
        msg = self.eval_message_expr(node.msg, frame) if node.msg is not None else ""
        exc = self.instantiate_exception(self.exc_classes["AssertionError"], [msg] if node.msg is not None else [])
        raised = PyRaise(exc, frame.module.file, node.line, f"assert {node.text}")
        raised.guards = tuple(self.guards)
        raise raised

    def eval_message_expr(self, node: ir.Node, frame: Frame) -> Any:
        with self.message_mode():
            return self.evaluate(node, frame)

    # ---- expressions ------------------------------------------------------------------
    def evaluate(self, node: ir.Node, frame: Frame) -> Any:
        return _EXPR[node.__class__](self, node, frame)

    def e_Const(self, node: ir.Node, frame: Frame) -> Any:
        return node.value

    def e_UnsupportedExpr(self, node: ir.Node, frame: Frame) -> Any:
        return Unknown(f"unsupported expression {node.what} at {frame.module.file}:{node.line}")

    def e_Await(self, node: ir.Node, frame: Frame) -> Any:
        return Unknown("await expression")

    def e_Yield(self, node: ir.Node, frame: Frame) -> Any:
        raise Unmodelled(f"generator function at {frame.module.file}:{node.line}")

    def e_Name(self, node: ir.Node, frame: Frame) -> Any:
        name = node.id
        class_ns = frame.class_ns
        if class_ns is None:
            scope = frame.scope
            if scope is not None:
                # the commonest read of all, a local of the innermost function: bound there, so
                # not declared global (CPython refuses `global x` after x is bound)
                local = scope.vars
                if name in local:
                    reads = self.reads
                    if reads is not None:
                        ev = scope.events.get(name)
                        if ev is not None:
                            reads.append(ev)
                    return local[name]
        else:
            if name in class_ns:
                return class_ns[name]
            scope = frame.outer_scope
        if scope is not None and name not in scope.globals_decl:
            s: Scope | None = scope
            while s is not None:
                local = s.vars
                if name in local:
                    reads = self.reads  # note_read, inlined: the most frequent read of all
                    if reads is not None:
                        ev = s.events.get(name)
                        if ev is not None:
                            reads.append(ev)
                    return local[name]
                if s is scope and name in s.local_names and class_ns is None and name not in s.nonlocal_decl:
                    # bound somewhere in this function, not yet here: CPython's UnboundLocalError
                    raise self.make_raise("UnboundLocalError", f"cannot access local variable '{name}' where it is not associated with a value")
                s = s.parent
        module = frame.module
        g = module.globals
        if name in g:
            value = g[name]
            if value.__class__ is LazyImport:
                value = self.resolve_lazy(value)
                g[name] = value
            reads = self.reads
            if reads is not None:
                ev = module.events.get(name)
                if ev is not None:
                    reads.append(ev)
            return value
        if name in self.builtins:
            return self.builtins[name]
        if frame.module.failed:
            return Unknown(f"{frame.module.file} could not be parsed", f"parse:{frame.module.file}")
        raise self.make_raise("NameError", f"name '{name}' is not defined")

    def e_Attribute(self, node: ir.Node, frame: Frame) -> Any:
        value = node.value  # the hot handlers dispatch inline (one call less per node)
        return self.getattr(_EXPR[value.__class__](self, value, frame), node.attr)

    def e_Subscript(self, node: ir.Node, frame: Frame) -> Any:
        obj = self.evaluate(node.value, frame)
        index = self.evaluate(node.index, frame)
        return self.getitem(obj, index)

    def e_Slice(self, node: ir.Node, frame: Frame) -> Any:
        parts = [None if p is None else self.evaluate(p, frame) for p in (node.lower, node.upper, node.step)]
        u = first_unknown(parts)
        return u if u is not None else slice(*parts)

    def e_JoinedStr(self, node: ir.Node, frame: Frame) -> Any:
        out: list[str] = []
        for part in node.parts:
            if isinstance(part, ir.Const):
                out.append(str(part.value))
                continue
            value = self.evaluate(part.value, frame)
            if isinstance(value, Unknown) and not getattr(self, "_message_mode", False):
                return value
            spec = self.evaluate(part.spec, frame) if part.spec is not None else ""
            out.append(self.format_value(value, part.conversion, spec))
        return "".join(out)

    def format_value(self, value: Any, conversion: str | None, spec: Any) -> str:
        if isinstance(value, Unknown):
            return "<?>"
        if conversion == "r":
            text = self.repr_of(value)
        elif conversion == "a":
            text = ascii(value) if is_plain(value) else self.to_str(value)
        else:
            text = self.to_str(value)
        if spec and isinstance(spec, str) and any(len(w) > 6 for w in re.findall(r"\d+", spec)):
            raise AnalysisBound("analysis bound reached: format width too large")
        if spec and isinstance(spec, str) and is_plain(value):
            # as CPython: f"{x!r:>8}" formats the converted text, f"{None:>3}" is a TypeError
            subject = text if conversion in ("r", "s", "a") else value
            return cast(str, self.data_op(lambda: format(subject, spec)))
        return text

    def repr_of(self, value: Any) -> str:
        """``repr(value)``: plain data as CPython; an exception as ``ValueError('x')``."""
        self.charge_walk(value)
        if is_plain(value):
            return stable_repr(value)
        if isinstance(value, Instance):
            found, meth = value.cls.lookup("__repr__")
            if found and isinstance(meth, Function):
                result = self.call(self.bind(meth, value, value.cls), [], {})
                return result if isinstance(result, str) else "<?>"
            if "exception" in value.cls.flags:
                args = value.attrs.get("args", ())
                return f"{value.cls.name}({', '.join(self.repr_of(a) for a in args)})"
        return self.to_str(value)

    def to_str(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        self.charge_walk(value)
        if is_plain(value):
            return stable_repr(value) if type(value) in _CONTAINERS else str(value)
        if isinstance(value, Instance):
            if "enum" in value.cls.flags and "_name_" in value.attrs:
                if "str_mixin" in value.cls.flags:
                    return str(value.attrs.get("_value_"))
                return f"{value.cls.name}.{value.attrs['_name_']}"
            found, meth = value.cls.lookup("__str__")
            if "exception" in value.cls.flags and not (found and isinstance(meth, Function)):
                args = value.attrs.get("args", ())
                if len(args) == 1 and is_plain(args[0]) and value.cls.is_subclass_of(self.exc_classes["KeyError"]):
                    return repr(args[0])
                if len(args) == 1:
                    return self.to_str(args[0])
                # several arguments: str() of the exception is the repr of the args tuple
                return "(" + ", ".join(self.repr_of(a) for a in args) + ")" if args else ""
            found, meth = value.cls.lookup("__str__")
            if found and isinstance(meth, Function):
                result = self.call(self.bind(meth, value, value.cls), [], {})
                return result if isinstance(result, str) else "<?>"
            return f"<{value.cls.name} object>"
        if isinstance(value, Unknown):
            return "<?>"
        if isinstance(value, Class):
            return f"<class '{value.name}'>"
        if isinstance(value, HFConfig):
            return f"{value.attrs.get('model_type')}Config"
        native = self.natives.to_str(value)
        if native is not None:
            return native
        if isinstance(value, External):
            return f"<{value.path}>"
        return f"<{type(value).__name__}>"

    def e_ListExpr(self, node: ir.Node, frame: Frame) -> Any:
        return self.build_seq(node.elts, frame)

    def e_TupleExpr(self, node: ir.Node, frame: Frame) -> Any:
        return tuple(self.build_seq(node.elts, frame))

    def e_SetExpr(self, node: ir.Node, frame: Frame) -> Any:
        items = self.build_seq(node.elts, frame)
        u = first_unknown(items)
        if u is not None:
            return Unknown(f"set containing an unknown ({u.reason})", u.key)
        return self.data_op(lambda: set(items))

    def build_seq(self, elts: list[ir.Node], frame: Frame) -> list[Any]:
        out: list[Any] = []
        for e in elts:
            if isinstance(e, ir.Starred):
                value = self.evaluate(e.value, frame)
                if isinstance(value, Unknown):
                    raise Unmodelled(f"unpacking an unknown value at {frame.module.file}:{e.line}")
                out.extend(self.iterate(value, frame, e.line))
            else:
                out.append(_EXPR[e.__class__](self, e, frame))
        return out

    def e_Starred(self, node: ir.Node, frame: Frame) -> Any:
        return self.evaluate(node.value, frame)

    def e_DictExpr(self, node: ir.Node, frame: Frame) -> Any:
        out: dict[Any, Any] = {}
        for key_node, value_node in node.items:
            if key_node is None:
                value = self.evaluate(value_node, frame)
                if isinstance(value, dict):
                    out.update(value)
                elif isinstance(value, Unknown):
                    raise Unmodelled(f"** of an unknown mapping at {frame.module.file}:{node.line}")
                else:
                    out.update(self.mapping_items(value))
                continue
            key = self.evaluate(key_node, frame)
            if isinstance(key, str) and key in self.tracked_keys:
                value, reads = self.evaluate_reads(value_node, frame)
                self.note_keyed(key, value, frame, value_node.line, reads, _FORMS.get(value_node.kind, "expr"), value_node)
            else:
                value = self.evaluate(value_node, frame)
            if isinstance(key, Unknown):
                raise Unmodelled(f"dict with an unknown key at {frame.module.file}:{node.line}")
            self.data_op(functools.partial(out.__setitem__, key, value))
        return out

    def e_BinOp(self, node: ir.Node, frame: Frame) -> Any:
        left = self.evaluate(node.left, frame)
        right = self.evaluate(node.right, frame)
        return self.binop(node.op, left, right)

    def binop(self, op: str, left: Any, right: Any) -> Any:
        if isinstance(left, Unknown):
            return left
        if isinstance(right, Unknown):
            return right
        if op == "%" and isinstance(left, str):
            args = right if isinstance(right, tuple) else (right,)
            _check_percent_widths(left, right, self.bounds.max_seq_len)
            if all(is_plain(a) for a in args):
                return self.data_op(lambda: left % right)
            return left % tuple(self.to_str(a) for a in args) if "%s" in left else Unknown("string formatting of objects")
        if is_plain(left) and is_plain(right):
            fn = _BIN.get(op)
            if fn is None:
                return Unknown(f"operator {op}")
            self.check_size(op, left, right)
            return self.data_op(lambda: fn(left, right))
        if isinstance(left, Instance) and "enum" in left.cls.flags and op == "|":
            return Unknown("enum flag combination")
        if op == "|" and (isinstance(left, (Class, External, Native, TypeForm)) or left is None) and (isinstance(right, (Class, External, Native, TypeForm)) or right is None):
            return TypeForm(External("typing.Union"), tuple(x if x is not None else External("builtins.NoneType") for x in (left, right)))
        for obj, name, other, _reflected in ((left, _DUNDER.get(op), right, False), (right, _RDUNDER.get(op), left, True)):
            if isinstance(obj, Instance) and name:
                found, meth = obj.cls.lookup(name)
                if found:
                    return self.call(self.bind(meth, obj, obj.cls), [other], {})
        if isinstance(left, Instance) and "str_mixin" in left.cls.flags and op == "+":
            return self.binop(op, left.attrs.get("_value_"), right)
        native = self.natives.binop(self, op, left, right)
        if native is not _NOT_NATIVE:
            return native
        return Unknown(f"operator {op} on {type(left).__name__} and {type(right).__name__}")

    def check_size(self, op: str, left: Any, right: Any) -> None:
        limit = self.bounds.max_seq_len
        if op == "+" and isinstance(left, (str, list, tuple, bytes)) and isinstance(right, (str, list, tuple, bytes)):
            if len(left) + len(right) > limit:
                raise AnalysisBound("analysis bound reached: sequence too large")
        if op == "*" and isinstance(left, (str, list, tuple, bytes)) and isinstance(right, int):
            if len(left) * right > self.bounds.max_seq_len:
                raise AnalysisBound("analysis bound reached: sequence too large")
        if op == "*" and isinstance(right, (str, list, tuple, bytes)) and isinstance(left, int):
            if len(right) * left > self.bounds.max_seq_len:
                raise AnalysisBound("analysis bound reached: sequence too large")
        if op == "**" and isinstance(right, int) and abs(right) > 4096:
            raise AnalysisBound("analysis bound reached: exponent too large")
        if op == "<<" and isinstance(right, int) and right > 4096:
            raise AnalysisBound("analysis bound reached: shift too large")
        if type(left) is int and type(right) is int:
            # the result's size, before it is computed (x = x * x doubles it per step)
            bits = left.bit_length()
            grown = {"*": bits + right.bit_length(), "**": bits * abs(right), "<<": bits + max(right, 0)}.get(op, 0)
            if grown > self.bounds.max_int_bits:
                raise AnalysisBound("analysis bound reached: integer too large")
        if op == "%" and isinstance(left, str):
            _check_percent_widths(left, right, limit)

    def e_UnaryOp(self, node: ir.Node, frame: Frame) -> Any:
        value = self.evaluate(node.operand, frame)
        if node.op == "not":
            t = self.truth_value(value)
            if isinstance(t, Unknown):
                return negated(t)
            return not t
        if isinstance(value, Unknown):
            return value
        if is_plain(value):
            unary: dict[str, Callable[[Any], Any]] = {"-": operator.neg, "+": operator.pos, "~": operator.invert}
            fn = unary[node.op]
            return self.data_op(lambda: fn(value))
        return Unknown(f"unary {node.op}")

    def e_BoolOp(self, node: ir.Node, frame: Frame) -> Any:
        # short-circuit; an unknown operand becomes a decision only when its truth matters
        value: Any = None
        for i, sub in enumerate(node.values):
            value = _EXPR[sub.__class__](self, sub, frame)
            if i == len(node.values) - 1:
                return value
            t = self.truth_value(value)
            if isinstance(t, Unknown):
                t = self.decide(t, frame.module.file, sub.line, f"{node.op}-operand")
            if node.op == "and" and not t:
                return value
            if node.op == "or" and t:
                return value
        return value

    def e_Compare(self, node: ir.Node, frame: Frame) -> Any:
        left_node = node.left
        left = _EXPR[left_node.__class__](self, left_node, frame)
        result: Any = True
        for op, comp_node in zip(node.ops, node.comparators, strict=False):
            right = _EXPR[comp_node.__class__](self, comp_node, frame)
            r = self.compare(op, left, right)
            if isinstance(r, Unknown):
                return r
            if getattr(r, "native_truth", None) is not None:
                # a world's value (an elementwise comparison of tensors): its truth is the world's
                t = self.truth_value(r)
                if len(node.ops) == 1 or isinstance(t, Unknown):
                    return r if len(node.ops) == 1 else t
                r = t
            if not r:
                return False
            left = right
        return result

    def compare(self, op: str, left: Any, right: Any) -> Any:
        if op in ("is", "is not"):
            if isinstance(left, Unknown) or isinstance(right, Unknown):
                u = left if isinstance(left, Unknown) else right
                r = Unknown(u.reason, (u.key + f" is {right!r}") if u.key else None)
                return r if op == "is" else negated(r)
            same = left is right or (left is None and right is None)
            if isinstance(left, External) and isinstance(right, External):
                same = left.path == right.path  # outside objects are named, not allocated
            if isinstance(left, bool) and isinstance(right, bool):
                same = left == right
            if _is_none_type(left) and _is_none_type(right):
                same = True  # `type(None)` vs the NoneType inside Optional[X] (get_args)
            return same if op == "is" else not same
        if op in ("in", "not in"):
            r = self.contains(right, left)
            if isinstance(r, Unknown):
                return r if op == "in" else negated(r)
            return r if op == "in" else not r
        if isinstance(left, Unknown) or isinstance(right, Unknown):
            u = left if isinstance(left, Unknown) else right
            other = right if u is left else left
            if op in ("==", "!="):
                eq = self.eq_unknown(u.reason, u.key, other)
                return eq if op == "==" else negated(eq)
            key = f"{u.key} {op} {other!r}" if u.key and is_plain(other) else None
            return Unknown(u.reason, key)
        if op in ("==", "!="):
            eq = self.equals(left, right)
            if isinstance(eq, Unknown):
                return eq if op == "==" else negated(eq)
            if op == "!=" and getattr(eq, "native_truth", None) is not None:
                return self.natives.compare(self, op, left, right)  # a world's elementwise result
            return eq if op == "==" else not eq
        left_v = self.plain_of(left)
        right_v = self.plain_of(right)
        if is_plain(left_v) and is_plain(right_v):
            if contains_unknown(left_v) or contains_unknown(right_v):
                return Unknown("comparison of values that contain an unknown")
            return self.data_op(lambda: _CMP[op](left_v, right_v))
        if isinstance(left, Instance):
            found, meth = left.cls.lookup(_CMP_DUNDER[op])
            if found:
                return self.call(self.bind(meth, left, left.cls), [right], {})
        native = self.natives.compare(self, op, left, right)
        if native is not _NOT_NATIVE:
            return native
        return Unknown(f"comparison {op} of {type(left).__name__} and {type(right).__name__}")

    def plain_of(self, value: Any) -> Any:
        if isinstance(value, Instance) and "str_mixin" in value.cls.flags:
            return value.attrs.get("_value_")
        if isinstance(value, Instance) and "int_mixin" in value.cls.flags:
            return value.attrs.get("_value_")
        return value

    def equals(self, left: Any, right: Any) -> Any:
        if left is right:
            return True
        left_v = self.plain_of(left)
        right_v = self.plain_of(right)
        if isinstance(left_v, (list, tuple, dict, set, frozenset)) and isinstance(right_v, (list, tuple, dict, set, frozenset)):
            self.charge_walk(left_v, right_v)
        if is_plain(left_v) and is_plain(right_v):
            if contains_unknown(left_v) or contains_unknown(right_v):
                if isinstance(left_v, (list, tuple)) and isinstance(right_v, (list, tuple)):
                    if len(left_v) != len(right_v):
                        return False
                    for a, b in zip(left_v, right_v, strict=False):
                        e = self.equals(a, b)
                        if e is not True:
                            return e
                    return True
                return Unknown("equality of values that contain an unknown")
            return left_v == right_v
        if isinstance(left_v, Unknown) or isinstance(right_v, Unknown):
            u = left_v if isinstance(left_v, Unknown) else right_v
            return self.eq_unknown(u.reason, u.key, right_v if u is left_v else left_v)
        if isinstance(left, Instance):
            found, meth = left.cls.lookup("__eq__")
            if found and isinstance(meth, Function):
                return self.call(self.bind(meth, left, left.cls), [right], {})
        if isinstance(left, External) or isinstance(right, External):
            ext = left if isinstance(left, External) else right
            if is_plain(left_v) or is_plain(right_v):
                return self.eq_unknown(f"value of {ext.path} is not modelled", f"ext:{ext.identity}",
                                       right_v if is_plain(right_v) else left_v)
            if isinstance(left, External) and isinstance(right, External):
                if self.call_hook is not None and ("(" in left.path or "(" in right.path) and left.path != right.path:
                    # layer stage: an object made by a call (a tensor's dtype) is not known to differ
                    return Unknown(f"value of {ext.path} is not modelled", f"ext:{left.identity}=={right.identity}")
                return left.path == right.path
        native = self.natives.compare(self, "==", left, right)
        if native is not _NOT_NATIVE:
            return native  # the world's own values (an elementwise comparison of a tensor)
        return False

    def contains(self, container: Any, item: Any) -> Any:
        tc, ti = type(container), type(item)
        if (tc is dict or tc is set or tc is frozenset) and (ti is str or ti is int):
            # the common case at C speed: a hit, or a miss among keys none of which may equal
            # a str/int without being one; anything else takes the general path below
            if item in container:
                return True
            if _EXACT_KEYS.isdisjoint(map(type, container)):
                return False
        if isinstance(container, Unknown):
            # membership is a decision of its own per item, not the container's truthiness
            key = (f"{item!r} in {container.key}" if container.key and is_plain(item) and not contains_unknown(item)
                   else None)
            return Unknown(container.reason, key)
        if isinstance(container, (dict, set, frozenset)) and is_plain(item):
            self.data_op(lambda: hash(item))  # TypeError: unhashable type: 'list'
        if isinstance(container, (dict, set, frozenset)) and (is_plain(item) and not isinstance(item, (list, dict, set))):
            if isinstance(item, Unknown):
                return _in_unknown(item, container)
            if contains_unknown(item):
                return Unknown("membership of a value that contains an unknown")
            keys: Collection[Any]
            if isinstance(container, dict):
                keys = container.keys()
            else:
                keys = container
            try:
                if item in keys:
                    return True
            except TypeError:
                pass
            if _EXACT_KEYS.isdisjoint(map(type, keys)):
                return False
        if isinstance(container, str):
            if isinstance(item, Unknown):
                return _in_unknown(item, container)
            item_v = self.plain_of(item)
            if not isinstance(item_v, str):
                name = item_v.cls.name if isinstance(item_v, Instance) else type(item_v).__name__
                raise self.make_raise("TypeError", f"'in <string>' requires string as left operand, not {name}")
            return item_v in container
        if isinstance(container, (list, tuple, set, frozenset, dict, range)):
            seen_unknown: Unknown | None = None
            elems = container.keys() if isinstance(container, dict) else container
            self.charge(len(elems))
            for elem in elems:
                eq = self.equals(elem, item)
                if eq is True:
                    return True
                if isinstance(eq, Unknown):
                    seen_unknown = eq
            if isinstance(item, Unknown):
                return _in_unknown(item, container)
            return seen_unknown if seen_unknown is not None else False
        if isinstance(container, HFConfig):
            return self.contains(container.attrs, item)
        if isinstance(container, Class) and "enum" in container.flags:
            members = container.ns.get("__members_list__", [])
            return any(m is item for m in members)
        if isinstance(container, Instance):
            found, meth = container.cls.lookup("__contains__")
            if found:
                return self.call(self.bind(meth, container, container.cls), [item], {})
        if isinstance(container, External):
            # the path names the object, not the call's arguments: the key adds the item
            key = f"in:{container.identity}:{item!r}" if is_plain(item) and not contains_unknown(item) else None
            return Unknown(f"membership in {container.path} is not modelled", key)
        if self.natives.is_environ(container):
            return self.natives.environ_contains(self, item)
        if isinstance(container, _SCALARS):
            # `x in None`: CPython's own TypeError (the item is never looked at)
            # a scalar on purpose: CPython's own TypeError for it
            return self.data_op(lambda: operator.contains(container, None))  # type: ignore[arg-type]
        return Unknown(f"membership in {type(container).__name__} is not modelled")

    def e_IfExp(self, node: ir.Node, frame: Frame) -> Any:
        test, reads = self.evaluate_reads(node.test, frame)
        truth = self.truth(test, frame, node.line, node.text)
        self.guards.append(Guard(frame.module.file, node.line, node.text, truth, tuple(reads)))
        self.guard_tuple = None
        try:
            return self.evaluate(node.body if truth else node.orelse, frame)
        finally:
            self.guards.pop()
            self.guard_tuple = None

    def e_NamedExpr(self, node: ir.Node, frame: Frame) -> Any:
        value = self.evaluate(node.value, frame)
        self.assign(node.target, value, frame, node.line, "walrus", [])
        return value

    def e_Lambda(self, node: ir.Node, frame: Frame) -> Any:
        return self.make_function("<lambda>", node.params, node.body, frame, node.line, True)

    def comprehension(self, node: ir.Node, frame: Frame, emit: Callable[[Frame], None]) -> None:
        scope = Scope(parent=frame.scope)
        if frame.scope is not None:
            scope.globals_decl = frame.scope.globals_decl
        inner = Frame(module=frame.module, scope=scope, func=frame.func, depth=frame.depth)
        if frame.class_ns is not None:
            inner.scope = Scope(parent=None)

        def loop(i: int) -> None:
            if i == len(node.generators):
                emit(inner)
                return
            target, iter_node, ifs = node.generators[i]
            iterable = self.evaluate(iter_node, inner if i else frame)
            if isinstance(iterable, Unknown):
                raise Unmodelled(f"comprehension over an unknown value at {frame.module.file}:{node.line} ({iterable.reason})")
            for item in self.iterate(iterable, frame, node.line):
                self.steps += 1
                if self.steps > self.bounds.max_steps:
                    raise AnalysisBound("analysis bound reached: too many steps")
                self.assign(target, item, inner, node.line, "", [])
                ok = True
                for cond in ifs:
                    c = self.evaluate(cond, inner)
                    if not self.truth(c, inner, cond.line, "comprehension condition"):
                        ok = False
                        break
                if ok:
                    loop(i + 1)

        loop(0)

    def e_ListComp(self, node: ir.Node, frame: Frame) -> Any:
        out: list[Any] = []
        self.comprehension(node, frame, lambda f: out.append(self.evaluate(node.elt, f)))
        return out

    e_GeneratorExp = e_ListComp

    def e_SetComp(self, node: ir.Node, frame: Frame) -> Any:
        out = self.e_ListComp(node, frame)
        u = first_unknown(out)
        return u if u is not None else self.data_op(lambda: set(out))

    def e_DictComp(self, node: ir.Node, frame: Frame) -> Any:
        out: dict[Any, Any] = {}

        def emit(f: Frame) -> None:
            k = self.evaluate(node.key, f)
            v = self.evaluate(node.value, f)
            if isinstance(k, Unknown):
                raise Unmodelled(f"dict comprehension with an unknown key at {frame.module.file}:{node.line}")
            self.data_op(lambda: out.__setitem__(k, v))

        self.comprehension(node, frame, emit)
        return out

    def e_Call(self, node: ir.Node, frame: Frame) -> Any:
        func_node = node.func
        # super() without arguments needs the enclosing class and instance
        if func_node.__class__ is ir.Name and func_node.id == "super" and not node.args:
            return self.zero_arg_super(frame)
        func = _EXPR[func_node.__class__](self, func_node, frame)
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for kind, expr in node.args:
            if kind == "":
                args.append(_EXPR[expr.__class__](self, expr, frame))
            elif kind == "*":
                value = self.evaluate(expr, frame)
                if isinstance(value, Unknown):
                    return Unknown(f"call with *{value.reason}")
                args.extend(self.iterate(value, frame, node.line))
            elif kind == "**":
                value = self.evaluate(expr, frame)
                if isinstance(value, Unknown):
                    return Unknown(f"call with **{value.reason}")
                kwargs.update(self.mapping_items(value))
            elif kind in self.tracked_keys:
                value, reads = self.evaluate_reads(expr, frame)
                self.note_keyed(kind, value, frame, expr.line, reads, _FORMS.get(expr.kind, "expr"), expr)
                kwargs[kind] = value
            else:
                kwargs[kind] = _EXPR[expr.__class__](self, expr, frame)
        self._call_site = (frame.module.file, node.line)
        result = self.call(func, args, kwargs)
        if result.__class__ is Unknown and not _SITE.search(result.reason):
            # an unknown a call returns names the call site (issue #23)
            result = Unknown(f"{result.reason} at {frame.module.file}:{node.line}", result.key)
        return result

    def zero_arg_super(self, frame: Frame) -> Any:
        func = frame.func
        if func is None or frame.scope is None:
            return Unknown("super() outside a method")
        cls = func.attrs.get("__class__")
        if not isinstance(cls, Class):
            return Unknown("super() in a function without a class")
        first = func.params[0].name if func.params else None
        obj = frame.scope.vars.get(first) if first else None
        return SuperProxy(cls, obj)

    # ---- calls ------------------------------------------------------------------------
    def call(self, func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if self.call_hook is not None:
            hooked = self.call_hook(func, args, kwargs)
            if hooked is not NOT_HOOKED:
                return hooked
        kind = func.__class__  # the value classes have no subclasses: `is` is isinstance here
        if kind is Function:
            return self.call_function(func, args, kwargs)
        if kind is BoundMethod:
            return self.call(func.func, [func.obj, *args], kwargs)
        if kind is Native:
            return func.fn(self, args, kwargs)
        if kind is Class:
            if func is self.natives.object_class and not args:
                return Instance(func)
            return self.instantiate(func, args, kwargs)
        if isinstance(func, Partial):
            return self.call(func.func, [*func.args, *args], {**func.kwargs, **kwargs})
        if isinstance(func, Cached):
            # functools.cache keys on hash/eq: data by value, analysed objects by identity
            key = _memo_key([*args, *sorted(kwargs.items())])
            if key is None:
                return self.call(func.func, args, kwargs)
            if key not in func.memo:
                func.memo[key] = (self.call(func.func, args, kwargs), args, kwargs)
            return func.memo[key][0]
        if isinstance(func, External):
            return self.natives.call_external(self, func, args, kwargs)
        if isinstance(func, Unknown):
            return Unknown(f"call of an unknown ({func.reason})", func.key)
        if isinstance(func, StaticMethod):
            return self.call(func.func, args, kwargs)
        if isinstance(func, Instance):
            found, meth = func.cls.lookup("__call__")
            if found:
                return self.call(self.bind(meth, func, func.cls), args, kwargs)
            raise self.make_raise("TypeError", f"'{func.cls.name}' object is not callable")
        if callable(func) and getattr(func, "__self__", None) is not None and is_plain(func.__self__):
            return self.call_data_method(func, args, kwargs)
        return Unknown(f"call of {type(func).__name__} is not modelled")

    def call_data_method(self, method: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        owner = method.__self__
        name = method.__name__
        # a builtin-sequence subclass's instance passed to a method of plain data: its items
        args = [a.attrs[_ITEMS] if isinstance(a, Instance) and _ITEMS in a.attrs else a for a in args]
        self.check_method_size(owner, name, args)
        if name == "get" and isinstance(owner, dict) and args and isinstance(args[0], Unknown):
            return args[0]
        if name in ("join",) and args and contains_unknown(args[0] if not isinstance(args[0], Unknown) else [args[0]]):
            if getattr(self, "_message_mode", False):
                return owner.join(self.to_str(a) for a in args[0])
            return Unknown("join of unknown parts")
        if name == "join" and args and not isinstance(args[0], Unknown):
            parts = list(args[0])
            if all(isinstance(p, str) or (isinstance(p, Instance) and "str_mixin" in p.cls.flags) for p in parts):
                return owner.join(self.plain_of(p) for p in parts)
        u = first_unknown([*args, *kwargs.values()])
        if u is not None and name not in ("append", "extend", "add", "insert", "update", "setdefault", "__setitem__", "pop"):
            return Unknown(f"{type(owner).__name__}.{name} of an unknown ({u.reason})", None)
        if name == "format" and isinstance(owner, str):
            return self.data_op(lambda: owner.format(*[self.plain_or_str(a) for a in args], **{k: self.plain_or_str(v) for k, v in kwargs.items()}))
        if name == "sort" and "key" in kwargs:
            key = kwargs["key"]
            results = [(self.call(key, [x], {}), x) for x in owner]
            if any(isinstance(r, Unknown) for r, _ in results):
                return Unknown("sort with an unknown key")
            order = sorted(range(len(owner)), key=lambda i: results[i][0], reverse=bool(kwargs.get("reverse")))
            owner[:] = [owner[i] for i in order]
            return None
        result = self.data_op(lambda: method(*args, **kwargs))
        if name == "keys" and isinstance(owner, dict):
            return KeysList(result)  # a list with dict_keys' set operators
        if name in ("items", "values") and isinstance(owner, dict):
            return list(result)  # dict views as lists: iteration order is what matters here
        return result

    def check_method_size(self, owner: Any, name: str, args: list[Any]) -> None:
        """Refuse data methods whose result would exceed the sequence bound, before they run."""
        limit = self.bounds.max_seq_len
        size = 0
        if name in ("center", "ljust", "rjust", "zfill") and args and isinstance(args[0], int):
            size = args[0]
        elif name == "replace" and isinstance(owner, str) and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            size = len(owner) + owner.count(args[0]) * max(0, len(args[1]) - len(args[0])) if args[0] else len(owner) * (len(args[1]) + 1)
        elif name in ("extend", "join", "update") and args and isinstance(args[0], (list, tuple, str, set, dict, range)):
            size = len(owner) + (sum(len(x) for x in args[0] if isinstance(x, str)) if name == "join" else len(args[0]))
        elif name in ("append", "insert", "add"):
            size = len(owner) + 1
        elif name == "expandtabs" and isinstance(owner, str):
            tab = args[0] if args else 8
            size = len(owner) * tab if isinstance(tab, int) and "\t" in owner else 0
        elif name in ("format", "format_map") and isinstance(owner, str):
            _check_format_widths(owner, args, limit)
        if size > limit:
            raise AnalysisBound("analysis bound reached: sequence too large")
        if name in ("count", "index", "sort", "remove", "copy", "reverse") and isinstance(owner, (list, tuple)):
            self.charge(len(owner))

    def plain_or_str(self, value: Any) -> Any:
        return value if is_plain(value) else self.to_str(value)

    def charge(self, n: int) -> None:
        """Count work proportional to a value's size as steps (``x in big_list`` in a loop is
        a million steps per iteration, not one), so the step bound covers it."""
        self.steps += n
        if self.steps > self.bounds.max_steps:
            raise AnalysisBound(f"analysis bound reached: more than {self.bounds.max_steps} steps (work on large values)")

    def charge_walk(self, *values: Any) -> None:
        """Charge a walk over containers (``==``, ``str``) by their size with shared parts
        counted at each use, as CPython walks them: ``a = [a, a]`` sixty times is 2**60."""
        limit = self.bounds.max_steps
        for value in values:
            if isinstance(value, (list, tuple, dict, set, frozenset)):
                self.charge(_walk_size(value, limit + 1))

    def data_op(self, fn: Callable[[], Any]) -> Any:
        """Run an operation on plain data; its Python exceptions become analysed-code exceptions."""
        try:
            return fn()
        except (KeyError, IndexError, ValueError, TypeError, AttributeError, ZeroDivisionError, OverflowError) as exc:
            if isinstance(exc, KeyError) and len(exc.args) == 1:
                raise self.make_raise("KeyError", exc.args[0]) from None
            raise self.make_raise(type(exc).__name__, str(exc.args[0]) if exc.args else "") from None

    def call_function(self, func: Function, args: list[Any], kwargs: dict[str, Any]) -> Any:
        self.depth += 1
        if self.depth > self.bounds.max_depth:
            self.depth -= 1
            raise AnalysisBound(f"analysis bound reached: call depth over {self.bounds.max_depth} at {func.qualname}")
        scope = Scope(parent=func.closure, local_names=frozenset() if func.is_lambda else function_locals(func.body))
        frame = Frame(module=func.module, scope=scope, func=func, depth=self.depth)
        try:
            self.bind_params(func, args, kwargs, scope)
            saved_reads = self.reads
            self.reads = []
            try:
                if func.is_lambda:
                    value, reads = self.evaluate_reads(func.body, frame)
                    ev = self.event("return", f"{func.qualname}()", value, func.module.file, func.line, "lambda", reads)
                    self.reads = saved_reads
                    self.note_read(ev)
                    return value
                self.exec_block(func.body, frame)
                self.reads = saved_reads
                return None
            except _Return as ret:
                self.reads = saved_reads
                self.note_read(ret.event)
                return ret.value
            finally:
                self.reads = saved_reads
        finally:
            self.depth -= 1

    def bind_params(self, func: Function, args: list[Any], kwargs: dict[str, Any], scope: Scope) -> None:
        params = func.params
        kwargs = dict(kwargs)
        i = 0
        star_kw: str | None = None
        for p in params:
            if p.star == "":
                if i < len(args):
                    scope.vars[p.name] = args[i]
                    i += 1
                    if p.name in kwargs:
                        raise self.make_raise("TypeError", f"{func.qualname}() got multiple values for argument '{p.name}'")
                elif p.name in kwargs:
                    scope.vars[p.name] = kwargs.pop(p.name)
                elif p.name in func.defaults:
                    scope.vars[p.name] = func.defaults[p.name]
                else:
                    raise self.make_raise("TypeError", f"{func.qualname}() missing required argument: '{p.name}'")
            elif p.star == "*":
                scope.vars[p.name] = tuple(args[i:])
                i = len(args)
            elif p.star == "kwonly":
                if p.name in kwargs:
                    scope.vars[p.name] = kwargs.pop(p.name)
                elif p.name in func.defaults:
                    scope.vars[p.name] = func.defaults[p.name]
                else:
                    raise self.make_raise("TypeError", f"{func.qualname}() missing keyword argument: '{p.name}'")
            elif p.star == "**":
                star_kw = p.name
        if i < len(args):
            raise self.make_raise("TypeError", f"{func.qualname}() takes {i} positional arguments but {len(args)} were given")
        if star_kw is not None:
            scope.vars[star_kw] = kwargs
        elif kwargs:
            raise self.make_raise("TypeError", f"{func.qualname}() got an unexpected keyword argument '{next(iter(kwargs))}'")

    def instantiate(self, cls: Class, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if "exception" in cls.flags:
            inst = self.instantiate_exception(cls, args)
            found, init = cls.lookup("__init__")
            if found and isinstance(init, Function):
                self.call(BoundMethod(init, inst), args, kwargs)
            return inst
        if "enum" in cls.flags:
            return self.natives.enum_lookup(self, cls, args)
        found, new = cls.lookup("__new__")
        custom_new = found and (isinstance(new, Function) or isinstance(new, StaticMethod) and isinstance(new.func, Function))
        if custom_new:
            fn = new.func if isinstance(new, StaticMethod) else new
            result = self.call(fn, [cls, *args], kwargs)
            if not (isinstance(result, Instance) and result.cls.is_subclass_of(cls)):
                return result
            inst = result
        else:
            inst = Instance(cls)
        found, init = cls.lookup("__init__")
        if found:
            self.call(self.bind(init, inst, cls), args, kwargs)
        elif _SEQUENCE_BASES.intersection(cls.external_bases) and len(args) <= 1 and not kwargs:
            # a subclass of list/tuple/set that adds methods only (0.5.23's CPPArgList, whose
            # __str__ joins itself): the instance holds its items, iterated as the base would
            inst.attrs[_ITEMS] = self.iterate(args[0], None, 0) if args else []
        elif "dataclass" not in cls.flags and cls.external_bases and (args or kwargs):
            # a subclass of an outside class (e.g. a transformers config) built with arguments
            for k, v in kwargs.items():
                inst.attrs[k] = v
        return inst

    def instantiate_exception(self, cls: Class, args: list[Any]) -> Instance:
        inst = Instance(cls)
        inst.attrs["args"] = tuple(args)
        return inst

    def make_raise(self, exc_name: str, message: Any) -> PyRaise:
        cls = self.exc_classes.get(exc_name, self.exc_classes["Exception"])
        exc = self.instantiate_exception(cls, [message])
        file, line = getattr(self, "_call_site", ("?", 0))
        return PyRaise(exc, file, line, "", explicit=False)

    def bind(self, attr: Any, obj: Any, cls: Class) -> Any:
        if isinstance(attr, Function):
            return BoundMethod(attr, obj)
        if isinstance(attr, StaticMethod):
            return attr.func
        if isinstance(attr, ClassMethod):
            return BoundMethod(attr.func, cls)
        if isinstance(attr, Native) and attr.bind_self:
            return BoundMethod(attr, obj)
        if isinstance(attr, Cached) and isinstance(attr.func, Function):
            return BoundMethod(attr, obj)
        if isinstance(attr, Property):
            return self.call(attr.fget, [obj], {})
        return attr

    # ---- attributes and items ---------------------------------------------------------
    def getattr(self, obj: Any, name: str) -> Any:
        kind = obj.__class__  # the value classes have no subclasses: `is` is isinstance here
        if kind is Instance:
            return self.instance_attr(obj, name)
        if kind is Unknown:
            return Unknown(obj.reason, f"{obj.key}.{name}" if obj.key else None)
        if kind is ModuleObj:
            return self.module_attr(obj, name)
        if kind is Class:
            return self.class_attr(obj, name)
        if isinstance(obj, External):
            return self.natives.external_attr(self, obj, name)
        if isinstance(obj, HFConfig):
            return self.natives.hf_attr(self, obj, name)
        if isinstance(obj, SuperProxy):
            mro = obj.cls.mro()
            cls_of_obj = obj.obj.cls if isinstance(obj.obj, Instance) else obj.obj if isinstance(obj.obj, Class) else obj.cls
            full = cls_of_obj.mro() if isinstance(cls_of_obj, Class) else mro
            start = full.index(obj.cls) + 1 if obj.cls in full else 1
            for klass in full[start:]:
                if name in klass.ns:
                    return self.bind(klass.ns[name], obj.obj, cls_of_obj)
            if name in self.natives.object_class.ns:
                # every class ends in object (also those built on outside bases like msgspec.Struct)
                return self.bind(self.natives.object_class.ns[name], obj.obj, cls_of_obj)
            if name == "__post_init__":
                return Native("object.__post_init__", lambda i, a, k: None)
            return Unknown(f"super().{name} resolves outside the analysed tree")
        if isinstance(obj, Function):
            if name == "__name__":
                return obj.name
            if name == "__qualname__":
                return obj.qualname
            if name in obj.attrs:
                return obj.attrs[name]
            return Unknown(f"attribute {name} of function {obj.qualname}")
        if isinstance(obj, (Native, BoundMethod, Cached, Partial)):
            if name == "__name__":
                inner = obj
                while isinstance(inner, (Cached, Partial, BoundMethod)):
                    inner = inner.func
                return getattr(inner, "name", "?")
            if isinstance(obj, Cached) and name == "cache_clear":
                return Native("cache_clear", lambda i, a, k: obj.memo.clear())
            if isinstance(obj, Partial) and name in ("func", "args", "keywords"):
                return {"func": obj.func, "args": tuple(obj.args), "keywords": obj.kwargs}[name]
            if isinstance(obj, BoundMethod) and name == "__self__":
                return obj.obj
            if isinstance(obj, BoundMethod) and name == "__func__":
                return obj.func
            return self.natives.native_attr(self, obj, name)
        if is_plain(obj):
            methods = _SAFE_METHODS.get(type(obj))
            if methods is None:
                for t, names in _SAFE_METHODS.items():
                    if isinstance(obj, t):
                        methods = names
                        break
            if methods and name in methods:
                return getattr(obj, name)
            if isinstance(obj, complex) and name in ("real", "imag"):
                return getattr(obj, name)
            raise self.make_raise("AttributeError", f"'{type(obj).__name__}' object has no attribute '{name}'")
        return self.natives.native_attr(self, obj, name)

    def instance_attr(self, obj: Instance, name: str) -> Any:
        found, custom = obj.cls.lookup("__getattribute__")
        if found and isinstance(custom, Function):
            try:
                return self.call(BoundMethod(custom, obj), [name], {})
            except PyRaise as raised:
                hook_found, getattr_fn = obj.cls.lookup("__getattr__")
                if hook_found and isinstance(raised.exc, Instance) and raised.exc.cls.name == "AttributeError":
                    return self.call(self.bind(getattr_fn, obj, obj.cls), [name], {})
                raise
        return self.default_instance_attr(obj, name)

    def default_instance_attr(self, obj: Any, name: str) -> Any:
        """``object.__getattribute__`` followed by ``__getattr__``."""
        if not isinstance(obj, Instance):
            return self.getattr(obj, name)
        if name in obj.attrs:
            self.note_read(obj.events.get(name))
            return obj.attrs[name]
        if name == "__class__":
            return obj.cls
        if name == "__dict__":
            return obj.attrs
        found, attr = obj.cls.lookup(name)
        if found:
            return self.bind(attr, obj, obj.cls)
        special = self.natives.instance_special(self, obj, name)
        if special is not None:
            return special
        found, getattr_fn = obj.cls.lookup("__getattr__")
        if found:
            return self.call(self.bind(getattr_fn, obj, obj.cls), [name], {})
        # an outside base anywhere in the MRO (e.g. ModelWeightParameter -> ... -> torch.nn.Parameter)
        outside = obj.cls.external_bases or next((c.external_bases for c in obj.cls.mro()
                                                  if c.external_bases and not all(b.rsplit(".", 1)[-1] in _NO_ATTR_BASES for b in c.external_bases)), ())
        if outside and not ("enum" in obj.cls.flags or "exception" in obj.cls.flags or "dataclass" in obj.cls.flags):
            return Unknown(f"attribute {name} of {obj.cls.name} may come from {outside[0]}", f"attr:{obj.cls.name}.{name}")
        raise self.make_raise("AttributeError", f"'{obj.cls.name}' object has no attribute '{name}'")

    def class_attr(self, cls: Class, name: str) -> Any:
        if name == "__name__":
            return cls.name
        if name == "__qualname__":
            return cls.ns.get("__qualname__", cls.name)
        if name == "__mro__":
            return cls.mro()
        if name == "__dict__":
            return cls.ns
        found, attr = cls.lookup(name)
        if found:
            if isinstance(attr, ClassMethod):
                return BoundMethod(attr.func, cls)
            if isinstance(attr, StaticMethod):
                return attr.func
            if isinstance(attr, Property):
                return attr
            return attr
        special = self.natives.class_special(self, cls, name)
        if special is not None:
            return special
        if cls.external_bases:
            return Unknown(f"{cls.name}.{name} may come from {cls.external_bases[0]}", f"attr:{cls.name}.{name}")
        raise self.make_raise("AttributeError", f"type object '{cls.name}' has no attribute '{name}'")

    def setattr(self, obj: Any, name: str, value: Any, event: Event | None) -> None:
        if isinstance(obj, Instance):
            found, attr = obj.cls.lookup(name)
            if found and isinstance(attr, Property) and attr.fset is not None:
                self.call(attr.fset, [obj, value], {})
                return
            found, setattr_fn = obj.cls.lookup("__setattr__")
            if found and isinstance(setattr_fn, Function):
                self.call(BoundMethod(setattr_fn, obj), [name, value], {})
                if event is not None and name in obj.attrs:
                    obj.events[name] = event
                return
            self.natives.before_instance_write(self, obj, name, value, event)
            obj.attrs[name] = value
            if event is not None:
                obj.events[name] = event
        elif isinstance(obj, HFConfig):
            obj.attrs[name] = value
            if event is not None:
                obj.events[name] = event
        elif isinstance(obj, Class):
            obj.ns[name] = value
        elif isinstance(obj, ModuleObj):
            obj.globals[name] = value
            if event is not None:
                obj.events[name] = event
        elif isinstance(obj, Function):
            obj.attrs[name] = value
        elif isinstance(obj, (External, Unknown)):
            return  # writes into things outside the tree do not feed back into resolution
        else:
            self.natives.set_native_attr(self, obj, name, value)

    def getitem(self, obj: Any, index: Any) -> Any:
        if isinstance(obj, Unknown):
            return Unknown(obj.reason, f"{obj.key}[{index!r}]" if obj.key and is_plain(index) else None)
        if isinstance(index, Unknown):
            return Unknown(f"subscript by an unknown ({index.reason})", None)
        if isinstance(obj, (list, tuple, str, bytes, range)):
            if isinstance(index, slice) or isinstance(index, int):
                return self.data_op(lambda: obj[index])
            index_v = self.plain_of(index)
            return self.data_op(lambda: obj[index_v])
        if isinstance(obj, dict):
            key = self.plain_of(index) if not isinstance(index, Instance) or index not in obj else index
            try:
                return obj[key]
            except KeyError:
                raise self.make_raise("KeyError", key) from None  # args == (key,), as in CPython
            except TypeError as exc:
                raise self.make_raise("TypeError", str(exc)) from None
        if isinstance(obj, Instance):
            found, meth = obj.cls.lookup("__getitem__")
            if found:
                return self.call(self.bind(meth, obj, obj.cls), [index], {})
        if isinstance(obj, Class):
            if "enum" in obj.flags:
                return self.natives.enum_by_name(self, obj, index)
            return Unknown("generic alias")
        if isinstance(obj, (External, Native)):
            return self.natives.external_item(self, obj, index)
        if isinstance(obj, HFConfig):
            return Unknown("subscript of a config object")
        if isinstance(obj, (*_SCALARS, set, frozenset)):
            # `None[0]`: CPython's own TypeError (the index is never looked at)
            return self.data_op(lambda: operator.getitem(obj, 0))  # type: ignore[call-overload]  # CPython's TypeError
        return self.natives.native_item(self, obj, index)

    def setitem(self, obj: Any, key: Any, value: Any) -> None:
        if isinstance(obj, Unknown):
            return
        if isinstance(key, Unknown) and not self._owns_setitem(obj):
            raise Unmodelled(f"item assignment with an unknown key ({key.reason})")
        if isinstance(obj, (dict, list)):
            k = self.plain_of(key) if isinstance(obj, dict) and isinstance(key, Instance) and "str_mixin" in key.cls.flags else key
            self.data_op(lambda: obj.__setitem__(k, value))
            return
        if isinstance(obj, Instance):
            found, meth = obj.cls.lookup("__setitem__")
            if found:
                self.call(self.bind(meth, obj, obj.cls), [key, value], {})
                return
        self.natives.set_native_item(self, obj, key, value)

    def _owns_setitem(self, obj: Any) -> bool:
        """Whether an item assignment into ``obj`` is the world's to answer whatever the key:
        a world's stand-in (``set_native_item``) or an instance whose ``__setitem__`` the
        world implements (a Native), e.g. a write into a slice of a tensor's data."""
        if isinstance(obj, Instance):
            found, meth = obj.cls.lookup("__setitem__")
            return found and isinstance(meth, Native)
        return hasattr(obj, "set_native_item")

    def iterate(self, value: Any, frame: Frame | None, line: int) -> list[Any]:
        if isinstance(value, (list, tuple, str, bytes, range, set, frozenset)):
            if len(value) > self.bounds.max_seq_len:
                raise AnalysisBound("analysis bound reached: sequence too long")
            if isinstance(value, (set, frozenset)):
                try:
                    return sorted(value, key=_stable_key)
                except TypeError:
                    return list(value)
            return list(value)
        if isinstance(value, dict):
            return list(value.keys())
        if isinstance(value, Class) and "enum" in value.flags:
            return list(value.ns.get("__members_list__", []))
        if isinstance(value, HFConfig):
            return list(value.attrs.keys())
        if isinstance(value, Unknown):
            raise Unmodelled(f"iteration over an unknown value ({value.reason})")
        if isinstance(value, Instance):
            found, meth = value.cls.lookup("__iter__")
            if found:
                it = self.call(self.bind(meth, value, value.cls), [], {})
                return self.iterate(it, frame, line)
            if _ITEMS in value.attrs:
                return list(value.attrs[_ITEMS])
        native = self.natives.iterate_native(self, value)
        if native is not None:
            return native
        if isinstance(value, _SCALARS):
            # a scalar on purpose: CPython's own TypeError for it
            self.data_op(lambda: iter(value))  # type: ignore[call-overload]  # TypeError: 'int' object is not iterable
        # a native caller has no line (0): the stop reason names where evaluation stopped
        raise Unmodelled(f"iteration over {type(value).__name__} ({value!r})" + (f" at line {line}" if line else ""))

    def mapping_items(self, value: Any) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        if isinstance(value, HFConfig):
            return dict(value.attrs)
        if isinstance(value, Instance):
            return dict(value.attrs)
        raise Unmodelled(f"** of {type(value).__name__}")



def _no_handler(prefix: str, kind: str) -> Callable[..., Any]:
    def handler(interp: Interpreter, node: ir.Node, frame: Frame) -> Any:
        raise AttributeError(f"type object 'Interpreter' has no attribute '{prefix}{kind}'")

    return handler


for _cls in vars(ir).values():
    if isinstance(_cls, type) and issubclass(_cls, ir.Node):
        _STMT[_cls] = getattr(Interpreter, "s_" + _cls.kind, None) or _no_handler("s_", _cls.kind)
        _EXPR[_cls] = getattr(Interpreter, "e_" + _cls.kind, None) or _no_handler("e_", _cls.kind)


_DUNDER = {"+": "__add__", "-": "__sub__", "*": "__mul__", "|": "__or__", "&": "__and__", "/": "__truediv__"}
_RDUNDER = {"+": "__radd__", "-": "__rsub__", "*": "__rmul__", "|": "__ror__", "&": "__rand__"}
_CMP_DUNDER = {"<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__"}


def _walk_size(value: Any, limit: int) -> int:
    """Elements a full walk of ``value`` visits (shared parts counted at each use), up to
    ``limit``; computed per distinct container, so cheap even when the walk is not."""
    memo: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in memo and not done:
            continue
        children = list(node.items()) if isinstance(node, dict) else node
        kids = [c for pair in children for c in (pair if isinstance(node, dict) else (pair,))
                if isinstance(c, (list, tuple, dict, set, frozenset))]
        if done:
            total = len(children) + sum(memo.get(id(c), 0) for c in kids)
            memo[key] = min(total, limit)
            continue
        memo[key] = 0  # a cycle (a list holding itself) is walked once, as repr does
        stack.append((node, True))
        stack.extend((c, False) for c in kids if id(c) not in memo)
    return memo.get(id(value), 0)


_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_percent_widths(template: str, args: Any, limit: int) -> None:
    """``"%*d" % (10**9, 1)``: a width or precision, written or passed, over the bound."""
    stars = False
    for m in _PERCENT_SPEC.finditer(template):
        for part in m.groups():
            if part == "*":
                stars = True
            elif part and (len(part) > 7 or int(part) > limit):
                raise AnalysisBound("analysis bound reached: format width too large")
    values = args if isinstance(args, tuple) else (args,)
    if stars and any(type(v) is int and abs(v) > limit for v in values):
        raise AnalysisBound("analysis bound reached: format width too large")


def _check_format_widths(template: str, args: list[Any], limit: int) -> None:
    """``"{:>1000000000}".format(1)`` and ``"{:>{}}".format(1, 10**9)``."""
    if any(len(w) > 7 for w in re.findall(r"\d+", template)):
        raise AnalysisBound("analysis bound reached: format width too large")
    if re.search(r"\{[^{}]*:[^{}]*\{", template) and any(type(v) is int and abs(v) > limit for v in args):
        raise AnalysisBound("analysis bound reached: format width too large")


@functools.lru_cache(maxsize=8192)
def _inside_tree(path: str, root: str) -> bool:
    # memoised like _find_module_file: a located tree does not change while the tool runs
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


_MODULE_FILE = re.compile(r"([^.]+)(?:\.py|\.pyc|(?:\.cpython-[^.]+|\.abi3)?\.so)")


@functools.lru_cache(maxsize=64)
def _package_modules(directory: str) -> list[tuple[str, bool]] | None:
    # pkgutil's iter_importer_modules for a FileFinder (CPython 3.11 pkgutil.py
    # _iter_file_finder_modules): the directory's entries sorted; a module file by its
    # importable suffix (.py, .pyc, an extension); a subdirectory without a dot in its name is
    # a package when it holds an __init__ module, else skipped; __init__ itself and repeats skipped
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return None
    seen: set[str] = set()
    out: list[tuple[str, bool]] = []
    for entry in entries:
        full = os.path.join(directory, entry)
        match = _MODULE_FILE.fullmatch(entry)
        name, is_pkg = (match.group(1), False) if match else (None, False)
        if name == "__init__" or (name is not None and name in seen):
            continue
        if name is None and os.path.isdir(full) and "." not in entry:
            try:
                inner = os.listdir(full)
            except OSError:
                continue
            if not any((m := _MODULE_FILE.fullmatch(f)) and m.group(1) == "__init__" for f in inner):
                continue
            name, is_pkg = entry, True
        if name and "." not in name:
            seen.add(name)
            out.append((name, is_pkg))
    return out


@functools.lru_cache(maxsize=8192)
def _find_module_file(root: Path, name: str) -> tuple[Path, bool] | None:
    # memoised: thousands of lookups per resolution, each 2-3 stat() calls; a located
    # source tree does not change while the tool runs
    base = root.joinpath(*name.split("."))
    init = base / "__init__.py"
    if init.is_file():
        return init, True
    py = base.with_suffix(".py")
    if py.is_file():
        return py, False
    if base.is_dir():  # namespace package
        return base, True
    return None


def _memo_key(values: list[Any]) -> Any:
    """A hashable key for a cached call, or None when CPython's cache would not take the
    arguments either (unhashable data) or the value is not known."""
    out: list[Any] = []
    for v in values:
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) and not isinstance(v[1], (list, dict, set)):
            inner = _memo_key([v[1]])
            if inner is None:
                return None
            out.append((v[0], inner))
        elif isinstance(v, Unknown) or isinstance(v, (list, dict, set)):
            return None
        elif is_plain(v):
            try:
                hash(v)
            except TypeError:
                return None
            out.append((type(v).__name__, v))
        else:
            out.append(("id", id(v)))  # the memo entry keeps the object alive
    return tuple(out)


_LOCALS: dict[int, tuple[list[ir.Node], frozenset[str]]] = {}


def function_locals(body: list[ir.Node]) -> frozenset[str]:
    """Names a function body binds (assignment, for/with/except targets, import, def,
    class), nested functions and comprehensions excluded; cached per body (the entry
    keeps the body alive, so its id is not reused)."""
    hit = _LOCALS.get(id(body))
    if hit is not None and hit[0] is body:
        return hit[1]
    found = frozenset(n for stmt in body for n in bound_names(stmt, as_targets=True))
    _LOCALS[id(body)] = (body, found)
    return found


def _stable_key(value: Any) -> tuple[str, str]:
    return (type(value).__name__, repr(value))


def _annotation_text(node: ir.Node | None) -> str:
    """A rough rendering of an annotation, enough to spot ClassVar/InitVar/Annotated."""
    if node is None:
        return ""
    if isinstance(node, ir.Name):
        return node.id
    if isinstance(node, ir.Attribute):
        return _annotation_text(node.value) + "." + node.attr
    if isinstance(node, ir.Subscript):
        return _annotation_text(node.value) + "[" + _annotation_text(node.index) + "]"
    if isinstance(node, ir.TupleExpr):
        return ", ".join(_annotation_text(e) for e in node.elts)
    if isinstance(node, ir.Const):
        return repr(node.value)
    if isinstance(node, ir.BinOp):
        return _annotation_text(node.left) + " | " + _annotation_text(node.right)
    return "?"


__all__ = [
    "Interpreter", "Frame", "Bounds", "PyRaise", "Unmodelled", "LogRecord", "FieldSpec",
    "Property", "is_plain",
]


def _is_none_type(value: Any) -> bool:
    """NoneType as the evaluator represents it: ``type(None)`` is a Native, the member of
    ``Optional[X]`` an External; SGLang compares the two with ``is`` (arg_utils)."""
    if isinstance(value, External):
        return value.path in ("builtins.NoneType", "types.NoneType")
    return isinstance(value, Native) and value.name == "NoneType"
