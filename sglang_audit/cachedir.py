"""Where sglang-audit keeps downloaded wheels, extracted sources and parsed files."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import time
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
    probe = path / f".write-probe-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError:
        return None
    return path


# ---- inspection and clearing (`sglang-audit cache info|clear`) ------------------------

# parsed IR, package metadata read from the index (inputs/pins.py), resolutions, extracted archives, downloaded wheels
CACHE_PARTS = ("ir", "metadata", "results", "sources", "wheels")


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
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
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


def load_pickled(path: Path, magic: bytes, allowed: dict[tuple[str, str], object]) -> object | None:
    """A checksummed pickled entry, None for anything absent, damaged or not allowed."""
    try:
        return safe_unpickle(read_entry(path, magic), allowed)
    except EntryRejected:
        return None


def store_pickled(path: Path, magic: bytes, value: object) -> bool:
    """Write ``value`` as a checksummed pickled entry; False when it does not pickle or the
    cache could not take it (a value not cached is a later miss, never an error)."""
    import pickle

    try:
        payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return False
    return write_entry(path, magic, payload)


# ---- content hashes, re-computed only for files whose stamp changed ---------------------

MAX_HASHED_FILE = 512 * 1024 * 1024  # a file to hash beyond this: the caller does not cache
RACY_NS = 2_000_000_000  # a stamp younger than this may hide a same-size rewrite
MAX_INDEX_ENTRIES = 200_000  # files of one scope; beyond this it starts afresh


class TooLarge(Exception):
    """A file too large (or no longer regular) to hash."""


class StampIndex:
    """sha256 of files by real path, valid while the file's stamp (size, mtime, ctime,
    inode, device) is the one it was hashed at. ctime cannot be set back by a user
    (``touch -r`` restores mtime only; a copy over a reused inode changes ctime), so an
    equal stamp means equal content -- except within the filesystem clock's tick, hence
    stamps younger than RACY_NS are re-hashed every time and never stored. Kept in memory
    and saved to ``results/stamps``, one checksummed file per scope (a source tree or a
    model directory: a lookup loads only its own); a damaged file is an empty index."""

    def __init__(self, directory: Path | None) -> None:
        self.dir = directory
        self.known: dict[str, dict[str, tuple[list[int], str]]] = {}  # scope -> path -> entry
        self._dirty: set[str] = set()

    def _file(self, scope: str) -> Path | None:
        if self.dir is None:
            return None
        return self.dir / f"{hashlib.sha256(os.fsencode(scope)).hexdigest()[:24]}.json"

    def _scope(self, scope: str) -> dict[str, tuple[list[int], str]]:
        table = self.known.get(scope)
        if table is not None:
            return table
        table = self.known[scope] = {}
        file = self._file(scope)
        if file is None:
            return table
        try:
            data = json.loads(read_entry(file, b"SGA-STAMPS2 "))
        except (EntryRejected, ValueError, RecursionError):
            return table
        if isinstance(data, dict):
            for path, entry in data.items():
                if (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], str)
                        and isinstance(entry[0], list) and all(type(x) is int for x in entry[0])):
                    table[path] = (entry[0], entry[1])
        return table

    def digest(self, path: str, st: os.stat_result, scope: str = "") -> str:
        table = self._scope(scope)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
        known = table.get(path)
        if known is not None and known[0] == stamp:
            return known[1]
        if st.st_size > MAX_HASHED_FILE:
            raise TooLarge(path)
        h = hashlib.sha256()
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise TooLarge(path)  # swapped for a FIFO or device since the stat
            read = 0
            while chunk := fh.read(1 << 20):
                read += len(chunk)
                if read > MAX_HASHED_FILE:
                    raise TooLarge(path)
                h.update(chunk)
        sha = h.hexdigest()
        now = time.time_ns()
        if now - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_NS:
            table[path] = (stamp, sha)
            self._dirty.add(scope)
        return sha

    def save(self) -> None:
        for scope in sorted(self._dirty):
            file = self._file(scope)
            table = self.known.get(scope, {})
            if file is None:
                continue
            if len(table) > MAX_INDEX_ENTRIES:  # forget rather than grow for ever
                table.clear()
            payload = json.dumps({p: [s, h] for p, (s, h) in table.items()}).encode()
            write_entry(file, b"SGA-STAMPS2 ", payload)
        self._dirty.clear()


@functools.cache
def _shared_index(directory: Path | None) -> StampIndex:
    return StampIndex(directory)


@functools.cache
def _index_of(root: Path) -> StampIndex:
    # the writability probe once per cache dir and process (six lookups per cached resolve)
    results = writable_subdir("results")
    return _shared_index(results / "stamps" if results is not None else None)


def stamp_index() -> StampIndex:
    """The process's index in ``<cache>/results/stamps`` (one instance, so that two users
    in a process do not overwrite each other's saves); in memory only when not writable."""
    return _index_of(cache_root())
