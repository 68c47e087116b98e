"""Locate the SGLang source to analyse: a checkout, a wheel/sdist, ``sglang==X`` or the install.

SGLang is never imported or executed here: archives are read with zipfile/tarfile and
written out member by member after safety checks, and versions and the FlashInfer pin
are scanned from metadata files as text.

Downloading and extracting are ``archives.py``'s (shared with the FlashInfer and
transformers sources); the modules they need are imported only there, so a run that finds
its release extracted and verified (every result-cache hit) does not pay for them.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from sglang_audit.cachedir import cache_root, writable_subdir
from sglang_audit.errors import SourceError
from sglang_audit.source.archives import (
    ARCHIVE_SUFFIXES,
    archive_kind,
    archive_sha256,
    download_to_cache,
    extract_tar,
    extract_zip,
    pip_download,
    pip_failure,
    retire,
    sweep_stale,
    within,
)
from sglang_audit.source.extracted import MARKER as _MARKER
from sglang_audit.source.extracted import verified
from sglang_audit.source.metadata import read_metadata

if TYPE_CHECKING:
    import subprocess


_HINT = "pass --source DIR|WHEEL|sglang==X"

# Archive members worth keeping: the package (wheel `sglang/`, sdist `NAME/sglang/`,
# repo-style `NAME/python/sglang/`) and the files that carry the version and pins.
_KEEP = re.compile(
    r"(?:[^/]+/)?(?:python/)?sglang/.+"
    r"|[^/]+\.dist-info/METADATA"
    r"|(?:[^/]+/)?(?:python/)?pyproject\.toml"
    r"|(?:[^/]+/)?PKG-INFO"
)
_PIN_SPEC = re.compile(r"\s*sglang\s*==\s*(\S+?)\s*", re.IGNORECASE)


@dataclass(frozen=True)
class SourceTree:
    package_dir: Path  # the directory named `sglang` (contains srt/server_args.py)
    version: str | None  # SGLang version
    flashinfer: str | None  # pinned flashinfer_python version, e.g. "0.6.7.post2", or None
    origin: str  # what the user passed, for display ("sglang==0.5.10", a path, "installed")
    # sha256 of the extraction manifest when the tree is the tool's own extracted copy and was
    # verified against it (``extracted.verified``): the tree's content, so the result cache
    # need not walk it a second time (``resultcache``). None: a checkout or an install.
    content_digest: str | None = field(default=None, compare=False)
    # that copy's directory and archive sha256, to verify it again later (a shared
    # SourceCache keeps the tree for many requests), and when it was verified
    # (time.monotonic())
    extraction: tuple[Path, str] | None = field(default=None, compare=False, repr=False)
    verified_at: float = field(default=0.0, compare=False, repr=False)

    def to_json(self) -> dict:
        return {
            "package_dir": str(self.package_dir),
            "version": self.version,
            "flashinfer": self.flashinfer,
            "origin": self.origin,
        }


def locate_source(spec: str | None, *, progress: Callable[[str], None] | None = None) -> SourceTree:
    """Find (downloading/extracting into the cache if needed) the SGLang package to analyse."""
    say: Callable[[str], None] = progress or (lambda _msg: None)
    if spec is None:
        return _locate_installed()
    text = spec.strip()
    if not text:
        raise SourceError(f"empty source spec; {_HINT}")
    pin = _PIN_SPEC.fullmatch(text)
    if pin:
        return _locate_release(pin.group(1), text, say)
    path = Path(text).expanduser()
    try:
        mode: int | None = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:  # permission denied, symlink loop, ...
        raise SourceError(f"cannot access {text}: {exc.strerror or exc}") from None
    if mode is not None and stat.S_ISDIR(mode):
        return _locate_checkout(path, text)
    if mode is not None and stat.S_ISREG(mode):
        return _locate_archive(path, text, say)
    if mode is not None:
        raise SourceError(f"not a directory, wheel or sdist: {text}")
    if _looks_like_requirement(text):
        raise SourceError(
            f"bad source spec {text!r}: expected sglang==X.Y.Z (an exact release), "
            "a directory, or a wheel/sdist file"
        )
    raise SourceError(f"source not found: {text}")


def _looks_like_requirement(text: str) -> bool:
    # `sglang>=0.5`, `sglang==` etc. are malformed pins; a missing `sglang-0.5.10-...whl`
    # or `./sglang` is a missing path and deserves the "not found" message instead.
    return (
        text.lower().startswith("sglang")
        and "/" not in text
        and os.sep not in text
        and not text.lower().endswith(ARCHIVE_SUFFIXES)
    )


# --------------------------------------------------------------------------- directories


def _package_at(candidate: Path, boundary: str) -> Path | None:
    """`candidate` resolved, if it is an SGLang package dir that stays inside `boundary`.

    Symlinks are resolved (never followed blindly): the package and its
    srt/server_args.py must both resolve inside the tree, and the latter must be a
    regular file, so a link out of the tree or a symlink loop is simply not a match.
    """
    real = os.path.realpath(candidate)
    if not within(real, boundary):
        return None
    server_args = os.path.realpath(os.path.join(real, "srt", "server_args.py"))
    if not within(server_args, real):
        return None
    try:
        mode = os.stat(server_args).st_mode
    except OSError:
        return None
    return Path(real) if stat.S_ISREG(mode) else None


def _find_package(root: Path, *, archive_layouts: bool = False) -> Path | None:
    boundary = os.path.realpath(root)
    candidates = [root / "python" / "sglang", root / "sglang", root]
    if archive_layouts:
        # sdists and repo archives put everything under one top-level `NAME/` dir.
        tops = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
        candidates = [root / "sglang", root / "python" / "sglang"]
        candidates += [top / "sglang" for top in tops] + [top / "python" / "sglang" for top in tops]
    for candidate in candidates:
        found = _package_at(candidate, boundary)
        if found is not None:
            return found
    return None


def _locate_checkout(path: Path, origin: str) -> SourceTree:
    package = _find_package(path)
    if package is None:
        raise SourceError(
            f"no SGLang package found in {path} "
            "(expected python/sglang or sglang/srt/server_args.py)"
        )
    meta = sorted(package.parent.glob("sglang-*.dist-info/METADATA"))
    version, flashinfer = read_metadata(
        package, meta, [package.parent / "sglang.egg-info" / "PKG-INFO"]
    )
    return SourceTree(package, version, flashinfer, origin)


def _locate_installed() -> SourceTree:
    # find_spec on a top-level name only consults the path finders: sglang/__init__.py
    # is not executed (find_spec on a submodule would import the parent, so never do that).
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise SourceError(f"no --source given and no installed sglang found; {_HINT}")
    for location in locations:
        package = _package_at(Path(location), os.path.realpath(location))
        if package is not None:
            meta = sorted(package.parent.glob("sglang-*.dist-info/METADATA"))
            version, flashinfer = read_metadata(package, meta)
            return SourceTree(package, version, flashinfer, "installed")
    raise SourceError(f"installed sglang at {locations[0]} has no srt/server_args.py; {_HINT}")


# --------------------------------------------------------------------------- releases


def _locate_release(raw_version: str, origin: str, say: Callable[[str], None]) -> SourceTree:
    try:
        version = str(Version(raw_version))
    except InvalidVersion:
        raise SourceError(
            f"bad source spec {origin!r}: expected sglang==X.Y.Z (an exact release)"
        ) from None
    label = f"sglang=={version}"
    archive = _cached_release(version) or _download_release(version, label, say)
    return _locate_archive(archive, origin, say)


def _cached_release(version: str) -> Path | None:
    wheels = cache_root() / "wheels"
    stem = glob.escape(f"sglang-{version}")
    # Any wheel will do (the Python source is the same on every platform); prefer wheels
    # to an sdist left by an earlier no-binary fallback.
    for pattern in (f"{stem}-*.whl", f"{stem}.tar.gz", f"{stem}.zip"):
        found = sorted(wheels.glob(pattern))
        if found:
            return found[0]
    return None


def _download_release(version: str, label: str, say: Callable[[str], None]) -> Path:
    def fetch(staging: Path) -> subprocess.CompletedProcess[str]:
        result = pip_download(version, label, staging, binary_only=True)
        if result.returncode != 0 and pip_failure(result) == "not-found":
            # No wheel for this interpreter/platform (e.g. cp311-only releases): the sdist
            # carries the same Python source.
            say(f"no compatible wheel of {label} found; trying the source distribution ...")
            result = pip_download(version, label, staging, binary_only=False)
        return result

    return download_to_cache(label, say, fetch)


# --------------------------------------------------------------------------- archives


def _locate_archive(path: Path, origin: str, say: Callable[[str], None]) -> SourceTree:
    sources = writable_subdir("sources")
    if sources is None:
        raise SourceError(f"cache dir {cache_root()} is not writable; set SGLANG_AUDIT_CACHE_DIR")
    archive_sha = archive_sha256(path)
    # the last 16 hex digits: copies extracted with a manifest never share a directory with
    # the manifest-less ones of earlier versions, which may be in use from the same cache
    root = sources / archive_sha[-16:]
    complete = (root / _MARKER).is_file()
    package = _find_package(root, archive_layouts=True) if complete else None
    checked_at = time.monotonic()
    digest = verified(root, archive_sha) if package is not None else None
    if package is not None and digest is None:
        say(f"the extracted copy of {path.name} in {root} differs from the archive; extracting again")
        package = None
    if package is None:
        if complete:  # a cached copy someone has damaged or edited: start over
            retire(root, sources)
        # what kind of archive matters (and is checked) only here: a copy verified against
        # the manifest of this sha256 was extracted from this very archive
        kind = archive_kind(path)
        say(f"extracting {path.name} into {root} ...")
        # verified, not taken from our own manifest: a concurrent run may have won the rename
        _extract(path, kind, root, sources, archive_sha)
        package = _find_package(root, archive_layouts=True)
        checked_at = time.monotonic()
        digest = verified(root, archive_sha) if package is not None else None
    if package is None:  # _extract already checked this; only a concurrent deletion gets here
        raise SourceError(f"no SGLang package found in {path} (expected sglang/srt/server_args.py)")
    meta = [
        *sorted(root.glob("*.dist-info/METADATA")),
        *sorted(root.glob("*/PKG-INFO")),
        root / "PKG-INFO",
    ]
    version, flashinfer = read_metadata(package, meta)
    return SourceTree(package, version, flashinfer, origin, content_digest=digest, extraction=(root, archive_sha),
                      verified_at=checked_at)


def _extract(archive: Path, kind: str, root: Path, sources: Path, archive_sha: str) -> None:
    """Extract the useful members into `root`, atomically: temp dir, marker last, rename."""
    import shutil
    import tempfile

    sweep_stale(sources, ".extract-")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".extract-{root.name}-", dir=sources))
    except OSError as exc:
        raise SourceError(f"cannot write to {sources}: {exc.strerror or exc}") from None
    manifest: dict[str, str] = {}
    try:
        if kind == "zip":
            extract_zip(archive, tmp, manifest, _KEEP)
        else:
            extract_tar(archive, tmp, manifest, _KEEP)
        if _find_package(tmp, archive_layouts=True) is None:
            raise SourceError(
                f"no SGLang package found in {archive} (expected sglang/srt/server_args.py)"
            )
        marker = {"archive": archive.name, "archive_sha256": archive_sha, "files": manifest}
        (tmp / _MARKER).write_text(json.dumps(marker) + "\n")
        os.chmod(tmp, 0o755)  # mkdtemp made it private; the extracted tree is not secret
        try:
            os.rename(tmp, root)
        except OSError:
            if (root / _MARKER).is_file():  # a concurrent run finished first: use theirs
                shutil.rmtree(tmp, ignore_errors=True)
                return
            shutil.rmtree(root, ignore_errors=True)  # stale, incomplete leftover
            os.rename(tmp, root)
    except OSError as exc:  # disk full, permissions changed under us, ...
        shutil.rmtree(tmp, ignore_errors=True)
        raise SourceError(
            f"cannot extract {archive.name} into {root}: {exc.strerror or exc}"
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


