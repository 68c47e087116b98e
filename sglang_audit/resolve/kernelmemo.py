"""Kernel verdicts remembered by the content of every file their reading looked at.

Reading one FlashInfer entry (``kernelread.evaluate_row``) loads the IR of several large
FlashInfer modules (~0.09 s of a 0.5.23 ``resolve`` otherwise answered from the result
cache). The verdict is a pure function of the row of ``rules/kernels.toml``, the device model
and environment the library's code runs on, the FlashInfer package read and what its reading found on disk: every path it
probed (``is_file``) or loaded, FlashInfer's and the SGLang call site's alike. The memo
keeps, beside the verdict, each such path with its state then: not a regular file, or the
sha256 of its content (``cachedir.StampIndex``: re-hashed when the stamp changed). An entry
answers only while every path is in the same state, so the reading would follow the same
steps to the same verdict; the key holds the rest (the tool, the row, the device and environment, the
FlashInfer package and version, the SGLang root).

The attention kernel level (``attnkernels``) is remembered the same way, in two entries so a
hit imports none of its reading: which kernel functions a backend's constructor imports
(``reach``: keyed by the backend, the attention stage's outcome and the SGLang root, with the
SGLang files it probed and parsed), then the verdict on them (keyed by those imports, each
library's located package and version and the device, with the library files read).

Entries live beside the results (``<cache>/results``), checksummed and unpickled with the
result classes' allowlist; anything unreadable is a miss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglang_audit.cachedir import TooLarge, load_pickled, stamp_index, store_pickled
from sglang_audit.result import KernelVerdict

_MAGIC = b"SGA-KERNEL1 "
_SCOPE = "kernel-reads"  # the stamp index's table for the files kernel readings looked at
_NOT_A_FILE = "-"


class Reads:
    """What one reading saw (``kernelread``): each path it probed, with what ``is_file``
    said then, and the sha256 of the bytes of each file it parsed."""

    def __init__(self) -> None:
        self.probed: dict[Path, bool] = {}
        self.parsed_sha: dict[Path, str] = {}
        # not to be remembered: a path that answered both ways (the files changed while
        # read), or a file that did not parse
        self.unsteady = False

    def note(self, path: Path, is_file: bool) -> None:
        if self.probed.setdefault(path, is_file) != is_file:
            self.unsteady = True

    def parsed(self, path: Path, sha: str | None) -> None:
        if sha is None or self.parsed_sha.setdefault(path, sha) != sha:
            self.unsteady = True

    def states(self) -> list[tuple[str, str]] | None:
        """(path, state) as the reading saw them; None when they cannot be told."""
        out: list[tuple[str, str]] = []
        for path, is_file in self.probed.items():
            state = self.parsed_sha.get(path) if is_file else _NOT_A_FILE
            if state is None:
                return None  # a file found but not parsed: not a reading we can replay
            out.append((str(path), state))
        return None if self.unsteady else out


class KernelMemo:
    def __init__(self, directory: Path | None) -> None:
        self.dir = directory
        self.hits = 0

    def key(self, package_dir: Path, version: str | None, row: Any, device: dict[str, Any],
            env: dict[str, str], sglang_root: Path) -> str | None:
        """The reading's inputs besides the files: the device model and the environment the
        library's code runs on (``libeval``), whole: what of them it reads is not recorded."""
        return self.key_of({"format": "kernel2", "flashinfer": [str(package_dir), version],
                            "row": dataclasses.asdict(row), "device": device, "env": env,
                            "sglang_root": str(sglang_root)})

    def key_of(self, parts: dict[str, Any]) -> str | None:
        """The key of a reading whose inputs, besides the files it reads, are ``parts``
        (JSON-able; the tool's own digest is added: another tool may read otherwise)."""
        if self.dir is None:
            return None
        from sglang_audit.resolve.resultcache import tool_digest

        text = json.dumps({**parts, "tool": tool_digest()}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def _path(self, key: str) -> Path | None:
        return None if self.dir is None else self.dir / key[:2] / f"{key}.kernel"

    def get(self, key: str | None) -> KernelVerdict | None:
        found = self.get_value(key, lambda v: isinstance(v, KernelVerdict))
        return found if isinstance(found, KernelVerdict) else None

    def get_value(self, key: str | None, valid: Callable[[object], bool]) -> object | None:
        """The value remembered under ``key`` if ``valid(value)`` and every path its reading
        looked at is in the same state; None otherwise."""
        path = self._path(key) if key is not None else None
        if path is None:
            return None
        from sglang_audit.resolve.resultcache import ALLOWED

        value = load_pickled(path, _MAGIC, ALLOWED)
        if not (isinstance(value, tuple) and len(value) == 2 and valid(value[1])
                and isinstance(value[0], list) and all(isinstance(x, tuple) and len(x) == 2 for x in value[0])):
            return None
        reads, verdict = value
        index = stamp_index()
        try:
            if any(_state(p, index) != state for p, state in reads):
                return None
        except (OSError, TooLarge):
            return None
        finally:
            index.save()
        self.hits += 1
        return verdict

    def put(self, key: str | None, reads: Reads, verdict: object) -> None:
        """Remember ``verdict`` with each path's state as the reading saw it (not as the
        file is now: it may have changed since it was read)."""
        path = self._path(key) if key is not None else None
        states = reads.states() if path is not None else None
        if path is None or states is None:
            return
        store_pickled(path, _MAGIC, (states, verdict))


def _state(path: str, index: Any) -> str:
    """What ``Path.is_file`` and ``SourceCache.load`` see at ``path``: not a regular file,
    or the file's content (links followed, as they follow them)."""
    try:
        st = os.stat(path)
    except OSError:
        return _NOT_A_FILE
    if not stat.S_ISREG(st.st_mode):
        return _NOT_A_FILE
    return str(index.digest(os.path.realpath(path), st, _SCOPE))
