"""The support matrix: every arch × model × flag set of one release resolved (and checked
against the known-bad rules when ``rules`` is usable), in parallel processes.

The parent locates the source once, reads the release's flag table once (so every flag
set is typed and checked before any work starts), and hands out cases to worker
processes (``resolve/workers.py``); each worker keeps one ``SourceCache`` for all its cases, so a file is loaded (from the disk cache or
parsed) once per worker.  Results are plain picklable dataclasses placed by case index,
so the output does not depend on ``jobs`` or on completion order.  Rendering is in
``render_matrix``.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglang_audit import factfiles
from sglang_audit.errors import AuditError, InputError
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.device import DEFAULT_CUDA, parse_device
from sglang_audit.inputs.pins import target_device
from sglang_audit.resolve.pipeline import (
    check_entry,
    flag_table,
    locate_model,
    parse_env,
    resolve_target,
)
from sglang_audit.resolve.resolver import ModelInput, Resolver, Target
from sglang_audit.resolve.resultcache import ResultCache
from sglang_audit.resolve.workers import WorkerDied, run_all
from sglang_audit.result import (
    STATUS_REJECTED,
    STATUS_UNKNOWN,
    Rejection,
    Resolution,
    Setting,
    UnknownValue,
)
from sglang_audit.source.locate import SourceTree, locate_source


@dataclass(frozen=True)
class FlagSet:
    name: str
    items: tuple[str, ...]  # KEY=VALUE, as for --set

    def label(self) -> str:
        return " ".join(self.items) if self.items else "(no flags)"


# The default sweep (rules/matrix.toml): architectures, bundled models, the flags each model
# is deployed with, and the named flag sets.
_DEFAULTS = factfiles.matrix()
DEFAULT_ARCHS: tuple[str, ...] = _DEFAULTS.archs
DEFAULT_MODELS: tuple[str, ...] = _DEFAULTS.models
MODEL_DEFAULT_SETS: dict[str, tuple[str, ...]] = dict(_DEFAULTS.model_sets)
DEFAULT_FLAG_SETS: tuple[FlagSet, ...] = tuple(FlagSet(name, items) for name, items in _DEFAULTS.flag_sets.items())


@dataclass(frozen=True)
class RejectionHint:
    """How to get past one known SGLang rejection (rules/matrix.toml ``rejection_hints``)."""

    id: str
    message_contains: str  # whitespace-normalised substring of SGLang's message
    sets: tuple[str, ...]  # KEY=VALUE to add, as for --set
    why: str
    alternative: str
    sources: tuple[str, ...]

    def advice(self) -> str:
        return " ".join(f"--set {item}" for item in self.sets)

    def matches(self, rejection: Rejection) -> bool:
        return " ".join(self.message_contains.split()) in " ".join(rejection.message.split())


REJECTION_HINTS: tuple[RejectionHint, ...] = tuple(
    RejectionHint(h.id, h.message_contains, h.set, " ".join(h.why.split()), h.alternative, h.sources)
    for h in _DEFAULTS.rejection_hints
)


@dataclass(frozen=True)
class Column:
    title: str
    setting: str
    runtime: bool  # show "config → runtime" when the two differ


COLUMNS: tuple[Column, ...] = (
    Column("moe", "moe_runner_backend", True),
    Column("spec-moe", "speculative_moe_runner_backend", True),
    Column("fp4 config→runtime", "fp4_gemm_runner_backend", True),
    Column("attention", "attention_backend", True),
)

STATUS_ERROR = "error"  # the case itself failed (bad model dir, analysis crash)
STATUS_SKIPPED = "skipped"  # a default flag set names a setting this release does not have


class MatrixError(AuditError):
    """The sweep itself failed (a worker process died)."""

    exit_code = 3


def parse_flag_set(text: str) -> FlagSet:
    """``NAME=k=v,k=v`` (``NAME=`` or ``NAME`` alone: no flags)."""
    name, _, rest = text.partition("=")
    name = name.strip()
    if not name or any(c.isspace() or c == "," for c in name):
        raise InputError(f"bad --flags-set {text!r}: expected NAME=KEY=VALUE,KEY=VALUE")
    items = tuple(part.strip() for part in rest.split(",") if part.strip())
    for item in items:
        if "=" not in item:
            raise InputError(f"bad --flags-set {text!r}: {item!r} is not KEY=VALUE")
    return FlagSet(name, items)


def split_list(values: Iterable[str]) -> list[str]:
    """Repeated and/or comma-separated option values, in order, without duplicates."""
    out: list[str] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return out


# ---- result data ------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    index: int
    arch: str
    model: str
    flag_set: str


@dataclass(frozen=True)
class Cell:
    """One main setting of one case, reduced to what the table and the JSON show."""

    setting: str
    config: Any  # str | None | UnknownValue
    runtime: Any
    status: str
    present: bool
    deciding: tuple[str, int, str] | None  # file, line, guard of the last chain step


@dataclass(frozen=True)
class CaseFinding:
    rule: str
    severity: str
    setting: str | None
    title: str


@dataclass(frozen=True)
class CaseResult:
    case: Case
    flags: dict[str, Any]
    status: str  # resolved | unknown | rejected | error
    cells: tuple[Cell, ...] = ()
    findings: tuple[CaseFinding, ...] = ()
    undecided: tuple[str, ...] = ()  # rule ids a needed fact left open
    rejected: Rejection | None = None
    conditional_rejections: int = 0
    error: str | None = None


@dataclass(frozen=True)
class Matrix:
    source: dict[str, Any]
    archs: tuple[str, ...]
    models: tuple[str, ...]
    flag_sets: tuple[FlagSet, ...]
    common_sets: tuple[str, ...]
    model_sets: dict[str, tuple[str, ...]]
    cuda: str
    cudnn: str | None
    rules: int | None  # rules applied; None when the rules module is unusable
    rules_note: str
    columns: tuple[Column, ...]
    results: tuple[CaseResult, ...] = field(default=())
    driver: str | None = None  # --driver; None: DEFAULT_DRIVER assumed


# ---- rules, integrated lazily -----------------------------------------------------------


def load_rules(extra_dirs: Sequence[Path] = ()) -> tuple[tuple[Any, ...] | None, str]:
    """The known-bad rules, or None with the reason when ``rules`` is missing or its API
    is not (yet) usable; a bad user rule dir is an input error."""
    try:
        from sglang_audit.rules import knownbad as rules_mod
    except Exception as exc:  # the module is being written: degrade, say why
        return None, f"rules not applied: cannot import sglang_audit.rules ({type(exc).__name__}: {exc})"
    loader = getattr(rules_mod, "load_rules", None)
    if not callable(loader) or not callable(getattr(rules_mod, "check_resolution", None)):
        return None, "rules not applied: sglang_audit.rules has no load_rules/check_resolution"
    try:
        loaded = tuple(loader(tuple(extra_dirs)))
    except AuditError:
        if extra_dirs:
            raise
        return None, "rules not applied: the shipped rules do not load (run `sglang-audit check` for the error)"
    except Exception as exc:
        if extra_dirs:
            raise InputError(f"cannot load rules: {type(exc).__name__}: {exc}") from None
        return None, f"rules not applied: loading failed ({type(exc).__name__}: {exc})"
    return loaded, f"{len(loaded)} rules applied (and SGLang's own asserts)"


def _check(res: Resolution, rules: tuple[Any, ...] | None) -> tuple[tuple[CaseFinding, ...], tuple[str, ...]]:
    if rules is None:
        return (), ()
    from sglang_audit.rules.knownbad import check_resolution

    result = check_resolution(res, rules)
    findings = tuple(
        CaseFinding(str(f.rule_id), str(f.severity), f.setting, str(f.title)) for f in result.findings
    )
    undecided = tuple(sorted({str(u.rule_id) for u in result.undecided}))
    return findings, undecided


# ---- one case ------------------------------------------------------------------------------


def _cell(name: str, setting: Setting | None) -> Cell:
    if setting is None:
        return Cell(name, None, None, "absent", False, None)
    step = setting.deciding
    deciding = (step.file, step.line, step.guard) if step is not None else None
    return Cell(name, setting.config, setting.runtime, setting.status, setting.present, deciding)


def summarise(case: Case, res: Resolution, rules: tuple[Any, ...] | None) -> CaseResult:
    cells = tuple(_cell(col.setting, res.settings.get(col.setting)) for col in COLUMNS)
    if res.rejected is not None:
        status = STATUS_REJECTED
    elif any(s.status == STATUS_UNKNOWN for s in res.settings.values()):
        status = STATUS_UNKNOWN
    else:
        status = "resolved"
    findings, undecided = _check(res, rules)
    return CaseResult(case, dict(res.flags), status, cells, findings, undecided, res.rejected,
                      len(res.rejections))


class Worker:
    """Per-process state: the located tree and one SourceCache for every case it runs
    (made in the parent; each worker process runs on its own copy)."""

    def __init__(self, tree: SourceTree, cuda: str, cudnn: str | None, env: dict[str, str],
                 use_cache: bool, rules: tuple[Any, ...] | None, driver: str | None = None) -> None:
        self.tree = tree
        self.driver = driver
        self.cuda = cuda
        self.cudnn = cudnn
        self.env = env
        self.cache = SourceCache(use_disk=use_cache)
        self.results = ResultCache(enabled=use_cache, stable_tree=True)
        self.rules = rules
        self.frozen = False

    def run(self, case: Case, flags: dict[str, Any]) -> CaseResult:
        try:
            device = target_device(case.arch, self.cuda, self.cudnn, self.driver, self.tree.package_dir,
                                   self.tree.version, None)
            model = locate_model(case.model)
            # as pipeline.prepare builds it, with the flags already typed by the parent
            target = Target(self.tree, device, model, dict(flags), dict(self.env))
            res = resolve_target(target, self.cache, self.results)
            result = summarise(case, res, self.rules)
        except AuditError as exc:
            result = CaseResult(case, dict(flags), STATUS_ERROR, error=str(exc))
        except Exception as exc:  # one broken case must not lose the other results
            result = CaseResult(case, dict(flags), STATUS_ERROR, error=f"analysis failed: {type(exc).__name__}: {exc}")
        if not self.frozen:
            # The first case loaded the release's IR and module objects: move them out of
            # the GC's generations so later collections stop re-walking them.
            gc.collect()
            gc.freeze()
            self.frozen = True
        return result


# ---- the sweep -------------------------------------------------------------------------------


@dataclass
class Plan:
    """Everything checked before the sweep starts: the cases and their typed flags."""

    tree: SourceTree
    archs: tuple[str, ...]
    models: tuple[str, ...]
    flag_sets: tuple[FlagSet, ...]
    common_sets: tuple[str, ...]
    cuda: str
    cudnn: str | None
    env: dict[str, str]
    cases: list[Case]
    flags: dict[tuple[str, str], dict[str, Any]]  # (model, flag set) -> typed flags
    model_sets: dict[str, tuple[str, ...]]
    skipped: dict[tuple[str, str], str] = field(default_factory=dict)  # (model, flag set) -> why
    driver: str | None = None


def plan(source: str | None, archs: Sequence[str] = (), models: Sequence[str] = (),
         flag_sets: Sequence[FlagSet] = (), common_sets: Sequence[str] = (), cuda: str = DEFAULT_CUDA,
         env: Sequence[str] = (), use_cache: bool = True, cudnn: str | None = None,
         progress: Callable[[str], None] | None = None, driver: str | None = None) -> Plan:
    archs = tuple(archs) or DEFAULT_ARCHS
    models = tuple(models) or DEFAULT_MODELS
    defaults = not flag_sets
    flag_sets = tuple(flag_sets) or DEFAULT_FLAG_SETS
    names = [fs.name for fs in flag_sets]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise InputError(f"flag set {dup!r} given twice")
    for arch in archs:
        parse_device(arch, cuda, cudnn=cudnn, driver=driver)  # a bad --arch fails here, not once per case
    for model in models:
        locate_model(model)
    env_map = parse_env(list(env))
    tree = locate_source(source, progress=progress)
    # one evaluation of ServerArgs.add_cli_args types every flag set for this release
    placeholder = Target(tree, parse_device(archs[0], cuda), ModelInput("?", Path(".").resolve()), {}, env_map)
    resolver = Resolver(placeholder, SourceCache(use_disk=use_cache))
    check_entry(tree, resolver)  # an unusable tree is one error, not one per case
    table = flag_table(tree, resolver)
    from sglang_audit.inputs.flags import parse_set

    parse_set(table, list(common_sets))  # a bad --set is a usage error, whatever the sets
    model_sets = {m: MODEL_DEFAULT_SETS.get(m, ()) for m in models}
    flags: dict[tuple[str, str], dict[str, Any]] = {}
    skipped: dict[tuple[str, str], str] = {}
    for model in models:
        for fs in flag_sets:
            # later items win: the model's defaults, then the flag set, then --set
            try:
                flags[(model, fs.name)] = parse_set(table, [*model_sets[model], *fs.items, *common_sets])
            except InputError as exc:
                if not defaults:
                    raise InputError(f"flag set {fs.name!r}: {exc}") from None
                # a default set may predate or postdate this release: skip it, say why
                skipped[(model, fs.name)] = f"flag set {fs.name!r} does not apply: {exc}"
                flags[(model, fs.name)] = {}
    cases = [
        Case(i, arch, model, fs.name)
        for i, (arch, model, fs) in enumerate(
            (a, m, f) for a in archs for m in models for f in flag_sets
        )
    ]
    return Plan(tree, archs, models, flag_sets, tuple(common_sets), cuda, cudnn, env_map, cases,
                flags, model_sets, skipped, driver)


def run(p: Plan, jobs: int = 1, use_cache: bool = True, rule_dirs: Sequence[Path] = (),
        on_result: Callable[[CaseResult], None] | None = None) -> Matrix:
    """Resolve every case of the plan; ``on_result`` is called as each case finishes."""
    rules, note = load_rules(rule_dirs)
    results: list[CaseResult | None] = [None] * len(p.cases)
    todo: list[Case] = []
    for case in p.cases:
        why = p.skipped.get((case.model, case.flag_set))
        if why is None:
            todo.append(case)
            continue
        results[case.index] = r = CaseResult(case, {}, STATUS_SKIPPED, error=why)
        if on_result is not None:
            on_result(r)
    worker = Worker(p.tree, p.cuda, p.cudnn, p.env, use_cache, rules, p.driver)

    def one(case: Case) -> CaseResult:
        return worker.run(case, p.flags[(case.model, case.flag_set)])

    def done(_i: int, r: CaseResult) -> None:
        results[r.case.index] = r
        if on_result is not None:
            on_result(r)

    try:
        run_all(one, todo, jobs, done)  # worker processes when jobs > 1 (resolve/workers.py)
    except WorkerDied as exc:
        raise MatrixError(f"a matrix worker process died ({exc.detail}); rerun with --jobs 1 to see the failing case") from None
    finally:
        if worker.frozen:
            gc.unfreeze()  # it ran in this process: give the objects back to the collector
    finished = tuple(r for r in results if r is not None)
    return Matrix(
        source=p.tree.to_json() | {"package_dir": None},
        archs=p.archs, models=p.models, flag_sets=p.flag_sets, common_sets=p.common_sets,
        model_sets=p.model_sets, cuda=p.cuda, cudnn=p.cudnn, rules=None if rules is None else len(rules),
        rules_note=note, columns=COLUMNS, results=finished, driver=p.driver,
    )


@dataclass(frozen=True)
class HintUse:
    """One rejection hint and the cases of a matrix it explains (in plan order)."""

    hint: RejectionHint
    cases: tuple[CaseResult, ...]

    @property
    def sites(self) -> tuple[tuple[str, int], ...]:
        return tuple(dict.fromkeys((r.rejected.file, r.rejected.line) for r in self.cases if r.rejected))

    @property
    def flag_sets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.case.flag_set for r in self.cases))

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.case.model for r in self.cases))


def hint_for(rejection: Rejection | None, hints: Sequence[RejectionHint] = REJECTION_HINTS) -> RejectionHint | None:
    if rejection is None:
        return None
    return next((h for h in hints if h.matches(rejection)), None)


def hint_uses(m: Matrix, hints: Sequence[RejectionHint] = REJECTION_HINTS) -> tuple[HintUse, ...]:
    """The hints this matrix's rejections call for, each with the cases it explains."""
    found: dict[str, list[CaseResult]] = {}
    by_id = {h.id: h for h in hints}
    for r in m.results:
        h = hint_for(r.rejected, hints)
        if h is not None:
            found.setdefault(h.id, []).append(r)
    return tuple(HintUse(by_id[k], tuple(v)) for k, v in found.items())


# ---- helpers the renderers share (data only) ---------------------------------------------------


def _candidates(value: UnknownValue) -> list[str]:
    """The values an unknown may take, when they are values (not "unknown: why" texts)."""
    out = set()
    for c in value.candidates:
        text = str(c.value)
        if text.startswith(("rejected", "unknown")) or len(text) > 40 or " " in text:
            continue
        out.add(text)
    return sorted(out)


def value_text(value: Any, full: bool = False) -> str:
    """A cell value; an unknown is ``?(a|b)`` (its candidates), with ``full`` its reason too."""
    if isinstance(value, UnknownValue):
        cands = _candidates(value)
        text = "?" + ("(" + "|".join(cands) + ")" if cands else "")
        return f"{text} unknown: {value.reason}" if full else text
    return "None" if value is None else str(value)


def unknown_reasons(cell: Cell) -> list[str]:
    return [v.reason for v in (cell.config, cell.runtime) if isinstance(v, UnknownValue)]


def cell_text(cell: Cell, column: Column) -> str:
    if not cell.present:
        return "n/a"
    config = value_text(cell.config)
    if column.runtime and cell.runtime is not None and not _same(cell.runtime, cell.config):
        return f"{config}→{value_text(cell.runtime)}"
    return config


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, UnknownValue) or isinstance(b, UnknownValue):
        return isinstance(a, UnknownValue) and isinstance(b, UnknownValue) and value_text(a) == value_text(b)
    return bool(a == b)
