"""The result data model shared by every stage after evaluation.

Plain frozen dataclasses, serialisable to JSON.  Renderers and rules read only these,
never the evaluator.  The JSON shape is versioned by ``SCHEMA_VERSION``; see
``docs/json-schema.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

SCHEMA_VERSION = 1

STATUS_RESOLVED = "resolved"
STATUS_UNKNOWN = "unknown"
STATUS_UNSUPPORTED = "unsupported"
STATUS_REJECTED = "rejected"

# a chain step's part in the decision (provenance.py): the step that produced the value the
# setting ends with (one per setting), the user's flag or the declared default it started
# from, an earlier value it held, a step that only copied/applied the decided value, an
# input the decision's guards read
ROLE_DECISION = "decision"
ROLE_ORIGIN = "origin"
ROLE_WRITE = "write"
ROLE_APPLIED = "applied"
ROLE_INPUT = "input"  # a value the decision's guards read (a user flag, a predicate's result)


@dataclass(frozen=True)
class UnknownValue:
    """A value the tool cannot state: why, and the values it may take (with conditions)."""

    reason: str
    candidates: tuple[Candidate, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"unknown": self.reason, "candidates": [c.to_json() for c in self.candidates]}


@dataclass(frozen=True)
class Candidate:
    value: Any  # a string/None, or "rejected: <message>"
    when: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "when": list(self.when)}


def built_what(stage: str) -> str:
    """What a layer stage of this kind builds, as every output names it."""
    return {"attention": "the attention backend", "speculative": "the speculative worker",
            "linear": "the dense linear layers"}.get(stage, "the MoE layers")


def agreeing(what: str, verb: str) -> str:
    """``verb`` (plural form: "fail", "raise") agreeing with ``what``: "the MoE layers fail",
    "the attention backend fails"."""
    return verb if what.endswith("layers") else verb + "s"


def built_fails(stage: str) -> tuple[str, str]:
    """What the stage builds and "fail"/"fails", the verb agreeing with it."""
    built = built_what(stage)
    return built, agreeing(built, "fail")


@dataclass(frozen=True)
class LayerValue:
    """What the MoE layers built with a setting do (sglang_audit/layers.py): the kernel entry
    point apply() reaches (`resolved`), the raise it hits (`unsupported`, SGLang's message and
    location), or `unknown` with the reason and the candidates of each branch."""

    status: str  # resolved | unsupported | unknown
    value: str | None  # the kernel entry point, or "<Exception>: <message>"
    method: str = ""  # the FusedMoEMethodBase subclass get_quant_method picked
    runner: str = ""  # the backend create_moe_runner built its MoeRunner with ("" if none)
    site: str = ""  # file:line of the dispatch call or the raise
    code: str = ""
    exception: str = ""
    reason: str = ""
    candidates: tuple[Candidate, ...] = ()
    paths: int = 1  # layer branches explored (branches on unknown tensors)
    # asserts on tensor data/metadata some branch hits: they fail only for a checkpoint that
    # violates them, so they are reported, never taken as the verdict
    data_dependent: tuple[str, ...] = ()
    # how it got there: quant config, method, runner, and the branch conditions of the dispatch
    chain: tuple[ChainStep, ...] = ()
    # optional packages the layer code imported, with the state assumed (--with/--without flip it)
    assumptions: tuple[str, ...] = ()
    # "moe": the MoE layers (layers.py; they decide the published value again), "attention": the
    # attention backend's construction (attention.py; it builds the published value or raises),
    # "speculative": the speculative worker (spec_worker.py; the class built, or SGLang's raise),
    # "linear": the dense linear layers (linear.py; the quant methods built, or SGLang's raise)
    stage: str = "moe"
    # the optional-package forks: "<package> <state>: <outcome>" for the state not assumed
    forks: tuple[str, ...] = ()
    # attention: the draft worker's own backend (its runner is built with is_draft_worker)
    draft: Any = None
    # the kernel call's tensor arguments as the abstract tensors know them (issue 41):
    # "name: dtype (shape)", a dim or dtype not known printed "?"; () when none is known
    tensors: tuple[str, ...] = ()
    # attention: the kernel-library objects the construction built, as SGLang's code called them
    # (the first branch's): (dotted name, SGLang's file:line, ((keyword or "" for a positional
    # argument, repr of its value or "?" when not plain data), ...)); read by the attention
    # kernel level (attnkernels: FlashInfer's wrapper dispatch), not printed
    library_calls: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = ()
    # attention (issue 42): the kernel-library functions the built backend calls serving a
    # batch, as (module, name, SGLang call site, the undecided branch it sits under or "");
    # the attention kernel level reads their guards as it reads the constructor's imports
    kernel_calls: tuple[tuple[str, str, str, str], ...] = ()
    # attention (issue 42/44): the arguments SGLang passed those calls, as far as the evaluator
    # knew them (resolve/kernelargs.py), as (module.name, call site, ((keyword or "", encoded),
    # ...)); the kernel level runs the library's guards with them; not printed
    kernel_call_args: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = ()
    # linear (issue 42): why the built layers' forward reached no call when every run of it
    # stopped (SGLang's raise with its site, or the evaluator's stop): () when some run ended
    forward_stops: tuple[str, ...] = ()
    # linear (issue 42): what the forward was read on when it was read on every dense linear
    # layer the model's own constructor builds ("the 390 linear layers X.__init__ builds"; ""
    # when only on the layers the value speaks for), the linear methods they took as (method
    # class, layers, where it was instantiated), and what of that was not followed to its end
    # (a construction, a layer's forward, the budget): see ``calls_into``
    forward_scope: str = ""
    layer_methods: tuple[tuple[str, int, str], ...] = ()
    forward_gaps: tuple[str, ...] = ()
    # speculative (issue 42): the attention backend classes the worker's construction built on
    # every explored branch (the draft's, DraftBackendFactory's), as (module, class, SGLang's
    # file:line, the arguments as SGLang passed them as in library_calls); read by the
    # attention kernel level as it reads the registry creator's class, not printed
    backends_built: tuple[tuple[str, str, str, tuple[tuple[str, str], ...]], ...] = ()

    @property
    def what(self) -> str:
        """What was built, as every output names it (the stage's construction)."""
        return built_what(self.stage)

    def calls_into(self, libraries: tuple[str, ...], functions: tuple[str, ...] = ()) -> bool:
        """Whether a forward read called one of ``functions`` (any, when empty) of ``libraries``."""
        return any(m.split(".")[0] in libraries and (not functions or n in functions) for m, n, _s, _c in self.kernel_calls)

    def never_calls(self, libraries: tuple[str, ...], functions: tuple[str, ...] = ()) -> str:
        """The derived fact (issue 42): "" unless the forward was read on every dense linear
        layer the model builds, each followed to its end, and none called one of ``functions``
        of ``libraries``; then what decided it: the linear methods the layers took, and where."""
        if not self.forward_scope or self.forward_gaps or self.calls_into(libraries, functions):
            return ""
        methods = ", ".join(f"{m} ({n} of them{f', {at}' if at else ''})" for m, n, at in self.layer_methods)
        return f"no forward of {self.forward_scope} calls it: they take {methods}"

    @property
    def unsettled_absences(self) -> tuple[str, ...]:
        """Optional packages the outcome assumed absent only because a plain install lacks them
        (neither the release nor the user decided), unless their fork failed too (the same
        outcome, or another raise of SGLang's: the setting fails in either state): an
        ``unsupported`` that rests on one of these is a condition, not a verdict."""
        out = []
        for a in self.assumptions:
            pkg, _, state = a.partition(": ")
            if not state.startswith("absent (") or state.startswith("absent (--without"):
                continue  # decided by the user; else a plain install's or the environment profile's absence
            fork = next((f for f in self.forks if f.startswith(f"with {pkg} installed")), None)
            if fork is not None:
                other = self.fork_outcome(pkg) or ""
                if not fork.endswith("(the same outcome)") and not other.startswith(f"{STATUS_UNSUPPORTED}: "):
                    out.append(pkg)
            elif self.exception in ("ImportError", "ModuleNotFoundError") or pkg in (self.value or ""):
                # the other state was not evaluated (explain, matrix): only a raise about a
                # missing module, or one naming the package, is taken to rest on it
                out.append(pkg)
        return tuple(out)

    def fork_outcome(self, package: str) -> str | None:
        """The outcome with ``package`` in the other state, if that fork was evaluated."""
        fork = next((f for f in self.forks if f.startswith((f"with {package} installed", f"without {package} "))), None)
        return fork.split("): ", 1)[1] if fork and "): " in fork else None

    def to_json(self) -> dict[str, Any]:
        return {
            "chain": [c.to_json() for c in self.chain], "assumptions": list(self.assumptions),
            "status": self.status, "value": self.value, "method": self.method, "runner": self.runner,
            "site": self.site, "code": self.code, "exception": self.exception, "reason": self.reason,
            "candidates": [c.to_json() for c in self.candidates], "paths": self.paths,
            "data_dependent": list(self.data_dependent), "stage": self.stage, "forks": list(self.forks),
            "draft": self.draft.to_json() if isinstance(self.draft, LayerValue) else None,
        } | ({"tensors": list(self.tensors)} if self.tensors else {}) \
          | ({"kernel_calls": [list(c) for c in self.kernel_calls]} if self.kernel_calls else {}) \
          | ({"forward_stops": list(self.forward_stops)} if self.forward_stops else {}) \
          | ({"forward_scope": self.forward_scope, "forward_gaps": list(self.forward_gaps),
              "layer_methods": [list(m) for m in self.layer_methods]} if self.forward_scope else {})


@dataclass(frozen=True)
class ChainStep:
    """One decision: where, the guard(s) as written, the value it produced."""

    file: str
    line: int
    guard: str
    value: Any
    code: str = ""
    layer: str = "config"  # "config" | "runtime"
    kind: str = "write"  # "default" | "flag" | "write" | "return" | "runtime"
    role: str = ""  # ROLE_* ("" on steps not made by the resolver, e.g. a rejection)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file, "line": self.line, "guard": self.guard, "value": self.value,
            "code": self.code, "layer": self.layer, "kind": self.kind, "role": self.role,
        }


# what KernelLayer.says and KernelVerdict.status hold (resolve/kernels.py, kernelread.py)
KERNEL_SUPPORTED = "supported"
KERNEL_UNSUPPORTED = "unsupported"
KERNEL_UNKNOWN = "unknown"


@dataclass(frozen=True)
class KernelLayer:
    """What one layer of the kernel library's code says about the device (kernels.py)."""

    mechanism: str  # "backend_requirement" | "supported_compute_capability" | "helper" | "jit" | "artifact" | "call_site"
    function: str
    file: str  # relative to the dir holding the library package, e.g. flashinfer/gemm/gemm_base.py
    line: int
    says: str  # "supported" | "unsupported" | "unknown"
    detail: str  # the requirement as written
    enforced: bool = True  # False: declared, but not a check on SGLang's path (a helper)

    def to_json(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "function": self.function, "file": self.file, "line": self.line,
                "says": self.says, "detail": self.detail, "enforced": self.enforced}


@dataclass(frozen=True)
class KernelVerdict:
    """Whether the kernel library declares the called kernel for the device."""

    status: str  # "supported" | "unsupported" | "unknown"
    library: str  # "flashinfer", "sgl-kernel", ...
    version: str | None  # the library version read
    function: str  # the entry point, e.g. "flashinfer.mm_fp4"
    backend: str  # the backend key passed ("trtllm"), "" when none
    reason: str  # one line: the deciding requirement, or why unknown
    layers: tuple[KernelLayer, ...] = ()
    conditions: tuple[str, ...] = ()  # call-time conditions not evaluated (shapes, dtypes), as written
    call_site: str = ""  # the SGLang file:line that imports the entry
    # issue 42: no layer of the model calls the entry (LayerValue.never_calls): why, with the
    # evidence; the library's declaration is then no question (status unknown, never read)
    unused: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "library": self.library, "version": self.version,
                "function": self.function, "backend": self.backend, "reason": self.reason,
                "layers": [layer.to_json() for layer in self.layers],
                "conditions": list(self.conditions), "call_site": self.call_site} \
            | ({"unused": self.unused} if self.unused else {})


@dataclass(frozen=True)
class Setting:
    name: str
    config: Any  # str | None | UnknownValue
    runtime: Any  # str | None | UnknownValue
    status: str
    chain: tuple[ChainStep, ...] = ()
    note: str = ""
    present: bool = True  # False: the release has no such field
    # what the layers do with the published value when the model is built (rules/layers.toml);
    # None: not applicable (the value is concrete, or no listed method re-decides it)
    layer: Any = None  # None | UnknownValue | LayerValue
    # whether the kernel library declares the kernel this value calls for the device
    # (kernels.py, attached after resolution); None: no kernel-library question
    kernel: KernelVerdict | None = None

    @property
    def effective(self) -> Any:
        """The value that takes effect: the runtime initialiser's when there is one, else
        the config value. The one definition every command uses."""
        return self.runtime if self.runtime is not None else self.config

    @property
    def deciding(self) -> ChainStep | None:
        """The step that produced the effective value (provenance.py), None when the value
        is not known or its producer could not be traced. The one definition every command
        uses."""
        if isinstance(self.effective, UnknownValue):
            return None
        return next((s for s in self.chain if s.role == ROLE_DECISION), None)

    def produced(self, layer: str) -> ChainStep | None:
        """The step that produced this layer's value ("config", "runtime"): the layer's
        decision, else where its value entered (the user's flag, the declared default);
        never a step that only copied it (``applied``)."""
        steps = [s for s in self.chain if s.layer == layer]
        return (next((s for s in steps if s.role == ROLE_DECISION), None)
                or next((s for s in steps if s.role == ROLE_ORIGIN), None))

    def with_kernel(self, verdict: KernelVerdict) -> Setting:
        """This setting with the kernel library's verdict, its status folded in as the layers'
        is (resolver): a value ServerArgs resolves whose kernel the library does not declare
        for the device is ``unsupported`` (exit 1), never printed "(resolved)". An unknown
        verdict leaves the status: the kernel line says why (prebuilt cubins, call-time shapes)."""
        status = STATUS_UNSUPPORTED if verdict.status == KERNEL_UNSUPPORTED and self.status == STATUS_RESOLVED else self.status
        return replace(self, kernel=verdict, status=status)

    @property
    def unused(self) -> str:
        """Why no layer of the model calls this setting's kernel (its value is still what
        ServerArgs resolved): the derived fact every command reads (recommend drops the field,
        a known-bad rule about it holds nowhere, the renderers say it); "" when some layer may."""
        return self.kernel.unused if self.kernel is not None else ""

    @property
    def applied(self) -> tuple[ChainStep, ...]:
        """Steps that only copied or applied the decided value."""
        return tuple(s for s in self.chain if s.role == ROLE_APPLIED)

    def to_json(self) -> dict[str, Any]:
        deciding = self.deciding
        return {
            "config": _value_json(self.config),
            "runtime": _value_json(self.runtime),
            "layer": _value_json(self.layer),
            "effective": _value_json(self.effective),
            "status": self.status,
            "deciding": deciding.to_json() if deciding is not None else None,
            "chain": [s.to_json() for s in self.chain],
            "note": self.note,
            "present": self.present,
            "kernel": self.kernel.to_json() if self.kernel else None,
        }


@dataclass(frozen=True)
class Rejection:
    message: str
    file: str
    line: int
    exception: str = "ValueError"
    stage: str = "config"  # config | runtime | model
    code: str = ""
    when: tuple[str, ...] = ()  # conditions, when only some paths reject

    def to_json(self) -> dict[str, Any]:
        return {
            "message": self.message, "file": self.file, "line": self.line,
            "exception": self.exception, "stage": self.stage, "code": self.code,
            "when": list(self.when),
        }


@dataclass(frozen=True)
class ModelSummary:
    name: str
    path: str
    architecture: Any
    quantization: Any  # ModelConfig.quantization as the release computes it
    config_quant_method: Any  # quant_method in config.json
    draft_architecture: Any = None
    draft_quantization: Any = None
    # what reading the model's config assumed (e.g. a remote config class not at hand)
    assumptions: tuple[str, ...] = ()
    # ModelConfig.attention_arch as the release computes it ("MLA", "MHA", "SSM"): the model
    # runner's use_mla_backend is `attention_arch == MLA`, which the MLA/non-MLA attention rules
    # ask (a release that does not know an architecture as MLA builds it as MHA). A rule fact,
    # not printed: the resolve JSON keeps its shape.
    attention_arch: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "path": self.path, "assumptions": list(self.assumptions),
            "architecture": _value_json(self.architecture),
            "quantization": _value_json(self.quantization),
            "config_quant_method": self.config_quant_method,
            "draft_architecture": _value_json(self.draft_architecture),
            "draft_quantization": _value_json(self.draft_quantization),
        }


@dataclass(frozen=True)
class LogLine:
    file: str
    line: int
    level: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "level": self.level, "message": self.message}


@dataclass(frozen=True)
class Resolution:
    source: dict[str, Any]  # SourceTree.to_json()
    structure: str
    device: dict[str, Any]
    model: ModelSummary
    flags: dict[str, Any]
    env: dict[str, str]
    rejected: Rejection | None
    settings: dict[str, Setting]
    rejections: tuple[Rejection, ...] = ()  # conditional rejections (some paths only)
    paths: int = 1
    analysis_notes: tuple[str, ...] = ()
    logs: tuple[LogLine, ...] = ()
    # (path under the tree, sha256 of its content) of every source file the answer read
    files_read: tuple[tuple[str, str], ...] = field(default=())
    # the kernel library source read for the settings' `kernel` verdicts (kernels.py):
    # {"library", "version", "origin"} or {"library", "error"}; None: not needed/not read
    kernel_source: dict[str, Any] | None = None
    # the environment profile the answer assumed (inputs/profiles.Profile.to_json), where it is
    # more than a plain pip install on CUDA (whose packages each layer's assumptions state)
    environment: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "source": {"version": self.source.get("version"), "flashinfer": self.source.get("flashinfer"), "origin": self.source.get("origin")},
            "structure": self.structure,
            "device": self.device,
            "model": self.model.to_json(),
            "flags": self.flags,
            "env": self.env,
            **({"environment": self.environment} if self.environment is not None else {}),
            "rejected": self.rejected.to_json() if self.rejected else None,
            "rejections": [r.to_json() for r in self.rejections],
            "settings": {k: self.settings[k].to_json() for k in self.settings},
            "paths": self.paths,
            "analysis_notes": list(self.analysis_notes),
            "logs": [entry.to_json() for entry in self.logs],
            "kernel_source": self.kernel_source,
            "files_read": [{"path": p, "sha256": h} for p, h in self.files_read],
        }


def _value_json(value: Any) -> Any:
    if isinstance(value, (UnknownValue, LayerValue)):
        return value.to_json()
    return value
