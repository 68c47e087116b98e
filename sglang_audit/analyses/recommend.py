"""``recommend``: the fastest configuration expected to work on this device, with the evidence.

Candidates are the choices the release declares (the flag table) for the backend settings
that matter for the model, pruned cheapest first:

1. one resolution per choice of one field, the others as the user has them (the same
   forcing ``explain`` does): a choice SGLang rejects, rewrites to another value, whose
   kernel FlashInfer declares unsupported, whose layer evaluation says unsupported, or that
   a known-bad *error* rule flags (for the field or the draft runner that inherits it) is
   rejected here with that one reason;
2. the survivors combined (the draft inheriting the target's runner, or forced to another
   runner that survived for the target: "target X + draft Y"), each combination resolved
   once and checked again; at most ``max_resolutions`` resolutions in all, both stages.

With ``explore=("attention",)`` the attention backend is a field too, its choices first
pruned by SGLang's support matrix (``rules/attention_support.toml``) without a resolution.

The viable ones are ranked by evidence, strongest first: the user's own benchmark lines
(``--bench``), published measurements (``rules/perf/*.yaml``, each with its source URL and
hardware), then SGLang's own ``auto`` pick on this device (file:line). Two candidates that
nothing separates are said to be "no evidence: benchmark both". No number is made up.

Why this module is long: candidates, the two pruning stages, the ranking and the commands
share the result types and the private helpers above them; split apart, each piece would
import the others' internals.
"""

from __future__ import annotations

import itertools
import json
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sglang_audit import factfiles
from sglang_audit.errors import InputError
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.modeldir import model_checkpoint
from sglang_audit.resolve.pipeline import (
    Prepared,
    Request,
    any_to_evaluate,
    entry_snapshot,
    prepare,
    progress_done,
    resolve_target,
    with_kernels,
)
from sglang_audit.resolve.resolver import Target
from sglang_audit.resolve.resultcache import ResultCache
from sglang_audit.resolve.workers import run_all
from sglang_audit.result import ChainStep, LayerValue, Resolution, Setting, UnknownValue, agreeing
from sglang_audit.shipped import rules_dir
from sglang_audit.userfiles import UserFileError, read_user_file, safe_yaml_load

SCHEMA = "sglang-audit-recommend/1"
DRAFT_MOE = "speculative_moe_runner_backend"
SPEC = "speculative_algorithm"  # its layer value: the speculative worker built (resolve/spec_worker.py)
MOE = "moe_runner_backend"
FP4 = "fp4_gemm_runner_backend"
FP8 = "fp8_gemm_runner_backend"
A2A = "moe_a2a_backend"
# explored in this order (the cheap single-field stage resolves each choice of each); the
# draft runner comes after them (its choices depend on what survived for the target)
EXPLORED = (MOE, FP4, FP8, A2A)
ATTENTION = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
NOT_EXPLORED = ATTENTION  # unless --explore attention (each choice is a full resolution)
EXPLORE_OPTIONS = ("attention",)
DEFAULT_MAX_RESOLUTIONS = 32
NO_EVIDENCE = "no evidence: benchmark both"

# bench_serving result fields (sglang/benchmark/serving.py `result = {...}`) and whether
# higher is better; the first one present in a line ranks it
BENCH_METRICS: tuple[tuple[str, bool], ...] = (
    ("output_throughput", True), ("total_throughput", True), ("request_throughput", True),
    ("median_tpot_ms", False), ("median_itl_ms", False), ("median_e2e_latency_ms", False),
)
PERF_FIELDS = ("id", "setting", "choice", "arch_family", "model_family", "quantization", "metric", "better",
               "value", "unit", "hardware", "workload", "comparison", "source")

REASON_REJECTED = "rejected"  # SGLang raises
REASON_REWRITTEN = "rewritten"  # SGLang replaces the choice: not a distinct configuration
REASON_KERNEL = "kernel"  # the kernel library declares the device unsupported
REASON_LAYER = "layer"  # the layer evaluation says unsupported
REASON_KNOWN_BAD = "known_bad"  # a known-bad error rule matches
REASON_UNKNOWN = "unknown"  # the tool cannot tell: never called viable
REASON_DUPLICATE = "duplicate"  # resolves to the same values as an earlier candidate
REASON_SUPPORT_MATRIX = "support_matrix"  # SGLang's attention support matrix lists it elsewhere (not resolved)


@dataclass(frozen=True)
class Reason:
    """The one reason a candidate was removed."""

    kind: str
    message: str
    where: str = ""  # file:line (SGLang or FlashInfer)
    rule: str = ""
    sources: tuple[str, ...] = ()
    stage: str = "single"  # single | combined

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "where": self.where or None,
                "rule": self.rule or None, "sources": list(self.sources), "stage": self.stage}


@dataclass(frozen=True)
class Evidence:
    kind: str  # bench | published | sglang_auto
    text: str
    metric: str = ""
    value: float | None = None
    hardware: str = ""
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "metric": self.metric or None, "value": self.value,
                "hardware": self.hardware or None, "source": self.source or None}


@dataclass(frozen=True)
class Candidate:
    """A configuration: the explored flags forced, and the values SGLang ends with."""

    flags: tuple[tuple[str, str], ...]  # forced (field, choice)
    values: tuple[tuple[str, Any], ...] = ()  # effective value of each explored field (+ draft)
    reason: Reason | None = None
    evidence: tuple[Evidence, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.flags)

    def value(self, name: str) -> Any:
        return dict(self.values).get(name)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "flags": dict(self.flags), "values": {k: _plain(v) for k, v in self.values},
                "reason": self.reason.to_json() if self.reason else None,
                "evidence": [e.to_json() for e in self.evidence], "notes": list(self.notes)}


@dataclass(frozen=True)
class Step:
    """Why a ranked candidate sits above the next one."""

    above: str
    below: str
    decided_by: str  # bench | published | sglang_auto | none
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"above": self.above, "below": self.below, "decided_by": self.decided_by, "text": self.text}


@dataclass(frozen=True)
class Recommendation:
    resolution: Resolution  # the request as given
    fields: tuple[str, ...]  # explored
    current: tuple[tuple[str, Any], ...]  # effective values of the explored fields now
    auto: tuple[tuple[str, Any, str], ...]  # (field, SGLang's auto pick, file:line)
    viable: tuple[Candidate, ...]  # ranked, best first
    steps: tuple[Step, ...]
    rejected: tuple[Candidate, ...]
    not_evaluated: tuple[Candidate, ...]
    resolutions: int
    max_resolutions: int
    launch: str  # the recommended launch command
    changes: tuple[tuple[str, Any, Any], ...]  # (field, now, recommended)
    bench_plan: tuple[str, ...]
    bench_lines: int = 0
    notes: tuple[str, ...] = ()

    @property
    def recommended(self) -> Candidate | None:
        return self.viable[0] if self.viable else None

    def to_json(self) -> dict[str, Any]:
        res = self.resolution
        return {
            "schema": SCHEMA,
            "source": {"version": res.source.get("version"), "flashinfer": res.source.get("flashinfer")},
            "device": res.device, "model": res.model.to_json(), "flags": res.flags,
            "fields": list(self.fields),
            "not_explored": [f for f in NOT_EXPLORED if f in res.settings and f not in self.fields],
            "current": {k: _plain(v) for k, v in self.current},
            "sglang_auto": [{"field": f, "value": _plain(v), "where": w or None} for f, v, w in self.auto],
            "recommended": self.recommended.to_json() if self.recommended else None,
            "launch": self.launch,
            "changes": [{"field": f, "now": _plain(a), "recommended": _plain(b)} for f, a, b in self.changes],
            "viable": [c.to_json() for c in self.viable],
            "ranking": [s.to_json() for s in self.steps],
            "rejected": [c.to_json() for c in self.rejected],
            "not_evaluated": [c.to_json() for c in self.not_evaluated],
            "resolutions": self.resolutions, "max_resolutions": self.max_resolutions,
            "bench_lines": self.bench_lines, "bench_plan": list(self.bench_plan), "notes": list(self.notes),
        }


def _plain(value: Any) -> Any:
    return value.to_json() if isinstance(value, UnknownValue) else value


# ---- published measurements -----------------------------------------------------------------
@dataclass(frozen=True)
class Measurement:
    id: str
    setting: str
    choice: str
    arch_family: str  # sm10x, sm12x, sm9x (knownbad.arch_family's spelling)
    model_family: str
    quantization: str
    metric: str
    better: str  # higher | lower
    value: float
    unit: str
    hardware: str
    workload: str
    comparison: str  # measurements of one experiment share it
    source: str

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in PERF_FIELDS}


def perf_dir() -> Path:
    return rules_dir() / "perf"


def load_measurements(directory: Path | None = None) -> tuple[Measurement, ...]:
    """Every entry of ``rules/perf/*.yaml``; a malformed entry is an error, not skipped."""
    out: list[Measurement] = []
    for path in sorted((directory or perf_dir()).glob("*.yaml")):
        data = safe_yaml_load(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("measurements"), list):
            raise InputError(f"{path.name}: expected a mapping with a 'measurements' list")
        defaults = {k: v for k, v in data.items() if k != "measurements"}
        for i, entry in enumerate(data["measurements"]):
            if not isinstance(entry, dict):
                raise InputError(f"{path.name}: measurement {i} is not a mapping")
            merged = {**defaults, **entry}
            missing = [k for k in PERF_FIELDS if merged.get(k) in (None, "")]
            if missing:
                raise InputError(f"{path.name}: measurement {i} lacks {', '.join(missing)}")
            if merged["better"] not in ("higher", "lower") or not isinstance(merged["value"], (int, float)):
                raise InputError(f"{path.name}: measurement {i}: better must be higher|lower and value a number")
            fields: dict[str, Any] = {k: (float(merged[k]) if k == "value" else str(merged[k])) for k in PERF_FIELDS}
            out.append(Measurement(**fields))
    return tuple(out)


# ---- user benchmark lines ------------------------------------------------------------------
@dataclass(frozen=True)
class BenchLine:
    tag: str | None
    server: dict[str, Any]  # server_info's fields, when the line has them
    metric: str
    higher_better: bool
    value: float
    line: int


def read_bench(path: str) -> tuple[BenchLine, ...]:
    """JSON lines written by ``sglang.bench_serving --output-file`` (or bench_one_batch_server):
    each ranked by the first metric of ``BENCH_METRICS`` it carries."""
    try:
        text = read_user_file(path, "bench file").decode("utf-8", errors="replace")
    except UserFileError as exc:
        raise InputError(str(exc)) from None
    out: list[BenchLine] = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{n}: not a JSON line ({exc.msg})") from None
        if not isinstance(data, dict):
            raise InputError(f"{path}:{n}: expected a JSON object")
        metric = next(((m, hi) for m, hi in BENCH_METRICS if isinstance(data.get(m), (int, float))), None)
        if metric is None:
            raise InputError(f"{path}:{n}: no result field ({', '.join(m for m, _ in BENCH_METRICS)})")
        info = data.get("server_info")
        server = info if isinstance(info, dict) else {}
        if isinstance(server.get("server_args"), dict):  # some releases nest the ServerArgs
            server = {**server, **server["server_args"]}
        tag = data.get("tag")
        out.append(BenchLine(tag if isinstance(tag, str) else None, server, metric[0], metric[1],
                             float(data[metric[0]]), n))
    return tuple(out)


def _bench_for(c: Candidate, lines: tuple[BenchLine, ...], fields: tuple[str, ...]) -> BenchLine | None:
    """The line measured on this configuration: tagged with its id, or whose server_info
    reports the same value for every explored field."""
    mine = [b for b in lines if b.tag == c.id]
    if not mine:
        mine = [b for b in lines if b.server and all(f in b.server for f in fields)
                and all(b.server.get(f) in (c.value(f), dict(c.flags).get(f)) for f in fields)]
    return max(mine, key=lambda b: b.value if b.higher_better else -b.value) if mine else None


# ---- the analysis ----------------------------------------------------------------------------
class _Run:
    """Resolutions through one SourceCache and result cache, counted."""

    def __init__(self, request: Request, prep: Prepared, cache: SourceCache, limit: int, jobs: int = 1) -> None:
        self.request, self.prep, self.cache, self.limit, self.jobs = request, prep, cache, limit, jobs
        # as explain and report: the tree listed once for every key (a resolution is stored
        # only if it read the content keyed, so an edit during the run is never kept)
        self.results = ResultCache(enabled=request.use_cache, stable_tree=True)
        self.count = 0
        self.memo: dict[tuple[tuple[str, Any], ...], Resolution] = {}

    @staticmethod
    def _key(flags: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
        return tuple(sorted(flags.items(), key=lambda kv: kv[0]))

    def can_resolve(self, flags: dict[str, Any]) -> bool:
        """Within the bound, or already resolved (a repeat costs nothing)."""
        return self.count < self.limit or self._key(flags) in self.memo

    def resolve(self, flags: dict[str, Any]) -> Resolution:
        key = self._key(flags)
        if key not in self.memo:
            self.memo[key] = self._resolve(flags)
            self.count += 1
        return self.memo[key]

    def _resolve(self, flags: dict[str, Any]) -> Resolution:
        target: Target = replace(self.prep.target, flags=flags)
        res = resolve_target(target, self.cache, self.results)
        return with_kernels(res, target, self.cache, self.request.flashinfer_source, results=self.results)

    def prefetch(self, many: Iterable[dict[str, Any]]) -> None:
        """Resolve now, in worker processes, what a loop of ``can_resolve``/``resolve``
        over ``many`` would resolve: in order, the flags not resolved yet, until the bound.
        The loop then finds each in ``memo``, and counts and stops as it would have."""
        todo: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}
        for flags in many:
            key = self._key(flags)
            if key in self.memo or key in todo:
                continue
            if self.count + len(todo) >= self.limit:
                break  # the loop resolves nothing new past the bound
            todo[key] = flags
        if self.jobs < 2 or len(todo) < 2:
            return  # the loop resolves them in this process
        # the combinations differ only in their flags: the entry module is loaded once and
        # each resolved in a process forked from that state (resolver.EntrySnapshot)
        targets = [replace(self.prep.target, flags=flags) for flags in todo.values()]
        if not any_to_evaluate(targets, self.results):
            return  # every one stored: the loop answers them here, cheaper than forking workers
        with entry_snapshot(targets, self.cache, self.results) as fresh:
            resolved = run_all(self._resolve, list(todo.values()), self.jobs, fresh=fresh)
        for key, res in zip(todo, resolved, strict=True):
            self.memo[key] = res
            self.count += 1


def _where(step: ChainStep | None) -> str:
    return f"{step.file}:{step.line}" if step is not None else ""


def _kernel_where(setting: Setting) -> str:
    k = setting.kernel
    if k is None:
        return ""
    bad = [layer for layer in k.layers if layer.says == "unsupported"]
    return f"{bad[0].file}:{bad[0].line}" if bad else k.call_site


def _layer_unsupported(setting: Setting) -> bool:
    draft = getattr(setting.layer, "draft", None)  # the draft worker's attention backend
    return getattr(setting.layer, "status", None) == "unsupported" or getattr(draft, "status", None) == "unsupported"


def _reason(res: Resolution, forced: dict[str, str], watched: tuple[str, ...], rules: tuple[Any, ...],
            stage: str) -> Reason | None:
    """The first reason (cheapest evidence first) this resolution cannot be recommended."""
    if res.rejected is not None:
        r = res.rejected
        return Reason(REASON_REJECTED, f"SGLang rejects it: {r.exception}: {r.message}", f"{r.file}:{r.line}", stage=stage)
    for name, choice in forced.items():
        s = res.settings.get(name)
        if s is None or not s.present:
            continue
        if isinstance(s.effective, UnknownValue):
            return Reason(REASON_UNKNOWN, f"{name} cannot be resolved: {s.effective.reason}", stage=stage)
        if choice != "auto" and s.effective != choice:
            return Reason(REASON_REWRITTEN, f"SGLang replaces {name}={choice} with {s.effective!r}",
                          _where(s.deciding), stage=stage)
    for name in watched:
        s = res.settings.get(name)
        if s is None or not s.present:
            continue
        if s.kernel is not None and s.kernel.status == "unsupported":
            return Reason(REASON_KERNEL, f"{name}={s.effective}: {s.kernel.function} unsupported on this device: {s.kernel.reason}",
                          _kernel_where(s), stage=stage)
        if _layer_unsupported(s):
            # the layer stage's LayerValue (merged later): SGLang's raise and where it is
            failing = s.layer if getattr(s.layer, "status", None) == "unsupported" else s.layer.draft
            said = getattr(failing, "value", None) or getattr(failing, "reason", "")
            what = "the draft's attention backend" if failing is not s.layer else \
                (s.layer.what if isinstance(s.layer, LayerValue) else "the MoE layers")
            return Reason(REASON_LAYER, f"{name}={s.effective}: {what} built with it {agreeing(what, 'fail')}: {said}",
                          str(getattr(failing, "site", "") or ""), stage=stage)
    worker = _speculative_worker(res)
    if worker is not None and worker.status == "unsupported":
        # the speculative worker SGLang builds with this configuration raises (its draft
        # attention backends, the spec-v2 constraints): whatever field was forced, it fails
        return Reason(REASON_LAYER, f"{SPEC}={res.settings[SPEC].effective}: the speculative worker built with it "
                      f"fails: {worker.value}", worker.site, stage=stage)
    if rules:
        from sglang_audit.rules.knownbad import check_resolution

        for f in check_resolution(res, rules).findings:
            if f.severity == "error" and f.setting in watched:
                return Reason(REASON_KNOWN_BAD, f"{f.setting}={f.value}: {f.title}", _where(f.deciding), f.rule_id,
                              tuple(f.sources), stage=stage)
    for name in watched:
        s = res.settings.get(name)
        if s is not None and s.present and isinstance(s.effective, UnknownValue):
            return Reason(REASON_UNKNOWN, f"{name} cannot be resolved: {s.effective.reason}", stage=stage)
    return None


def _matters(field_name: str, base: Resolution, model_dir: Path) -> bool:
    """A field is explored when the model uses it: MoE runners for a model with experts,
    FP4/FP8 GEMM for checkpoints of that precision."""
    quant = " ".join(str(q).lower() for q in (base.model.quantization, base.model.config_quant_method) if q)
    setting = base.settings.get(field_name)
    if setting is not None and setting.unused:
        return False  # no layer of this model calls its kernel (issue 42): not a knob
    if field_name == MOE:
        return _has_experts(model_dir)
    if field_name == FP4:
        return "fp4" in quant
    if field_name == FP8:
        return "fp8" in quant
    if field_name == A2A:
        # all-to-all dispatch runs only across expert-parallel ranks
        return _ep_size(base) > 1 and _has_experts(model_dir)
    return False


def _ep_size(res: Resolution) -> int:
    """The expert-parallel size the user asked for (--ep-size); 1 when not given."""
    s = res.settings.get("ep_size")
    value = s.effective if s is not None and s.present and not isinstance(s.effective, UnknownValue) else res.flags.get("ep_size", 1)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 1


def _has_experts(model_dir: Path) -> bool:
    found = model_checkpoint(model_dir)
    if found.config_file.error is not None:
        return True  # cannot tell: explore it (a resolution, not a claim)
    keys = ("num_experts", "n_routed_experts", "num_local_experts", "moe_intermediate_size")
    return found.first_key(keys, bool) is not None


def recommend(request: Request, bench: str | None = None, max_resolutions: int = DEFAULT_MAX_RESOLUTIONS,
              progress: Callable[[str], None] | None = None, perf: tuple[Measurement, ...] | None = None,
              explore: tuple[str, ...] = (), jobs: int = 1, cache: SourceCache | None = None) -> Recommendation:
    """``jobs`` > 1: the resolutions of each stage run in that many worker processes (the
    same recommendation); ``cache``: a SourceCache the caller already loaded the release in."""
    if max_resolutions < 1:
        raise InputError("--max-resolutions must be at least 1")
    bad = [e for e in explore if e not in EXPLORE_OPTIONS]
    if bad:
        raise InputError(f"--explore {bad[0]}: expected one of {', '.join(EXPLORE_OPTIONS)}")
    lines = read_bench(bench) if bench else ()
    cache = cache or SourceCache(use_disk=request.use_cache)
    try:
        return _recommend(request, cache, lines, max_resolutions, progress,
                          load_measurements() if perf is None else perf, explore, jobs)
    finally:
        progress_done(progress)


def _recommend(request: Request, cache: SourceCache, lines: tuple[BenchLine, ...], limit: int,
               progress: Callable[[str], None] | None, perf: tuple[Measurement, ...],
               explore: tuple[str, ...] = (), jobs: int = 1) -> Recommendation:
    from sglang_audit.rules.knownbad import arch_family, load_rules

    prep = prepare(request, cache, progress, want_table=True)
    table = prep.table
    assert table is not None  # want_table=True
    run = _Run(request, prep, cache, limit, jobs)
    user = dict(prep.target.flags)
    base = run.resolve(user)
    notes: list[str] = []
    if base.rejected is not None:
        notes.append(f"the configuration as given is rejected by SGLang ({base.rejected.file}:{base.rejected.line}); "
                     "candidates are resolved from the same flags with the explored fields changed")
    rules = load_rules()
    fields = tuple(f for f in EXPLORED if f in base.settings and base.settings[f].present
                   and table.by_dest.get(f) is not None and table.by_dest[f].choices
                   and _matters(f, base, prep.target.model.path))
    # a field no layer of this model uses (issue 42) is said once, not enumerated
    notes += [f"{f}: not explored, {base.settings[f].unused}" for f in EXPLORED
              if f in base.settings and base.settings[f].present and base.settings[f].unused]
    if "attention" in explore:
        fields = (*fields, *_attention_fields(base, table))
    spec = base.settings.get("speculative_algorithm")
    speculative = spec is not None and spec.present and spec.effective is not None
    # the draft runner matters only when a draft model runs (it inherits the target's runner
    # unless --speculative-moe-runner-backend forces its own, where the release declares it)
    draft = MOE in fields and speculative and DRAFT_MOE in base.settings and base.settings[DRAFT_MOE].present
    draft_forced = draft and table.by_dest.get(DRAFT_MOE) is not None and bool(table.by_dest[DRAFT_MOE].choices)
    watched = (*fields, *((DRAFT_MOE,) if draft else ()))
    rejected: list[Candidate] = []
    survivors: dict[str, list[str]] = {}
    auto: list[tuple[str, Any, str]] = []
    unchecked: dict[tuple[str, str], int] = {}  # kernel points the tool could not check, per choice
    not_evaluated: list[Candidate] = []  # past the bound (both stages count against it)
    # stage 1: one field forced at a time
    for name in fields:
        choices = list(table.by_dest[name].choices or ())
        if name in ATTENTION:
            choices = _attention_choices(name, choices, base, prep.target.model.path, rejected, notes)
            s0 = base.settings[name]
            # not set by the user: what the release picks for this device and model is its own choice
            if name not in user and base.rejected is None and s0.effective is not None and not isinstance(s0.effective, UnknownValue):
                auto.append((name, s0.effective, _where(s0.deciding)))
        if progress:
            progress(f"forcing each of the {len(choices)} choices of {name}")
        run.prefetch({**user, name: choice} for choice in choices)
        survivors[name] = []
        seen: dict[Any, str] = {}
        for choice in choices:
            if not run.can_resolve({**user, name: choice}):
                if choice != "auto":
                    not_evaluated.append(Candidate(((name, choice),)))
                continue
            res = run.resolve({**user, name: choice})
            s = res.settings.get(name)
            if choice == "auto":
                if s is not None and res.rejected is None:
                    auto.append((name, s.effective, _where(s.deciding)))
                continue  # auto is one of the explicit choices, on this device
            cand = Candidate(((name, choice),), _values(res, watched))
            # only what this field (and the draft runner inheriting it) causes: the other
            # fields are still the user's, and are judged in the combined stage
            own = tuple(n for n in watched if n == name or (name == MOE and n == DRAFT_MOE))
            reason = _reason(res, {name: choice}, own, rules, "single")
            runs = _runs(res, own)
            if reason is None and s is not None and runs in seen:
                reason = Reason(REASON_DUPLICATE, f"runs like {name}={seen[runs]}{_same_kernel(res, own)}", _where(s.deciding))
            if reason is not None:
                rejected.append(replace(cand, reason=reason))
                continue
            if s is not None:
                seen[runs] = choice
            survivors[name].append(choice)
            unchecked[(name, choice)] = sum(UNCHECKED in n for n in _caveats(res, own))
    if draft_forced:
        fields = (*fields, DRAFT_MOE)
        _draft_choices(base, table.by_dest[DRAFT_MOE].choices or (), survivors, rejected, unchecked, notes)
    # stage 2: the survivors combined (a field left with none keeps the user's value; the
    # draft axis also keeps "not forced": the draft inherits the target's runner)
    axes = [[(n, c) for c in survivors[n]] + ([(n, None)] if n == DRAFT_MOE else [])
            for n in fields if survivors.get(n)]
    combos = [{n: c for n, c in p if c is not None} for p in itertools.product(*axes)] if axes else []
    # a draft forced to the target's own runner is the inheriting configuration again
    combos = [c for c in combos if DRAFT_MOE not in c or c[DRAFT_MOE] != c.get(MOE, base.settings[MOE].effective)]
    # within the bound, first the combinations closest to what runs now / SGLang's own picks
    near = {n: {base.settings[n].effective, *(v for f, v, _w in auto if f == n)} for n in fields}
    # and choices whose kernels the tool checked before those it could not
    combos.sort(key=lambda c: (sum(unchecked.get(kv, 0) for kv in c.items()), sum(v not in near[n] for n, v in c.items())))
    viable: list[Candidate] = []
    seen_values: dict[tuple[Any, ...], str] = {}
    if progress and combos:
        progress(f"resolving {len(combos)} combinations (at most {limit} resolutions in all)")
    run.prefetch({**user, **combo} for combo in combos)
    for combo in combos:
        flags = tuple(combo.items())
        if not run.can_resolve({**user, **combo}):
            not_evaluated.append(Candidate(flags))
            continue
        res = run.resolve({**user, **combo})
        cand = Candidate(flags, _values(res, watched))
        reason = _reason(res, combo, watched, rules, "combined")
        runs = _runs(res, watched)
        if reason is None and runs in seen_values:
            reason = Reason(REASON_DUPLICATE, f"runs like {seen_values[runs]}{_same_kernel(res, watched)}", stage="combined")
        if reason is not None:
            rejected.append(replace(cand, reason=reason))
            continue
        seen_values[runs] = cand.id
        viable.append(replace(cand, notes=_caveats(res, watched)))
    if not_evaluated:
        notes.append(f"{len(not_evaluated)} candidate(s) not resolved: the bound of {limit} resolutions was reached "
                     "(raise it with --max-resolutions)")
    family = arch_family(base.device)
    auto_pick = {f: v for f, v, _w in auto}
    auto_where = {f: w for f, _v, w in auto}
    ranked, steps = _rank(viable, fields, lines, perf, family, base, auto_pick, auto_where)
    current = tuple((f, base.settings[f].effective if f in base.settings else None) for f in fields)
    best = ranked[0] if ranked else None
    changes = tuple((f, now, best.value(f)) for f, now in current if best is not None and best.value(f) != now)
    launch = _launch(request, prep, best) if best is not None else ""
    plan = _bench_plan(request, prep, ranked[:3]) if ranked else ()
    if not ranked:
        notes.append("no viable configuration among the explored choices")
    return Recommendation(base, fields, current, tuple(auto), tuple(ranked), tuple(steps), tuple(rejected),
                          tuple(not_evaluated), run.count, limit, launch, changes, plan, len(lines), tuple(notes))


def _attention_fields(base: Resolution, table: Any) -> tuple[str, ...]:
    """The attention settings to explore: --attention-backend (both phases: the choice a
    published measurement was taken with, one axis instead of two), else prefill and decode
    separately where the release declares only those with choices.  A prefill/decode mix
    is not a candidate; a phase the user sets (--set prefill_attention_backend=X) stays."""
    def declared(name: str) -> bool:
        s = base.settings.get(name)
        spec = table.by_dest.get(name)
        return s is not None and s.present and spec is not None and bool(spec.choices)

    if declared("attention_backend"):
        return ("attention_backend",)
    split = ("prefill_attention_backend", "decode_attention_backend")
    return split if all(declared(n) for n in split) else ()


def attention_kind(model_dir: Path) -> str:
    """mla | mha, from the model's config.json: MLA models carry ``kv_lora_rank`` (DeepSeek
    V2/V3, Kimi K2); a hybrid model's full-attention layers are MHA."""
    found = model_checkpoint(model_dir)
    if found.config_file.error is not None:
        return "unknown"
    return "mla" if found.first_key(("kv_lora_rank",), bool) is not None else "mha"


def _attention_choices(name: str, choices: list[str], base: Resolution, model_dir: Path,
                       rejected: list[Candidate], notes: list[str]) -> list[str]:
    """The cheapest check (no resolution): SGLang's support matrix (rules/attention_support.toml).
    A choice it lists only for the other kind of model or another platform is removed with
    that source; one it does not list is not explored (said in a note)."""
    data = factfiles.attention_support()
    source = data.source
    kinds = data.kinds
    platforms = data.platforms
    kind = attention_kind(model_dir)
    platform = str(base.device.get("platform") or "cuda")
    listed = {c for cs in kinds.values() for c in cs}
    elsewhere = {c: p for p, cs in platforms.items() for c in cs}
    kept: list[str] = []
    unlisted: list[str] = []
    for c in choices:
        if c == "auto" or c not in listed:
            if c != "auto":
                unlisted.append(c)
            continue
        if c in elsewhere and elsewhere[c] != platform:
            why = f"SGLang's attention support matrix lists {c} for the {elsewhere[c]} platform, not {platform}"
        elif kind in kinds and c not in kinds[kind]:
            other = next(k for k in kinds if k != kind)
            why = f"SGLang's attention support matrix lists {c} for {other.upper()} models only; this model is {kind.upper()}"
        else:
            kept.append(c)
            continue
        rejected.append(Candidate(((name, c),), reason=Reason(REASON_SUPPORT_MATRIX, why, rule="attention_support.toml",
                                                              sources=(source,))))
    if unlisted:
        notes.append(f"{name}: {len(unlisted)} choice(s) not explored (not in SGLang's attention support matrix for "
                     f"any model: model-specific or newer backends): {', '.join(unlisted)}")
    return kept


def _draft_choices(base: Resolution, choices: Iterable[str], survivors: dict[str, list[str]],
                   rejected: list[Candidate], unchecked: dict[tuple[str, str], int], notes: list[str]) -> None:
    """The draft runner's axis, chosen without a resolution of its own (each "target X +
    draft Y" is resolved and judged in the combined stage).

    Cheapest first: only the runners that survived for the target; when the draft
    checkpoint's quantization differs from the target's, also those the target's *layers*
    refused (a refusal for that precision, which may not hold for the draft's).  A runner
    removed for the target by SGLang, the kernel library or a known-bad rule on this device
    is left out; a note names them."""
    target_out = {dict(c.flags).get(MOE): c.reason for c in rejected if len(c.flags) == 1 and c.flags[0][0] == MOE}
    q, dq = base.model.quantization, base.model.draft_quantization
    other_precision = dq is not None and not isinstance(dq, UnknownValue) and dq != q
    wanted = [c for c in choices if c != "auto" and (c in survivors.get(MOE, ()) or (
        other_precision and (r := target_out.get(c)) is not None and r.kind == REASON_LAYER))]
    left_out = [c for c in choices if c != "auto" and c not in wanted and c in target_out]
    unresolved = [c for c in choices if c != "auto" and c not in wanted and c not in target_out]
    survivors[DRAFT_MOE] = wanted
    for c in wanted:
        # the same runner on a checkpoint of the same precision: the same kernel entry (or none)
        unchecked[(DRAFT_MOE, c)] = 0 if other_precision else unchecked.get((MOE, c), 0)
    if left_out:
        notes.append(f"{DRAFT_MOE}: {len(left_out)} choice(s) not forced on their own (removed for the target "
                     "on this device and precision; see the rejected list): " + ", ".join(left_out))
    if unresolved:
        notes.append(f"{DRAFT_MOE}: {len(unresolved)} choice(s) not forced on their own (not resolved for the "
                     "target within the bound): " + ", ".join(unresolved))


def _speculative_worker(res: Resolution) -> LayerValue | None:
    """The speculative worker's layer value (resolve/spec_worker.py), None without one."""
    s = res.settings.get(SPEC)
    layer = s.layer if s is not None and s.present else None
    return layer if isinstance(layer, LayerValue) and layer.stage == "speculative" else None


def _caveats(res: Resolution, watched: tuple[str, ...]) -> tuple[str, ...]:
    """What the tool could not check for a viable candidate, said next to it."""
    out: list[str] = []
    worker = _speculative_worker(res)
    if worker is not None and worker.status == "unknown":
        out.append(f"{SPEC}: whether the speculative worker SGLang builds passes is unknown ({worker.reason})")
    for n in watched:
        s = res.settings.get(n)
        if s is None or not s.present:
            continue
        if isinstance(s.layer, UnknownValue) or getattr(s.layer, "status", None) == "unknown":
            out.append(f"{n}: the layers decide this value again when the model is built ({getattr(s.layer, 'reason', '')})")
        built = isinstance(s.layer, LayerValue) and s.layer.status == "resolved" and s.layer.stage == "moe" and s.layer.value
        if s.kernel is None and built and s.effective not in (None, "auto"):
            # the flag's name is not the kernel: the built layers name theirs
            out.append(f"{n}={s.effective}: the layers run {s.layer.value}; {UNCHECKED} for it with quantization "
                       f"{res.model.quantization} (rules/kernels.toml): device support not checked")
        elif s.kernel is None and n in (MOE, DRAFT_MOE, FP4) and s.effective not in (None, "auto"):
            out.append(f"{n}={s.effective}: {UNCHECKED} for it with quantization "
                       f"{res.model.quantization} (rules/kernels.toml): device support not checked")
        elif s.kernel is not None and s.kernel.status == "unknown":
            out.append(f"{n}={s.effective}: kernel support unknown ({s.kernel.reason})")
    return tuple(out)


def _runs(res: Resolution, names: Iterable[str]) -> tuple[Any, ...]:
    """What a configuration runs, per field: the quant method, kernel and call site its built
    layers reach when they resolved (issue 39: deep_gemm, cutlass, triton and auto all run
    sgl-kernel cutlass_moe_fp4 for 0.5.10 NVFP4 on SM120, one candidate, not four), else the
    effective value. Two choices that run alike are one candidate."""
    out: list[Any] = []
    for n in names:
        s = res.settings.get(n)
        if s is None:
            continue
        layer = s.layer
        if isinstance(layer, LayerValue) and layer.status == "resolved" and layer.stage == "moe" and layer.value:
            out.append((n, "layers", layer.method, layer.value, layer.site))
        else:
            out.append((n, s.effective))
    return tuple(out)


def _same_kernel(res: Resolution, names: Iterable[str]) -> str:
    kernels = [f"{s.layer.value} at {s.layer.site}" for n in names if (s := res.settings.get(n)) is not None
               and isinstance(s.layer, LayerValue) and s.layer.status == "resolved" and s.layer.stage == "moe" and s.layer.value]
    return f" (the layers run {'; '.join(kernels)})" if kernels else ""


def _values(res: Resolution, names: Iterable[str]) -> tuple[tuple[str, Any], ...]:
    return tuple((n, res.settings[n].effective) for n in names if n in res.settings)


# ---- ranking -----------------------------------------------------------------------------------
def _published(perf: tuple[Measurement, ...], setting: str, a: Any, b: Any, family: str,
               base: Resolution) -> tuple[int, list[Measurement]]:
    """+1 when published comparisons on this arch family favour ``a`` over ``b`` for
    ``setting``, -1 for ``b``, 0 when none compares them or the sources disagree.  Each
    source votes once (the majority of its own comparisons), so a table with many rows does
    not outvote another source measuring a different regime."""
    groups: dict[tuple[str, str, str], dict[str, Measurement]] = {}
    quant = _quant_family(base)
    for m in perf:
        if m.setting == setting and m.arch_family == family and m.choice in (a, b) and _applies(m, quant):
            groups.setdefault((m.source, m.comparison, m.metric), {})[m.choice] = m
    per_source: dict[str, int] = {}
    used: list[Measurement] = []
    for (source, _c, _m), pair in groups.items():
        if a in pair and b in pair and pair[a].value != pair[b].value:
            ma, mb = pair[a], pair[b]
            a_wins = (ma.value > mb.value) == (ma.better == "higher")
            per_source[source] = per_source.get(source, 0) + (1 if a_wins else -1)
            used += [ma, mb]
    score = sum((v > 0) - (v < 0) for v in per_source.values())
    return (1 if score > 0 else -1 if score < 0 else 0), used


def _quant_family(res: Resolution) -> str:
    """fp4 | fp8 | other: a measurement counts only for a checkpoint of its precision."""
    text = " ".join(str(q).lower() for q in (res.model.quantization, res.model.config_quant_method) if q)
    return "fp4" if "fp4" in text else "fp8" if "fp8" in text else "other"


def _applies(m: Measurement, family: str) -> bool:
    """A GEMM/MoE measurement counts only for a checkpoint of its precision; an attention
    backend's does not depend on the weights' precision (the KV cache is not the weights)."""
    return m.setting in ATTENTION or _same_quant(m, family)


def _same_quant(m: Measurement, family: str) -> bool:
    q = m.quantization.lower()
    mine = "fp4" if "fp4" in q else "fp8" if "fp8" in q else "other"
    return mine == family


def _rank(viable: list[Candidate], fields: tuple[str, ...], lines: tuple[BenchLine, ...], perf: tuple[Measurement, ...],
          family: str, base: Resolution, auto_pick: dict[str, Any], auto_where: dict[str, str]) -> tuple[list[Candidate], list[Step]]:
    """Order by a key whose parts are the evidence, strongest first: the user's measurement,
    the kernels the tool could check, published comparisons, SGLang's own auto pick.  The
    last part (fewer changes) only orders candidates no evidence separates."""
    benched = {c.id: _bench_for(c, lines, fields) for c in viable}
    options = {f: {c.value(f) for c in viable} for f in fields}

    def published(c: Candidate) -> int:
        return sum(_published(perf, f, c.value(f), other, family, base)[0]
                   for f in fields for other in options[f] if other != c.value(f))

    def key(c: Candidate) -> tuple[Any, ...]:
        b = benched[c.id]
        measured = (0, -(b.value if b.higher_better else -b.value)) if b is not None else (1, 0.0)
        return (measured, int(_unchecked(c)), -published(c),
                -sum(auto_pick.get(f) is not None and c.value(f) == auto_pick.get(f) for f in fields),
                sum(c.value(f) != base.settings[f].effective for f in fields if f in base.settings))

    ordered = sorted(viable, key=key)
    steps = [_step(a, b, key(a), key(b), benched, fields, perf, family, base, auto_pick, auto_where, options)
             for a, b in zip(ordered, ordered[1:], strict=False)]
    out = [replace(c, evidence=_evidence(c, benched[c.id], perf, fields, family, auto_pick, auto_where, _quant_family(base)))
           for c in ordered]
    return out, steps


def _step(a: Candidate, b: Candidate, ka: tuple[Any, ...], kb: tuple[Any, ...], benched: dict[str, BenchLine | None],
          fields: tuple[str, ...], perf: tuple[Measurement, ...], family: str, base: Resolution,
          auto_pick: dict[str, Any], auto_where: dict[str, str], options: dict[str, set[Any]]) -> Step:
    diff = [f for f in fields if a.value(f) != b.value(f)]
    if ka[0] != kb[0]:
        ba, bb = benched[a.id], benched[b.id]
        assert ba is not None
        text = (f"--bench line {ba.line}: {ba.metric} {ba.value:g}" +
                (f" vs line {bb.line}: {bb.metric} {bb.value:g}" if bb is not None else "; the other was not measured"))
        return Step(a.id, b.id, "bench", text)
    if ka[1] != kb[1]:
        return Step(a.id, b.id, "checked", f"the kernels of {a.id} are checked for this device; {b.id} uses one the "
                                           "tool cannot check")
    if ka[2] != kb[2]:
        for f in diff:
            verdict, used = _published(perf, f, a.value(f), b.value(f), family, base)
            if verdict > 0:
                srcs = ", ".join(sorted({m.source for m in used}))
                return Step(a.id, b.id, "published", f"{f}: published measurements on {family} favour {a.value(f)} "
                                                     f"over {b.value(f)} ({srcs})")
        wins = [(f, o, m) for f in diff for o in sorted(options.get(f, ()), key=str) if o != a.value(f)
                for v, used in [_published(perf, f, a.value(f), o, family, base)] if v > 0 for m in used]
        if wins:
            srcs = ", ".join(sorted({m.source for _f, _o, m in wins}))
            beaten = {f: sorted({str(o) for g, o, _m in wins if g == f}) for f, _o, _m in wins}
            said = "; ".join(f"{f}={a.value(f)} over {', '.join(os_)}" for f, os_ in beaten.items())
            # the other candidate's own value may be one no measurement compares: say so
            open_ = [f"{f}={b.value(f)}" for f in beaten if str(b.value(f)) not in beaten[f]]
            tail = f"; none compares it with {', '.join(open_)}" if open_ else ""
            return Step(a.id, b.id, "published", f"published measurements on {family} favour its {said} ({srcs}){tail}")
        # nothing favours a's values: b's lose to another viable choice
        losses = [(f, m) for f in diff for o in options.get(f, ()) if o != b.value(f)
                  for v, used in [_published(perf, f, b.value(f), o, family, base)] if v < 0 for m in used]
        srcs = ", ".join(sorted({m.source for _f, m in losses}))
        return Step(a.id, b.id, "published", f"published measurements on {family} favour another viable choice over "
                                             f"its {', '.join(sorted({f'{f}={b.value(f)}' for f, _m in losses}))} ({srcs})")
    if ka[3] != kb[3]:
        f = next((f for f in diff if a.value(f) == auto_pick.get(f)), diff[0] if diff else "")
        return Step(a.id, b.id, "sglang_auto", f"{f}: SGLang's auto picks {auto_pick.get(f)} on this device ({auto_where.get(f)})")
    return Step(a.id, b.id, "none", NO_EVIDENCE)


UNCHECKED = "no kernel entry known"


def _unchecked(c: Candidate) -> bool:
    """A kernel the tool has no entry for (an entry whose verdict is unknown was still read)."""
    return any(UNCHECKED in n for n in c.notes)


def _evidence(c: Candidate, bench: BenchLine | None, perf: tuple[Measurement, ...], fields: tuple[str, ...], family: str,
              auto_pick: dict[str, Any], auto_where: dict[str, str], quant: str) -> tuple[Evidence, ...]:
    ev: list[Evidence] = []
    if bench is not None:
        ev.append(Evidence("bench", f"--bench line {bench.line}: {bench.metric} = {bench.value:g}", bench.metric, bench.value))
    for f in fields:
        for m in perf:
            if m.setting == f and m.choice == c.value(f) and m.arch_family == family and _applies(m, quant):
                ev.append(Evidence("published", f"{f}={m.choice}: {m.metric} {m.value:g} {m.unit} ({m.model_family} "
                                   f"{m.quantization}, {m.workload})", m.metric, m.value, m.hardware, m.source))
        if auto_pick.get(f) is not None and auto_pick.get(f) == c.value(f):
            ev.append(Evidence("sglang_auto", f"{f}: SGLang's auto picks {c.value(f)} on this device", source=auto_where.get(f, "")))
    return tuple(ev)


# ---- commands ----------------------------------------------------------------------------------
def _option(prep: Prepared, name: str) -> str:
    assert prep.table is not None
    spec = prep.table.by_dest.get(name)
    long = [f for f in (spec.flags if spec else ()) if f.startswith("--")]
    return long[0] if long else "--" + name.replace("_", "-")


def _argv_without(argv: list[str], options: set[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        head = word.split("=", 1)[0]
        if head in options:
            skip = "=" not in word
            continue
        out.append(word)
    return out


def _server_argv(request: Request, prep: Prepared, forced: dict[str, str]) -> list[str]:
    """The user's server argv with the forced fields replaced (or a launch built from the
    model and --set flags when no command was given)."""
    from sglang_audit.inputs.launch import split_launch

    options = {f for name in forced for f in (prep.table.by_dest[name].flags if prep.table and name in prep.table.by_dest else ())}
    if request.launch:
        launch = split_launch(request.launch)
        argv = _argv_without(list(launch.argv), options)
        prefix = [*(f"{k}={v}" for k, v in launch.env), *shlex.split(launch.entry)]
    else:
        argv = ["--model-path", _model_path(str(request.model))]
        for name, value in prep.target.flags.items():
            if name in forced or name == "speculative_draft_model_path":
                continue
            opt = _option(prep, name)
            if value is True:
                argv.append(opt)
            elif value not in (False, None):
                argv += [opt, str(value)]
        prefix = ["python", "-m", "sglang.launch_server"]
    for name, value in forced.items():
        argv += [_option(prep, name), value]
    return [*prefix, *argv]


def _model_path(spec: str) -> str:
    """A bundled profile stands for a Hugging Face model: the command names the model."""
    from sglang_audit.resolve.pipeline import profile_ids

    by_name = {name: repo for repo, name in profile_ids().items()}
    return by_name.get(spec, spec)


def _launch(request: Request, prep: Prepared, best: Candidate) -> str:
    return shlex.join(_server_argv(request, prep, dict(best.flags)))


def _bench_plan(request: Request, prep: Prepared, top: list[Candidate]) -> tuple[str, ...]:
    out: list[str] = []
    for c in top:
        out.append(f"# {c.id}")
        out.append(shlex.join(_server_argv(request, prep, dict(c.flags))))
        out.append(shlex.join(["python", "-m", "sglang.bench_serving", "--backend", "sglang", "--dataset-name", "random",
                               "--random-input-len", "1024", "--random-output-len", "1024", "--num-prompts", "256",
                               "--max-concurrency", "32", "--tag", c.id, "--output-file", "recommend-bench.jsonl"]))
    out.append("# then: sglang-audit recommend <the same options> --bench recommend-bench.jsonl")
    return tuple(out)


__all__ = ["SCHEMA", "NO_EVIDENCE", "EXPLORE_OPTIONS", "attention_kind", "Candidate", "Evidence", "Measurement", "Reason", "Recommendation", "Step",
           "load_measurements", "read_bench", "recommend"]
