"""The command line as a user runs it (the ``sglang-audit`` script, ``python -m sglang_audit``)
ends without freeing its heap (``cli/oneshot.run_and_exit``): what it printed must still
arrive whole through a pipe, and its exit code must be the command's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import cli

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"
TARGET = ["--source", str(MINI_E2), "--arch", "sm100", "--model", "deepseek-r1-nvfp4"]


def _script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # a pipe is block-buffered for a user; PYTHONUNBUFFERED (set on some machines, e.g. CI
    # images) would hide a missing flush
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["SGLANG_AUDIT_CACHE_DIR"] = str(tmp_path / "cache")
    env["SGLANG_AUDIT_FLASHINFER_SOURCE"] = "none"
    return subprocess.run([sys.executable, "-m", "sglang_audit", *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)


def test_the_whole_output_arrives_through_a_pipe(tmp_path: Path) -> None:
    args = ["resolve", *TARGET, "--all-fields", "--format", "json"]
    proc = _script(tmp_path, *args)
    code, out, _err = cli(*args)
    assert proc.returncode == code
    assert len(proc.stdout) > 8192  # more than one buffer: the tail is written by the last flush
    assert json.loads(proc.stdout) == json.loads(out)


@pytest.mark.parametrize("args, code, needle", [
    (["--version"], 0, ""),
    (["resolve", "--source", "/nonexistent/checkout", "--arch", "sm100"], 2, "/nonexistent/checkout"),
    (["resolve", "--arch", "sm100", "--model"], 2, "requires an argument"),  # click's usage error
])
def test_the_exit_code_and_message_are_the_commands(tmp_path: Path, args: list[str], code: int, needle: str) -> None:
    proc = _script(tmp_path, *args)
    assert proc.returncode == code, proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    if code == 0:
        assert proc.stdout.startswith("sglang-audit ")
