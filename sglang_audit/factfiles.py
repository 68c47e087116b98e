"""The TOML fact files under `rules/`, each loaded once into frozen, validated dataclasses.

A fact file's shape is a dataclass here; `load(schema, name)` parses `rules/NAME` once per
process and checks every key against the dataclass's annotations (str, int, float, bool,
tuple[X, ...], dict[str, X], `X | None`, nested dataclasses, a list of tables as a tuple of
dataclasses). A key the schema does not know, a missing one without a default, or a value of
the wrong type is a `FactFileError` whose one line names the file and the field
(`rules/settings.toml: entry.class: expected a string, got 3`). TOML keys that are Python
keywords (`class`) are fields with a trailing underscore (`class_`).

To add a fact file: a frozen dataclass (its fields are the file's keys, defaults where a key
may be omitted), a `functools.cache`d accessor calling `load`, and a test of one bad value in
`tests/test_fact_files.py`.
"""

from __future__ import annotations

import dataclasses
import functools
import keyword
import tomllib
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sglang_audit.errors import AuditError
from sglang_audit.shipped import rules_dir

T = TypeVar("T")


class FrozenDict(dict[str, Any]):
    """A fact file's table: read like a dict (and pickled like one, so a value that holds it can
    cross to a worker process), never changed: the loaded facts are shared by every caller."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a fact file's table is read-only")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = __ior__ = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=lambda kv: kv[0])))


class FactFileError(AuditError):
    """A shipped fact file that does not have its schema's shape: a broken build or edit."""


def load(schema: type[T], name: str) -> T:
    """`rules/NAME` as ``schema``, validated (`FactFileError` naming the file and field)."""
    path = rules_dir() / name
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise FactFileError(f"rules/{name}: cannot be read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise FactFileError(f"rules/{name}: not valid TOML ({exc})") from None
    return convert(schema, data, f"rules/{name}", "")


def convert(schema: type[T], data: Any, file: str, where: str) -> T:
    """``data`` (parsed TOML) as the dataclass ``schema``; ``where`` is the dotted key so far."""
    if not isinstance(data, dict):
        raise FactFileError(f"{file}: {where or 'the file'}: expected a table, got {_shown(data)}")
    hints = typing.get_type_hints(schema)
    fields = {_key(f.name): f for f in dataclasses.fields(schema)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        known = ", ".join(sorted(fields))
        raise FactFileError(f"{file}: {_at(where, unknown[0])}: not a known key (known: {known})")
    kwargs: dict[str, Any] = {}
    for key, f in fields.items():
        if key not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise FactFileError(f"{file}: {_at(where, key)}: missing")
            continue
        kwargs[f.name] = _value(hints[f.name], data[key], file, _at(where, key))
    return schema(**kwargs)


def _value(tp: Any, value: Any, file: str, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _value(inner[0], value, file, where)
    if dataclasses.is_dataclass(tp):
        return convert(tp, value, file, where)  # type: ignore[arg-type]
    if origin is tuple:
        if not isinstance(value, list):
            raise FactFileError(f"{file}: {where}: expected a list, got {_shown(value)}")
        return tuple(_value(args[0], v, file, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise FactFileError(f"{file}: {where}: expected a table, got {_shown(value)}")
        return FrozenDict({k: _value(args[1], v, file, _at(where, k)) for k, v in value.items()})
    if tp is Any:
        return value
    want = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}[tp]
    ok = isinstance(value, tp) and not (tp is int and isinstance(value, bool))
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise FactFileError(f"{file}: {where}: expected {want}, got {_shown(value)}")
    return value


def _key(name: str) -> str:
    base = name[:-1] if name.endswith("_") else name
    return base if keyword.iskeyword(base) else name


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---- rules/settings.toml ------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleClass:
    module: str
    class_: str
    factory: str = ""


@dataclass(frozen=True)
class ModuleFunction:
    module: str
    function: str


@dataclass(frozen=True)
class Entry:
    module: str
    class_: str
    resolution_reader: ModuleFunction
    model_config: ModuleClass
    after_init: tuple[str, ...] = ()


@dataclass(frozen=True)
class Publish:
    module: str
    function: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    # keyword -> [class in the same module, positional args...]; "__none__" is None
    constructed: dict[str, tuple[Any, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class RuntimeInitialiser:
    module: str
    initializer: str
    getters: dict[str, str]
    when_model_has: tuple[str, ...] = ()


@dataclass(frozen=True)
class Expected:
    serving_modules: tuple[str, ...] = ()


@dataclass(frozen=True)
class SettingsFacts:
    settings: tuple[str, ...]
    entry: Entry
    moe_layer_settings: tuple[str, ...] = ()
    renamed: dict[str, str] = field(default_factory=dict)
    publish: Publish | None = None
    runtime: tuple[RuntimeInitialiser, ...] = ()
    expected: Expected = Expected()

    def __post_init__(self) -> None:
        for name in (*self.moe_layer_settings, *self.renamed,
                     *(k for r in self.runtime for k in r.getters)):
            if name not in self.settings:
                raise FactFileError(f"rules/settings.toml: {name}: named outside `settings`, which does not list it")


@functools.cache
def settings() -> SettingsFacts:
    """rules/settings.toml: the settings resolved, the entry points, the runtime initialisers."""
    return load(SettingsFacts, "settings.toml")


# ---- rules/packages.toml ------------------------------------------------------------------


@dataclass(frozen=True)
class BasePackages:
    installed: tuple[str, ...]  # what every install has (the release's own hard requirements' imports)
    default_extras: tuple[str, ...]  # the extras `pip install sglang` takes


@dataclass(frozen=True)
class Namespace:
    by: str  # the distribution that installs only part of the import name
    full: tuple[str, ...]  # the distributions that install all of it
    submodules: tuple[str, ...]


@dataclass(frozen=True)
class OptionalPackages:
    absent: tuple[str, ...]  # optional packages a plain install lacks


@dataclass(frozen=True)
class PackagesFacts:
    import_names: dict[str, str]  # distribution name -> import name
    base: BasePackages
    optional: OptionalPackages
    namespace: dict[str, Namespace] = field(default_factory=dict)


@functools.cache
def packages() -> PackagesFacts:
    """rules/packages.toml: distribution → import names, what every install has, what a plain
    install lacks."""
    return load(PackagesFacts, "packages.toml")


# ---- rules/eras.toml ----------------------------------------------------------------------


@dataclass(frozen=True)
class Fingerprint:
    """One condition on the tree: a path that exists or is missing, or a file's text."""

    exists: str = ""
    missing: str = ""
    file: str = ""
    contains: str = ""
    regex: str = ""

    def __post_init__(self) -> None:
        kinds = [k for k in ("exists", "missing", "file") if getattr(self, k)]
        if len(kinds) != 1 or bool(self.file) != bool(self.contains or self.regex) or (self.contains and self.regex):
            raise FactFileError("rules/eras.toml: a condition is one of {exists}, {missing}, "
                                f"{{file, contains}} or {{file, regex}}, not {self}")


@dataclass(frozen=True)
class Era:
    name: str
    conditions: tuple[Fingerprint, ...] = ()  # all hold
    any: tuple[tuple[Fingerprint, ...], ...] = ()  # or: one of these groups holds entirely

    def __post_init__(self) -> None:
        if not self.conditions and not self.any:
            raise FactFileError(f"rules/eras.toml: era {self.name!r}: neither conditions nor any")

    @property
    def alternatives(self) -> tuple[tuple[Fingerprint, ...], ...]:
        return self.any or (self.conditions,)


@dataclass(frozen=True)
class ErasFacts:
    era: tuple[Era, ...]  # probed in order, newest first
    oldest_validated: str = ""


@functools.cache
def eras() -> ErasFacts:
    """rules/eras.toml: the resolution structures, recognised by fingerprints of the tree."""
    return load(ErasFacts, "eras.toml")


# ---- rules/predicates.toml ----------------------------------------------------------------


@dataclass(frozen=True)
class PlatformFacts:
    module: str
    accessor: str  # get_platform()
    tables: tuple[str, ...]  # the module's dict literals of fact name -> probe name


@dataclass(frozen=True)
class PredicatesFacts:
    modules: tuple[str, ...]
    names: tuple[str, ...]  # the hardware predicates
    platform: PlatformFacts | None = None


@functools.cache
def predicates() -> PredicatesFacts:
    """rules/predicates.toml: the hardware predicates and where they live."""
    return load(PredicatesFacts, "predicates.toml")


# ---- rules/devices.toml -------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceFacts:
    major: int
    minor: int
    name: str  # the typical product torch names
    memory_mib: int  # per GPU: drives memory-derived settings only
    sm_count: int  # torch's multi_processor_count


@dataclass(frozen=True)
class DevicesFacts:
    cuda: dict[str, DeviceFacts]  # --arch name -> device, in --help's order
    hip: dict[str, DeviceFacts]


@functools.cache
def devices() -> DevicesFacts:
    """rules/devices.toml: the devices --arch names."""
    return load(DevicesFacts, "devices.toml")


# ---- rules/graph.toml ---------------------------------------------------------------------


@dataclass(frozen=True)
class GraphLayout:
    config_dirs: tuple[str, ...]  # where SGLang's configuration code lives
    field_packages: tuple[str, ...]


@dataclass(frozen=True)
class GraphNames:
    arg_bases: tuple[str, ...]  # names that hold a ServerArgs
    view_calls: tuple[str, ...]  # calls that return one


@dataclass(frozen=True)
class GraphFacts:
    layout: GraphLayout
    names: GraphNames


@functools.cache
def graph() -> GraphFacts:
    """rules/graph.toml: where the decision graph looks and the names that hold a ServerArgs."""
    return load(GraphFacts, "graph.toml")


# ---- rules/matrix.toml --------------------------------------------------------------------


@dataclass(frozen=True)
class RejectionHintFacts:
    id: str
    message_contains: str  # a substring of SGLang's message (whitespace-normalised when matched)
    set: tuple[str, ...]  # KEY=VALUE to add, as for --set
    why: str
    alternative: str = ""
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class MatrixFacts:
    archs: tuple[str, ...]
    models: tuple[str, ...]
    model_sets: dict[str, tuple[str, ...]]  # model -> the flags it is deployed with
    flag_sets: dict[str, tuple[str, ...]]  # name -> KEY=VALUE items
    rejection_hints: tuple[RejectionHintFacts, ...] = ()


@functools.cache
def matrix() -> MatrixFacts:
    """rules/matrix.toml: the matrix's default sweep and the known-rejection hints."""
    return load(MatrixFacts, "matrix.toml")


# ---- rules/attention_support.toml ---------------------------------------------------------


@dataclass(frozen=True)
class AttentionSupportFacts:
    source: str  # the document the lists come from
    kinds: dict[str, tuple[str, ...]]  # attention kind (mha, mla) -> backends that serve it
    platforms: dict[str, tuple[str, ...]]  # non-CUDA platform -> backends only it has


@functools.cache
def attention_support() -> AttentionSupportFacts:
    """rules/attention_support.toml: which attention backends serve which kind of model."""
    return load(AttentionSupportFacts, "attention_support.toml")


# ---- rules/attention.toml -----------------------------------------------------------------


@dataclass(frozen=True)
class RunnerStamp:
    """A release's resolver of the (prefill, decode) pair, stamped on the runner as it does."""

    module: str
    function: str
    runner_kwarg: str
    attrs: dict[str, str]  # field of its result -> runner attribute


@dataclass(frozen=True)
class AttentionRunner:
    module: str
    class_: str
    method: str  # the runner's method that builds the backend
    init_attrs: tuple[str, ...]  # runner attributes evaluated from its own assignments
    stamp: tuple[RunnerStamp, ...] = ()
    params: dict[str, int] = field(default_factory=dict)  # runner __init__ parameters: this rank's
    params_from_server_args: dict[str, str] = field(default_factory=dict)  # parameter -> server args field


@dataclass(frozen=True)
class AttentionBackendFacts:
    base_module: str
    base_class: str  # every attention backend subclasses it
    verdict_files: tuple[str, ...]  # an explicit raise in these files is SGLang's verdict
    process_state_modules: tuple[str, ...]
    optional_packages: tuple[str, ...]
    warn_only: tuple[str, ...] = ()  # functions that only warn: not evaluated


@dataclass(frozen=True)
class AttentionFacts:
    runner: AttentionRunner
    backend: AttentionBackendFacts


@functools.cache
def attention() -> AttentionFacts:
    """rules/attention.toml: the model runner that builds the attention backend, and the backends."""
    return load(AttentionFacts, "attention.toml")


# ---- rules/boundaries.toml ----------------------------------------------------------------


@dataclass(frozen=True)
class Boundary:
    function: str  # a function of SGLang answered from the device or config.json, not evaluated
    module: str  # fnmatch pattern of the modules defining it
    kind: str  # how it is answered (target/overlays/boundaries.py)


@dataclass(frozen=True)
class BoundariesFacts:
    boundary: tuple[Boundary, ...]


@functools.cache
def boundaries() -> BoundariesFacts:
    """rules/boundaries.toml: SGLang's functions answered from the device or the model's config."""
    return load(BoundariesFacts, "boundaries.toml")


# ---- rules/hf_config.toml -----------------------------------------------------------------


@dataclass(frozen=True)
class TransformersRope:
    converter: str  # PreTrainedConfig's rope conversion method (transformers 5)
    checks: tuple[str, ...]
    plain_getattribute: tuple[str, ...]
    self_passed_to: tuple[str, ...]


@dataclass(frozen=True)
class HFConfigFacts:
    subconfig_keys: tuple[str, ...]
    release_config_modules: tuple[str, ...]  # fnmatch patterns of the release's config modules
    text_config_keys: tuple[str, ...]
    defaults: dict[str, Any]  # PretrainedConfig's defaults; "__none__" is None
    transformers_rope: TransformersRope


@functools.cache
def hf_config() -> HFConfigFacts:
    """rules/hf_config.toml: how a model's config.json is read as transformers would."""
    return load(HFConfigFacts, "hf_config.toml")
