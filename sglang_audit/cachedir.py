"""Where sglang-audit keeps downloaded wheels, extracted sources and parsed files."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir


def cache_root() -> Path:
    """The user cache dir (``SGLANG_AUDIT_CACHE_DIR`` overrides it, e.g. in tests)."""
    override = os.environ.get("SGLANG_AUDIT_CACHE_DIR")
    return Path(override) if override else Path(user_cache_dir("sglang-audit"))


def writable_subdir(name: str) -> Path | None:
    """``cache_root()/name``, created if needed; None when the cache is not writable."""
    path = cache_root() / name
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError:
        return None
    return path
