"""The analysed code is never imported, executed or eval'ed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sglang_audit.cli.main import main

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
    # a PEP 517 build would import this backend (building or installing the checkout)
    (root / "python" / "canary_backend.py").write_text(payload)
    pyproject = root / "python" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + '\n[build-system]\nrequires = []\n'
                         'build-backend = "canary_backend"\nbackend-path = ["."]\n')
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


# Every sub-command, run on the canary checkout (CANARY below is the checkout's path).
# A command not listed here is still run with the target options; the coverage test
# fails if that is not enough to run it, so a new command cannot skip the canary.
CANARY_RUNS: dict[str, list[list[str]]] = {
    "resolve": [["resolve", "-s", "CANARY", "-a", "sm100", "-m", "deepseek-r1-nvfp4", "--format", "json"],
                ["resolve", "-s", "CANARY", "-a", "sm120", "--set", "tp_size=8", "--launch",
                 "python -m sglang.launch_server --model-path deepseek-r1-nvfp4 --moe-runner-backend triton"]],
    "explain": [["explain", "moe_runner_backend", "-s", "CANARY", "-a", "sm100", "-m", "deepseek-r1-nvfp4"]],
    "check": [["check", "-s", "CANARY", "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--format", "sarif"]],
    "guards": [["guards", "-s", "CANARY", "-a", "sm120"]],
    "graph": [["graph", "-s", "CANARY"]],
    "diff": [["diff", "--from", "CANARY", "--to", "CANARY", "-a", "sm100", "-m", "deepseek-r1-nvfp4"]],
    "report": [["report", "-s", "CANARY", "--from", "CANARY", "-a", "sm120", "-m", "deepseek-r1-nvfp4",
                "-o", "OUT/report.html"]],
    # -j 2: the worker processes must not execute it either
    "matrix": [["matrix", "-s", "CANARY", "-a", "sm100,sm120", "-m", "deepseek-r1-nvfp4", "--flags-set", "none=",
                "-j", "2", "--format", "json"]],
    "cache": [["cache", "info"]],  # reads no source; listed so the coverage check passes
    "env": [["env", "-s", "CANARY", "--format", "json"]],  # reads the release's metadata only
}
GENERIC_RUN = ["-s", "CANARY", "-a", "sm120", "-m", "deepseek-r1-nvfp4"]


def _runs() -> list[tuple[str, list[str]]]:
    out = [(name, args) for name, runs in CANARY_RUNS.items() for args in runs]
    out += [(name, [name, *GENERIC_RUN]) for name in main.list_commands(click.Context(main)) if name not in CANARY_RUNS]
    return out


@pytest.mark.parametrize("name, args", _runs(), ids=lambda v: v if isinstance(v, str) else "")
def test_no_command_executes_the_checkout(name, args, tmp_path, isolated_cache):
    marker = tmp_path / "MARKER"
    root = _canary_checkout(tmp_path, marker)
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.replace("CANARY", str(root)).replace("OUT", str(out)) for a in args]
    result = CliRunner().invoke(main, argv)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    # 0, 1 (rejected/changed/findings) and 3 (unknown) all mean the command ran to the end
    assert result.exit_code in (0, 1, 3), (
        f"`{name}` did not run on the canary (exit {result.exit_code}: {result.stderr.strip()}); "
        f"add an invocation for it to CANARY_RUNS in tests/test_safety.py"
    )
    assert not marker.exists()
    assert name in main.list_commands(click.Context(main))  # a renamed or removed command: update CANARY_RUNS


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


# ---- the extracted sources are the archive's, and archives are bounded (issue #23) ------

from test_source import wheel_members, write_tar, write_zip  # noqa: E402

from sglang_audit.errors import SourceError  # noqa: E402
from sglang_audit.source.locate import locate_source  # noqa: E402


@pytest.mark.parametrize("settled", [False, True])
@pytest.mark.parametrize("attack", ["edit", "same_size_edit", "add", "remove", "symlink", "empty_dir"])
def test_an_edited_extracted_tree_is_extracted_again(tmp_path, isolated_cache, monkeypatch, attack, settled):
    import os

    import sglang_audit.cachedir as cachedir

    if settled:  # stamps older than the clock's tick: the copy's fingerprint is kept and tried first
        monkeypatch.setattr(cachedir, "RACY_NS", -10**12)
    whl = write_zip(tmp_path / "in" / "sglang-0.5.10-py3-none-any.whl", wheel_members())
    tree = locate_source(str(whl))
    server_args = tree.package_dir / "srt" / "server_args.py"
    original = server_args.read_bytes()
    if attack == "edit":
        server_args.write_bytes(original + b"EVIL = 1\n")
    elif attack == "same_size_edit":
        st = server_args.stat()
        server_args.write_bytes(original.replace(b"pass", b"PASS"))
        os.utime(server_args, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif attack == "add":
        (tree.package_dir / "srt" / "injected.py").write_text("x = 1\n")
    elif attack == "remove":
        (tree.package_dir / "__init__.py").unlink()
    elif attack == "empty_dir":
        # a directory answers the evaluator's path probes: it is content too
        (tree.package_dir / "srt" / "layers").mkdir()
    else:
        outside = tmp_path / "outside.py"
        outside.write_bytes(original)
        server_args.unlink()
        server_args.symlink_to(outside)
    messages: list[str] = []
    again = locate_source(str(whl), progress=messages.append)
    # (a server_args.py linked out of the tree is not even a package: extracted again too)
    assert any("differs from the archive" in m for m in messages) or attack == "symlink"
    assert any(m.startswith("extracting") for m in messages)
    assert (again.package_dir / "srt" / "server_args.py").read_bytes() == original
    assert not (again.package_dir / "srt" / "server_args.py").is_symlink()
    assert not (again.package_dir / "srt" / "injected.py").exists()
    assert (again.package_dir / "__init__.py").is_file()
    assert not (again.package_dir / "srt" / "layers").exists()
    # the re-extracted copy is the archive's again: the same content digest
    assert again.content_digest == tree.content_digest is not None


def test_an_untouched_extracted_tree_is_reused(tmp_path, isolated_cache):
    whl = write_zip(tmp_path / "in" / "sglang-0.5.10-py3-none-any.whl", wheel_members())
    first = locate_source(str(whl))
    inode = (first.package_dir / "srt" / "server_args.py").stat().st_ino
    messages: list[str] = []
    again = locate_source(str(whl), progress=messages.append)
    assert messages == []  # neither extracted nor re-extracted
    assert (again.package_dir / "srt" / "server_args.py").stat().st_ino == inode
    # the verified manifest stands for the tree's content (the result cache keys on it)
    assert again.content_digest == first.content_digest is not None
    other = write_zip(tmp_path / "in2" / "sglang-0.5.10-py3-none-any.whl",
                      {**wheel_members(), "sglang/srt/extra.py": b"y = 2\n"})
    assert locate_source(str(other)).content_digest not in (None, first.content_digest)


def test_a_tar_bomb_is_refused_by_its_ratio(tmp_path, isolated_cache):
    members = wheel_members()
    members["sglang/srt/zeros.py"] = b"\0" * (8 * 1024 * 1024)  # compresses ~1000:1
    sdist = write_tar(tmp_path / "in" / "sglang-0.5.10.tar.gz", members)
    assert sdist.stat().st_size < 100 * 1024
    with pytest.raises(SourceError, match=r"more than 100:1 uncompressed.*tar bomb"):
        locate_source(str(sdist))
    assert not list((isolated_cache / "sources").glob("*/sglang"))


# ---- "missing" is never "resolved"; unknowns are never a clean exit (issue #23) ---------

from clirun import cli  # noqa: E402

FP4_UTILS = ("python", "sglang", "srt", "layers", "quantization", "fp4_utils.py")
BASE = ["-a", "sm120", "-m", "deepseek-r1-nvfp4", "--no-cache"]


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(MINI_E2, root)
    return root


@pytest.mark.parametrize("what", ["initializer", "getter"])
def test_a_renamed_runtime_initialiser_is_unknown_not_the_config_value(tmp_path, isolated_cache, what):
    import json as _json

    root = _copy(tmp_path)
    fp4 = root.joinpath(*FP4_UTILS)
    name = "initialize_fp4_gemm_config" if what == "initializer" else "get_fp4_gemm_runner_backend"
    fp4.write_text(fp4.read_text().replace(f"def {name}(", f"def {name}_v2("))
    code, out, _ = cli("resolve", "-s", str(root), *BASE, "--format", "json")
    assert code == 3
    fp4_setting = _json.loads(out)["settings"]["fp4_gemm_runner_backend"]
    assert fp4_setting["status"] == "unknown"
    reason = fp4_setting["runtime"]["unknown"]
    assert f"{name} not found in sglang/srt/layers/quantization/fp4_utils.py" in reason
    # the original resolves the runtime value from the initialiser
    code, out, _ = cli("resolve", "-s", str(MINI_E2), *BASE, "--format", "json")
    assert _json.loads(out)["settings"]["fp4_gemm_runner_backend"]["runtime"] == "flashinfer_cudnn"


def test_a_renamed_runtime_initialiser_makes_check_undecided(tmp_path, isolated_cache):
    root = _copy(tmp_path)
    fp4 = root.joinpath(*FP4_UTILS)
    fp4.write_text(fp4.read_text().replace("def initialize_fp4_gemm_config(", "def initialize_fp4_gemm_config_v2("))
    code, out, _ = cli("check", "-s", str(root), *BASE)
    assert code == 3, out
    assert "SGA002" in out and "initialize_fp4_gemm_config not found" in out
    assert "no findings." not in out


def test_a_missing_initialiser_module_is_unknown(tmp_path, isolated_cache):
    import json as _json

    root = _copy(tmp_path)
    root.joinpath(*FP4_UTILS).rename(root.joinpath(*FP4_UTILS[:-1], "fp4_gemm.py"))
    code, out, _ = cli("resolve", "-s", str(root), *BASE, "--format", "json")
    assert code == 3
    reason = _json.loads(out)["settings"]["fp4_gemm_runner_backend"]["runtime"]["unknown"]
    assert "no module sglang.srt.layers.quantization.fp4_utils" in reason


SCHEDULER_OVERLAY = MINI_E2.parent / "scheduler_overlay" / "python"


def _serving_copy(tmp_path: Path) -> Path:
    """mini_e2 with the scheduler that runs the runtime initialisers: a serving tree, which
    must have them (mini_e2 alone is a partial tree without the MoE layer package)."""
    root = _copy(tmp_path)
    shutil.copytree(SCHEDULER_OVERLAY, root / "python", dirs_exist_ok=True)
    return root


def test_a_missing_whole_package_in_a_serving_tree_is_unknown(tmp_path, isolated_cache):
    import json as _json

    # the partial fixture (no scheduler, no layers/moe package): read as a release without
    # the MoE runtime layer, as before
    code, out, _ = cli("resolve", "-s", str(MINI_E2), *BASE, "--format", "json")
    assert code == 0
    assert _json.loads(out)["settings"]["moe_runner_backend"]["status"] == "resolved"
    # the same tree with its scheduler: the MoE initialiser's whole package is missing
    root = _serving_copy(tmp_path)
    code, out, _ = cli("resolve", "-s", str(root), *BASE, "--format", "json")
    assert code == 3
    moe = _json.loads(out)["settings"]["moe_runner_backend"]
    assert moe["status"] == "unknown"
    reason = moe["runtime"]["unknown"]
    assert "initialize_moe_config not found: no module sglang.srt.layers.moe.utils" in reason
    assert "its whole package sglang/srt/layers/moe/ is missing" in reason
    assert "sglang/srt/managers/scheduler.py" in reason
    # its MoE layer too (DeepSeek-R1 is an MoE model): unknown, never skipped
    assert "FusedMoE not found" in moe["layer"]["reason"]
    # the fp4 initialiser is there: still resolved from it
    assert _json.loads(out)["settings"]["fp4_gemm_runner_backend"]["runtime"] == "flashinfer_cudnn"
    code, out, _ = cli("check", "-s", str(root), *BASE)
    assert code == 3 and "SGA002" in out and "sglang/srt/layers/moe/ is missing" in out
    assert "no findings." not in out


def test_a_missing_quantization_package_in_a_serving_tree_is_unknown(tmp_path, isolated_cache):
    import json as _json

    root = _serving_copy(tmp_path)
    shutil.rmtree(root.joinpath(*FP4_UTILS[:-2]))  # sglang/srt/layers/ (quantization/ in it)
    code, out, _ = cli("resolve", "-s", str(root), *BASE, "--format", "json")
    assert code == 3
    fp4 = _json.loads(out)["settings"]["fp4_gemm_runner_backend"]
    assert fp4["status"] == "unknown"
    assert "no module sglang.srt.layers.quantization.fp4_utils" in fp4["runtime"]["unknown"]
    assert "its whole package sglang/srt/layers/quantization/ is missing" in fp4["runtime"]["unknown"]


def test_diff_to_a_tree_missing_a_package_says_unknown(tmp_path, isolated_cache):
    root = _serving_copy(tmp_path)
    code, out, _ = cli("diff", "--from", str(MINI_E2), "--to", str(root), *BASE)
    assert code == 3, out
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("moe_runner_backend ")]
    assert "UNKNOWN" in line, out
    assert "sglang/srt/layers/moe/ is missing" in out


@pytest.mark.real_release
def test_real_release_without_its_moe_package_is_unknown(release, tmp_path, isolated_cache):
    # a damaged 0.5.13 tree: the wheel's sources copied (Python files only) without
    # sglang/srt/layers/moe/; before, its settings came back resolved with exit 0
    src = release("0.5.13").package_dir
    root = tmp_path / "damaged"
    shutil.copytree(src, root / "sglang", ignore=lambda _d, names: [
        n for n in names if not (n.endswith(".py") or "." not in n)])
    shutil.rmtree(root / "sglang" / "srt" / "layers" / "moe")
    args = ["-s", str(root), "-a", "sm100", "-m", "deepseek-r1-nvfp4", "--no-cache"]
    code, out, _ = cli("check", *args)
    assert code == 3, out
    assert "SGA002" in out and "moe_runner_backend" in out
    assert "initialize_moe_config not found" in out and "sglang/srt/layers/moe/ is missing" in out
    code, out, _ = cli("resolve", *args, "--format", "json")
    import json as _json
    moe = _json.loads(out)["settings"]["moe_runner_backend"]
    assert code == 3 and moe["status"] == "unknown"
    assert moe["config"] == "flashinfer_trtllm"  # the config value is still known


def test_every_setting_unknown_is_never_exit_0(tmp_path, isolated_cache):
    # the config stage stops on every path (an iteration over a value the tool cannot
    # know); resolve and check both say so, and the reason names the file:line
    root = _copy(tmp_path)
    sa = root / "python" / "sglang" / "srt" / "server_args.py"
    text = sa.read_text()
    text = text.replace("    def __post_init__(self):\n",
                        "    def __post_init__(self):\n        import glob\n        found = sorted(glob.glob('/nonexistent-dir/*'))\n", 1)
    sa.write_text(text)
    line = text.splitlines().index("        found = sorted(glob.glob('/nonexistent-dir/*'))") + 1
    code, out, _ = cli("resolve", "-s", str(root), *BASE)
    assert code == 3
    assert f"sglang/srt/server_args.py:{line}" in out
    code, out, _ = cli("check", "-s", str(root), *BASE)
    assert code == 3 and "SGA002" in out and "no findings." not in out
    code, _out, _ = cli("check", "-s", str(root), *BASE, "--fail-on", "never")
    assert code == 0


def test_a_text_line_shows_an_unknown_reason_once(tmp_path, isolated_cache):
    root = _copy(tmp_path)
    fp4 = root.joinpath(*FP4_UTILS)
    fp4.write_text(fp4.read_text().replace("def initialize_fp4_gemm_config(", "def initialize_fp4_gemm_config_v2("))
    code, out, _ = cli("resolve", "-s", str(root), *BASE)
    (line,) = [ln for ln in out.splitlines() if ln.startswith("fp4_gemm_runner_backend")]
    assert line.count("initialize_fp4_gemm_config not found") == 1, line


def test_a_module_linked_out_of_the_tree_is_not_read(tmp_path, isolated_cache):
    import json as _json

    root = _copy(tmp_path)
    fp4 = root.joinpath(*FP4_UTILS)
    home = tmp_path / "home"
    home.mkdir()
    outside = home / "fp4_utils.py"
    # the same module, with a value only the linked file could produce
    outside.write_text(fp4.read_text().replace('backend = "flashinfer_cudnn"', 'backend = "from_home"'))
    fp4.unlink()
    fp4.symlink_to(outside)
    code, out, _ = cli("resolve", "-s", str(root), *BASE, "--format", "json")
    assert "from_home" not in out
    data = _json.loads(out)
    assert data["settings"]["fp4_gemm_runner_backend"]["status"] == "unknown"
    assert "leaves the source tree" in out
    assert code == 3


# ---- user files: regular files only, size caps, YAML aliases bounded (issue #23) --------

import os  # noqa: E402

from sglang_audit.analyses.diff import load_deployments  # noqa: E402
from sglang_audit.errors import InputError  # noqa: E402
from sglang_audit.userfiles import read_user_file  # noqa: E402


def _fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)  # no writer: reading it would block for ever
    return path


def test_a_fifo_as_location_is_refused_not_read(tmp_path, isolated_cache):
    fifo = _fifo(tmp_path, "launch.sh")
    code, _out, err = cli("check", "-s", str(MINI_E2), *BASE, "--location", str(fifo))
    assert code == 2 and "not a regular file" in err


def test_dev_zero_as_location_is_refused(tmp_path, isolated_cache):
    code, _out, err = cli("check", "-s", str(MINI_E2), *BASE, "--location", "/dev/zero")
    assert code == 2 and "not a regular file" in err


def test_a_fifo_as_deployment_file_is_refused(tmp_path):
    with pytest.raises(InputError, match="not a regular file"):
        load_deployments(_fifo(tmp_path, "deploy.yaml"))


def test_a_fifo_among_the_rules_is_refused(tmp_path, isolated_cache):
    rules = tmp_path / "rules"
    rules.mkdir()
    _fifo(rules, "SGA900.yaml")
    code, _out, err = cli("check", "-s", str(MINI_E2), *BASE, "--rules", str(rules))
    assert code == 2 and "not a regular file" in err


def test_a_yaml_alias_bomb_deployment_is_refused(tmp_path):
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    bomb += "".join(f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join(["*" + chr(97 + i)] * 9) + "]\n" for i in range(8))
    path = tmp_path / "deploy.yaml"
    path.write_text(bomb)
    assert len(bomb) < 1024
    with pytest.raises(InputError, match="aliases expand to more than"):
        load_deployments(path)


def test_yaml_without_anchors_reads_as_the_bounded_loader_reads_it():
    # safe_yaml_load takes libyaml's parser when no anchor can make an alias expand: the
    # shipped rules (the documents every check/explain/report loads) read the same, and a
    # document it refuses fails with the pure-Python loader's message, as before
    import yaml

    from sglang_audit.shipped import known_bad_dir
    from sglang_audit.userfiles import MAX_YAML_ALIASES, safe_yaml_load

    class Bounded(yaml.SafeLoader):
        pass

    texts = [p.read_text(encoding="utf-8") for p in sorted(known_bad_dir().glob("*.yaml"))]
    assert len(texts) > 50 and not any("&" in t for t in texts)
    for text in texts:
        assert safe_yaml_load(text) == yaml.load(text, Loader=Bounded)  # noqa: S506
    broken = "id: SGA900\ntitle: [unclosed\nseverity: error\n"
    with pytest.raises(yaml.YAMLError) as ours:
        safe_yaml_load(broken)
    with pytest.raises(yaml.YAMLError) as pure:
        yaml.load(broken, Loader=Bounded)  # noqa: S506
    assert str(ours.value) == str(pure.value)
    # an alias with its anchor still goes through the counting loader
    many = "a: &a 1\nb: [" + ",".join(["*a"] * (MAX_YAML_ALIASES + 1)) + "]\n"
    with pytest.raises(yaml.YAMLError, match="aliases"):
        safe_yaml_load(many)


def test_a_huge_user_file_is_not_read_whole(tmp_path):
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(3 * 1024**3)  # sparse: 3 GB that cost nothing to make
    from sglang_audit.userfiles import UserFileError

    with pytest.raises(UserFileError, match="larger than 16 MB"):
        read_user_file(big, "model file")


def test_a_huge_pyproject_beside_the_package_is_not_read(tmp_path, isolated_cache):
    root = _copy(tmp_path)
    pyproject = root / "python" / "pyproject.toml"
    with pyproject.open("r+b") as fh:
        fh.truncate(3 * 1024**3)
    code, out, _ = cli("resolve", "-s", str(root), *BASE)
    assert code in (0, 3) and "moe_runner_backend" in out


# ---- output a hostile tree cannot forge (issue #23) -------------------------------------

FORGED = "flashinfer_trtllm\\r\\x1b[2Kfp4_gemm_runner_backend  cudnn  (resolved)\\u202e"


def _forging_tree(tmp_path: Path) -> Path:
    root = _copy(tmp_path)
    sa = root / "python" / "sglang" / "srt" / "server_args.py"
    sa.write_text(sa.read_text().replace('self.moe_runner_backend = "flashinfer_trtllm"',
                                         f'self.moe_runner_backend = "{FORGED}"', 1))
    return root


def test_text_output_escapes_control_and_bidi_characters(tmp_path, isolated_cache):
    import subprocess
    import sys

    root = _forging_tree(tmp_path)
    # a real process and stdout (click strips ANSI escapes only from non-terminals)
    proc = subprocess.run([sys.executable, "-m", "sglang_audit.cli.main", "resolve", "-s", str(root),
                           "-a", "sm100", "-m", "deepseek-r1-nvfp4", "--no-cache"],
                          capture_output=True, text=True, timeout=120)
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("moe_runner_backend")]
    assert "\r" not in proc.stdout and "\u202e" not in proc.stdout
    assert "\\x0d" in line and "\\u202e" in line  # shown, escaped, on the setting's own line


def test_json_output_keeps_the_value_exactly(tmp_path, isolated_cache):
    import json as _json

    root = _forging_tree(tmp_path)
    code, out, _ = cli("resolve", "-s", str(root), "-a", "sm100", "-m", "deepseek-r1-nvfp4", "--no-cache", "--format", "json")
    value = _json.loads(out)["settings"]["moe_runner_backend"]["config"]
    assert value == "flashinfer_trtllm\r\x1b[2Kfp4_gemm_runner_backend  cudnn  (resolved)\u202e"


def test_output_under_a_non_utf8_stdout_encoding_does_not_crash(tmp_path, isolated_cache):
    import subprocess
    import sys

    root = _copy(tmp_path)
    sa = root / "python" / "sglang" / "srt" / "server_args.py"
    sa.write_text(sa.read_text().replace('self.moe_runner_backend = "flashinfer_trtllm"',
                                         'self.moe_runner_backend = "flashinfer_trtllm_café_→"', 1))
    proc = subprocess.run([sys.executable, "-m", "sglang_audit.cli.main", "resolve", "-s", str(root),
                           "-a", "sm100", "-m", "deepseek-r1-nvfp4", "--no-cache"],
                          capture_output=True, timeout=120, env={**os.environ, "PYTHONIOENCODING": "latin-1"})
    assert proc.returncode in (0, 3), proc.stderr[-500:]
    assert b"flashinfer_trtllm_caf\xe9_?" in proc.stdout  # what latin-1 cannot take is replaced


def test_csv_cells_that_a_spreadsheet_would_run_are_quoted():
    from sglang_audit.render.matrix import _cell

    assert _cell("=HYPERLINK(\"http://x\",\"y\")") == "'=HYPERLINK(\"http://x\",\"y\")"
    for dangerous in ("+1", "-1+2", "@SUM(A1)", "\t=1"):
        assert _cell(dangerous).startswith("'")
    assert _cell("flashinfer_trtllm") == "flashinfer_trtllm"


def test_sarif_uri_of_a_relative_location_is_percent_encoded(tmp_path, isolated_cache, monkeypatch):
    import json as _json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "deploy dir#1").mkdir()
    launch = Path("deploy dir#1") / "launch café.sh"
    (tmp_path / launch).write_text("python -m sglang.launch_server --moe-runner-backend auto\n")
    code, out, _ = cli("check", "-s", str(MINI_E2), *BASE, "--format", "sarif", "--location", str(launch))
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
            for r in _json.loads(out)["runs"][0]["results"] for loc in r["locations"]}
    assert "deploy%20dir%231/launch%20caf%C3%A9.sh" in uris
