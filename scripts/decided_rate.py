#!/usr/bin/env python3
"""How many (deployment, setting) pairs does the tool decide, and why are the others unknown?

    python scripts/decided_rate.py --jobs 4                         # 0.5.16-0.5.23, sm90/sm100/sm120
    python scripts/decided_rate.py --releases 0.5.23 --archs sm100 --jobs 2
    python scripts/decided_rate.py --json out.jsonl --top 15

Deployments: every field case in tests/field/cases/*.yaml (its own arch, launch command and
environment; never tests/field/heldout/) and every bundled profile (fixtures/models/) on each
of ``--archs`` with the matrix's default flags for it (rules/matrix.toml), each on every
release of ``--releases``. A pair is one setting the release has (``present``) in one
deployment's resolution: *decided* when its status is resolved, rejected or unsupported,
*unknown* otherwise. A field case whose flags a release's parser refuses is counted apart
(``input errors``), not as pairs. Unknowns are grouped by their reason, normalised (file:line
sites, numbers and quoted values folded) so that the same stop on other models and releases
counts once: the issue-41 work queue. Resolutions go through the result cache, so a second
run takes seconds. Issue 41 (docs/field.md, "Decided rate").
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import traceback
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "field"))

from sglang_audit.analyses.matrix import MODEL_DEFAULT_SETS  # noqa: E402
from sglang_audit.errors import AuditError  # noqa: E402
from sglang_audit.resolve.pipeline import Request, bundled_profiles, resolve  # noqa: E402

RELEASES = [f"0.5.{i}" for i in range(16, 24)]
ARCHS = ["sm90", "sm100", "sm120"]
DECIDED = ("resolved", "rejected", "unsupported")


def deployments(archs: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(label, Request keyword arguments but the source) for every deployment."""
    from corpus import load_cases, normalise_launch  # tests/field/corpus.py (cases/ only)

    out: list[tuple[str, dict[str, Any]]] = []
    for case in load_cases():
        command, env = normalise_launch(case.launch)
        env.update(case.env)
        out.append((f"field:{case.id}", {"arch": case.arch, "model": case.model_spec, "cuda": case.cuda, "cudnn": case.cudnn,
                                          "launch": command, "env": [f"{k}={v}" for k, v in sorted(env.items())]}))
    for model in bundled_profiles():
        for arch in archs:
            out.append((f"profile:{model}@{arch}", {"arch": arch, "model": model, "sets": list(MODEL_DEFAULT_SETS.get(model, ()))}))
    return out


def unknown_reason(setting: dict[str, Any]) -> str:
    """The first unknown part of a setting, in the order its status is made: the config
    value, the runtime value, the layers, the kernel library's declaration."""
    for part in ("config", "runtime"):
        value = setting.get(part)
        if isinstance(value, dict) and "unknown" in value:
            return f"{part}: {value['unknown']}"
    layer = setting.get("layer")
    if isinstance(layer, dict):
        if "unknown" in layer:
            return f"layer: {layer['unknown']}"
        if layer.get("status") == "unknown":
            reason = layer.get("reason") or ""
            cands = layer.get("candidates") or []
            unknown_cands = [c["value"] for c in cands if str(c.get("value", "")).startswith("unknown")]
            if unknown_cands and unknown_cands[0].removeprefix("unknown: ") != reason:
                reason = f"{reason}; e.g. {unknown_cands[0]}"
            return f"layer: {reason}"
    kernel = setting.get("kernel")
    if isinstance(kernel, dict) and kernel.get("status") == "unknown":
        return f"kernel: {kernel.get('reason', '')}"
    return f"other: {setting.get('note') or 'no reason recorded'}"


_SITE = re.compile(r"[\w./-]+\.py:\d+")
_QUOTED = re.compile(r"(?<!\w)'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\b\d+(\.\d+)*\b")


def normalise(reason: str, width: int = 160) -> str:
    text = _SITE.sub(lambda m: m.group(0).rsplit(":", 1)[0].rsplit("/", 1)[-1], reason)
    text = _QUOTED.sub("'…'", text)
    text = _NUMBER.sub("N", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text[:width]


def run_release(args: tuple[str, list[tuple[str, dict[str, Any]]]]) -> list[dict[str, Any]]:
    from sglang_audit.frontend.parse import SourceCache

    release, deps = args
    cache = SourceCache()
    out: list[dict[str, Any]] = []
    for label, kw in deps:
        case: dict[str, Any] = {"release": release, "deployment": label}
        t0 = time.time()
        try:
            data = resolve(Request(source=f"sglang=={release}", **kw), cache=cache).to_json()
            case["pairs"] = {name: (s["status"], None if s["status"] in DECIDED else unknown_reason(s))
                             for name, s in data["settings"].items() if s.get("present", True)}
        except AuditError as exc:
            case["input_error"] = str(exc).splitlines()[0][:200]
        except Exception as exc:  # noqa: BLE001 - a crash is counted and shown, never hidden
            case["crash"] = f"{type(exc).__name__}: {exc}"[:300]
            case["traceback"] = traceback.format_exc()[-1500:]
        case["seconds"] = round(time.time() - t0, 2)
        out.append(case)
    return out


def summarize(cases: list[dict[str, Any]], top: int) -> str:
    decided = unknown = 0
    reasons: Counter[str] = Counter()
    by_release: dict[str, list[int]] = {}
    for c in cases:
        row = by_release.setdefault(c["release"], [0, 0, 0, 0])
        if "pairs" not in c:
            row[2 if "input_error" in c else 3] += 1
            continue
        for name, (status, why) in c["pairs"].items():
            if status in DECIDED:
                decided += 1
                row[0] += 1
            else:
                unknown += 1
                row[1] += 1
                reasons[f"{name} — {normalise(why or '')}"] += 1
    total = decided + unknown
    lines = [f"decided {decided} of {total} (deployment, setting) pairs: {100 * decided / max(total, 1):.1f}%", "",
             "| release | decided | unknown | rate | input errors | crashes |", "|---|---|---|---|---|---|"]
    for rel in sorted(by_release, key=lambda v: tuple(int(x) for x in v.split("."))):
        d, u, e, x = by_release[rel]
        lines.append(f"| {rel} | {d} | {u} | {100 * d / max(d + u, 1):.1f}% | {e} | {x} |")
    lines += ["", f"top {top} unknown reasons (setting — reason, normalised):", ""]
    lines += [f"{n:5d}  {r}" for r, n in reasons.most_common(top)]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--releases", nargs="+", default=RELEASES)
    ap.add_argument("--archs", nargs="+", default=ARCHS, help="the archs the bundled profiles run on (field cases keep their own)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--json", type=Path, help="write one JSON line per (release, deployment)")
    ns = ap.parse_args()
    deps = deployments(ns.archs)
    # a task per (release, slice of deployments): each worker keeps one SourceCache per task
    step = max(1, len(deps) // max(1, ns.jobs))
    tasks = [(r, deps[i:i + step]) for r in ns.releases for i in range(0, len(deps), step)]
    cases: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=ns.jobs) as pool:
        for result in pool.map(run_release, tasks):
            cases.extend(result)
            print(f"{result[0]['release'] if result else '?'}: {len(cases)} resolutions so far", file=sys.stderr, flush=True)
    if ns.json:
        with ns.json.open("w") as fh:
            for c in cases:
                fh.write(json.dumps(c, sort_keys=True) + "\n")
    print(summarize(cases, ns.top))
    return 1 if any("crash" in c for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
