"""Resolutions cached by the content of everything they depend on.

A resolution is a pure function of: the tool (its code and the data files under `rules/`
that the resolver reads), the source tree, the model directory, the device, the flags, the
environment and the package overrides. The key hashes all of them, so a hit is the answer
the evaluator would give again; anything that changes misses:

* the tool: every file of the `sglang_audit` package and `rules/*.toml` (known-bad rules are
  applied after resolution and are not part of it), hashed by content once per process;
* the source tree, by content: every file's path and sha256 (symlinks followed and their
  targets recorded; a file is re-hashed when its stamp -- size, mtime, ctime, inode,
  device -- differs from the one it was hashed at, and a stamp younger than two seconds is
  never trusted, since a same-size rewrite within the clock's tick keeps it), the names
  beside the package and the content of the metadata there; for the tool's own extracted
  copy of a release, the digest of its extraction manifest once the copy is verified
  against it (``source.extracted``: the same content, without a second walk);
* the model directory, by content the same way: every name with its type, the content of
  every file the evaluator may read (all files up to its 16 MB read cap, every ``*.json``
  whatever its size) and the size of the rest (the evaluator only sees their size), with,
  for a larger ``*.safetensors``, the digest of its length prefix and header (the evaluator
  reads those: ``inputs/checkpoint.py``);
* the model path itself (SGLang reads it: ``"llama-2" in model_path.lower()``), the package
  path and the source origin (reported in the result);
* the target (device, flags by type and value, env, packages) and the analysis bounds.

Entries live in ``<user cache>/results``, checksummed and unpickled with an allowlist of
this package's result classes (``cachedir.load_pickled``); anything
unreadable is a miss. `--no-cache` bypasses them; `sglang-audit cache clear` removes them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

from sglang_audit import __version__
from sglang_audit import result as _result
from sglang_audit.cachedir import (
    EntryRejected,
    StampIndex,
    TooLarge,
    load_pickled,
    read_entry,
    stamp_index,
    store_pickled,
    writable_subdir,
    write_entry,
)
from sglang_audit.result import Resolution
from sglang_audit.shipped import package_dir, rules_dir
from sglang_audit.source.locate import SourceTree

RESULT_FORMAT = "results3"  # bump when the pickled Resolution or the key changes shape
_MAGIC = b"SGA-RESULT2 "
_FLAGS_MAGIC = b"SGA-FLAGS1 "
MODEL_READ_CAP = 16 * 1024 * 1024  # natives' open() refuses larger files: only their size is seen
MAX_ENTRIES = 200_000  # a tree or model dir with more entries is not cached

# the only constructors a result entry may name: the frozen dataclasses of result.py
ALLOWED: dict[tuple[str, str], object] = {
    ("sglang_audit.result", name): cls for name, cls in vars(_result).items()
    if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == "sglang_audit.result"
}
ALLOWED.update({("builtins", "frozenset"): frozenset, ("builtins", "set"): set})


_NotCacheable = TooLarge  # the inputs are too large or odd to key: the resolution runs uncached


class _Contents:
    """A source tree's content as a key saw it: absolute path -> sha256, made on first use
    (for the tool's extracted copy it is the manifest, read only when a result is stored)."""

    def __init__(self, make: Callable[[], dict[str, str] | None]) -> None:
        self._make: Callable[[], dict[str, str] | None] | None = make
        self._value: dict[str, str] | None = None

    def get(self) -> dict[str, str] | None:
        if self._make is not None:
            self._value, self._make = self._make(), None
        return self._value


@dataclasses.dataclass(frozen=True)
class _Keyed:
    package_dir: str
    contents: _Contents
    model_path: str
    model: str
    draft_path: Any
    draft: str | None


def _manifest_contents(root: Path, archive_sha: str) -> dict[str, str] | None:
    from sglang_audit.source.extracted import manifest_files

    files = manifest_files(root, archive_sha)
    if files is None:
        return None
    base = str(Path(root).resolve())
    return {os.path.join(base, rel): sha for rel, sha in files.items()}


class ResultCache:
    def __init__(self, enabled: bool = True, stable_tree: bool = False) -> None:
        """``stable_tree``: list the source tree once for every key (a matrix worker, explain,
        report). Safe against edits during the run because ``put`` stores only results that
        read the content keyed."""
        self.dir = writable_subdir("results") if enabled else None
        self.stable_tree = stable_tree
        self._tree_digests: dict[str, tuple[str, _Contents]] = {}
        # key -> what it was computed from: a result is stored under it only if the
        # evaluation read that very content (``put``)
        self._keyed: dict[str, _Keyed] = {}
        self._created = time.monotonic()
        self._hashes = stamp_index() if self.dir is not None else StampIndex(None)
        self.hits = 0
        self.misses = 0

    def tree_digest(self, package_dir: str, source: SourceTree | None = None) -> str:
        return self._tree(package_dir, source)[0]

    def _tree(self, package_dir: str, source: SourceTree | None) -> tuple[str, _Contents]:
        """The tree's digest and, for ``put``'s check, the content it stands for."""
        if self.stable_tree and package_dir in self._tree_digests:
            return self._tree_digests[package_dir]
        digest = self._extracted_digest(source)
        if digest is not None and source is not None and source.extraction is not None:
            root, archive_sha = source.extraction
            contents = _Contents(lambda: _manifest_contents(root, archive_sha))
        else:
            seen: dict[str, str] = {}
            digest = _tree_digest(package_dir, self._hashes, seen)
            contents = _Contents(lambda: seen)
        if self.stable_tree:
            self._tree_digests[package_dir] = (digest, contents)
        return digest, contents

    def _extracted_digest(self, source: SourceTree | None) -> str | None:
        """The manifest digest of the tool's own extracted copy while it still matches its
        manifest (``source.extracted``): the tree's content without hashing it again."""
        if source is None or source.extraction is None:
            return None
        if source.content_digest is not None and self.stable_tree and source.verified_at > self._created:
            # verified while this cache is in use, on whose length the tree is fixed
            return f"manifest:{source.content_digest}"
        # located earlier (a shared SourceCache keeps the tree): it may have been edited since
        from sglang_audit.source.extracted import verified

        digest = verified(*source.extraction)
        return f"manifest:{digest}" if digest is not None else None

    def key(self, target: Any, max_paths: int, bounds: Any) -> str | None:
        if self.dir is None:
            return None
        try:
            package_dir = str(target.source.package_dir.resolve())
            model_path = target.model.path
            tree, contents = self._tree(package_dir, target.source)
            model = _model_digest(str(model_path), self._hashes)
            draft = self._draft_digest(target.flags.get("speculative_draft_model_path"))
            parts = {
                "format": RESULT_FORMAT,
                "tool": tool_digest(),
                "tree": tree,
                "source": [package_dir, target.source.version, target.source.flashinfer, target.source.origin],
                "model": [target.model.name, str(model_path), str(Path(model_path).resolve()), model],
                "device": target.device.to_json(),
                "flags": sorted((k, type(v).__name__, repr(v)) for k, v in target.flags.items()),
                "env": sorted(target.env.items()),
                "with": sorted(target.with_packages),
                "without": sorted(target.without_packages),
                "env_profile": getattr(target, "env_profile", None),
                "bounds": [max_paths, repr(bounds)],
                "fields": list(getattr(target, "extra_fields", ())),
                "layer_stages": getattr(target, "layer_stages", None),
                # the draft model's directory content: its config.json decides the draft's settings
                "draft": draft,
                # the transformers wheel whose config classes fill keys config.json omits:
                # an answer made without it (offline) is not served once it is there
                "transformers": _transformers_wheel_name(target.source.package_dir),
            }
        except (OSError, RuntimeError, ValueError, _NotCacheable):
            return None
        finally:
            self._hashes.save()
        key = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
        self._keyed[key] = _Keyed(package_dir, contents, str(model_path), model,
                                  target.flags.get("speculative_draft_model_path"), draft)
        return key

    # ---- typed flags: `--set`/`flags` as the release's flag table types them ------------
    # A result-cache hit must not evaluate the release's `add_cli_args` (0.5-0.6 s on
    # 0.5.23) only to type `--set` values: the typed flags are a pure function of the
    # tool, the tree and everything the flag-table evaluation could see (device, env,
    # packages, model directory), keyed by their content like a resolution.

    def flags_key(self, target: Any, items: list[str], given: dict[str, Any]) -> str | None:
        """The key of the flags that ``--set items`` over ``given`` type to for ``target``
        (a Target whose flags are not set yet)."""
        if self.dir is None:
            return None
        try:
            package_dir = str(target.source.package_dir.resolve())
            tree, contents = self._tree(package_dir, target.source)
            model = _model_digest(str(target.model.path), self._hashes)
            parts = {
                "format": "flags1",
                "tool": tool_digest(),
                "tree": tree,
                "source": [package_dir, target.source.version, target.source.origin],
                "model": [str(target.model.path), model],
                "device": target.device.to_json(),
                "env": sorted(target.env.items()),
                "with": sorted(target.with_packages),
                "without": sorted(target.without_packages),
                "env_profile": getattr(target, "env_profile", None),
                "sets": list(items),
                "given": sorted((k, type(v).__name__, repr(v)) for k, v in given.items()),
            }
        except (OSError, RuntimeError, ValueError, _NotCacheable):
            return None
        finally:
            self._hashes.save()
        key = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
        # as for a resolution: stored only if the flag parser read what the key hashed
        self._keyed[key] = _Keyed(package_dir, contents, str(target.model.path), model, None, None)
        return key

    def get_flags(self, key: str | None) -> dict[str, Any] | None:
        path = self._path(key) if key is not None else None
        if path is None:
            return None
        try:
            value = json.loads(read_entry(path.with_suffix(".flags"), _FLAGS_MAGIC).decode("utf-8"))
        except (EntryRejected, UnicodeDecodeError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def put_flags(self, key: str | None, flags: dict[str, Any], files_read: Iterable[tuple[str, str]]) -> None:
        """Store the typed ``flags`` under ``key`` (from ``flags_key``) if the evaluation that
        typed them read, in ``files_read`` ((path, sha256) under the tree's root), the content
        the key hashed (``put``'s check)."""
        path = self._path(key) if key is not None else None
        keyed = self._keyed.pop(key, None) if key is not None else None
        if path is None or keyed is None:
            return
        try:
            if not self._read_as_keyed(keyed, files_read):
                return
        finally:
            self._hashes.save()
        try:
            text = json.dumps(flags, allow_nan=False)
        except (TypeError, ValueError):
            return  # a value JSON cannot carry: not cached
        back = json.loads(text)
        # only what comes back exactly (same keys, types and values: a tuple would come
        # back a list, True must not come back 1)
        if list(back) != list(flags) or any(_typed_repr(back[k]) != _typed_repr(v) for k, v in flags.items()):
            return
        write_entry(path.with_suffix(".flags"), _FLAGS_MAGIC, text.encode("utf-8"))

    def _draft_digest(self, draft: Any) -> str | None:
        if isinstance(draft, str) and Path(draft).is_dir():
            return _model_digest(draft, self._hashes)
        return None

    def _path(self, key: str) -> Path | None:
        return None if self.dir is None else self.dir / key[:2] / f"{key}.entry"

    def has(self, key: str | None) -> bool:
        """An entry is stored under ``key`` (not read, so not checked: a guess for planning
        work, never an answer)."""
        path = self._path(key) if key is not None else None
        return path is not None and path.is_file()

    def get(self, key: str | None) -> Resolution | None:
        path = self._path(key) if key is not None else None
        if path is None:
            return None
        value = load_pickled(path, _MAGIC, ALLOWED)
        if not isinstance(value, Resolution):
            self.misses += 1
            return None
        self.hits += 1
        self._keyed.pop(cast(str, key), None)  # nothing to store under it (path is not None: key is a str)
        return value

    def put(self, key: str | None, res: Resolution) -> bool:
        """Store ``res`` under ``key`` (from this cache's ``key``) if the evaluation saw what
        the key describes: every file it read under the package had, when read, the content
        the key hashed, and the model directories still hash as they did. A tree or model
        edited while it was evaluated is not stored under the key of its earlier content."""
        path = self._path(key) if key is not None else None
        keyed = self._keyed.pop(key, None) if key is not None else None
        if path is None or keyed is None:
            return False
        if "CPU-time budget" in json.dumps(res.to_json(), default=str):
            return False  # depends on the machine's speed, not on the inputs: never cached
        try:
            if not self._read_as_keyed(keyed, res.files_read):
                return False
        finally:
            self._hashes.save()
        return store_pickled(path, _MAGIC, res)

    def _read_as_keyed(self, keyed: _Keyed, files_read: Iterable[tuple[str, str]]) -> bool:
        contents = keyed.contents.get()
        if contents is None:
            return False
        root = os.path.dirname(keyed.package_dir)
        inside = keyed.package_dir + os.sep
        for rel, sha in files_read:
            full = os.path.join(root, rel)  # an absolute rel (outside the root) stays itself
            if full.startswith(inside) and contents.get(full) != sha:
                return False
        try:
            return (_model_digest(keyed.model_path, self._hashes) == keyed.model
                    and self._draft_digest(keyed.draft_path) == keyed.draft)
        except (OSError, RuntimeError, ValueError, _NotCacheable):
            return False


def _typed_repr(value: Any) -> str:
    """A value's repr with the type of every element (``1`` and ``True`` differ)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{_typed_repr(k)}:{_typed_repr(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return type(value).__name__ + "[" + ",".join(_typed_repr(v) for v in value) + "]"
    return f"{type(value).__name__}:{value!r}"


@functools.lru_cache(maxsize=1)
def _transformers_wheel_name(package_dir: Path) -> str | None:
    from sglang_audit.source.transformers import cached_transformers_wheel, transformers_pin

    pin = transformers_pin(Path(package_dir))
    wheel = cached_transformers_wheel(pin) if pin else None
    return wheel.name if wheel is not None else None


@functools.cache
def tool_digest() -> str:
    """Once per process: the code that runs is the code imported at its start."""
    h = hashlib.sha256(__version__.encode())
    # os.walk, not Path.rglob: the same files at a third of the cost (~3 ms of every run)
    files: list[str] = []
    for dirpath, _dirs, names in os.walk(package_dir()):
        files += [full for name in names if name.endswith((".py", ".html", ".css", ".toml"))
                  and os.path.isfile(full := os.path.join(dirpath, name))]
    files.sort()
    files += sorted(str(p) for p in rules_dir().glob("*.toml"))
    for path in files:
        h.update(os.fsencode(os.path.basename(path)))
        with open(path, "rb") as fh:
            h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


# ---- content hashes, re-computed only for files whose stamp changed ---------------------


def _walk(root: str, hashes: StampIndex, h: Any, should_hash: Callable[[str, int], bool], scope: str | None = None,
          seen_files: dict[str, str] | None = None, big: Callable[[str, str], tuple[str, ...]] | None = None) -> None:
    """Feed ``h`` every entry under ``root``: its relative path, type, link target and
    content hash (``should_hash(name, size)``) or size (and ``big(name, path)``'s fields: what
    the evaluator may read of a file too large to hash). Directory links are followed
    (each real directory once, so a link cycle ends). ``seen_files``: filled with each
    hashed file's path and sha256."""
    seen_dirs: set[tuple[int, int]] = set()
    count = 0

    def emit(*fields: object) -> None:
        h.update(b"\0".join(os.fsencode(f) if isinstance(f, str) else str(f).encode() for f in fields) + b"\n")

    prefix = root.rstrip(os.sep) + os.sep

    def rel_of(full: str) -> str:
        # os.walk joins onto root: the relative path is the tail (os.path.relpath
        # normalises both paths per call, ~40% of a tree digest)
        return full[len(prefix):] if full.startswith(prefix) else os.path.relpath(full, root)

    def onerror(exc: OSError) -> None:
        emit("error", os.path.relpath(str(exc.filename or root), root), exc.errno or 0)

    for dirpath, dirnames, names in os.walk(root, followlinks=True, onerror=onerror):
        st_dir = os.stat(dirpath)
        if (st_dir.st_dev, st_dir.st_ino) in seen_dirs:
            dirnames[:] = []
            emit("cycle", os.path.relpath(dirpath, root))
            continue
        seen_dirs.add((st_dir.st_dev, st_dir.st_ino))
        dirnames.sort()
        for name in dirnames:
            full = os.path.join(dirpath, name)
            rel = rel_of(full)
            emit("d", rel, os.readlink(full) if os.path.islink(full) else "")
        for name in sorted(names):
            count += 1
            if count > MAX_ENTRIES:
                raise _NotCacheable(root)
            full = os.path.join(dirpath, name)
            rel = rel_of(full)
            link = os.readlink(full) if os.path.islink(full) else ""
            try:
                st = os.stat(full)
            except OSError:
                emit("broken", rel, link)
                continue
            if not stat.S_ISREG(st.st_mode):
                emit("special", rel, link, stat.S_IFMT(st.st_mode))
                continue
            real = os.path.realpath(full) if link else full
            if should_hash(name, st.st_size):
                sha = hashes.digest(real, st, scope or root)
                if seen_files is not None:
                    seen_files[full] = sha
                emit("f", rel, link, real if link else "", st.st_size, sha)
            elif big is not None:
                emit("big", rel, link, real if link else "", st.st_size, *big(name, real))
            else:
                emit("big", rel, link, real if link else "", st.st_size)


def _tree_digest(package_dir: str, hashes: StampIndex, seen_files: dict[str, str] | None = None) -> str:
    """The package's files by content and, beside it, what the resolver reads: the
    names there (the evaluator answers path probes inside the source root) and the
    metadata (``pyproject.toml``, ``PKG-INFO``, ``*.dist-info``/``*.egg-info``)."""
    h = hashlib.sha256()
    parent = os.path.dirname(package_dir)
    for name in sorted(os.listdir(parent)):
        full = os.path.join(parent, name)
        h.update(os.fsencode(name) + b"\0" + str(stat.S_IFMT(os.lstat(full).st_mode)).encode() + b"\n")
        if name in ("pyproject.toml", "PKG-INFO", "setup.cfg", "setup.py") or name.endswith((".dist-info", ".egg-info")):
            if os.path.isdir(full):
                _walk(full, hashes, h, lambda _n, _s: True, package_dir)
            elif os.path.isfile(full):
                h.update(hashes.digest(os.path.realpath(full), os.stat(full), package_dir).encode())
    _walk(package_dir, hashes, h, lambda _n, _s: True, seen_files=seen_files)
    return h.hexdigest()


def _model_digest(model_dir: str, hashes: StampIndex) -> str:
    h = hashlib.sha256()
    _walk(model_dir, hashes, h, lambda name, size: size <= MODEL_READ_CAP or name.endswith(".json"),
          big=_checkpoint_header)
    return h.hexdigest()


def _checkpoint_header(name: str, path: str) -> tuple[str, ...]:
    """A large safetensors file: the digest of its length prefix and header (the evaluator
    reads them, ``inputs/checkpoint.py``); nothing more of another large file."""
    if not name.endswith(".safetensors"):
        return ()
    from sglang_audit.inputs.checkpoint import header_digest

    return ("header", header_digest(path))
