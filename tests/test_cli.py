"""Command-line behaviour on the hand-written E2 fixture checkout: results, evidence,
exit codes and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import cli

MINI_E2 = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_e2"


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


def test_resolve_json_shape_and_sm100_rule():
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "-m", "deepseek-r1-nvfp4", "--format", "json")
    assert code == 0
    data = json.loads(out)
    for key in ("schema_version", "source", "device", "model", "rejected", "settings"):
        assert key in data
    moe = data["settings"]["moe_runner_backend"]
    assert moe["config"] == "flashinfer_trtllm" and moe["status"] == "resolved"
    deciding = moe["chain"][-1]
    assert deciding["file"] == "sglang/srt/server_args.py"
    assert "is_sm100_supported()" in deciding["guard"] and deciding["value"] == "flashinfer_trtllm"
    fp4 = data["settings"]["fp4_gemm_runner_backend"]
    assert fp4["runtime"] == "flashinfer_cutlass"


def test_sm120_predicate_flips_fp4_runtime_and_not_moe():
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--format", "json")
    data = json.loads(out)
    assert data["settings"]["moe_runner_backend"]["config"] == "auto"
    assert data["settings"]["fp4_gemm_runner_backend"]["runtime"] == "flashinfer_cudnn"


def test_sm121_counts_as_sm120_supported():
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "12.1", "-m", "deepseek-r1-nvfp4", "--format", "json")
    assert json.loads(out)["settings"]["fp4_gemm_runner_backend"]["runtime"] == "flashinfer_cudnn"


def test_cuda_too_old_disables_predicate():
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm120", "--cuda", "12.4", "-m", "deepseek-r1-nvfp4", "--format", "json")
    assert json.loads(out)["settings"]["fp4_gemm_runner_backend"]["runtime"] == "flashinfer_cutlass"


def test_assert_rejection_reports_message_and_line():
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "-m", "gpt-oss-120b", "--set", "quantization=mxfp4", "--set", "moe_runner_backend=flashinfer_cutlass", "--format", "json")
    assert code == 1
    rej = json.loads(out)["rejected"]
    assert rej["message"] == "modelopt_fp4 quantization is required for Flashinfer Cutlass MOE"
    assert rej["exception"] == "AssertionError"
    assert rej["file"] == "sglang/srt/server_args.py" and rej["line"] == 56


def test_env_var_changes_decision():
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "-m", "qwen3-30b-a3b", "--env", "SGLANG_FIXTURE_FORCE_TRITON=1", "--format", "json")
    assert json.loads(out)["settings"]["moe_runner_backend"]["config"] == "triton"


def test_launch_and_set_agree():
    a = cli("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--set", "tp_size=8", "--set", "moe-runner-backend=flashinfer_cutlass", "--format", "json")
    b = cli("resolve", "-s", str(MINI_E2), "-a", "sm120", "--launch", "python -m sglang.launch_server --model-path deepseek-r1-nvfp4 --tp 8 --moe-runner-backend flashinfer_cutlass", "--format", "json")
    ja, jb = json.loads(a[1]), json.loads(b[1])
    assert ja["flags"] == jb["flags"] == {"tp_size": 8, "moe_runner_backend": "flashinfer_cutlass"}
    assert ja["settings"] == jb["settings"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["-a", "sm999", "-m", "deepseek-r1-nvfp4"], "unknown --arch 'sm999'"),
        (["-a", "sm120", "--cuda", "twelve", "-m", "deepseek-r1-nvfp4"], "bad --cuda"),
        (["-a", "sm120", "-m", "no-such-model"], "model not found"),
        (["-a", "sm120", "-m", "deepseek-r1-nvfp4", "--set", "no_such_flag=1"], "unknown setting 'no_such_flag'"),
        (["-a", "sm120", "-m", "deepseek-r1-nvfp4", "--set", "moe_runner_backend=bogus"], "choose one of auto, triton"),
        (["-a", "sm120", "-m", "deepseek-r1-nvfp4", "--set", "tp_size=eight"], "expected int"),
        (["-a", "sm120", "--launch", "python -m sglang.launch_server --model-path 'unclosed"], "cannot parse --launch"),
        (["-a", "sm120", "--launch", "python -m sglang.launch_server --model-path deepseek-r1-nvfp4 --frobnicate 3"], "unknown flag '--frobnicate'"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle):
    code, out, err = cli("resolve", "-s", str(MINI_E2), *args)
    assert code == 2, (out, err)
    assert needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_source_dir(tmp_path):
    code, _, err = cli("resolve", "-s", str(tmp_path / "nope"), "-a", "sm120", "-m", "deepseek-r1-nvfp4")
    assert code == 2 and "source not found" in err and "Traceback" not in err


def test_malformed_config_json(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    code, _, err = cli("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", str(tmp_path))
    assert code == 2 and "expected a JSON object" in err
    (tmp_path / "config.json").write_text("{not json")
    code, _, err = cli("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", str(tmp_path))
    assert code == 2 and "not valid JSON" in err
