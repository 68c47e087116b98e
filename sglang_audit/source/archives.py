"""Downloading a distribution with pip into the user cache and extracting an archive safely:
the machinery the SGLang, FlashInfer and transformers sources share (``locate``,
``flashinfer``, ``transformers``). Nothing here knows what a package holds: the caller says
which distribution to download and which members to keep.

An archive is read with zipfile/tarfile, never installed or imported: members are written
one by one after checks (absolute or ``..`` paths, links, duplicate names, sizes and
compression ratios: a bomb is refused, not extracted). The modules only a download or an
extraction needs (subprocess, tempfile, shutil, zipfile, tarfile) are imported there.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from sglang_audit.cachedir import TooLarge, cache_root, stamp_index, writable_subdir
from sglang_audit.errors import SourceError

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
ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar")


def within(path: str, root: str) -> bool:
    root = root.rstrip(os.sep) or os.sep
    return path == root or path.startswith(root if root == os.sep else root + os.sep)


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
    sweep_stale(wheels, ".download-")
    # pip writes into a private staging dir that is moved into place only when complete,
    # so an interrupted download never leaves a truncated wheel for the cache lookup.
    try:
        staging = Path(tempfile.mkdtemp(prefix=".download-", dir=wheels))
    except OSError as exc:
        raise SourceError(f"cannot write to {wheels}: {exc.strerror or exc}") from None
    try:
        with DownloadWatch(label, staging, say, ARCHIVE_SUFFIXES):
            result = fetch(staging)
        if result.returncode != 0:
            raise _download_error(label, result)
        files = sorted(
            p
            for p in staging.iterdir()
            if p.is_file() and p.name.lower().endswith(ARCHIVE_SUFFIXES)
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


def pip_download(
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


def pip_failure(result: subprocess.CompletedProcess[str]) -> str:
    output = f"{result.stderr or ''}\n{result.stdout or ''}"
    # Offline pip also ends with "No matching distribution" (it saw no versions at all),
    # so connection trouble wins over the not-found wording.
    if any(hint in output for hint in _NETWORK_HINTS):
        return "network"
    if any(hint in output for hint in _NOT_FOUND_HINTS):
        return "not-found"
    return "other"


def _download_error(label: str, result: subprocess.CompletedProcess[str]) -> SourceError:
    kind = pip_failure(result)
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


def archive_kind(path: Path) -> str:
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


def sweep_stale(parent: Path, prefix: str) -> None:
    """Remove temp dirs that runs killed outright (SIGKILL, power loss) left behind."""
    import shutil

    now = time.time()
    for path in parent.glob(f"{prefix}*"):
        try:
            if now - path.stat().st_mtime > _STALE_TEMP_SECONDS:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def retire(root: Path, sources: Path) -> None:
    """Move ``root`` aside (one rename, so a process reading it keeps its open files and a
    new extraction can take the name) and delete it."""
    import shutil

    aside = sources / f".extract-retired-{root.name}-{os.getpid()}-{time.time_ns()}"
    try:
        os.rename(root, aside)
    except OSError:
        aside = root
    shutil.rmtree(aside, ignore_errors=True)


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


def extract_zip(archive: Path, dest: Path, manifest: dict[str, str], keep: re.Pattern[str],
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


def extract_tar(archive: Path, dest: Path, manifest: dict[str, str], keep: re.Pattern[str]) -> None:
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
        if not within(os.path.realpath(target.parent), os.path.realpath(dest)):
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


def extract_cached(path: Path, keep: re.Pattern[str], find: Callable[[Path], Path | None], missing: str,
                   say: Callable[[str], None], *, size_of_skipped: bool = True) -> tuple[Path, Path]:
    """``path`` (a kernel library's wheel) extracted once into ``<cache>/sources/<sha>``, the
    members ``keep`` matches only; (the extraction root, the package ``find`` locates in it).
    Atomic as SGLang's own: a temp dir, a marker written last, one rename; a concurrent run
    that wins the rename is used. ``missing`` is the one-line error when the archive has no package."""
    from sglang_audit.source.extracted import MARKER

    sources = writable_subdir("sources")
    if sources is None:
        raise SourceError(f"cache dir {cache_root()} is not writable; set SGLANG_AUDIT_CACHE_DIR")
    root = sources / archive_sha256(path)[:16]
    complete = (root / MARKER).is_file()
    package = find(root) if complete else None
    if package is None:
        # only an extraction needs these (a copy already there came from this very archive)
        import json
        import shutil
        import tempfile

        kind = archive_kind(path)
        if complete:
            shutil.rmtree(root, ignore_errors=True)
        say(f"extracting {path.name} into {root} ...")
        sweep_stale(sources, ".extract-")
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".extract-{root.name}-", dir=sources))
        except OSError as exc:
            raise SourceError(f"cannot write to {sources}: {exc.strerror or exc}") from None
        try:
            if kind == "zip":
                extract_zip(path, tmp, {}, keep, size_of_skipped=size_of_skipped)
            else:
                extract_tar(path, tmp, {}, keep)
            if find(tmp) is None:
                raise SourceError(missing)
            (tmp / MARKER).write_text(json.dumps({"archive": path.name}) + "\n")
            os.chmod(tmp, 0o755)
            try:
                os.rename(tmp, root)
            except OSError:
                if not (root / MARKER).is_file():
                    shutil.rmtree(root, ignore_errors=True)
                    os.rename(tmp, root)
        except OSError as exc:
            raise SourceError(f"cannot extract {path.name} into {root}: {exc.strerror or exc}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        package = find(root)
    if package is None:
        raise SourceError(missing)
    return root, package
