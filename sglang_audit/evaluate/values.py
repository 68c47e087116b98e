"""Runtime values of the partial evaluator.

Plain data (None, bool, int, float, str, tuple, list, dict, set, frozenset) is held as
real Python values, so aliasing and in-place mutation behave as in CPython.  Everything
that comes from analysed code is one of the classes below; nothing here ever runs
analysed text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from sglang_audit.frontend import ir


class Caller(Protocol):
    """What a value needs of the interpreter: to be called back (Byterun's pyobj receives the
    VM rather than importing it; values never import the interpreter)."""

    def call(self, func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any: ...


# What a world (natives) answers for an operation it does not handle, so the interpreter
# falls back to its own semantics.
NOT_HANDLED = object()


# Unknown and Guard are never changed after they are made, and hash like frozen dataclasses;
# not declared frozen because a frozen dataclass pays an ``object.__setattr__`` per field
# (~65,000 guards and ~20,000 unknowns are made per 0.5.23 resolution)
@dataclass(unsafe_hash=True, slots=True)
class Unknown:
    """A value the evaluator cannot know; ``key`` names the unknown input it comes from
    (two reads of the same input decide the same way on one path)."""

    reason: str
    key: str | None = None

    def __repr__(self) -> str:
        return f"<unknown: {self.reason}>"


# ``not u`` of a keyed unknown: the same input decided the other way on one path (a keyless
# unknown is decided where its truth is tested, so its negation needs no key of its own).
# A suffix, not a prefix: a key composed from a negated operand (``(not u) is None`` gives
# "u [not] is None") does not end with it, so it is an input of its own, never read as the
# negation of "u is None"
NEGATION = " [not]"


def negated(u: Unknown) -> Unknown:
    if u.key is None:
        return u
    key = u.key[: -len(NEGATION)] if u.key.endswith(NEGATION) else u.key + NEGATION
    return Unknown(u.reason, key)


@dataclass(unsafe_hash=True, slots=True)
class Guard:
    """An evaluated branch condition: where it is, the text as written, its truth."""

    file: str
    line: int
    text: str
    truth: bool
    sources: tuple[Event, ...] = ()

    def describe(self) -> str:
        return self.text if self.truth else f"not ({self.text})"


@dataclass(eq=False, slots=True)
class Event:
    """A write the evaluator observed: evidence for the value it produced.

    Never changed after it is made; not declared frozen because a frozen dataclass pays
    an ``object.__setattr__`` per field and hundreds of thousands are made per resolution."""

    seq: int
    kind: str  # "default" | "flag" | "write" | "return" | "runtime" | "env"
    target: str
    value: Any
    file: str
    line: int
    text: str
    guards: tuple[Guard, ...] = ()
    sources: tuple[Event, ...] = ()
    # how the statement made the value (provenance, see provenance.py): "literal" (a
    # constant written there), "expr" (computed there), "copy" (a name, attribute or item
    # read, a loop variable, a generic store), "" (not a statement: defaults, flags)
    form: str = ""


class Scope:
    """A function frame's locals, chained to the enclosing function for closures."""

    __slots__ = ("vars", "events", "parent", "globals_decl", "nonlocal_decl", "local_names")

    def __init__(self, parent: Scope | None = None, local_names: frozenset[str] = frozenset()) -> None:
        self.vars: dict[str, Any] = {}
        self.events: dict[str, Event] = {}
        self.parent = parent
        self.globals_decl: set[str] = set()
        self.nonlocal_decl: set[str] = set()
        # a function's own scope: every name its body binds (local in all of the body, as
        # the compiler decides); empty for comprehension and class scopes
        self.local_names = local_names


class Namespace(dict):  # type: ignore[type-arg]
    """A module's globals: a dict that counts its writes (``version``), so that a fact derived
    from them (the config classes a module defines) is recomputed only after a change.
    Reads stay C-level dict reads; every mutator is counted."""

    __slots__ = ("version",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.version = 0

    def __setitem__(self, key: Any, value: Any) -> None:
        self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self.version += 1
        super().__delitem__(key)

    def pop(self, *args: Any) -> Any:
        self.version += 1
        return super().pop(*args)

    def popitem(self) -> Any:
        self.version += 1
        return super().popitem()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self.version += 1
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.version += 1
        super().update(*args, **kwargs)

    def clear(self) -> None:
        self.version += 1
        super().clear()

    # typeshed's dict.__ior__ is incompatible with its overloaded __or__ too (typeshed ignores
    # the same error on dict itself)
    def __ior__(self, other: Any) -> Namespace:  # type: ignore[misc]
        self.version += 1
        return super().__ior__(other)


class ModuleObj:
    """An analysed module: its globals, filled by executing its body on first use."""

    def __init__(self, name: str, file: str, is_package: bool) -> None:
        self.name = name
        self.file = file  # path relative to the package root's parent, e.g. sglang/srt/x.py
        self.is_package = is_package
        self.globals: dict[str, Any] = Namespace(__name__=name)
        self.events: dict[str, Event] = {}
        self.loaded = False
        self.failed: str | None = None
        self.unrun: str | None = None  # why its body was not run (its names are then unknown)

    def __repr__(self) -> str:
        return f"<module {self.name}>"


@dataclass(eq=False)
class LazyImport:
    """``from M import N`` bound at module level: resolved when first used."""

    module: str
    attr: str | None  # None: the module itself
    # the import statement: where CPython raises when the name cannot be imported, though
    # the evaluator finds that out only at the first use
    file: str = ""
    line: int = 0


@dataclass(eq=False)
class Function:
    name: str
    qualname: str
    params: list[Any]
    body: Any  # list of statements, or an expression for a lambda
    module: ModuleObj
    closure: Scope | None
    defaults: dict[str, Any]
    line: int
    is_lambda: bool = False
    interp: Caller | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # lets CPython natives (sorted(key=...), map, ...) call back into the evaluator
        assert self.interp is not None
        return self.interp.call(self, list(args), kwargs)

    def __repr__(self) -> str:
        return f"<function {self.qualname}>"


@dataclass(eq=False)
class BoundMethod:
    func: Any
    obj: Any

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        interp = getattr(self.func, "interp", None)
        assert interp is not None
        return interp.call(self, list(args), kwargs)


@dataclass(eq=False)
class Native:
    """A callable implemented by the tool (a builtin, a stdlib function, a device fact)."""

    name: str
    fn: Any  # (interp, args: list, kwargs: dict) -> value
    bind_self: bool = False  # used as a method: receives the instance first

    def __repr__(self) -> str:
        return f"<native {self.name}>"


@dataclass(eq=False)
class Class:
    name: str
    bases: tuple[Any, ...]
    ns: dict[str, Any]
    module: ModuleObj | None
    line: int = 0
    annotations: list[tuple[str, int, str]] = field(default_factory=list)  # (field, line, annotation text)
    flags: set[str] = field(default_factory=set)  # "enum", "dataclass", "exception", ...
    annotation_nodes: dict[str, Any] = field(default_factory=dict)  # name -> IR expression
    annotation_values: dict[str, Any] | None = None  # evaluated (or assigned __annotations__)
    # dataclass fields, computed once per class: (stamp, [(name, line, owner)])
    dc_cache: tuple[tuple[int, ...], list[tuple[str, int, Class]]] | None = None
    mro_cache: tuple[Class, ...] | None = None
    external_bases: tuple[str, ...] = ()

    def mro(self) -> tuple[Class, ...]:
        if self.mro_cache is None:
            out: list[Class] = []
            for cls in _c3(self):
                if cls not in out:
                    out.append(cls)
            self.mro_cache = tuple(out)
        return self.mro_cache

    def lookup(self, name: str) -> tuple[bool, Any]:
        mro = self.mro_cache  # ~120,000 lookups per 0.5.23 resolution: the cache read inline
        if mro is None:
            mro = self.mro()
        for cls in mro:
            ns = cls.ns
            if name in ns:
                return True, ns[name]
        return False, None

    def is_subclass_of(self, other: Class) -> bool:
        return other in (self.mro_cache or self.mro())

    def __repr__(self) -> str:
        return f"<class {self.name}>"


def _c3(cls: Class) -> list[Class]:
    seqs = [list(_c3(b)) for b in cls.bases if isinstance(b, Class)]
    seqs.append([b for b in cls.bases if isinstance(b, Class)])
    result = [cls]
    while True:
        seqs = [s for s in seqs if s]
        if not seqs:
            return result
        for seq in seqs:
            head = seq[0]
            if not any(head in s[1:] for s in seqs):
                break
        else:  # inconsistent hierarchy: fall back to depth-first order
            for seq in seqs:
                result.extend(c for c in seq if c not in result)
            return result
        result.append(head)
        for seq in seqs:
            if seq and seq[0] is head:
                del seq[0]


class Instance:
    """An instance of an analysed class; attribute writes are evidence."""

    def __init__(self, cls: Class) -> None:
        self.cls = cls
        self.attrs: dict[str, Any] = {}
        self.events: dict[str, Event] = {}

    def __repr__(self) -> str:
        if "enum" in self.cls.flags and "_name_" in self.attrs:
            return f"{self.cls.name}.{self.attrs['_name_']}"
        return f"<{self.cls.name} instance>"


@dataclass(eq=False)
class External:
    """Something from outside the analysed tree (torch, transformers, ...), by dotted path."""

    path: str
    # what decisions on it are keyed by: the path plus the arguments of the calls that made
    # it (``torch.allclose(a, b)`` and ``torch.allclose(c, d)`` are two inputs, not one)
    ident: str = ""

    @property
    def identity(self) -> str:
        return self.ident or self.path

    def __repr__(self) -> str:
        return f"<external {self.path}>"

    # Outside objects are named, not allocated: two values reached by the same path (and the
    # same call arguments) are one object, so a dict keyed by torch dtypes at import finds
    # ``torch.float16`` however the caller reached it (0.5.23's CPP_DTYPE_MAP). ``is`` compares
    # them by path too (Interpreter.compare).
    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, External) and self.path == other.path
                                 and self.ident == other.ident)

    def __hash__(self) -> int:
        return hash((self.path, self.ident))


@dataclass(eq=False)
class StaticMethod:
    func: Any


@dataclass(eq=False)
class ClassMethod:
    func: Any


@dataclass(eq=False)
class Property:
    fget: Any
    fset: Any = None


@dataclass(eq=False)
class Partial:
    func: Any
    args: list[Any]
    kwargs: dict[str, Any]


@dataclass(eq=False)
class Cached:
    """``functools.lru_cache``/``cache`` around a callable: memoised per evaluation."""

    func: Any
    memo: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class FieldSpec:
    """``dataclasses.field(...)``."""

    default: Any = None
    has_default: bool = False
    default_factory: Any = None
    init: bool = True


@dataclass(eq=False)
class SuperProxy:
    cls: Class
    obj: Any


class HFConfig:
    """A Hugging Face config object built from ``config.json`` (the ``get_config`` boundary).

    Attribute reads behave like ``PretrainedConfig``: keys of the JSON, then the common
    defaults every config has; anything else raises AttributeError.
    """

    def __init__(self, data: dict[str, Any], origin: str) -> None:
        self.attrs: dict[str, Any] = dict(data)
        self.origin = origin
        self.events: dict[str, Event] = {}
        self.config_class: Any = None  # what the world found for keys config.json omits

    def __repr__(self) -> str:
        return f"<hf_config {self.attrs.get('model_type')!r} from {self.origin}>"


@dataclass(eq=False)
class TypeForm:
    """A subscripted type such as ``Annotated[str, Arg(...)]`` or ``Optional[int]``."""

    origin: Any  # External("typing.Annotated"), External("typing.Union"), a builtin Native, ...
    args: tuple[Any, ...]

    def __repr__(self) -> str:
        return f"<type {getattr(self.origin, 'path', getattr(self.origin, 'name', '?'))}[...]>"


class KeysList(list):  # type: ignore[type-arg]
    """``dict.keys()`` as the evaluator returns it: a list (iteration order is what matters,
    and it pickles), with the set operators of Python's ``dict_keys`` (``options.keys() -
    allowed``, 0.5.23 layer_boundary/factories.py), which return sets as they do there."""

    def __sub__(self, other: Any) -> set[Any]:
        return set(self) - set(other)

    def __rsub__(self, other: Any) -> set[Any]:
        return set(other) - set(self)

    def __and__(self, other: Any) -> set[Any]:
        return set(self) & set(other)

    def __or__(self, other: Any) -> set[Any]:
        return set(self) | set(other)

    def __xor__(self, other: Any) -> set[Any]:
        return set(self) ^ set(other)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__


class AnalysisBound(Exception):
    """A bound on work (steps, depth, loop iterations, paths) was reached."""


@dataclass
class Decision:
    """A branch on an unknown input; the resolver explores both outcomes."""

    key: str
    reason: str
    file: str
    line: int
    text: str
    negated: bool = False  # ``text`` holds when the input ``key`` is false (``not u``, ``u != "s"``)

    @property
    def first(self) -> bool:
        """The input's truth on the path that first meets it: the condition as written holds."""
        return not self.negated

    def input_truth(self, shown: bool) -> bool:
        """The input's truth for the condition's truth ``shown`` (a path's ``taken`` entry)."""
        return shown != self.negated


NodeT = ir.Node
