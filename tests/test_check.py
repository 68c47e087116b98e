"""`sglang-audit check`: exit codes and --fail-on, the three output formats, SARIF 2.1.0
validated against the official schema (vendored), the pre-commit manifest, and the
issue's acceptance cases on real SGLang releases."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from clirun import cli

from sglang_audit.inputs.pins import torch_cudnn_number
from sglang_audit.shipped import load_toml

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"
SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text())
NEXTN = ["tp_size=8", "speculative_algorithm=NEXTN", "speculative_num_steps=3", "speculative_eagle_topk=1",
         "speculative_num_draft_tokens=4", "disable_radix_cache=true"]


def mini(*args: str) -> tuple[int, str, str]:
    return cli("check", "-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp4", *args)


def sets(*items: str) -> list[str]:
    out: list[str] = []
    for item in items:
        out += ["--set", item]
    return out


def validate_sarif(doc: dict) -> None:
    validator = jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]]


# ---- exit codes and --fail-on (hand-written E2 fixture checkout: fast, no download) -------


@pytest.fixture()
def fresh_cache(isolated_cache):
    return isolated_cache


def test_error_finding_exits_1_with_text_evidence(fresh_cache):
    code, out, _ = mini(*sets("fp4_gemm_runner_backend=flashinfer_trtllm"))
    assert code == 1
    assert "ERROR   SGA103 fp4-gemm-trtllm-sm12x" in out
    assert "fp4_gemm_runner_backend = flashinfer_trtllm" in out
    assert "decided at sglang/srt/server_args.py" in out and "fix: " in out
    assert "exit 1 (--fail-on error)" in out


@pytest.mark.parametrize("fail_on, expected", [("error", 1), ("warning", 1), ("never", 0)])
def test_fail_on_with_an_error(fresh_cache, fail_on, expected):
    code, _, _ = mini(*sets("fp4_gemm_runner_backend=flashinfer_trtllm"), "--fail-on", fail_on)
    assert code == expected


@pytest.mark.parametrize("fail_on, expected", [("error", 0), ("warning", 1), ("never", 0)])
def test_fail_on_with_warnings_only(fresh_cache, fail_on, expected):
    # default flags on sm120: FP4 GEMM auto → flashinfer_cudnn (SGA303: FlashInfer's mm_fp4 on
    # SM12x); no SGA104: the fixture pins torch 2.9.1, whose cuDNN pin (9.10.2) the pip profile has
    code, out, _ = mini("--fail-on", fail_on, "--format", "json")
    data = json.loads(out)
    assert {f["severity"] for f in data["findings"]} == {"warning"}
    assert "SGA303" in {f["rule"] for f in data["findings"]} and data["device"]["cudnn"] == 91002
    assert code == expected == data["exit_code"]


def test_json_shape(fresh_cache):
    code, out, _ = mini(*sets("fp4_gemm_runner_backend=flashinfer_trtllm"), "--format", "json")
    data = json.loads(out)
    for key in ("schema_version", "source", "device", "model", "flags", "rules", "findings", "undecided", "summary", "exit_code"):
        assert key in data
    (f,) = [f for f in data["findings"] if f["rule"] == "SGA103"]
    assert f["setting"] == "fp4_gemm_runner_backend" and f["value"] == "flashinfer_trtllm"
    assert f["deciding"]["file"].startswith("sglang/") and f["chain"] and f["sources"]
    assert data["summary"]["error"] == 1 and code == 1


USER_RULE_NEEDS_UNKNOWN = """\
id: ACME001
slug: needs-quant-algo
severity: error
confidence: low
title: needs a fact the resolution lacks
message: "{setting} is {value}"
fix: nothing
sources: [acme/repo#1]
subject: fp4_gemm_runner_backend
when:
  all:
    - fact: model.quant_algo
      eq: NVFP4
    - fact: subject
      eq: flashinfer_cudnn
checked: nothing, a test rule (0.0.0)
examples:
  flag: [{model.quant_algo: NVFP4, settings.fp4_gemm_runner_backend: flashinfer_cudnn}]
  pass: [{model.quant_algo: FP8, settings.fp4_gemm_runner_backend: flashinfer_cudnn}]
"""


def mixed_groups_model(tmp_path: Path) -> Path:
    """deepseek-r1-nvfp4 with an extra 8-bit config group: its quant_algo cannot be named."""
    src = Path(__file__).resolve().parent.parent / "fixtures" / "models" / "deepseek-r1-nvfp4" / "config.json"
    config = json.loads(src.read_text())
    qc = config["quantization_config"]
    qc.pop("quant_algo", None)
    qc["config_groups"]["group_1"] = {"weights": {"num_bits": 8, "type": "float"}, "targets": ["Linear"]}
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    return tmp_path / "m"


def test_undecided_rule_exits_3(fresh_cache, tmp_path):
    (tmp_path / "ACME001-needs-quant-algo.yaml").write_text(USER_RULE_NEEDS_UNKNOWN)
    model = mixed_groups_model(tmp_path)
    code, out, _ = mini("--rules", tmp_path, "--format", "json", "-m", model)
    data = json.loads(out)
    assert code == 3 == data["exit_code"]
    u = next(u for u in data["undecided"] if u["rule"] == "ACME001")
    assert u["facts"][0]["fact"] == "model.quant_algo"
    assert mini("--rules", tmp_path, "--fail-on", "never", "-m", model)[0] == 0
    code, out, _ = mini("--rules", tmp_path, "-m", model)
    assert "undecided" in out and "model.quant_algo" in out and code == 3


def test_findings_win_over_undecided(fresh_cache, tmp_path):
    (tmp_path / "ACME001-needs-quant-algo.yaml").write_text(USER_RULE_NEEDS_UNKNOWN)
    code, _, _ = mini("--rules", tmp_path, *sets("fp4_gemm_runner_backend=flashinfer_trtllm"))
    assert code == 1


def test_user_rule_dir_adds_a_finding(fresh_cache, tmp_path):
    rule = USER_RULE_NEEDS_UNKNOWN.replace("    - fact: model.quant_algo\n      eq: NVFP4\n", "    - arch: sm120\n")
    assert "quant_algo:" not in rule.split("checked:")[0]
    (tmp_path / "ACME001-x.yaml").write_text(rule)
    code, out, _ = mini("--rules", tmp_path, "--format", "json")
    assert "ACME001" in {f["rule"] for f in json.loads(out)["findings"]} and code == 1


def test_bad_rule_file_exits_2_with_one_line_naming_file_and_field(fresh_cache, tmp_path):
    path = tmp_path / "ACME001-bad.yaml"
    path.write_text(USER_RULE_NEEDS_UNKNOWN.replace("severity: error", "severity: catastrophic"))
    code, out, err = mini("--rules", tmp_path)
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0
    assert str(path) in err and "severity" in err


@pytest.mark.parametrize("args", [
    ["--rules", "/nonexistent/rules"],
    ["--location", "/nonexistent/launch.sh"],
    ["--fail-on", "sometimes"],
    ["--format", "xml"],
])
def test_usage_errors_exit_2(fresh_cache, args):
    assert mini(*args)[0] == 2


def test_bad_arch_exits_2(fresh_cache):
    code, _, err = cli("check", "-s", MINI_E2, "-a", "sm999", "-m", "deepseek-r1-nvfp4")
    assert code == 2 and "sm999" in err


def test_sglang_rejection_is_an_error_finding(fresh_cache):
    code, out, _ = cli("check", "-s", MINI_E2, "-a", "sm100", "-m", "gpt-oss-120b",
                       *sets("quantization=mxfp4", "moe_runner_backend=flashinfer_cutlass"))
    assert code == 1 and "SGA001 sglang-rejects-configuration" in out


def test_help_documents_exit_codes():
    code, out, _ = cli("check", "--help")
    assert code == 0
    for text in ("Exit codes:", "0  no finding", "1  findings", "2  usage", "3  resolution incomplete", "--fail-on", "--location"):
        assert text in out


# ---- SARIF -------------------------------------------------------------------------------


def test_sarif_is_valid_and_complete(fresh_cache):
    code, out, _ = mini(*sets("fp4_gemm_runner_backend=flashinfer_trtllm", "moe_runner_backend=flashinfer_trtllm"),
                        "--format", "sarif")
    assert code == 1
    doc = json.loads(out)
    validate_sarif(doc)
    assert doc["version"] == "2.1.0" and doc["$schema"].endswith("sarif-2.1.0.json")
    (run,) = doc["runs"]
    assert run["automationDetails"]["id"] == "sglang-audit/sm120/deepseek-r1-nvfp4/"
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted(r["id"] for r in rules) and len(rules) >= 16
    for r in rules:
        assert r["name"] and r["shortDescription"]["text"] and r["fullDescription"]["text"]
        assert r["help"]["text"] and r["help"]["markdown"]
        assert r["defaultConfiguration"]["level"] in ("error", "warning", "note")
        assert len(r["shortDescription"]["text"]) <= 1024 and len(r["fullDescription"]["text"]) <= 1024
    by_rule = {res["ruleId"]: res for res in run["results"]}
    res = by_rule["SGA103"]
    assert res["level"] == "error" and res["message"]["text"]
    assert rules[res["ruleIndex"]]["id"] == "SGA103"
    loc = res["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"].startswith("sglang/") and loc["region"]["startLine"] >= 1
    assert res["relatedLocations"]
    assert set(res["partialFingerprints"]) == {"primaryLocationLineHash", "sglangAuditSemantic/v1"}
    assert by_rule["SGA201"]["properties"]["setting"] == "moe_runner_backend"


def test_sarif_is_deterministic(fresh_cache):
    a = mini(*sets("fp4_gemm_runner_backend=flashinfer_trtllm"), "--format", "sarif")[1]
    b = mini(*sets("fp4_gemm_runner_backend=flashinfer_trtllm"), "--format", "sarif")[1]
    assert a == b
    assert "Time" not in a.replace("TimeUtc\"", "")  # no timestamps anywhere


def test_sarif_location_anchors_to_the_launch_file(fresh_cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("deploy").mkdir()
    Path("deploy/launch.sh").write_text(
        "#!/bin/sh\npython -m sglang.launch_server --model-path nvidia/DeepSeek-R1-FP4 --tp 8 \\\n"
        "  --fp4-gemm-backend flashinfer_trtllm\n")
    code, out, _ = mini(*sets("fp4_gemm_runner_backend=flashinfer_trtllm"), "--format", "sarif",
                        "--location", "deploy/launch.sh")
    doc = json.loads(out)
    validate_sarif(doc)
    res = next(r for r in doc["runs"][0]["results"] if r["ruleId"] == "SGA103")
    loc = res["locations"][0]
    assert loc["physicalLocation"]["artifactLocation"] == {"uri": "deploy/launch.sh"}
    assert loc["physicalLocation"]["region"]["startLine"] == 3
    assert "decided at SGLang sglang/" in loc["message"]["text"]
    # the semantic key does not depend on where the result is anchored
    plain = json.loads(mini(*sets("fp4_gemm_runner_backend=flashinfer_trtllm"), "--format", "sarif")[1])
    plain_res = next(r for r in plain["runs"][0]["results"] if r["ruleId"] == "SGA103")
    key = "sglangAuditSemantic/v1"
    assert plain_res["partialFingerprints"][key] == res["partialFingerprints"][key]
    assert plain_res["partialFingerprints"]["primaryLocationLineHash"] != res["partialFingerprints"]["primaryLocationLineHash"]


def test_sarif_undecided_rules_are_tool_notifications(fresh_cache, tmp_path):
    (tmp_path / "ACME001-needs-quant-algo.yaml").write_text(USER_RULE_NEEDS_UNKNOWN)
    code, out, _ = mini("--rules", tmp_path, "--format", "sarif", "-m", mixed_groups_model(tmp_path))
    doc = json.loads(out)
    validate_sarif(doc)
    notes = doc["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    note = next(n for n in notes if n["associatedRule"]["id"] == "ACME001")
    assert "model.quant_algo" in note["message"]["text"]
    assert code == 3


# ---- pre-commit manifest -------------------------------------------------------------------


def test_pre_commit_hook_manifest():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (hook,) = [h for h in hooks if h["id"] == "sglang-audit-check"]
    for key in ("id", "name", "entry", "language"):
        assert hook[key]
    assert hook["language"] == "python" and hook["pass_filenames"] is False
    assert hook["entry"].split()[:2] == ["sglang-audit", "check"]
    assert re.search(hook["files"], "deploy/launch.sh") and re.search(hook["files"], "k8s/sglang.yaml")
    assert not re.search(hook["files"], "src/model.py")


# ---- acceptance on real releases -----------------------------------------------------------


def real(release, version: str, *args: str) -> tuple[int, dict]:
    tree = release(version)
    code, out, err = cli("check", "-s", tree.package_dir, "-a", "sm120", "-m", "qwen3.5-397b-a17b-nvfp4", *args,
                         "--format", "json")
    assert out, err
    return code, json.loads(out)


@pytest.mark.real_release
def test_0513_sm120_qwen35_default_flags_flags_cutlass_fp4_gemm(release):
    code, data = real(release, "0.5.13", *sets("tp_size=8"))
    assert data["source"]["version"] == "0.5.13"
    (f,) = [f for f in data["findings"] if f["rule"] == "SGA101"]
    assert f["severity"] == "error" and f["setting"] == "fp4_gemm_runner_backend"
    assert f["value"] == "flashinfer_cutlass"
    deciding = f["deciding"]
    assert deciding["file"] == "sglang/srt/layers/quantization/fp4_utils.py" and deciding["layer"] == "runtime"
    line = (Path(release("0.5.13").package_dir) / "srt/layers/quantization/fp4_utils.py").read_text().splitlines()[deciding["line"] - 1]
    assert 'backend = "flashinfer_cutlass"' in line
    assert [c["found"] for c in f["code"]] == [False]  # no #20047 branch in this release
    assert code == 1


@pytest.mark.real_release
def test_0510_same_deployment_has_no_cutlass_finding(release):
    code, data = real(release, "0.5.10", *sets("tp_size=8"))
    rules = {f["rule"] for f in data["findings"]}
    assert "SGA101" not in rules and "SGA102" not in rules
    assert {f["severity"] for f in data["findings"]} <= {"warning", "info"}
    # the pip profile's cuDNN (torch 2.9.1's nvidia-cudnn-cu12 pin, rules/torch_pins.toml under the
    # tests) is known: SGA105 judges it (>= 9.10.2: nothing), SGA104's reminder is not needed
    row = load_toml("torch_pins.toml")["torch"]["2.9.1"]
    assert data["device"]["cudnn"] == torch_cudnn_number(row["cudnn"])
    assert data["device"]["cudnn_source"].startswith(f"the pip profile: torch 2.9.1 Requires-Dist {row['dist']}=={row['cudnn']}")
    assert not {"SGA104", "SGA105"} & {f["rule"] for f in data["findings"]}
    assert code == 0 and data["undecided"] == []
    # in SGLang's image (no pip pin read) the version is not known: the reminder stands
    code, data = real(release, "0.5.10", *sets("tp_size=8"), "--env-profile", "image")
    assert data["device"]["cudnn"] is None
    (cudnn,) = [f for f in data["findings"] if f["rule"] == "SGA104"]
    assert cudnn["value"] == "flashinfer_cudnn" and cudnn["deciding"]["file"].endswith("fp4_utils.py")


@pytest.mark.real_release
def test_trtllm_moe_on_sm120_is_an_error_for_target_and_draft(release):
    code, data = real(release, "0.5.13", *sets(*NEXTN, "moe_runner_backend=flashinfer_trtllm"))
    sga201 = {f["setting"]: f for f in data["findings"] if f["rule"] == "SGA201"}
    assert set(sga201) == {"moe_runner_backend", "speculative_moe_runner_backend"}
    assert all(f["severity"] == "error" and f["value"] == "flashinfer_trtllm" for f in sga201.values())
    # the draft inherits the target's runner in this release (arg_groups/speculative_hook.py)
    assert sga201["speculative_moe_runner_backend"]["deciding"]["file"].endswith("speculative_hook.py")
    assert code == 1


@pytest.mark.real_release
def test_0510_trtllm_moe_target_flagged_draft_sent_to_auto(release):
    # 0.5.10 sends the draft to `auto` when the target is flashinfer_trtllm (server_args.py)
    code, data = real(release, "0.5.10", *sets(*NEXTN, "moe_runner_backend=flashinfer_trtllm"))
    assert [f["setting"] for f in data["findings"] if f["rule"] == "SGA201"] == ["moe_runner_backend"]
    assert code == 1


@pytest.mark.real_release
def test_real_release_sarif_validates(release):
    tree = release("0.5.13")
    code, out, _ = cli("check", "-s", tree.package_dir, "-a", "sm120", "-m", "qwen3.5-397b-a17b-nvfp4",
                       *sets(*NEXTN, "moe_runner_backend=flashinfer_trtllm"), "--format", "sarif")
    doc = json.loads(out)
    validate_sarif(doc)
    run = doc["runs"][0]
    assert run["automationDetails"]["id"] == "sglang-audit/sm120/qwen3.5-397b-a17b-nvfp4/"
    assert run["originalUriBaseIds"]["SGLANG"]["uri"] == "https://github.com/sgl-project/sglang/blob/v0.5.13/python/"
    results = {(r["ruleId"], r["properties"].get("setting")) for r in run["results"]}
    assert {("SGA101", "fp4_gemm_runner_backend"), ("SGA201", "moe_runner_backend"),
            ("SGA201", "speculative_moe_runner_backend")} <= results
    assert code == 1


@pytest.mark.real_release
def test_0523_moe_rules_hold_only_where_the_model_has_moe_layers(release):
    # SGA210 (NVFP4 MoE auto -> TRT-LLM on unprepared weights) fired on a dense model (issue 39):
    # a rule about a MoE setting holds only for a model with routed experts
    tree = release("0.5.23")
    found = {}
    for model in ("llama-3.1-8b-nvfp4", "qwen3.5-397b-a17b-nvfp4"):
        code, out, err = cli("check", "-s", tree.package_dir, "-a", "sm120", "-m", model, "--format", "json")
        assert out, err
        found[model] = {f["rule"] for f in json.loads(out)["findings"]}
    assert "SGA210" not in found["llama-3.1-8b-nvfp4"]
    assert "SGA101" in found["llama-3.1-8b-nvfp4"]  # the dense FP4 GEMM rule still holds there
    assert "SGA210" in found["qwen3.5-397b-a17b-nvfp4"]
