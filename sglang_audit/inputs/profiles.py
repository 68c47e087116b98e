"""Named environment profiles (``rules/env_profiles.toml``, issue 43): the packages and
environment variables a deployment's Python environment has beyond the release's own
requirements, each with its source. "pip" is the release's Requires-Dist alone (read by
``resolve/release.build_environment``); "image" is SGLang's official docker image for the
platform, as its Dockerfile installs and sets it. The device's platform picks the default
(ROCm: the image, where aiter is installed and ``SGLANG_USE_AITER=1``; CUDA: pip)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from sglang_audit import factfiles
from sglang_audit.errors import InputError

if TYPE_CHECKING:
    from sglang_audit.inputs.device import Environment

RULES = "env_profiles.toml"


@dataclass(frozen=True)
class Profile:
    """One profile as it applies to one release on one platform."""

    name: str
    platform: str
    summary: str  # "SGLang's ROCm image (docker/rocm.Dockerfile)", "a plain pip install of the release"
    chosen: str  # "--env-profile image", "the default for hip"
    installed: tuple[tuple[str, str], ...] = ()  # import name, source
    absent: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str, str], ...] = ()  # name, value, source
    read: tuple[str, ...] = ()  # the sources read (Dockerfile versions)
    note: str = ""  # e.g. why the default fell back to pip

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "summary": self.summary, "chosen": self.chosen,
            "installed": [{"package": p, "source": s} for p, s in self.installed],
            "absent": [{"package": p, "source": s} for p, s in self.absent],
            "env": [{"name": n, "value": v, "source": s} for n, v, s in self.env],
            "read": list(self.read), **({"note": self.note} if self.note else {}),
        }


def profile_names() -> list[str]:
    return sorted(factfiles.env_profiles().profile)


def _in_bounds(fact: Any, version: Version | None) -> bool:
    """Whether a fact with ``since``/``until`` (validated release versions) holds for ``version``."""
    if version is None:
        return fact.since is None and fact.until is None
    if fact.since is not None and version < Version(fact.since):
        return False
    return not (fact.until is not None and version >= Version(fact.until))


def _version(release: str | None) -> Version | None:
    try:
        return Version(release) if release else None
    except InvalidVersion:
        return None


def select(name: str | None, platform: str, release: str | None) -> Profile:
    """The profile ``name`` (None: the platform's default) for ``release`` on ``platform``.
    An image with no sourced facts for the release: an input error when asked for by name,
    the pip profile (saying why) when it is the default."""
    spec = factfiles.env_profiles()
    profiles = spec.profile
    if name is not None and name not in profiles:
        import difflib  # for the message only

        close = difflib.get_close_matches(name, list(profiles), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(f"unknown --env-profile {name!r}{hint}: choose one of {', '.join(sorted(profiles))}")
    chosen = f"--env-profile {name}" if name is not None else f"the default for {platform}"
    if name is None:
        name = next((n for n, p in profiles.items() if platform in p.default_for), "pip")
    version = _version(release)
    pip = Profile("pip", platform, profiles["pip"].summary, chosen)
    if name == "pip":
        return pip
    image = spec.image.get(platform)
    if image is None or not _in_bounds(image, version):
        reason = (f"no SGLang image for platform {platform} is recorded in rules/{RULES}" if image is None else
                  f"rules/{RULES} records {image.name} for releases {image.since}+ (read: {image.dockerfile}), not {release}")
        if chosen.startswith("--env-profile"):
            raise InputError(f"--env-profile {name}: {reason}")
        return dataclasses.replace(pip, note=f"{reason}, so a plain pip install")
    where = image.dockerfile
    facts = [f for f in image.package if _in_bounds(f, version)]
    return Profile(
        name, platform, f"{image.name}, {where}", chosen,
        installed=tuple((f.name, f"{where}: {f.source}") for f in facts if f.installed),
        absent=tuple((f.name, f"{where}: {f.source}") for f in facts if not f.installed),
        env=tuple((f.name, f.value, f"{where}: {f.source}") for f in image.env if _in_bounds(f, version)),
        read=image.read,
    )


def apply(environment: Environment, profile: Profile, user_env: dict[str, str]) -> Environment:
    """``environment`` (the release's own requirements, --with/--without) with the profile's
    packages and environment variables; the user's ``--env``, ``--with`` and ``--without`` win."""
    installed = set(environment.installed) | {p for p, _ in profile.installed}
    installed -= {p for p, _ in profile.absent if p not in environment.extra}
    env = {n: v for n, v, _ in profile.env}
    env.update(user_env)
    return dataclasses.replace(
        environment, env=tuple(sorted(env.items())), installed=frozenset(installed), profile=profile)


def assumption(environment: Environment, top: str, state: bool | None) -> str | None:
    """The state of optional package ``top`` as the environment profile decides it, with
    its source ("aiter: installed (SGLang's ROCm image, docker/rocm.Dockerfile; ...)");
    None where the profile says nothing (resolve/stage_common.package_assumption words it).
    Forks (resolve/pipeline.package_forks) evaluate an absent state, never an installed one."""
    profile = environment.profile
    if profile is None or top in environment.extra or top in environment.missing:
        return None
    if state and top in dict(profile.installed):
        return f"{top}: installed ({profile.summary}; --without {top} evaluates its absence)"
    if state is False and top in dict(profile.absent):
        return f"{top}: absent ({profile.summary} does not install it; --with {top} evaluates it installed)"
    if state is False and profile.name != "pip":
        return (f"{top}: absent (neither a plain install of this release nor {profile.summary} "
                f"installs it; --with {top} evaluates it installed)")
    return None
