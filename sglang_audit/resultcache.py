"""Resolutions cached by the content of everything they depend on.

A resolution is a pure function of: the tool (its code and the data files under `rules/`
that the resolver reads), the source tree, the model directory, the device, the flags, the
environment and the package overrides. The key hashes all of them, so a hit is the answer
the evaluator would give again; anything that changes misses:

* the tool: every file of the `sglang_audit` package and `rules/*.toml` (known-bad rules are
  applied after resolution and are not part of it), hashed by content once per process;
* the source tree: every file's relative path, size, mtime and inode (the policy the IR
  cache already uses for "unchanged since hashed"), and the metadata beside the package;
* the model directory: every file's name and content (files over 4 MB by size and mtime);
* the target (device, flags by type and value, env, packages) and the analysis bounds.

Entries live in ``<user cache>/results``, are written atomically, and anything unreadable is
a miss. `--no-cache` bypasses them; `sglang-audit cache clear` removes them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

from . import __version__
from .cachedir import writable_subdir
from .result import Resolution

RESULT_FORMAT = "results1"  # bump when the pickled Resolution changes shape
_PACKAGE_DIR = Path(__file__).resolve().parent
_RULES_DIR = _PACKAGE_DIR.parent / "rules"
_BIG = 4 * 1024 * 1024


class ResultCache:
    def __init__(self, enabled: bool = True, stable_tree: bool = False) -> None:
        """``stable_tree``: the caller treats the source tree as fixed while it runs (a
        matrix worker, which already keeps the tree's IR in memory): list it once."""
        self.dir = writable_subdir("results") if enabled else None
        self.stable_tree = stable_tree
        self._tree_digests: dict[str, str] = {}
        self.hits = 0
        self.misses = 0

    def tree_digest(self, package_dir: str) -> str:
        if not self.stable_tree:
            return _tree_digest(package_dir)
        if package_dir not in self._tree_digests:
            self._tree_digests[package_dir] = _tree_digest(package_dir)
        return self._tree_digests[package_dir]

    def key(self, target: Any, max_paths: int, bounds: Any) -> str | None:
        if self.dir is None:
            return None
        try:
            parts = {
                "format": RESULT_FORMAT,
                "tool": _tool_digest(),
                "tree": self.tree_digest(str(target.source.package_dir.resolve())),
                "source": [target.source.version, target.source.flashinfer],
                "model": [target.model.name, _dir_digest(target.model.path)],
                "device": target.device.to_json(),
                "flags": sorted((k, type(v).__name__, repr(v)) for k, v in target.flags.items()),
                "env": sorted(target.env.items()),
                "with": sorted(target.with_packages),
                "without": sorted(target.without_packages),
                "bounds": [max_paths, repr(bounds)],
                "fields": list(getattr(target, "extra_fields", ())),
                "draft": _draft_digest(target.flags.get("speculative_draft_model_path")),
            }
        except OSError:
            return None
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()

    def get(self, key: str | None) -> Resolution | None:
        if key is None or self.dir is None:
            return None
        path = self.dir / key[:2] / f"{key}.pickle"
        try:
            with path.open("rb") as fh:
                value = pickle.load(fh)
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError, ValueError):
            self.misses += 1
            return None
        if not isinstance(value, Resolution):
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, key: str | None, res: Resolution) -> None:
        if key is None or self.dir is None:
            return
        path = self.dir / key[:2] / f"{key}.pickle"
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(exist_ok=True)
            with tmp.open("wb") as fh:
                pickle.dump(res, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            tmp.unlink(missing_ok=True)  # a value that does not pickle is simply not cached


@functools.lru_cache(maxsize=1)
def _tool_digest() -> str:
    h = hashlib.sha256(__version__.encode())
    files = sorted(p for p in _PACKAGE_DIR.rglob("*") if p.is_file() and p.suffix in (".py", ".html", ".css", ".toml"))
    files += sorted(_RULES_DIR.glob("*.toml"))
    for p in files:
        h.update(p.name.encode())
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def _tree_digest(package_dir: str) -> str:
    """The package's files and, beside it, the metadata the resolver reads (``*/METADATA``,
    ``pyproject.toml``). Walked on every lookup (~50 ms for 0.5.23's 5,800 files): a tree
    edited while a process runs must not be answered from the cache (unless the caller
    says the tree is fixed: ``stable_tree``)."""
    h = hashlib.sha256()
    parent = os.path.dirname(package_dir)
    extra = [os.path.join(parent, "pyproject.toml")]
    extra += sorted(str(p) for p in Path(parent).glob("*/METADATA"))
    for full in extra:
        if os.path.isfile(full):
            st = os.stat(full)
            h.update(f"{os.path.relpath(full, parent)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
    for dirpath, dirnames, names in os.walk(package_dir):
        dirnames.sort()
        for name in sorted(names):
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            h.update(f"{os.path.relpath(full, package_dir)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
    return h.hexdigest()


def _dir_digest(model_dir: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(model_dir.rglob("*")):
        if not p.is_file():
            continue
        st = p.stat()
        h.update(f"{p.relative_to(model_dir).as_posix()}\0{st.st_size}\n".encode())
        if st.st_size <= _BIG:
            h.update(hashlib.sha256(p.read_bytes()).digest())
        else:
            h.update(f"{st.st_mtime_ns}".encode())
    return h.hexdigest()


def _draft_digest(draft: Any) -> str | None:
    """The draft model's directory content: its config.json decides the draft's settings."""
    if isinstance(draft, str) and Path(draft).is_dir():
        return _dir_digest(Path(draft))
    return None
