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


# ---- the header: the release, the model as named, the environment (issue 39, items 10, 12) ----

def _first_lines(out: str, n: int = 6) -> list[str]:
    return out.splitlines()[:n]


def test_the_first_line_is_the_release_and_its_era_only_with_v():
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "-m", "deepseek-r1-nvfp4")
    assert code == 0 and out.splitlines()[0] == "SGLang 0.0.1 (flashinfer 0.6.1)"
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "-m", "deepseek-r1-nvfp4", "-v")
    head = out.splitlines()[0]
    assert head.startswith("SGLang 0.0.1 (flashinfer 0.6.1) — ") and "E2" in head


@pytest.fixture()
def _no_hf_cache(tmp_path, monkeypatch):
    """A Hugging Face id means the bundled profile here, whatever this machine's HF cache holds."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))


@pytest.mark.usefixtures("_no_hf_cache")
def test_a_hugging_face_id_answered_by_a_bundled_profile_says_so():
    said = "model: nvidia/DeepSeek-R1-0528-FP4 — bundled profile deepseek-r1-nvfp4, rebuilt from public reports (not the hub's files)"
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "-m", "nvidia/DeepSeek-R1-0528-FP4")
    assert code == 0 and any(line.startswith(said) for line in _first_lines(out)), out[:600]
    # pasted in a launch command: the same
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "--launch",
                       "python -m sglang.launch_server --model-path nvidia/DeepSeek-R1-0528-FP4")
    assert code == 0 and any(line.startswith(said) for line in _first_lines(out)), out[:600]
    code, out, _ = cli("explain", "moe_runner_backend", "-s", str(MINI_E2), "-a", "sm100", "-m", "nvidia/DeepSeek-R1-0528-FP4")
    assert "; model: nvidia/DeepSeek-R1-0528-FP4 — bundled profile deepseek-r1-nvfp4, rebuilt from public reports" in out
    # the profile by its own name is no surprise: the plain name
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "-m", "deepseek-r1-nvfp4")
    assert any(line.startswith("model: deepseek-r1-nvfp4 — DeepseekV3ForCausalLM") for line in _first_lines(out))
    assert "bundled profile" not in out


def test_the_environment_is_shown_with_credentials_redacted():
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "--env", "SGLANG_FIXTURE_FORCE_TRITON=1",
                       "--launch", "HF_TOKEN=hf_secret SGLANG_X=2 python -m sglang.launch_server --model-path qwen3-30b-a3b")
    assert code == 0
    assert "env: HF_TOKEN=<redacted> SGLANG_X=2 SGLANG_FIXTURE_FORCE_TRITON=1" in _first_lines(out)
    assert "hf_secret" not in out
    code, out, _ = cli("explain", "moe_runner_backend", "-s", str(MINI_E2), "-a", "sm100", "-m", "qwen3-30b-a3b",
                       "--env", "SGLANG_FIXTURE_FORCE_TRITON=1")
    assert "env: SGLANG_FIXTURE_FORCE_TRITON=1" in _first_lines(out)
    code, out, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "-m", "qwen3-30b-a3b")
    assert not any(line.startswith("env:") for line in out.splitlines())  # none given: no line


# ---- folding, progress paths (item 12) ----------------------------------------------------

def test_folding_never_breaks_inside_a_token():
    from sglang_audit.render.text import wrap

    where = "sglang/srt/layers/quantization/modelopt_quant.py:2020"
    line = "                                  layers  resolved: sgl-kernel cutlass_moe_fp4 at " + where + "  [ModelOptNvFp4FusedMoEMethod]"
    folded = wrap(line + "\n", 80).splitlines()
    assert len(folded) > 1
    assert where in [w for part in folded for w in part.split()], folded  # the file:line whole
    assert [w for part in folded for w in part.split()] == line.split()  # every word whole, in order


def test_parse_progress_shows_the_path_inside_the_package(isolated_cache, monkeypatch):
    from sglang_audit.cli import common

    shown: list[str] = []
    monkeypatch.setattr(common.STATUS, "show", shown.append)
    on_parse = common.parse_progress()
    on_parse(isolated_cache / "sources" / "0c7a01e586b47968" / "flashinfer" / "gemm" / "gemm_base.py")
    on_parse(isolated_cache / "sources" / "5ea09bd781a04d16" / "sglang" / "srt" / "server_args.py")
    on_parse(MINI_E2 / "python" / "sglang" / "srt" / "server_args.py")
    assert shown == ["parsing the release (first run only): 1 files, flashinfer/gemm/gemm_base.py",
                     "parsing the release (first run only): 2 files, sglang/srt/server_args.py",
                     "parsing the release (first run only): 3 files, sglang/srt/server_args.py"]


# ---- usage errors: one line and the --help to read (item 12) -------------------------------

@pytest.mark.parametrize("args, needle, helps", [
    (["resolve", "--bogus"], "No such option '--bogus'", "sglang-audit resolve --help"),
    (["resolve", "-a", "sm100", "--model"], "requires an argument", "sglang-audit resolve --help"),
    (["resolv"], "No such command 'resolv'", "sglang-audit --help"),
    (["--bogus"], "No such option '--bogus'", "sglang-audit --help"),
    (["resolve", "-a", "sm100", "--format", "xml"], "Invalid value for '--format'", "sglang-audit resolve --help"),
    (["report", "-s", "x", "-o", "r.html"], "Missing option '--arch'", "sglang-audit report --help"),  # raised by the command
    (["cache", "info", "--x"], "No such option '--x'", "sglang-audit cache info --help"),
])
def test_a_usage_error_is_one_line_with_its_help(args, needle, helps):
    from click.testing import CliRunner

    from sglang_audit.cli.main import main

    result = CliRunner().invoke(main, args, prog_name="sglang-audit")
    code, out, err = result.exit_code, result.stdout, result.stderr
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("sglang-audit: error: "), err
    assert needle in err and f"'{helps}'" in err
    assert "Usage:" not in err and "Error:" not in err


# ---- a known SGLang rejection: the hint of rules/matrix.toml, said once (item 9) -----------

RADIX = "Speculative decoding for Qwen3MoeForCausalLM is not compatible with radix cache when using --mamba-scheduler-strategy no_buffer."
HINT = "how to get past it: rerun with --set disable_radix_cache=true (in a launch command:"


@pytest.fixture()
def hybrid(tmp_path):
    """The fixture's hybrid-model raise, worded as SGLang 0.5.10-0.5.13 word it."""
    import shutil

    root = tmp_path / "src"
    shutil.copytree(MINI_E2, root)
    sa = root / "python" / "sglang" / "srt" / "server_args.py"
    old = "Speculative decoding is not compatible with radix cache for this fixture model."
    assert old in sa.read_text()
    sa.write_text(sa.read_text().replace(old, RADIX))
    model = tmp_path / "qwen3-hybrid"  # the fixture raises for a model path ending in "hybrid"
    shutil.copytree(MINI_E2.parent.parent / "models" / "qwen3-30b-a3b", model)
    return ["-s", str(root), "-a", "sm100", "-m", str(model), "--set", "speculative_algorithm=NEXTN"]


@pytest.mark.parametrize("command", [["resolve"], ["check"], ["explain", "moe_runner_backend"], ["recommend"]])
def test_a_known_rejection_says_how_to_get_past_it_once(hybrid, command):
    code, out, _ = cli(*command, *hybrid)
    assert code == 1
    assert out.count(HINT) == 1, out
    assert "--disable-radix-cache" in out and "--set mamba_scheduler_strategy=extra_buffer" in out
    code, out, _ = cli(*command, *hybrid, "--set", "disable_radix_cache=true")
    assert HINT not in out  # no rejection, no hint


def test_recommend_says_a_rejection_shared_by_every_candidate_once(hybrid):
    code, out, _ = cli("recommend", *hybrid)
    assert code == 1
    assert out.count(RADIX) == 1, out
    assert "3 candidates, the same way: rejected: SGLang rejects it: ValueError: " + RADIX in out
    assert "    moe_runner_backend=triton|flashinfer_trtllm|flashinfer_cutlass" in out.splitlines()


@pytest.mark.real_release
def test_recommend_on_0_5_10_without_disable_radix_cache_names_the_flag_once():
    """The issue's case: every candidate hit the same ValueError, printed 9 times, no way out."""
    code, out, _ = cli("recommend", "--source", "sglang==0.5.10", "--arch", "sm120", "--model", "qwen3.5-397b-a17b-nvfp4",
                       "--set", "tp_size=8", "--set", "speculative_algorithm=NEXTN")
    assert code == 1
    assert out.count("is not compatible with radix cache when using --mamba-scheduler-strategy no_buffer") == 1, out
    assert out.count(HINT) == 1


# ---- a model the release did not read is unknown, never "None" (item 6) ---------------------

def test_a_rejected_configuration_says_the_model_was_not_read(hybrid):
    code, out, _ = cli("resolve", *hybrid)
    assert code == 1
    (line,) = [ln for ln in out.splitlines() if ln.startswith("model: ")]
    assert "— unknown (ModelConfig not read: SGLang rejects the configuration before it builds the model's config)" in line
    assert "quantization unknown (as above)" in line and "— None" not in line


@pytest.mark.parametrize("version, said", [("0.4.0", True), ("0.4.5.post1", True), ("0.4.6", False), ("0.5.23", False),
                                           ("not-a-version", False), (None, False)])
def test_a_release_below_the_validated_floor_is_said(version, said):
    from sglang_audit.resolve.release import below_validated

    note = below_validated(version)
    assert (note is not None) == said
    if said:
        assert note.startswith(f"SGLang {version} is older than 0.4.6") and "not validated" in note


def test_a_model_the_release_could_not_read_is_an_incomplete_answer(tmp_path):
    # item 6: 0.4.0 (no ModelConfig.from_server_args) resolved its flags and exited 0 with
    # "— None, quantization None"; a release whose ModelConfig cannot be read for the model
    # is an incomplete answer (exit 3) that says why
    import shutil

    root = tmp_path / "src"
    shutil.copytree(MINI_E2, root)
    mc = root / "python" / "sglang" / "srt" / "configs" / "model_config.py"
    mc.write_text(mc.read_text().replace("def from_server_args(", "def from_args_renamed("))
    code, out, _ = cli("resolve", "-s", str(root), "-a", "sm100", "-m", "deepseek-r1-nvfp4")
    assert code == 3, out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("model: ")]
    assert "— unknown (ModelConfig not read: " in line and "from_server_args" in line and "— None" not in line
    code, _, _ = cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "-m", "deepseek-r1-nvfp4")
    assert code == 0  # the same flags with the release's ModelConfig readable
