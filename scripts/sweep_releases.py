#!/usr/bin/env python3
"""Resolve every bundled profile on every release: does the tool run, and how much does it know?

    python scripts/sweep_releases.py                       # all releases, sm90/sm100/sm120, ±NEXTN
    python scripts/sweep_releases.py --releases 0.5.10 0.5.23 --archs sm120 --jobs 2
    python scripts/sweep_releases.py --json out.jsonl      # one line per case, for other scripts

Releases are fetched with `sglang==X` (into the user cache dir, never installed). The table
counts, per release: cases run, crashes (a Python exception escaping the tool — must be 0),
configurations SGLang rejects, and how many of the main settings came out resolved/unknown.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_audit.analyses.matrix import DEFAULT_FLAG_SETS, DEFAULT_MODELS, MODEL_DEFAULT_SETS  # noqa: E402
from sglang_audit.errors import AuditError  # noqa: E402
from sglang_audit.resolve.pipeline import Request, bundled_profiles, resolve  # noqa: E402

RELEASES = ["0.4.6", "0.4.8", "0.4.10"] + [f"0.5.{i}" for i in range(1, 24)]
# the matrix's defaults (rules/matrix.toml): its bundled models, their tp, its NEXTN flag set
PROFILES = list(DEFAULT_MODELS)
NEXTN = next(list(fs.items) for fs in DEFAULT_FLAG_SETS if fs.name == "nextn")
MAIN = ["moe_runner_backend", "speculative_moe_runner_backend", "fp4_gemm_runner_backend"]


def run_release(args: tuple[str, list[str], list[str], bool]) -> list[dict]:
    release, archs, profiles, with_spec = args
    out = []
    for arch in archs:
        for model in profiles:
            for spec in ([False, True] if with_spec else [False]):
                sets = list(MODEL_DEFAULT_SETS.get(model, ())) + (NEXTN if spec else [])
                case = {"release": release, "arch": arch, "model": model, "spec": spec}
                t0 = time.time()
                try:
                    res = resolve(Request(source=f"sglang=={release}", arch=arch, model=model, sets=sets))
                    data = res.to_json()
                    case["rejected"] = data["rejected"]["message"] if data["rejected"] else None
                    case["settings"] = {k: {"config": v["config"], "runtime": v["runtime"], "status": v["status"]}
                                        for k, v in data["settings"].items() if v["present"]}
                    case["paths"] = data["paths"]
                    case["notes"] = data["analysis_notes"][:3]
                except AuditError as exc:
                    case["input_error"] = str(exc)
                except Exception as exc:  # noqa: BLE001 - a crash is what this sweep looks for
                    case["crash"] = f"{type(exc).__name__}: {exc}"
                    case["traceback"] = traceback.format_exc()[-2000:]
                case["seconds"] = round(time.time() - t0, 2)
                out.append(case)
    return out


def summarize(cases: list[dict]) -> str:
    rows = ["| release | cases | crashes | rejected | main settings resolved | unknown | s/case |",
            "|---|---|---|---|---|---|---|"]
    by_rel: dict[str, list[dict]] = {}
    for c in cases:
        by_rel.setdefault(c["release"], []).append(c)
    for rel in sorted(by_rel, key=lambda v: tuple(int(x) for x in v.split("."))):
        cs = by_rel[rel]
        crashes = sum(1 for c in cs if "crash" in c or "input_error" in c)
        rejected = sum(1 for c in cs if c.get("rejected"))
        resolved = unknown = 0
        for c in cs:
            for name in MAIN:
                s = c.get("settings", {}).get(name)
                if s is None or c.get("rejected"):
                    continue
                if s["status"] == "unknown":
                    unknown += 1
                else:
                    resolved += 1
        secs = sum(c["seconds"] for c in cs) / max(len(cs), 1)
        rows.append(f"| {rel} | {len(cs)} | {crashes} | {rejected} | {resolved} | {unknown} | {secs:.2f} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--releases", nargs="+", default=RELEASES)
    ap.add_argument("--archs", nargs="+", default=["sm90", "sm100", "sm120"])
    ap.add_argument("--models", nargs="+", default=PROFILES, choices=bundled_profiles())
    ap.add_argument("--no-spec", action="store_true", help="skip the NEXTN variant")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write one JSON line per case")
    ns = ap.parse_args()
    tasks = [(r, ns.archs, ns.models, not ns.no_spec) for r in ns.releases]
    cases: list[dict] = []
    with ProcessPoolExecutor(max_workers=ns.jobs) as pool:
        for result in pool.map(run_release, tasks):
            cases.extend(result)
            rel = result[0]["release"] if result else "?"
            bad = [c for c in result if "crash" in c]
            print(f"{rel}: {len(result)} cases, {len(bad)} crashes", file=sys.stderr, flush=True)
    if ns.json:
        with ns.json.open("w") as fh:
            for c in cases:
                fh.write(json.dumps(c, sort_keys=True) + "\n")
    print(summarize(cases))
    return 1 if any("crash" in c for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
