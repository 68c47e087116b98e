"""Held-out measurement (issue 44): recall on post-cutoff failure reports, false alarms on
known-good deployments.

    .venv/bin/python tests/field/heldout/measure.py             # aggregate figures only
    .venv/bin/python tests/field/heldout/measure.py --verbose   # per-case lines (the curator only)

Every case is run through the CLI exactly as a user would run it: `sglang-audit check
--format json --fail-on never` and `sglang-audit resolve --format json` on the release the
report names (`-s sglang==X`, downloaded into the tool's cache by the tool on first use),
one process at a time, cases in file-name order.

* Held-out failure cases (`cases/*.yaml`, threads opened on or after CUTOFF): a **hit** is a
  finding at error or warning level that names the reported cause: its `setting` is the case's
  `cause.setting` (and its value `cause.value` when the case gives one), or its message names
  one of `cause.names` (the backend, kernel or check that fails). Any other warning does not
  count; it only counts towards the warned-any rate.
* Undecided: `check` lists a rule as undecided (a fact it needs is unknown), or `resolve`
  reports the cause setting as `unknown`.
* Known-good deployments (`known_good/*.yaml`): a **false alarm** is any error-level finding,
  a rejection by SGLang (`resolve`'s `rejected`), or a setting `unsupported`/`rejected`.
* A command that does not produce JSON is a tool error: a miss (category "tool error") for a
  failure case, a false alarm for a known-good deployment.

The default output holds counts only, no thread ids, titles, models, flags or messages, so it
is safe to show rule authors. `--verbose` prints per-case lines and is for the curator alone.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CASES_DIR = HERE / "cases"
KNOWN_GOOD_DIR = HERE / "known_good"
EXCLUDED = HERE / "excluded.tsv"
MODEL_DIRS = (HERE / "models", ROOT / "tests" / "field" / "models", ROOT / "fixtures" / "models")

CUTOFF = "2026-08-01"
# An `unknown` opening date is placed by the thread's number (tests/field/harvest/README.md):
# above the newest pre-cutoff anchor of its repository is held out.
ANCHORS = {"sgl-project/sglang": 33603, "flashinfer-ai/flashinfer": 4549}

CATEGORIES = (
    "attention kernel precondition", "moe kernel precondition", "speculative worker",
    "cache path", "checkpoint tensors", "kernel library defect", "model code",
    "environment/package", "tool error",
)
EXCLUDE_REASONS = (
    "no deployment or error in the report", "not reproducible from code", "feature or docs PR",
    "not a release (model image or branch)", "tracking issue", "opening date undetermined",
    "contaminated",
)
CASE_REQUIRED = ("url", "thread", "opened", "reported_version", "gpu", "arch", "model", "launch",
                 "what_happened", "kind", "cause", "category")
KNOWN_GOOD_REQUIRED = ("url", "source_kind", "kind", "reported_version", "gpu", "arch", "model",
                       "launch", "what_worked")
OPTIONAL = ("title", "check_version", "cuda", "cudnn", "env", "notes", "with", "without", "page",
            "thread", "opened", "in_scope")
SOURCE_KINDS = ("issue", "pr", "cookbook", "doc", "blog")
THREAD_RE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)#(?P<num>\d+)$")
CITE_RE = re.compile(r"([\w.-]+/[\w.-]+)#(\d+)|github\.com/([\w.-]+/[\w.-]+)/(?:issues|pull)/(\d+)")


class CaseError(Exception):
    """A case file that does not follow the format; the message names the file only."""


@dataclass
class Case:
    id: str
    kind: str
    version: str
    arch: str
    model: str
    launch: str
    thread: str = ""
    category: str = ""
    setting: str = ""
    value: str | None = None
    names: list[str] = field(default_factory=list)
    cuda: str | None = None
    cudnn: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    with_: list[str] = field(default_factory=list)
    without: list[str] = field(default_factory=list)

    @property
    def model_spec(self) -> str:
        for base in MODEL_DIRS:
            if (base / self.model).is_dir():
                return str(base / self.model)
        return self.model


def held_out(thread: str, opened: str) -> bool:
    """The thread was opened on or after the cutoff (by date, else by its number)."""
    if opened != "unknown":
        return opened >= CUTOFF
    m = THREAD_RE.match(thread)
    return bool(m) and m["repo"] in ANCHORS and int(m["num"]) > ANCHORS[m["repo"]]


def contaminated() -> set[str]:
    """Threads cited by a shipped rule or an in-sample field case: never held out."""
    cited: set[str] = set()
    paths = list((ROOT / "rules").rglob("*.yaml")) + list((ROOT / "tests" / "field" / "cases").glob("*.yaml"))
    for path in paths:
        for m in CITE_RE.finditer(path.read_text(encoding="utf-8")):
            repo, num = (m[1], m[2]) if m[1] else (m[3], m[4])
            cited.add(f"{repo}#{num}")
    return cited


def _check_fields(path: Path, data: object, required: tuple[str, ...]) -> dict:
    if not isinstance(data, dict):
        raise CaseError(f"{path.name}: not a mapping")
    missing = [k for k in required if k not in data]
    unknown = [k for k in data if k not in required and k not in OPTIONAL]
    if missing or unknown:
        raise CaseError(f"{path.name}: missing {missing} unknown {unknown}")
    return data


def load_case(path: Path, cited: set[str]) -> Case:
    data = _check_fields(path, yaml.safe_load(path.read_text(encoding="utf-8")), CASE_REQUIRED)
    thread, opened = str(data["thread"]), str(data["opened"])
    if not THREAD_RE.match(thread) or not str(data["url"]).startswith("https://github.com/"):
        raise CaseError(f"{path.name}: thread must be owner/repo#N with a GitHub url")
    if not held_out(thread, opened):
        raise CaseError(f"{path.name}: the thread is not held out (opened before {CUTOFF})")
    if thread in cited:
        raise CaseError(f"{path.name}: contaminated thread (cited by a rule or an in-sample case)")
    if data["kind"] != "failure":
        raise CaseError(f"{path.name}: kind must be failure (known-good deployments go in known_good/)")
    if data["category"] not in CATEGORIES:
        raise CaseError(f"{path.name}: category must be one of {CATEGORIES}")
    cause = data["cause"] if isinstance(data["cause"], dict) else {}
    names = [str(n) for n in cause.get("names") or []]
    if not cause.get("setting") and not names:
        raise CaseError(f"{path.name}: cause needs a setting or names")
    value = cause.get("value")
    return Case(
        id=path.stem, kind="failure", thread=thread, category=data["category"],
        version=str(data.get("check_version") or data["reported_version"]), arch=str(data["arch"]),
        model=str(data["model"]), launch=str(data["launch"]), setting=str(cause.get("setting") or ""),
        value=None if value is None else str(value).lower(), names=names,
        cuda=str(data["cuda"]) if data.get("cuda") else None,
        cudnn=str(data["cudnn"]) if data.get("cudnn") else None,
        env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
        with_=[str(p) for p in data.get("with") or []], without=[str(p) for p in data.get("without") or []],
    )


def load_known_good(path: Path) -> Case:
    data = _check_fields(path, yaml.safe_load(path.read_text(encoding="utf-8")), KNOWN_GOOD_REQUIRED)
    if data["kind"] != "known_good":
        raise CaseError(f"{path.name}: kind must be known_good")
    if data["source_kind"] not in SOURCE_KINDS or not str(data["url"]).startswith("https://"):
        raise CaseError(f"{path.name}: source_kind one of {SOURCE_KINDS} and an https url")
    return Case(
        id=path.stem, kind="known_good", thread=str(data.get("thread") or ""),
        version=str(data.get("check_version") or data["reported_version"]), arch=str(data["arch"]),
        model=str(data["model"]), launch=str(data["launch"]),
        cuda=str(data["cuda"]) if data.get("cuda") else None,
        cudnn=str(data["cudnn"]) if data.get("cudnn") else None,
        env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
        with_=[str(p) for p in data.get("with") or []], without=[str(p) for p in data.get("without") or []],
    )


def load_excluded() -> list[tuple[str, str, str]]:
    rows = []
    lines = EXCLUDED.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].split("\t") != ["thread", "opened", "reason"]:
        raise CaseError(f"{EXCLUDED.name}: header must be thread<TAB>opened<TAB>reason")
    for n, line in enumerate(lines[1:], 2):
        cols = line.split("\t")
        if len(cols) != 3 or not THREAD_RE.match(cols[0]) or cols[2] not in EXCLUDE_REASONS:
            raise CaseError(f"{EXCLUDED.name}: line {n} malformed or reason not in {EXCLUDE_REASONS}")
        rows.append((cols[0], cols[1], cols[2]))
    return rows


# where the tool, its rules and its other tests live: a held-out model directory named in any of
# these files was used to write code or tests, so its cases no longer measure foresight
OUTSIDE = ("sglang_audit", "rules", "fixtures", "tests", "docs", "scripts", "benchmarks")


def models_used_outside() -> set[str]:
    """The held-out model directories a file outside the held-out set names by their path
    (e.g. a test fixture copied from one): their cases are contaminated, and left out of the
    figures."""
    names = {d.name for d in (HERE / "models").iterdir() if d.is_dir()} if (HERE / "models").is_dir() else set()
    used: set[str] = set()
    for top in OUTSIDE:
        for path in (ROOT / top).rglob("*"):
            if not path.is_file() or HERE in path.parents or path.suffix not in {".py", ".md", ".toml", ".yaml", ".json", ".txt"}:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            if "heldout/models/" in text:  # the held-out copy itself, by its path (a model
                # of the same name elsewhere, e.g. a bundled profile, is no contamination)
                used.update(n for n in names if f"heldout/models/{n}" in text)
    return used


def load_all() -> tuple[list[Case], list[Case], list[tuple[str, str, str]]]:
    cited = contaminated()
    cases = [load_case(p, cited) for p in sorted(CASES_DIR.glob("*.yaml"))]
    good = [load_known_good(p) for p in sorted(KNOWN_GOOD_DIR.glob("*.yaml"))]
    return cases, good, load_excluded()


def drop_model_contaminated(cases: list[Case]) -> tuple[list[Case], int]:
    used = models_used_outside()
    kept = [c for c in cases if c.model not in used]
    return kept, len(cases) - len(kept)


def audit_bin() -> str:
    local = ROOT / ".venv" / "bin" / "sglang-audit"
    return str(local) if local.exists() else (shutil.which("sglang-audit") or "sglang-audit")


def argv_for(case: Case, command: str) -> list[str]:
    argv = [audit_bin(), command, "--format", "json", "-s", f"sglang=={case.version}", "-a", case.arch,
            "-m", case.model_spec, "--launch", case.launch]
    if command == "check":
        argv[2:2] = ["--fail-on", "never"]
    if case.cuda:
        argv += ["--cuda", case.cuda]
    if case.cudnn:
        argv += ["--cudnn", case.cudnn]
    for k, v in sorted(case.env.items()):
        argv += ["--env", f"{k}={v}"]
    for p in case.with_:
        argv += ["--with", p]
    for p in case.without:
        argv += ["--without", p]
    return argv


def run_json(argv: list[str]) -> dict | None:
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return None
    return out if isinstance(out, dict) else None


def warned(findings: list[dict]) -> list[dict]:
    return [f for f in findings if f.get("severity") in ("error", "warning")]


def names_cause(case: Case, finding: dict) -> bool:
    if case.setting and finding.get("setting") == case.setting:
        if case.value is None or str(finding.get("value")).lower() == case.value:
            return True
    text = " ".join(str(finding.get(k) or "") for k in ("message", "title", "slug")).lower()
    return any(n.lower() in text for n in case.names)


def resolve_false_alarm(resolved: dict) -> list[str]:
    why = []
    if resolved.get("rejected"):
        why.append("rejected")
    for name, s in sorted((resolved.get("settings") or {}).items()):
        if isinstance(s, dict) and s.get("status") in ("unsupported", "rejected"):
            why.append(f"{name}:{s['status']}")
    return why


def pct(n: int, d: int) -> str:
    return f"{n}/{d} ({(n / d if d else 0):.1%})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verbose", action="store_true", help="per-case lines (the curator only: held-out content)")
    args = ap.parse_args()
    try:
        cases, good, excluded = load_all()
    except CaseError as e:
        print(f"case format error: {e}", file=sys.stderr)
        return 2
    cases, dropped_cases = drop_model_contaminated(cases)
    good, dropped_good = drop_model_contaminated(good)
    details: list[str] = []
    hits = warned_any = undecided = tool_errors = 0
    misses: Counter[str] = Counter()
    hits_by: Counter[str] = Counter()
    total_by: Counter[str] = Counter()
    for c in cases:
        total_by[c.category] += 1
        checked = run_json(argv_for(c, "check"))
        resolved = run_json(argv_for(c, "resolve")) or {}
        if checked is None:
            tool_errors += 1
            misses["tool error"] += 1
            details.append(f"{c.id}: TOOL ERROR: {' '.join(argv_for(c, 'check'))}")
            continue
        found = warned(checked.get("findings") or [])
        warned_any += bool(found)
        setting = (resolved.get("settings") or {}).get(c.setting) if c.setting else None
        open_q = bool(checked.get("undecided")) or (isinstance(setting, dict) and setting.get("status") == "unknown")
        undecided += open_q
        hit = any(names_cause(c, f) for f in found)
        if hit:
            hits += 1
            hits_by[c.category] += 1
        else:
            misses[c.category] += 1
        tags = ",".join(sorted({f"{f.get('rule')}:{f.get('severity')}" for f in found})) or "-"
        details.append(f"{c.id} | {c.version} {c.arch} | {'HIT' if hit else 'miss'} | "
                       f"undecided={open_q} | {tags}")
    alarms = 0
    alarm_rules: Counter[str] = Counter()
    good_by: Counter[str] = Counter()
    alarm_by: Counter[str] = Counter()
    for c in good:
        family = platform_family(c.arch)
        good_by[family] += 1
        checked = run_json(argv_for(c, "check"))
        resolved = run_json(argv_for(c, "resolve"))
        if checked is None or resolved is None:
            why = ["tool error"]
            details.append(f"{c.id}: TOOL ERROR: {' '.join(argv_for(c, 'check' if checked is None else 'resolve'))}")
        else:
            errors = sorted({str(f.get("rule")) for f in checked.get("findings") or [] if f.get("severity") == "error"})
            why = errors + resolve_false_alarm(resolved)
        if why:
            alarms += 1
            alarm_by[family] += 1
            alarm_rules.update({w.split(":")[-1] for w in why})
        details.append(f"{c.id} | {c.version} {c.arch} | {'FALSE ALARM ' + ','.join(why) if why else 'clean'}")

    reasons = Counter(r for _, _, r in excluded)
    n = len(cases)
    print(f"held-out measurement, cutoff {CUTOFF}")
    print(f"held-out threads: {len({c.thread for c in cases}) + len(excluded)} read; "
          f"{n} failure cases from {len({c.thread for c in cases})} threads; {len(excluded)} excluded")
    for reason, k in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  excluded, {reason}: {k}")
    if dropped_cases or dropped_good:
        print(f"  left out, model used outside the held-out set (contaminated): {dropped_cases} failure cases, "
              f"{dropped_good} known-good deployments")
    print(f"held-out recall (names the reported cause): {pct(hits, n)}")
    print(f"warned-any rate (any error/warning finding): {pct(warned_any, n)}")
    print(f"undecided rate (a rule undecided or the cause setting unknown): {pct(undecided, n)}")
    print(f"tool errors: {tool_errors}")
    print("by category (hits/cases):")
    for cat in sorted(total_by, key=lambda k: (-total_by[k], k)):
        print(f"  {cat}: {hits_by[cat]}/{total_by[cat]}")
    print("misses by what would have caught them:")
    for cat, k in sorted(misses.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {cat}: {k}")
    print(f"known-good deployments: {len(good)} "
          f"({', '.join(f'{fam} {k}' for fam, k in sorted(good_by.items()))})")
    print(f"false alarms (error finding, rejection or unsupported): {pct(alarms, len(good))}")
    for fam in sorted(alarm_by):
        print(f"  {fam}: {alarm_by[fam]}/{good_by[fam]}")
    if alarm_rules:
        print("false alarms by finding: " + ", ".join(f"{r} {k}" for r, k in sorted(alarm_rules.items())))
    if args.verbose:
        print()
        for line in details:
            print(line)
    return 0


def platform_family(arch: str) -> str:
    if arch.startswith("gfx"):
        return "AMD " + arch
    return {"sm120": "SM12x", "sm121": "SM12x", "sm100": "SM10x", "sm103": "SM10x"}.get(arch, arch.upper())


if __name__ == "__main__":
    raise SystemExit(main())
