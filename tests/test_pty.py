"""What a terminal receives (a real pseudo-terminal, not a pipe): the tool's own terminal
control (the status line's ``\\r\\x1b[K``, click's progress bar) arrives as control, while a
control character from the checkout (SGLang's message) or from the user (an --env value)
arrives escaped, never able to rewrite the screen."""

from __future__ import annotations

import fcntl
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"
SA = Path("python") / "sglang" / "srt" / "server_args.py"
# in SGLang's source: a Python escape, so the evaluated message holds a real ESC and BEL
FORGED_MESSAGE = r"modelopt_fp4 quantization is required\x1b]0;pwned\x07\r\x1b[2Kresolved"


def _on_a_terminal(args: list[str], tmp_path: Path, code: str | None = None, cols: int = 160) -> tuple[int, bytes]:
    """Run the tool (or ``code``) with stdin, stdout and stderr on one pty; all it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    env = {**os.environ, "SGLANG_AUDIT_CACHE_DIR": str(tmp_path / "cache"), "SGLANG_AUDIT_FLASHINFER_SOURCE": "none",
           "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "COLUMNS": str(cols)}
    argv = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "sglang_audit", *args]
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=tmp_path, close_fds=True)
    os.close(slave)
    out = b""
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the pty
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
    return proc.wait(timeout=300), out


@pytest.fixture()
def hostile_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    shutil.copytree(MINI_E2, root)
    sa = root / SA
    text = sa.read_text()
    assert "modelopt_fp4 quantization is required" in text
    sa.write_text(text.replace("modelopt_fp4 quantization is required", FORGED_MESSAGE, 1))
    return root


def test_progress_is_terminal_control_and_what_the_checkout_and_user_wrote_is_escaped(tmp_path, hostile_checkout):
    code, out = _on_a_terminal(["resolve", "-s", str(hostile_checkout), "-a", "sm100", "-m", "gpt-oss-120b",
                                "--set", "quantization=mxfp4", "--set", "moe_runner_backend=flashinfer_cutlass",
                                "--env", "FOO=\x1b[31mred\x1b[0m"], tmp_path)
    assert code == 1, out[-2000:]
    # the status line of a first run: rewritten in place, as control the terminal obeys
    assert b"\r\x1b[Kparsing the release (first run only): 1 files, sglang/" in out
    assert b"\\x0d" not in out.split(b"SGLang ")[0] and b"\\x1b[K" not in out  # never shown as text
    # SGLang's message: its ESC, BEL and CR are shown escaped, on the REJECTED line
    (line,) = [ln for ln in out.split(b"\r\n") if ln.startswith(b"REJECTED by SGLang:")]
    assert b"required\\x1b]0;pwned\\x07\\x0d\\x1b[2Kresolved" in line
    # the user's --env value: shown (env line), escaped
    assert b"env: FOO=\\x1b[31mred\\x1b[0m" in out
    for raw in (b"\x1b]0;", b"\x07", b"\x1b[2K", b"\x1b[31m", b"\x1b[0m"):
        assert raw not in out


def test_click_progress_bar_reaches_the_terminal_as_control(tmp_path):
    code, out = _on_a_terminal(["matrix", "-s", str(MINI_E2), "-a", "sm100,sm120", "-m", "deepseek-r1-nvfp4",
                                "--flags-set", "none=", "-j", "1"], tmp_path)
    assert code == 0, out[-2000:]
    assert b"\r\x1b[?25lresolving 2 cases" in out and b"\x1b[?25h" in out  # click's \r and cursor codes
    assert b"\\x0d" not in out and b"\\x1b[?25" not in out


def test_a_status_line_quoting_the_checkout_escapes_it(tmp_path):
    # the status line's own \r\x1b[K is control; a file name (the checkout's) in it is text
    code = ("import sys\n"
            "from sglang_audit.cli.common import STATUS, install_safe_output\n"
            "restore = install_safe_output()\n"
            "STATUS.show('parsing: sglang/evil\\x1b[31m\\r.py')\n"
            "STATUS.clear()\n"
            "restore()\n")
    rc, out = _on_a_terminal([], tmp_path, code=code)
    assert rc == 0, out
    assert out == b"\r\x1b[Kparsing: sglang/evil\\x1b[31m\\x0d.py\r\x1b[K"


@pytest.mark.parametrize("command", [["resolve"], ["check"], ["explain", "moe_runner_backend"], ["recommend"]])
def test_text_output_is_folded_to_the_terminal_and_whole_on_a_pipe(tmp_path, command):
    args = [*command, "-s", str(MINI_E2), "-a", "sm100", "-m", "deepseek-r1-nvfp4"]
    _code, out = _on_a_terminal(args, tmp_path, cols=70)
    lines = [ln for ln in out.decode().split("\r\n") if not ln.startswith("\r")]
    # a line longer than the terminal is one token that cannot be split (a path, a file:line)
    assert all(len(ln) <= 70 or " " not in ln.strip() for ln in lines), [ln for ln in lines if len(ln) > 70]
    piped = subprocess.run([sys.executable, "-m", "sglang_audit", *args], capture_output=True, text=True, cwd=tmp_path,
                           env={**os.environ, "SGLANG_AUDIT_CACHE_DIR": str(tmp_path / "cache"),
                                "SGLANG_AUDIT_FLASHINFER_SOURCE": "none"})
    assert max(len(ln) for ln in piped.stdout.splitlines()) > 70  # the same output, lines whole
