"""The built wheel carries everything the tool reads at run time (issue: a wheel without
`rules/` or the bundled profiles installs, then fails for every user)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from clirun import cli

from sglang_audit import shipped

REPO = Path(__file__).resolve().parent.parent


def _expected_members() -> set[str]:
    """What the repository ships: every TOML fact file and known-bad rule under rules/, and every
    bundled profile's files under fixtures/models/ — read from the tree, so a file added there
    and forgotten by the build fails here."""
    rules = REPO / "rules"
    members = {f"sglang_audit/_rules/{p.relative_to(rules).as_posix()}"
               for p in [*rules.glob("*.toml"), *(rules / "known-bad").glob("*.yaml"), *(rules / "perf").glob("*.yaml")]}
    models = REPO / "fixtures" / "models"
    members |= {f"sglang_audit/_profiles/{p.relative_to(models).as_posix()}"
                for p in models.glob("*/*") if p.is_file()}
    return members


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (whl,) = out.glob("sglang_audit-*.whl")
    return whl


def test_wheel_carries_every_rule_fact_file_and_profile(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = _expected_members()
    assert any(m.endswith("known-bad/SGA101-fp4-gemm-cutlass-sm12x-nan.yaml") for m in expected)
    assert "sglang_audit/_profiles/qwen3.5-397b-a17b-nvfp4/config.json" in expected
    missing = sorted(expected - names)
    assert not missing, f"missing from {wheel.name}: {missing}"
    assert "sglang_audit/render/templates/report.html.j2" in names
    # nothing of the checkout's tests or fixture checkouts rides along
    assert not [n for n in names if n.startswith(("tests/", "fixtures/", "rules/"))]


def test_checkout_reads_the_repository_data() -> None:
    assert shipped.rules_dir() == REPO / "rules"
    assert shipped.profiles_dir() == REPO / "fixtures" / "models"
    assert "(checkout)" in shipped.origin()


def test_version_names_the_rules_origin() -> None:
    code, out, _ = cli("--version")
    assert code == 0
    assert out.startswith("sglang-audit ") and f"rules from {REPO / 'rules'} (checkout)" in out


def test_python_dash_m_runs_the_same_command_line(tmp_path: Path) -> None:
    # `python -m sglang_audit` is how a user without the script on PATH runs the tool
    proc = subprocess.run([sys.executable, "-m", "sglang_audit", "--version"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("sglang-audit ") and "rules from" in proc.stdout
    usage = subprocess.run([sys.executable, "-m", "sglang_audit", "resolve", "--help"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert usage.stdout.startswith("Usage: sglang-audit resolve ")


def test_installed_layout_is_preferred(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed package (data mapped inside it) never reads a checkout beside it."""
    pkg = tmp_path / "site" / "sglang_audit"
    (pkg / "_rules" / "known-bad").mkdir(parents=True)
    (pkg / "_profiles" / "m").mkdir(parents=True)
    (tmp_path / "site" / "rules").mkdir()  # a stray top-level rules/ in site-packages
    monkeypatch.setattr(shipped, "package_dir", lambda: pkg)
    shipped._root.cache_clear()
    try:
        assert shipped.rules_dir() == pkg / "_rules"
        assert shipped.profiles_dir() == pkg / "_profiles"
        assert "(package)" in shipped.origin()
    finally:
        shipped._root.cache_clear()


def test_missing_data_is_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "site" / "sglang_audit"
    pkg.mkdir(parents=True)
    (tmp_path / "site" / "rules").mkdir()  # not ours: no sglang-audit pyproject.toml beside it
    monkeypatch.setattr(shipped, "package_dir", lambda: pkg)
    shipped._root.cache_clear()
    try:
        with pytest.raises(shipped.ShippedDataMissing, match="shipped rules are missing from this installation"):
            shipped.rules_dir()
        code, _, err = cli("--version")
        assert code == 2 and "reinstall the package" in err and "Traceback" not in err
    finally:
        shipped._root.cache_clear()
