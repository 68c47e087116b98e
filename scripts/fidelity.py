#!/usr/bin/env python3
"""Compare sglang-audit with SGLang's own execution (the oracle in ../shared/oracle).

The oracle runs a release's real ServerArgs (and the runtime initialisers) with the GPU
faked and writes one JSON line per case. This script resolves the same cases with
sglang-audit (same release, arch, CUDA, model directory, flags) and compares field by field:

  agree       the tool states the oracle's value
  unknown     the tool says unknown (acceptable, counted, with its reason)
  disagree    the tool states another value: a defect

Besides the backend fields (FIELDS, RUNTIME), every field the oracle records in `extra`
(tp/ep/dp sizes, speculative_*, kv_cache_dtype, page_size, memory-derived sizes, ...) is
compared with the tool's `--field` value (layer "extra"), and the `model_config` entries the
tool has an equivalent for (MODEL_CONFIG; layer "model_config"). `--core-only` compares the
backend fields alone (the comparisons of the sweeps before 2026-12-01).

    python scripts/fidelity.py --oracle /tmp/oracle-results --out docs/fidelity.md
    python scripts/fidelity.py --oracle DIR --releases 0.5.10 --show-disagreements

How the oracle results are produced: see docs/fidelity.md ("Reproduce").
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_audit.errors import AuditError  # noqa: E402
from sglang_audit.frontend.parse import SourceCache  # noqa: E402
from sglang_audit.inputs.device import DEFAULT_CUDA
from sglang_audit.resolve.pipeline import Request, resolve  # noqa: E402

_CACHES: dict[str, SourceCache] = {}  # per worker process: parse each file once per release

FIELDS = [
    "moe_runner_backend", "speculative_moe_runner_backend", "fp4_gemm_runner_backend",
    "quantization", "speculative_algorithm", "moe_a2a_backend", "speculative_moe_a2a_backend",
    "fp8_gemm_runner_backend", "attention_backend", "prefill_attention_backend",
    "decode_attention_backend",
]
RUNTIME = ["moe_runner_backend", "speculative_moe_runner_backend", "moe_a2a_backend",
           "speculative_moe_a2a_backend", "fp4_gemm_runner_backend", "fp8_gemm_runner_backend"]
# ModelConfig entries the oracle records → the tool's `model` key holding the same thing.
# The oracle's other entries (model_type, is_hybrid_gdn, attention_arch, dtype) have no
# equivalent in the tool's output: not compared (docs/fidelity.md says so).
MODEL_CONFIG = {"architectures": "architecture", "quantization": "quantization"}
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


def extra_fields(case: dict[str, Any]) -> tuple[str, ...]:
    """The `extra` fields the oracle recorded for this case (none when SGLang rejected it)."""
    extra = case.get("result", {}).get("extra")
    return tuple(sorted(extra)) if isinstance(extra, dict) else ()


def run_tool(case: dict[str, Any], core_only: bool = False) -> dict[str, Any]:
    fields = () if core_only else extra_fields(case)
    req = Request(source=f"sglang=={case['version']}", arch=case["arch"], cuda=case.get("cuda", DEFAULT_CUDA),
                  model=model_dir(case["model"]), flags=dict(case.get("flags", {})), fields=fields)
    cache = _CACHES.setdefault(case["version"], SourceCache())
    missing: list[str] = []
    try:
        while True:
            try:
                out = resolve(req, cache=cache).to_json()
                break
            except AuditError as exc:
                # a name the oracle read off the instance that the tool's flag table does not
                # declare: compared as "not reported" (a disagreement), the rest still compared
                m = _NO_FIELD.search(str(exc))
                if not m or m.group(1) not in req.fields:
                    raise
                missing.append(m.group(1))
                req.fields = tuple(f for f in req.fields if f != m.group(1))
        out["fidelity_missing_fields"] = missing
        return out
    except AuditError as exc:
        return {"input_error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a crash is a finding of this script
        return {"crash": f"{type(exc).__name__}: {exc}"}


_NO_FIELD = re.compile(r"no ServerArgs field '([A-Za-z_0-9]+)'")


def run_tool_core(case: dict[str, Any]) -> dict[str, Any]:
    return run_tool(case, core_only=True)


def _norm(value: Any) -> Any:
    return None if value in ("<absent>",) else value


MODEL_PATH = "<the model path>"


def norm_value(value: Any, *model_paths: str | None) -> Any:
    """A value as the oracle's JSON states it: tuples are lists (the oracle's `_jsonable`),
    and the case's own model directory (NEXTN drafts default to it) is a placeholder, since
    the oracle and the tool read the same config.json from different directories."""
    if isinstance(value, (tuple, list)):
        return [norm_value(v, *model_paths) for v in value]
    if isinstance(value, str) and any(p and value.rstrip("/") == p.rstrip("/") for p in model_paths):
        return MODEL_PATH
    return value


def oracle_model_paths(model: str) -> tuple[str, ...]:
    """The directory the oracle loaded for a case: its lines name the model as given (a name
    under the oracle's models/ or a path)."""
    name = Path(model).name
    return (model, str(ORACLE_MODELS / name), str(ORACLE_MODELS.resolve() / name))


def _tool_model_path(tool: dict[str, Any]) -> str | None:
    model = tool.get("model")
    return model.get("path") if isinstance(model, dict) else None


def compare_extra(case: dict[str, Any], tool: dict[str, Any]) -> list[tuple[str, str, str, Any, Any]]:
    """(field, layer, outcome, oracle value, tool value) for every field of the oracle's
    `extra` and the `model_config` entries the tool has an equivalent for."""
    out: list[tuple[str, str, str, Any, Any]] = []
    result = case["result"]
    settings = tool.get("settings", {})
    oracle_paths, tool_path = oracle_model_paths(str(case.get("model", ""))), _tool_model_path(tool)
    for field, raw in sorted((result.get("extra") or {}).items()):
        s = settings.get(field)
        if s is None:
            out.append((field, "extra", "disagree", raw, "(not reported by the tool)"))
            continue
        if not s.get("present", True):
            out.append((field, "extra", "disagree", raw, "(absent in this release)"))
            continue
        oracle = norm_value(raw, *oracle_paths)
        value = s.get("config")
        value = value if isinstance(value, dict) and "unknown" in value else norm_value(value, tool_path)
        out.append((field, "extra", _outcome(oracle, value), oracle, value))
    mc = result.get("model_config")
    if isinstance(mc, dict) and "error" not in mc:
        model = tool.get("model") or {}
        for key, tool_key in MODEL_CONFIG.items():
            if key not in mc:
                continue
            oracle = mc[key]
            if key == "architectures":  # the tool reports the first (the one SGLang loads)
                oracle = oracle[0] if isinstance(oracle, list) and oracle else oracle
            value = model.get(tool_key)
            out.append((f"model_config.{key}", "model_config", _outcome(oracle, value), oracle, value))
    return out


def compare(case: dict[str, Any], tool: dict[str, Any], core_only: bool = False) -> list[tuple[str, str, str, Any, Any]]:
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
    return out if core_only else out + compare_extra(case, tool)


def _outcome(oracle: Any, tool: Any) -> str:
    if isinstance(tool, dict) and "unknown" in tool:
        return "unknown"
    return "agree" if same(oracle, tool) else "disagree"


def same(a: Any, b: Any) -> bool:
    """Equal and of the same type: Python's ``True == 1`` and ``8 == 8.0`` must not make a
    wrong type agree (``disable_cuda_graph`` True against a tool's 1 is a defect)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _release_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def field_table(per_field: dict[tuple[str, str], Counter[str]], all_rows: bool = False) -> list[str]:
    """Markdown rows per (field, layer): every row, or those not at 100 % agreement."""
    rows = ["| field | layer | comparisons | agree | unknown | disagree |", "|---|---|---|---|---|---|"]
    for (field, layer), c in sorted(per_field.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        n = c["agree"] + c["unknown"] + c["disagree"]
        if all_rows or c["agree"] != n:
            rows.append(f"| `{field}` | {layer} | {n} | {c['agree']} | {c['unknown']} | {c['disagree']} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle", type=Path, required=True, help="directory of oracle *.jsonl results")
    ap.add_argument("--releases", nargs="*")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, help="write the markdown report here")
    ap.add_argument("--show-disagreements", action="store_true")
    ap.add_argument("--core-only", action="store_true",
                    help="compare the backend fields alone, not the oracle's `extra`/`model_config` (the sweeps before 2026-12-01)")
    ap.add_argument("--all-field-rows", action="store_true", help="list every field in the per-field table, not only those below 100 %%")
    ns = ap.parse_args()
    cases = load_oracle(ns.oracle, ns.releases)
    with ProcessPoolExecutor(max_workers=ns.jobs) as pool:
        tools = list(pool.map(run_tool_core if ns.core_only else run_tool, cases, chunksize=4))
    per_release: dict[str, Counter[str]] = defaultdict(Counter)
    per_field: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    primary_dis: dict[str, int] = defaultdict(int)
    unknown_reasons: dict[str, Counter[str]] = defaultdict(Counter)
    disagreements: list[str] = []
    for case, tool in zip(cases, tools, strict=True):
        rel = case["version"]
        for field, layer, outcome, oracle, value in compare(case, tool, core_only=ns.core_only):
            per_release[rel][outcome] += 1
            per_field[(field, layer)][outcome] += 1
            if outcome == "disagree":
                if field in PRIMARY or field == "*":
                    primary_dis[rel] += 1
                disagreements.append(
                    f"{rel} {case['arch']} {Path(str(case['model'])).name} {json.dumps(case.get('flags', {}), sort_keys=True)} "
                    f"{field}/{layer}: oracle {oracle!r} tool {value!r}")
            if outcome == "unknown" and isinstance(value, dict):
                unknown_reasons[rel][f"{field}: " + str(value.get("unknown", ""))[:140]] += 1
    compared = "the backend fields" if ns.core_only else "the backend fields, every field of the oracle's `extra` and its `model_config` entries the tool reports"
    lines = ["# Fidelity: sglang-audit against SGLang's own execution", "",
             "Each oracle case (one release × arch × model × flag set, run by `../shared/oracle`) is",
             f"resolved by sglang-audit and compared field by field ({compared}), at config level and at runtime",
             "(after the scheduler's initialisers). *unknown* means the tool said so, with a reason;",
             "*no-answer* means the oracle itself could not answer (e.g. the pinned transformers does",
             "not know the model type), so the case is not counted.", "",
             "| release | comparisons | agree | unknown | disagree | disagree on moe/spec-moe/fp4 | agreement where the tool answers |",
             "|---|---|---|---|---|---|---|"]
    total: Counter[str] = Counter()
    for rel in sorted(per_release, key=_release_key):
        c = per_release[rel]
        total.update(c)
        answered = c["agree"] + c["disagree"]
        pct = 100.0 * c["agree"] / answered if answered else 100.0
        n = c["agree"] + c["unknown"] + c["disagree"]
        lines.append(f"| {rel} | {n} | {c['agree']} | {c['unknown']} | {c['disagree']} | {primary_dis[rel]} | {pct:.1f}% |")
    answered = total["agree"] + total["disagree"]
    lines.append(f"| **all** | {total['agree'] + total['unknown'] + total['disagree']} | {total['agree']} | {total['unknown']} | {total['disagree']} | {sum(primary_dis.values())} | {100.0 * total['agree'] / max(answered, 1):.1f}% |")
    lines += ["", f"Oracle cases: {len(cases)}; not counted (oracle gave no answer): {total['no-answer']}.", ""]
    rows = field_table(per_field, ns.all_field_rows)
    lines += ["## Per field" + ("" if ns.all_field_rows else " (fields below 100 % agreement)"), ""]
    lines += rows if len(rows) > 2 else ["Every field agrees in every comparison."]
    lines.append("")
    if any(unknown_reasons.values()):
        lines += ["## Why the tool said unknown", ""]
        for rel in sorted(unknown_reasons, key=_release_key):
            for reason, n in unknown_reasons[rel].most_common(8):
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
