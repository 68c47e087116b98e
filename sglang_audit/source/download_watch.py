"""Bytes downloaded so far while ``pip download`` runs (``locate.download_to_cache``), for a
person watching a terminal: pip's own output is captured for its error messages, so the
archive growing in pip's TMPDIR (kept inside the staging dir) is what shows progress."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

DOWNLOAD_POLL = 0.5  # seconds between two looks at the staging dir while pip downloads
PIP_TMP = ".pip-tmp"  # pip's TMPDIR inside the staging dir (pip downloads there first)


def format_bytes(n: int) -> str:
    """Decimal units, as pip shows them."""
    if n < 1000 * 1000:
        return f"{n / 1000:.0f} kB"
    return f"{n / 1e6:.1f} MB"


def downloaded_bytes(staging: Path, suffixes: tuple[str, ...]) -> int:
    """Bytes of archives under the staging dir: pip writes the archive into its TMPDIR
    (``PIP_TMP``) and copies it up when complete, so one file name is counted once."""
    sizes: dict[str, int] = {}
    for dirpath, _dirs, names in os.walk(staging):
        for name in names:
            if not name.lower().endswith(suffixes):
                continue
            try:
                n = os.stat(os.path.join(dirpath, name)).st_size
            except OSError:  # pip removed it between the listing and the stat
                continue
            sizes[name] = max(n, sizes.get(name, 0))
    return sum(sizes.values())


class DownloadWatch:
    """Bytes downloaded so far, on the status line of the progress callback (``say.status``,
    which shows on a terminal only; pip's own output is captured for its error messages).
    A progress callback without ``status`` (a library caller) gets nothing extra."""

    def __init__(self, label: str, staging: Path, say: Callable[[str], None], suffixes: tuple[str, ...]) -> None:
        self.label = label
        self.staging = staging
        self.suffixes = suffixes
        self.status: Callable[[str], None] | None = getattr(say, "status", None)
        self.done: Callable[[], None] | None = getattr(say, "done", None)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, name="download-progress", daemon=True)

    def _show(self) -> None:
        if self.status is not None:
            self.status(f"downloading {self.label}: {format_bytes(downloaded_bytes(self.staging, self.suffixes))}")

    def _poll(self) -> None:
        while not self.stop.wait(DOWNLOAD_POLL):
            self._show()

    def __enter__(self) -> DownloadWatch:
        if self.status is not None:
            self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.status is None:
            return
        self.stop.set()
        self.thread.join()
        if _exc[0] is None:
            self._show()  # the final count, whatever the polling interval caught
        if self.done is not None:
            self.done()
