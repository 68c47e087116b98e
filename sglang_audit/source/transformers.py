"""The transformers source a release requires, read (never installed or imported) for the
config classes SGLang reads config.json through (issue #23: a key config.json omits takes
the class's default). The release's `transformers==V` pin is read from its metadata, the
wheel downloaded into the cache (wheels only: an sdist's build backend would run code),
and single `configuration_*.py` members are read out of the wheel on demand."""

from __future__ import annotations

import glob
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from sglang_audit.cachedir import cache_root
from sglang_audit.errors import SourceError
from sglang_audit.source.archives import (
    download_to_cache,
    pip_download,
    pip_failure,
)
from sglang_audit.source.metadata import (
    best_pin,
    pin_patterns,
    read_text,
)

if TYPE_CHECKING:
    import subprocess

_REQUIRES, _PYPROJECT = pin_patterns("transformers")
MAX_MEMBER = 4 * 1024 * 1024  # a configuration_*.py is tens of KB; refuse anything odd


def transformers_pin(package_dir: Path) -> str | None:
    """The exact transformers version the release beside ``package_dir`` requires, if any."""
    parent = package_dir.parent
    metas = [*sorted(parent.glob("sglang-*.dist-info/METADATA")), parent / "PKG-INFO"]
    for path in metas:
        text = read_text(path)
        if text:
            headers = re.split(r"\r?\n\r?\n", text, maxsplit=1)[0]
            pin = best_pin((m.group(1), m.group(2)) for m in _REQUIRES.finditer(headers))
            if pin:
                return pin
    text = read_text(parent / "pyproject.toml")
    if text:
        text = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
        return best_pin((m.group(1), m.group(2)) for m in _PYPROJECT.finditer(text))
    return None


def transformers_wheel(pin: str, *, download: bool = True, say: Callable[[str], None] | None = None) -> Path:
    """The cached ``transformers==pin`` wheel, downloaded (never installed) when absent."""
    try:
        version = str(Version(pin))
    except InvalidVersion:
        raise SourceError(f"bad transformers pin {pin!r}") from None
    cached = cached_transformers_wheel(version)
    if cached is not None:
        return cached
    label = f"transformers=={version}"
    if not download:
        raise SourceError(f"{label} is not in the cache")

    def fetch(staging: Path) -> subprocess.CompletedProcess[str]:
        result = pip_download(version, label, staging, binary_only=True, dist="transformers")
        if result.returncode != 0 and pip_failure(result) == "not-found":
            raise SourceError(f"{label}: no wheel on the package index")
        return result

    return download_to_cache(label, say or (lambda _m: None), fetch)


def cached_transformers_wheel(version: str) -> Path | None:
    found = sorted((cache_root() / "wheels").glob(f"{glob.escape(f'transformers-{version}')}-*.whl"))
    return found[0] if found else None


class TransformersWheel:
    """Read access to the ``configuration_*.py`` members of one transformers wheel."""

    def __init__(self, wheel: Path, version: str) -> None:
        import zipfile  # only an evaluation reads the wheel; a cached answer needs its name only

        self.wheel = wheel
        self.version = version
        self._zip = zipfile.ZipFile(wheel)
        self.config_files = sorted(
            i.filename for i in self._zip.infolist()
            if re.fullmatch(r"transformers/models/[^/]+/configuration_[^/]+\.py", i.filename)
        )

    def read(self, name: str) -> str | None:
        import zipfile

        try:
            info = self._zip.getinfo(name)
        except KeyError:
            return None
        if info.file_size > MAX_MEMBER:
            return None
        try:
            return self._zip.read(info).decode("utf-8", errors="replace")
        except (zipfile.BadZipFile, OSError, RuntimeError, EOFError):
            return None

    def files_declaring(self, model_type: str) -> list[str]:
        """Members with a class body line ``model_type = "<model_type>"`` (a text pre-filter;
        the caller confirms on the parsed class)."""
        pattern = re.compile(rf"""^\s+model_type\s*(?::[^=]+)?=\s*["']{re.escape(model_type)}["']\s*$""", re.MULTILINE)
        out = []
        for name in self.config_files:
            text = self.read(name)
            if text and pattern.search(text):
                out.append(name)
        return out
