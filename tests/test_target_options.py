"""One declaration of the target options and one TargetOptions type for every command taking a
target: the same spelling and help everywhere, and --deployment refusing what it describes
in report and diff alike."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from clirun import cli

from sglang_audit.cli.common import DEPLOYMENT_OPTIONS, TargetOptions, make_request
from sglang_audit.cli.main import main
from sglang_audit.inputs.device import DEFAULT_CUDA

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"
TARGET_COMMANDS = ("resolve", "explain", "check", "report", "recommend", "diff", "matrix", "guards", "graph")


def _param(command: str, name: str) -> click.Parameter | None:
    cmd = main.get_command(click.Context(main), command)  # commands load lazily
    assert cmd is not None, command
    return next((p for p in cmd.params if p.name == name), None)


@pytest.mark.parametrize("name", ["cuda", "env", "sets", "no_cache"])
def test_a_shared_option_is_the_same_on_every_command_that_has_it(name: str) -> None:
    found = {c: _param(c, name) for c in TARGET_COMMANDS}
    declared = {c: p for c, p in found.items() if p is not None}
    assert len(declared) >= 4, found
    spellings = {tuple(p.opts) for p in declared.values()}
    helps = {getattr(p, "help", None) for p in declared.values()}
    assert len(spellings) == 1 and len(helps) == 1, (spellings, helps)


def test_the_cuda_default_is_applied_once_and_taught_in_help() -> None:
    assert all(_param(c, "cuda").default is None for c in TARGET_COMMANDS if _param(c, "cuda") is not None)
    assert TargetOptions().cuda_version == DEFAULT_CUDA and TargetOptions(cuda="13.0").cuda_version == "13.0"
    code, out, _ = cli("resolve", "--help")
    assert code == 0 and f"[default: {DEFAULT_CUDA}]" in out


def test_target_is_frozen_and_makes_the_request() -> None:
    kw = {"source": "s", "arch": "sm120", "cuda": None, "cudnn": None, "model": "m", "sets": ("a=1",), "launch": None,
          "config": None, "env": ("X=1",), "with_packages": (), "without_packages": ("flashinfer",),
          "flashinfer_source": "none", "no_cache": True, "fields": ("tp_size",), "all_fields": False}
    target = TargetOptions.of(kw)
    with pytest.raises(AttributeError):
        target.arch = "sm90"  # type: ignore[misc]
    req = make_request(kw)
    assert (req.arch, req.cuda, req.sets, req.env, req.without_packages, req.use_cache, req.fields) == \
        ("sm120", DEFAULT_CUDA, ["a=1"], ["X=1"], ["flashinfer"], False, ("tp_size",))
    assert kw["arch"] == "sm120"  # reading the options leaves the command's arguments alone


@pytest.mark.parametrize("name", DEPLOYMENT_OPTIONS)
def test_refuse_with_deployment_names_the_option(name: str) -> None:
    value: object = ("x",) if name in ("sets", "env") else "x"
    with pytest.raises(click.UsageError, match=f"--{'set' if name == 'sets' else name} cannot be combined with --deployment"):
        TargetOptions(**{name: value}).refuse_with_deployment()  # type: ignore[arg-type]


@pytest.mark.parametrize("command", ["report", "diff"])
def test_report_and_diff_both_refuse_cuda_with_a_deployment_file(command: str, tmp_path: Path) -> None:
    dep = tmp_path / "d.yaml"
    dep.write_text("deployments:\n  - name: one\n    arch: sm120\n    model: deepseek-r1-nvfp4\n", encoding="utf-8")
    args = ["report", "-s", MINI_E2, "-o", tmp_path / "r.html"] if command == "report" else \
        ["diff", "--from", MINI_E2, "--to", MINI_E2]
    code, _out, err = cli(*args, "--deployment", dep, "--cuda", "13.0")
    assert code == 2 and "--cuda cannot be combined with --deployment" in err
