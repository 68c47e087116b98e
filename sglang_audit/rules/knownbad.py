"""Known-bad rules: load and validate the rule files, turn a Resolution into facts, match.

A rule is a YAML data file (``rules/known-bad/SGA101-*.yaml`` and user ``--rules`` dirs).
Its condition is a small boolean tree over *resolved facts* — the device, the model
summary, the user's flags, each setting's config/runtime value from ``result.Resolution``,
the release and its pinned FlashInfer, and code fingerprints (a regex or substring over
one file of the analysed release, read as text, never imported).  Nothing here looks at
evaluator internals.

Why this module is long: the rule schema (validated at load), the fact vocabulary and the
three-valued matcher share one vocabulary of fact names; splitting the fact derivation into
its own module is the next step as the vocabulary grows with the field rules.

Matching is three-valued: a fact the resolution could not state (an ``UnknownValue``)
is decided only when all its candidate values agree (candidates on which SGLang rejects
the configuration are ignored: nothing runs there); otherwise the rule is *undecided*
and reported as incomplete, so a clean result is never claimed on a guess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from sglang_audit.errors import AuditError
from sglang_audit.result import STATUS_UNKNOWN, ChainStep, Resolution, Setting, UnknownValue
from sglang_audit.shipped import known_bad_dir, load_toml
from sglang_audit.target.flags import cli_flag
from sglang_audit.userfiles import UserFileError, read_user_file, safe_yaml_load

SEVERITIES = ("error", "warning", "info")
SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
CONFIDENCES = ("high", "medium", "low")
FAIL_ON = {"error": ("error",), "warning": ("error", "warning"), "never": ()}

ID_RE = re.compile(r"^[A-Z][A-Z0-9]{1,9}\d{3}$")
SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
SOURCE_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#\d+$")
FP_ID_RE = re.compile(r"^[a-z][a-z0-9_]*$")

# Facts the rules may name besides settings.*, flags.*, env.*, code.*, subject.*.
# Those marked "not provided" are not (yet) in the Resolution: a rule that needs one is
# undecided unless the user set the matching flag.
BASE_FACTS: dict[str, str] = {
    "arch": "device arch (sm120, sm100, gfx942, ...)",
    "arch_family": "sm8x, sm9x, sm10x, sm11x, sm12x; gfx9 on ROCm; else the platform",
    "platform": "cuda, hip, npu, xpu, cpu",
    "cuda": "CUDA version torch reports",
    "cudnn": "cuDNN version given with --cudnn (e.g. 9.10.2); null when not given (test with is_set)",
    "driver": "NVIDIA driver version assumed",
    "gpu_count": "GPUs assumed",
    "release": "SGLang release version",
    "flashinfer": "pinned flashinfer_python version",
    "structure": "where the release keeps its resolution logic",
    "model.name": "model profile or directory name",
    "model.architecture": "architectures[0] as the release reads it",
    "model.quantization": "ModelConfig.quantization as the release computes it",
    "model.config_quant_method": "quant_method in config.json",
    "model.draft_architecture": "the draft (MTP/NEXTN) model architecture",
    "model.draft_quantization": "the draft model quantization",
    "model.quant_algo": "ModelOpt quant_algo of the checkpoint (NVFP4, FP8, MIXED_PRECISION); null when not ModelOpt",
    "model.kv_cache_quant_algo": "KV-cache quantization the checkpoint declares (FP8); null when it declares none",
    "model.weight_block_size": "weight_block_size of a block-quantized checkpoint ([128, 128]); null when not block-quantized",
    "model.num_experts": "routed experts the checkpoint declares (n_routed_experts, num_local_experts, num_experts); null for a dense model",
}
NOT_PROVIDED = {k for k, v in BASE_FACTS.items() if v.startswith("not provided")}
CHECKPOINT_FACTS = ("model.quant_algo", "model.kv_cache_quant_algo", "model.weight_block_size")
SETTING_LAYERS = ("config", "runtime")
OPS = ("eq", "ne", "in", "not_in", "regex", "version", "is_set")
RULE_KEYS = {
    "id", "slug", "severity", "confidence", "title", "description", "message", "fix",
    "sources", "subject", "when", "fingerprints", "examples", "checked", "needs_env", "tags",
}
REQUIRED_KEYS = ("id", "slug", "severity", "confidence", "title", "message", "fix", "sources", "when", "examples", "checked")


class RuleError(AuditError):
    """A rule file is malformed: the message names the file and the field."""


# ---- rule model ------------------------------------------------------------------------


@dataclass(frozen=True)
class Fingerprint:
    """A code shape in one file of the release (relative to the dir holding ``sglang/``)."""

    id: str
    file: str
    regex: str | None = None
    contains: str | None = None
    description: str = ""


@dataclass(frozen=True)
class Rule:
    id: str
    slug: str
    severity: str
    confidence: str
    title: str
    description: str
    message: str
    fix: str
    sources: tuple[str, ...]
    subjects: tuple[str | None, ...]  # settings the rule is about (one finding each); (None,) if none
    when: Any  # the normalised condition tree (nested tuples/dicts, see _normalise)
    fingerprints: tuple[Fingerprint, ...]
    examples_flag: tuple[dict[str, Any], ...]
    examples_pass: tuple[dict[str, Any], ...]
    checked: str
    needs_env: bool = False
    tags: tuple[str, ...] = ()
    path: str = ""

    @property
    def family(self) -> str:
        if self.id.startswith("SGK"):
            return "kernel"
        fam = {"1": "fp4-gemm", "2": "moe", "3": "flashinfer-version", "4": "attention", "5": "model-specific"}
        return fam.get(self.id[3:4], "custom") if self.id.startswith("SGA") else "custom"


# ---- results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CodeEvidence:
    fingerprint: str
    file: str
    found: bool
    line: int | None = None
    description: str = ""


@dataclass(frozen=True)
class Finding:
    rule_id: str
    slug: str
    severity: str
    confidence: str
    title: str
    message: str
    fix: str
    sources: tuple[str, ...]
    setting: str | None  # the triggering setting
    value: Any  # its resolved (effective) value
    chain: tuple[ChainStep, ...]  # that setting's decision chain
    deciding: ChainStep | None  # the SGLang line that produced the value
    code: tuple[CodeEvidence, ...] = ()
    needs_env: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule_id, "slug": self.slug, "severity": self.severity,
            "confidence": self.confidence, "title": self.title, "message": self.message,
            "fix": self.fix, "sources": list(self.sources), "setting": self.setting,
            "value": self.value, "needs_env": self.needs_env,
            "deciding": self.deciding.to_json() if self.deciding else None,
            "chain": [s.to_json() for s in self.chain],
            "code": [{"fingerprint": c.fingerprint, "file": c.file, "found": c.found, "line": c.line,
                      "description": c.description} for c in self.code],
        }


@dataclass(frozen=True)
class Undecided:
    """A rule the resolution could not decide: the facts it needed and why they are unknown."""

    rule_id: str
    severity: str
    setting: str | None
    facts: tuple[tuple[str, str], ...]  # (fact, reason)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule_id, "severity": self.severity, "setting": self.setting,
                "facts": [{"fact": f, "reason": r} for f, r in self.facts]}


@dataclass(frozen=True)
class CheckResult:
    resolution: Resolution
    rules: tuple[Rule, ...]  # every rule applied (for SARIF tool.driver.rules)
    findings: tuple[Finding, ...]
    undecided: tuple[Undecided, ...]

    def failing(self, fail_on: str) -> list[Finding]:
        return [f for f in self.findings if f.severity in FAIL_ON[fail_on]]

    def exit_code(self, fail_on: str) -> int:
        """0 clean, 1 findings at/above ``fail_on``, 3 a rule that could fail was undecided."""
        if fail_on == "never":
            return 0
        if self.failing(fail_on):
            return 1
        if any(u.severity in FAIL_ON[fail_on] for u in self.undecided):
            return 3
        return 0


# ---- loading and validation ------------------------------------------------------------


def known_settings() -> tuple[str, ...]:
    return tuple(load_toml("settings.toml")["settings"])


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

    def fail(self, where: str, msg: str) -> Any:
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
            if len(parts) == 3 and parts[2] not in SETTING_LAYERS:
                self.fail(where, f"settings.<name>.{parts[2]}: layer must be config or runtime")
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
            if len(parts) == 2 and parts[1] not in SETTING_LAYERS:
                self.fail(where, "subject.<layer> must be config or runtime")
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
        return ("leaf", fact, op, arg)

    def specifier(self, arg: Any, where: str) -> str:
        if not isinstance(arg, str):
            self.fail(where, "expected a version specifier like '>=0.6.16rc5,<0.6.18'")
        try:
            SpecifierSet(arg)
        except InvalidSpecifier:
            self.fail(where, f"bad version specifier {arg!r}")
        return arg


# ---- facts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Unknown:
    """A fact without a single value: why, and the values it may take (none = anything)."""

    reason: str
    candidates: tuple[Any, ...] = ()
    open: bool = True  # some outcome is itself unknown: no candidate list is complete

    def __repr__(self) -> str:  # shown in the undecided report
        return f"unknown ({self.reason})"


def _fact_value(value: Any) -> Any:
    """A Resolution value as a fact: plain values as is, UnknownValue as Unknown with the
    candidate values on which SGLang does not reject the configuration."""
    if not isinstance(value, UnknownValue):
        return value
    cands: list[Any] = []
    is_open = False
    for c in value.candidates:
        v = c.value
        if isinstance(v, str) and v.startswith("rejected: "):
            continue  # SGLang refuses to start on that path: nothing to flag there
        if isinstance(v, str) and v.startswith("unknown: "):
            is_open = True
            continue
        if v not in cands:
            cands.append(v)
    if not value.candidates:
        is_open = True
    return Unknown(value.reason, tuple(cands), is_open or not cands)


def effective(setting: Setting) -> Any:
    """The value that takes effect (``Setting.effective``, the one definition)."""
    return setting.effective


def checkpoint_quant(model_dir: Path) -> dict[str, Any]:
    """quant_algo / kv_cache_quant_algo as the checkpoint declares them (config.json's
    quantization_config, else hf_quant_config.json's quantization block), read as data.
    ModelOpt's compressed-tensors form (config_groups) is named only when every group agrees
    (4-bit float groups of 16 = NVFP4, 8-bit float = FP8). Unreadable → Unknown."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        why = Unknown(f"the model's config.json at {model_dir} could not be read")
        return dict.fromkeys(CHECKPOINT_FACTS, why)
    qc = config.get("quantization_config") if isinstance(config, dict) else None
    if not isinstance(qc, dict) and isinstance(config.get("text_config"), dict):
        qc = config["text_config"].get("quantization_config")
    if not isinstance(qc, dict):
        try:
            hfq = json.loads((model_dir / "hf_quant_config.json").read_text(encoding="utf-8"))
            qc = hfq.get("quantization") if isinstance(hfq, dict) else None
            qc = dict(qc, quant_method="modelopt") if isinstance(qc, dict) else None
        except (OSError, ValueError):
            qc = None
    if not isinstance(qc, dict):
        return dict.fromkeys(CHECKPOINT_FACTS, None)  # an unquantized checkpoint
    block = qc.get("weight_block_size")
    algo: Any = qc.get("quant_algo")
    if algo is None and str(qc.get("quant_method", "")).startswith("modelopt"):
        kinds = {_group_algo(g.get("weights")) for g in (qc.get("config_groups") or {}).values() if isinstance(g, dict)}
        algo = kinds.pop() if len(kinds) == 1 and None not in kinds else Unknown(
            "the checkpoint's config_groups do not name one quant_algo")
    kv: Any = qc.get("kv_cache_quant_algo")
    if kv is None and isinstance(qc.get("kv_cache_scheme"), dict):
        kv = _group_algo(qc["kv_cache_scheme"]) or Unknown("the checkpoint's kv_cache_scheme is not FP8")
    return {"model.quant_algo": algo if isinstance(algo, (str, Unknown)) else None,
            "model.kv_cache_quant_algo": kv if isinstance(kv, (str, Unknown)) else None,
            "model.weight_block_size": [int(x) for x in block] if isinstance(block, list)
            and all(isinstance(x, int) for x in block) else None}


# the config.json keys that name the routed-expert count, by model family (DeepSeek/GLM/Kimi,
# Mixtral/MiniMax/Llama-4/GPT-OSS, Qwen-MoE)
EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")


def checkpoint_experts(model_dir: Path) -> Any:
    """The routed-expert count config.json declares (top level, else text_config): an int for
    a MoE model, None for a dense one, Unknown when config.json cannot be read."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Unknown(f"the model's config.json at {model_dir} could not be read")
    for block in (config, config.get("text_config") if isinstance(config, dict) else None):
        if isinstance(block, dict):
            for key in EXPERT_KEYS:
                n = block.get(key)
                if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                    return n
    return None


def _group_algo(spec: Any) -> str | None:
    if not isinstance(spec, dict) or spec.get("type") != "float":
        return None
    if spec.get("num_bits") == 4 and spec.get("group_size") == 16:
        return "NVFP4"
    if spec.get("num_bits") == 8:
        return "FP8"
    return None


def cudnn_version(number: Any) -> str | None:
    """torch.backends.cudnn.version()'s integer (91002) as a version (9.10.2); None stays
    None: the user did not say, and a rule must not guess it."""
    if not isinstance(number, int) or number <= 0:
        return None
    if number < 10000:  # cuDNN 8 encodes major * 1000 + minor * 100 + patch (8907)
        return f"{number // 1000}.{number // 100 % 10}.{number % 100}"
    return f"{number // 10000}.{number // 100 % 100}.{number % 100}"


def arch_family(device: Mapping[str, Any]) -> str:
    platform = device.get("platform")
    major = device.get("major")
    if platform == "cuda" and isinstance(major, int):
        return f"sm{major}x"
    if platform == "hip" and isinstance(major, int):
        return f"gfx{major}"
    return str(platform)


class Facts:
    """The facts of one deployment (from a Resolution, or an example's fact dict)."""

    def __init__(self, values: dict[str, Any], code: Callable[[Fingerprint], CodeEvidence | Unknown] | None = None) -> None:
        self.values = values
        self._code = code
        # keyed by the fingerprint itself: two rules may give the same id to different shapes
        self._code_cache: dict[Fingerprint, CodeEvidence] = {}

    @classmethod
    def from_resolution(cls, res: Resolution) -> Facts:
        dev = res.device
        m = res.model
        values: dict[str, Any] = {
            "arch": dev.get("arch"), "arch_family": arch_family(dev), "platform": dev.get("platform"),
            "cuda": dev.get("cuda"), "cudnn": cudnn_version(dev.get("cudnn")),
            "driver": dev.get("driver"), "gpu_count": dev.get("gpu_count"),
            "release": res.source.get("version"), "flashinfer": res.source.get("flashinfer"),
            "structure": res.structure, "model.name": m.name,
            "model.architecture": _fact_value(m.architecture), "model.quantization": _fact_value(m.quantization),
            "model.config_quant_method": m.config_quant_method,
            "model.draft_architecture": _fact_value(m.draft_architecture),
            "model.draft_quantization": _fact_value(m.draft_quantization),
        }
        values.update(checkpoint_quant(Path(m.path)))
        values["model.num_experts"] = checkpoint_experts(Path(m.path))
        for name, s in res.settings.items():
            values[f"settings.{name}.config"] = _fact_value(s.config) if s.present else None
            values[f"settings.{name}.runtime"] = _fact_value(effective(s)) if s.present else None
            values[f"settings.{name}"] = values[f"settings.{name}.runtime"]
        for k, v in res.flags.items():
            values[f"flags.{k}"] = v
        for k, v in res.env.items():
            values[f"env.{k}"] = v
        pkg = res.source.get("package_dir")
        root = Path(pkg).parent if pkg else None
        texts: dict[Path, str | None] = {}  # each file read once, whatever number of fingerprints
        return cls(values, (lambda fp: probe_fingerprint(root, fp, texts)) if root else None)

    @classmethod
    def from_example(cls, example: Mapping[str, Any], rule: Rule) -> Facts:
        """An inline example: the facts it names; ``settings.X`` sets both layers unless
        ``settings.X.config``/``.runtime`` are given; code.<id> are booleans."""
        values: dict[str, Any] = {}
        for k, v in example.items():
            values[k] = v
        for k, v in list(example.items()):
            parts = k.split(".")
            if parts[0] == "settings" and len(parts) == 2:
                values.setdefault(f"{k}.runtime", v)
                values.setdefault(f"{k}.config", v)
            if parts[0] == "settings" and len(parts) == 3 and parts[2] == "runtime":
                values.setdefault(f"settings.{parts[1]}", v)
        if "arch" in values and "arch_family" not in values:
            values["arch_family"] = _family_of_name(str(values["arch"]))
        values.setdefault("cudnn", None)  # as in a resolution: not given unless the example says
        def code(fp: Fingerprint) -> CodeEvidence | Unknown:
            key = f"code.{fp.id}"
            if key not in values:
                return Unknown(f"{key} not given")
            return CodeEvidence(fp.id, fp.file, bool(values[key]), None, fp.description)

        return cls(values, code)

    def code(self, fp: Fingerprint) -> Any:
        if fp not in self._code_cache:
            if self._code is None:
                return Unknown("the release source is not available to check the code fingerprint")
            ev = self._code(fp)
            if isinstance(ev, Unknown):
                return ev
            self._code_cache[fp] = ev
        return self._code_cache[fp].found

    def evidence(self, rule: Rule) -> tuple[CodeEvidence, ...]:
        """The code evidence this rule's conditions looked at, by fingerprint id."""
        return tuple(self._code_cache[f] for f in sorted(rule.fingerprints, key=lambda f: f.id) if f in self._code_cache)

    def get(self, name: str, rule: Rule, subject: str | None) -> Any:
        if name == "subject" or name.startswith("subject."):
            name = f"settings.{subject}" + name[len("subject"):]
        if name.startswith("code."):
            fp = next(f for f in rule.fingerprints if f.id == name[5:])
            return self.code(fp)
        if name in self.values:
            return self.values[name]
        if name in NOT_PROVIDED:
            return Unknown(f"{name} is not provided by the resolution")
        if name.startswith(("flags.", "env.")):
            return None  # not set by the user
        if name.startswith("settings."):
            return Unknown(f"{name} was not resolved")
        return Unknown(f"{name} is not known")


def _family_of_name(arch: str) -> str:
    m = re.fullmatch(r"sm(\d+?)(\d)", arch)
    if m:
        return f"sm{m.group(1)}x"
    m = re.fullmatch(r"gfx(\d)\d+", arch)
    return f"gfx{m.group(1)}" if m else arch


def probe_fingerprint(root: Path | None, fp: Fingerprint, texts: dict[Path, str | None] | None = None) -> CodeEvidence:
    """Read one file of the release as text and look for the fingerprint's shape
    (``texts``: files already read for this deployment, None for a missing one)."""
    if root is None:
        return CodeEvidence(fp.id, fp.file, False, None, "source not available")
    path = (root / fp.file).resolve()
    if texts is not None and path in texts:
        text = texts[path]
    else:
        text = _read_release_file(root, path)
        if texts is not None:
            texts[path] = text
    if text is None:
        return CodeEvidence(fp.id, fp.file, False, None, fp.description)
    if fp.regex is not None:
        m = re.search(fp.regex, text, re.MULTILINE)
        pos = m.start() if m else -1
    else:
        pos = text.find(fp.contains or "")
    if pos < 0:
        return CodeEvidence(fp.id, fp.file, False, None, fp.description)
    # the line of the first non-blank character of the match
    while pos < len(text) and text[pos] in " \t\n":
        pos += 1
    return CodeEvidence(fp.id, fp.file, True, text.count("\n", 0, pos) + 1, fp.description)


def _read_release_file(root: Path, path: Path) -> str | None:
    if not path.is_relative_to(root.resolve()) or not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


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
        parts = [(evaluate(c, facts, rule, subject, missing := {}), missing) for c in node[1]]
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
    if not isinstance(value, Unknown):
        return _leaf(value, op, arg)
    outcomes = {_leaf(c, op, arg) for c in value.candidates}
    if not value.open and len(outcomes) == 1:
        return outcomes.pop()
    shown = name.replace("subject", f"settings.{subject}", 1) if name.startswith("subject") else name
    unknown[shown] = value.reason
    return None


def _deciding(setting: Setting, value: Any) -> ChainStep | None:
    """The step that produced the setting's effective value (``Setting.deciding``, the one
    definition every command uses)."""
    return setting.deciding


def _decision_chain(setting: Setting) -> tuple[ChainStep, ...]:
    """The steps about this setting's own values (the full chain also holds every read)."""
    return setting.chain  # the resolver keeps only this setting's own steps (provenance.py)


class _FormatDict(dict):  # type: ignore[type-arg]
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
    for rule in rules:
        for subject in rule.subjects:
            unknown: dict[str, str] = {}
            outcome = evaluate(rule.when, facts, rule, subject, unknown)
            if outcome is None:
                undecided.append(Undecided(rule.id, rule.severity, subject, tuple(sorted(unknown.items()))))
                continue
            if not outcome:
                continue
            setting = res.settings.get(subject) if subject else None
            value = facts.get("subject", rule, subject) if subject else None
            findings.append(Finding(
                rule.id, rule.slug, rule.severity, rule.confidence, rule.title,
                _render(rule.message, facts, rule, subject), _render(rule.fix, facts, rule, subject),
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
    return CheckResult(res, (REJECTED_RULE, UNKNOWN_SETTING_RULE, *KERNEL_RULES, *rules), tuple(findings), tuple(undecided))


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
