"""Whether an extracted copy in the cache is still exactly what was extracted.

``locate`` extracts an archive into ``<cache>/sources/<id>/`` and writes a marker holding
the manifest (path → sha256 of every file written). Before the copy is analysed, and
before a result keyed by it is served, the files there are checked against that manifest
(``verified``): a file added, removed, edited, replaced by a link or anything else, or a
directory no written file needs, is a mismatch. A match yields the manifest's digest,
which then stands for the tree's content (the result cache keys on it).

Checking every file's content costs a stat and a stamp lookup per file (~0.1 s on 0.5.23's
~5,800 files, the stamp table alone ~0.02 s to load). So a full check that passes, with no
stamp younger than ``cachedir.RACY_NS``, saves a *fingerprint*: the hash of every entry's
relative path and stamp (type, size, mtime, ctime, inode, device). The next check walks the
tree once, stats each entry, and when the fingerprint is the same returns the digest saved
with it; any difference (an edit, even of the same size with the mtime restored, changes
the ctime, which cannot be set back) falls back to the full check. The trust is the stamp
index's (``cachedir.StampIndex``): an equal stamp means equal content.
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import stat
import time
from array import array
from itertools import chain
from pathlib import Path

from sglang_audit import cachedir
from sglang_audit.cachedir import EntryRejected, TooLarge, read_entry, stamp_index, write_entry

MARKER = ".sglang-audit-complete"
_FINGERPRINT_MAGIC = b"SGA-EXTRACTED1 "
_STAMP = operator.attrgetter("st_mode", "st_size", "st_mtime_ns", "st_ctime_ns", "st_ino", "st_dev")


def verified(root: Path, archive_sha: str) -> str | None:
    """The manifest digest when ``root`` holds exactly what was extracted from the archive
    with this sha256, else None."""
    listed = _listing(str(root))
    fingerprint = _fingerprint(archive_sha, *listed) if listed is not None else None
    saved = _fingerprint_file(str(root))
    if fingerprint is not None and saved is not None:
        try:
            known = json.loads(read_entry(saved, _FINGERPRINT_MAGIC))
        except (EntryRejected, ValueError, RecursionError):
            known = None
        if isinstance(known, dict) and known.get("fingerprint") == fingerprint and isinstance(known.get("digest"), str):
            return str(known["digest"])
    if listed is None:
        return None
    digest = _checked(root, archive_sha, *listed)
    if digest is not None and fingerprint is not None and saved is not None and _settled(listed[1]):
        write_entry(saved, _FINGERPRINT_MAGIC, json.dumps({"fingerprint": fingerprint, "digest": digest}).encode())
    return digest


def manifest_files(root: Path, archive_sha: str) -> dict[str, str] | None:
    """The manifest of the copy at ``root`` (relative path -> sha256 as extracted), or None
    when its marker is missing, damaged or of another archive."""
    try:
        marker = json.loads((root / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    files = marker.get("files") if isinstance(marker, dict) else None
    if not isinstance(files, dict) or marker.get("archive_sha256") != archive_sha:
        return None
    return files


def manifest_digest(archive_sha: str, files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(["manifest1", archive_sha, sorted(files.items())]).encode()).hexdigest()


def _listing(root: str) -> tuple[list[str], list[os.stat_result]] | None:
    """Every entry under ``root`` (relative path, lstat), directory links not followed;
    None when a directory cannot be read."""
    rels: list[str] = []
    stats: list[os.stat_result] = []
    cut = len(root.rstrip(os.sep)) + 1
    pending = [root]
    try:
        while pending:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    rels.append(entry.path[cut:])
                    stats.append(entry.stat(follow_symlinks=False))
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
    except OSError:
        return None
    return rels, stats


def _fingerprint(archive_sha: str, rels: list[str], stats: list[os.stat_result]) -> str | None:
    # the entries in walk order: a directory listed in another order only costs a full check
    h = hashlib.sha256(f"extracted1\0{archive_sha}\0".encode())
    h.update("\0".join(rels).encode("utf-8", "surrogateescape"))
    try:
        h.update(array("Q", chain.from_iterable(map(_STAMP, stats))).tobytes())
    except OverflowError:  # a time before 1970: no fingerprint, the full check every time
        return None
    return h.hexdigest()


def _settled(stats: list[os.stat_result]) -> bool:
    """No entry changed within the filesystem clock's tick: a same-size rewrite right
    now could keep every stamp, so such a listing is not remembered."""
    newest = max((max(st.st_mtime_ns, st.st_ctime_ns) for st in stats), default=0)
    return time.time_ns() - newest > cachedir.RACY_NS  # read at call time: tests move it


def _fingerprint_file(root: str) -> Path | None:
    index = stamp_index()
    if index.dir is None:
        return None
    return index.dir / f"extracted-{hashlib.sha256(os.fsencode(root)).hexdigest()[:24]}.json"


def _checked(root: Path, archive_sha: str, rels: list[str], stats: list[os.stat_result]) -> str | None:
    """The full check: every listed entry against the marker's manifest, file contents
    through the stamp index (hashed again only when a stamp changed)."""
    files = manifest_files(root, archive_sha)
    if files is None:
        return None  # written by an older version (no manifest): extract again
    # extraction makes directories only as parents of the files it writes
    dirs = set()
    for rel in files:
        while (rel := os.path.dirname(rel)) and rel not in dirs:
            dirs.add(rel)
    scope = str(root)
    prefix = scope.rstrip(os.sep) + os.sep
    index = stamp_index()
    seen = 0
    try:
        for rel, st in zip(rels, stats, strict=True):
            if stat.S_ISDIR(st.st_mode):
                if rel not in dirs:
                    return None
                continue
            if rel == MARKER:
                continue
            if not stat.S_ISREG(st.st_mode) or files.get(rel) != index.digest(prefix + rel, st, scope):
                return None  # a link, a special file, an edit or a file the archive lacks
            seen += 1
    except (OSError, TooLarge):
        return None
    finally:
        index.save()
    return manifest_digest(archive_sha, files) if seen == len(files) else None
