"""What a release is, before any evaluation: its resolution structure (``rules/eras.toml``'s
fingerprints of the tree), whether the tool has validated it, the Python environment a
deployment of it has (its own requirements, the environment profile, --with/--without), and
whether its model registry can load the model's architecture at all."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from sglang_audit import factfiles
from sglang_audit.inputs.device import Environment
from sglang_audit.inputs.modeldir import model_checkpoint
from sglang_audit.resolve.targets import Target
from sglang_audit.source.metadata import requirements


def detect_structure(root: Path) -> str:
    """Name the resolution structure from what the tree contains (never the version), by the
    fingerprints in rules/eras.toml."""
    texts: dict[str, str] = {}

    def holds(cond: factfiles.Fingerprint) -> bool:
        if cond.exists:
            return (root / cond.exists).exists()
        if cond.missing:
            return not (root / cond.missing).exists()
        rel = cond.file
        if rel not in texts:
            path = root / rel
            texts[rel] = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        if cond.contains:
            return cond.contains in texts[rel]
        return re.search(cond.regex, texts[rel]) is not None

    for era in factfiles.eras().era:
        if any(all(holds(c) for c in conds) for conds in era.alternatives):
            return era.name
    return "unrecognised"


def below_validated(version: Any) -> str | None:
    """A note for a release older than the oldest the tool's checks cover (rules/eras.toml
    ``oldest_validated``); None for a newer one or a version that does not parse (a checkout)."""

    floor = factfiles.eras().oldest_validated
    if not isinstance(version, str) or not floor:
        return None
    try:
        below = Version(version) < Version(floor)
    except InvalidVersion:
        return None
    if not below:
        return None
    return (f"SGLang {version} is older than {floor}, the oldest release this tool's era table, oracle agreement "
            f"and release runs cover (docs/eras.md): its answers for {version} are not validated")


def unregistered_architecture(root: Path, model_dir: Path, architecture: Any, env: dict[str, str]) -> str | None:
    """A note when no module of the release's model package defines a class named as the
    model's architecture (config.json's ``architectures[0]`` when ServerArgs stopped before
    reading it): SGLang's registry (EntryClass of ``sglang.srt.models.*``) cannot map it, so
    the release can load the model only through a fallback (the Transformers backend, where
    the release has one) or not at all. Absence is what is said; a defined class is not
    claimed to be registered (the layer stage derives that by evaluation)."""
    arch = architecture if isinstance(architecture, str) else None
    if arch is None:
        arch = model_checkpoint(model_dir).architecture
    models = root / "sglang" / "srt" / "models"
    spec = factfiles.layers().model_registry
    if arch is None or not models.is_dir() or spec.external_env in env:
        return None
    needle = f"class {arch}("
    for path in models.rglob("*.py"):
        try:
            if needle in path.read_text(encoding="utf-8", errors="replace"):
                return None
        except OSError:
            return None
    return (f"model architecture {arch}: no module of sglang/srt/models defines it, so this release's model "
            "registry cannot load it natively (a fallback such as the Transformers backend, where the release has "
            "one, or a failure at model load)")


def build_environment(target: Target) -> Environment:
    """Installed import names and versions: the release's own unconditional requirements."""
    spec = factfiles.packages()
    import_names = spec.import_names
    installed: set[str] = set(spec.base.installed)
    default_extras = set(spec.base.default_extras)
    versions: list[tuple[str, str]] = []
    dists: set[str] = set()
    for dist, _extra, version_spec, marker in requirements(target.source.package_dir):
        extra_name = re.search(r"extra\s*==\s*[\"']([^\"']+)", marker or "")
        if extra_name and extra_name.group(1) not in default_extras:
            continue
        if marker and not extra_name and ("aarch64" in marker and "!=" not in marker or "darwin" in marker):
            continue
        name = import_names.get(dist, import_names.get(dist.lower(), dist.lower().replace("-", "_")))
        installed.add(name)
        dists.add(dist.lower().replace("_", "-"))
        m = re.match(r"==\s*([^,\s]+)", version_spec.strip())
        if m:
            versions.append((dist, m.group(1)))
    if target.device.platform != "cuda":
        # GPU-vendor packages pinned for CUDA are not what a ROCm/NPU/XPU/CPU image carries
        installed -= {"flashinfer", "sgl_kernel", "flash_attn", "deep_gemm", "cutlass", "cuda", "quack"}
    namespaces = tuple(
        (name, ns.submodules) for name, ns in sorted(spec.namespace.items())
        if name in installed and ns.by in dists and name not in target.with_packages
        and not dists & {d.lower().replace("_", "-") for d in ns.full})
    from sglang_audit.inputs import profiles

    # the environment profile (rules/env_profiles.toml): its packages and variables, under the user's
    profile = profiles.select(getattr(target, "env_profile", None), target.device.platform,
                              getattr(target.source, "version", None))
    return profiles.apply(Environment(
        env=tuple(sorted(target.env.items())),
        installed=frozenset(installed),
        versions=tuple(versions),
        extra=target.with_packages,
        missing=target.without_packages,
        namespaces=namespaces,
    ), profile, dict(target.env))


def torch_version(env: Environment) -> str:
    for dist, ver in env.versions:
        if dist.lower() == "torch":
            return ver
    return "2.9.1"
