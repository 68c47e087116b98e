"""The FlashInfer source SGLang calls, located like SGLang's (never installed or imported):
the release's pin downloaded into the cache, a wheel/sdist/checkout the user names, or the
installed package found with find_spec. resolve/kernels.py reads what it declares per GPU."""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import stat
from collections.abc import Callable, Iterable
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
from sglang_audit.source.metadata import (
    VERSION_PY,
    dist_version,
    read_text,
    valid_version,
)

if TYPE_CHECKING:
    import subprocess

# --------------------------------------------------------------------------- FlashInfer
# The kernel library SGLang calls, read (never imported) for what it declares per GPU
# (kernels.py). Located like SGLang: the release's pin downloaded into the cache, a
# wheel/sdist/checkout the user names, or the installed package found with find_spec.

_FI_KEEP = re.compile(
    r"(?:[^/]+/)?flashinfer/.+\.py"
    r"|[^/]+\.dist-info/METADATA"
    r"|(?:[^/]+/)?PKG-INFO"
)
_FI_HINT = "pass --flashinfer-source DIR|WHEEL|installed"


@dataclass(frozen=True)
class FlashInferTree:
    package_dir: Path  # the directory named `flashinfer` (contains utils.py)
    version: str | None  # the version read, e.g. "0.6.7.post2"
    origin: str  # "flashinfer-python==X", a path, or "installed"

    def to_json(self) -> dict:
        return {"package_dir": str(self.package_dir), "version": self.version, "origin": self.origin}


def locate_flashinfer(
    spec: str | None, pin: str | None, *, progress: Callable[[str], None] | None = None
) -> FlashInferTree:
    """The FlashInfer source to read: ``spec`` (a path or ``installed``) when given, else
    ``flashinfer-python==pin`` from the cache or the package index (downloaded, never installed)."""
    say: Callable[[str], None] = progress or (lambda _msg: None)
    if spec is None:
        if not pin:
            raise SourceError(f"the SGLang release pins no flashinfer-python version; {_FI_HINT}")
        try:
            version = str(Version(pin))
        except InvalidVersion:
            raise SourceError(f"bad flashinfer-python pin {pin!r}; {_FI_HINT}") from None
        label = f"flashinfer-python=={version}"
        archive = _cached_flashinfer(version) or _download_flashinfer(version, label, say)
        return _locate_fi_archive(archive, label, say)
    text = spec.strip()
    if text == "installed":
        return _locate_fi_installed()
    path = Path(text).expanduser()
    if path.is_dir():
        package = _find_fi_package(path, archive_layouts=False) or _find_fi_package(path, archive_layouts=True)
        if package is None:
            raise SourceError(f"no FlashInfer package found in {path} (expected flashinfer/utils.py)")
        metas = [*sorted(package.parent.glob("flashinfer_python-*.dist-info/METADATA")), package.parent / "PKG-INFO"]
        return FlashInferTree(package, _fi_version(package, metas), text)
    if path.is_file():
        return _locate_fi_archive(path, text, say)
    raise SourceError(f"FlashInfer source not found: {text}; {_FI_HINT}")


def _fi_package_at(candidate: Path, boundary: str) -> Path | None:
    real = os.path.realpath(candidate)
    if not within(real, boundary) or os.path.basename(real) != "flashinfer":
        return None
    for name in ("__init__.py", "utils.py"):
        member = os.path.realpath(os.path.join(real, name))
        try:
            if not (within(member, real) and stat.S_ISREG(os.stat(member).st_mode)):
                return None
        except OSError:
            return None
    return Path(real)


def _find_fi_package(root: Path, *, archive_layouts: bool) -> Path | None:
    boundary = os.path.realpath(root)
    candidates = [root / "flashinfer", root]
    if archive_layouts:
        tops = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
        candidates = [root / "flashinfer", *[top / "flashinfer" for top in tops]]
    for candidate in candidates:
        found = _fi_package_at(candidate, boundary)
        if found is not None:
            return found
    return None


def _locate_fi_installed() -> FlashInferTree:
    # find_spec on the top-level name consults the path finders only (nothing executed)
    try:
        spec = importlib.util.find_spec("flashinfer")
    except (ImportError, ValueError):
        spec = None
    for location in list(spec.submodule_search_locations or []) if spec is not None else []:
        package = _fi_package_at(Path(location), os.path.realpath(location))
        if package is not None:
            metas = sorted(package.parent.glob("flashinfer_python-*.dist-info/METADATA"))
            return FlashInferTree(package, _fi_version(package, metas), "installed")
    raise SourceError(f"no installed flashinfer found; {_FI_HINT}")


def _cached_flashinfer(version: str) -> Path | None:
    wheels = cache_root() / "wheels"
    for stem in (f"flashinfer_python-{version}", f"flashinfer-python-{version}"):
        stem = glob.escape(stem)
        for pattern in (f"{stem}-*.whl", f"{stem}.tar.gz"):
            found = sorted(wheels.glob(pattern))
            if found:
                return found[0]
    return None


def _download_flashinfer(version: str, label: str, say: Callable[[str], None]) -> Path:
    def fetch(staging: Path) -> subprocess.CompletedProcess[str]:
        # wheels only: FlashInfer's wheels are pure Python (py3-none-any), and preparing an
        # sdist's metadata would run its build backend, i.e. execute the code we only read
        result = pip_download(version, label, staging, binary_only=True, dist="flashinfer-python")
        if result.returncode != 0 and pip_failure(result) == "not-found":
            raise SourceError(f"{label}: no wheel on the package index; {_FI_HINT}")
        return result

    return download_to_cache(label, say, fetch)


def _locate_fi_archive(path: Path, origin: str, say: Callable[[str], None]) -> FlashInferTree:
    root, package = extract_cached(path, _FI_KEEP, lambda d: _find_fi_package(d, archive_layouts=True),
                                   f"no FlashInfer package found in {path} (expected flashinfer/utils.py)", say)
    metas = [*sorted(root.glob("*.dist-info/METADATA")), *sorted(root.glob("*/PKG-INFO")), root / "PKG-INFO"]
    return FlashInferTree(package, _fi_version(package, metas), origin)


def _fi_version(package: Path, metas: Iterable[Path]) -> str | None:
    found = dist_version(metas, ("flashinfer-python",))
    if found is not None:
        return found
    for fname in ("_build_meta.py", "version.py"):  # the generated file first
        text = read_text(package / fname)
        match = VERSION_PY.search(text) if text else None
        if match and valid_version(match.group(1)):
            return match.group(1)
    return None
