"""Deployments as users have them: pasted launch commands, SGLang's --config YAML,
Hugging Face ids (target and draft), any ServerArgs field; and the same answer whichever
way the deployment is given.

Launch-command fixtures are real commands from SGLang's docs and issues (cited at each).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clirun import cli

from sglang_audit.errors import InputError
from sglang_audit.inputs.launch import split_launch
from sglang_audit.resolve.pipeline import Request, profile_ids, resolve
from sglang_audit.shipped import profiles_dir

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"

# sgl-project/sglang#5513 ("next-N does not work on H20"), verbatim
ISSUE_5513 = """python -m sglang.launch_server --served-model-name=ds-r1-671b --model-path=$models/DeepSeek-R1 \\
--enable-p2p-check --reasoning-parser=deepseek-r1 --trust-remote-code --host=0.0.0.0 --port=38001 \\
--mem-fraction-static=0.9 \\
--tp=8 --max-total-tokens=65000 --max-running-requests=64 \\
--enable-ep-moe \\
--disable-radix-cache \\
--speculative-algorithm EAGLE3 \\
--speculative-draft-model-path $moddels/DeepSeek-R1-NextN \\
--speculative-num-steps 3 \\
--speculative-eagle-topk 1 \\
--speculative-num-draft-tokens 4
"""

# SGLang docs, "Install SGLang" → "Method 3: Using docker"
DOCS_DOCKER = """docker run --gpus all \\
    --shm-size 32g \\
    -p 30000:30000 \\
    -v ~/.cache/huggingface:/root/.cache/huggingface \\
    --env "HF_TOKEN=<secret>" \\
    --ipc=host \\
    lmsysorg/sglang:latest \\
    python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --host 0.0.0.0 --port 30000
"""

# SGLang docs, "SGLang Router": the co-launched router and workers
DOCS_ROUTER = "python -m sglang_router.launch_server --model-path meta-llama/Meta-Llama-3.1-8B-Instruct --dp-size 4"

# sgl-project/sgl-cookbook#240: the variable is prepended to the serve command
COOKBOOK_ENV = "SGLANG_ENABLE_SPEC_V2=1 sglang serve --model-path Qwen/Qwen3.5-397B-A17B-FP8 --tp 8"


@pytest.fixture(autouse=True)
def _cache(request):
    # a private cache, except for the real-release tests (they share the downloaded and
    # parsed releases, as in tests/test_real_releases.py)
    if request.node.get_closest_marker("real_release") is None:
        return request.getfixturevalue("isolated_cache")
    return None


# ---- launch command forms --------------------------------------------------------------

def test_backslash_continuations_and_equals_forms():
    cmd = split_launch(ISSUE_5513)
    assert cmd.entry == "python -m sglang.launch_server"
    assert "\n" not in cmd.argv and "\\" not in " ".join(cmd.argv)
    assert cmd.argv[:2] == ("--served-model-name=ds-r1-671b", "--model-path=$models/DeepSeek-R1")
    assert cmd.argv[-2:] == ("--speculative-num-draft-tokens", "4")
    assert cmd.env == ()


def test_an_angle_bracket_placeholder_is_a_value_not_a_redirection():
    """Issues paste `--model-path <checkpoint>`; a shell would read a redirection, a reader a
    placeholder: the flag keeps its value (sglang#32843's command)."""
    cmd = split_launch("python3 -m sglang.launch_server --model-path <block-fp8-mla-checkpoint> --tp 8 2>&1 >log")
    assert cmd.argv == ("--model-path", "<block-fp8-mla-checkpoint>", "--tp", "8")


def test_docker_run_skips_runtime_options_and_image():
    cmd = split_launch(DOCS_DOCKER)
    assert cmd.argv == ("--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--host", "0.0.0.0", "--port", "30000")
    assert dict(cmd.env) == {"HF_TOKEN": "<secret>"}  # the container's environment
    assert cmd.entry.startswith("docker run")


def test_podman_combined_short_switches_and_env_flags():
    cmd = split_launch("podman run -it --rm -e SGLANG_USE_AITER=1 --device /dev/kfd img:tag "
                       "python3 -m sglang.launch_server --model-path m --tp 2")
    assert cmd.argv == ("--model-path", "m", "--tp", "2")
    assert dict(cmd.env) == {"SGLANG_USE_AITER": "1"}


def test_env_prefixes_become_environment():
    cmd = split_launch(COOKBOOK_ENV)
    assert cmd.entry == "sglang serve" and dict(cmd.env) == {"SGLANG_ENABLE_SPEC_V2": "1"}
    cmd = split_launch("export A=1\nenv -u X B=2 C=3 python3 -m sglang.launch_server --tp 2")
    assert dict(cmd.env) == {"A": "1", "B": "2", "C": "3"} and cmd.argv == ("--tp", "2")


def test_comments_pipes_and_redirections():
    cmd = split_launch("# serve the model\npython -m sglang.launch_server --model-path a#b \\\n"
                       "  --tp 8  # eight GPUs\n  2>&1 | tee server.log")
    assert cmd.argv == ("--model-path", "a#b", "--tp", "8")


def test_router_entry_point():
    cmd = split_launch(DOCS_ROUTER)
    assert cmd.router and cmd.argv[-2:] == ("--dp-size", "4")


@pytest.mark.parametrize("text, needle", [
    ("echo hello", "no SGLang server invocation"),
    ("docker run --gpus all lmsysorg/sglang:latest", "default entrypoint"),
    ("docker run -e HF_TOKEN img python3 -m sglang.launch_server --tp 2", "host environment"),
    ("python -m sglang.launch_server --tp 2\npython -m sglang.launch_server --tp 4", "twice"),
])
def test_launch_commands_that_cannot_be_read(text, needle):
    with pytest.raises(InputError, match=needle):
        split_launch(text)


def test_env_prefix_changes_the_answer_exactly_as_env():
    base = ["resolve", "-s", MINI_E2, "-a", "sm100", "--format", "json"]
    via_env = cli(*base, "-m", "qwen3-30b-a3b", "--env", "SGLANG_FIXTURE_FORCE_TRITON=1")
    via_prefix = cli(*base, "--launch", "SGLANG_FIXTURE_FORCE_TRITON=1 python3 -m sglang.launch_server --model-path qwen3-30b-a3b")
    without = cli(*base, "--launch", "python3 -m sglang.launch_server --model-path qwen3-30b-a3b")
    a, b, c = (json.loads(r[1]) for r in (via_env, via_prefix, without))
    assert a["settings"]["moe_runner_backend"]["config"] == "triton"
    assert a["settings"] == b["settings"] and a["env"] == b["env"] == {"SGLANG_FIXTURE_FORCE_TRITON": "1"}
    assert c["settings"]["moe_runner_backend"]["config"] != "triton"


def test_docker_command_resolves_and_env_option_wins():
    docker = ("docker run --gpus all --shm-size 32g -e SGLANG_FIXTURE_FORCE_TRITON=0 --ipc=host lmsysorg/sglang:latest "
              "python3 -m sglang.launch_server --model-path qwen3-30b-a3b --tp 2")
    code, out, err = cli("resolve", "-s", MINI_E2, "-a", "sm100", "--launch", docker,
                         "--env", "SGLANG_FIXTURE_FORCE_TRITON=1", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["flags"] == {"tp_size": 2} and data["env"] == {"SGLANG_FIXTURE_FORCE_TRITON": "1"}
    assert data["settings"]["moe_runner_backend"]["config"] == "triton"


def test_router_flags_are_skipped_server_flags_parsed():
    code, out, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "--format", "json", "--launch",
                         "python -m sglang_router.launch_server --model-path deepseek-r1-nvfp4 --router-policy cache_aware --tp 8")
    assert code in (0, 3), err
    assert json.loads(out)["flags"] == {"tp_size": 8}


def test_argparse_rules_a_value_never_starts_with_dashes():
    code, _out, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "--launch",
                          "python -m sglang.launch_server --model-path deepseek-r1-nvfp4 --moe-runner-backend --tp 8")
    assert code == 2 and "--moe-runner-backend needs a value" in err
    assert "SGLang" in err  # every error names the release


def test_did_you_mean_for_flags_choices_and_arch():
    launch = "python -m sglang.launch_server --model-path deepseek-r1-nvfp4 --moe-runner-backen flashinfer_cutlass"
    code, _o, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "--launch", launch.replace("backen ", "backnd "))
    assert code == 2 and "did you mean --moe-runner-backend" in err
    code, _o, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--set", "moe_runner_backend=flashinfer_cutlas")
    assert code == 2 and "did you mean flashinfer_cutlass?" in err
    code, _o, err = cli("resolve", "-s", MINI_E2, "-a", "sm12", "-m", "deepseek-r1-nvfp4")
    assert code == 2 and "did you mean sm120" in err
    code, _o, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp")
    assert code == 2 and "did you mean deepseek-r1-nvfp4" in err


def test_config_option_on_a_release_without_it_names_the_release(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tp-size: 8\n")
    code, _out, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--config", cfg)
    assert code == 2 and "has no --config option" in err and err.count("\n") == 1


# ---- any field, origins, quiet when piped ------------------------------------------------

def test_field_reports_any_serverargs_field_with_its_chain():
    code, out, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--set", "tp_size=8",
                         "--field", "tp_size", "--field", "disable_radix_cache", "--format", "json")
    assert code == 0, err
    s = json.loads(out)["settings"]
    assert s["tp_size"]["config"] == 8 and s["tp_size"]["chain"][-1]["kind"] == "flag"
    assert s["disable_radix_cache"]["config"] is False
    assert err == ""  # piped: no progress lines
    code, _out, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--field", "tp_sise")
    assert code == 2 and "did you mean tp_size" in err


def test_all_fields_json_has_every_field():
    code, out, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--all-fields", "--format", "json")
    assert code in (0, 3), err
    s = json.loads(out)["settings"]
    assert {"model_path", "tp_size", "ep_size", "disable_radix_cache", "moe_runner_backend"} <= set(s)


def test_text_says_where_each_value_came_from():
    code, out, _err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp4",
                          "--set", "moe_runner_backend=flashinfer_cutlass", "--field", "tp_size")
    lines = {line.split()[0]: line for line in out.splitlines() if line and not line.startswith(" ")}
    assert "set by you" in lines["moe_runner_backend"]
    assert "(resolved, default)" in lines["tp_size"]


# ---- models by Hugging Face id ---------------------------------------------------------------

def fake_hub(root: Path, repo: str, profile: str, quant: dict | None = None) -> Path:
    """A Hugging Face cache as huggingface_hub lays it out (refs/main → snapshot)."""
    org, name = repo.split("/")
    base = root / f"models--{org}--{name}"
    snap = base / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    snap.mkdir(parents=True)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(snap.name)
    shutil.copy(profiles_dir() / profile / "config.json", snap / "config.json")
    if quant is not None:
        (snap / "hf_quant_config.json").write_text(json.dumps(quant))
    else:  # the cache records a file the repository does not have
        (base / ".no_exist" / snap.name).mkdir(parents=True)
        (base / ".no_exist" / snap.name / "hf_quant_config.json").write_text("")
    return snap


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def test_hf_id_from_the_local_cache_offline(hub):
    fake_hub(hub, "someorg/DeepSeek-R1-Mirror", "deepseek-r1-nvfp4")
    args = ["resolve", "-s", MINI_E2, "-a", "sm120", "--set", "tp_size=8", "--format", "json"]
    code, by_id, err = cli(*args, "-m", "someorg/DeepSeek-R1-Mirror")
    assert code == 0, err
    _c, by_profile, _e = cli(*args, "-m", "deepseek-r1-nvfp4")
    a, b = json.loads(by_id), json.loads(by_profile)
    assert a["model"]["name"] == "someorg/DeepSeek-R1-Mirror" and "/snapshots/" in a["model"]["path"]
    assert a["settings"] == b["settings"]


def test_hf_id_not_cached_while_offline_is_an_input_error(hub):
    code, _out, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "-m", "someorg/NotThere")
    assert code == 2 and "HF_HUB_OFFLINE" in err and "someorg/NotThere" in err


def test_bundled_profiles_answer_to_their_hf_ids(hub):
    ids = profile_ids()
    assert ids["nvidia/Qwen3.5-397B-A17B-NVFP4"] == "qwen3.5-397b-a17b-nvfp4"
    assert len(ids) == len(list(profiles_dir().glob("*/config.json")))  # every profile names its id
    args = ["resolve", "-s", MINI_E2, "-a", "sm120", "--format", "json"]
    a = json.loads(cli(*args, "-m", "nvidia/DeepSeek-R1-0528-FP4")[1])
    b = json.loads(cli(*args, "-m", "deepseek-r1-nvfp4")[1])
    assert a["model"]["name"] == "deepseek-r1-nvfp4" and a["settings"] == b["settings"]


def test_mocked_download_fetches_only_config_files(tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.example")
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    calls: list[tuple[str, str, str | None, str | None]] = []
    snap = tmp_path / "dl" / "snap"

    def fake_download(repo_id: str, filename: str, **kw: object) -> str:
        calls.append((repo_id, filename, kw.get("endpoint"), kw.get("token")))
        if filename != "config.json":
            raise EntryNotFoundError("404")
        snap.mkdir(parents=True, exist_ok=True)
        shutil.copy(profiles_dir() / "qwen3-30b-a3b" / "config.json", snap / "config.json")
        return str(snap / "config.json")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    code, out, err = cli("resolve", "-s", MINI_E2, "-a", "sm100", "-m", "someorg/Qwen3-Mirror", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["model"]["path"] == str(snap.resolve())
    assert {c[1] for c in calls} == {"config.json", "hf_quant_config.json"}  # never weights
    assert all(c[2] == "https://mirror.example" and c[3] == "hf_test" for c in calls)


def test_request_api_takes_hf_ids_too(hub):
    fake_hub(hub, "someorg/Qwen3-Mirror", "qwen3-30b-a3b")
    res = resolve(Request(source=str(MINI_E2), arch="sm100", model="someorg/Qwen3-Mirror"))
    assert res.model.name == "someorg/Qwen3-Mirror" and res.model.architecture == "Qwen3MoeForCausalLM"


# ---- real releases ---------------------------------------------------------------------------

QWEN_NEXTN = {"tp_size": 8, "speculative_algorithm": "NEXTN", "disable_radix_cache": True}


def _settings(result: dict) -> dict:
    """The settings with the model's own path (quoted in evidence) written as <model>."""
    text = json.dumps(result["settings"]).replace(json.dumps(result["model"]["path"])[1:-1], "<model>")
    return json.loads(text)


def _same_answer(results: list[dict]) -> None:
    first = results[0]
    for other in results[1:]:
        assert _settings(other) == _settings(first)
        assert other["model"]["quantization"] == first["model"]["quantization"]
        assert other["model"]["draft_architecture"] == first["model"]["draft_architecture"]
        assert other["rejected"] == first["rejected"]


@pytest.mark.real_release
def test_same_answer_whichever_way_the_deployment_is_given(release, tmp_path, monkeypatch):
    """flags (--set), a pasted launch command, SGLang's YAML, a Hugging Face id (the
    bundled profile's, and a copy in the local HF cache): one answer."""
    src = str(release("0.5.10").package_dir)
    hub_root = tmp_path / "hub"
    hub_root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_hub(hub_root, "someorg/Qwen3.5-Mirror", "qwen3.5-397b-a17b-nvfp4")
    cfg = tmp_path / "server.yaml"
    cfg.write_text("model-path: qwen3.5-397b-a17b-nvfp4\ntp-size: 8\nspeculative-algorithm: NEXTN\ndisable-radix-cache: true\n")
    base = ["resolve", "-s", src, "-a", "sm120", "--format", "json"]
    forms = {
        "set": [*base, "-m", "qwen3.5-397b-a17b-nvfp4", "--set", "tp_size=8", "--set", "speculative_algorithm=NEXTN",
                "--set", "disable_radix_cache=true"],
        "launch": [*base, "--launch", "python3 -m sglang.launch_server \\\n  --model-path qwen3.5-397b-a17b-nvfp4 \\\n"
                   "  --tp 8 --speculative-algorithm NEXTN \\\n  --disable-radix-cache  # MTP\n"],
        "docker": [*base, "--launch", "docker run --gpus all --ipc=host lmsysorg/sglang:v0.5.10 sglang serve "
                   "--model-path nvidia/Qwen3.5-397B-A17B-NVFP4 --tp-size=8 --speculative-algorithm=NEXTN --disable-radix-cache"],
        "config": [*base, "--config", str(cfg)],
        "config_in_launch": [*base, "--launch", f"python -m sglang.launch_server --config {cfg}"],
        "hf_id_profile": [*base, "-m", "nvidia/Qwen3.5-397B-A17B-NVFP4", "--launch",
                          "python -m sglang.launch_server --tp 8 --speculative-algorithm NEXTN --disable-radix-cache"],
        "hf_id_cache": [*base, "-m", "someorg/Qwen3.5-Mirror", "--set", "tp_size=8", "--set", "speculative_algorithm=NEXTN",
                        "--set", "disable_radix_cache=true"],
    }
    results = {}
    for name, args in forms.items():
        code, out, err = cli(*args)
        assert code in (0, 3), (name, err)
        results[name] = json.loads(out)
        assert results[name]["flags"] == QWEN_NEXTN, name
    _same_answer(list(results.values()))
    s = results["set"]["settings"]
    assert s["speculative_algorithm"]["config"] == "EAGLE"
    assert s["fp4_gemm_runner_backend"]["runtime"] == "flashinfer_cudnn"


@pytest.mark.real_release
@pytest.mark.parametrize("version", ["0.5.5", "0.5.23"])
def test_config_file_merged_as_the_release_merges_it(release, tmp_path, version):
    src = str(release(version).package_dir)
    cfg = tmp_path / "server.yaml"
    # false for a store_true flag adds nothing (both merger generations)
    cfg.write_text("tp-size: 8\nmoe-runner-backend: triton\ndisable-radix-cache: false\n")
    base = ["resolve", "-s", src, "-a", "sm90", "-m", "qwen3-30b-a3b", "--format", "json"]
    code, out, err = cli(*base, "--config", cfg)
    assert code in (0, 3), err
    assert json.loads(out)["flags"] == {"tp_size": 8, "moe_runner_backend": "triton"}
    # command-line flags win over the file (the release puts the file's arguments first)
    code, out, err = cli(*base, "--launch", f"python -m sglang.launch_server --tp 2 --config {cfg}")
    assert code in (0, 3), err
    assert json.loads(out)["flags"] == {"tp_size": 2, "moe_runner_backend": "triton"}
    # --set wins over both
    code, out, err = cli(*base, "--config", cfg, "--set", "tp_size=4")
    assert json.loads(out)["flags"]["tp_size"] == 4
    code, _out, err = cli(*base, "--config", cfg, "--launch", f"python -m sglang.launch_server --config {cfg}")
    assert code == 2 and f"SGLang {version}" in err and "only one" in err


@pytest.mark.real_release
def test_a_config_file_is_a_user_file_a_fifo_or_a_yaml_bomb_is_refused(release, tmp_path):
    # --config was read with a plain read_text and yaml.safe_load: a FIFO blocked, a 1 kB
    # "billion laughs" document expanded without bound
    import os
    import threading

    base = ["resolve", "-s", str(release("0.5.23").package_dir), "-a", "sm90", "-m", "qwen3-30b-a3b", "--config"]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text('a: &a ["x","x","x","x","x","x","x","x","x"]\n'
                    + "".join(f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
                              for p, c in zip("abcdefgh", "bcdefghi", strict=True)))
    code, _out, err = cli(*base, bomb)
    assert code == 2 and "aliases" in err and len(err.strip().splitlines()) == 1, err
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    out: list[tuple[int, str, str]] = []
    t = threading.Thread(target=lambda: out.append(cli(*base, fifo)), daemon=True)
    t.start()
    t.join(60)
    assert out, "--config blocked on a FIFO"
    assert out[0][0] == 2 and "not a regular file" in out[0][2]


@pytest.mark.real_release
def test_0523_config_refuses_what_the_release_refuses(release, tmp_path):
    """0.5.23's merger refuses keys whose action takes no single value, e.g. the
    BooleanOptionalAction --enable-tf32-matmul (server_args_config_parser.py)."""
    cfg = tmp_path / "server.yaml"
    cfg.write_text("enable-tf32-matmul: true\n")
    code, _out, err = cli("resolve", "-s", str(release("0.5.23").package_dir), "-a", "sm90", "-m", "qwen3-30b-a3b", "--config", cfg)
    assert code == 2
    assert "SGLang 0.5.23 refuses --config: Unsupported config option 'enable_tf32_matmul' with action 'BooleanOptionalAction'" in err
    assert "server_args_config_parser.py:" in err
    # a deprecated spelling (SGLang's DeprecatedStoreTrueAction, nargs=0 in its __init__) too
    cfg.write_text("enable-dp-attention: true\n")
    code, _out, err = cli("resolve", "-s", str(release("0.5.23").package_dir), "-a", "sm90", "-m", "qwen3-30b-a3b", "--config", cfg)
    assert code == 2 and "'enable_dp_attention' with action 'DeprecatedStoreTrueAction'" in err
    # on the command line the same flag is a switch with a --no- spelling
    code, out, err = cli("resolve", "-s", str(release("0.5.23").package_dir), "-a", "sm90", "-m", "qwen3-30b-a3b",
                         "--launch", "sglang serve --no-enable-tf32-matmul --tp 2", "--format", "json")
    assert code in (0, 3), err
    assert json.loads(out)["flags"] == {"enable_tf32_matmul": False, "tp_size": 2}


@pytest.mark.real_release
def test_0514_bool_fields_are_switches_as_in_the_release_parser(release):
    """0.5.14's dataclass-derived parser (arg_groups/arg_utils.py) turns every bool /
    Optional[bool] field into store_true: `--enable-multimodal --tp 4` parses."""
    code, out, err = cli("resolve", "-s", str(release("0.5.14").package_dir), "-a", "sm120", "-m", "qwen3.5-397b-a17b-nvfp4",
                         "--launch", "python -m sglang.launch_server --enable-multimodal --tp 4", "--format", "json")
    assert code in (0, 3), err
    assert json.loads(out)["flags"] == {"enable_multimodal": True, "tp_size": 4}


@pytest.mark.real_release
def test_draft_model_by_hf_id(release, tmp_path, monkeypatch):
    src = str(release("0.5.10").package_dir)
    hub_root = tmp_path / "hub"
    hub_root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    launch = ("python -m sglang.launch_server --model-path llama-3.1-8b-nvfp4 --speculative-algorithm EAGLE3 "
              "--speculative-draft-model-path someorg/Llama-3.1-8B-eagle3 --speculative-num-steps 3 "
              "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
    # not fetchable (offline, not cached): a partial answer, never an input error nor exit 0 (issue 43):
    # the draft's config reads are unknown, the target's layers built, and a note says why
    code, out, err = cli("resolve", "-s", src, "-a", "sm90", "--launch", launch, "--format", "json")
    assert code == 3 and "draft model someorg/Llama-3.1-8B-eagle3 not read" in err
    partial = json.loads(out)
    assert partial["analysis_notes"][0].startswith("draft model someorg/Llama-3.1-8B-eagle3 not read (")
    assert "HF_HUB_OFFLINE is set" in partial["analysis_notes"][0]
    assert partial["settings"]["speculative_moe_runner_backend"]["status"] == "unknown"
    assert partial["settings"]["attention_backend"]["layer"]["status"] == "resolved"
    # a local directory that is not a model stays an input error (a typo, not a fetch)
    code, _out, err = cli("resolve", "-s", src, "-a", "sm90", "--launch",
                          launch.replace("someorg/Llama-3.1-8B-eagle3", str(tmp_path)))
    assert code == 2 and "no config.json in draft model directory" in err
    snap = fake_hub(hub_root, "someorg/Llama-3.1-8B-eagle3", "llama-3.1-8b-nvfp4")
    cfg = json.loads((snap / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLMEagle3"]
    cfg.pop("quantization_config", None)
    (snap / "config.json").write_text(json.dumps(cfg))
    code, out, err = cli("resolve", "-s", src, "-a", "sm90", "--launch", launch, "--format", "json")
    assert code in (0, 1, 3), err
    data = json.loads(out)
    assert data["flags"]["speculative_draft_model_path"] == str(snap.resolve())
    if data["rejected"] is None:
        assert data["model"]["draft_architecture"] == "LlamaForCausalLMEagle3"


def test_launch_with_config_folds_the_file_into_the_command():
    from sglang_audit.resolve.pipeline import launch_with_config

    req = Request(source=None, arch="sm120", model=None, launch="python -m sglang.launch_server \\\n  --tp 8  # GPUs",
                  config="/tmp/my server.yaml")
    assert split_launch(launch_with_config(req)).argv == ("--tp", "8", "--config", "/tmp/my server.yaml")
    assert split_launch(launch_with_config(Request(source=None, arch="sm120", model=None, config="c.yaml"))).argv == ("--config", "c.yaml")


def test_credentials_in_a_pasted_command_are_not_reported():
    code, out, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "--format", "json", "--launch",
                         DOCS_DOCKER.replace("meta-llama/Llama-3.1-8B-Instruct", "deepseek-r1-nvfp4").replace("<secret>", "hf_abc123")
                         .replace(" --host 0.0.0.0 --port 30000", ""))  # the fixture release has no --host/--port
    assert code in (0, 3), err
    assert "hf_abc123" not in out and json.loads(out)["env"] == {"HF_TOKEN": "<redacted>"}


def test_unexpanded_shell_variable_in_model_path_is_explained():
    first_line = ISSUE_5513.split(" --served-model-name=ds-r1-671b")[0] + " --model-path=$models/DeepSeek-R1 --tp=8"
    code, _out, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "--launch", first_line)
    assert code == 2 and "$models/DeepSeek-R1" in err and "shell variable" in err


@pytest.mark.real_release
@pytest.mark.parametrize("command, flags", [
    (DOCS_DOCKER, {"host": "0.0.0.0", "port": 30000}),
    (DOCS_ROUTER + " --router-policy cache_aware", {"dp_size": 4}),
    (COOKBOOK_ENV.replace("Qwen/Qwen3.5-397B-A17B-FP8", "nvidia/Qwen3.5-397B-A17B-NVFP4"), {"tp_size": 8}),
])
def test_docs_commands_on_a_real_release(release, command, flags, hub):
    code, out, err = cli("resolve", "-s", str(release("0.5.10").package_dir), "-a", "sm90", "-m", "llama-3.1-8b-nvfp4",
                         "--launch", command, "--format", "json")
    assert code in (0, 1, 3), err
    assert json.loads(out)["flags"] == flags


def test_explain_takes_any_serverargs_field():
    code, out, err = cli("explain", "tp_size", "-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--set", "tp_size=8",
                         "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["setting"]["config"] == 8 and data["user_set"] is True
    code, _out, err = cli("explain", "tp_sise", "-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp4")
    assert code == 2 and "did you mean tp_size" in err


@pytest.mark.real_release
def test_0523_deprecated_spellings_run_the_releases_own_actions(release):
    """0.5.23's DeprecatedStoreTrueAction / DeprecatedStoreConstAction (arg_groups/
    argparse_actions.py) are evaluated: `--enable-dp-attention` stores True (resolution then
    turns it into attn_dp_size), `--monokernel-backend amd` stores const_value on its dest."""
    code, out, err = cli("resolve", "-s", str(release("0.5.23").package_dir), "-a", "sm90", "-m", "deepseek-v3-fp8",
                         "--launch", "python -m sglang.launch_server --tp 8 --dp 8 --enable-dp-attention --monokernel-backend amd",
                         "--field", "attn_dp_size", "--format", "json")
    assert code in (0, 1, 3), err
    data = json.loads(out)
    assert data["flags"] == {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True, "enable_amd_monokernel": True}
    if data["rejected"] is None:
        assert data["settings"]["attn_dp_size"]["config"] == 8


def test_no_network_for_the_quant_file_is_not_taken_as_absent(tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    snap = tmp_path / "dl"

    def flaky(repo_id: str, filename: str, **kw: object) -> str:
        if filename != "config.json":
            raise LocalEntryNotFoundError("connection error")  # a subclass of EntryNotFoundError
        snap.mkdir(parents=True, exist_ok=True)
        shutil.copy(profiles_dir() / "qwen3-30b-a3b" / "config.json", snap / "config.json")
        return str(snap / "config.json")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", flaky)
    code, _out, err = cli("resolve", "-s", MINI_E2, "-a", "sm100", "-m", "someorg/Qwen3-Mirror")
    assert code == 2 and "cannot download hf_quant_config.json" in err and err.count("\n") == 1


@pytest.mark.real_release
def test_diff_takes_sglang_config_yaml_like_the_target_commands(tmp_path):
    """#20: `diff --config FILE` reads SGLang's YAML server arguments into both releases,
    each merging it with its own code."""
    cfg = tmp_path / "server.yaml"
    cfg.write_text("tp-size: 8\nmoe-runner-backend: flashinfer_cutlass\n")
    code, out, err = cli("diff", "--from", "sglang==0.5.5", "--to", "sglang==0.5.23", "-a", "sm120",
                         "-m", "qwen3.5-397b-a17b-nvfp4", "--config", str(cfg), "--format", "json", "--fail-on", "never")
    assert code in (0, 3), err
    dep = json.loads(out)["deployments"][0]
    assert dep["deployment"]["launch"].endswith(f"--config {cfg}")
    for side in ("from", "to"):
        assert dep[side]["flags"] == {"tp_size": 8, "moe_runner_backend": "flashinfer_cutlass"}, side
    code, _out, err = cli("diff", "--from", "sglang==0.5.5", "--to", "sglang==0.5.23", "--deployment", str(cfg),
                          "--config", str(cfg))
    assert code == 2 and "--config cannot be combined with --deployment" in err
