"""Versions and pins scanned from a source tree's metadata files, as text.

METADATA/PKG-INFO headers, the sglang ``pyproject.toml`` and ``_version.py``: never imported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from packaging.version import InvalidVersion, Version

from sglang_audit.userfiles import UserFileError, read_user_file

HEADER_VERSION = re.compile(r"^Version:[ \t]*(\S+)", re.MULTILINE)
HEADER_NAME = re.compile(r"^Name:[ \t]*(\S+)", re.MULTILINE)


def pin_patterns(dist: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The exact-pin patterns of distribution ``dist`` (a regex) in METADATA's Requires-Dist
    and in a pyproject.toml dependency string; each match is (version, environment marker)."""
    requires = re.compile(
        rf"^Requires-Dist:[ \t]*{dist}[ \t]*(?:\[[^\]\n]*\])?[ \t]*\(?[ \t]*"
        r"==[ \t]*([^\s;,)]+)[ \t]*\)?[ \t]*(?:;(.*))?$",
        re.MULTILINE | re.IGNORECASE,
    )
    pyproject = re.compile(
        rf"""["']\s*{dist}\s*(?:\[[^\]"']*\])?\s*==\s*([^\s;,"']+)\s*(?:;([^"']*))?["']""",
        re.IGNORECASE,
    )
    return requires, pyproject


_REQUIRES_FLASHINFER, _PYPROJECT_FLASHINFER = pin_patterns(r"flashinfer[-_.]python")
_PYPROJECT_NAME = re.compile(r"""^name\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_PYPROJECT_VERSION = re.compile(r"""^version\s*=\s*["']([^"']+)["']""", re.MULTILINE)
VERSION_PY = re.compile(
    r"""^__version__\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.MULTILINE
)


def read_text(path: Path) -> str | None:
    """A metadata file's text; None when absent, not a regular file or over 16 MB (a FIFO
    or a 3 GB pyproject.toml beside the package is not metadata and is never read whole)."""
    try:
        return read_user_file(path, "metadata file").decode("utf-8", errors="replace")
    except UserFileError:
        return None


def valid_version(text: str | None) -> str | None:
    if not text:
        return None
    try:
        Version(text)
    except InvalidVersion:
        return None
    return text


def dist_version(metas: Iterable[Path], dists: Iterable[str]) -> str | None:
    """The version the first core-metadata file (``METADATA``/``PKG-INFO``) of one of ``dists``
    (normalised names) declares, if valid: a kernel library's wheel says which release it is."""
    wanted = set(dists)
    for path in metas:
        text = read_text(path)
        if text is None:
            continue
        headers = re.split(r"\r?\n\r?\n", text, maxsplit=1)[0]
        name = HEADER_NAME.search(headers)
        if name and re.sub(r"[-_.]+", "-", name.group(1).lower()) in wanted:
            version = HEADER_VERSION.search(headers)
            if version and valid_version(version.group(1)):
                return version.group(1)
    return None


def best_pin(matches: Iterable[tuple[str, str | None]]) -> str | None:
    """The first pin without an environment marker, else the first extra-only one, else any."""
    ranked: list[tuple[int, int, str]] = []
    for index, (pin, marker) in enumerate(matches):
        if valid_version(pin) is None:  # e.g. `==0.6.*`
            continue
        marker = (marker or "").strip()
        if not marker:
            rank = 0
        elif re.fullmatch(
            r"""(?:\s*(?:and|or)?\s*\(?\s*extra\s*==\s*["'][^"']*["']\s*\)?)+""", marker
        ):
            rank = 1  # `; extra == "srt"`: how older releases pinned it
        else:
            rank = 2  # platform/python markers that may exclude the target
        ranked.append((rank, index, pin))
    return min(ranked)[2] if ranked else None


def _core_metadata(path: Path) -> tuple[str | None, str | None] | None:
    """(version, flashinfer pin) from a METADATA/PKG-INFO file, None if not sglang's."""
    text = read_text(path)
    if text is None:
        return None
    headers = re.split(r"\r?\n\r?\n", text, maxsplit=1)[0]  # the body is the README
    name = HEADER_NAME.search(headers)
    if name and re.sub(r"[-_.]+", "-", name.group(1).lower()) != "sglang":
        return None
    version = HEADER_VERSION.search(headers)
    pin = best_pin((m.group(1), m.group(2)) for m in _REQUIRES_FLASHINFER.finditer(headers))
    return (valid_version(version.group(1)) if version else None), pin


def _pyproject_metadata(path: Path) -> tuple[str | None, str | None] | None:
    text = read_text(path)
    if text is None:
        return None
    # Drop comment lines so a commented-out old pin is not picked up.
    text = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    project = re.search(r"^\[project\][ \t]*$(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
    if project is None:
        return None
    name = _PYPROJECT_NAME.search(project.group(1))
    if name is None or name.group(1).lower() != "sglang":  # someone else's pyproject.toml
        return None
    version = _PYPROJECT_VERSION.search(project.group(1))  # absent when `dynamic`
    pin = best_pin((m.group(1), m.group(2)) for m in _PYPROJECT_FLASHINFER.finditer(text))
    return (valid_version(version.group(1)) if version else None), pin


def read_metadata(
    package: Path, meta_files: Iterable[Path], fallback_meta: Iterable[Path] = ()
) -> tuple[str | None, str | None]:
    """Version and FlashInfer pin, from the most authoritative file that has each.

    Order: wheel/sdist core metadata, the sglang pyproject.toml beside the package,
    `fallback_meta` (e.g. a possibly stale egg-info), then _version.py/version.py.
    """
    found: list[tuple[str | None, str | None]] = []
    for path in meta_files:
        result = _core_metadata(path)
        if result is not None:
            found.append(result)
    pyproject = _pyproject_metadata(package.parent / "pyproject.toml")
    if pyproject is not None:
        found.append(pyproject)
    for path in fallback_meta:
        result = _core_metadata(path)
        if result is not None:
            found.append(result)
    for name in ("_version.py", "version.py"):  # generated file first: version.py may be dynamic
        text = read_text(package / name)
        match = VERSION_PY.search(text) if text else None
        if match:
            found.append((valid_version(match.group(1)), None))
    version = next((v for v, _ in found if v), None)
    flashinfer = next((p for _, p in found if p), None)
    return version, flashinfer


_REQ = re.compile(r"^Requires-Dist:\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*([^;]*)(;\s*(.*))?$")


def requirements(package_dir: Path) -> list[tuple[str, str, str, str]]:
    """(dist, [extras], version spec, marker) of each Requires-Dist of the release's METADATA
    (beside its package dir), else of its pyproject.toml's dependencies."""
    parent = package_dir.parent
    out: list[tuple[str, str, str, str]] = []
    for meta in sorted(parent.glob("sglang-*.dist-info/METADATA")) + sorted(parent.glob("*/METADATA")):
        if not meta.is_file() or meta.stat().st_size > 4 * 1024 * 1024:
            continue  # a FIFO or a huge file is not package metadata
        for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
            m = _REQ.match(line.strip())
            if m:
                out.append((m.group(1), m.group(2) or "", m.group(3) or "", m.group(5) or ""))
        if out:
            return out
    pyproject = parent / "pyproject.toml"
    if pyproject.is_file() and pyproject.stat().st_size <= 4 * 1024 * 1024:
        text = pyproject.read_text(encoding="utf-8", errors="replace")
        block = re.search(r"^dependencies\s*=\s*\[(.*?)^\]", text, re.S | re.M)
        if block:
            for item in re.findall(r'"([^"]+)"', block.group(1)):
                m = re.match(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*([^;]*)(;\s*(.*))?", item)
                if m:
                    out.append((m.group(1), m.group(2) or "", m.group(3) or "", m.group(5) or ""))
    return out
