"""Golden outputs: what the commands print for a fixed set of real releases and targets.

They pin behaviour across refactors (issue #21: every structural step must leave them
byte-identical). A change that is meant to alter an answer regenerates them and the diff is
reviewed with the change:

    SGA_UPDATE_GOLDEN=1 .venv/bin/pytest -q tests/test_golden.py

Machine-specific paths (the repository, the user cache dir) are replaced by `<repo>` and
`<cache>`; nothing else is normalised.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_audit.cachedir import cache_root

GOLDEN = Path(__file__).resolve().parent / "golden"
REPO = Path(__file__).resolve().parent.parent
QWEN35 = ["-a", "sm120", "-m", "qwen3.5-397b-a17b-nvfp4", "--set", "tp_size=8"]
NEXTN = ["--set", "speculative_algorithm=NEXTN", "--set", "disable_radix_cache=true"]

# name -> command line. One per code structure (docs/eras.md) for resolve, and each output
# format of check, explain, diff and report once.
CASES: dict[str, list[str]] = {
    "resolve-0.4.10-sm90-qwen3-30b.json": ["resolve", "-s", "sglang==0.4.10", "-a", "sm90", "-m", "qwen3-30b-a3b", "--format", "json"],
    "resolve-0.5.5-sm100-deepseek-r1.json": ["resolve", "-s", "sglang==0.5.5", "-a", "sm100", "-m", "deepseek-r1-nvfp4", "--set", "tp_size=8", "--format", "json"],
    "resolve-0.5.10-sm120-qwen35-nextn.json": ["resolve", "-s", "sglang==0.5.10", *QWEN35, *NEXTN, "--format", "json"],
    "resolve-0.5.10-sm120-qwen35-nextn.txt": ["resolve", "-s", "sglang==0.5.10", *QWEN35, *NEXTN, "-v"],
    "resolve-0.5.13-sm120-qwen35.json": ["resolve", "-s", "sglang==0.5.13", *QWEN35, "--format", "json"],
    "resolve-0.5.15-sm100-gpt-oss.json": ["resolve", "-s", "sglang==0.5.15", "-a", "sm100", "-m", "gpt-oss-120b", "--set", "tp_size=8", "--format", "json"],
    "resolve-0.5.16-sm120-qwen35.json": ["resolve", "-s", "sglang==0.5.16", *QWEN35, "--format", "json"],
    "resolve-0.5.19-sm120-qwen35.json": ["resolve", "-s", "sglang==0.5.19", *QWEN35, "--format", "json"],
    "resolve-0.5.23-sm120-qwen35-modelopt.json": ["resolve", "-s", "sglang==0.5.23", *QWEN35, "--set", "quantization=modelopt_fp4", "--format", "json"],
    "resolve-0.5.23-sm100-deepseek-r1.json": ["resolve", "-s", "sglang==0.5.23", "-a", "sm100", "-m", "deepseek-r1-nvfp4", "--set", "tp_size=8", "--format", "json"],
    "check-0.5.13-sm120-qwen35.json": ["check", "-s", "sglang==0.5.13", *QWEN35, "--format", "json"],
    "check-0.5.13-sm120-qwen35.sarif": ["check", "-s", "sglang==0.5.13", *QWEN35, "--format", "sarif"],
    "check-0.5.16-sm120-qwen35.txt": ["check", "-s", "sglang==0.5.16", *QWEN35],
    "explain-0.5.10-sm120-fp4.json": ["explain", "fp4_gemm_runner_backend", "-s", "sglang==0.5.10", *QWEN35, "--format", "json"],
    "explain-0.5.23-sm120-moe.txt": ["explain", "moe_runner_backend", "-s", "sglang==0.5.23", *QWEN35, "--set", "quantization=modelopt_fp4"],
    "diff-0.5.12-0.5.13-sm120-qwen35.json": ["diff", "--from", "sglang==0.5.12", "--to", "sglang==0.5.13", *QWEN35, "--format", "json"],
    "report-0.5.13-sm120-qwen35.html": ["report", "-s", "sglang==0.5.13", "--from", "sglang==0.5.12", *QWEN35, "--no-choices", "-o", "{out}"],
    # the Recommendation section (issue 19): MTP on SM120, the draft runner forced on its own
    "report-0.5.10-sm120-qwen35-nextn-recommend.html": ["report", "-s", "sglang==0.5.10", *QWEN35, *NEXTN, "--no-choices",
                                                        "--recommend", "-o", "{out}"],
}


def _normalise(text: str) -> str:
    text = text.replace(str(cache_root()), "<cache>")
    return text.replace(str(REPO), "<repo>")


def _run(name: str, tmp_path: Path) -> str:
    args = CASES[name]
    out_file = tmp_path / name
    args = [a.replace("{out}", str(out_file)) for a in args]
    # a fresh process with a fixed hash seed: a release that builds a flag's choices from a
    # set has them in hash order, in SGLang as in the evaluator, so in-process runs differ
    proc = subprocess.run([sys.executable, "-m", "sglang_audit.cli.main", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONHASHSEED": "0"}, timeout=900)
    code, out, err = proc.returncode, proc.stdout, proc.stderr
    assert code in (0, 1, 3), f"{name}: exit {code}: {err[-500:]}"
    if "{out}" in CASES[name]:
        out = out_file.read_text(encoding="utf-8")
    # the exit code first (a golden output is what the command said, code included)
    return _normalise(f"# exit {code}\n{out}")


@pytest.mark.real_release
@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str, tmp_path: Path) -> None:
    got = _run(name, tmp_path)
    path = GOLDEN / name
    if os.environ.get("SGA_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(got, encoding="utf-8")
        return
    assert path.is_file(), f"no golden output {path.name}: run with SGA_UPDATE_GOLDEN=1 and review it"
    want = path.read_text(encoding="utf-8")
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "golden/" + name, "now", n=2))
        pytest.fail(f"{name} differs from its golden output:\n{diff[:6000]}")
