"""Validate the issue-harvest ledger (tests/field/harvest/) and print its counts.

Stdlib only, no network. The ledger records one row per thread read while mining SGLang's,
FlashInfer's and sgl-kernel's public issues (issue 44); the queries file is the harvest's
reproducible input and holds the held-out CUTOFF; the held-out file lists, by id and opening
date only, threads the search returned that were opened on or after the CUTOFF (never read).

    python scripts/harvest.py                 # validate the committed files, print counts
    python scripts/harvest.py --ledger X.tsv  # validate another ledger

Each problem is one line naming the file, the line and the thread; the exit code is 1 when
there is any. What is checked (docs in tests/field/harvest/README.md):

* the header is exactly COLUMNS and every row has that many non-empty fields;
* `thread` is `owner/repo#N` and appears once (in the ledger, and not also held out);
* `opened` is a real YYYY-MM-DD before the CUTOFF, or `unknown`; an `unknown` row must be
  placed before the CUTOFF by its number (at most the highest number in the same repository
  whose known opening date is before the CUTOFF) or by an `earliest post YYYY-MM-DD` note;
* `outcome` is in the vocabulary, and every `rule:SGAnnn` id exists in rules/known-bad;
  a `candidate-rule` row says its mechanism in `note`;
* every `query_ids` entry is a query of the queries file;
* held-out rows are dated on or after the CUTOFF, or `unknown` with a number above every
  dated pre-CUTOFF ledger thread of their repository (so not provably before the CUTOFF).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import sys
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARVEST = ROOT / "tests" / "field" / "harvest"
LEDGER = HARVEST / "ledger.tsv"
QUERIES = HARVEST / "queries.toml"
HELDOUT = HARVEST / "heldout-candidates.tsv"
RULES = ROOT / "rules" / "known-bad"

COLUMNS = ("thread", "opened", "title", "query_ids", "arch", "backend_or_kernel",
           "release", "fix", "outcome", "note")
HELDOUT_COLUMNS = ("thread", "opened")
STAGES = ("config", "moe-layers", "attention-construction", "kernel-declaration")
OUTCOME_KINDS = ("rule", "candidate-rule", "covered-by-evaluation", "out-of-scope",
                 "not-reproducible-from-code")

_THREAD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*#([0-9]+)$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_SLUG = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
_EARLIEST = re.compile(r"earliest post (\d{4}-\d{2}-\d{2})")
_RULE_ID = re.compile(r"^id:\s*['\"]?([A-Za-z]+[0-9]+)['\"]?\s*$", re.M)


def rule_ids(rules_dir: Path = RULES) -> set[str]:
    """The `id:` of every rule file (read as text: the script needs no YAML library)."""
    ids = set()
    for path in sorted(rules_dir.glob("*.yaml")):
        m = _RULE_ID.search(path.read_text(encoding="utf-8"))
        if m:
            ids.add(m.group(1))
    return ids


def load_queries(path: Path = QUERIES) -> tuple[str, dict[str, dict]]:
    """(CUTOFF, {query id: query}) from the queries file."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    cutoff = data["harvest"]["cutoff"]
    queries = {q["id"]: q for q in data.get("query", [])}
    return cutoff, queries


def read_tsv(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]


def _valid_date(text: str) -> bool:
    if not _DATE.match(text):
        return False
    try:
        _dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def outcome_problem(outcome: str, known_rules: set[str]) -> str | None:
    """Why `outcome` is not in the vocabulary (None when it is)."""
    kind, _, detail = outcome.partition(":")
    if kind not in OUTCOME_KINDS:
        return f"unknown outcome {outcome!r} (one of rule:<id>, candidate-rule, " \
               f"covered-by-evaluation:<stage>, out-of-scope:<why>, not-reproducible-from-code)"
    if kind in ("candidate-rule", "not-reproducible-from-code"):
        return None if not detail else f"outcome {outcome!r} takes no ':' part"
    if kind == "rule":
        if detail not in known_rules:
            return f"outcome {outcome!r}: no rule {detail!r} in rules/known-bad"
        return None
    if kind == "covered-by-evaluation":
        if detail not in STAGES:
            return f"outcome {outcome!r}: stage must be one of {', '.join(STAGES)}"
        return None
    if not _SLUG.match(detail):
        return f"outcome {outcome!r}: out-of-scope needs a reason slug (out-of-scope:<why>)"
    return None


def _number(thread: str) -> int:
    return int(thread.rsplit("#", 1)[1])


def _repo(thread: str) -> str:
    return thread.rsplit("#", 1)[0]


def validate(ledger_rows: list[list[str]], cutoff: str, known_rules: set[str],
             query_ids: set[str] | None = None, heldout_rows: list[list[str]] | None = None,
             ledger_name: str = "ledger.tsv",
             heldout_name: str = "heldout-candidates.tsv") -> list[str]:
    """Every problem found, one line each, naming the file, line and thread."""
    errors: list[str] = []
    if not ledger_rows or tuple(ledger_rows[0]) != COLUMNS:
        return [f"{ledger_name}:1: header must be {chr(9).join(COLUMNS)!r}"]
    rows = []
    seen: dict[str, int] = {}
    for lineno, fields in enumerate(ledger_rows[1:], start=2):
        where = f"{ledger_name}:{lineno}"
        if len(fields) != len(COLUMNS):
            errors.append(f"{where}: {len(fields)} fields, expected {len(COLUMNS)}")
            continue
        row = dict(zip(COLUMNS, (f.strip() for f in fields), strict=True))
        thread = row["thread"]
        where = f"{where}: {thread}"
        if not _THREAD.match(thread):
            errors.append(f"{where}: thread must be owner/repo#N")
            continue
        empty = [c for c in COLUMNS if not row[c]]
        if empty:
            errors.append(f"{where}: empty field(s) {', '.join(empty)} (use '-' or 'unknown')")
            continue
        if thread in seen:
            errors.append(f"{where}: duplicate thread (first on line {seen[thread]})")
            continue
        seen[thread] = lineno
        opened = row["opened"]
        if opened != "unknown":
            if not _valid_date(opened):
                errors.append(f"{where}: opened {opened!r} is not YYYY-MM-DD or 'unknown'")
                continue
            if opened >= cutoff:
                errors.append(f"{where}: opened {opened} is on or after the CUTOFF {cutoff} "
                              "(held out: list it in heldout-candidates.tsv, do not read it)")
                continue
        problem = outcome_problem(row["outcome"], known_rules)
        if problem:
            errors.append(f"{where}: {problem}")
            continue
        if row["outcome"] == "candidate-rule" and row["note"] in ("-", "unknown"):
            errors.append(f"{where}: a candidate-rule row must say its mechanism in note")
            continue
        if query_ids is not None:
            missing = [q for q in row["query_ids"].split(",") if q.strip() not in query_ids]
            if missing:
                errors.append(f"{where}: query id(s) {', '.join(missing)} not in queries.toml")
                continue
        rows.append((lineno, row))
    # an unknown opening date is placed by the thread's number within its repository
    before_max: dict[str, int] = {}
    for _, row in rows:
        if row["opened"] != "unknown":
            repo = _repo(row["thread"])
            before_max[repo] = max(before_max.get(repo, 0), _number(row["thread"]))
    for lineno, row in rows:
        if row["opened"] != "unknown":
            continue
        thread = row["thread"]
        m = _EARLIEST.search(row["note"])
        if m and _valid_date(m.group(1)) and m.group(1) < cutoff:
            continue
        if _number(thread) <= before_max.get(_repo(thread), -1):
            continue
        errors.append(f"{ledger_name}:{lineno}: {thread}: opened unknown and not placed before "
                      f"the CUTOFF {cutoff} (number above every dated pre-CUTOFF thread of the "
                      "repository; add 'earliest post YYYY-MM-DD' to note or hold it out)")
    if heldout_rows is not None:
        errors += validate_heldout(heldout_rows, cutoff, set(seen), heldout_name, before_max)
    return errors


def validate_heldout(heldout_rows: list[list[str]], cutoff: str, ledger_threads: set[str],
                     name: str = "heldout-candidates.tsv",
                     before_max: dict[str, int] | None = None) -> list[str]:
    errors: list[str] = []
    if not heldout_rows or tuple(heldout_rows[0]) != HELDOUT_COLUMNS:
        return [f"{name}:1: header must be {chr(9).join(HELDOUT_COLUMNS)!r}"]
    seen: set[str] = set()
    rows = []
    for lineno, fields in enumerate(heldout_rows[1:], start=2):
        if len(fields) != len(HELDOUT_COLUMNS):
            errors.append(f"{name}:{lineno}: {len(fields)} fields, expected 2 (thread, opened)")
            continue
        thread, opened = (f.strip() for f in fields)
        where = f"{name}:{lineno}: {thread}"
        if not _THREAD.match(thread):
            errors.append(f"{where}: thread must be owner/repo#N")
        elif thread in seen:
            errors.append(f"{where}: duplicate thread")
        elif thread in ledger_threads:
            errors.append(f"{where}: also in the ledger (a held-out thread is never read)")
        elif opened != "unknown" and not _valid_date(opened):
            errors.append(f"{where}: opened {opened!r} is not YYYY-MM-DD or 'unknown'")
        elif opened != "unknown" and opened < cutoff:
            errors.append(f"{where}: opened {opened} is before the CUTOFF {cutoff}")
        else:
            seen.add(thread)
            rows.append((lineno, thread, opened))
    # an unknown-date thread numbered at or below a dated pre-CUTOFF ledger thread of the same
    # repository was opened before the CUTOFF: it belongs in the ledger, not here
    for lineno, thread, opened in rows:
        if opened == "unknown" and _number(thread) <= (before_max or {}).get(_repo(thread), -1):
            errors.append(f"{name}:{lineno}: {thread}: opened unknown and numbered below a dated "
                          f"pre-CUTOFF ledger thread of its repository (opened before {cutoff})")
    return errors


def counts(ledger_rows: list[list[str]]) -> dict[str, Counter]:
    """Counters by outcome, outcome kind, arch, component and repository."""
    out = {k: Counter() for k in ("outcome", "kind", "arch", "component", "repo")}
    for fields in ledger_rows[1:]:
        if len(fields) != len(COLUMNS):
            continue
        row = dict(zip(COLUMNS, fields, strict=True))
        out["outcome"][row["outcome"]] += 1
        out["kind"][row["outcome"].split(":")[0]] += 1
        out["arch"][row["arch"]] += 1
        out["component"][row["backend_or_kernel"].split(":")[0]] += 1
        out["repo"][_repo(row["thread"])] += 1
    return out


def _print_counts(title: str, counter: Counter) -> None:
    print(f"\n{title}")
    for key, n in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:4d}  {key}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ledger", type=Path, default=LEDGER)
    ap.add_argument("--queries", type=Path, default=QUERIES)
    ap.add_argument("--heldout", type=Path, default=HELDOUT)
    ap.add_argument("--rules", type=Path, default=RULES)
    args = ap.parse_args(argv)
    cutoff, queries = load_queries(args.queries)
    ledger_rows = read_tsv(args.ledger)
    heldout_rows = read_tsv(args.heldout) if args.heldout.exists() else None
    errors = validate(ledger_rows, cutoff, rule_ids(args.rules), set(queries), heldout_rows,
                      ledger_name=args.ledger.name, heldout_name=args.heldout.name)
    for line in errors:
        print(line, file=sys.stderr)
    c = counts(ledger_rows)
    print(f"CUTOFF {cutoff}; {len(queries)} queries; {len(ledger_rows) - 1} threads read; "
          f"{len(heldout_rows) - 1 if heldout_rows else 0} held-out candidates")
    for key, title in (("kind", "by outcome kind"), ("outcome", "by outcome"),
                       ("component", "by component"), ("arch", "by arch"),
                       ("repo", "by repository")):
        _print_counts(title, c[key])
    if errors:
        print(f"\n{len(errors)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
