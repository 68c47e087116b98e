"""``diff``: what changes for a deployment (or a fleet) between two SGLang releases.

Each deployment is resolved on both releases (one ``SourceCache`` per release, shared by
every deployment, so each file is parsed once per release) and the two ``Resolution``s are
compared setting by setting at every level of its outcome (``outcome_change``: the config
value, the runtime value, what the layers built with it do, the kernel library's verdict,
the known-bad findings on it), both decision chains, and whether the configuration becomes
(or stops being) rejected.  A setting that fails on both releases is "still failing", never
"unchanged".  "Underneath" facts that can change
without changing a value are compared too: the hardware predicates interpreted for the
device (``guards.guards_for``: value and definition), the guards on each setting's chain,
the release's declared choices and defaults for the settings (``FlagTable``), and the
pinned FlashInfer version.

A value the tool cannot state on either side is reported as ``unknown``, never as a
change.  Returns plain frozen dataclasses; rendering is in ``render_diff``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sglang_audit import factfiles
from sglang_audit.analyses.deployments import Deployment, load_deployments
from sglang_audit.analyses.guards import GuardFact
from sglang_audit.analyses.guards import guards_for as run_guards
from sglang_audit.analyses.outcome import (
    CHANGE_ABSENT,
    CHANGE_ADDED,
    CHANGE_CHANGED,
    CHANGE_REJECTED,
    CHANGE_REMOVED,
    CHANGE_STILL_FAILING,
    CHANGE_UNCHANGED,
    CHANGE_UNKNOWN,
    LEVEL_CONFIG,
    LEVEL_FINDINGS,
    LEVEL_KERNEL,
    LEVEL_LAYER,
    LEVEL_RUNTIME,
    LEVELS,
    VALUE_CHANGES,
    VALUE_LEVELS,
    OutcomeChange,
    SettingFindings,
    failing_levels,
    outcome_change,
    same_value,
)
from sglang_audit.errors import AuditError, InputError
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.flags import FlagTable
from sglang_audit.resolve.pipeline import Prepared, Request, prepare, resolve_target, with_kernels
from sglang_audit.resolve.resultcache import ResultCache
from sglang_audit.resolve.workers import run_all
from sglang_audit.result import (
    ChainStep,
    Rejection,
    Resolution,
    Setting,
    UnknownValue,
)
from sglang_audit.rules.knownbad import Finding, Rule, check_resolution, load_rules
from sglang_audit.source.locate import SourceTree, locate_source

# ---- vocabulary (the change and level words are outcome.py's) ------------------------


STATE_ACCEPTED = "accepted"
STATE_REJECTED = "rejected"
STATE_CONDITIONAL = "conditional"  # rejected on some paths only (depends on unknown inputs)

REJ_UNCHANGED = "unchanged"
REJ_BECOMES = "becomes_rejected"
REJ_NO_LONGER = "no_longer_rejected"
REJ_UNKNOWN = "unknown"

STATUS_CHANGED = "changed"
STATUS_UNCHANGED = "unchanged"
STATUS_UNKNOWN = "unknown"
# nothing changed, but the deployment fails on both releases (rejected by both, or a setting
# whose layers or kernel fail on both)
STATUS_STILL_FAILING = "still_failing"

FAIL_ON = ("changed", "rejected", "never")
EXIT_UNKNOWN = 3

# chain steps whose "guard" is a label, not a condition
_LABEL_GUARDS = ("", "default", "set by the user")


# ---- output data -------------------------------------------------------------------------
@dataclass(frozen=True)
class ReleaseInfo:
    origin: str
    version: str | None
    flashinfer: str | None

    @property
    def label(self) -> str:
        return self.version or self.origin

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "version": self.version, "flashinfer": self.flashinfer}


@dataclass(frozen=True)
class SideOutcome:
    """One release's answer for one deployment: a resolution, or the error the release's
    own argument parser gives (a flag or choice it does not have: SGLang would not start)."""

    resolution: Resolution | None
    error: str = ""

    @property
    def state(self) -> str:
        if self.resolution is None or self.resolution.rejected is not None:
            return STATE_REJECTED
        if self.resolution.rejections:
            return STATE_CONDITIONAL
        return STATE_ACCEPTED

    def to_json(self) -> dict[str, Any]:
        res = self.resolution
        return {
            "state": self.state,
            "error": self.error or None,
            "flags": res.flags if res else None,
            "rejected": res.rejected.to_json() if res and res.rejected else None,
            "rejections": [r.to_json() for r in res.rejections] if res else [],
            "paths": res.paths if res else 0,
            "analysis_notes": list(res.analysis_notes) if res else [],
        }


@dataclass(frozen=True)
class SettingDiff:
    name: str
    # unchanged | changed | unknown | still_failing | added | removed | rejected | absent
    change: str
    # the levels of the outcome that differ (LEVELS: config, runtime, layer, kernel, findings)
    layers: tuple[str, ...]
    old: Setting | None
    new: Setting | None
    old_deciding: ChainStep | None  # the step that produced the final value
    new_deciding: ChainStep | None
    guards_added: tuple[str, ...]  # guard texts on the new chain only
    guards_removed: tuple[str, ...]  # ... on the old chain only
    note: str = ""
    # the levels at which each side fails (``failing_levels``: layer, kernel)
    old_failing: tuple[str, ...] = ()
    new_failing: tuple[str, ...] = ()
    unknown_levels: tuple[str, ...] = ()  # levels that cannot be compared (unknown on a side)

    @property
    def still_failing(self) -> bool:
        """It fails on both releases (whether or not what fails changed)."""
        return bool(self.old_failing and self.new_failing)

    @property
    def newly_failing(self) -> bool:
        """It fails on the new release only, and the old release is known not to fail there."""
        return bool(self.new_failing) and not self.old_failing and not set(self.new_failing) & set(self.unknown_levels)

    @property
    def maybe_newly_failing(self) -> bool:
        """It fails on the new release; whether it did on the old one cannot be told."""
        return bool(self.new_failing) and not self.old_failing and bool(set(self.new_failing) & set(self.unknown_levels))

    def to_json(self) -> dict[str, Any]:
        return {
            "change": self.change, "layers": list(self.layers),
            "failing": {"from": list(self.old_failing), "to": list(self.new_failing)},
            "from": _setting_json(self.old, self.old_deciding),
            "to": _setting_json(self.new, self.new_deciding),
            "guards_added": list(self.guards_added), "guards_removed": list(self.guards_removed),
            "note": self.note,
        }


@dataclass(frozen=True)
class PredicateDiff:
    """A hardware predicate whose value on this device or whose definition changed."""

    name: str
    change: str  # added | removed | value | definition | value+definition
    old_value: Any
    new_value: Any
    old_definition: str | None
    new_definition: str | None
    old_site: str | None  # file:line
    new_site: str | None
    used_by: tuple[str, ...]  # settings whose chains or decision sites read it

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "change": self.change,
            "from": None if self.old_definition is None else {"value": self.old_value, "definition": self.old_definition, "site": self.old_site},
            "to": None if self.new_definition is None else {"value": self.new_value, "definition": self.new_definition, "site": self.new_site},
            "used_by": list(self.used_by),
        }


@dataclass(frozen=True)
class FlagDiff:
    """A setting's declared choices and default in each release."""

    name: str
    old_choices: tuple[str, ...] | None  # None: the release declares no choices
    new_choices: tuple[str, ...] | None
    old_default: Any
    new_default: Any
    old_declared: bool  # the release has this field at all
    new_declared: bool
    default_changed: bool

    @property
    def added(self) -> tuple[str, ...]:
        if self.old_choices is None or self.new_choices is None:
            return ()
        return tuple(c for c in self.new_choices if c not in self.old_choices)

    @property
    def removed(self) -> tuple[str, ...]:
        if self.old_choices is None or self.new_choices is None:
            return ()
        return tuple(c for c in self.old_choices if c not in self.new_choices)

    @property
    def choices_changed(self) -> bool:
        return (self.old_choices is None) != (self.new_choices is None) or bool(self.added or self.removed)

    @property
    def changed(self) -> bool:
        return self.choices_changed or self.default_changed or self.old_declared != self.new_declared

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "from": {"declared": self.old_declared, "choices": _opt_list(self.old_choices), "default": _plain(self.old_default)},
            "to": {"declared": self.new_declared, "choices": _opt_list(self.new_choices), "default": _plain(self.new_default)},
            "choices_added": list(self.added), "choices_removed": list(self.removed),
            "choices_changed": self.choices_changed, "default_changed": self.default_changed,
        }


@dataclass(frozen=True)
class DeploymentDiff:
    deployment: Deployment
    old: SideOutcome
    new: SideOutcome
    rejection: str  # unchanged | becomes_rejected | no_longer_rejected | unknown
    settings: tuple[SettingDiff, ...]
    predicates: tuple[PredicateDiff, ...]
    conditional_added: tuple[Rejection, ...] = ()  # rejected-on-some-paths, new release only
    conditional_removed: tuple[Rejection, ...] = ()
    # known-bad findings (rules/known-bad) of the new release only / of the old one only
    findings_added: tuple[Finding, ...] = ()
    findings_removed: tuple[Finding, ...] = ()

    @property
    def status(self) -> str:
        """changed > still_failing > unknown > unchanged: a known failure on both releases is
        never hidden behind an unknown elsewhere, and never reads as "unchanged"."""
        if self.rejection in (REJ_BECOMES, REJ_NO_LONGER) or any(s.change in VALUE_CHANGES for s in self.settings):
            return STATUS_CHANGED
        if self.findings_added or self.findings_removed:
            return STATUS_CHANGED
        if self.still_failing:
            return STATUS_STILL_FAILING
        if self.rejection == REJ_UNKNOWN or any(s.change == CHANGE_UNKNOWN for s in self.settings):
            return STATUS_UNKNOWN
        return STATUS_UNCHANGED

    @property
    def still_rejected(self) -> bool:
        return self.old.state == STATE_REJECTED and self.new.state == STATE_REJECTED

    @property
    def still_failing(self) -> bool:
        """Both releases fail this deployment: both reject it, or a setting fails on both."""
        return self.still_rejected or any(s.still_failing for s in self.settings)

    @property
    def newly_failing(self) -> tuple[SettingDiff, ...]:
        """The settings that fail on the new release only (a regression, as bad as becoming rejected)."""
        return tuple(s for s in self.settings if s.newly_failing)

    @property
    def maybe_newly_failing(self) -> tuple[SettingDiff, ...]:
        return tuple(s for s in self.settings if s.maybe_newly_failing)

    def to_json(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment.to_json(),
            "status": self.status,
            "rejection": self.rejection,
            "from": self.old.to_json(),
            "to": self.new.to_json(),
            "conditional_rejections_added": [r.to_json() for r in self.conditional_added],
            "conditional_rejections_removed": [r.to_json() for r in self.conditional_removed],
            "findings_added": [f.to_json() for f in self.findings_added],
            "findings_removed": [f.to_json() for f in self.findings_removed],
            "settings": {s.name: s.to_json() for s in self.settings if s.change != CHANGE_ABSENT},
            "predicates": [p.to_json() for p in self.predicates],
        }


@dataclass(frozen=True)
class ReleaseDiff:
    old: ReleaseInfo
    new: ReleaseInfo
    flags: tuple[FlagDiff, ...]  # the settings (and the flags the deployments set)
    deployments: tuple[DeploymentDiff, ...]
    from_file: bool = False  # deployments came from --deployment FILE
    notes: tuple[str, ...] = ()

    @property
    def flashinfer_changed(self) -> bool:
        return self.old.flashinfer != self.new.flashinfer

    @property
    def changed(self) -> bool:
        return any(d.status == STATUS_CHANGED for d in self.deployments)

    @property
    def unknown(self) -> bool:
        return any(d.status == STATUS_UNKNOWN for d in self.deployments)

    @property
    def becomes_rejected(self) -> bool:
        return any(d.rejection == REJ_BECOMES for d in self.deployments)

    @property
    def still_failing(self) -> bool:
        return any(d.still_failing for d in self.deployments)

    @property
    def newly_failing(self) -> bool:
        return any(d.newly_failing for d in self.deployments)

    def exit_code(self, fail_on: str) -> int:
        """0 nothing (of the kind asked about) changed; 1 it did; 3 it may have, a side is
        unknown (a clean 0 is never claimed on a guess).  ``changed``: any change, and a
        deployment that fails on both releases (a clean 0 would read as all-clear);
        ``rejected``: a deployment becomes rejected, or a setting newly fails (its layers
        raise or its kernel is unsupported on the new release only)."""
        if fail_on == "never":
            return 0
        if fail_on == "rejected":
            if self.becomes_rejected or self.newly_failing:
                return 1
            maybe = any(d.rejection == REJ_UNKNOWN or d.maybe_newly_failing for d in self.deployments)
            return EXIT_UNKNOWN if maybe else 0
        if self.changed or self.still_failing:
            return 1
        return EXIT_UNKNOWN if self.unknown else 0

    def to_json(self, fail_on: str = "changed") -> dict[str, Any]:
        return {
            "schema_version": 1,
            "kind": "diff",
            "from": self.old.to_json(),
            "to": self.new.to_json(),
            "flashinfer": {"from": self.old.flashinfer, "to": self.new.flashinfer, "changed": self.flashinfer_changed},
            "flags": [f.to_json() for f in self.flags],
            "deployments": [d.to_json() for d in self.deployments],
            "summary": {
                "changed": self.changed, "unknown": self.unknown, "becomes_rejected": self.becomes_rejected,
                "newly_failing": self.newly_failing, "still_failing": self.still_failing,
                "fail_on": fail_on, "exit_code": self.exit_code(fail_on),
                "deployments": {d.deployment.label(): {
                    "status": d.status, "rejection": d.rejection,
                    "settings": {s.name: s.change for s in d.settings if s.change != CHANGE_ABSENT},
                } for d in self.deployments},
            },
            "notes": list(self.notes),
        }


def _opt_list(v: tuple[str, ...] | None) -> list[str] | None:
    return None if v is None else list(v)


def _is_plain(v: Any) -> bool:
    if v is None or isinstance(v, (str, int, float, bool)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_is_plain(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _is_plain(x) for k, x in v.items())
    return False


def _plain(v: Any) -> Any:
    if isinstance(v, UnknownValue):
        return v.to_json()
    return v if _is_plain(v) else repr(v)


def _setting_json(s: Setting | None, deciding: ChainStep | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return s.to_json() | {"deciding": deciding.to_json() if deciding else None}


def decision_guards(setting: Setting | None) -> frozenset[str]:
    """The guard texts (whitespace-normalised) of the decisions on a setting's chain."""
    if setting is None:
        return frozenset()
    return frozenset(" ".join(s.guard.split()) for s in setting.chain
                     if s.kind not in ("default", "flag") and s.role != "applied" and s.guard not in _LABEL_GUARDS)


def _deciding(s: Setting | None) -> ChainStep | None:
    return s.deciding if s is not None else None


def compare_setting(name: str, old: SideOutcome, new: SideOutcome,
                    renamed: Mapping[str, str] | None = None,
                    findings: tuple[SettingFindings, SettingFindings] | None = None) -> SettingDiff:
    """One setting across the two releases; ``renamed`` (settings.toml, new -> old name) compares
    a new name with the old release's old name and leaves the old name's row out (absent).
    ``findings``: each side's known-bad findings on it (the findings level; not compared
    without them)."""
    o = old.resolution.settings.get(name) if old.resolution else None
    n = new.resolution.settings.get(name) if new.resolution else None
    renamed, rename_note = renamed or {}, ""
    old_alt = old.resolution.settings.get(renamed.get(name, "")) if old.resolution else None
    if old_alt is not None and old_alt.present and not (o is not None and o.present):
        o, rename_note = old_alt, f"renamed from {old_alt.name}"
    new_name = next((k for k, v in renamed.items() if v == name), None)
    alt = new.resolution.settings.get(new_name or "") if new.resolution else None
    if alt is not None and alt.present and not (n is not None and n.present) and o is not None and o.present:
        return SettingDiff(name, CHANGE_ABSENT, (), o, None, _deciding(o), None, (), (), f"renamed to {new_name} (compared there)")
    ga, gr = decision_guards(n), decision_guards(o)
    added, removed = tuple(sorted(ga - gr)), tuple(sorted(gr - ga))

    def make(change: str, layers: tuple[str, ...] = (), note: str = "", guards: bool = True,
             outcome: OutcomeChange | None = None) -> SettingDiff:
        note = "; ".join(x for x in (rename_note, note) if x)
        return SettingDiff(name, change, layers, o, n, _deciding(o), _deciding(n),
                           added if guards else (), removed if guards else (), note,
                           # a rejected side builds no layer: the deployment reports the rejection
                           failing_levels(o) if old.state != STATE_REJECTED else (),
                           failing_levels(n) if new.state != STATE_REJECTED else (),
                           outcome.unknown if outcome else ())

    if old.state == STATE_REJECTED or new.state == STATE_REJECTED:
        # a rejected side has no value and no chain: the deployment reports the rejection
        return make(CHANGE_REJECTED, guards=False)
    o_present = o is not None and o.present
    n_present = n is not None and n.present
    if not o_present and not n_present:
        return make(CHANGE_ABSENT, guards=False)
    if not o_present:
        return make(CHANGE_ADDED, note="the old release has no such setting")
    if not n_present:
        return make(CHANGE_REMOVED, note="the new release has no such setting")
    assert o is not None and n is not None
    oc = outcome_change(o, n, *(findings or (None, None)))
    notes: list[str] = []
    explained = {LEVEL_LAYER, LEVEL_KERNEL} & set(oc.changed)  # what a status change comes from
    if o.status != n.status and o.status != "unknown" and n.status != "unknown" and not explained:
        notes.append(f"status {o.status} → {n.status}")
    notes.extend(oc.details)
    if oc.old_failing and oc.new_failing:
        notes.append(f"still failing on both ({', '.join(oc.new_failing)})")
    if oc.change == CHANGE_UNKNOWN:
        values = set(oc.unknown) & set(VALUE_LEVELS)
        notes.append("a value is unknown on one side; see its reason" if values
                     else f"the {' and '.join(oc.unknown)} outcome cannot be told on one side; see its reason")
    return make(oc.change, oc.changed, "; ".join(notes), outcome=oc)


def _findings(side: SideOutcome, rules: tuple[Rule, ...], renamed: Mapping[str, str] = {},  # noqa: B006
              ) -> tuple[dict[tuple[str, str | None], Finding], set[tuple[str, str | None]]]:
    """The shipped known-bad rules on one side, keyed by (rule, setting; a renamed setting by
    its new name) — a finding both releases raise is not a change (its lines may move) — and
    the rules it could not decide (a finding against one of them is not a change: it may hold)."""
    res = side.resolution
    if res is None or res.rejected is not None:
        return {}, set()
    result = check_resolution(res, rules)
    new = {v: k for k, v in renamed.items()}
    return ({(f.rule_id, new.get(f.setting or "", f.setting)): f for f in result.findings},
            {(u.rule_id, new.get(u.setting or "", u.setting)) for u in result.undecided})


def _setting_findings(found: Mapping[tuple[str, str | None], Finding], undecided: set[tuple[str, str | None]],
                      name: str) -> SettingFindings:
    return SettingFindings({rule: f for (rule, s), f in found.items() if s == name},
                           frozenset(rule for rule, s in undecided if s == name))


def _rej_key(r: Rejection) -> tuple[str, str]:
    # lines move between releases; the exception and message say which check it is
    return (r.exception, r.message)


def rejection_transition(old: SideOutcome, new: SideOutcome) -> str:
    os_, ns = old.state, new.state
    if os_ == ns:
        if os_ == STATE_CONDITIONAL:
            assert old.resolution is not None and new.resolution is not None
            same = {_rej_key(r) for r in old.resolution.rejections} == {_rej_key(r) for r in new.resolution.rejections}
            return REJ_UNCHANGED if same else REJ_UNKNOWN
        return REJ_UNCHANGED
    if ns == STATE_REJECTED:
        return REJ_BECOMES
    if os_ == STATE_REJECTED and ns == STATE_ACCEPTED:
        return REJ_NO_LONGER
    return REJ_UNKNOWN  # to or from "rejected on some paths only"


def _controlled_settings(fact: GuardFact) -> set[str]:
    # GuardFact.controls: "file:line writes a, b; rejects (N sites)"
    out: set[str] = set()
    for site in fact.controls:
        m = re.search(r"\bwrites ([^;]+)", site)
        if m:
            out.update(x.strip() for x in m.group(1).split(","))
    return out


def compare_predicates(old: list[GuardFact], new: list[GuardFact], settings: tuple[SettingDiff, ...]) -> tuple[PredicateDiff, ...]:
    o = {f.name: f for f in old}
    n = {f.name: f for f in new}
    names = list(o) + [k for k in n if k not in o]
    guard_texts = {s.name: decision_guards(s.old) | decision_guards(s.new) for s in settings}
    out: list[PredicateDiff] = []
    for name in names:
        a, b = o.get(name), n.get(name)
        if a is not None and b is not None:
            kinds = [k for k, differs in (("value", a.value != b.value), ("definition", a.definition != b.definition)) if differs]
            if not kinds:
                continue
            change = "+".join(kinds)
        else:
            change = "added" if a is None else "removed"
        pat = re.compile(rf"\b{re.escape(name)}\b")
        used = {s for s, texts in guard_texts.items() if any(pat.search(t) for t in texts)}
        for f in (a, b):
            if f is not None:
                used |= _controlled_settings(f) & set(guard_texts)
        out.append(PredicateDiff(
            name, change,
            a.value if a else None, b.value if b else None,
            a.definition if a else None, b.definition if b else None,
            f"{a.file}:{a.line}" if a else None, f"{b.file}:{b.line}" if b else None,
            tuple(s.name for s in settings if s.name in used),
        ))
    return tuple(out)


_MISSING = object()


def compare_flags(names: list[str], old: FlagTable | None, new: FlagTable | None) -> tuple[FlagDiff, ...]:
    out: list[FlagDiff] = []
    for name in names:
        od = old.fields.get(name, _MISSING) if old else _MISSING
        nd = new.fields.get(name, _MISSING) if new else _MISSING
        if od is _MISSING and nd is _MISSING:
            continue
        oc = _choices(old, name)
        nc = _choices(new, name)
        # only plain data compare meaningfully (an evaluator object has no stable equality)
        default_changed = (od is not _MISSING and nd is not _MISSING and _is_plain(od) and _is_plain(nd)
                           and (od != nd or type(od) is not type(nd)))
        out.append(FlagDiff(name, oc, nc, None if od is _MISSING else od, None if nd is _MISSING else nd,
                            od is not _MISSING, nd is not _MISSING, default_changed))
    return tuple(out)


def _choices(table: FlagTable | None, name: str) -> tuple[str, ...] | None:
    spec = table.by_dest.get(name) if table else None
    return tuple(spec.choices) if spec is not None and spec.choices else None


# ---- running -----------------------------------------------------------------------------
class _Release:
    """One release: located once, one SourceCache for every deployment, its flag table,
    and its predicates per device."""

    def __init__(self, source: str | None, use_cache: bool, progress: Callable[[str], None] | None,
                 cache: SourceCache | None = None) -> None:
        self.source = source
        self.use_cache = use_cache
        self.progress = progress
        self.tree: SourceTree = locate_source(source, progress=progress)
        self.cache = cache if cache is not None else SourceCache(use_disk=use_cache)
        self.results = ResultCache(enabled=use_cache)
        self.table: FlagTable | None = None
        self.flashinfer: str | None = self.tree.flashinfer
        self._guards: dict[tuple[Any, ...], list[GuardFact]] = {}

    @property
    def label(self) -> str:
        return self.tree.version or self.tree.origin

    def info(self) -> ReleaseInfo:
        return ReleaseInfo(self.tree.origin, self.tree.version, self.flashinfer)

    def prepare(self, dep: Deployment) -> Prepared | SideOutcome | Exception:
        """In this process (the flag table is kept from the first deployment): the target,
        the release's refusal of the flags, or the error to raise where the serial run did."""
        try:
            prep = prepare(dep.request(self.source, self.use_cache), self.cache, self.progress,
                           want_table=self.table is None)
        except InputError as exc:
            return SideOutcome(None, str(exc))
        except Exception as exc:  # noqa: BLE001 - raised in deployment order, below
            return exc
        if self.table is None:
            self.table = prep.table
        return prep

    def resolve(self, prep: Prepared) -> Resolution:
        return resolve_target(prep.target, self.cache, self.results)  # in a worker process

    def outcome(self, dep: Deployment, prep: Prepared, res: Resolution) -> SideOutcome:
        # the kernel library each side pins (kernels.py): support gained or lost shows as
        # an SGK101 finding new in / gone from one side, and in the setting's note
        req = dep.request(self.source, self.use_cache)
        res = with_kernels(res, prep.target, self.cache, req.flashinfer_source, self.progress)
        # the pin the resolution reports (the same tree, so the same pin)
        self.flashinfer = res.source.get("flashinfer", self.flashinfer)
        return SideOutcome(res)

    def ensure_table(self, dep: Deployment) -> None:
        """The flag table when no deployment prepared on this release (its flags failed)."""
        if self.table is not None:
            return
        bare = Request(source=self.source, arch=dep.arch, model=dep.model, cuda=dep.cuda, driver=dep.driver,
                       use_cache=self.use_cache)
        try:
            self.table = prepare(bare, self.cache, self.progress, want_table=True).table
        except AuditError:
            pass  # reported as "flag table unavailable"

    def predicates(self, dep: Deployment) -> list[GuardFact]:
        key = (dep.arch, dep.cuda, dep.driver, dep.env, dep.with_packages, dep.without_packages)
        if key not in self._guards:
            req = Request(source=self.source, arch=dep.arch, model=None, cuda=dep.cuda, driver=dep.driver, env=list(dep.env),
                          with_packages=list(dep.with_packages), without_packages=list(dep.without_packages),
                          use_cache=self.use_cache)
            self._guards[key] = run_guards(req, cache=self.cache)[1]
        return self._guards[key]


def diff_releases(old_source: str | None, new_source: str | None, deployments: list[Deployment],
                  use_cache: bool = True, progress: Callable[[str], None] | None = None,
                  from_file: bool = False, jobs: int = 1, new_cache: SourceCache | None = None) -> ReleaseDiff:
    """``jobs`` > 1: the resolutions (each deployment on each release) run in that many
    worker processes, after every target was prepared here; the same diff. ``new_cache``:
    a SourceCache already holding the new release (``report --from``: its IR and flag
    table are not loaded and evaluated a second time)."""
    if not deployments:
        raise InputError("nothing to compare: no deployment")
    # both releases are located first: a missing release is a usage error, not a change
    old = _Release(old_source, use_cache, progress)
    # a release against itself: one analysis serves both sides
    new = old if new_source == old_source else _Release(new_source, use_cache, progress, new_cache)
    spec = factfiles.settings()
    settings = spec.settings
    renamed = spec.renamed
    rules = load_rules()
    releases = (old, new) if new is not old else (old,)
    prepared: list[list[Prepared | SideOutcome | Exception]] = []
    for dep in deployments:
        if progress:
            for rel in releases:
                progress(f"resolving {dep.label()} with SGLang {rel.label}")
        prepared.append([rel.prepare(dep) for rel in releases])
    todo = [(rel, p) for row in prepared for rel, p in zip(releases, row, strict=True) if isinstance(p, Prepared)]
    resolved = iter(run_all(lambda t: t[0].resolve(t[1]), todo, jobs, keep_errors=(Exception,)))
    results: list[DeploymentDiff] = []
    for dep, row in zip(deployments, prepared, strict=True):
        sides: list[SideOutcome] = []
        for rel, p in zip(releases, row, strict=True):
            if isinstance(p, Exception):
                raise p
            if isinstance(p, SideOutcome):
                sides.append(p)
                continue
            res = next(resolved)
            if isinstance(res, Exception):
                raise res
            sides.append(rel.outcome(dep, p, res))
        o, n = sides if len(sides) == 2 else (sides[0], sides[0])
        if o.error and n.error:
            where = f"deployment {dep.name!r}: " if dep.name else ""
            msg = o.error if o.error == n.error else f"with {old.label}: {o.error}; with {new.label}: {n.error}"
            raise InputError(where + msg)
        fo, uo = _findings(o, rules, renamed)
        fn, un = (fo, uo) if n is o else _findings(n, rules, renamed)  # a release against itself: once
        sdiffs = tuple(compare_setting(name, o, n, renamed, (_setting_findings(fo, uo, name), _setting_findings(fn, un, name)))
                       for name in settings)
        preds = compare_predicates(old.predicates(dep), new.predicates(dep), sdiffs)
        ok = {_rej_key(r) for r in (o.resolution.rejections if o.resolution else ())}
        nk = {_rej_key(r) for r in (n.resolution.rejections if n.resolution else ())}
        results.append(DeploymentDiff(
            dep, o, n, rejection_transition(o, n), sdiffs, preds,
            tuple(r for r in (n.resolution.rejections if n.resolution else ()) if _rej_key(r) not in ok),
            tuple(r for r in (o.resolution.rejections if o.resolution else ()) if _rej_key(r) not in nk),
            tuple(f for k, f in fn.items() if k not in fo and k not in uo),
            tuple(f for k, f in fo.items() if k not in fn and k not in un),
        ))
    for rel in (old, new):
        rel.ensure_table(deployments[0])
    notes: list[str] = []
    for rel in (old, new):
        if rel.table is None:
            notes.append(f"the flag table of {rel.label} could not be read: choices and defaults are not compared")
    # the settings, then the other flags the deployments set (their choices matter here too)
    names = list(settings)
    for d in results:
        for side in (d.old, d.new):
            for k in side.resolution.flags if side.resolution else ():
                if k not in names:
                    names.append(k)
    flags = compare_flags(names, old.table, new.table) if old.table and new.table else ()
    return ReleaseDiff(old.info(), new.info(), flags, tuple(results), from_file, tuple(notes))


__all__ = [
    "CHANGE_ABSENT", "CHANGE_ADDED", "CHANGE_CHANGED", "CHANGE_REJECTED", "CHANGE_REMOVED", "CHANGE_STILL_FAILING",
    "CHANGE_UNCHANGED", "CHANGE_UNKNOWN", "LEVELS", "LEVEL_CONFIG", "LEVEL_FINDINGS", "LEVEL_KERNEL", "LEVEL_LAYER",
    "LEVEL_RUNTIME", "VALUE_CHANGES", "VALUE_LEVELS", "same_value",
    "Deployment", "DeploymentDiff", "FlagDiff", "OutcomeChange", "PredicateDiff", "ReleaseDiff", "ReleaseInfo",
    "SettingDiff", "SettingFindings", "SideOutcome", "compare_setting", "diff_releases", "failing_levels",
    "load_deployments", "outcome_change",
]
