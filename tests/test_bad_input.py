"""Bad input ends in one line and a documented exit code, never a traceback (issue 10, item 3).

Each case builds its hostile input in tmp_path (a copy of the mini_e2 checkout with one
thing broken, a broken model directory, a bad flag) and runs the real command line.
Input errors exit 2 with one ``sglang-audit: error: ...`` line on stderr.  A broken
module the resolution needs is not an input error: the run carries on, the file:line
is in the analysis notes and the settings that depend on it are unknown (exit 3); only
a broken entry module (``sglang/srt/server_args.py``), from which nothing can be
resolved, exits 2 with its file:line.

Most cases use click's CliRunner; the ones that once crashed the interpreter itself
(a 50,000-deep expression overflowed libcst's native parser: SIGSEGV) and the ones
about the process (broken pipe, the internal-error catch-all) run a real subprocess,
so a regression fails the test instead of killing pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import sglang_audit.cli.main as cli_module
from sglang_audit.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"
TARGET = ["-a", "sm120", "-m", "deepseek-r1-nvfp4"]
SERVER_ARGS = "srt/server_args.py"
COMMON = "srt/utils/common.py"  # needed: the hardware predicates and env helpers live here
SUBPROCESS_TIMEOUT = 120


@pytest.fixture(autouse=True)
def _cache(isolated_cache: Path) -> Path:
    return isolated_cache


@pytest.fixture()
def checkout(tmp_path: Path) -> Callable[[Callable[[Path], None] | None], Path]:
    """A fresh copy of mini_e2; ``make(edit)`` calls ``edit(package_dir)`` and returns the root."""
    count = 0

    def make(edit: Callable[[Path], None] | None = None) -> Path:
        nonlocal count
        count += 1
        root = tmp_path / f"checkout{count}"
        shutil.copytree(MINI_E2, root, symlinks=True)
        if edit is not None:
            edit(root / "python" / "sglang")
        return root

    return make


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def append_line(path: Path, line: str) -> int:
    """Append ``line`` to a source file; returns its 1-based line number."""
    text = path.read_text(encoding="utf-8").rstrip("\n")
    path.write_text(f"{text}\n{line}\n", encoding="utf-8")
    return text.count("\n") + 2


def no_traceback(result: Result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and "Traceback" not in result.stderr


def error_line(result: Result, *needles: str, progress: int = 0) -> str:
    """Exit 2 and exactly one error line on stderr (after ``progress`` progress lines)."""
    no_traceback(result)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == progress + 1, lines
    line = lines[-1]
    assert line.startswith("sglang-audit: error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def resolved_json(result: Result, code: int) -> dict:
    no_traceback(result)
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    return json.loads(result.stdout)


# --------------------------------------------------------------------------- the source


def test_missing_source_dir(tmp_path: Path) -> None:
    error_line(run("resolve", "-s", str(tmp_path / "nope"), *TARGET), "source not found")


def test_dir_without_sglang_package(tmp_path: Path) -> None:
    (tmp_path / "python").mkdir()
    (tmp_path / "python" / "setup.py").write_text("print('hi')\n")
    error_line(run("resolve", "-s", str(tmp_path), *TARGET), "no SGLang package found", "python/sglang")


def test_source_file_that_is_not_an_archive(tmp_path: Path) -> None:
    notes = tmp_path / "sglang-0.5.10.whl"
    notes.write_text("not a zip\n")
    error_line(run("resolve", "-s", str(notes), *TARGET), "not a wheel or sdist archive")


def test_future_layout_without_serverargs_class(checkout) -> None:
    # e.g. a release that moved ServerArgs elsewhere: nothing to resolve from
    root = checkout(lambda pkg: (pkg / SERVER_ARGS).write_text("class ServerConfig:\n    pass\n"))
    error_line(run("resolve", "-s", str(root), *TARGET),
               "no ServerArgs class in sglang/srt/server_args.py", "unsupported or future layout")


def test_empty_server_args(checkout) -> None:
    root = checkout(lambda pkg: (pkg / SERVER_ARGS).write_text(""))
    error_line(run("resolve", "-s", str(root), *TARGET), "no ServerArgs class", "unsupported or future layout")


def test_every_command_refuses_an_unanalysable_release(checkout) -> None:
    """Not only resolve: diff must not read a broken release as "flags refused" (exit 1)."""
    root = str(checkout(lambda pkg: append_line(pkg / SERVER_ARGS, "x = = 1")))
    target = ["-a", "sm120", "-m", "deepseek-r1-nvfp4"]
    for args in (["explain", "moe_runner_backend", "-s", root, *target], ["check", "-s", root, *target],
                 ["diff", "--from", str(MINI_E2), "--to", root, *target],
                 ["report", "-s", root, *target, "-o", "-"],
                 ["matrix", "-s", root, *target, "--flags-set", "none=", "-j", "1"]):
        result = run(*args)
        no_traceback(result)
        assert result.exit_code == 2, (args[0], result.exit_code, result.stderr)
        errors = [ln for ln in result.stderr.splitlines() if ln.startswith("sglang-audit:")]
        assert errors == [result.stderr.splitlines()[-1]], (args[0], result.stderr)
        assert "sglang/srt/server_args.py:" in errors[0] and "syntax error" in errors[0], (args[0], errors)


def test_serverargs_reexported_is_accepted(checkout) -> None:
    """The layout check is structural but not naive: a re-export still counts."""

    def edit(pkg: Path) -> None:
        (pkg / "srt" / "server_args_impl.py").write_text((pkg / SERVER_ARGS).read_text())
        (pkg / SERVER_ARGS).write_text("from sglang.srt.server_args_impl import *  # noqa\n")

    data = resolved_json(run("resolve", "-s", str(checkout(edit)), "-a", "sm100", "-m", "deepseek-r1-nvfp4",
                             "--format", "json"), 0)
    assert data["settings"]["moe_runner_backend"]["config"] == "flashinfer_trtllm"


def test_syntax_error_in_server_args_names_file_and_line(checkout) -> None:
    line = 0

    def edit(pkg: Path) -> None:
        nonlocal line
        line = append_line(pkg / SERVER_ARGS, "x = = 1")

    root = checkout(edit)
    for extra in ([], ["--set", "tp_size=2"]):  # with and without the flag-table pass
        error_line(run("resolve", "-s", str(root), *TARGET, *extra),
                   f"sglang/srt/server_args.py:{line}: syntax error")


def test_syntax_error_in_a_needed_module_marks_dependents_unknown(checkout) -> None:
    line = 0

    def edit(pkg: Path) -> None:
        nonlocal line
        line = append_line(pkg / COMMON, "value = = 1")

    root = checkout(edit)
    data = resolved_json(run("resolve", "-s", str(root), *TARGET, "--format", "json"), 3)
    assert f"sglang/srt/utils/common.py:{line}: syntax error" in " ".join(data["analysis_notes"])
    settings = data["settings"]
    assert settings["moe_runner_backend"]["status"] == "unknown"  # reads get_bool_env_var
    assert "sglang/srt/utils/common.py" in settings["moe_runner_backend"]["config"]["unknown"]
    # carry on with what does not depend on the broken file
    assert settings["moe_a2a_backend"] == {**settings["moe_a2a_backend"], "status": "resolved", "config": "none"}
    text = run("resolve", "-s", str(root), *TARGET)
    assert text.exit_code == 3 and f"common.py:{line}: syntax error" in text.stdout
    assert text.stderr == ""


def test_syntax_error_in_a_runtime_initialiser_module(checkout) -> None:
    root = checkout(lambda pkg: append_line(pkg / "srt" / "layers" / "quantization" / "fp4_utils.py", "x = = 1"))
    data = resolved_json(run("resolve", "-s", str(root), *TARGET, "--format", "json"), 3)
    assert data["settings"]["fp4_gemm_runner_backend"]["status"] == "unknown"


def test_fifo_metadata_in_the_checkout(checkout) -> None:
    def edit(pkg: Path) -> None:
        (pkg.parent / "sglang-0.0.1.dist-info").mkdir()
        os.mkfifo(pkg.parent / "sglang-0.0.1.dist-info" / "METADATA")

    proc = subprocess_cli("resolve", "-s", str(checkout(edit)), *TARGET)
    assert proc.returncode == 0


def test_non_utf8_server_args(checkout) -> None:
    root = checkout(lambda pkg: (pkg / SERVER_ARGS).write_bytes(b"# caf\xe9\nclass ServerArgs: pass\n"))
    error_line(run("resolve", "-s", str(root), *TARGET), "sglang/srt/server_args.py", "not UTF-8")


def test_binary_needed_module(checkout) -> None:
    root = checkout(lambda pkg: (pkg / COMMON).write_bytes(bytes(range(256)) * 64))
    data = resolved_json(run("resolve", "-s", str(root), *TARGET, "--format", "json"), 3)
    assert any(n.startswith("sglang/srt/utils/common.py: not UTF-8") for n in data["analysis_notes"])
    assert data["settings"]["moe_runner_backend"]["status"] == "unknown"


def test_empty_needed_module(checkout) -> None:
    root = checkout(lambda pkg: (pkg / COMMON).write_text(""))
    data = resolved_json(run("resolve", "-s", str(root), *TARGET, "--format", "json"), 3)
    reason = data["settings"]["moe_runner_backend"]["config"]["unknown"]
    assert "not found in the source" in reason


def test_huge_needed_module_is_not_read(checkout) -> None:
    # 20 MB: over MAX_SOURCE_BYTES, refused before reading or parsing
    def edit(pkg: Path) -> None:
        with (pkg / COMMON).open("a") as fh:
            fh.write(("# " + "x" * 1022 + "\n") * 20 * 1024)

    data = resolved_json(run("resolve", "-s", str(checkout(edit)), *TARGET, "--format", "json"), 3)
    assert "sglang/srt/utils/common.py: file larger than 8 MB, not analysed" in data["analysis_notes"]


def test_huge_server_args(checkout) -> None:
    def edit(pkg: Path) -> None:
        with (pkg / SERVER_ARGS).open("a") as fh:
            fh.write(("# " + "x" * 1022 + "\n") * 20 * 1024)

    error_line(run("resolve", "-s", str(checkout(edit)), *TARGET), "sglang/srt/server_args.py", "larger than 8 MB")


def test_recursive_imports(checkout) -> None:
    """Two modules importing each other at top level (and server_args importing itself)
    neither loop nor crash; what they define is still used."""

    def edit(pkg: Path) -> None:
        (pkg / "srt" / "utils" / "a.py").write_text(
            "from sglang.srt.utils.b import B\nA = 'triton'\n\ndef fa():\n    return B\n")
        (pkg / "srt" / "utils" / "b.py").write_text("from sglang.srt.utils.a import A\nB = A\n")
        text = (pkg / SERVER_ARGS).read_text()
        text = text.replace('        if get_bool_env_var("SGLANG_FIXTURE_FORCE_TRITON"):\n',
                            "        if fa() == 'triton':\n")
        head = "from sglang.srt.utils.a import fa\nimport sglang.srt.server_args\n"
        (pkg / SERVER_ARGS).write_text(head + text)

    result = run("resolve", "-s", str(checkout(edit)), *TARGET, "--format", "json")
    no_traceback(result)
    assert result.exit_code in (0, 3)
    assert json.loads(result.stdout)["settings"]["moe_runner_backend"]["status"] in ("resolved", "unknown")


def test_symlink_loops_and_fifos_in_the_checkout(checkout) -> None:
    def edit(pkg: Path) -> None:
        srt = pkg / "srt"
        os.symlink("loop", srt / "loop")  # a link to itself
        os.symlink(".", srt / "self")  # a directory cycle
        os.symlink("..", srt / "layers" / "up")
        os.symlink("x.py", srt / "utils" / "x.py")
        os.mkfifo(srt / "utils" / "fifo.py")  # reading it would block forever
        imports = ("import sglang.srt.utils.x\nimport sglang.srt.utils.fifo\n"
                   "import sglang.srt.loop.q\nimport sglang.srt.self.server_args\n")
        (pkg / SERVER_ARGS).write_text(imports + (pkg / SERVER_ARGS).read_text())

    root = str(checkout(edit))
    data = resolved_json(run("resolve", "-s", root, *TARGET, "--format", "json"), 0)
    assert data["settings"]["fp4_gemm_runner_backend"]["runtime"] == "flashinfer_cudnn"
    for args in (["graph", "-s", root], ["guards", "-s", root, "-a", "sm120"]):
        result = run(*args)
        no_traceback(result)
        assert result.exit_code == 0


def test_server_args_symlinked_to_itself(checkout) -> None:
    def edit(pkg: Path) -> None:
        (pkg / SERVER_ARGS).unlink()
        os.symlink("server_args.py", pkg / SERVER_ARGS)

    error_line(run("resolve", "-s", str(checkout(edit)), *TARGET), "no SGLang package found")


# --------------------------------------------------------------------------- target and flags


def test_unknown_arch() -> None:
    error_line(run("resolve", "-s", str(MINI_E2), "-a", "sm75", "-m", "deepseek-r1-nvfp4"),
               "unknown --arch 'sm75'", "sm80", "sm120", "gfx942")


def test_bad_cuda() -> None:
    error_line(run("resolve", "-s", str(MINI_E2), *TARGET, "--cuda", "12"), "bad --cuda '12'", "MAJOR.MINOR")


def test_missing_model() -> None:
    error_line(run("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", "no-such-model"),
               "model not found: 'no-such-model'", "deepseek-r1-nvfp4")


def test_model_dir_without_config_json(tmp_path: Path) -> None:
    error_line(run("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", str(tmp_path)), "no config.json in model directory")


def test_malformed_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"architectures": ["X"],')
    error_line(run("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", str(tmp_path)), "config.json: not valid JSON")


def test_config_json_that_is_a_list(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('[{"architectures": ["X"]}]')
    error_line(run("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", str(tmp_path)),
               "config.json: expected a JSON object, found list")


def test_config_json_without_architectures(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    error_line(run("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", str(tmp_path)), 'no "architectures" list')


def test_config_json_not_utf8_or_too_deep(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(b'{"architectures": ["caf\xe9"]}')
    error_line(run("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", str(tmp_path)), "not valid JSON")
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    error_line(run("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", str(tmp_path)), "config.json: JSON nested too deeply")


def test_bad_hf_quant_config(tmp_path: Path) -> None:
    shutil.copy(ROOT / "fixtures" / "models" / "deepseek-r1-nvfp4" / "config.json", tmp_path / "config.json")
    (tmp_path / "hf_quant_config.json").write_text("{oops")
    error_line(run("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", str(tmp_path)), "hf_quant_config.json: not valid JSON")
    (tmp_path / "hf_quant_config.json").unlink()
    (tmp_path / "hf_quant_config.json").mkdir()
    error_line(run("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", str(tmp_path)), "hf_quant_config.json: not a regular file")


def test_model_name_too_long() -> None:
    error_line(run("resolve", "-s", str(MINI_E2), "-a", "sm120", "-m", "m" * 5000), "cannot access model", "too long")


def test_unknown_set_key() -> None:
    error_line(run("resolve", "-s", str(MINI_E2), *TARGET, "--set", "moe_backend=triton"), "unknown setting 'moe_backend'")


def test_bad_choice_names_the_choices() -> None:
    error_line(run("resolve", "-s", str(MINI_E2), *TARGET, "--set", "moe_runner_backend=cutlass"),
               "bad value 'cutlass' for moe_runner_backend",
               "choose one of auto, triton, flashinfer_trtllm, flashinfer_cutlass")


def test_set_without_value_and_bad_env() -> None:
    error_line(run("resolve", "-s", str(MINI_E2), *TARGET, "--set", "tp_size"), "bad --set 'tp_size'", "KEY=VALUE")
    error_line(run("resolve", "-s", str(MINI_E2), *TARGET, "--env", "NOVALUE"), "bad --env 'NOVALUE'", "NAME=VALUE")


@pytest.mark.parametrize(
    "launch, needle",
    [
        ("python -m sglang.launch_server --model-path 'unclosed", "cannot parse --launch"),
        ("python -m sglang.launch_server --model-path deepseek-r1-nvfp4 --tp", "--tp needs a value"),
        ("python -m sglang.launch_server --model-path deepseek-r1-nvfp4 --bogus 1", "unknown flag '--bogus'"),
        ("python -m sglang.launch_server --model-path deepseek-r1-nvfp4 --moe-runner-backend x", "choose one of"),
        ("echo hello", "--launch"),
    ],
)
def test_broken_launch_command(launch: str, needle: str) -> None:
    error_line(run("resolve", "-s", str(MINI_E2), "-a", "sm120", "--launch", launch), needle)


def test_message_with_newlines_stays_one_line(tmp_path: Path) -> None:
    # errors quote user input; a newline in it must not split the line
    error_line(run("resolve", "-s", str(tmp_path / "two\nlines"), *TARGET), "source not found", "two lines")


# --------------------------------------------------------------------------- downloads and the cache


def fake_pip(stderr: str, calls: list[list[str]]) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run_pip(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", stderr)

    return run_pip


NOT_FOUND = ("ERROR: Could not find a version that satisfies the requirement sglang==0.0.999 (from versions: 0.5.9)\n"
             "ERROR: No matching distribution found for sglang==0.0.999\n")
OFFLINE = ("WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection "
           "broken by 'NewConnectionError(\"Failed to establish a new connection: [Errno -3] Temporary failure in "
           "name resolution\")': /simple/sglang/\n"
           "ERROR: Could not find a version that satisfies the requirement sglang==0.5.10 (from versions: none)\n"
           "ERROR: No matching distribution found for sglang==0.5.10\n")


def test_release_that_does_not_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", fake_pip(NOT_FOUND, calls))
    result = run("resolve", "-s", "sglang==0.0.999", *TARGET)
    # no progress lines: stderr is not a terminal here (progress is for a person watching)
    error_line(result, "sglang==0.0.999: no such release on the package index")
    assert len(calls) == 2 and all("download" in c and "install" not in c for c in calls)


def test_malformed_release_pin() -> None:
    error_line(run("resolve", "-s", "sglang==latest!", *TARGET), "bad source spec", "sglang==X.Y.Z")


def test_no_network_for_a_download(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", fake_pip(OFFLINE, []))
    error_line(run("resolve", "-s", "sglang==0.5.10", *TARGET),
               "sglang==0.5.10: download failed (no network?)", "Temporary failure in name resolution")


def test_download_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(cmd, 300)

    monkeypatch.setattr(subprocess, "run", hang)
    error_line(run("resolve", "-s", "sglang==0.5.10", *TARGET), "pip timed out after 300 s")


@pytest.fixture()
def unwritable_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # Tests run as root, so chmod cannot make a dir read-only: a path under a regular
    # file can never be created, whoever asks.
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("SGLANG_AUDIT_CACHE_DIR", str(blocker / "cache"))
    return blocker / "cache"


def test_unwritable_cache_still_resolves_a_checkout(unwritable_cache: Path) -> None:
    data = resolved_json(run("resolve", "-s", str(MINI_E2), *TARGET, "--format", "json"), 0)
    assert data["settings"]["fp4_gemm_runner_backend"]["runtime"] == "flashinfer_cudnn"
    assert not unwritable_cache.exists()


def test_unwritable_cache_download_and_wheel_fail_in_one_line(
    unwritable_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("must not run pip"))
    error_line(run("resolve", "-s", "sglang==0.5.10", *TARGET), "is not writable", "SGLANG_AUDIT_CACHE_DIR")
    wheel = tmp_path / "sglang-0.5.10-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/srt/server_args.py", "class ServerArgs: pass\n")
    error_line(run("resolve", "-s", str(wheel), *TARGET), "is not writable")


# --------------------------------------------------------------------------- the catch-all


def test_internal_error_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(cli_module, "resolve", boom)
    monkeypatch.delenv("SGLANG_AUDIT_DEBUG", raising=False)
    result = run("resolve", "-s", str(MINI_E2), *TARGET)
    no_traceback(result)
    assert result.exit_code == 2
    assert result.stderr == "sglang-audit: internal error: RuntimeError: boom second line (please report)\n"
    monkeypatch.setenv("SGLANG_AUDIT_DEBUG", "1")
    result = run("resolve", "-s", str(MINI_E2), *TARGET)
    assert result.exit_code == 2 and "Traceback" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("sglang-audit: internal error: RuntimeError")


def test_error_outside_run_or_exit_is_caught_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # a renderer bug happens after the pipeline returned: the group's catch-all takes it
    import sglang_audit.render.text as render_text

    def broken(*args: object, **kwargs: object) -> str:
        raise KeyError("settings")

    monkeypatch.setattr(render_text, "render_resolution", broken)
    result = run("resolve", "-s", str(MINI_E2), *TARGET)
    no_traceback(result)
    assert result.exit_code == 2
    assert result.stderr == "sglang-audit: internal error: KeyError: 'settings' (please report)\n"


# --------------------------------------------------------------------------- real processes


def subprocess_cli(*args: str, env: dict[str, str] | None = None, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sglang_audit.cli.main", *args], capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT, env={**os.environ, **(env or {})}, cwd=ROOT, **kwargs)


def test_deeply_nested_expression_subprocess(checkout) -> None:
    """50,000 nested brackets (and a 50,000-long unary chain) used to overflow libcst's
    native parser and kill the process with SIGSEGV; now the file is refused, file:line."""
    lines: dict[str, int] = {}

    def needed(pkg: Path) -> None:
        lines["brackets"] = append_line(pkg / COMMON, "X = " + "(" * 50_000 + "1" + ")" * 50_000)
        lines["unary"] = append_line(pkg / "srt" / "layers" / "quantization" / "fp4_utils.py", "Y = " + "-" * 50_000 + "1")

    proc = subprocess_cli("resolve", "-s", str(checkout(needed)), *TARGET, "--format", "json")
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr == ""
    notes = json.loads(proc.stdout)["analysis_notes"]
    assert f"sglang/srt/utils/common.py:{lines['brackets']}: not analysed: brackets nested more than 200 deep" in notes
    assert (f"sglang/srt/layers/quantization/fp4_utils.py:{lines['unary']}: "
            "not analysed: expression nested more than 1000 levels deep") in notes

    def core(pkg: Path) -> None:
        lines["core"] = append_line(pkg / SERVER_ARGS, "Z = " + "[" * 50_000 + "]" * 50_000)

    proc = subprocess_cli("resolve", "-s", str(checkout(core)), *TARGET)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.startswith(f"sglang-audit: error: cannot analyse sglang/srt/server_args.py:{lines['core']}: "
                                  "not analysed: brackets nested more than 200 deep")
    assert proc.stderr.count("\n") == 1


def test_bad_input_subprocess_no_traceback(checkout) -> None:
    root = checkout(lambda pkg: append_line(pkg / SERVER_ARGS, "class 3x:"))
    proc = subprocess_cli("resolve", "-s", str(root), *TARGET)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("sglang-audit: error: cannot analyse sglang/srt/server_args.py:")
    assert proc.stderr.count("\n") == 1
    proc = subprocess_cli("resolve", "-s", str(MINI_E2), "-a", "sm0", "-m", "deepseek-r1-nvfp4")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.startswith("sglang-audit: error: unknown --arch 'sm0'") and proc.stderr.count("\n") == 1


def test_internal_error_subprocess() -> None:
    """The catch-all in a real process (CliRunner would catch the exception itself)."""
    script = ("import sys, sglang_audit.cli.main as c\n"
              "def boom(*a, **k):\n    raise RecursionError('maximum recursion depth exceeded')\n"
              "c.resolve = boom\nsys.argv = ['sglang-audit', *sys.argv[1:]]\nc.main()\n")
    args = ["resolve", "-s", str(MINI_E2), *TARGET]
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT, env={**os.environ, "SGLANG_AUDIT_DEBUG": ""})
    assert proc.returncode == 2
    assert proc.stderr == ("sglang-audit: internal error: RecursionError: maximum recursion depth exceeded "
                           "(please report)\n")


def test_broken_pipe_subprocess() -> None:
    """`sglang-audit ... | head -0`: the reader is gone before the output is written."""
    proc = subprocess.Popen([sys.executable, "-m", "sglang_audit.cli.main", "resolve", "-s", str(MINI_E2), *TARGET],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    try:
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=SUBPROCESS_TIMEOUT)
    finally:
        proc.kill()
        proc.stderr.close()
    assert code == 141 and err == ""
