"""Where sglang-audit keeps downloaded wheels, extracted sources and parsed files."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from platformdirs import user_cache_dir


def cache_root() -> Path:
    """The user cache dir (``SGLANG_AUDIT_CACHE_DIR`` overrides it, e.g. in tests)."""
    override = os.environ.get("SGLANG_AUDIT_CACHE_DIR")
    return Path(override) if override else Path(user_cache_dir("sglang-audit"))


def writable_subdir(name: str) -> Path | None:
    """``cache_root()/name``, created if needed; None when the cache is not writable."""
    path = cache_root() / name
    # one probe name per process and call: with a shared name, two processes (matrix
    # workers, parallel CI jobs) could delete each other's probe and see "not writable"
    probe = path / f".write-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError:
        return None
    return path


# ---- inspection and clearing (`sglang-audit cache info|clear`) ------------------------

CACHE_PARTS = ("ir", "results", "sources", "wheels")  # parsed IR, resolutions, extracted archives, downloaded wheels


def tree_size(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path``, not following symlinks; (0, 0) when absent."""
    total = files = 0
    if path.is_symlink() or not path.is_dir():
        return total, files
    for dirpath, _dirs, names in os.walk(path):  # os.walk does not follow dir links
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
            files += 1
    return total, files


def remove_part(name: str) -> tuple[int, int]:
    """Delete ``cache_root()/name`` (one of CACHE_PARTS); returns what it held."""
    if name not in CACHE_PARTS:
        raise ValueError(f"not a cache part: {name}")
    path = cache_root() / name
    if path.is_symlink():
        path.unlink()  # never delete what a link points to
        return 0, 0
    if not path.exists():
        return 0, 0
    held = tree_size(path)
    _rmtree(path)
    return held


def _rmtree(path: Path) -> None:
    import shutil
    import stat
    import sys

    def retry(func: object, p: str, _exc: object) -> None:
        # extracted archives may carry read-only directories: make writable, retry once
        os.chmod(os.path.dirname(p), stat.S_IRWXU)
        if os.path.isdir(p) and not os.path.islink(p):
            os.chmod(p, stat.S_IRWXU)
        func(p)  # type: ignore[operator]

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:
        shutil.rmtree(path, onerror=retry)


# ---- entries: atomic, checksummed, loaded without running code -------------------------
# A cache dir may be shared, restored from a CI artifact or damaged on disk. Each entry is
# ``MAGIC sha256(payload) \n payload``, written to a private temp name and renamed; a read
# is capped in size, checks the checksum before the payload is looked at, and unpickles
# with an allowlist of constructors (plain data classes of this package), so a damaged
# entry cannot cost gigabytes and a crafted one cannot call anything. Any failure is a miss.

MAX_ENTRY_BYTES = 256 * 1024 * 1024


class EntryRejected(Exception):
    """The entry is absent, damaged or names a constructor outside the allowlist."""


def write_entry(path: Path, magic: bytes, payload: bytes) -> bool:
    """Atomically write ``path``; False when the cache could not take it."""
    import hashlib

    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("xb") as fh:
            fh.write(magic + hashlib.sha256(payload).hexdigest().encode() + b"\n")
            fh.write(payload)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        return False
    return True


def read_entry(path: Path, magic: bytes, max_bytes: int = MAX_ENTRY_BYTES) -> bytes:
    """The payload of a checksummed entry (raises EntryRejected for any defect)."""
    import hashlib
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        raise EntryRejected("absent") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            raise EntryRejected("not a regular file of a plausible size")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
    except OSError:
        raise EntryRejected("unreadable") from None
    finally:
        os.close(fd)
    head = len(magic) + 65
    if len(data) < head or not data.startswith(magic) or data[head - 1:head] != b"\n":
        raise EntryRejected("bad header")
    payload = data[head:]
    if hashlib.sha256(payload).hexdigest().encode() != data[len(magic):head - 1]:
        raise EntryRejected("checksum mismatch")
    return payload


def safe_unpickle(payload: bytes, allowed: dict[tuple[str, str], object]) -> object:
    """Unpickle with only the constructors in ``allowed`` ((module, name) → object)."""
    import io
    import pickle

    class _Restricted(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            try:
                return allowed[(module, name)]
            except KeyError:
                raise EntryRejected(f"constructor {module}.{name} not allowed") from None

    try:
        return _Restricted(io.BytesIO(payload)).load()
    except EntryRejected:
        raise
    except Exception as exc:  # damaged data: any unpickling failure is a miss
        raise EntryRejected(f"cannot unpickle ({type(exc).__name__})") from None
