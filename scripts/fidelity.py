#!/usr/bin/env python3
"""Compare sglang-audit with SGLang's own execution (the oracle in ../shared/oracle).

The oracle runs a release's real ServerArgs (and the runtime initialisers) with the GPU
faked and writes one JSON line per case. This script resolves the same cases with
sglang-audit (same release, arch, CUDA, model directory, flags) and compares field by field:

  agree       the tool states the oracle's value
  unknown     the tool says unknown (acceptable, counted, with its reason)
  disagree    the tool states another value: a defect

    python scripts/fidelity.py --oracle /tmp/oracle-results --out docs/fidelity.md
    python scripts/fidelity.py --oracle DIR --releases 0.5.10 --show-disagreements

How the oracle results are produced: see docs/fidelity.md ("Reproduce").
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_audit.errors import AuditError  # noqa: E402
from sglang_audit.frontend.parse import SourceCache  # noqa: E402
from sglang_audit.resolve.pipeline import Request, resolve  # noqa: E402
from sglang_audit.target.device import DEFAULT_CUDA

_CACHES: dict[str, SourceCache] = {}  # per worker process: parse each file once per release

FIELDS = [
    "moe_runner_backend", "speculative_moe_runner_backend", "fp4_gemm_runner_backend",
    "quantization", "speculative_algorithm", "moe_a2a_backend", "speculative_moe_a2a_backend",
    "fp8_gemm_runner_backend", "attention_backend", "prefill_attention_backend",
    "decode_attention_backend",
]
RUNTIME = ["moe_runner_backend", "speculative_moe_runner_backend", "moe_a2a_backend",
           "speculative_moe_a2a_backend", "fp4_gemm_runner_backend", "fp8_gemm_runner_backend"]
PRIMARY = {"moe_runner_backend", "speculative_moe_runner_backend", "fp4_gemm_runner_backend"}
PROFILES = Path(__file__).resolve().parent.parent / "fixtures" / "models"
# the oracle's own model configs: its result lines name a model by directory name only
ORACLE_MODELS = Path(__file__).resolve().parent.parent.parent / "shared" / "oracle" / "models"


def load_oracle(directory: Path, releases: list[str] | None) -> list[dict[str, Any]]:
    cases = []
    for file in sorted(directory.glob("*.jsonl")):
        if file.name.endswith("-cases.jsonl"):
            continue
        for line in file.read_text().splitlines():
            if not line.strip():
                continue
            case = json.loads(line)
            version = case.get("version") or case.get("meta", {}).get("sglang_version")
            if not version or (releases and version not in releases):
                continue
            case["version"] = version
            cases.append(case)
    # one result per (version, arch, cuda, model, flags)
    seen = {}
    for c in cases:
        key = (c["version"], c["arch"], c.get("cuda", DEFAULT_CUDA), Path(str(c["model"])).name, json.dumps(c.get("flags", {}), sort_keys=True))
        seen[key] = c
    return [seen[k] for k in sorted(seen)]


def model_dir(model: str) -> str:
    name = Path(str(model)).name
    for root in (PROFILES, ORACLE_MODELS):
        if (root / name).is_dir():
            return str(root / name)
    return str(model)


def run_tool(case: dict[str, Any]) -> dict[str, Any]:
    req = Request(source=f"sglang=={case['version']}", arch=case["arch"], cuda=case.get("cuda", DEFAULT_CUDA),
                  model=model_dir(case["model"]), flags=dict(case.get("flags", {})))
    cache = _CACHES.setdefault(case["version"], SourceCache())
    try:
        return resolve(req, cache=cache).to_json()
    except AuditError as exc:
        return {"input_error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a crash is a finding of this script
        return {"crash": f"{type(exc).__name__}: {exc}"}


def _norm(value: Any) -> Any:
    return None if value in ("<absent>",) else value


def compare(case: dict[str, Any], tool: dict[str, Any]) -> list[tuple[str, str, str, Any, Any]]:
    """(field, layer, outcome, oracle value, tool value) for one case."""
    out: list[tuple[str, str, str, Any, Any]] = []
    result = case["result"]
    if "crash" in tool:
        return [("*", "config", "disagree", "(oracle ran)", tool["crash"])]
    if "error" in result:
        kind = result.get("error_kind")
        if kind == "model_config_rejected":
            return [("*", "config", "no-answer", result["error"][:80], "transformers-side")]
        if kind == "unknown_flag_in_version":
            ok = "input_error" in tool
            return [("*", "config", "agree" if ok else "disagree", "unknown flag", tool.get("input_error", "accepted"))]
        if kind != "sglang_rejected":
            return [("*", "config", "no-answer", result["error"][:80], "oracle problem")]
        rej = tool.get("rejected")
        oracle_msg = result["error"].split(": ", 1)[-1]
        if rej and rej["message"][:60] == oracle_msg[:60]:
            return [("*", "config", "agree", oracle_msg[:80], rej["message"][:80])]
        if rej is None and any(s.get("status") == "unknown" for s in tool.get("settings", {}).values()):
            conditional = [r for r in tool.get("rejections", []) if r["message"][:60] == oracle_msg[:60]]
            return [("*", "config", "unknown" if conditional else "disagree", oracle_msg[:80], "conditional" if conditional else "accepted")]
        return [("*", "config", "disagree", oracle_msg[:80], rej["message"][:80] if rej else "accepted")]
    if "input_error" in tool:
        return [("*", "config", "disagree", "(oracle accepted)", tool["input_error"])]
    if tool.get("rejected"):
        return [("*", "config", "disagree", "(oracle accepted)", "rejected: " + tool["rejected"]["message"][:80])]
    settings = tool["settings"]
    for field in FIELDS:
        if field not in result:
            continue
        oracle = _norm(result[field])
        s = settings.get(field)
        if result[field] == "<absent>":
            outcome = "agree" if s is None or not s.get("present", True) else "disagree"
            out.append((field, "config", outcome, "<absent>", s and s.get("config")))
            continue
        value = s["config"] if s else None
        out.append((field, "config", _outcome(oracle, value), oracle, value))
    runtime = result.get("runtime", {})
    for field in RUNTIME:
        if field not in runtime or not isinstance(runtime[field], (str, type(None))) or str(runtime[field]).startswith("<"):
            continue
        s = settings.get(field)
        value = s["runtime"] if s and s.get("runtime") is not None else (s["config"] if s else None)
        out.append((field, "runtime", _outcome(runtime[field], value), runtime[field], value))
    return out


def _outcome(oracle: Any, tool: Any) -> str:
    if isinstance(tool, dict) and "unknown" in tool:
        return "unknown"
    return "agree" if oracle == tool else "disagree"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle", type=Path, required=True, help="directory of oracle *.jsonl results")
    ap.add_argument("--releases", nargs="*")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, help="write the markdown report here")
    ap.add_argument("--show-disagreements", action="store_true")
    ns = ap.parse_args()
    cases = load_oracle(ns.oracle, ns.releases)
    with ProcessPoolExecutor(max_workers=ns.jobs) as pool:
        tools = list(pool.map(run_tool, cases, chunksize=4))
    per_release: dict[str, Counter[str]] = defaultdict(Counter)
    primary_dis: dict[str, int] = defaultdict(int)
    unknown_reasons: dict[str, Counter[str]] = defaultdict(Counter)
    disagreements: list[str] = []
    for case, tool in zip(cases, tools, strict=True):
        rel = case["version"]
        for field, layer, outcome, oracle, value in compare(case, tool):
            per_release[rel][outcome] += 1
            if outcome == "disagree":
                if field in PRIMARY or field == "*":
                    primary_dis[rel] += 1
                disagreements.append(
                    f"{rel} {case['arch']} {Path(str(case['model'])).name} {json.dumps(case.get('flags', {}), sort_keys=True)} "
                    f"{field}/{layer}: oracle {oracle!r} tool {value!r}")
            if outcome == "unknown" and isinstance(value, dict):
                unknown_reasons[rel][str(value.get("unknown", ""))[:140]] += 1
    lines = ["# Fidelity: sglang-audit against SGLang's own execution", "",
             "Each oracle case (one release × arch × model × flag set, run by `../shared/oracle`) is",
             "resolved by sglang-audit and compared field by field, at config level and at runtime",
             "(after the scheduler's initialisers). *unknown* means the tool said so, with a reason;",
             "*no-answer* means the oracle itself could not answer (e.g. the pinned transformers does",
             "not know the model type), so the case is not counted.", "",
             "| release | comparisons | agree | unknown | disagree | disagree on moe/spec-moe/fp4 | agreement where the tool answers |",
             "|---|---|---|---|---|---|---|"]
    total: Counter[str] = Counter()
    for rel in sorted(per_release, key=lambda v: tuple(int(x) for x in v.split("."))):
        c = per_release[rel]
        total.update(c)
        answered = c["agree"] + c["disagree"]
        pct = 100.0 * c["agree"] / answered if answered else 100.0
        n = c["agree"] + c["unknown"] + c["disagree"]
        lines.append(f"| {rel} | {n} | {c['agree']} | {c['unknown']} | {c['disagree']} | {primary_dis[rel]} | {pct:.1f}% |")
    answered = total["agree"] + total["disagree"]
    lines.append(f"| **all** | {total['agree'] + total['unknown'] + total['disagree']} | {total['agree']} | {total['unknown']} | {total['disagree']} | {sum(primary_dis.values())} | {100.0 * total['agree'] / max(answered, 1):.1f}% |")
    lines += ["", f"Oracle cases: {len(cases)}; not counted (oracle gave no answer): {total['no-answer']}.", ""]
    if any(unknown_reasons.values()):
        lines += ["## Why the tool said unknown", ""]
        for rel in sorted(unknown_reasons, key=lambda v: tuple(int(x) for x in v.split("."))):
            for reason, n in unknown_reasons[rel].most_common(5):
                lines.append(f"- {rel} ({n}×): {reason}")
        lines.append("")
    if disagreements:
        lines += ["## Disagreements", ""] + [f"- {d}" for d in disagreements[:200]] + [""]
    report = "\n".join(lines)
    if ns.out:
        ns.out.write_text(report + "\n")
    print(report if ns.show_disagreements or not ns.out else "\n".join(lines[:len(per_release) + 12]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
