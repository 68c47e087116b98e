"""Every example the tool shows is run, and exits as its text says.

The examples are read from where a user reads them, so a new one is tested without touching
this file: the live ``--help`` of every command (the ``Example...:`` blocks) and README.md
(each ``sglang-audit`` command of a ```bash block, and each ``$ sglang-audit`` line opening a
block of shown output; other commands there, installing or testing, are not examples of the
tool). An example exits 0 unless its text says otherwise: ``Example (... exits 1 ...):`` in a
help text, a ``# exits 1: ...`` comment after a README command.

A release that is not in the user cache dir is downloaded once (``real_release``); the result
cache makes a rerun cheap. Files an example reads as the user's own (``--location
deploy/launch.sh``) are provided in the directory it runs in; files it writes land there.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sglang_audit.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

# the user's own files some examples name (a launch script to anchor SARIF results to)
USER_FILES = {
    "deploy/launch.sh": "python3 -m sglang.launch_server --model-path nvidia/Qwen3.5-397B-A17B-NVFP4 --tp 8\n",
}

_EXIT = re.compile(r"\bexits? (\d)\b")
_TOOL = re.compile(r"^(?:\S*/)?sglang-audit$")


@dataclass(frozen=True)
class Example:
    where: str  # "sglang-audit check --help", "README.md:176"
    command: str  # the shell command line, continuations joined
    exit_code: int


def _help_texts() -> dict[str, str]:
    """The live --help of the group and of every command under it."""
    out: dict[str, str] = {}

    def walk(cmd: click.Command, path: list[str]) -> None:
        result = CliRunner().invoke(main, [*path, "--help"])
        assert result.exit_code == 0, result.output
        out[" ".join(["sglang-audit", *path, "--help"])] = result.output
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, [*path, name])

    walk(main, [])
    return out


def _joined(lines: list[str]) -> list[str]:
    """Shell lines with their ``\\`` continuations joined."""
    out: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].strip() + " "
            continue
        out.append((pending + line.strip()).strip())
        pending = ""
    if pending:
        out.append(pending.strip())
    return [line for line in out if line]


def help_examples() -> list[Example]:
    out: list[Example] = []
    for where, text in _help_texts().items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if not re.match(r"^\s*Example\b", line):
                continue
            # the heading, up to the line ending in ':' (it may fold), then the commands
            end = next((j for j in range(i, len(lines)) if lines[j].rstrip().endswith(":")), None)
            assert end is not None and end - i < 4, f"{where}: an Example heading ends with ':'"
            heading = " ".join(lines[i:end + 1])
            block: list[str] = []
            for body in lines[end + 1:]:
                if not body.strip():
                    break
                block.append(body)
            m = _EXIT.search(heading)
            code = int(m.group(1)) if m else 0
            for command in _joined(block):
                out.append(Example(where, command, code))
    return out


def readme_examples() -> list[Example]:
    out: list[Example] = []
    lines = README.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = lines[i].strip()
        if not fence.startswith("```"):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        body = lines[i + 1:end]
        if fence == "```bash":
            for k, command in enumerate(_joined(body)):
                for part in _commands(command):
                    out.append(_readme_example(f"README.md:{i + 2 + k}", part))
        elif body and body[0].startswith("$ "):
            (command,) = _joined([body[0][2:]])  # then the output it shows
            out.append(_readme_example(f"README.md:{i + 2}", command))
        i = end + 1
    return out


def _commands(line: str) -> list[str]:
    """The sglang-audit commands of a shell line (``a && b``); setup commands are not examples."""
    code, _, comment = line.partition(" #")
    parts = [p.strip() for p in re.split(r"&&|;", code)]
    found = [p for p in parts if p and _TOOL.match(p.split()[0])]
    return [f"{p} #{comment}" if comment else p for p in found]


def _readme_example(where: str, command: str) -> Example:
    code, _, comment = command.partition(" #")
    m = _EXIT.search(comment)
    return Example(where, code.strip(), int(m.group(1)) if m else 0)


def all_examples() -> list[Example]:
    return [*help_examples(), *readme_examples()]


def _unique() -> list[pytest.param]:
    by_args: dict[tuple[tuple[str, ...], int], tuple[str, list[str]]] = {}
    for ex in all_examples():  # the same command line in two places is run once
        key = (tuple(shlex.split(ex.command)[1:]), ex.exit_code)
        by_args.setdefault(key, (ex.command, []))[1].append(ex.where)
    params = []
    for (_args, code), (command, wheres) in by_args.items():
        marks = [pytest.mark.real_release] if "sglang==" in command else []
        params.append(pytest.param(command, code, wheres, marks=marks, id=wheres[0]))
    return params


def test_the_examples_are_found():
    """The extraction sees what a reader sees (a new example is picked up, not skipped)."""
    found = all_examples()
    wheres = {ex.where for ex in found}
    for command in ("", "resolve", "explain", "check", "diff", "report", "matrix", "recommend"):
        assert " ".join(["sglang-audit", command, "--help"]).replace("  ", " ") in wheres
    readme = [ex for ex in found if ex.where.startswith("README.md")]
    assert len(readme) >= 6, readme
    assert all(_TOOL.match(shlex.split(ex.command)[0]) for ex in found)
    assert any(ex.exit_code == 1 for ex in found)  # an example showing a finding says so


def _argv(command: str, cwd: Path) -> tuple[list[str], Path | None]:
    """The tool's arguments, and the file a ``> FILE`` redirect writes (in ``cwd``)."""
    words = shlex.split(command)
    target = None
    if ">" in words:
        k = words.index(">")
        target = cwd / words[k + 1]
        words = words[:k] + words[k + 2:]
    assert not any(w in ("|", "<", "2>", "&&") for w in words), command
    return words[1:], target


@pytest.mark.parametrize("command, exit_code, wheres", _unique())
def test_the_example_runs_and_exits_as_its_text_says(command: str, exit_code: int, wheres: list[str],
                                                     tmp_path: Path) -> None:
    for name, text in USER_FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    args, redirect = _argv(command, tmp_path)
    # a Hugging Face id means the bundled profile here, not whatever a machine's HF cache holds
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_HUB_CACHE", None)
    proc = subprocess.run([sys.executable, "-m", "sglang_audit", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=1800)
    said = f"{' and '.join(wheres)}: {command}\nexit {proc.returncode}\n{proc.stderr[-3000:]}\n{proc.stdout[-3000:]}"
    assert proc.returncode == exit_code, said
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, said
    if redirect is not None:
        redirect.write_text(proc.stdout)
    written = [args[i + 1] for i, word in enumerate(args[:-1]) if word in ("-o", "--output")]
    for name in written:  # what the example writes, it wrote
        assert (tmp_path / name).stat().st_size > 0, said
    if not written:
        assert proc.stdout.strip(), said
