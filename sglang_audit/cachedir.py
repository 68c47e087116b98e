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
