"""--driver (issue 43 item 3): the NVIDIA driver SGLang reads (get_nvidia_driver_version, NVML)
is the one given, or DEFAULT_DRIVER said to be assumed, on every command that takes --cuda."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from clirun import cli

from sglang_audit.cli.main import main
from sglang_audit.inputs.device import DEFAULT_DRIVER, parse_device

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"


def test_parse_driver() -> None:
    assert (parse_device("sm120").driver, parse_device("sm120").driver_source) == (DEFAULT_DRIVER, "assumed")
    given = parse_device("sm120", driver="595.45.04")
    assert (given.driver, given.driver_source) == ("595.45.04", "given with --driver")
    code, _, err = cli("resolve", "-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--driver", "new")
    assert code == 2 and "bad --driver 'new': expected the NVIDIA driver version nvidia-smi shows" in err


def test_every_command_with_cuda_has_driver() -> None:
    ctx = click.Context(main)
    with_cuda = []
    for name in main.list_commands(ctx):
        cmd = main.get_command(ctx, name)
        names = {p.name for p in getattr(cmd, "params", ())}
        if "cuda" in names:
            with_cuda.append(name)
            assert "driver" in names, name
    assert {"resolve", "check", "explain", "report", "recommend", "diff", "matrix", "guards"} <= set(with_cuda)


def test_the_output_says_assumed_or_given(isolated_cache) -> None:
    base = ("resolve", "-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp4")
    _, out, _ = cli(*base)
    assert f", driver {DEFAULT_DRIVER} (assumed; --driver sets it)" in out.splitlines()[1]
    _, out, _ = cli(*base, "--driver", "575.57.08")
    assert ", driver 575.57.08 (given with --driver)" in out.splitlines()[1]
    doc = json.loads(cli(*base, "--driver", "575.57.08", "--format", "json")[1])
    assert (doc["device"]["driver"], doc["device"]["driver_source"]) == ("575.57.08", "given with --driver")
    _, out, _ = cli("guards", "-s", MINI_E2, "-a", "sm120")
    assert f"driver {DEFAULT_DRIVER} assumed" in out.splitlines()[0]


def test_deployment_file_takes_driver(tmp_path) -> None:
    from sglang_audit.analyses.deployments import load_deployments

    path = tmp_path / "fleet.yaml"
    path.write_text("deployments:\n  - {name: a, arch: sm100, model: m, driver: '595.45.04'}\n  - {name: b, arch: sm100, model: m}\n")
    a, b = load_deployments(path)
    assert a.request(None, False).driver == "595.45.04" and b.request(None, False).driver is None
    path.write_text("deployments:\n  - {name: a, arch: sm100, model: m, driver: 'x'}\n")
    with pytest.raises(Exception, match="bad --driver 'x'"):
        load_deployments(path)
    code, _, err = cli("diff", "--from", MINI_E2, "--to", MINI_E2, "--deployment", path, "--driver", "595.45.04")
    assert code == 2 and "--driver cannot be combined with --deployment" in err


@pytest.mark.real_release
def test_the_driver_decides_gpt_oss_bf16_moe_on_blackwell(release, tmp_path) -> None:
    """0.5.19+ model_overrides/gpt_oss.py: a bf16 GPT-OSS on Blackwell with triton_kernels gets
    triton_kernel, but triton from driver 595 (the triton_kernels SIGSEGV)."""
    tree = release("0.5.23")
    config = json.loads((ROOT / "fixtures" / "models" / "gpt-oss-120b" / "config.json").read_text())
    config.pop("quantization_config", None)  # bf16: SGLang's quantization is None
    (tmp_path / "config.json").write_text(json.dumps(config))
    args = ("resolve", "-s", "sglang==0.5.23", "-a", "sm100", "-m", tmp_path, "--with", "triton_kernels", "--format", "json")
    source = (tree.package_dir.parent / "sglang/srt/arg_groups/model_overrides/gpt_oss.py").read_text().splitlines()

    def decided(doc: dict) -> tuple[str, str]:
        s = doc["settings"]["moe_runner_backend"]
        step = next(c for c in s["chain"] if c.get("role") == "decision")
        return s["config"], source[step["line"] - 1].strip()

    old = json.loads(cli(*args)[1])
    assert old["device"]["driver_source"] == "assumed" and old["device"]["driver"] == DEFAULT_DRIVER
    value, line = decided(old)
    assert value == "triton_kernel" and line == 'overrides["moe_runner_backend"] = "triton_kernel"'
    new = json.loads(cli(*args, "--driver", "595.45.04")[1])
    value, line = decided(new)
    assert value == "triton" and line == 'overrides["moe_runner_backend"] = "triton"'
    guard = source[next(i for i, ln in enumerate(source) if "get_nvidia_driver_version() >= (595,)" in ln)]
    assert "is_blackwell" in guard
