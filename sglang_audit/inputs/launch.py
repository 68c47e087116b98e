"""A launch command as users paste it → the server's own arguments and environment.

Handles what surrounds the server's flags in SGLang's docs and bug reports: backslash-
newline continuations, ``#`` comments, ``export``/``NAME=VALUE``/``env NAME=VALUE``
prefixes (they become environment variables, exactly like ``--env``), ``docker run`` /
``podman run`` wrappers (the runtime's own options and the image are skipped; ``-e
NAME=VALUE`` is the container's environment), and the entry points ``python -m
sglang.launch_server``, ``sglang serve``, ``python -m sglang_router.launch_server``.
What follows the entry point is parsed by the release's own flag table (``cliargs``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from sglang_audit.errors import InputError

# Entry modules whose argv is ServerArgs' (the router's launcher adds --router-* flags)
SERVER_MODULES = ("sglang.launch_server", "sglang_router.launch_server", "sglang.srt.server")
ROUTER_MODULES = ("sglang_router.launch_server",)
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_REDIRECT = re.compile(r"^\d*(>>?|<)&?\d*$|^\d*(>>?|<)\S+$|^&>\S*$")
# `<model-path>` in a pasted command is the author's placeholder, not a shell redirection
_PLACEHOLDER = re.compile(r"^<[^<>\s]+>$")
_SEPARATORS = {"|", "||", "&&", ";", "&"}
_WRAPPERS = {"sudo", "nohup", "exec", "time", "nice", "stdbuf", "numactl", "taskset"}

# docker/podman run options that take a value (the rest of their options are switches);
# from `docker run --help` / `podman run --help`
_RUNTIME_VALUED = {
    "-a", "--attach", "--add-host", "--annotation", "--blkio-weight", "--cap-add", "--cap-drop", "--cgroup-parent",
    "--cgroupns", "--cidfile", "--cpu-period", "--cpu-quota", "--cpu-rt-period", "--cpu-rt-runtime", "-c",
    "--cpu-shares", "--cpus", "--cpuset-cpus", "--cpuset-mems", "--device", "--device-cgroup-rule",
    "--device-read-bps", "--device-read-iops", "--device-write-bps", "--device-write-iops", "--dns",
    "--dns-option", "--dns-search", "--domainname", "--entrypoint", "-e", "--env", "--env-file", "--expose",
    "--gpus", "--group-add", "--health-cmd", "--health-interval", "--health-retries", "--health-start-period",
    "--health-timeout", "-h", "--hostname", "--ip", "--ip6", "--ipc", "--isolation", "--kernel-memory", "-l",
    "--label", "--label-file", "--link", "--link-local-ip", "--log-driver", "--log-opt", "--mac-address", "-m",
    "--memory", "--memory-reservation", "--memory-swap", "--memory-swappiness", "--mount", "--name", "--network",
    "--net", "--network-alias", "--oom-score-adj", "--pid", "--pids-limit", "--platform", "-p", "--publish",
    "--pull", "--restart", "--runtime", "--security-opt", "--shm-size", "--stop-signal", "--stop-timeout",
    "--storage-opt", "--sysctl", "--tmpfs", "--ulimit", "-u", "--user", "--userns", "--uts", "-v", "--volume",
    "--volume-driver", "--volumes-from", "-w", "--workdir", "--hooks-dir", "--pod",
}


@dataclass(frozen=True)
class LaunchCommand:
    """The server's argv (after the entry point) and the environment the command sets."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    entry: str = ""  # e.g. "python -m sglang.launch_server", "sglang serve", "" (bare flags)
    router: bool = False  # sglang_router's launcher: --router-* flags are the router's


def split_launch(command: str) -> LaunchCommand:
    """Find the SGLang server invocation in a pasted shell snippet."""
    text = re.sub(r"\\\r?\n", " ", command)  # continuations: one logical line
    env: dict[str, str] = {}
    found: LaunchCommand | None = None
    for line in text.splitlines():
        try:
            words = shlex.split(strip_comment(line))
        except ValueError as exc:
            raise InputError(f"cannot parse --launch command: {exc}") from None
        for simple in _simple_commands(words):
            cmd = _one_command(simple, env)
            if cmd is not None:
                if found is not None:
                    raise InputError("the launch command starts the SGLang server twice; paste one server command")
                found = cmd
    if found is None:
        raise InputError("--launch: no SGLang server invocation in the command (python -m sglang.launch_server, "
                         "sglang serve, python -m sglang_router.launch_server, or bare --flags)")
    return LaunchCommand(found.argv, tuple(env.items()) + found.env, found.entry, found.router)


def strip_comment(line: str) -> str:
    """Drop a shell comment: `#` starting a word, outside quotes (`a#b` is a word)."""
    quote = ""
    prev = " "
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "#" and prev.isspace():
            return line[:i]
        prev = c
    return line


def _simple_commands(words: list[str]) -> list[list[str]]:
    """Split at ; && || | & (a pipe's right side, e.g. `| tee log`, is not the server)."""
    out: list[list[str]] = [[]]
    piped = False
    for w in words:
        stripped = w.rstrip(";")
        if w in _SEPARATORS:
            piped = w == "|"
            out.append([])
            continue
        if piped:
            continue  # `... | tee server.log`
        if _REDIRECT.match(w) and not _PLACEHOLDER.match(w):
            continue  # `2>&1`, `>log`
        if stripped:
            out[-1].append(stripped)
        if stripped != w:
            out.append([])
    return [c for c in out if c]


def _one_command(words: list[str], env: dict[str, str]) -> LaunchCommand | None:
    """One simple command: an env-setting line (returns None, fills ``env``) or the server."""
    i = 0
    local: dict[str, str] = {}
    if words and words[0] == "export":
        for w in words[1:]:
            if _ENV_WORD.match(w):
                k, v = w.split("=", 1)
                env[k] = v
        return None
    while i < len(words):
        w = words[i]
        if _ENV_WORD.match(w):
            k, v = w.split("=", 1)
            local[k] = v
            i += 1
        elif w == "env":
            i += 1
            while i < len(words) and (words[i].startswith("-") or _ENV_WORD.match(words[i])):
                if _ENV_WORD.match(words[i]):
                    k, v = words[i].split("=", 1)
                    local[k] = v
                elif words[i] in ("-i", "--ignore-environment", "-"):
                    env.clear()  # env -i: nothing of the outer environment reaches the server
                    local.clear()
                elif words[i] in ("-u", "--unset") and i + 1 < len(words):
                    i += 1
                    env.pop(words[i], None)
                    local.pop(words[i], None)
                elif words[i] in ("-C", "--chdir", "-S", "--split-string"):
                    i += 1
                i += 1
        elif w in _WRAPPERS:
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 1  # e.g. `nice -n 10`: a wrapper's numeric value is skipped below
                if i < len(words) and words[i].isdigit():
                    i += 1
        else:
            break
    rest = words[i:]
    if not rest:
        if local:  # `NAME=VALUE` alone sets a shell variable; only exported ones reach SGLang
            return None
        return None
    if rest[0].rsplit("/", 1)[-1] in ("docker", "podman", "nvidia-docker"):
        return _container(rest, local)
    cmd = _server(rest)
    if cmd is None:
        return None
    return LaunchCommand(cmd.argv, tuple(local.items()), cmd.entry, cmd.router)


def _container(words: list[str], env: dict[str, str]) -> LaunchCommand | None:
    i = 1
    if i < len(words) and words[i] == "container":
        i += 1
    if i >= len(words) or words[i] != "run":
        return None  # docker exec/compose/...: not a server start we can read
    i += 1
    container_env: dict[str, str] = {}
    while i < len(words) and words[i].startswith("-"):
        w = words[i]
        name, eq, inline = w.partition("=")
        if name in ("-e", "--env"):
            value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
            if "=" in value:
                k, v = value.split("=", 1)
                container_env[k] = v
            else:
                raise InputError(f"docker -e {value}: the value comes from the host environment; pass it as --env {value}=VALUE")
            i += 1 if eq else 2
        elif name == "--env-file":
            raise InputError("docker --env-file: the file's variables cannot be read from the command; pass them as --env NAME=VALUE")
        elif name in _RUNTIME_VALUED and not eq:
            i += 2
        elif not name.startswith("--") and len(name) > 2 and "-" + name[-1] in _RUNTIME_VALUED:
            i += 2  # combined short switches ending in a valued one, e.g. `-itv /x:/x`
        else:
            i += 1
    i += 1  # the image
    rest = words[i:]
    if not rest:
        raise InputError("docker run without a command: the image's default entrypoint is not known; paste the server command after the image")
    if rest[0].startswith("--"):
        cmd: LaunchCommand | None = LaunchCommand(tuple(rest), (), "image entrypoint")
    else:
        cmd = _server(rest)
    if cmd is None:
        return None
    merged = {**env, **container_env}
    return LaunchCommand(cmd.argv, tuple(merged.items()), f"docker run ... {cmd.entry}".rstrip(), cmd.router)


def _server(words: list[str]) -> LaunchCommand | None:
    if words[0].startswith("--"):
        return LaunchCommand(tuple(words), (), "")
    for i, w in enumerate(words):
        base = w.rsplit("/", 1)[-1]
        if w == "-m" and i + 1 < len(words) and words[i + 1] in SERVER_MODULES:
            mod = words[i + 1]
            return LaunchCommand(tuple(words[i + 2:]), (), f"python -m {mod}", mod in ROUTER_MODULES)
        if w.startswith("-m") and w[2:] in SERVER_MODULES:
            return LaunchCommand(tuple(words[i + 1:]), (), f"python -m {w[2:]}", w[2:] in ROUTER_MODULES)
        if base == "sglang" and i + 1 < len(words) and words[i + 1] == "serve":
            return LaunchCommand(tuple(words[i + 2:]), (), "sglang serve")
        if base in ("launch_server.py",):
            return LaunchCommand(tuple(words[i + 1:]), (), "launch_server.py")
    return None


def launch_text(words: list[str]) -> str:
    """Back to one shell line (for messages)."""
    return " ".join(shlex.quote(w) for w in words)
