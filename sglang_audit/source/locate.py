"""Locate the SGLang source to analyse: a checkout, a wheel/sdist, ``sglang==X`` or the install.

SGLang is never imported or executed here: archives are read with zipfile/tarfile and
written out member by member after safety checks, and versions and the FlashInfer pin
are scanned from metadata files as text.

The modules only a download or an extraction needs (subprocess, tempfile, shutil, zipfile,
tarfile, the download watch) are imported there: a run that finds its release extracted
and verified (every result-cache hit) does not pay for them.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import re
import stat
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from sglang_audit.cachedir import TooLarge, cache_root, stamp_index, writable_subdir
from sglang_audit.errors import SourceError
from sglang_audit.source.extracted import MARKER as _MARKER
from sglang_audit.source.extracted import verified
from sglang_audit.source.metadata import read_metadata

if TYPE_CHECKING:
    import subprocess
    import zipfile

# Extraction limits (module-level so tests can lower them). Real wheels are far below:
# SGLang 0.5.23 holds ~120 MiB in total, its largest member is ~24 MiB, and no member
# compresses better than ~5:1.
MAX_MEMBER_BYTES = 200 * 2**20
MAX_TOTAL_BYTES = 2 * 2**30
MAX_RATIO = 100
RATIO_MIN_BYTES = 2**20  # tiny members may compress absurdly well without being bombs
DOWNLOAD_TIMEOUT = 300

_STALE_TEMP_SECONDS = 24 * 3600
_CHUNK = 2**20
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
_ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar")


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
        and not text.lower().endswith(_ARCHIVE_SUFFIXES)
    )


# --------------------------------------------------------------------------- directories


def _within(path: str, root: str) -> bool:
    root = root.rstrip(os.sep) or os.sep
    return path == root or path.startswith(root if root == os.sep else root + os.sep)


def _package_at(candidate: Path, boundary: str) -> Path | None:
    """`candidate` resolved, if it is an SGLang package dir that stays inside `boundary`.

    Symlinks are resolved (never followed blindly): the package and its
    srt/server_args.py must both resolve inside the tree, and the latter must be a
    regular file, so a link out of the tree or a symlink loop is simply not a match.
    """
    real = os.path.realpath(candidate)
    if not _within(real, boundary):
        return None
    server_args = os.path.realpath(os.path.join(real, "srt", "server_args.py"))
    if not _within(server_args, real):
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


_NOT_FOUND_HINTS = ("No matching distribution", "Could not find a version")
_NETWORK_HINTS = (
    "Retrying (",
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Max retries exceeded",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ProxyError",
    "SSLError",
    "Network is unreachable",
    "Connection refused",
    "connection broken",
)


def _download_release(version: str, label: str, say: Callable[[str], None]) -> Path:
    def fetch(staging: Path) -> subprocess.CompletedProcess[str]:
        result = _pip_download(version, label, staging, binary_only=True)
        if result.returncode != 0 and _pip_failure(result) == "not-found":
            # No wheel for this interpreter/platform (e.g. cp311-only releases): the sdist
            # carries the same Python source.
            say(f"no compatible wheel of {label} found; trying the source distribution ...")
            result = _pip_download(version, label, staging, binary_only=False)
        return result

    return download_to_cache(label, say, fetch)


def download_to_cache(label: str, say: Callable[[str], None],
                      fetch: Callable[[Path], subprocess.CompletedProcess[str]]) -> Path:
    """Run ``fetch`` (a ``pip download`` into the staging dir it is given) and move the one
    archive it leaves into ``<cache>/wheels``."""
    import shutil
    import tempfile

    from sglang_audit.source.download_watch import DownloadWatch, format_bytes

    wheels = writable_subdir("wheels")
    if wheels is None:
        raise SourceError(f"cache dir {cache_root()} is not writable; set SGLANG_AUDIT_CACHE_DIR")
    say(f"downloading {label} from the package index ...")
    _sweep_stale(wheels, ".download-")
    # pip writes into a private staging dir that is moved into place only when complete,
    # so an interrupted download never leaves a truncated wheel for the cache lookup.
    try:
        staging = Path(tempfile.mkdtemp(prefix=".download-", dir=wheels))
    except OSError as exc:
        raise SourceError(f"cannot write to {wheels}: {exc.strerror or exc}") from None
    try:
        with DownloadWatch(label, staging, say, _ARCHIVE_SUFFIXES):
            result = fetch(staging)
        if result.returncode != 0:
            raise _download_error(label, result)
        files = sorted(
            p
            for p in staging.iterdir()
            if p.is_file() and p.name.lower().endswith(_ARCHIVE_SUFFIXES)
        )
        if not files:
            raise SourceError(f"{label}: pip reported success but left no wheel or sdist")
        target = wheels / files[0].name
        try:
            size = files[0].stat().st_size
            os.replace(files[0], target)
        except OSError as exc:
            raise SourceError(f"cannot write {target}: {exc.strerror or exc}") from None
        say(f"downloaded {label} ({format_bytes(size)})")
        return target
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _pip_download(
    version: str, label: str, dest: Path, *, binary_only: bool, dist: str = "sglang"
) -> subprocess.CompletedProcess[str]:
    import subprocess

    from sglang_audit.source.download_watch import PIP_TMP

    cmd = [sys.executable, "-m", "pip", "download", "--no-deps"]
    if binary_only:
        cmd.append("--only-binary=:all:")
    cmd += ["-d", str(dest), f"{dist}=={version}"]
    # Never prompt (e.g. for index credentials): stdin is closed and PIP_NO_INPUT set.
    env = {**os.environ, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # pip downloads into TMPDIR before copying into -d: keep that inside the staging dir so
    # the bytes so far can be shown (_DownloadWatch) and a killed pip leaves nothing elsewhere
    tmp = dest / PIP_TMP
    try:
        tmp.mkdir(exist_ok=True)
        env["TMPDIR"] = str(tmp)
    except OSError:
        pass  # pip then uses the system temp dir; only the byte count is lost
    try:
        return subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=DOWNLOAD_TIMEOUT,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SourceError(
            f"{label}: download failed (no network?): pip timed out after {DOWNLOAD_TIMEOUT} s"
        ) from None
    except OSError as exc:
        raise SourceError(f"{label}: download failed: cannot run pip: {exc}") from None


def _pip_failure(result: subprocess.CompletedProcess[str]) -> str:
    output = f"{result.stderr or ''}\n{result.stdout or ''}"
    # Offline pip also ends with "No matching distribution" (it saw no versions at all),
    # so connection trouble wins over the not-found wording.
    if any(hint in output for hint in _NETWORK_HINTS):
        return "network"
    if any(hint in output for hint in _NOT_FOUND_HINTS):
        return "not-found"
    return "other"


def _download_error(label: str, result: subprocess.CompletedProcess[str]) -> SourceError:
    kind = _pip_failure(result)
    if kind == "not-found":
        return SourceError(f"{label}: no such release on the package index")
    lines = [ln.strip() for ln in (result.stderr or result.stdout or "").splitlines() if ln.strip()]
    reason = lines[-1] if lines else f"pip exited with status {result.returncode}"
    if kind == "network":
        # The last line is then just "No matching distribution"; the cause is earlier.
        both = f"{result.stderr or ''}\n{result.stdout or ''}".splitlines()
        causes = [ln.strip() for ln in both if any(h in ln for h in _NETWORK_HINTS)]
        reason = causes[-1] if causes else reason
    if "No module named pip" in reason:
        return SourceError(f"{label}: download failed: pip is not available for {sys.executable}")
    reason = reason.removeprefix("ERROR: ").removeprefix("WARNING: ")
    if len(reason) > 300:
        reason = reason[:297] + "..."
    return SourceError(f"{label}: download failed (no network?): {reason}")


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
            _retire(root, sources)
        # what kind of archive matters (and is checked) only here: a copy verified against
        # the manifest of this sha256 was extracted from this very archive
        kind = _archive_kind(path)
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


def _archive_kind(path: Path) -> str:
    import tarfile
    import zipfile

    try:
        if zipfile.is_zipfile(path):
            return "zip"
        if tarfile.is_tarfile(path):
            return "tar"
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    raise SourceError(f"not a wheel or sdist archive (zip or tar): {path}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    return digest.hexdigest()


def archive_sha256(path: Path) -> str:
    """sha256 of a downloaded archive, re-read only when its stamp changed
    (``cachedir.StampIndex``): hashing a 0.5.23 wheel costs ~35 ms on every run."""
    try:
        st = os.stat(path)
        index = stamp_index()
        try:
            return index.digest(str(path.resolve()), st, str(path.parent.resolve()))
        finally:
            index.save()
    except (OSError, TooLarge):
        return _sha256(path)  # raises the one-line SourceError when unreadable


def _sweep_stale(parent: Path, prefix: str) -> None:
    """Remove temp dirs that runs killed outright (SIGKILL, power loss) left behind."""
    import shutil

    now = time.time()
    for path in parent.glob(f"{prefix}*"):
        try:
            if now - path.stat().st_mtime > _STALE_TEMP_SECONDS:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def _retire(root: Path, sources: Path) -> None:
    """Move ``root`` aside (one rename, so a process reading it keeps its open files and a
    new extraction can take the name) and delete it."""
    import shutil

    aside = sources / f".extract-retired-{root.name}-{os.getpid()}-{time.time_ns()}"
    try:
        os.rename(root, aside)
    except OSError:
        aside = root
    shutil.rmtree(aside, ignore_errors=True)


def _extract(archive: Path, kind: str, root: Path, sources: Path, archive_sha: str) -> None:
    """Extract the useful members into `root`, atomically: temp dir, marker last, rename."""
    import shutil
    import tempfile

    _sweep_stale(sources, ".extract-")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".extract-{root.name}-", dir=sources))
    except OSError as exc:
        raise SourceError(f"cannot write to {sources}: {exc.strerror or exc}") from None
    manifest: dict[str, str] = {}
    try:
        if kind == "zip":
            _extract_zip(archive, tmp, manifest)
        else:
            _extract_tar(archive, tmp, manifest)
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


def _member_parts(name: str, archive: Path) -> tuple[str, ...]:
    """Validated path components of an archive member (raises for unsafe names)."""
    # Backslashes count as separators so `..\\x` from a Windows-made archive is caught too.
    norm = name.replace("\\", "/")
    if norm.startswith("/") or re.match(r"[A-Za-z]:", norm):
        raise SourceError(f"refusing {archive.name}: member {name!r} has an absolute path")
    parts = tuple(p for p in norm.split("/") if p not in ("", "."))
    if ".." in parts:
        raise SourceError(f"refusing {archive.name}: member {name!r} has a '..' path component")
    if any("\0" in p for p in parts):
        raise SourceError(f"refusing {archive.name}: member {name!r} has a NUL in its name")
    return parts


class _Budget:
    """Per-archive bookkeeping: duplicate names and declared sizes."""

    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self.seen: set[str] = set()
        self.total = 0

    def admit(self, name: str, parts: tuple[str, ...], size: int, *, is_dir: bool) -> None:
        key = "/".join(parts)
        # Directory entries are never written (dirs are created for files), so a repeated
        # one is harmless; a repeated file could shadow what was checked.
        if key and not is_dir:
            if key in self.seen:
                raise SourceError(f"refusing {self.archive.name}: duplicate member name {name!r}")
            self.seen.add(key)
        if size > MAX_MEMBER_BYTES:
            raise SourceError(
                f"refusing {self.archive.name}: member {name!r} is {size >> 20} MiB uncompressed "
                f"(limit {MAX_MEMBER_BYTES >> 20} MiB; zip bomb?)"
            )
        self.total += size
        if self.total > MAX_TOTAL_BYTES:
            raise SourceError(
                f"refusing {self.archive.name}: more than {MAX_TOTAL_BYTES >> 20} MiB "
                f"uncompressed (at member {name!r}; zip bomb?)"
            )


def _extract_zip(archive: Path, dest: Path, manifest: dict[str, str], keep: re.Pattern[str] = _KEEP,
                 *, size_of_skipped: bool = True) -> None:
    """``size_of_skipped=False``: members ``keep`` leaves out (never decompressed) do not count
    toward the size limits; sgl-kernel's wheel holds a 1 GiB ``.so`` beside the few ``.py``
    files read."""
    import zipfile

    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SourceError(f"cannot read {archive}: {exc}") from None
    with zf:
        budget = _Budget(archive)
        plan: list[tuple[zipfile.ZipInfo, tuple[str, ...]]] = []
        # Validate the whole central directory before writing anything.
        for info in zf.infolist():
            parts = _member_parts(info.filename, archive)
            kept = bool(parts) and not info.is_dir() and bool(keep.fullmatch("/".join(parts)))
            budget.admit(info.filename, parts, info.file_size if kept or size_of_skipped else 0,
                         is_dir=info.is_dir())
            if not kept:
                continue  # never written, so its type does not matter
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise SourceError(f"refusing {archive.name}: member {info.filename!r} is a symlink")
            if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
                raise SourceError(
                    f"refusing {archive.name}: member {info.filename!r} is not a regular file"
                )
            if info.file_size > RATIO_MIN_BYTES and info.file_size > MAX_RATIO * max(
                info.compress_size, 1
            ):
                raise SourceError(
                    f"refusing {archive.name}: member {info.filename!r} has compression ratio "
                    f"above {MAX_RATIO}:1 (zip bomb?)"
                )
            plan.append((info, parts))
        for info, parts in plan:
            try:
                with zf.open(info) as src:
                    manifest[os.path.join(*parts)] = _write_member(src, dest, parts, info.file_size, archive, info.filename)
            except (
                zipfile.BadZipFile,
                zlib.error,
                EOFError,
                NotImplementedError,
                RuntimeError,
            ) as exc:
                raise SourceError(
                    f"cannot extract {info.filename!r} from {archive.name}: {exc}"
                ) from None


def _extract_tar(archive: Path, dest: Path, manifest: dict[str, str], keep: re.Pattern[str] = _KEEP) -> None:
    import tarfile

    try:
        tf = tarfile.open(archive, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise SourceError(f"cannot read {archive}: {exc}") from None
    try:
        packed = os.path.getsize(archive)
    except OSError as exc:
        raise SourceError(f"cannot read {archive}: {exc.strerror or exc}") from None
    with tf:
        budget = _Budget(archive)
        name = "<header>"
        try:
            # Stream: each header is checked before tarfile skips (decompresses) past its
            # data, so a huge declared member is refused before it costs anything.
            for member in tf:
                name = member.name
                parts = _member_parts(name, archive)
                budget.admit(name, parts, member.size, is_dir=member.isdir())
                # a tar has no per-member compressed size: bound the whole archive's ratio
                # (checked on declared sizes, before tarfile decompresses past the data)
                if budget.total > RATIO_MIN_BYTES and budget.total > MAX_RATIO * max(packed, 1):
                    raise SourceError(
                        f"refusing {archive.name}: more than {MAX_RATIO}:1 uncompressed "
                        f"(at member {name!r}; tar bomb?)"
                    )
                if not parts or member.isdir() or not keep.fullmatch("/".join(parts)):
                    continue
                if member.issym() or member.islnk():
                    kind = "symlink" if member.issym() else "hardlink"
                    raise SourceError(
                        f"refusing {archive.name}: member {name!r} is a {kind} (to {member.linkname!r})"
                    )
                if not member.isreg():
                    raise SourceError(
                        f"refusing {archive.name}: member {name!r} is not a regular file"
                    )
                src = tf.extractfile(member)
                if src is None:
                    raise SourceError(f"cannot extract {name!r} from {archive.name}")
                with src:
                    manifest[os.path.join(*parts)] = _write_member(src, dest, parts, member.size, archive, name)
        except (tarfile.TarError, EOFError, zlib.error) as exc:
            raise SourceError(f"cannot extract {name!r} from {archive.name}: {exc}") from None


def _write_member(
    src: IO[bytes], dest: Path, parts: tuple[str, ...], declared: int, archive: Path, name: str
) -> str:
    """Write one member; returns the sha256 of what was written (the manifest's entry)."""
    target = dest.joinpath(*parts)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Defence in depth: validated parts cannot escape, and dest holds no symlinks.
        if not _within(os.path.realpath(target.parent), os.path.realpath(dest)):
            raise SourceError(
                f"refusing {archive.name}: member {name!r} escapes the extraction dir"
            )
        written = 0
        digest = hashlib.sha256()
        with open(target, "xb") as out:  # "x": never overwrite or follow an existing entry
            while chunk := src.read(_CHUNK):
                written += len(chunk)
                if written > declared:  # the header lied about the size
                    raise SourceError(
                        f"refusing {archive.name}: member {name!r} is larger than its declared size"
                    )
                out.write(chunk)
                digest.update(chunk)
    except OSError as exc:
        raise SourceError(
            f"cannot extract {name!r} from {archive.name}: {exc.strerror or exc}"
        ) from None
    return digest.hexdigest()
