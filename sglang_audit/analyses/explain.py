"""``explain FIELD``: the resolved value with its chain, every choice of the field forced
in turn, and the auto-selection branches elsewhere in the code with why each does (not)
fire on this device.

Three sources, kept apart: ``pipeline.resolve`` for what SGLang decides (once for the
request, once per forced choice, sharing one ``SourceCache``); the decision graph
(``graph``) for the branches that exist in the code; and the release's hardware
predicates interpreted for the device (``guards.list_guards``) to say which guard is
false here.  Returns plain dataclasses; rendering is in ``render_explain``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sglang_audit import factfiles
from sglang_audit.analyses.formula import formula_predicates, formula_truth
from sglang_audit.analyses.graph import DecisionGraph, build_graph
from sglang_audit.analyses.guards import list_guards
from sglang_audit.errors import AuditError, InputError
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.resolve.pipeline import (
    Request,
    entry_snapshot,
    prepare,
    progress_done,
    resolve_target,
    with_kernels,
)
from sglang_audit.resolve.resolver import Resolver
from sglang_audit.resolve.resultcache import ResultCache
from sglang_audit.resolve.stages import LAYER_STAGES, STAGE_READS
from sglang_audit.resolve.targets import Target
from sglang_audit.resolve.workers import Batch, run_all
from sglang_audit.result import (
    STATUS_RESOLVED,
    STATUS_UNKNOWN,
    STATUS_UNSUPPORTED,
    ChainStep,
    KernelVerdict,
    LayerValue,
    Rejection,
    Resolution,
    Setting,
    UnknownValue,
)
from sglang_audit.shipped import known_bad_dir

OUTCOME_ACCEPTED = "accepted"
OUTCOME_REWRITTEN = "rewritten"
OUTCOME_REJECTED = "rejected"
OUTCOME_UNKNOWN = "unknown"
# SGLang accepts the choice, but the MoE layers or the attention backend built with it fail
# (resolve: status unsupported)
OUTCOME_LAYERS_FAIL = "layers_fail"
# SGLang accepts the choice, but a shipped known-bad rule (the ones ``check`` runs) flags it
OUTCOME_KNOWN_BAD = "known_bad"

BRANCH_FIRED = "fired"  # it decided the value in this resolution
BRANCH_BLOCKED = "blocked"  # a hardware guard on its path is the wrong way on this device
BRANCH_NOT_TAKEN = "not_taken"  # the hardware allows it; other conditions kept it off here
# an arm of a conditional expression whose statement ran, when the chain cannot tell
# which arm produced the value (the other arm is not a constant)
BRANCH_REACHED = "reached"


@dataclass(frozen=True)
class Condition:
    """One guard on a branch's path and whether it holds on this device."""

    file: str
    line: int
    guard: str
    construct: str  # if | elif | ifexp | assert
    needed: bool  # the branch runs when the guard is True (or False)
    value: bool | None  # the guard on this device, None when it depends on more than hardware
    predicates: tuple[tuple[str, Any], ...] = ()  # predicates the guard calls, with their value
    mentions_model: bool = False  # compares with this model's architecture name

    @property
    def holds(self) -> bool | None:
        return None if self.value is None else self.value == self.needed

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file, "line": self.line, "guard": self.guard, "construct": self.construct,
            "needed": self.needed, "value": self.value, "holds": self.holds,
            "predicates": {k: v for k, v in self.predicates}, "mentions_model": self.mentions_model,
        }


@dataclass(frozen=True)
class Branch:
    """A place in the code that assigns the field (or its runtime value) under guards."""

    value: Any  # the constant written, or None when ``constant`` is False
    value_text: str
    constant: bool
    file: str
    line: int
    code: str
    layer: str  # config | runtime
    conditions: tuple[Condition, ...]
    status: str  # fired | reached | blocked | not_taken
    applies_to_model: bool = False
    arm: bool = False  # an arm of a conditional expression (the value written is that arm)

    @property
    def blocked_by(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.conditions if c.holds is False)

    @property
    def undecided(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.conditions if c.holds is None)

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value, "value_text": self.value_text, "constant": self.constant,
            "file": self.file, "line": self.line, "code": self.code, "layer": self.layer,
            "status": self.status, "applies_to_model": self.applies_to_model, "arm": self.arm,
            "conditions": [c.to_json() for c in self.conditions],
            "blocked_by": [f"{c.file}:{c.line}" for c in self.blocked_by],
        }


@dataclass(frozen=True)
class ChoiceOutcome:
    """What happens if the user forces one choice of the field."""

    choice: str
    outcome: str  # accepted | known_bad | rewritten | layers_fail | rejected | unknown
    config: Any = None
    runtime: Any = None
    overridden: bool = False  # rewritten although the user chose it (not the default)
    layer: str = ""  # where the rewrite happened: config | runtime
    where: ChainStep | None = None  # the write that produced the final value
    reason: tuple[Condition, ...] = ()  # the guards of that write, on this device
    rejection: Rejection | None = None
    conditional: tuple[Rejection, ...] = ()  # rejections on some unknown-input paths only
    note: str = ""
    kernel: KernelVerdict | None = None  # the kernel library's declared support (kernels.py)
    # (rule id, severity, title) of the known-bad rules that flag this choice's result for
    # this setting: the same findings ``check`` reports for it
    known_bad: tuple[tuple[str, str, str], ...] = ()
    # the kind of the layer stage whose build failed (layers_fail): LayerValue.stage, "moe",
    # "attention" or "speculative" (the worker, a forced speculative_algorithm)
    stage: str = ""
    # the other settings whose layer stage fails in this choice's resolution, as (setting,
    # stage, "<value> at <site>"): forcing an attention backend under EAGLE builds the
    # speculative worker with it too, and SGLang's refusal there is the deployment's (issue 42)
    also_fails: tuple[tuple[str, str, str], ...] = ()
    # the same for the other settings whose layer stage cannot be told (status ``unknown``),
    # with the reason: the deployment's outcome is then not known either
    also_unknown: tuple[tuple[str, str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "choice": self.choice, "outcome": self.outcome,
            # only a failed build names its stage (older outputs keep their shape)
            **({"stage": self.stage} if self.stage else {}),
            **({"also_fails": [{"setting": n, "stage": st, "failure": f} for n, st, f in self.also_fails]}
               if self.also_fails else {}),
            **({"also_unknown": [{"setting": n, "stage": st, "reason": r} for n, st, r in self.also_unknown]}
               if self.also_unknown else {}),
            "known_bad": [{"rule": r, "severity": sev, "title": t} for r, sev, t in self.known_bad],
            "config": _value_json(self.config), "runtime": _value_json(self.runtime),
            "overridden": self.overridden, "layer": self.layer,
            "where": self.where.to_json() if self.where else None,
            "reason": [c.to_json() for c in self.reason],
            "rejection": self.rejection.to_json() if self.rejection else None,
            "conditional_rejections": [r.to_json() for r in self.conditional],
            "note": self.note,
            "kernel": self.kernel.to_json() if self.kernel else None,
        }


@dataclass(frozen=True)
class Explanation:
    field: str
    resolution: Resolution  # the request as given
    setting: Setting
    default: Any  # the field's declared default in this release
    user_value: Any  # what the user set, or None
    user_set: bool
    overridden: bool  # the user's value was rewritten by SGLang
    deciding: ChainStep | None  # the write that produced the resolved value
    reason: tuple[Condition, ...]  # its guards, evaluated on this device
    choices_source: str  # "release" (argparse choices) | "graph" (constants the code writes)
    choices: tuple[ChoiceOutcome, ...]
    branches: tuple[Branch, ...]
    predicates: dict[str, Any]
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        res = self.resolution
        return {
            "schema_version": 1,
            "field": self.field,
            "source": {"version": res.source.get("version"), "flashinfer": res.source.get("flashinfer"), "origin": res.source.get("origin")},
            "device": res.device,
            "model": res.model.to_json(),
            "flags": res.flags,
            "env": res.env,
            "rejected": res.rejected.to_json() if res.rejected else None,
            "setting": self.setting.to_json(),
            "default": self.default,
            "user_value": self.user_value if self.user_set else None,
            "user_set": self.user_set,
            "overridden": self.overridden,
            "deciding": self.deciding.to_json() if self.deciding else None,
            "reason": [c.to_json() for c in self.reason],
            "choices_source": self.choices_source,
            "choices": [c.to_json() for c in self.choices],
            "branches": [b.to_json() for b in self.branches],
            "predicates": self.predicates,
            "notes": list(self.notes),
        }


# ---- evidence helpers --------------------------------------------------------------------
def _value_json(value: Any) -> Any:
    return value.to_json() if isinstance(value, UnknownValue) else value


def final_value(setting: Setting) -> Any:
    """The value the setting ends with (``Setting.effective``, the one definition)."""
    return setting.effective


def deciding_step(setting: Setting, value: Any = None) -> ChainStep | None:
    """The step that produced the setting's effective value (``Setting.deciding``, the one
    definition every command uses; ``value`` is kept for callers that pass it)."""
    return setting.deciding


def _is_explicit(choice: Any, default: Any) -> bool:
    """A value that asks for a specific backend: not the default and not SGLang's "auto"
    (choosing either leaves the pick to SGLang, so a rewrite is not an override)."""
    return choice != default and choice != "auto"


def _predicate_values(facts: list[Any]) -> dict[str, Any]:
    return {f.name: f.value for f in facts}


class _Context:
    """What branch and condition evaluation share for one explanation."""

    def __init__(self, dg: DecisionGraph, predicates: dict[str, Any], architecture: Any) -> None:
        self.dg = dg
        self.g = dg.graph
        self.predicates = predicates
        self.architecture = architecture if isinstance(architecture, str) else None

    def condition(self, decision: str, branch: str) -> Condition:
        node = self.g.nodes[decision]
        formula = self.dg.formulas.get(decision, ("opaque", ""))
        shown = formula_truth(formula, self.predicates)
        names = formula_predicates(formula)
        mentions = self.architecture is not None and self.architecture in self.dg.strings.get(decision, frozenset())
        return Condition(node["file"], node["line"], node["guard"], node["construct"], branch == "true",
                         shown, tuple((n, self.predicates.get(n, "unknown")) for n in names), mentions)

    def conditions_of_write(self, write: str, arm: str = "") -> tuple[Condition, ...]:
        out = [self.condition(d, b) for d, b in self.dg.enclosing(write)]
        for part in filter(None, arm.split(",")):
            d, _, b = part.rpartition("=")
            out.append(self.condition(d, b))
        return tuple(out)

    def reason_for(self, step: ChainStep | None) -> tuple[Condition, ...]:
        if step is None:
            return ()
        writes = [n for n in self.dg.nodes_at(step.file, step.line) if self.g.nodes[n]["kind"] == "write"]
        if not writes:
            return ()
        return self.conditions_of_write(writes[0])


def _branches(ctx: _Context, field: str, chain: tuple[ChainStep, ...]) -> tuple[Branch, ...]:
    g = ctx.g
    fid = f"field:{field}"
    if fid not in g:
        return ()
    cited: dict[tuple[str, int], set[str]] = {}
    for s in chain:
        cited.setdefault((s.file, s.line), set()).add(repr(s.value))
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    for src, _dst, e in g.in_edges(fid, data=True):
        if e["kind"] == "writes" and g.nodes[src]["kind"] == "decision":
            edges.setdefault((e["write"], e.get("arm", "")), e)
    arms_of: dict[str, list[dict[str, Any]]] = {}
    for (wid, arm), e in edges.items():
        if arm:
            arms_of.setdefault(wid, []).append(e)
    out: list[Branch] = []
    for (wid, arm), e in sorted(edges.items()):
        write = g.nodes[wid]
        conds = ctx.conditions_of_write(wid, arm)
        values = cited.get((write["file"], write["line"]))
        fired = reached = False
        if values is not None and not arm:
            fired = not e["constant"] or repr(e["value"]) in values
        elif values is not None:
            # which arm produced the value: certain only when every other arm is a
            # constant that differs from it
            mine = e["constant"] and repr(e["value"]) in values
            others = [o for o in arms_of[wid] if o is not e]
            exclusive = all(o["constant"] and repr(o["value"]) not in values for o in others)
            fired = mine and exclusive
            reached = not fired and (not e["constant"] or mine)
        if fired:
            status = BRANCH_FIRED
        elif reached:
            status = BRANCH_REACHED
        elif any(c.holds is False for c in conds):
            status = BRANCH_BLOCKED
        else:
            status = BRANCH_NOT_TAKEN
        out.append(Branch(
            e["value"], e["value_text"], bool(e["constant"]), write["file"], write["line"], write["code"],
            # only a guard that must hold can tie a branch to this model (an elif's earlier
            # tests must fail, so naming the model there says the opposite)
            write["layer"], conds, status, any(c.mentions_model and c.needed for c in conds), bool(arm),
        ))
    out.sort(key=lambda b: (b.layer != "config", b.file, b.line, str(b.value)))
    return tuple(out)


def _known_bad(res: Resolution, field: str, rules: tuple[Any, ...]) -> tuple[tuple[str, str, str], ...]:
    """The findings ``check`` reports on this setting for this resolution (errors and
    warnings)."""
    if not rules or res.rejected is not None:
        return ()
    from sglang_audit.rules.knownbad import check_resolution

    found = check_resolution(res, rules).findings
    return tuple((str(f.rule_id), str(f.severity), str(f.title)) for f in found
                 if f.setting == field and f.severity in ("error", "warning"))


def _with_rules(outcome: ChoiceOutcome, res: Resolution, field: str, rules: tuple[Any, ...]) -> ChoiceOutcome:
    bad = _known_bad(res, field, rules)
    if not bad:
        return outcome
    label = OUTCOME_KNOWN_BAD if outcome.outcome == OUTCOME_ACCEPTED else outcome.outcome
    return replace(outcome, outcome=label, known_bad=bad)


def _other_layers(res: Resolution, field: str, built: set[str], status: str) -> tuple[tuple[str, str, str], ...]:
    """The settings of ``built`` other than ``field`` whose layer stage ends with ``status``
    in this resolution, in the resolution's order, as (setting, stage, what): SGLang's refusal
    and its site for ``unsupported``, the reason for ``unknown``."""
    if res.rejected is not None:
        return ()
    out = []
    for name, s in res.settings.items():
        layer = s.layer
        if name == field or name not in built or not isinstance(layer, LayerValue) or layer.status != status:
            continue
        if status == STATUS_UNSUPPORTED:
            text = f"{layer.value} at {layer.site}" if layer.site else str(layer.value)
            pending = layer.unsettled_absences  # a plain install's absence: a condition, not a verdict
            text += f" (if {', '.join(pending)} is not installed)" if pending else ""
        else:
            text = layer.reason or "no reason recorded"
        out.append((name, layer.stage, text))
    return tuple(out)


def _classify(choice: str, default: Any, res: Resolution, field: str, ctx: _Context) -> ChoiceOutcome:
    if res.rejected is not None:
        return ChoiceOutcome(choice, OUTCOME_REJECTED, rejection=res.rejected)
    setting = res.settings.get(field)
    if setting is None:
        return ChoiceOutcome(choice, OUTCOME_UNKNOWN, note="the resolver did not report this setting")
    conditional = tuple(res.rejections)
    # values known, the layers built with them fail or cannot be told: classify the values,
    # then say what the layers do (the same status resolve and check report)
    values_known = not isinstance(setting.config, UnknownValue) and not isinstance(setting.runtime, UnknownValue)
    layer_value = setting.layer
    if values_known and isinstance(layer_value, LayerValue) and layer_value.status != STATUS_RESOLVED:
        by_values = _classify(choice, default, replace(res, settings={**res.settings, field: replace(setting, layer=None, status=STATUS_RESOLVED)}), field, ctx)
        if layer_value.status == STATUS_UNSUPPORTED:
            return replace(by_values, outcome=OUTCOME_LAYERS_FAIL, stage=layer_value.stage,
                           note=f"{layer_value.value} at {layer_value.site}" if layer_value.site else str(layer_value.value))
        # SGLang accepts it; what its layers do cannot be told: keep the values' outcome
        # (the known-bad rules still apply to it), and say so
        return replace(by_values, note=f"{layer_value.what} built with it cannot be told: {layer_value.reason}")
    if values_known and isinstance(layer_value, UnknownValue):
        return replace(_classify(choice, default, replace(res, settings={**res.settings, field: replace(setting, layer=None, status=STATUS_RESOLVED)}), field, ctx),
                       note=f"the layers decide this value again when the model is built: {layer_value.reason}")
    if setting.status == "unknown" or isinstance(setting.config, UnknownValue) or isinstance(setting.runtime, UnknownValue):
        reason = setting.config.reason if isinstance(setting.config, UnknownValue) else (
            setting.runtime.reason if isinstance(setting.runtime, UnknownValue) else setting.note)
        return ChoiceOutcome(choice, OUTCOME_UNKNOWN, setting.config, setting.runtime, conditional=conditional, note=reason)
    layer = ""
    if setting.config != choice:
        layer = "config"
    elif setting.runtime is not None and setting.runtime != choice:
        layer = "runtime"
    if not layer:
        return ChoiceOutcome(choice, OUTCOME_ACCEPTED, setting.config, setting.runtime, conditional=conditional)
    where = setting.deciding
    return ChoiceOutcome(choice, OUTCOME_REWRITTEN, setting.config, setting.runtime,
                         overridden=_is_explicit(choice, default), layer=layer, where=where,
                         reason=ctx.reason_for(where), conditional=conditional)


def explain(request: Request, field: str, progress: Callable[[str], None] | None = None,
            force_choices: bool = True, jobs: int = 1) -> Explanation:
    """``force_choices=False`` skips resolving once per choice (the slow part on large
    releases): ``choices`` is then empty and a note says so.  ``jobs`` > 1: the forced
    choices are resolved in that many worker processes (the same result)."""
    out = explain_fields(request, [field], progress, force_choices, jobs)[field]
    if isinstance(out, AuditError):
        raise out
    return out


def explain_fields(request: Request, fields: Sequence[str], progress: Callable[[str], None] | None = None,
                   force_choices: bool = True, jobs: int = 1, cache: SourceCache | None = None,
                   bases: Sequence[tuple[Target, Resolution]] = (),
                   rules: tuple[Any, ...] | None = None,
                   results: ResultCache | None = None) -> dict[str, Explanation | AuditError]:
    """Several fields of one request explained on one prepared release: the flag table,
    the IR, the decision graph, the device's predicates and the rules are read once, and
    every field's forced choices are resolved in one batch (``workers``).  A field that
    cannot be explained maps to its error.  ``bases``: resolutions already made for a
    target (the report's own, without package forks), not made again; ``rules``: the
    shipped known-bad rules, when the caller has read them; ``results``: the result cache
    every resolution goes through (by default the user's, unless ``use_cache`` is off)."""
    cache = cache or SourceCache(use_disk=request.use_cache)
    # the tree is listed once for every key: a result is stored only if its evaluation
    # read the content keyed (ResultCache.put), so an edit during the run is never kept
    results = results or ResultCache(enabled=request.use_cache, stable_tree=True)
    try:
        return _explain_fields(request, list(dict.fromkeys(fields)), cache, progress, force_choices, jobs, bases, rules,
                               results)
    except AuditError as exc:  # the release or the request itself: every field fails alike
        return {f: exc for f in fields}
    finally:
        progress_done(progress)


@dataclass
class _Field:
    """One field's part of the work: its target, resolution and choices to force."""

    name: str
    target: Target
    base: Resolution
    default: Any
    choices: list[str]
    choices_source: str
    notes: list[str]
    forced: dict[str, int]  # choice -> index of its resolution in the batch


def _explain_fields(request: Request, fields: list[str], cache: SourceCache, progress: Callable[[str], None] | None,
                    force_choices: bool, jobs: int, bases: Sequence[tuple[Target, Resolution]],
                    shipped_rules: tuple[Any, ...] | None, results: ResultCache) -> dict[str, Explanation | AuditError]:
    prep = prepare(request, cache, progress, want_table=True)
    table = prep.table
    assert table is not None  # prepare(want_table=True) always builds it
    settings = factfiles.settings().settings
    out: dict[str, Explanation | AuditError] = {}
    resolved: list[tuple[Target, Resolution | AuditError]] = list(bases)  # Target is not hashable
    plans: list[_Field] = []
    for field in fields:
        target = prep.target
        if field not in settings and field in table.fields:
            # any ServerArgs field: resolved like `resolve --field`
            target = replace(target, extra_fields=(*target.extra_fields, field))
        elif field not in settings:
            close = difflib.get_close_matches(field, list(dict.fromkeys([*settings, *table.fields])), n=3)  # a setting is a field too
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            out[field] = InputError(f"cannot explain {field!r}{hint}: not a setting or ServerArgs field of this release")
            continue
        base = next((r for t, r in resolved if t == target), None)
        if base is None:
            try:
                base = with_kernels(resolve_target(target, cache, results, forks=False), target, cache,
                                    request.flashinfer_source, progress, results=results)
            except AuditError as exc:
                base = exc
            resolved.append((target, base))
        if isinstance(base, AuditError):
            out[field] = base
            continue
        spec = table.by_dest.get(field)
        choices = list(spec.choices) if spec is not None and spec.choices else []
        plans.append(_Field(field, target, base, table.fields.get(field), choices, "release", [], {}))
    # the choices the release declares are resolved in workers while this process reads
    # the decision graph, the device's predicates and the rules
    named = _layers_rules_name(shipped_rules)
    tasks = _choice_tasks(plans, force_choices, progress, named=named)
    # the forced choices differ from each other only in their flags: the release's entry
    # module is loaded once, here, and each choice resolved in a process forked from this
    # state (resolver.EntrySnapshot; ~15% of a forced choice's evaluation on 0.5.23)
    with entry_snapshot([t for t, _f, _c in tasks], cache, results) as fresh:
        with Batch(_resolve_forced(request, cache, results), tasks, jobs, keep_errors=(AuditError,), fresh=fresh) as batch:
            dg = build_graph(prep.tree.package_dir, cache)
            predicates = _predicate_values(list_guards(Resolver(prep.target, cache)))
            rules, rules_note = _load_rules() if shipped_rules is None else (shipped_rules, "")
            forced = batch.results(_progress_each(tasks, progress))
        late = [p for p in plans if not p.choices and p.base.settings[p.name].present]
        for p in late:
            # no argparse choices: the constants the code itself writes are the candidates
            p.choices_source = "graph"
            consts = {e["value"] for _u, _v, e in dg.graph.in_edges(f"field:{p.name}", data=True)
                      if e["kind"] == "writes" and e["constant"] and isinstance(e["value"], str)}
            if isinstance(p.default, str):
                consts.add(p.default)
            p.choices = sorted(consts)
            if p.choices:
                p.notes.append(f"the release declares no choices for {p.name}; the values its code writes are tried instead")
            else:
                p.notes.append(f"the release declares no choices for {p.name} and its code writes no string constants to it; no value was forced")
        if force_choices and any(p.choices for p in late):
            more = _choice_tasks(late, force_choices, progress, first=len(tasks), named=named)
            forced += run_all(_resolve_forced(request, cache, results), more, jobs, _progress_each(more, progress),
                              keep_errors=(AuditError,), fresh=fresh)
    for p in plans:
        # a choice whose resolution failed fails its field, as the first failing choice did
        # when each was resolved in turn
        failed = next((forced[i] for c, i in p.forced.items() if isinstance(forced[i], AuditError)), None)
        out[p.name] = failed if failed is not None else _explanation(p, dg, predicates, rules, rules_note, forced, force_choices)
    return {f: out[f] for f in fields}


def _choice_tasks(plans: list[_Field], force_choices: bool, progress: Callable[[str], None] | None,
                  first: int = 0, named: frozenset[str] = frozenset()) -> list[tuple[Target, str, str]]:
    """(target, field, choice) for each choice to resolve; the request's own value (set,
    or the default) is its base resolution, not resolved again."""
    tasks: list[tuple[Target, str, str]] = []
    for p in plans:
        if not (force_choices and p.choices and p.base.settings[p.name].present):
            continue
        if progress:
            progress(f"resolving with each of the {len(p.choices)} choices of {p.name} forced")
        current = p.target.flags.get(p.name, p.default)
        stages = layer_stages_read(p.name, named)
        for choice in p.choices:
            if choice != current and choice not in p.forced:
                p.forced[choice] = first + len(tasks)
                tasks.append((replace(p.target, flags={**p.target.flags, p.name: choice}, layer_stages=stages), p.name, choice))
    return tasks


def layer_stages_read(field: str, named: frozenset[str]) -> tuple[str, ...]:
    """The layer stages whose values a forced choice of ``field`` is read for: the one that
    builds the field's own layers, those that build with the field again (``STAGE_READS``: the
    draft's MoE layers, the speculative worker; their outcome is the choice's ``also_fails``),
    and those that build the layers of a setting a known-bad
    rule names as ``settings.X.layer`` (``named``), and every stage before the last of those:
    a stage runs on the interpreter the stages before it left (their imports, the globals
    they published), so only the stages after it are left out. A choice's outcome reads the
    field's setting, the rejections, the rules' findings on the field (``_classify``) and what
    the stages building with the field again end with; building any other later layers (the
    attention backend is ~1/6 of a 0.5.23 resolution) changes none. A kernel runner whose
    kernel is read off another setting's layers (rules/kernels.toml ``[[layer_call]]``: the FP4
    and FP8 GEMMs off the linear stage's forward) needs that stage too."""
    from sglang_audit import factfiles

    via = {f.layer for f in factfiles.kernels().layer_call if f.setting == field}
    order = list(LAYER_STAGES)
    read = [i for i, (name, names) in enumerate(LAYER_STAGES.items())
            if field in names or named.intersection(names) or via.intersection(names) or field in STAGE_READS[name]]
    return tuple(order[: read[-1] + 1]) if read else ()


_LAYER_FACT = re.compile(r"settings\.(\w+)\.layer\b")
# a rule file's top-level `when:` block (its examples name layer facts too, as test inputs)
_WHEN_BLOCK = re.compile(r"^when:(.*?)(?=^\S|\Z)", re.M | re.S)


def _layers_rules_name(rules: tuple[Any, ...] | None) -> frozenset[str]:
    """The settings whose layer value a known-bad rule reads other than as its own subject:
    from the rules given, else from the text of the shipped rule files (loading them is
    ~1.5 s, overlapped with the forced resolutions)."""
    if rules is not None:
        return frozenset(m for r in rules for m in _LAYER_FACT.findall(repr(getattr(r, "when", ""))))
    try:
        texts = [p.read_text(encoding="utf-8") for p in sorted(known_bad_dir().glob("*.y*ml"))]
    except OSError:
        return frozenset(n for names in LAYER_STAGES.values() for n in names)  # unreadable: build them all
    return frozenset(m for t in texts for block in _WHEN_BLOCK.findall(t) for m in _LAYER_FACT.findall(block))


def _resolve_forced(request: Request, cache: SourceCache,
                    results: ResultCache) -> Callable[[tuple[Target, str, str]], Resolution]:
    def run(task: tuple[Target, str, str]) -> Resolution:
        target = task[0]
        # no package forks, as the base resolution (the explanation compares the two)
        return with_kernels(resolve_target(target, cache, results, forks=False), target, cache,
                            request.flashinfer_source, results=results)

    return run


def _progress_each(tasks: list[tuple[Target, str, str]],
                   progress: Callable[[str], None] | None) -> Callable[[int, Any], None] | None:
    if progress is None:
        return None
    count = [0]

    def note(i: int, _res: Any) -> None:
        count[0] += 1
        _target, field, choice = tasks[i]
        progress(f"  resolved {field}={choice} ({count[0]}/{len(tasks)})")

    return note


def _load_rules() -> tuple[tuple[Any, ...], str]:
    try:
        from sglang_audit.rules.knownbad import load_rules

        return tuple(load_rules()), ""
    except Exception as exc:  # noqa: BLE001 - explain still answers without the rules
        return (), f"known-bad rules not applied: {exc}"


def _explanation(p: _Field, dg: DecisionGraph, predicates: dict[str, Any], rules: tuple[Any, ...], rules_note: str,
                 results: list[Any], force_choices: bool) -> Explanation:
    field, base, default = p.name, p.base, p.default
    setting = base.settings[field]
    ctx = _Context(dg, predicates, base.model.architecture)
    notes: list[str] = [*dg.notes, *p.notes]
    if rules_note:
        notes.append(rules_note)
    outcomes: list[ChoiceOutcome] = []
    # the other layers built with the field again (the stages that read it, run for every
    # forced choice): their outcome is the choice's too
    built = {n for stage, names in LAYER_STAGES.items() if field in STAGE_READS[stage] for n in names}
    if setting.present and not force_choices:
        notes.append(f"the choices of {field} were not forced one by one (asked not to)")
    elif setting.present:
        for choice in p.choices:
            res = results[p.forced[choice]] if choice in p.forced else base
            outcome = _with_rules(_classify(choice, default, res, field, ctx), res, field, rules)
            kernel = res.settings[field].kernel if field in res.settings else None
            outcomes.append(replace(outcome, kernel=kernel, also_fails=_other_layers(res, field, built, STATUS_UNSUPPORTED),
                                    also_unknown=_other_layers(res, field, built, STATUS_UNKNOWN)))
    else:
        notes.append(f"this release has no {field} setting")
    user_set = field in p.target.flags
    user_value = p.target.flags.get(field)
    deciding = deciding_step(setting, final_value(setting))
    overridden = (user_set and _is_explicit(user_value, default) and base.rejected is None
                  and not isinstance(setting.config, UnknownValue)
                  and (setting.config != user_value or setting.runtime not in (None, user_value)))
    return Explanation(
        field=field, resolution=base, setting=setting, default=default, user_value=user_value,
        user_set=user_set, overridden=overridden, deciding=deciding, reason=ctx.reason_for(deciding),
        choices_source=p.choices_source, choices=tuple(outcomes),
        branches=_branches(ctx, field, setting.chain), predicates=predicates, notes=tuple(notes),
    )
