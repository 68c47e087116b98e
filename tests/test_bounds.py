"""Bounded work (issue 10, item 4): pathological code in the analysed release ends in
``unknown (analysis bound reached: ...)`` and exit 3, within a minute, never a hang.

One checkout (mini_e2 with a ``_pathological()`` call first thing in
``ServerArgs.__post_init__``) picks its pathology from ``--env PATHOLOGY=...`` (the
environment is an input the tool knows, so each run takes exactly one branch).  Each
case runs in its own process with a 60 s timeout, with the default bounds (the command
line has no option to change them), so a regression shows as a failure, not a hang.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"
TIMEOUT = 60

# `if PATHOLOGY == name:` blocks of `_pathological(self)`; the `numpy.*` reads are values
# from outside the analysed tree, i.e. unknown (os.environ would not do: unset variables
# are known to be unset).
PATHOLOGIES: dict[str, str] = {
    "recursion": """
        def down(n):
            return down(n + 1)
        down(0)""",
    "mutual_recursion": """
        def ping(n):
            return pong(n)
        def pong(n):
            return ping(n + 1)
        ping(0)""",
    "lambda_recursion": """
        f = lambda g: g(g)
        f(f)""",
    "range_loop": """
        total = 0
        for i in range(10**9):
            total += i""",
    "while_true": """
        while True:
            pass""",
    "exception_loop": """
        while True:
            try:
                raise ValueError("again")
            except ValueError:
                pass""",
    "exponential_branching": "\n".join(
        f"""
        if numpy.flag{i} == 1:
            self.tp_size += {i}"""
        for i in range(40)
    ),
    "list_multiplication": """
        self.big = [0] * 10**9""",
    "string_multiplication": """
        self.big = "x" * 10**9""",
    "list_of_range": """
        self.big = list(range(10**9))""",
    "huge_power": """
        self.big = 10 ** 10 ** 10""",
    "deep_data": """
        a = []
        for i in range(150000):
            a = [a]
        self.big = str(a)""",
    # --- result-size growth (bounded before the allocation) ---
    "nested_loops": """
        total = 0
        for i in range(10**4):
            for j in range(10**4):
                total += 1""",
    "list_doubling": """
        a = [0]
        for i in range(60):
            a = a + a""",
    "pow_builtin": """
        self.big = pow(10, 10**10)""",
    "list_extend": """
        a = []
        for i in range(1000):
            a.extend(range(10**7))""",
    "str_replace_growth": """
        s = "xx"
        for i in range(60):
            s = s.replace("x", "xx")""",
    "len_of_huge_range": """
        self.big = len(range(10**30))""",
    "invalid_regex": '''
        import re
        if re.match("(", "x"):
            self.moe_runner_backend = "triton"''',
    # --- issue #23: work charged by size, memory by the size of values built ---
    "catastrophic_regex": '''
        import re
        if re.match("(a+)+$", "a" * 40 + "b"):
            self.moe_runner_backend = "triton"''',
    "bigint_growth": """
        x = 3
        for i in range(100):
            x = x * x
        self.big = x""",
    "in_huge_list": """
        a = list(range(10**6))
        for i in range(10**5):
            if -1 in a:
                self.big = 1""",
    "count_huge_list": """
        a = list(range(10**6))
        for i in range(10**5):
            self.big = a.count(-1)""",
    "sorted_huge_list": """
        a = list(range(10**6))
        for i in range(10**5):
            self.big = sorted(a)""",
    "str_of_shared_list": """
        a = [0]
        for i in range(60):
            a = [a, a]
        self.big = str(a)""",
    "eq_of_shared_lists": """
        a = [0]
        b = [0]
        for i in range(60):
            a = [a, a]
            b = [b, b]
        self.big = a == b""",
    "percent_width": """
        self.big = "%*d" % (10**9, 1)""",
    "format_width": """
        self.big = "{:>1000000000}".format(1)""",
    "fstring_width": '''
        w = 10**9
        self.big = f"{1:>{w}}"''',
    "expandtabs": """
        self.big = "a\tb".expandtabs(10**9)""",
    "class_chain": "\n        class C0: pass" + "".join(f"\n        class C{i}(C{i - 1}): pass" for i in range(1, 5000)) + "\n        self.big = C4999.__mro__",
}


def _pathological_source() -> str:
    lines = ["import os", "import numpy", "", "", "def _pathological(self):",
             '    PATHOLOGY = os.environ.get("PATHOLOGY")']
    for name, body in PATHOLOGIES.items():
        lines.append(f'    if PATHOLOGY == "{name}":')
        lines.extend("    " + ln[4:] if ln.strip() else "" for ln in body.strip("\n").splitlines())
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def pathological(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bounds") / "checkout"
    shutil.copytree(MINI_E2, root)
    server_args = root / "python" / "sglang" / "srt" / "server_args.py"
    text = server_args.read_text()
    text = text.replace("@dataclasses.dataclass\nclass ServerArgs:",
                        _pathological_source() + "\n\n@dataclasses.dataclass\nclass ServerArgs:", 1)
    text = text.replace("    def __post_init__(self):\n", "    def __post_init__(self):\n        _pathological(self)\n", 1)
    assert "_pathological(self)\n" in text
    server_args.write_text(text)
    return root


def resolve(root: Path, pathology: str, cache: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    cmd = [sys.executable, "-m", "sglang_audit.cli.main", "resolve", "-s", str(root), "-a", "sm120",
           "-m", "deepseek-r1-nvfp4", "--env", f"PATHOLOGY={pathology}", "--format", "json"]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT,
                          env={**os.environ, "SGLANG_AUDIT_CACHE_DIR": str(cache)})
    return proc, time.monotonic() - start


def assert_bound_reached(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    moe = json.loads(proc.stdout)["settings"]["moe_runner_backend"]
    assert moe["status"] == "unknown"
    reason = moe["config"]["unknown"]
    assert "analysis bound reached" in reason, reason
    return reason


@pytest.mark.parametrize(
    "pathology, detail",
    [
        ("recursion", "call depth over 150"),
        ("mutual_recursion", "call depth over 150"),
        ("lambda_recursion", "call depth over 150"),
        ("range_loop", "sequence too long"),
        ("while_true", "ran 200001 times"),
        ("exception_loop", "ran 200001 times"),
        ("exponential_branching", "paths"),
        ("list_multiplication", "sequence too large"),
        ("string_multiplication", "sequence too large"),
        ("list_of_range", "sequence too long"),
        ("huge_power", "exponent too large"),
        ("deep_data", "recursion too deep"),
        ("nested_loops", "steps"),
        ("list_doubling", "sequence too large"),
        ("pow_builtin", "exponent too large"),
        ("list_extend", "sequence too large"),
        ("str_replace_growth", "sequence too large"),
        # issue #23
        ("catastrophic_regex", "may backtrack without end"),
        ("bigint_growth", "integer too large"),
        ("in_huge_list", "work on large values"),
        ("count_huge_list", "work on large values"),
        ("sorted_huge_list", "work on large values"),
        ("str_of_shared_list", "work on large values"),
        ("eq_of_shared_lists", "work on large values"),
        ("percent_width", "format width too large"),
        ("format_width", "format width too large"),
        ("fstring_width", "format width too large"),
        ("expandtabs", "sequence too large"),
        ("class_chain", "class hierarchy deeper than 200"),
    ],
)
def test_pathological_code_is_bounded(pathology: str, detail: str, pathological: Path, isolated_cache: Path) -> None:
    proc, elapsed = resolve(pathological, pathology, isolated_cache)
    reason = assert_bound_reached(proc)
    # on a loaded machine a slow pathology may meet the CPU-time budget before its own
    # bound: either is the bounded, honest answer
    assert detail in reason or "CPU-time budget" in reason, reason
    assert elapsed < TIMEOUT


def test_unknown_branching_is_cut_at_the_path_bound(pathological: Path, isolated_cache: Path) -> None:
    """40 independent unknown conditions would be 2**40 paths: exploration stops at the
    resolver's path bound and says so, instead of pretending the first paths are all."""
    proc, _ = resolve(pathological, "exponential_branching", isolated_cache)
    data = json.loads(proc.stdout)
    assert data["paths"] <= 24
    assert any("analysis bound reached: more than 24 paths" in note for note in data["analysis_notes"])
    assert "numpy.flag0" in data["settings"]["moe_runner_backend"]["config"]["unknown"]


def test_len_of_huge_range(pathological: Path, isolated_cache: Path) -> None:
    proc, _ = resolve(pathological, "len_of_huge_range", isolated_cache)
    assert proc.returncode == 3, proc.stderr


def test_an_invalid_regex_is_unknown_not_an_internal_error(pathological: Path, isolated_cache: Path) -> None:
    proc, _ = resolve(pathological, "invalid_regex", isolated_cache)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert proc.returncode == 3, proc.stderr[-2000:]
    moe = json.loads(proc.stdout)["settings"]["moe_runner_backend"]
    assert moe["status"] == "unknown"
    assert "invalid regular expression '('" in json.dumps(moe)


def test_the_wall_clock_budget_ends_a_resolution_and_is_not_cached(pathological: Path, isolated_cache: Path) -> None:
    """The last-resort bound: a budget of 0 s stops the first path after 1,024 steps; the
    answer depends on the machine, so it is never cached."""
    from sglang_audit.evaluate.interpreter import Bounds
    from sglang_audit.frontend.parse import SourceCache
    from sglang_audit.resolve.pipeline import Request, prepare
    from sglang_audit.resolve.resolver import Resolver
    from sglang_audit.resolve.resultcache import ResultCache

    cache = SourceCache()
    target = prepare(Request(source=str(pathological), arch="sm120", model="deepseek-r1-nvfp4",
                             env=["PATHOLOGY=nested_loops"]), cache).target
    res = Resolver(target, cache, bounds=Bounds(cpu_seconds=0.0)).resolve()
    moe = res.settings["moe_runner_backend"]
    assert moe.status == "unknown"
    assert "CPU-time budget of 0 s per resolution" in moe.config.reason
    results = ResultCache()
    results.put("ab" * 32, res)
    assert results.get("ab" * 32) is None


@pytest.mark.real_release
def test_a_config_json_with_300000_architectures_is_bounded(release, tmp_path: Path) -> None:
    """Issue #23: a 13 MB config.json (under the 16 MB cap, so it is read) whose
    `architectures` lists 300,000 names; 0.5.10's ModelConfig walks that list. The work is
    charged by the list's length: unknown naming the line, exit 3, never a hang."""
    tree = release("0.5.10")
    model = tmp_path / "big"
    shutil.copytree(ROOT / "fixtures" / "models" / "deepseek-r1-nvfp4", model)
    data = json.loads((model / "config.json").read_text())
    data["architectures"] += [f"Arch{i:06d}LongNameForCausalLanguageModel" for i in range(300_000)]
    (model / "config.json").write_text(json.dumps(data))
    assert (model / "config.json").stat().st_size > 11 * 1024 * 1024
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_audit.cli.main", "resolve", "-s", str(tree.package_dir.parent), "-a", "sm120",
         "-m", str(model), "--no-cache", "--format", "json"],
        capture_output=True, text=True, timeout=4 * TIMEOUT, cwd=ROOT,
        env={**os.environ, "SGLANG_AUDIT_FLASHINFER_SOURCE": "none"},
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    moe = json.loads(proc.stdout)["settings"]["moe_runner_backend"]
    assert moe["status"] == "unknown"
    assert "analysis bound reached" in json.dumps(moe) and "sglang/srt/configs/model_config.py" in json.dumps(moe)
