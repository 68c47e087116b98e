"""The shapes of the TOML fact files under `rules/` (`factfiles.py` loads and validates them).

Declared apart from `factfiles` and imported only when a file other than those every command
reads at start (devices, packages, env_profiles) is first loaded: building ~30 frozen
dataclasses costs ~25 ms, which every command would pay at start-up (`inputs/device.py` reads
the device table at import, the pip profile's cuDNN the package table, `pins.target_device`
the environment profiles), a result-cache hit included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sglang_audit.errors import FactFileError

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


# ---- rules/attention_support.toml ---------------------------------------------------------


@dataclass(frozen=True)
class AttentionSupportFacts:
    source: str  # the document the lists come from
    kinds: dict[str, tuple[str, ...]]  # attention kind (mha, mla) -> backends that serve it
    platforms: dict[str, tuple[str, ...]]  # non-CUDA platform -> backends only it has


# ---- rules/attention.toml -----------------------------------------------------------------


@dataclass(frozen=True)
class RunnerStamp:
    """A release's resolver of the (prefill, decode) pair, stamped on the runner as it does."""

    module: str
    function: str
    runner_kwarg: str
    attrs: dict[str, str]  # field of its result -> runner attribute


@dataclass(frozen=True)
class ProcessInit:
    """A function the runner calls to set its process's module globals before it builds a
    backend (0.5.2-0.5.13 ``initialize_dp_attention``): run with the runner's own arguments."""

    module: str
    function: str


@dataclass(frozen=True)
class AttentionRunner:
    module: str
    class_: str
    method: str  # the runner's method that builds the backend
    init_attrs: tuple[str, ...]  # runner attributes evaluated from its own assignments
    stamp: tuple[RunnerStamp, ...] = ()
    params: dict[str, int] = field(default_factory=dict)  # runner __init__ parameters: this rank's
    params_from_server_args: dict[str, str] = field(default_factory=dict)  # parameter -> server args field
    process_init: tuple[ProcessInit, ...] = ()  # process set-up the runner calls before building
    memory: RunnerMemory | None = None  # the KV pool the runner builds (None: unknown runtime state)


@dataclass(frozen=True)
class RunnerMemory:
    """The KV-cache pool a model runner builds (issue 42, resolve/kvpool.py), by the release's code."""

    derived_attrs: tuple[str, ...]  # runner attributes its own no-argument method sets (found by the assignment)
    pool_attr: str  # the runner attribute holding the pool
    builder: str  # the configurator's method that picks and builds the pool class
    builder_caller: str  # the configurator's method calling it (its keyword arguments evaluated from there)
    configurator_attr: str  # the runner attribute holding the configurator (one of derived_attrs)
    pool_base_module: str
    pool_base_class: str  # every KV pool subclasses it
    model_attr: str = ""  # the runner attribute holding the loaded model (resolve/model_standin.py)
    statement_attrs: tuple[str, ...] = ()  # set where the model is loaded: their statement evaluated on first read


@dataclass(frozen=True)
class AttentionBackendFacts:
    base_module: str
    base_class: str  # every attention backend subclasses it
    verdict_files: tuple[str, ...]  # an explicit raise in these files is SGLang's verdict
    process_state_modules: tuple[str, ...]
    optional_packages: tuple[str, ...]
    warn_only: tuple[str, ...] = ()  # functions that only warn: not evaluated
    kernel_modules: tuple[str, ...] = ()  # kernels compiled/loaded at run time: calls return unknown


@dataclass(frozen=True)
class AttentionKernelFacts:
    """Where a release registers its backends, and the kernel libraries read (issue 42)."""

    registry_module: str  # the module holding the registry's creators
    registry_decorator: str  # the decorator naming each creator's backend
    libraries: dict[str, str]  # import name of a kernel library -> its label ("sgl_kernel" -> "sgl-kernel")


@dataclass(frozen=True)
class AttentionRequest:
    """What the model worker calls on a built backend per batch (issue 42): the methods, the
    batch and layer classes the stand-ins subclass, and the forward modes explored per role."""

    batch_module: str  # the module of the ForwardBatch and ForwardMode classes
    batch_class: str
    mode_class: str
    layer_module: str  # the attention layer handed to ``forward``
    layer_class: str
    methods: tuple[str, ...]  # called once per mode with the stand-in batch
    graph_methods: tuple[str, ...] = ()  # called once when CUDA graphs are on
    target_modes: tuple[str, ...] = ()  # ForwardMode members (those the release has)
    target_speculative_modes: tuple[str, ...] = ()
    draft_modes: tuple[str, ...] = ()
    verdict_files: tuple[str, ...] = ()  # besides the backend's: SGLang's own kernel wrappers
    # a method taking **kwargs (forward) gets the None-default keywords all of these declare
    forward_kwargs_from: tuple[str, ...] = ()


@dataclass(frozen=True)
class AttentionFacts:
    runner: AttentionRunner
    backend: AttentionBackendFacts
    kernel: AttentionKernelFacts | None = None  # None: no kernel level for attention
    request: AttentionRequest | None = None  # None: the backend's request-time methods are not called


# ---- rules/speculative.toml ---------------------------------------------------------------


@dataclass(frozen=True)
class SpecScheduler:
    """The scheduler's method that builds the draft worker and its stand-in's attributes."""

    module: str
    class_: str
    method: str  # builds the draft worker: the class the dispatch returns, with its kwargs
    dispatch: str  # the algorithm's method that returns the worker class (SGLang's own dispatch)
    worker_attr: str = "draft_worker"  # the scheduler's attribute holding the worker built
    target_attr: str = ""  # the scheduler's attribute holding the target's model worker ("": none called)
    algorithm_attr: str = "spec_algorithm"  # the attribute its __init__ builds the algorithm object in
    then: tuple[str, ...] = ()  # worker methods the scheduler calls after building it (if it does)
    params: dict[str, int] = field(default_factory=dict)  # the worker's kwargs that are this rank's


@dataclass(frozen=True)
class SpecWorkerFacts:
    """What the worker's construction may do and where its verdicts live."""

    model_worker_module: str
    model_worker_class: str  # builds a model runner (the draft's or the target's): stood in
    verdict_files: tuple[str, ...]  # an explicit raise in these files is SGLang's verdict
    process_state_modules: tuple[str, ...]
    kernel_modules: tuple[str, ...] = ()  # kernels compiled/loaded at run time: calls return unknown
    published_getter: str = ""  # the getter of the published server args the model runner writes on


@dataclass(frozen=True)
class SpeculativeFacts:
    scheduler: SpecScheduler
    worker: SpecWorkerFacts


# ---- rules/boundaries.toml ----------------------------------------------------------------


@dataclass(frozen=True)
class Boundary:
    function: str  # a function of SGLang answered from the device or config.json, not evaluated
    module: str  # fnmatch pattern of the modules defining it
    kind: str  # how it is answered (world/overlays/boundaries.py)


@dataclass(frozen=True)
class BoundariesFacts:
    boundary: tuple[Boundary, ...]


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
    # decorators (module.name) turning a validator into a dataclass-field factory whose
    # ``default=`` is the field's default: ``F(...)(default=D)`` with F returning such a function
    field_factories: tuple[str, ...] = ()
