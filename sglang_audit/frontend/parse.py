"""Front end: libcst → IR (``ir``), one file at a time, cached by content hash.

libcst gives exact source positions and the guard text as written; the converted IR is
small and picklable, so the cache lets a warm run skip libcst entirely.

The libcst half (the converter, line numbers) is ``convert``, imported on the first file
that must be parsed: a run served from the caches never imports libcst.

Speed (see docs/performance.md): cache entries are pickled through one module-level
constructor with the cyclic GC paused while loading (GC passes over a half-built tree
were most of the load).
"""

from __future__ import annotations

import copyreg
import gc
import hashlib
import io
import pickle
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglang_audit import __version__
from sglang_audit.cachedir import (
    EntryRejected,
    read_entry,
    safe_unpickle,
    writable_subdir,
    write_entry,
)
from sglang_audit.frontend import ir
from sglang_audit.frontend.limits import MAX_TEXT, ParseFailure  # noqa: F401 - callers import them from here

# Bumped whenever the IR or the converter changes, so a cache never serves stale trees.
IR_FORMAT = f"{__version__}-ir13"  # ir13: a yield's value; ir12: nodes as __newobj__ + slot state; ir11: checksummed entries
MAX_SOURCE_BYTES = 8 * 1024 * 1024  # a config module is never this large; bounds the work


# Python recursion while parsing/converting: parselimits bounds the nesting, so this is
# enough for any accepted file, and fixed so the outcome never depends on the caller's
# own limit (the resolver raises it, the flag-table pass does not).
PARSE_RECURSION_LIMIT = 20_000


def convert_source(source: str) -> ir.Node:
    """Parse ``source`` with libcst and convert it to an ``ir.Module``."""
    from sglang_audit.frontend.convert import module_from_source

    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, PARSE_RECURSION_LIMIT))
    try:
        return module_from_source(source)
    finally:
        sys.setrecursionlimit(old_limit)


# ---- the on-disk form ------------------------------------------------------------------
# Nodes are pickled as ``copyreg.__newobj__(cls)`` with their slots as the state: on load,
# C code makes each node and sets its slots (no Python call per node; the node classes have
# no ``__setstate__``). 0.67 s vs 1.14 s for ``_ir_node(kind, line, *fields)`` per node, the
# form before (400 cached modules; entries 42% larger).
_NODE_CLASSES: dict[str, type[ir.Node]] = {
    cls.kind: cls for cls in vars(ir).values()
    if isinstance(cls, type) and issubclass(cls, ir.Node) and cls is not ir.Node
}


def _reducer(cls: type[ir.Node]) -> Callable[[ir.Node], tuple[Any, ...]]:
    fields = ("line", *cls.__slots__)

    def reduce(node: ir.Node) -> tuple[Any, ...]:
        return copyreg.__newobj__, (cls,), (None, {f: getattr(node, f) for f in fields})  # type: ignore[attr-defined]

    return reduce


_DISPATCH = copyreg.dispatch_table.copy()
_DISPATCH.update({cls: _reducer(cls) for cls in _NODE_CLASSES.values()})


def dump_tree(tree: ir.Node) -> bytes:
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(tree)
    return buf.getvalue()


# an IR entry may name only the node classes, their constructor and the constant types a literal can be
# (a shared or restored cache dir must not be able to call anything else)
_IR_ALLOWED: dict[tuple[str, str], object] = {
    # a node is NEWOBJ of its class (pickle writes copyreg.__newobj__ as that opcode)
    **{(ir.__name__, cls.__name__): cls for cls in _NODE_CLASSES.values()},
    ("builtins", "complex"): complex,
    ("builtins", "Ellipsis"): Ellipsis,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "set"): set,
}
IR_MAGIC = b"SGA-IR1 "


def load_tree(data: bytes) -> Any:
    with _gc_paused():
        return safe_unpickle(data, _IR_ALLOWED)


class _gc_paused:  # noqa: N801 - used like a function
    """Pause the cyclic GC: a load allocates ~10^5 nodes and no garbage, and each
    generation-0 pass would walk the growing tree (5-10x the load itself)."""

    def __enter__(self) -> None:
        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            gc.enable()


def __getattr__(name: str) -> Any:
    # the converter's names, for callers (tests, benchmarks/bench.py) that reached them here
    if name in ("line_spans", "_Converter", "_LineState"):
        from sglang_audit.frontend import convert

        return getattr(convert, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class SourceCache:
    """Parsed-IR cache: memory first, then the user cache dir, keyed by content hash.

    ``parse_count``/``files_read`` let callers (and the benchmark) see what was parsed.
    One instance may serve many resolutions (explain, matrix workers): a file unchanged
    since it was last hashed (same size, mtime and inode) is not read or hashed again.
    """

    def __init__(self, use_disk: bool = True, on_parse: Callable[[Path], None] | None = None):
        self._memory: dict[str, ir.Node] = {}
        self._keys: dict[Path, tuple[tuple[int, int, int, int, int], str]] = {}
        self._disk = writable_subdir("ir") if use_disk else None
        self.on_parse = on_parse
        self.parse_count = 0
        self.parse_seconds = 0.0  # wall time spent parsing (reported)
        self.parse_cpu = 0.0  # CPU time spent parsing: excluded from the resolver's budget
        self.files_read: list[Path] = []
        # state the pipeline derives from a release once and reuses for every target that
        # gives the same inputs (the flag table: ``pipeline.flag_table``), keyed by its inputs;
        # and indexes of loaded IR trees (resolve/layers.py, resolve/attention.py), each kept
        # with the tree it indexes
        self.prepared: dict[Any, Any] = {}

    def load(self, path: Path) -> ir.Node:
        try:
            st = path.stat()
            if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
                raise ParseFailure("not a regular file, not analysed")
            if st.st_size > MAX_SOURCE_BYTES:
                raise ParseFailure(f"file larger than {MAX_SOURCE_BYTES // (1024 * 1024)} MB, not analysed")
            stamp = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
            known = self._keys.get(path)
            if known is not None and known[0] == stamp and known[1] in self._memory:
                self.files_read.append(path)
                return self._memory[known[1]]
            data = path.read_bytes()
        except OSError as exc:
            raise ParseFailure(f"cannot read: {exc.strerror}") from None
        self.files_read.append(path)
        digest = hashlib.sha256(data).hexdigest()
        key = f"{IR_FORMAT}-{digest}"
        self._keys[path] = (stamp, key)
        if key in self._memory:
            return self._memory[key]
        tree = self._read_disk(key)
        if tree is None:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ParseFailure(f"not UTF-8 text (byte {exc.start})") from None
            if "\x00" in text:
                raise ParseFailure("binary file (NUL byte)")
            if self.on_parse is not None:
                self.on_parse(path)
            tree = self._convert(key, text)
        self._memory[key] = tree
        return tree

    def _convert(self, key: str, text: str) -> ir.Node:
        """Parse and convert ``text``, counted and timed, and store it under ``key`` on disk."""
        self.parse_count += 1
        began, began_cpu = time.monotonic(), time.process_time()
        tree = convert_source(text)
        self.parse_seconds += time.monotonic() - began
        self.parse_cpu += time.process_time() - began_cpu
        self._write_disk(key, tree)
        return tree

    def content_sha256(self, path: Path) -> str | None:
        """The sha256 of the content ``path`` was last loaded with (what was analysed, without
        reading the file again); None if it was not loaded."""
        known = self._keys.get(path)
        return known[1].rpartition("-")[2] if known is not None else None

    def key_of(self, path: Path) -> Any:
        """The stamp and content key ``path`` was last loaded with (None: not loaded)."""
        return self._keys.get(path)

    def adopt_loads(self, loads: list[tuple[Path, Any]]) -> None:
        """Loads another process made for this cache's work (``key_of`` there): listed in
        ``files_read`` as if made here, with the content they were made with."""
        for path, known in loads:
            self.files_read.append(path)
            if known is not None:
                self._keys.setdefault(path, known)

    def snapshot(self, paths: list[Path]) -> tuple[tuple[Path, Any], ...]:
        """The stamp and content key each of ``paths`` was last loaded with: state derived
        from those files (``prepared``) is reused only while ``current(snapshot)`` holds."""
        return tuple((p, self._keys.get(p)) for p in dict.fromkeys(paths))

    def current(self, snapshot: tuple[tuple[Path, Any], ...]) -> bool:
        """Whether every file of ``snapshot`` still has the stamp it was loaded with."""
        for path, known in snapshot:
            if known is None:
                return False
            try:
                st = path.stat()
            except OSError:
                return False
            if (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev) != known[0]:
                return False
        return True

    def load_text(self, text: str) -> ir.Node:
        """The IR of source text that is not a file of the tree (a transformers config
        module read out of its wheel), cached by content like ``load``."""
        key = f"{IR_FORMAT}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()}"
        tree = self._memory.get(key) or self._read_disk(key)
        if tree is None:
            tree = self._convert(key, text)
        self._memory[key] = tree
        return tree

    def _read_disk(self, key: str) -> ir.Node | None:
        if self._disk is None:
            return None
        try:
            tree = load_tree(read_entry(self._disk / f"{key}.pickle", IR_MAGIC))
        except EntryRejected:  # absent, damaged or crafted: a miss, never an error
            return None
        return tree if isinstance(tree, ir.Node) else None

    def _write_disk(self, key: str, tree: ir.Node) -> None:
        if self._disk is None:
            return
        try:
            data = dump_tree(tree)
        except (RecursionError, pickle.PicklingError):
            return
        write_entry(self._disk / f"{key}.pickle", IR_MAGIC, data)
