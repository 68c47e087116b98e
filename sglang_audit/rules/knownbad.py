"""Known-bad rules: load and validate the rule files, turn a Resolution into facts, match.

A rule is a YAML data file (``rules/known-bad/SGA101-*.yaml`` and user ``--rules`` dirs).
Its condition is a small boolean tree over *resolved facts* — the device, the model
summary, the user's flags, each setting's config/runtime value from ``result.Resolution``,
the release and its pinned FlashInfer, and code fingerprints (a regex or substring over
one file of the analysed release, read as text, never imported).  Nothing here looks at
evaluator internals.

The facts a rule may ask of a resolution (their vocabulary and derivation) are in facts.py;
the rule and result dataclasses in model.py; this module loads and validates rule files and
matches them.

Matching is three-valued: a fact the resolution could not state (an ``UnknownValue``)
is decided only when all its candidate values agree (candidates on which SGLang rejects
the configuration are ignored: nothing runs there); otherwise the rule is *undecided*
and reported as incomplete, so a clean result is never claimed on a guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from sglang_audit import factfiles
from sglang_audit.inputs.flagnames import cli_flag
from sglang_audit.result import (
    STATUS_UNKNOWN,
    STATUS_UNSUPPORTED,
    ChainStep,
    LayerValue,
    Resolution,
    Setting,
)
from sglang_audit.rules.facts import (
    BASE_FACTS,
    SETTING_FACT_LAYERS,
    Facts,
    Unknown,
    arch_family,
    checkpoint_experts,
    checkpoint_quant,
    cudnn_version,
    effective,
    probe_fingerprint,
)
from sglang_audit.rules.model import (
    CONFIDENCES,
    FAIL_ON,
    SEVERITIES,
    SEVERITY_RANK,
    CheckResult,
    CodeEvidence,
    Finding,
    Fingerprint,
    Rule,
    RuleError,
    Undecided,
)
from sglang_audit.shipped import known_bad_dir
from sglang_audit.userfiles import UserFileError, read_user_file, safe_yaml_load

# the names other stages import from here (the facts and the rule model are their own modules)
__all__ = [
    "FAIL_ON", "CheckResult", "Finding", "Fingerprint", "Rule", "RuleError", "Unknown", "arch_family",
    "check_example", "check_resolution", "checkpoint_experts", "checkpoint_quant", "cudnn_version",
    "kernel_findings", "layer_findings", "load_rule_file", "load_rules", "probe_fingerprint",
]


ID_RE = re.compile(r"^[A-Z][A-Z0-9]{1,9}\d{3}$")
SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
SOURCE_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#\d+$")
FP_ID_RE = re.compile(r"^[a-z][a-z0-9_]*$")
OPS = ("eq", "ne", "in", "not_in", "regex", "version", "is_set", "ne_fact")
# ne_fact: the fact differs from another fact (its name is the argument), e.g. the prefill and
# decode attention backends, which make SGLang build HybridAttnBackend when they differ
RULE_KEYS = {
    "id", "slug", "severity", "confidence", "title", "description", "message", "fix",
    "sources", "subject", "when", "fingerprints", "examples", "checked", "needs_env", "tags",
}
REQUIRED_KEYS = ("id", "slug", "severity", "confidence", "title", "message", "fix", "sources", "when", "examples", "checked")



# ---- loading and validation ------------------------------------------------------------


def known_settings() -> tuple[str, ...]:
    return factfiles.settings().settings


def load_rules(extra_dirs: Iterable[Path] = (), shipped: bool = True) -> tuple[Rule, ...]:
    dirs = ([known_bad_dir()] if shipped else []) + [Path(d) for d in extra_dirs]
    settings = known_settings()
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for d in dirs:
        if not d.is_dir():
            raise RuleError(f"{d}: not a rules directory")
        for path in sorted(d.glob("*.y*ml")):
            if path.suffix not in (".yaml", ".yml"):
                continue
            rule = load_rule_file(path, settings)
            if rule.id in seen:
                raise RuleError(f"{path}: id: {rule.id} is already defined in {seen[rule.id]}")
            seen[rule.id] = str(path)
            rules.append(rule)
    return tuple(sorted(rules, key=lambda r: r.id))


def load_rule_file(path: Path, settings: tuple[str, ...] | None = None) -> Rule:
    try:
        data = safe_yaml_load(read_user_file(path, "rule file").decode("utf-8"))
    except UserFileError as exc:
        raise RuleError(exc.message) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path}: cannot read ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise RuleError(f"{path}:{where} not valid YAML ({getattr(exc, 'problem', exc)})") from None
    return parse_rule(data, str(path), settings if settings is not None else known_settings())


def parse_rule(data: Any, path: str, settings: tuple[str, ...]) -> Rule:
    v = _Validator(path, settings)
    if not isinstance(data, dict):
        v.fail("(top level)", "expected a mapping")
    for key in data:
        if key not in RULE_KEYS:
            v.fail(str(key), f"unknown field (allowed: {', '.join(sorted(RULE_KEYS))})")
    for key in REQUIRED_KEYS:
        if key not in data:
            v.fail(key, "missing")
    rid = v.string(data, "id")
    if not ID_RE.match(rid):
        v.fail("id", f"{rid!r} is not an id like SGA101")
    slug = v.string(data, "slug")
    if not SLUG_RE.match(slug):
        v.fail("slug", f"{slug!r} is not a lower-case-dashed slug")
    severity = v.choice(data, "severity", SEVERITIES)
    confidence = v.choice(data, "confidence", CONFIDENCES)
    sources = v.string_list(data, "sources")
    if not sources:
        v.fail("sources", "at least one source (owner/repo#number)")
    for i, s in enumerate(sources):
        if not SOURCE_RE.match(s):
            v.fail(f"sources[{i}]", f"{s!r} is not owner/repo#number")
    subj = data.get("subject")
    subjects: tuple[str | None, ...]
    if subj is None:
        subjects = (None,)
    else:
        names = [subj] if isinstance(subj, str) else subj
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            v.fail("subject", "expected a setting name or a non-empty list of setting names")
        for n in names:
            if n not in settings:
                v.fail("subject", f"unknown setting {n!r} (known: {', '.join(settings)})")
        subjects = tuple(names)
    fps: list[Fingerprint] = []
    raw_fps = data.get("fingerprints") or {}
    if not isinstance(raw_fps, dict):
        v.fail("fingerprints", "expected a mapping of id → {file, regex|contains}")
    for fid, spec in raw_fps.items():
        where = f"fingerprints.{fid}"
        if not isinstance(fid, str) or not FP_ID_RE.match(fid):
            v.fail(where, "fingerprint ids are lower_snake_case")
        if not isinstance(spec, dict) or "file" not in spec or not isinstance(spec["file"], str):
            v.fail(where, "expected {file: sglang/..., regex: ... or contains: ...}")
        if set(spec) - {"file", "regex", "contains", "description"}:
            v.fail(where, f"unknown keys {sorted(set(spec) - {'file', 'regex', 'contains', 'description'})}")
        if ("regex" in spec) == ("contains" in spec):
            v.fail(where, "exactly one of regex or contains")
        if not spec["file"].startswith("sglang/") or ".." in spec["file"]:
            v.fail(f"{where}.file", "a path inside the release, starting with sglang/")
        if "regex" in spec:
            try:
                re.compile(spec["regex"], re.MULTILINE)
            except (re.error, TypeError) as exc:
                v.fail(f"{where}.regex", f"bad regex ({exc})")
        fps.append(Fingerprint(fid, spec["file"], spec.get("regex"), spec.get("contains"), str(spec.get("description", ""))))
    fp_ids = {f.id for f in fps}
    when = v.condition(data["when"], "when", fp_ids, has_subject=subj is not None)
    examples = data["examples"]
    if not isinstance(examples, dict) or set(examples) - {"flag", "pass"}:
        v.fail("examples", "expected {flag: [facts...], pass: [facts...]}")
    ex: dict[str, tuple[dict[str, Any], ...]] = {}
    for kind in ("flag", "pass"):
        items = examples.get(kind)
        if not isinstance(items, list) or not items:
            v.fail(f"examples.{kind}", "at least one example deployment (a mapping of facts)")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                v.fail(f"examples.{kind}[{i}]", "expected a mapping of fact → value")
            for key in item:
                v.fact_name(str(key), f"examples.{kind}[{i}].{key}", fp_ids, has_subject=False, example=True)
        ex[kind] = tuple(dict(i) for i in items)
    checked = v.string(data, "checked")
    needs_env = data.get("needs_env", False)
    if not isinstance(needs_env, bool):
        v.fail("needs_env", "expected true or false")
    tags = v.string_list(data, "tags") if "tags" in data else []
    return Rule(
        id=rid, slug=slug, severity=severity, confidence=confidence,
        title=v.string(data, "title"), description=str(data.get("description") or "").strip(),
        message=v.string(data, "message"), fix=v.string(data, "fix"), sources=tuple(sources),
        subjects=subjects, when=when, fingerprints=tuple(fps), examples_flag=ex["flag"],
        examples_pass=ex["pass"], checked=checked, needs_env=needs_env, tags=tuple(tags), path=path,
    )


class _Validator:
    def __init__(self, path: str, settings: tuple[str, ...]) -> None:
        self.path = path
        self.settings = settings

    def fail(self, where: str, msg: str) -> NoReturn:
        raise RuleError(f"{self.path}: {where}: {msg}")

    def string(self, data: dict[str, Any], key: str) -> str:
        value = data.get(key)
        if not isinstance(value, str) or not value.strip():
            self.fail(key, "expected a non-empty string")
        return value.strip()

    def choice(self, data: dict[str, Any], key: str, choices: tuple[str, ...]) -> str:
        value = data.get(key)
        if value not in choices:
            self.fail(key, f"{value!r} is not one of {', '.join(choices)}")
        return str(value)

    def string_list(self, data: dict[str, Any], key: str) -> list[str]:
        value = data.get(key)
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            self.fail(key, "expected a list of strings")
        return list(value)

    def fact_name(self, name: str, where: str, fp_ids: set[str], has_subject: bool, example: bool = False) -> None:
        parts = name.split(".")
        if name in BASE_FACTS:
            return
        head = parts[0]
        if head == "settings" and len(parts) in (2, 3):
            if parts[1] not in self.settings:
                self.fail(where, f"unknown setting {parts[1]!r} (known: {', '.join(self.settings)})")
            if len(parts) == 3 and parts[2] not in SETTING_FACT_LAYERS:
                self.fail(where, f"settings.<name>.{parts[2]}: layer must be config, runtime or layer")
            return
        if head in ("flags", "env") and len(parts) == 2 and parts[1]:
            return
        if head == "code" and len(parts) == 2:
            if parts[1] not in fp_ids:
                self.fail(where, f"no fingerprint {parts[1]!r} defined in this rule")
            return
        if head == "subject" and len(parts) in (1, 2) and not example:
            if not has_subject:
                self.fail(where, "the rule names no subject setting")
            if len(parts) == 2 and parts[1] not in SETTING_FACT_LAYERS:
                self.fail(where, "subject.<layer> must be config, runtime or layer")
            return
        self.fail(where, f"unknown fact {name!r}")

    def condition(self, node: Any, where: str, fp_ids: set[str], has_subject: bool) -> Any:
        """Validate and normalise one condition node into ('all'|'any', [...]), ('not', x)
        or ('leaf', fact, op, arg)."""
        if not isinstance(node, dict) or len(node) == 0:
            self.fail(where, "expected a condition mapping")
        keys = set(node)
        if keys <= {"all"} or keys <= {"any"}:
            (key,) = keys
            items = node[key]
            if not isinstance(items, list) or not items:
                self.fail(f"{where}.{key}", "expected a non-empty list of conditions")
            return (key, tuple(self.condition(c, f"{where}.{key}[{i}]", fp_ids, has_subject) for i, c in enumerate(items)))
        if keys == {"not"}:
            return ("not", self.condition(node["not"], f"{where}.not", fp_ids, has_subject))
        # sugar: {arch_family: sm12x}, {arch: [sm120]}, {release: ">=0.5.10"}, {flashinfer: ...}, {code: id}
        if len(keys) == 1:
            (key,) = keys
            arg = node[key]
            if key in ("arch", "arch_family"):
                vals = [arg] if isinstance(arg, str) else arg
                if not isinstance(vals, list) or not all(isinstance(x, str) for x in vals):
                    self.fail(f"{where}.{key}", "expected a name or a list of names")
                return ("leaf", key, "in", tuple(vals))
            if key in ("release", "flashinfer", "cuda", "cudnn"):
                return ("leaf", key, "version", self.specifier(arg, f"{where}.{key}"))
            if key == "code":
                if not isinstance(arg, str) or arg not in fp_ids:
                    self.fail(f"{where}.code", f"no fingerprint {arg!r} defined in this rule")
                return ("leaf", f"code.{arg}", "eq", True)
        if "fact" not in keys:
            self.fail(where, f"unknown condition keys {sorted(keys)} (use all/any/not/fact/arch/arch_family/release/flashinfer/cuda/cudnn/code)")
        fact = node["fact"]
        if not isinstance(fact, str):
            self.fail(f"{where}.fact", "expected a fact name")
        self.fact_name(fact, f"{where}.fact", fp_ids, has_subject)
        ops = keys - {"fact"}
        if len(ops) != 1 or not ops <= set(OPS):
            self.fail(where, f"exactly one operator of {', '.join(OPS)} with the fact")
        (op,) = ops
        arg = node[op]
        if op in ("in", "not_in"):
            if not isinstance(arg, list):
                self.fail(f"{where}.{op}", "expected a list")
            arg = tuple(arg)
        elif op == "regex":
            if not isinstance(arg, str):
                self.fail(f"{where}.regex", "expected a string")
            try:
                re.compile(arg)
            except re.error as exc:
                self.fail(f"{where}.regex", f"bad regex ({exc})")
        elif op == "version":
            arg = self.specifier(arg, f"{where}.version")
        elif op == "is_set" and not isinstance(arg, bool):
            self.fail(f"{where}.is_set", "expected true or false")
        elif op == "ne_fact":
            if not isinstance(arg, str):
                self.fail(f"{where}.ne_fact", "expected a fact name")
            self.fact_name(arg, f"{where}.ne_fact", fp_ids, has_subject)
        return ("leaf", fact, op, arg)

    def specifier(self, arg: Any, where: str) -> str:
        if not isinstance(arg, str):
            self.fail(where, "expected a version specifier like '>=0.6.16rc5,<0.6.18'")
        try:
            SpecifierSet(arg)
        except InvalidSpecifier:
            self.fail(where, f"bad version specifier {arg!r}")
        return arg



# ---- evaluation ------------------------------------------------------------------------


def _leaf(value: Any, op: str, arg: Any) -> bool:
    if op == "eq":
        return bool(value == arg)
    if op == "ne":
        return bool(value != arg)
    if op == "in":
        return value in arg
    if op == "not_in":
        return value not in arg
    if op == "regex":
        return isinstance(value, str) and re.search(arg, value) is not None
    if op == "is_set":
        return (value is not None) == arg
    if op == "version":
        if value is None:
            return False
        try:
            return Version(str(value)) in SpecifierSet(arg, prereleases=True)
        except InvalidVersion:
            return False
    raise AssertionError(op)


def evaluate(node: Any, facts: Facts, rule: Rule, subject: str | None, unknown: dict[str, str]) -> bool | None:
    """Kleene three-valued evaluation; ``unknown`` collects the facts that were undecided."""
    kind = node[0]
    if kind in ("all", "any"):
        parts = [(evaluate(c, facts, rule, subject, missing := dict[str, str]()), missing) for c in node[1]]
        results = [r for r, _ in parts]
        if kind == "all":
            outcome = False if False in results else (None if None in results else True)
        else:
            outcome = True if True in results else (None if None in results else False)
        if outcome is None:  # only the undecided parts explain an undecided node
            for r, missing in parts:
                if r is None:
                    unknown.update(missing)
        return outcome
    if kind == "not":
        r = evaluate(node[1], facts, rule, subject, unknown)
        return None if r is None else not r
    _, name, op, arg = node
    value = facts.get(name, rule, subject)
    if op == "ne_fact":
        return _compare_facts(name, value, arg, facts.get(arg, rule, subject), subject, unknown)
    if not isinstance(value, Unknown):
        return _leaf(value, op, arg)
    outcomes = {_leaf(c, op, arg) for c in value.candidates}
    if not value.open and len(outcomes) == 1:
        return outcomes.pop()
    shown = name.replace("subject", f"settings.{subject}", 1) if name.startswith("subject") else name
    unknown[shown] = value.reason
    return None


def _compare_facts(name: str, value: Any, other_name: str, other: Any, subject: str | None,
                   unknown: dict[str, str]) -> bool | None:
    """``name`` != ``other_name``: decided when every pair of candidate values agrees."""
    def cands(v: Any) -> tuple[tuple[Any, ...], bool]:
        return (v.candidates, v.open) if isinstance(v, Unknown) else ((v,), False)

    (ca, open_a), (cb, open_b) = cands(value), cands(other)
    outcomes = {a != b for a in ca for b in cb}
    if not (open_a or open_b) and len(outcomes) == 1:
        return outcomes.pop()
    for n, v in ((name, value), (other_name, other)):
        if isinstance(v, Unknown):
            unknown[n.replace("subject", f"settings.{subject}", 1) if n.startswith("subject") else n] = v.reason
    return None


def _deciding(setting: Setting, value: Any) -> ChainStep | None:
    """The step that produced the setting's effective value (``Setting.deciding``, the one
    definition every command uses)."""
    return setting.deciding


def _decision_chain(setting: Setting) -> tuple[ChainStep, ...]:
    """The steps about this setting's own values (the full chain also holds every read)."""
    return setting.chain  # the resolver keeps only this setting's own steps (provenance.py)


class _FormatDict(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _render(template: str, facts: Facts, rule: Rule, subject: str | None) -> str:
    val = facts.get("subject", rule, subject) if subject else None
    ctx = _FormatDict(
        setting=subject or "", value=_show(val), arch=_show(facts.values.get("arch")),
        release=_show(facts.values.get("release")), flashinfer=_show(facts.values.get("flashinfer")),
        cudnn=_show(facts.values.get("cudnn")), model=_show(facts.values.get("model.name")),
        architecture=_show(facts.values.get("model.architecture")),
        quantization=_show(facts.values.get("model.quantization")),
        flag=cli_flag(subject) if subject else "",
    )
    return " ".join(template.format_map(ctx).split())


# the few fields whose command-line flag is not the field name with dashes
def _show(value: Any) -> str:
    if isinstance(value, Unknown):
        return "/".join(str(c) for c in value.candidates) if value.candidates and not value.open else "unknown"
    return str(value)


# facts the tool assumes when the user does not give them, and the fact saying where each
# came from: a rule deciding on one of these decides on an assumption unless it was given
ASSUMED_INPUTS = {"cudnn": ("cudnn_source", "--cudnn"), "driver": ("driver_source", "--driver")}


def _leaf_names(node: Any) -> set[str]:
    if node[0] in ("all", "any"):
        return set().union(*(_leaf_names(c) for c in node[1]))
    if node[0] == "not":
        return _leaf_names(node[1])
    return {node[1]} | ({node[3]} if node[2] == "ne_fact" else set())


def _assumed_inputs(when: Any, facts: Facts) -> list[str]:
    """The assumed inputs a rule's condition reads, each as "<fact> is <value> (<where it came
    from>; <flag> states it)"; none when every one it reads was given."""
    out = []
    names = _leaf_names(when)
    for name in sorted(names & ASSUMED_INPUTS.keys()):
        source_fact, flag = ASSUMED_INPUTS[name]
        source = facts.values.get(source_fact)
        if not (isinstance(source, str) and source.startswith("given")):
            out.append(f"{name} is {_show(facts.values.get(name))} ({source or 'assumed'}; {flag} states it)")
    for name in sorted(n for n in names if n.startswith("env.")):
        # a variable the user did not set, taken from an environment profile nobody named
        source = facts.values.get(f"env_source.{name[4:]}")
        if isinstance(source, str) and "--env-profile" not in source:
            out.append(f"{name[4:]}={_show(facts.values.get(name))} ({source}; --env or --env-profile states it)")
    return out


def check_resolution(res: Resolution, rules: Iterable[Rule]) -> CheckResult:
    rules = tuple(rules)
    findings: list[Finding] = []
    undecided: list[Undecided] = []
    if res.rejected is not None:
        r = res.rejected
        step = ChainStep(r.file, r.line, " and ".join(r.when), f"{r.exception}: {r.message}", r.code, r.stage, "write")
        findings.append(Finding(
            REJECTED_RULE.id, REJECTED_RULE.slug, "error", "high", REJECTED_RULE.title,
            f"SGLang {res.source.get('version')} rejects this configuration: {r.exception}: {r.message}",
            "Change the flags SGLang names in the message.", (), None, None, (step,), step,
        ))
        return CheckResult(res, (REJECTED_RULE, *rules), tuple(findings), ())
    facts = Facts.from_resolution(res)
    findings.extend(kernel_findings(res))
    findings.extend(layer_findings(res))
    moe_only = frozenset(factfiles.settings().moe_layer_settings)
    dense = facts.values.get("model.num_experts", 0) is None  # no routed experts declared
    for rule in rules:
        for subject in rule.subjects:
            if dense and subject in moe_only:
                continue  # a rule about MoE layers holds only where the model builds them
            if subject is not None and subject in res.settings and res.settings[subject].unused:
                # a rule about a kernel runner holds only where a layer of the model calls its
                # kernel (Setting.unused: none does, issue 42)
                continue
            unknown: dict[str, str] = {}
            outcome = evaluate(rule.when, facts, rule, subject, unknown)
            if outcome is None:
                undecided.append(Undecided(rule.id, rule.severity, subject, tuple(sorted(unknown.items()))))
                continue
            if not outcome:
                continue
            setting = res.settings.get(subject) if subject else None
            value = facts.get("subject", rule, subject) if subject else None
            severity, confidence, message = rule.severity, rule.confidence, _render(rule.message, facts, rule, subject)
            assumed = _assumed_inputs(rule.when, facts)
            if assumed and severity == "error":
                # the condition holds on a value the deployment did not state (issue 44): the
                # failure is known only if that assumption is true of it, so it is said with "if"
                severity, confidence = "warning", "medium"
                message += " — if " + "; ".join(assumed)
            findings.append(Finding(
                rule.id, rule.slug, severity, confidence, rule.title,
                message, _render(rule.fix, facts, rule, subject),
                rule.sources, subject, _plain(value),
                _decision_chain(setting) if setting else (),
                _deciding(setting, value) if setting else None,
                facts.evidence(rule),
                rule.needs_env,
            ))
    findings.sort(key=lambda f: (SEVERITY_RANK[f.severity], f.rule_id, f.setting or ""))
    # a setting the resolution could not state is undecided in its own right: no rule may
    # happen to need it, yet "no findings" would be claimed on a guess (issue #23)
    for name, setting in res.settings.items():
        if setting.status == STATUS_UNKNOWN and setting.present:
            undecided.append(Undecided(UNKNOWN_SETTING_RULE.id, UNKNOWN_SETTING_RULE.severity, name,
                                       ((f"settings.{name}", _unknown_reason(setting)),)))
    return CheckResult(res, (REJECTED_RULE, UNKNOWN_SETTING_RULE, LAYER_UNSUPPORTED_RULE, *KERNEL_RULES, *rules), tuple(findings), tuple(undecided))


def _unknown_reason(setting: Any) -> str:
    for value in (setting.config, setting.runtime, setting.layer):
        reason = getattr(value, "reason", None)
        if reason:
            return str(reason)
    return setting.note or "unknown"


def _plain(value: Any) -> Any:
    if isinstance(value, Unknown):
        return _show(value)
    return value


def check_example(rule: Rule, example: Mapping[str, Any]) -> bool | None:
    """Does ``rule`` flag this example deployment (for any of its subjects)?"""
    facts = Facts.from_example(example, rule)
    results = [evaluate(rule.when, facts, rule, s, {}) for s in rule.subjects]
    return True if True in results else (None if None in results else False)


# A setting left unknown: the check cannot be clean (exit 3 at --fail-on error/warning).
UNKNOWN_SETTING_RULE = Rule(
    id="SGA002", slug="setting-unknown", severity="error", confidence="high",
    title="A setting of this deployment could not be resolved",
    description="The resolution left a setting unknown (its reason names where evaluation stopped): no rule can be trusted to have seen its value, so the check is undecided, never clean.",
    message="This setting is unknown.", fix="Read the reason; pass the missing input (flags, model files) or report the gap.",
    sources=(), subjects=(None,), when=("all", ()), fingerprints=(), examples_flag=(), examples_pass=(),
    checked="Derived from the resolution (Setting.status == unknown).", path="<builtin>",
)

# SGLang itself refusing the configuration (an assert/raise on the path) is always reported.
REJECTED_RULE = Rule(
    id="SGA001", slug="sglang-rejects-configuration", severity="error", confidence="high",
    title="SGLang rejects this configuration",
    description="An assert or raise in SGLang's own configuration code fires for this deployment: the server would not start.",
    message="SGLang rejects this configuration.", fix="Change the flags SGLang names in the message.",
    sources=(), subjects=(None,), when=("all", ()), fingerprints=(), examples_flag=(), examples_pass=(),
    checked="Derived from the resolution (result.Resolution.rejected).", path="<builtin>",
)


# SGLang refusing the layers it builds with a setting (resolve/layers.py, resolve/attention.py:
# a raise in the quantization method's or the attention backend's construction or dispatch).
# Derived from the evaluation, so it needs no rule file; SGA209/SGA210 stay as cross-checks.
LAYER_UNSUPPORTED_RULE = Rule(
    id="SGA003", slug="sglang-layers-fail", severity="error", confidence="high",
    title="SGLang raises when it builds the layers for this configuration",
    description="The configuration passes ServerArgs, but evaluating the construction of the model's MoE layers "
                "(quantization method, runner, dispatch), of its attention backend or of the speculative worker "
                "(the class SGLang's dispatch picks, its draft attention backends) reaches a raise or assert "
                "in SGLang's own code: the server would fail while loading the model.",
    message="", fix="Change the setting SGLang's message names (or the one the layer was built with).",
    sources=(), subjects=(None,), when=("all", ()), fingerprints=(), examples_flag=(), examples_pass=(),
    checked="Derived from Setting.layer (status unsupported), including the draft's attention backend and the "
            "speculative worker.", path="<builtin>",
)


def layer_findings(res: Resolution) -> list[Finding]:
    out: list[Finding] = []
    rule = LAYER_UNSUPPORTED_RULE
    for name, setting in res.settings.items():
        layer = setting.layer
        for who, lv in (("", layer), ("the draft model's ", getattr(layer, "draft", None))):
            if not isinstance(lv, LayerValue) or lv.status != STATUS_UNSUPPORTED:
                continue
            stage = {"attention": "attention backend", "speculative": "speculative worker",
                     "linear": "dense linear layers"}.get(lv.stage, "MoE layers")
            where = f" at {lv.site}" if lv.site else ""
            message = f"SGLang {res.source.get('version')}: building {who}{stage} with {name} fails{where}: {lv.value}"
            severity, confidence = rule.severity, rule.confidence
            pending = lv.unsettled_absences
            if pending:
                # the raise rests on an optional package being absent (a plain install lacks
                # it; images and users often add it): say so, and what the other state gives
                severity, confidence = "warning", "medium"
                others = "; ".join(f"with {p} installed: {lv.fork_outcome(p) or f'not evaluated (--with {p})'}"
                                   for p in pending)
                message += f" — assuming {', '.join(pending)} not installed (a plain install lacks it); {others}"
                fix = f"Install {', '.join(pending)} if SGLang's message asks for it, or change the setting."
            else:
                fix = rule.fix
                # an absence the other state's own failure settled: both outcomes told
                failing = [f"with {p} installed: {o}" for a in lv.assumptions for p in [a.partition(": ")[0]]
                           if (o := lv.fork_outcome(p) or "").startswith("unsupported: ") and not any(
                               f.startswith(f"with {p} installed") and f.endswith("(the same outcome)") for f in lv.forks)]
                if failing:
                    message += f" — and {'; '.join(failing)}"
            file, _, line = lv.site.rpartition(":")
            code = (CodeEvidence(f"layer:{lv.stage}", file, True, int(line) if line.isdigit() else None, lv.code),) if lv.site else ()
            value = effective(setting)
            out.append(Finding(rule.id, rule.slug, severity, confidence, rule.title, message, fix,
                               (), name, _plain(value), _decision_chain(setting), _deciding(setting, value), code))
    return out


# The kernel library's own declared support (kernels.py, Setting.kernel): a derived finding,
# not a rule file. SGK101: the library refuses the kernel for this GPU. An unknown verdict
# is no finding (every trtllm-gen MoE on SM100 would be one: its kernels are prebuilt
# artifacts); resolve/explain/report show it with its reason.
KERNEL_UNSUPPORTED_RULE = Rule(
    id="SGK101", slug="kernel-unsupported-on-device", severity="error", confidence="high",
    title="The kernel library declares no kernel for this GPU",
    description="The FlashInfer version the release pins declares the entry point SGLang calls for this setting "
                "unsupported on the device's compute capability (backend_requirement / supported_compute_capability / JIT arch list).",
    message="", fix="Choose a value of the setting whose kernel the library declares for this GPU (the finding names the requirement).",
    sources=(), subjects=(None,), when=("all", ()), fingerprints=(), examples_flag=(),
    examples_pass=(), checked="Derived from Setting.kernel (sglang_audit/kernels.py).", path="<builtin>",
)
KERNEL_RULES = (KERNEL_UNSUPPORTED_RULE,)


def kernel_findings(res: Resolution) -> list[Finding]:
    out: list[Finding] = []
    sm = str(res.device.get("arch"))
    rule = KERNEL_UNSUPPORTED_RULE
    for name, setting in res.settings.items():
        k = setting.kernel
        if k is None or k.status != "unsupported":
            continue
        what = f"{k.function}" + (f" backend {k.backend!r}" if k.backend else "")
        lib = f"{k.library} {k.version}" if k.version else k.library
        message = f"{lib} declares {what} unsupported on {sm}: {k.reason}"
        fix = f"Choose a {cli_flag(name)} value whose kernel {k.library} declares for this GPU."
        code = tuple(CodeEvidence(f"{layer.mechanism}:{layer.function}", layer.file, True, layer.line, layer.detail)
                     for layer in k.layers if layer.says == "unsupported" and layer.enforced)
        value = effective(setting)
        out.append(Finding(rule.id, rule.slug, rule.severity, rule.confidence, rule.title, message, fix,
                           tuple(f"{k.library} {k.version}: {c.file}:{c.line}" for c in code[:1]),
                           name, _plain(value), _decision_chain(setting), _deciding(setting, value), code))
    return out
