"""The TOML fact files under `rules/`, each loaded once into frozen, validated dataclasses.

A fact file's shape is a dataclass (`factschema.py`; those of the device, package and
environment-profile tables here, read by every command at start); `load(schema, name)` parses `rules/NAME` once per
process and checks every key against the dataclass's annotations (str, int, float, bool,
tuple[X, ...], dict[str, X], `X | None`, nested dataclasses, a list of tables as a tuple of
dataclasses). A key the schema does not know, a missing one without a default, or a value of
the wrong type is a `FactFileError` whose one line names the file and the field
(`rules/settings.toml: entry.class: expected a string, got 3`). TOML keys that are Python
keywords (`class`) are fields with a trailing underscore (`class_`).

To add a fact file: a frozen dataclass in `factschema.py` (its fields are the file's keys,
defaults where a key may be omitted), a `functools.cache`d accessor here calling `load`, and a
test of one bad value in `tests/test_fact_files.py`.
"""

from __future__ import annotations

import dataclasses
import functools
import keyword
import tomllib
import types
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from sglang_audit.errors import FactFileError
from sglang_audit.shipped import rules_dir

if TYPE_CHECKING:
    from sglang_audit import factschema as fs
    from sglang_audit.factschema import *  # noqa: F403 - the shapes, as factfiles.<Name>

T = TypeVar("T")


def __getattr__(name: str) -> Any:
    """The shapes declared in factschema.py, as ``factfiles.<Name>``, imported on first use."""
    if name.startswith("__"):
        # the import system's probes (`from factfiles import X` asks for __path__): never a
        # shape, and answering must not import factschema (~25 ms on every command)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from sglang_audit import factschema

    try:
        return getattr(factschema, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


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
        if len(inner) == 1:
            return _value(inner[0], value, file, where)
        for alt in inner:  # the first alternative the value is (str | int | bool: in that order)
            try:
                return _value(alt, value, file, where)
            except FactFileError:
                continue
        wants = " or ".join(_WANT.get(a, "a table") for a in inner)
        raise FactFileError(f"{file}: {where}: expected {wants}, got {_shown(value)}")
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
    want = _WANT[tp]
    ok = isinstance(value, tp) and not (tp is int and isinstance(value, bool))
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise FactFileError(f"{file}: {where}: expected {want}, got {_shown(value)}")
    return value


_WANT: dict[Any, str] = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _key(name: str) -> str:
    base = name[:-1] if name.endswith("_") else name
    return base if keyword.iskeyword(base) else name


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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


# ---- the other files: their shapes in factschema.py, imported on first use -------------


# ---- rules/settings.toml ------------------------------------------------------------------


@functools.cache
def settings() -> fs.SettingsFacts:
    """rules/settings.toml: the settings resolved, the entry points, the runtime initialisers."""
    from sglang_audit import factschema as fs

    return load(fs.SettingsFacts, "settings.toml")




# ---- rules/eras.toml ----------------------------------------------------------------------


@functools.cache
def eras() -> fs.ErasFacts:
    """rules/eras.toml: the resolution structures, recognised by fingerprints of the tree."""
    from sglang_audit import factschema as fs

    return load(fs.ErasFacts, "eras.toml")


# ---- rules/predicates.toml ----------------------------------------------------------------


@functools.cache
def predicates() -> fs.PredicatesFacts:
    """rules/predicates.toml: the hardware predicates and where they live."""
    from sglang_audit import factschema as fs

    return load(fs.PredicatesFacts, "predicates.toml")


# ---- rules/graph.toml ---------------------------------------------------------------------


@functools.cache
def graph() -> fs.GraphFacts:
    """rules/graph.toml: where the decision graph looks and the names that hold a ServerArgs."""
    from sglang_audit import factschema as fs

    return load(fs.GraphFacts, "graph.toml")


# ---- rules/matrix.toml --------------------------------------------------------------------


@functools.cache
def matrix() -> fs.MatrixFacts:
    """rules/matrix.toml: the matrix's default sweep and the known-rejection hints."""
    from sglang_audit import factschema as fs

    return load(fs.MatrixFacts, "matrix.toml")


# ---- rules/attention_support.toml ---------------------------------------------------------


@functools.cache
def attention_support() -> fs.AttentionSupportFacts:
    """rules/attention_support.toml: which attention backends serve which kind of model."""
    from sglang_audit import factschema as fs

    return load(fs.AttentionSupportFacts, "attention_support.toml")


# ---- rules/attention.toml -----------------------------------------------------------------


@functools.cache
def attention() -> fs.AttentionFacts:
    """rules/attention.toml: the model runner that builds the attention backend, and the backends."""
    from sglang_audit import factschema as fs

    return load(fs.AttentionFacts, "attention.toml")


# ---- rules/speculative.toml ---------------------------------------------------------------


@functools.cache
def speculative() -> fs.SpeculativeFacts:
    """rules/speculative.toml: the scheduler that builds the speculative worker, and its checks."""
    from sglang_audit import factschema as fs

    return load(fs.SpeculativeFacts, "speculative.toml")


# ---- rules/boundaries.toml ----------------------------------------------------------------


@functools.cache
def boundaries() -> fs.BoundariesFacts:
    """rules/boundaries.toml: SGLang's functions answered from the device or the model's config."""
    from sglang_audit import factschema as fs

    return load(fs.BoundariesFacts, "boundaries.toml")


# ---- rules/hf_config.toml -----------------------------------------------------------------


@functools.cache
def hf_config() -> fs.HFConfigFacts:
    """rules/hf_config.toml: how a model's config.json is read as transformers would."""
    from sglang_audit import factschema as fs

    return load(fs.HFConfigFacts, "hf_config.toml")


# ---- rules/env_profiles.toml --------------------------------------------------------------
# its shapes are declared here, not in factschema.py: every command selects the environment
# profile at start (pins.target_device), a result-cache hit included


def _release_bounds(fact: Any, what: str) -> None:
    """A fact's `since`/`until` parse as release versions (compared with the release's)."""
    from packaging.version import InvalidVersion, Version

    for key in ("since", "until"):
        value = getattr(fact, key)
        try:
            if value is not None:
                Version(value)
        except InvalidVersion:
            raise FactFileError(f"rules/env_profiles.toml: {what}.{key}: not a release version: {value!r}") from None


@dataclass(frozen=True)
class ProfileEntry:
    summary: str
    why: str = ""
    default_for: tuple[str, ...] = ()  # the device platforms this profile is the default of


@dataclass(frozen=True)
class ImagePackage:
    name: str  # an import name
    installed: bool
    source: str  # the Dockerfile line that installs it (or leaves it out)
    since: str | None = None  # first release the fact holds for
    until: str | None = None  # first release it no longer holds for

    def __post_init__(self) -> None:
        _release_bounds(self, f"package {self.name}")


@dataclass(frozen=True)
class ImageEnv:
    name: str
    value: str
    source: str
    since: str | None = None
    until: str | None = None

    def __post_init__(self) -> None:
        _release_bounds(self, f"env {self.name}")


@dataclass(frozen=True)
class Image:
    name: str
    dockerfile: str
    read: tuple[str, ...]  # the stored versions of the Dockerfile read
    flavour: str = ""
    since: str | None = None
    until: str | None = None
    package: tuple[ImagePackage, ...] = ()
    env: tuple[ImageEnv, ...] = ()

    def __post_init__(self) -> None:
        _release_bounds(self, f"image {self.name!r}")


@dataclass(frozen=True)
class EnvProfilesFacts:
    profile: dict[str, ProfileEntry]  # "pip", "image"
    image: dict[str, Image] = field(default_factory=dict)  # device platform -> its image

    def __post_init__(self) -> None:
        if "pip" not in self.profile:
            raise FactFileError("rules/env_profiles.toml: profile.pip: missing (the fallback of every platform)")


@functools.cache
def env_profiles() -> EnvProfilesFacts:
    """rules/env_profiles.toml: the named environment profiles (pip, the platform's image)."""
    return load(EnvProfilesFacts, "env_profiles.toml")




# ---- rules/torch_pins.toml ----------------------------------------------------------------
# declared here too: the pip profile's cuDNN is read at start when the index is not asked


@dataclass(frozen=True)
class TorchPin:
    dist: str  # the nvidia-cudnn distribution torch's metadata requires
    cudnn: str  # its pinned version
    marker: str  # the requirement's environment marker, as written
    read: str  # the metadata file it was read from


@dataclass(frozen=True)
class TorchPinsFacts:
    torch: dict[str, TorchPin]  # torch version -> its cuDNN pin


@functools.cache
def torch_pins() -> TorchPinsFacts:
    """rules/torch_pins.toml: the cuDNN each torch version pins (the offline fallback)."""
    return load(TorchPinsFacts, "torch_pins.toml")


# ---- rules/kernels.toml (declared here, not in factschema: resolve/kernels.py reads it on
# every resolve, a result-cache hit included) ------------------------------------------------


@dataclass(frozen=True)
class KernelRow:
    """A setting's value that makes SGLang call a FlashInfer entry point (``resolve/kernels.py``)."""

    setting: str  # the SGLang setting (target or draft) whose value selects the kernel
    model: str  # "target" | "draft": whose quantization ``quantization`` is matched against
    values: tuple[str, ...]  # the setting's values (runtime value when there is one, else config)
    quantization: tuple[str, ...]  # ModelConfig.quantization values for which SGLang reaches it
    callers: tuple[str, ...]  # SGLang modules that import the entry (the first found is cited)
    entry: str  # dotted name as SGLang imports it (flashinfer.mm_fp4)
    backend: str  # the backend key SGLang passes (backend=), "" when the entry takes none
    source: str  # where the mapping comes from
    helper: str = ""  # an is_*_supported helper next to the entry
    jit: str = ""  # the module getter the entry calls
    jit_arch_param: str = ""  # the getter's parameter receiving the capability as a string
    # a key of the target checkpoint's config.json quantization_config that must be set (not
    # null) for SGLang to reach the entry: Fp8LinearMethod dispatches the FP8 GEMM runner only
    # for a block-quantized checkpoint (weight_block_size); "" when the quantization alone decides
    quant_config_key: str = ""

    def __post_init__(self) -> None:
        if self.quant_config_key and self.model != "target":
            raise FactFileError(f"rules/kernels.toml: kernel {self.setting}: quant_config_key: read from the "
                                "target checkpoint only (model = 'target')")
        if self.model not in ("target", "draft"):
            raise FactFileError(f"rules/kernels.toml: kernel {self.setting}: model: expected 'target' or 'draft', "
                                f"got {self.model!r}")
        if "." not in self.entry:
            raise FactFileError(f"rules/kernels.toml: kernel {self.setting}: entry: expected a dotted name, "
                                f"got {self.entry!r}")


@dataclass(frozen=True)
class OtherKernel:
    """A setting's value whose kernel is in a library sglang-audit does not read: unknown, why."""

    setting: str
    values: tuple[str, ...]
    quantization: tuple[str, ...]  # empty: any
    library: str
    reason: str
    quant_config_key: str = ""  # as KernelRow's: the target checkpoint must set it


@dataclass(frozen=True)
class LayerCall:
    """A setting whose kernel is the kernel-library function its built layers' forward calls
    (``LayerValue.kernel_calls`` of the ``layer`` setting's value, the linear stage's), read in
    the library as a [[kernel]] row's entry is, with the ``backend=`` SGLang passed."""

    setting: str  # the setting the verdict is given to
    layer: str  # the setting whose layer value holds the calls (the linear stage's: quantization)
    libraries: tuple[str, ...]  # the calls into these libraries are read (flashinfer)
    quantization: tuple[str, ...]  # the target's ModelConfig.quantization values
    source: str  # why the call is that setting's
    quant_config_key: str = ""  # as KernelRow's: the target checkpoint must set it
    # the called functions that are the setting's (mm_fp4, not the activation's fp4_quantize
    # the same forward calls first); empty: the forward's first call into `libraries`
    functions: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelsFacts:
    kernel: tuple[KernelRow, ...]
    other: tuple[OtherKernel, ...] = ()
    layer_call: tuple[LayerCall, ...] = ()


@functools.cache
def kernels() -> KernelsFacts:
    """rules/kernels.toml: the FlashInfer entry point each setting's value makes SGLang call."""
    return load(KernelsFacts, "kernels.toml")


# ---- rules/layers.toml --------------------------------------------------------------------
# Declared here, not in factschema.py: the layer stages read it on every resolve.

# A process value (`[moe.process_values]`, process objects): a server-args field name or an
# "a/b" quotient of two (str), or a literal (int, bool); `process_value` computes it.
ProcessValue = str | int | bool


@dataclass(frozen=True)
class GlobalServerArgs:
    module: str
    setter: str  # releases before the publish() bag: the setter the scheduler calls


@dataclass(frozen=True)
class LoaderQuantConfig:
    module: str
    function: str
    variable: str  # the function's variable holding the quant config
    when_model_config: tuple[str, ...]  # ModelConfig facts that make the loader change it


@dataclass(frozen=True)
class WorkerGroups:
    module: str
    getter: str
    declarations: str
    computed_by: str
    stamp: str


@dataclass(frozen=True)
class MoeImplClass:
    """The function a model calls for the class of its MoE layers (``get_moe_impl_class(quant_config)``)."""

    module: str
    function: str


@dataclass(frozen=True)
class A2aFormat:
    """One dispatch output an all-to-all dispatcher hands the layer: SGLang's class (its
    fields are its annotated ones) and the mode method of the release's DeepEP mode that says
    whether the layer sees it."""

    label: str
    class_: str
    mode_method: str


@dataclass(frozen=True)
class A2aBatch:
    """A kind of batch the layer runs on under any other all-to-all: the value the release's
    batch getter (``batch_getter``) answers for it (True: an extend/prefill batch)."""

    label: str
    extend: bool


@dataclass(frozen=True)
class A2aDispatch:
    """The all-to-all backends whose dispatcher hands the layer these formats (not the
    standard dispatch output), and where the release's mode getter and classes are. Under
    any other backend but none, the dispatcher the layer built says what it sees: its
    attribute on the layer (``dispatcher_attr``), the list a wrapper holds its dispatchers in
    (``wrapper_attr``), the method that picks the implementation for the batch
    (``impl_getter``, reading ``batch_getter``, a module-qualified function), the methods
    whose return is the dispatch output (``output_methods``, first found), and the ``batches``
    it is asked for. ``none_method``: the backend's method saying it is none."""

    backends: tuple[str, ...]
    module: str
    mode_module: str
    a2a_getter: str
    mode_getter: str
    formats: tuple[A2aFormat, ...]
    none_method: str = ""
    dispatcher_attr: str = ""
    wrapper_attr: str = ""
    impl_getter: str = ""
    batch_getter: str = ""
    output_methods: tuple[str, ...] = ()
    batches: tuple[A2aBatch, ...] = ()


@dataclass(frozen=True)
class MoeRunnerFacts:
    module: str
    class_: str


@dataclass(frozen=True)
class SpeculativeSwap:
    """One shape of the draft model's swap to the speculative MoE runner: a module global
    (``global_``) or a path in a flags object (``flags``, ``path``) set from ``getter``."""

    module: str
    getter: str
    global_: str = ""
    flags: str = ""
    path: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if bool(self.global_) == bool(self.flags) or (self.flags and not self.path):
            raise FactFileError(f"rules/layers.toml: moe.speculative_swap {self.getter}: expected either global, "
                                "or flags with a path")


@dataclass(frozen=True)
class MoeLayerFacts:
    layer_module: str
    layer_class: str
    dispatch_module: str
    dispatch_class: str
    dispatch_fields: tuple[str, ...]
    quant_registry_module: str
    quant_registry_function: str
    moe_keys: tuple[str, ...]
    prefix: str
    draft_prefix: str
    first_moe_layer_keys: tuple[str, ...]
    process_state_modules: tuple[str, ...]
    verdict_files: tuple[str, ...]
    tensor_markers: tuple[str, ...]
    regex_aliases: dict[str, str]
    regex_compile: tuple[str, ...]
    optional_packages: tuple[str, ...]
    global_server_args: GlobalServerArgs
    process_values: dict[str, ProcessValue]
    init_args: dict[str, tuple[str, ...]]
    speculative_swap: tuple[SpeculativeSwap, ...]
    runner: MoeRunnerFacts
    loader_quant_config: LoaderQuantConfig | None = None
    worker_groups: WorkerGroups | None = None
    jit_builders: tuple[str, ...] = ()
    impl_class: MoeImplClass | None = None
    a2a_dispatch: A2aDispatch | None = None


@dataclass(frozen=True)
class ModelRegistryFacts:
    package: str
    entry: str
    body_files: tuple[str, ...]
    external_env: str
    process_state_modules: tuple[str, ...]
    pure_functions: tuple[str, ...] = ()
    torch_module_attrs: tuple[str, ...] = ()  # torch.nn.Module's own: never a model's SGLang API
    # getter -> attribute -> a process value, or a nested object's attributes
    process_objects: dict[str, dict[str, ProcessValue | dict[str, ProcessValue]]] = field(default_factory=dict)


@dataclass(frozen=True)
class LayerKernel:
    """A kernel entry point: SGLang's own ``function`` or an outside ``external`` one."""

    label: str
    function: str = ""
    external: str = ""

    def __post_init__(self) -> None:
        if bool(self.function) == bool(self.external):
            raise FactFileError(f"rules/layers.toml: kernel {self.label!r}: expected exactly one of function, external")


@dataclass(frozen=True)
class RunnerKernel:
    backend: str
    quant_info: str
    module: str
    call: str
    label: str


@dataclass(frozen=True)
class LinearLayer:
    """One dense layer the cheap build makes at config.json's shapes (``args``: dimension names,
    ``a*b``/``a//b``, or ``[a,b]``), skipped when config.json has any of ``unless``."""

    name: str
    class_: str
    prefix: str
    args: tuple[str, ...]
    unless: tuple[str, ...] = ()


@dataclass(frozen=True)
class LinearFacts:
    module: str
    base_class: str
    first_layer: str  # a regex on a layer's prefix: the first decoder layer
    next_layer: str  # ... and the second, where recording stops
    verdict_files: tuple[str, ...]
    dims: dict[str, tuple[str, ...]]  # a dimension -> config.json keys, first present wins
    layer: tuple[LinearLayer, ...]
    logical_groups: tuple[str, ...] = ()
    pure_functions: tuple[str, ...] = ()
    derived: dict[str, str] = field(default_factory=dict)  # a dimension -> an expression of others
    forward: str = ""  # the quant method's forward (``apply(layer, x)``), run for its kernel calls
    kernel_libraries: tuple[str, ...] = ()  # the packages whose functions the forward's calls are noted


@dataclass(frozen=True)
class LayersFacts:
    moe: MoeLayerFacts
    model_registry: ModelRegistryFacts
    linear: LinearFacts
    kernel: tuple[LayerKernel, ...]
    runner_kernel: tuple[RunnerKernel, ...] = ()


@functools.cache
def layers() -> LayersFacts:
    """rules/layers.toml: the MoE layer, the model registry and the kernel entry points the layer
    stages evaluate SGLang's code against."""
    return load(LayersFacts, "layers.toml")
