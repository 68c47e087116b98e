"""The sgl-kernel source SGLang calls (its Python wrappers), located like FlashInfer's
(``source/flashinfer.py``): the release's pin (``sgl-kernel``, ``sglang-kernel`` from 0.5.10,
as the release's own Requires-Dist names it) downloaded into the cache with ``pip download
--no-deps`` and only its ``sgl_kernel/*.py`` files extracted, or a wheel/directory the user
names. Never installed or imported: ``resolve/attnkernels.py`` reads the device checks its
wrappers make (``flash_attn.py``'s ``is_fa3_supported``)."""

from __future__ import annotations

import glob
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from sglang_audit.cachedir import cache_root
from sglang_audit.errors import SourceError
from sglang_audit.source.archives import (
    download_to_cache,
    extract_cached,
    pip_download,
    pip_failure,
    within,
)
from sglang_audit.source.metadata import dist_version

if TYPE_CHECKING:
    import subprocess

PACKAGE = "sgl_kernel"
# the distributions that ship the `sgl_kernel` package (renamed in SGLang 0.5.10's pin)
DISTS = ("sgl-kernel", "sglang-kernel")
# only the Python wrappers are read: the wheel's .so files (~370 MB) are never extracted
_KEEP = re.compile(r"(?:[^/]+/)?sgl_kernel/.+\.py|[^/]+\.dist-info/METADATA")
_HINT = "pass SGLANG_AUDIT_SGL_KERNEL_SOURCE=WHEEL|DIR"


@dataclass(frozen=True)
class SglKernelTree:
    package_dir: Path  # the directory named `sgl_kernel`
    version: str | None
    origin: str  # "sglang-kernel==X" or the path given


def locate_sgl_kernel(spec: str | None, pin: str | None, dist: str = "sglang-kernel", *,
                      progress: Callable[[str], None] | None = None) -> SglKernelTree:
    """``spec`` (a wheel or a directory holding ``sgl_kernel/``) when given, else
    ``dist==pin`` from the cache or the package index (downloaded, never installed)."""
    say: Callable[[str], None] = progress or (lambda _msg: None)
    if spec is None:
        if not pin:
            raise SourceError(f"the SGLang release pins no sgl-kernel version; {_HINT}")
        try:
            version = str(Version(pin))
        except InvalidVersion:
            raise SourceError(f"bad sgl-kernel pin {pin!r}; {_HINT}") from None
        label = f"{dist}=={version}"
        archive = _cached(version) or _download(version, dist, label, say)
        return _locate_archive(archive, label, say)
    path = Path(spec.strip()).expanduser()
    if path.is_dir():
        package = _package_in(path)
        if package is None:
            raise SourceError(f"no sgl_kernel package found in {path} (expected sgl_kernel/__init__.py)")
        return SglKernelTree(package, dist_version(sorted(package.parent.glob("*.dist-info/METADATA")), DISTS), spec)
    if path.is_file():
        return _locate_archive(path, spec, say)
    raise SourceError(f"sgl-kernel source not found: {spec}; {_HINT}")


def _package_at(candidate: Path, boundary: str) -> Path | None:
    real = os.path.realpath(candidate)
    if not within(real, boundary) or os.path.basename(real) != PACKAGE:
        return None
    member = os.path.realpath(os.path.join(real, "__init__.py"))
    try:
        if not (within(member, real) and stat.S_ISREG(os.stat(member).st_mode)):
            return None
    except OSError:
        return None
    return Path(real)


def _package_in(root: Path) -> Path | None:
    boundary = os.path.realpath(root)
    for candidate in (root / PACKAGE, root):
        found = _package_at(candidate, boundary)
        if found is not None:
            return found
    return None


def _cached(version: str) -> Path | None:
    wheels = cache_root() / "wheels"
    for dist in DISTS:
        stem = glob.escape(f"{dist.replace('-', '_')}-{version}")
        found = sorted(wheels.glob(f"{stem}-*.whl"))
        if found:
            return found[0]
    return None


def _download(version: str, dist: str, label: str, say: Callable[[str], None]) -> Path:
    def fetch(staging: Path) -> subprocess.CompletedProcess[str]:
        # wheels only: preparing an sdist's metadata would run its build backend (execute
        # the code we only read); the platform wheel is what a plain install gets
        result = pip_download(version, label, staging, binary_only=True, dist=dist)
        if result.returncode != 0 and pip_failure(result) == "not-found":
            raise SourceError(f"{label}: no wheel on the package index; {_HINT}")
        return result

    return download_to_cache(label, say, fetch)


def _locate_archive(path: Path, origin: str, say: Callable[[str], None]) -> SglKernelTree:
    missing = f"no sgl_kernel package found in {path} (expected sgl_kernel/__init__.py)"
    # size_of_skipped: the wheel's 1 GiB .so is left compressed, so it counts toward no limit
    root, package = extract_cached(path, _KEEP, _package_in, missing, say, size_of_skipped=False)
    return SglKernelTree(package, dist_version(sorted(root.glob("*.dist-info/METADATA")), DISTS), origin)
