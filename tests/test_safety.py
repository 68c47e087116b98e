"""The analysed code is never imported, executed or eval'ed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from click.testing import CliRunner

from sglang_audit.cli import main

PACKAGE = Path(__file__).resolve().parent.parent / "sglang_audit"
MINI_E2 = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_e2"


def _canary_checkout(tmp_path: Path, marker: Path) -> Path:
    """The fixture checkout with a line in every module (and the build files) that would
    create the marker file if the module were imported, executed or eval'ed."""
    root = tmp_path / "canary"
    shutil.copytree(MINI_E2, root)
    payload = f"open({str(marker)!r}, 'w').write('executed')\n"
    for py in root.rglob("*.py"):
        py.write_text(payload + py.read_text())
    (root / "python" / "setup.py").write_text(payload)
    (root / "python" / "sglang" / "srt" / "evil.py").write_text(payload + "__import__('os').system('touch " + str(marker) + "')\n")
    return root


def test_resolve_never_executes_the_checkout(tmp_path, isolated_cache):
    marker = tmp_path / "MARKER"
    root = _canary_checkout(tmp_path, marker)
    for args in (
        ["-a", "sm100", "-m", "deepseek-r1-nvfp4"],
        ["-a", "sm120", "--launch", "python -m sglang.launch_server --model-path deepseek-r1-nvfp4 --tp 8"],
    ):
        result = CliRunner().invoke(main, ["resolve", "-s", str(root), *args, "--format", "json"])
        assert result.exit_code == 0, result.output
        assert '"moe_runner_backend"' in result.stdout
    assert not marker.exists()


def test_package_has_no_dynamic_execution():
    """No import/exec/eval/compile of analysed text anywhere in the package."""
    # bare builtins (the evaluator's own `self.eval(...)` method is not Python's eval)
    banned = re.compile(
        r"(?<![\w.])(exec|eval|compile|__import__)\s*\("
        r"|(import_module|literal_eval|runpy\.run_module|runpy\.run_path|spec_from_file_location|exec_module|SourceFileLoader|load_source)\s*\("
        r"|^\s*import\s+(runpy|imp)\b"
    )
    offenders = []
    for py in sorted(PACKAGE.rglob("*.py")):
        for no, line in enumerate(py.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            # string literals naming builtins the evaluator refuses are fine
            code = re.sub(r'"[^"]*"|\'[^\']*\'', '""', code)
            if banned.search(code):
                offenders.append(f"{py.name}:{no}: {line.strip()}")
    assert offenders == []
