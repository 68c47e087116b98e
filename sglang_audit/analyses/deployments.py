"""Deployment files: the targets ``diff`` (and ``report --deployment``) audit, read and
validated from YAML or TOML, every problem one InputError line naming the file."""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from sglang_audit.errors import InputError
from sglang_audit.inputs.device import DEFAULT_CUDA, parse_device
from sglang_audit.resolve.pipeline import Request
from sglang_audit.userfiles import UserFileError, read_user_file, safe_yaml_load

_MAX_DEPLOYMENT_FILE = 1 << 20


# ---- input: deployments ------------------------------------------------------------------
@dataclass(frozen=True)
class Deployment:
    """One target to audit: what ``resolve``'s target options describe."""

    name: str
    arch: str
    model: str | None
    cuda: str = DEFAULT_CUDA
    sets: tuple[str, ...] = ()  # KEY=VALUE, typed by each release's own parser
    launch: str | None = None
    env: tuple[str, ...] = ()  # NAME=VALUE
    with_packages: tuple[str, ...] = ()
    without_packages: tuple[str, ...] = ()
    # values the file gives as lists/mappings (no KEY=VALUE spelling); field names only
    typed_flags: tuple[tuple[str, Any], ...] = ()
    driver: str | None = None  # the NVIDIA driver; None: DEFAULT_DRIVER, said to be assumed
    cudnn: str | None = None  # None: the pip profile's pin (inputs/pins.py)
    env_profile: str | None = None  # rules/env_profiles.toml; None: the platform's default

    # The one mapping between a deployment and a Request's target fields (both ways): a field
    # added to Request that describes the deployment must be added here and in the file's keys
    # (tests/test_diff.py checks the two agree), or commands would drop it silently.
    def request(self, source: str | None, use_cache: bool) -> Request:
        return Request(
            source=source, arch=self.arch, model=self.model, cuda=self.cuda, sets=list(self.sets),
            launch=self.launch, env=list(self.env), with_packages=list(self.with_packages),
            without_packages=list(self.without_packages), use_cache=use_cache,
            flags=dict(self.typed_flags), driver=self.driver, cudnn=self.cudnn, env_profile=self.env_profile,
        )

    @classmethod
    def of_request(cls, request: Request, launch: str | None, name: str = "") -> Deployment:
        """The deployment a command's target options describe (``launch``: the request's own
        launch command with its ``--config`` folded in, ``pipeline.launch_with_config``)."""
        return cls(name, request.arch, request.model, request.cuda, tuple(request.sets), launch, tuple(request.env),
                   tuple(request.with_packages), tuple(request.without_packages), tuple(request.flags.items()),
                   request.driver, request.cudnn, request.env_profile)

    def with_command_line(self, request: Request) -> Deployment:
        """This deployment of a file with what the command line adds to every deployment:
        --with/--without join the file's; --cudnn and --env-profile apply where the file gives
        none (a deployment that gives its own as well is an error: neither is dropped silently)."""
        out = replace(self, with_packages=(*request.with_packages, *self.with_packages),
                      without_packages=(*request.without_packages, *self.without_packages))
        for field, option in (("cudnn", "--cudnn"), ("env_profile", "--env-profile")):
            given = getattr(request, field)
            if given is None:
                continue
            if getattr(self, field) is not None and getattr(self, field) != given:
                raise InputError(f"deployment {self.name!r} sets {field} {getattr(self, field)!r} and the command line "
                                 f"{option} {given}: give it in one place")
            out = replace(out, **{field: given})
        return out

    def label(self) -> str:
        if self.name:
            return self.name
        parts = [self.arch, self.model or "(model from --launch)", *self.sets]
        return " · ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "arch": self.arch, "model": self.model, "cuda": self.cuda,
            **({"driver": self.driver} if self.driver is not None else {}),
            **({"cudnn": self.cudnn} if self.cudnn is not None else {}),
            **({"env_profile": self.env_profile} if self.env_profile is not None else {}),
            "set": list(self.sets), "launch": self.launch, "env": list(self.env),
            "with": list(self.with_packages), "without": list(self.without_packages),
            "flags": {k: v for k, v in self.typed_flags},
        }


_DEPLOYMENT_KEYS = ("name", "arch", "model", "cuda", "driver", "cudnn", "env_profile", "flags", "launch", "env", "with",
                    "without")


def load_deployments(path: Path) -> list[Deployment]:
    """Read and validate a YAML or TOML deployment file; every problem is one InputError
    line naming the file (and the deployment)."""
    try:
        text = read_user_file(path, "deployment file", _MAX_DEPLOYMENT_FILE).decode("utf-8")
    except UserFileError as exc:
        raise InputError(exc.message) from None
    except UnicodeDecodeError:
        raise InputError(f"deployment file {path}: not UTF-8 text") from None
    suffix = path.suffix.lower()
    data: Any
    if suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"deployment file {path}: not valid TOML ({exc})") from None
    elif suffix in (".yaml", ".yml"):
        try:
            data = safe_yaml_load(text)
        except yaml.YAMLError as exc:
            raise InputError(f"deployment file {path}: not valid YAML ({' '.join(str(exc).split())})") from None
    else:
        raise InputError(f"deployment file {path}: unknown file type {suffix or '(none)'!r}; use .yaml, .yml or .toml")

    def fail(problem: str) -> InputError:
        return InputError(f"deployment file {path}: {problem}")

    if isinstance(data, dict):
        extra = sorted(set(data) - {"deployments"})
        if extra:
            raise fail(f"unknown top-level key {extra[0]!r} (expected 'deployments')")
        data = data.get("deployments")
    if not isinstance(data, list) or not data:
        raise fail("expected a non-empty list 'deployments' (each with name, arch, model, and flags or launch)")
    out: list[Deployment] = []
    seen: set[str] = set()
    for idx, entry in enumerate(data, 1):
        dep = _deployment(entry, idx, fail)
        if dep.name in seen:
            raise fail(f"deployment {idx}: duplicate name {dep.name!r}")
        seen.add(dep.name)
        out.append(dep)
    return out


def _deployment(entry: Any, idx: int, fail: Callable[[str], InputError]) -> Deployment:
    if not isinstance(entry, dict):
        raise fail(f"deployment {idx}: expected a mapping, found {type(entry).__name__}")
    name = entry.get("name")
    where = f"deployment {idx}" + (f" ({name!r})" if isinstance(name, str) else "")
    for key in entry:
        if key not in _DEPLOYMENT_KEYS:
            close = difflib.get_close_matches(str(key), _DEPLOYMENT_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise fail(f"{where}: unknown key {key!r}{hint}; allowed: {', '.join(_DEPLOYMENT_KEYS)}")
    if not isinstance(name, str) or not name.strip():
        raise fail(f"{where}: 'name' is required (a non-empty string)")
    arch = entry.get("arch")
    if not isinstance(arch, str) or not arch.strip():
        raise fail(f"{where}: 'arch' is required (e.g. sm120)")
    cuda = entry.get("cuda", DEFAULT_CUDA)
    if isinstance(cuda, bool) or not isinstance(cuda, (str, int, float)):
        raise fail(f"{where}: 'cuda' must be a string such as \"12.9\"")
    cuda = str(cuda)
    driver = entry.get("driver")
    if driver is not None and (isinstance(driver, bool) or not isinstance(driver, (str, int, float))):
        raise fail(f"{where}: 'driver' must be a string such as \"580.95.05\"")
    driver = None if driver is None else str(driver)
    cudnn = entry.get("cudnn")
    if cudnn is not None and (isinstance(cudnn, bool) or not isinstance(cudnn, (str, int, float))):
        raise fail(f"{where}: 'cudnn' must be a string such as \"9.10.2\"")
    cudnn = None if cudnn is None else str(cudnn)
    try:
        # bad arch/cuda/driver/cudnn: say so now, naming the file
        parse_device(arch, cuda, driver=driver, cudnn=cudnn)
    except InputError as exc:
        raise fail(f"{where}: {exc}") from None
    env_profile = entry.get("env_profile")
    if env_profile is not None:
        from sglang_audit.inputs.profiles import profile_names

        if env_profile not in profile_names():
            raise fail(f"{where}: 'env_profile' must be one of {', '.join(profile_names())}, not {env_profile!r}")
    model = entry.get("model")
    launch = entry.get("launch")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise fail(f"{where}: 'model' must be a string (a model directory or a bundled profile)")
    if launch is not None and (not isinstance(launch, str) or not launch.strip()):
        raise fail(f"{where}: 'launch' must be a launch command string")
    if model is None and launch is None:
        raise fail(f"{where}: give 'model' (or a 'launch' command with --model-path)")
    sets: list[str] = []
    typed: list[tuple[str, Any]] = []
    flags = entry.get("flags", {})
    if flags is None:
        flags = {}
    if not isinstance(flags, dict):
        raise fail(f"{where}: 'flags' must be a mapping of setting to value (use 'launch' for a command line)")
    for key, value in flags.items():
        if not isinstance(key, str) or not key.strip():
            raise fail(f"{where}: flag names must be strings, found {key!r}")
        if isinstance(value, (list, dict)):
            # no KEY=VALUE spelling for these: passed typed, by field name
            typed.append((key.strip().lstrip("-").replace("-", "_"), value))
        else:
            sets.append(f"{key}={_flag_text(value)}")
    env = entry.get("env", {})
    env_items: list[str] = []
    if isinstance(env, dict):
        for k, v in env.items():
            if not isinstance(k, str) or not k or isinstance(v, (list, dict)):
                raise fail(f"{where}: 'env' must map variable names to scalar values")
            env_items.append(f"{k}={_flag_text(v) if not isinstance(v, str) else v}")
    elif isinstance(env, list) and all(isinstance(e, str) and "=" in e for e in env):
        env_items = list(env)
    else:
        raise fail(f"{where}: 'env' must be a mapping NAME: VALUE (or a list of NAME=VALUE)")
    packs: dict[str, tuple[str, ...]] = {}
    for key in ("with", "without"):
        val = entry.get(key, [])
        if isinstance(val, str):
            val = [val]
        if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
            raise fail(f"{where}: '{key}' must be a package name or a list of them")
        packs[key] = tuple(val)
    return Deployment(name.strip(), arch.strip(), model, cuda, tuple(sets), launch, tuple(env_items),
                      packs["with"], packs["without"], tuple(typed), driver, cudnn, env_profile)


def _flag_text(value: Any) -> str:
    # the release's own parser types the text (bool/int/choices), as on a command line
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "None"
    return str(value)
