"""Determinism (issue 10, item 5): the same inputs give byte-identical output (JSON,
SARIF, HTML, text) across processes with PYTHONHASHSEED 0 and 1, a cold and a warm
parse cache, no cache at all, and one or several matrix workers.

Every run is a real process, so string hashing (set and dict-of-set iteration order)
really differs between the two seeds; timestamps appear only where asked for
(``report --timestamp``, not used here).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = str(ROOT / "fixtures" / "checkouts" / "mini_e2")
TIMEOUT = 600


def run_cli(args: list[str], seed: int, cache: Path | None = None) -> bytes:
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_AUDIT_DEBUG"}
    env["PYTHONHASHSEED"] = str(seed)
    if cache is not None:
        env["SGLANG_AUDIT_CACHE_DIR"] = str(cache)
    proc = subprocess.run([sys.executable, "-m", "sglang_audit.cli.main", *args], capture_output=True,
                          timeout=TIMEOUT, env=env, cwd=ROOT)
    assert proc.returncode in (0, 1, 3), proc.stderr.decode(errors="replace")[-2000:]
    assert proc.stdout
    return proc.stdout


TARGET = ["-s", MINI_E2, "-a", "sm120", "-m", "deepseek-r1-nvfp4"]


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["resolve", *TARGET, "--set", "tp_size=8", "--format", "json"], id="resolve-json"),
        pytest.param(["resolve", *TARGET, "--env", "SGLANG_FIXTURE_FORCE_TRITON=1", "-v"], id="resolve-text"),
        pytest.param(["explain", "fp4_gemm_runner_backend", *TARGET, "--format", "json"], id="explain-json"),
        pytest.param(["check", *TARGET, "--format", "sarif"], id="check-sarif"),
        pytest.param(["graph", "-s", MINI_E2], id="graph-json"),
        pytest.param(["guards", "-s", MINI_E2, "-a", "sm100", "--format", "json"], id="guards-json"),
        pytest.param(["diff", "--from", MINI_E2, "--to", MINI_E2, "-a", "sm100", "-m", "deepseek-r1-nvfp4",
                      "--format", "json"], id="diff-json"),
        pytest.param(["report", *TARGET, "--from", MINI_E2, "-o", "-"], id="report-html"),
    ],
)
def test_byte_identical_across_hash_seeds_and_cache_states(args: list[str], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold = run_cli(args, seed=0, cache=cache)  # parses every file (cold IR cache)
    warm = run_cli(args, seed=1, cache=cache)  # reads the IR pickled by the first run
    assert cold == warm


def test_resolve_without_any_cache_is_identical(tmp_path: Path) -> None:
    args = ["resolve", *TARGET, "--format", "json"]
    assert run_cli(args, seed=0, cache=tmp_path / "cache") == run_cli([*args, "--no-cache"], seed=1)


def test_matrix_identical_whatever_the_parallelism(tmp_path: Path) -> None:
    args = ["matrix", "-s", MINI_E2, "-a", "sm100,sm120", "-m", "deepseek-r1-nvfp4,qwen3-30b-a3b",
            "--flags-set", "none=", "--flags-set", "cutlass=moe_runner_backend=flashinfer_cutlass",
            "--format", "json"]
    one = run_cli([*args, "-j", "1"], seed=0, cache=tmp_path / "cache")
    two = run_cli([*args, "-j", "2"], seed=1, cache=tmp_path / "cache")
    assert one == two


@pytest.mark.real_release
def test_real_release_resolve_json_identical(release) -> None:
    """0.5.10, the README's deployment: the user cache dir (as the `release` fixture uses)."""
    release("0.5.10")  # downloaded and extracted once, outside the timed runs
    args = ["resolve", "-s", "sglang==0.5.10", "-a", "sm120", "-m", "qwen3.5-397b-a17b-nvfp4",
            "--set", "tp_size=8", "--set", "speculative_algorithm=NEXTN", "--set", "disable_radix_cache=true",
            "--format", "json"]
    assert run_cli(args, seed=0) == run_cli(args, seed=1)


SET_MESSAGE = '''
import sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from test_evaluate import _interp
interp, mod = _interp(Path(tempfile.mkdtemp()), """
SUPPORTED = {"flashinfer", "trtllm_mha", "triton", "fa3", "fa4", "aiter"}
MSG = f"Only {SUPPORTED} backends are supported; got {[SUPPORTED, ('a', 1)]!r}"
""")
print(mod.globals["MSG"])
print(interp.to_str({"k": {"z", "y", "x"}}), interp.repr_of(frozenset({"q", "p", "r"})))
'''


def test_a_message_built_from_a_set_of_strings_reads_the_same_under_every_hash_seed() -> None:
    # SGLang builds messages from sets (0.5.23's attention registry: f"Only {SUPPORTED} backends
    # ..."): CPython lists a set of strings in an order that changes with the hash seed, so the
    # tool's text (explain's notes, check's findings) changed from run to run
    outs = []
    for seed in (0, 1, 2, 3):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        proc = subprocess.run([sys.executable, "-c", SET_MESSAGE, str(ROOT / "tests")], capture_output=True,
                              text=True, timeout=TIMEOUT, env=env, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append(proc.stdout)
    assert len(set(outs)) == 1
    assert outs[0].splitlines() == [
        "Only {'aiter', 'fa3', 'fa4', 'flashinfer', 'triton', 'trtllm_mha'} backends are supported; got "
        "[{'aiter', 'fa3', 'fa4', 'flashinfer', 'triton', 'trtllm_mha'}, ('a', 1)]",
        "{'k': {'x', 'y', 'z'}} frozenset({'p', 'q', 'r'})",
    ]
