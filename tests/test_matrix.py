"""`sglang-audit matrix` on the hand-written E2 fixture checkout: stable ordering whatever
the parallelism, the JSON/CSV/HTML shapes, flag-set handling and the rules integration."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from clirun import cli

from sglang_audit.analyses.matrix import COLUMNS, DEFAULT_FLAG_SETS, parse_flag_set, split_list
from sglang_audit.errors import InputError
from sglang_audit.render.matrix import JSON_SCHEMA, csv_header

MINI_E2 = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_e2"

# Flags the E2 fixture knows; one set makes SGLang reject gpt-oss (assert at line 56).
ARGS = [
    "matrix", "-s", str(MINI_E2), "-a", "sm100,sm120", "-m", "deepseek-r1-nvfp4,gpt-oss-120b",
    "-m", "qwen3-30b-a3b",
    "--flags-set", "none=",
    "--flags-set", "fp4_trtllm=fp4_gemm_runner_backend=flashinfer_trtllm",
    "--flags-set", "cutlass_mxfp4=quantization=mxfp4,moe_runner_backend=flashinfer_cutlass",
]
N_CASES = 2 * 3 * 3


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


@pytest.mark.parametrize("fmt", ["text", "json", "csv", "html"])
def test_output_identical_with_one_or_two_jobs(fmt):
    one = cli(*ARGS, "--format", fmt, "--jobs", "1")
    two = cli(*ARGS, "--format", fmt, "--jobs", "2")
    assert one[0] == two[0] == 0, (one[2], two[2])
    assert one[1] == two[1]


def test_json_shape_order_findings_and_rejection():
    code, out, err = cli(*ARGS, "--format", "json", "--jobs", "2")
    assert code == 0, err
    data = json.loads(out)
    assert data["schema"] == JSON_SCHEMA
    assert data["archs"] == ["sm100", "sm120"]
    assert data["models"] == ["deepseek-r1-nvfp4", "gpt-oss-120b", "qwen3-30b-a3b"]
    assert list(data["flag_sets"]) == ["none", "fp4_trtllm", "cutlass_mxfp4"]
    assert data["model_defaults"] == {"deepseek-r1-nvfp4": ["tp_size=8"]}
    cases = data["cases"]
    assert len(cases) == N_CASES == data["summary"]["cases"]
    # plan order: arch, then model, then flag set
    order = [(c["arch"], c["model"], c["flag_set"]) for c in cases]
    expected = [(a, m, f) for a in data["archs"] for m in data["models"] for f in data["flag_sets"]]
    assert order == expected
    for c in cases:
        assert set(c) >= {"flags", "status", "settings", "findings", "undecided", "rejected", "error"}
        assert list(c["settings"]) == [col.setting for col in COLUMNS]
    by_key = {(c["arch"], c["model"], c["flag_set"]): c for c in cases}
    first = by_key[("sm100", "deepseek-r1-nvfp4", "none")]
    assert first["flags"] == {"tp_size": 8}  # the model default applies
    moe = first["settings"]["moe_runner_backend"]
    assert moe["config"] == "flashinfer_trtllm" and moe["deciding"]["file"] == "sglang/srt/server_args.py"
    fp4 = by_key[("sm120", "deepseek-r1-nvfp4", "fp4_trtllm")]
    assert fp4["settings"]["fp4_gemm_runner_backend"]["config"] == "flashinfer_trtllm"
    assert any(f["rule"] == "SGA103" and f["setting"] == "fp4_gemm_runner_backend" for f in fp4["findings"])
    rejected = by_key[("sm100", "gpt-oss-120b", "cutlass_mxfp4")]
    assert rejected["status"] == "rejected"
    assert rejected["rejected"]["message"] == "modelopt_fp4 quantization is required for Flashinfer Cutlass MOE"
    assert rejected["rejected"]["line"] == 56
    assert data["summary"]["rejected"] == sum(1 for c in cases if c["status"] == "rejected") >= 1


def test_csv_shape():
    code, out, _ = cli(*ARGS, "--format", "csv")
    assert code == 0
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == csv_header(COLUMNS)
    assert len(rows) == 1 + N_CASES
    assert all(len(r) == len(rows[0]) for r in rows)
    recs = list(csv.DictReader(io.StringIO(out)))
    row = next(r for r in recs if (r["arch"], r["model"], r["flag_set"]) == ("sm120", "deepseek-r1-nvfp4", "none"))
    assert row["fp4_gemm_runner_backend_config"] == "auto"
    assert row["fp4_gemm_runner_backend_runtime"] == "flashinfer_cudnn"
    assert row["flags"] == "tp_size=8" and row["status"] == "resolved"
    rej = next(r for r in recs if r["status"] == "rejected")
    assert rej["rejected_at"] == "sglang/srt/server_args.py:56"


def test_text_table_marks_findings_and_lists_rejections():
    code, out, _ = cli(*ARGS)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("SGLang 0.0.1") and f"{N_CASES} cases" in lines[0]
    row = next(ln for ln in lines if ln.startswith("sm120") and "deepseek-r1-nvfp4" in ln and "fp4_trtllm" in ln)
    assert "flashinfer_trtllm!" in row and "SGA103!" in row
    row = next(ln for ln in lines if ln.startswith("sm120") and "deepseek-r1-nvfp4" in ln and " none " in ln)
    assert "auto→flashinfer_cudnn" in row
    assert any("REJECTED [R1]" in ln for ln in lines)
    assert any(ln.strip().startswith("[R1] sglang/srt/server_args.py:56") for ln in lines)


def test_html_is_escaped_and_complete():
    code, out, _ = cli(*ARGS, "--flags-set", "q<i>=", "--format", "html")
    assert code == 0
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")
    rows = re.findall(r'<tr class="(\w+)"', out)
    assert len([r for r in rows if r != "sep"]) == 2 * 3 * 4
    assert "q&lt;i&gt;" in out and "<i>" not in out
    assert "<script" not in out


def test_default_flag_sets_a_release_lacks_are_skipped_with_the_reason():
    code, out, _ = cli("matrix", "-s", str(MINI_E2), "-a", "sm100", "-m", "qwen3-30b-a3b", "--format", "json")
    assert code == 0
    cases = json.loads(out)["cases"]
    assert [c["flag_set"] for c in cases] == ["none", "nextn", "moe_cutlass", "moe_cutlass_nextn", "moe_trtllm_nextn", "fp4_trtllm"]
    nextn = cases[1]
    assert nextn["status"] == "skipped" and "speculative_num_steps" in nextn["error"]
    assert cases[0]["status"] == "resolved"


def test_user_flag_set_with_unknown_setting_is_a_usage_error():
    code, _, err = cli("matrix", "-s", str(MINI_E2), "-a", "sm100", "-m", "qwen3-30b-a3b", "--flags-set", "x=moe_runer_backend=triton")
    assert code == 2
    assert "flag set 'x'" in err and "moe_runer_backend" in err


@pytest.mark.parametrize("args,needle", [
    (["-a", "sm999"], "sm999"),
    (["-m", "no-such-model"], "no-such-model"),
    (["--flags-set", "=a=b"], "--flags-set"),
    (["--flags-set", "n=a", "-a", "sm100"], "not KEY=VALUE"),
    (["--flags-set", "a=", "--flags-set", "a="], "given twice"),
    (["--cudnn", "nine"], "--cudnn"),
])
def test_bad_input_exits_2(args, needle):
    code, _, err = cli("matrix", "-s", str(MINI_E2), *args)
    assert code == 2
    assert needle in err and err.count("\n") == 1


def test_no_cache_writes_nothing(isolated_cache):
    code, _, _ = cli("matrix", "-s", str(MINI_E2), "-a", "sm100", "-m", "qwen3-30b-a3b", "--flags-set", "none=", "--no-cache")
    assert code == 0
    ir_dir = isolated_cache / "ir"
    assert not ir_dir.exists() or not any(ir_dir.glob("*.pickle"))
    code, _, _ = cli("matrix", "-s", str(MINI_E2), "-a", "sm100", "-m", "qwen3-30b-a3b", "--flags-set", "none=")
    assert code == 0 and any((isolated_cache / "ir").glob("*.pickle"))


def test_rules_module_without_usable_api_degrades(monkeypatch):
    import sglang_audit.rules.knownbad as rules_mod

    monkeypatch.delattr(rules_mod, "check_resolution")
    code, out, _ = cli(*ARGS, "--format", "json", "--jobs", "1")
    assert code == 0
    data = json.loads(out)
    assert data["rules"]["applied"] is None and "rules not applied" in data["rules"]["note"]
    assert all(c["findings"] == [] for c in data["cases"])
    assert data["summary"]["rejected"] >= 1  # SGLang's own asserts still show


def test_flag_set_and_list_parsing():
    assert parse_flag_set("none=").items == ()
    assert parse_flag_set("none").items == ()
    fs = parse_flag_set("x=moe_runner_backend=triton, tp_size=4")
    assert fs.name == "x" and fs.items == ("moe_runner_backend=triton", "tp_size=4")
    with pytest.raises(InputError):
        parse_flag_set("x=novalue")
    assert split_list(["sm100,sm120", "sm100", " sm90 "]) == ["sm100", "sm120", "sm90"]


def test_cudnn_is_passed_to_every_case():
    code, out, _ = cli(*ARGS, "--cudnn", "9.10.2", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["cudnn"] == "9.10.2" and len(data["cases"]) == N_CASES


def test_unknown_values_render_with_candidates_and_numbered_reasons():
    from sglang_audit.analyses.matrix import COLUMNS, Case, CaseResult, Cell, FlagSet, Matrix
    from sglang_audit.render.matrix import render_csv, render_text
    from sglang_audit.result import Candidate, UnknownValue

    why = "evaluation stopped: TypeError at sglang/srt/x.py:1"
    opaque = UnknownValue(why, (Candidate(f"unknown: {why}", ("always",)),))
    two = UnknownValue("depends on cuDNN", (Candidate("flashinfer_cudnn"), Candidate("flashinfer_cutlass"), Candidate("rejected: no")))
    cells = (Cell(COLUMNS[0].setting, opaque, opaque, "unknown", True, None),
             Cell(COLUMNS[1].setting, "auto", "auto", "resolved", True, None),
             Cell(COLUMNS[2].setting, "auto", two, "unknown", True, None),
             Cell(COLUMNS[3].setting, None, None, "resolved", False, None))
    m = Matrix({"version": "9.9"}, ("sm120",), ("m",), (FlagSet("none", ()),), (), {"m": ()}, "12.9", None,
               None, "rules not applied: test", COLUMNS,
               (CaseResult(Case(0, "sm120", "m", "none"), {}, "unknown", cells),))
    text = render_text(m)
    row = next(ln for ln in text.splitlines() if ln.startswith("sm120"))
    assert "?[U1]" in row and "auto→?(flashinfer_cudnn|flashinfer_cutlass)[U2]" in row and "n/a" in row
    assert f"[U1] {why}" in text and "[U2] depends on cuDNN" in text
    rec = next(csv.DictReader(io.StringIO(render_csv(m))))
    assert rec["moe_runner_backend_config"] == f"? unknown: {why}"
    assert rec["fp4_gemm_runner_backend_runtime"].startswith("?(flashinfer_cudnn|flashinfer_cutlass) unknown:")


# The message SGLang 0.5.10-0.5.13 raise for a hybrid model with NEXTN and the radix cache on
# (ServerArgs._handle_mamba_radix_cache), as the analysis reports it (0.5.10: server_args.py:2206).
_MAMBA_SPEC = (
    "Speculative decoding for Qwen3_5MoeForConditionalGeneration is not compatible with radix cache when "
    "using --mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
    "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1."
)


def _hinted_matrix():
    from sglang_audit.analyses.matrix import Case, CaseResult, Cell, Matrix
    from sglang_audit.result import Rejection

    model = "qwen3.5-397b-a17b-nvfp4"
    results = []
    for i, fs in enumerate(DEFAULT_FLAG_SETS):
        case = Case(i, "sm100", model, fs.name)
        if "nextn" in fs.name:
            rej = Rejection(_MAMBA_SPEC, "sglang/srt/server_args.py", 2206)
            results.append(CaseResult(case, {"tp_size": 8}, "rejected", rejected=rej))
        else:
            cells = tuple(Cell(col.setting, "auto", "auto", "resolved", True, None) for col in COLUMNS)
            results.append(CaseResult(case, {"tp_size": 8}, "resolved", cells))
    other = Rejection("modelopt_fp4 quantization is required for Flashinfer Cutlass MOE", "sglang/srt/server_args.py", 56)
    results.append(CaseResult(Case(len(results), "sm120", model, "none"), {}, "rejected", rejected=other))
    return Matrix({"version": "0.5.10"}, ("sm100", "sm120"), (model,), DEFAULT_FLAG_SETS, (), {model: ("tp_size=8",)},
                  "12.9", None, None, "rules not applied: test", COLUMNS, tuple(results))


def test_hybrid_nextn_rejection_is_explained_once_with_the_flag_to_add():
    from sglang_audit.render.matrix import render_text

    text = render_text(_hinted_matrix())
    lines = text.splitlines()
    # said once at the top, once in full under the rejections; the rows stay REJECTED
    assert lines[1] == "note: 3 cases rejected by SGLang [R1] need `--set disable_radix_cache=true` on this release (see below)"
    assert sum("REJECTED [R1]" in ln for ln in lines) == 3 and sum("REJECTED [R2]" in ln for ln in lines) == 1
    assert text.count("rerun with --set disable_radix_cache=true") == 1
    start = lines.index(next(ln for ln in lines if ln.startswith("how to get past [R1]")))
    assert "flag sets nextn, moe_cutlass_nextn, moe_trtllm_nextn" in lines[start]
    assert "3 cases" in lines[start] and "qwen3.5-397b-a17b-nvfp4" in lines[start]
    block = " ".join(ln.strip() for ln in lines[start + 1:start + 8])
    assert "_handle_mamba_radix_cache" in block and "0.5.10-0.5.13" in block
    assert "--set mamba_scheduler_strategy=extra_buffer --env SGLANG_ENABLE_SPEC_V2=1" in block
    assert max(len(ln) for ln in lines[start + 1:start + 6]) <= 100
    # the unrelated rejection gets no hint
    assert "how to get past [R2]" not in text


def test_hybrid_nextn_hint_in_json():
    from sglang_audit.render.matrix import render_json

    data = json.loads(render_json(_hinted_matrix()))
    (hint,) = data["hints"]
    assert hint["id"] == "hybrid-spec-radix-cache" and hint["set"] == ["disable_radix_cache=true"]
    assert hint["advice"] == "--set disable_radix_cache=true" and hint["cases"] == 3
    assert hint["flag_sets"] == ["nextn", "moe_cutlass_nextn", "moe_trtllm_nextn"]
    assert hint["rejected_at"] == [{"file": "sglang/srt/server_args.py", "line": 2206}]
    assert any("pull/22908" in s for s in hint["sources"])
    hinted = [c for c in data["cases"] if c["hint"]]
    assert len(hinted) == 3 and all(c["status"] == "rejected" and c["rejected"]["line"] == 2206 for c in hinted)
    assert next(c for c in data["cases"] if c["arch"] == "sm120")["hint"] is None
    assert len(data["cases"]) == len(DEFAULT_FLAG_SETS) + 1  # the per-case results stay


def test_rejection_hint_matches_on_the_message_not_the_line():
    from sglang_audit.analyses.matrix import REJECTION_HINTS, hint_for
    from sglang_audit.result import Rejection

    # SGLang's message wraps differently across releases: whitespace does not matter
    wrapped = _MAMBA_SPEC.replace(" when using", "\n   when using")
    assert hint_for(Rejection(wrapped, "sglang/srt/server_args.py", 2754)) is REJECTION_HINTS[0]
    assert hint_for(Rejection("Speculative decoding is not supported", "sglang/srt/server_args.py", 2206)) is None
    assert hint_for(None) is None
