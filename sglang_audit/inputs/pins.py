"""The versions a plain ``pip install sglang==X`` gets (issue 43): torch, flashinfer-python and
sgl-kernel from the release's own Requires-Dist, cuDNN from the ``nvidia-cudnn-cu*`` pin in
the metadata of the torch version the release pins (its Linux x86_64 wheel), each with the
text it came from.

torch's metadata is read without its wheel (several GB): the package index's core metadata
file (PEP 658, ``<wheel url>.metadata``, a few tens of kB), located through the index's JSON
simple API (PEP 691). ``pip install --dry-run --report`` would do the same where the index
advertises that file, but the index reached from here does not advertise it (no
``core-metadata`` key) and pip then downloads the whole wheel (measured 2026-12-07: 927 MB for
torch 2.9.1, pip 23.2.1 and 26.3, with and without ``--use-feature=fast-deps``), so the file
is fetched directly, capped at ``MAX_METADATA`` bytes: a wheel can never come down. The
answer is cached per (package, version) in the user cache dir (``metadata/``). Offline
(``SGLANG_AUDIT_OFFLINE=1``, or the index unreachable) the cuDNN pin comes from
``rules/torch_pins.toml``, a table read from the same files, and says it is that fallback."""

from __future__ import annotations

import functools
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sglang_audit import factfiles
from sglang_audit.errors import AuditError
from sglang_audit.source.metadata import requirements

T = TypeVar("T")

if TYPE_CHECKING:
    from sglang_audit.inputs.device import Device

OFFLINE_ENV = "SGLANG_AUDIT_OFFLINE"  # =1: never ask the package index
INDEX_ENV = "SGLANG_AUDIT_INDEX_URL"  # the PEP 691 simple index (default: PIP_INDEX_URL, else PyPI)
DEFAULT_INDEX = "https://pypi.org/simple"
MAX_INDEX_PAGE = 16 * 1024 * 1024  # torch's JSON page: ~0.4 MB
MAX_METADATA = 1024 * 1024  # torch's core metadata: ~30 kB; a wheel is never read
TIMEOUT = 10  # seconds per request: metadata files are small; a blackholed index costs this once
TABLE = "torch_pins.toml"
# the platform a plain install is taken on: torch's CUDA wheels on PyPI are Linux x86_64's
PLATFORM = {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux",
            "os_name": "posix", "platform_python_implementation": "CPython",
            "implementation_name": "cpython", "python_version": "3.12", "python_full_version": "3.12.0"}
PLATFORM_TEXT = "Linux x86_64"
# the packages of the profile, by the names a release may give them (sgl-kernel became
# sglang-kernel in 0.5.10)
PACKAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch", ("torch",)),
    ("flashinfer-python", ("flashinfer-python",)),
    ("sgl-kernel", ("sgl-kernel", "sglang-kernel")),
)


class MetadataUnavailable(AuditError):
    """The index could not be asked (offline, unreachable, no such file)."""


class IndexUnreachable(MetadataUnavailable):
    """No answer at all (no route, DNS, a timeout): the network, not the file. Remembered for
    RETRY_AFTER seconds, so a machine without access to the index waits once, not on every
    command (a blackholed connection costs TIMEOUT per request)."""


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    """One package of the profile: its version (None: not one exact version) and its source."""

    package: str  # "torch", "flashinfer-python", "sgl-kernel", "cuDNN"
    version: str | None
    source: str  # "sglang 0.5.23 Requires-Dist: torch==2.14.1"
    note: str = ""  # "a range: ...", "fallback: ..."
    fallback: bool = False  # read from rules/torch_pins.toml, not from the index
    dist: str = ""  # the distribution as the release names it (sglang-kernel, nvidia-cudnn-cu13)
    requirement: str = ""  # cuDNN: the Requires-Dist line of torch that pins it
    why_fallback: str = ""  # cuDNN from the table: why the index was not read

    def to_json(self) -> dict[str, Any]:
        return {"package": self.package, "dist": self.dist, "version": self.version, "source": self.source,
                "note": self.note or None, "fallback": self.fallback}

    def text(self) -> str:
        shown = self.version if self.version is not None else "unknown"
        note = f"; {self.note}" if self.note else ""
        return f"{self.package} {shown} ({self.source}{note})"


def _marker_holds(marker: str) -> bool:
    """An environment marker on Linux x86_64 (extras other than the defaults do not hold)."""
    if not marker.strip():
        return True
    from packaging.markers import InvalidMarker, Marker, UndefinedEnvironmentName

    try:
        return bool(Marker(marker).evaluate({**PLATFORM, "extra": ""}))
    except (InvalidMarker, UndefinedEnvironmentName):
        return False


def release_pins(package_dir: Path, release: str) -> list[Pin]:
    """torch, flashinfer-python and sgl-kernel as the release's Requires-Dist pins them (the
    unconditional requirements and those whose marker holds on Linux x86_64; default extras)."""
    default_extras = set(factfiles.packages().base.default_extras)
    reqs = requirements(package_dir)
    out: list[Pin] = []
    for package, names in PACKAGES:
        found = None
        for dist, extra, version_spec, marker in reqs:
            if _norm(dist) not in names:
                continue
            extra_name = re.search(r"extra\s*==\s*[\"']([^\"']+)", marker or "")
            if extra_name and extra_name.group(1) not in default_extras:
                continue
            if marker and not extra_name and not _marker_holds(marker):
                continue
            found = (dist, extra, version_spec.strip(), marker)
            break
        if found is None:
            out.append(Pin(package, None, f"sglang {release} Requires-Dist names no {' or '.join(names)}",
                           note="not installed by a plain install"))
            continue
        dist, extra, version_spec, marker = found
        written = f"{dist}{extra}{version_spec}" + (f"; {marker}" if marker else "")
        source = f"sglang {release} Requires-Dist: {written}"
        exact = re.fullmatch(r"\(?\s*==\s*([^\s,;*)]+)\s*\)?", version_spec)
        if exact:
            out.append(Pin(package, exact.group(1), source, dist=dist))
        else:
            what = version_spec or "any version"
            out.append(Pin(package, None, source, dist=dist,
                           note=f"a range ({what}): pip installs the newest matching version at install time"))
    return out


# ---- torch's own metadata ----------------------------------------------------------------

def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "") not in ("", "0")


def _index() -> str:
    return (os.environ.get(INDEX_ENV) or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX).rstrip("/")


def _get(url: str, limit: int, accept: str | None = None, byte_range: str | None = None) -> bytes:
    import urllib.error
    import urllib.request

    if not url.startswith("https://"):
        raise MetadataUnavailable(f"{url}: only https is asked")
    headers = {"User-Agent": "sglang-audit"}
    if accept:
        headers["Accept"] = accept
    if byte_range:
        headers["Range"] = f"bytes={byte_range}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT) as resp:
            if byte_range and resp.status != 206:
                raise MetadataUnavailable(f"{url}: the server does not serve byte ranges")
            data: bytes = resp.read(limit + 1)
    except urllib.error.HTTPError as exc:
        raise MetadataUnavailable(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise IndexUnreachable(f"{url}: {reason}") from None
    if len(data) > limit:
        raise MetadataUnavailable(f"{url}: larger than {limit} bytes, not metadata")
    return data


MAX_TRIES = 8  # wheels of one version whose metadata file is asked for, until one answers


def _wheel_files(package: str, version: str) -> list[tuple[str, str]]:
    """(file name, url) of the package's Linux x86_64 wheels of ``version`` on the index, the
    newest CPython's first (their Requires-Dist is the same; an index may serve the metadata
    file of some and not of others)."""
    page = _index() + f"/{_norm(package)}/"
    data = _get(page, MAX_INDEX_PAGE, "application/vnd.pypi.simple.v1+json")
    try:
        files = json.loads(data)["files"]
    except (ValueError, KeyError, TypeError):
        raise MetadataUnavailable(f"{page}: not a JSON simple index page") from None
    stem = re.escape(package.replace("-", "_"))
    pattern = re.compile(rf"{stem}-{re.escape(version)}-cp3(\d+)-cp3\d+-manylinux[^/]*x86_64\.whl")
    wheels = []
    for f in files:
        m = pattern.fullmatch(str(f.get("filename", ""))) if isinstance(f, dict) else None
        if m and not f.get("yanked") and str(f.get("url", "")).startswith("https://"):
            wheels.append((-int(m.group(1)), f["filename"], f["url"]))
    if not wheels:
        raise MetadataUnavailable(f"{page}: no Linux x86_64 wheel of {package} {version}")
    return [(name, url) for _, name, url in sorted(wheels)]


def _core_metadata(package: str, version: str) -> tuple[str, str, str]:
    """(metadata text, where it was read, url) of the first wheel that answers: its PEP 658
    metadata file, else its ``.dist-info/METADATA`` member read by byte ranges (the zip's
    directory at its end, then that one member: some hundred kB, never the wheel)."""
    why = ""
    for name, url in _wheel_files(package, version)[:MAX_TRIES]:
        try:
            return _get(url + ".metadata", MAX_METADATA).decode("utf-8", errors="replace"), f"{name}.metadata", url
        except MetadataUnavailable as exc:
            why = str(exc)
        try:
            member = f"{package.replace('-', '_')}-{version}.dist-info/METADATA"
            return _zip_member(url, member).decode("utf-8", errors="replace"), f"{name}:{member} (byte ranges)", url
        except MetadataUnavailable as exc:
            why = f"{why}; {exc}"
    raise MetadataUnavailable(f"no metadata of a Linux x86_64 wheel of {package} {version} could be read ({why})")


ZIP_TAIL = 65536 + 22  # the end-of-central-directory record and the longest zip comment
MAX_CENTRAL_DIRECTORY = 8 * 1024 * 1024  # torch's: ~1.5 MB (some 15,000 members)


def _zip_member(url: str, member: str) -> bytes:
    """One member of a remote zip, read with HTTP byte ranges (as pip's ``fast-deps`` does)."""
    import struct
    import zlib

    tail = _get(url, ZIP_TAIL, byte_range=f"-{ZIP_TAIL}")
    end = tail.rfind(b"PK\x05\x06")
    if end < 0 or len(tail) < end + 22:
        raise MetadataUnavailable(f"{url}: no zip directory at its end")
    cd_size, cd_offset = struct.unpack("<II", tail[end + 12:end + 20])
    if cd_size > MAX_CENTRAL_DIRECTORY or cd_offset == 0xFFFFFFFF:
        raise MetadataUnavailable(f"{url}: zip directory too large or zip64")
    directory = _get(url, cd_size, byte_range=f"{cd_offset}-{cd_offset + cd_size - 1}")
    pos, wanted = 0, member.encode()
    while pos + 46 <= len(directory) and directory[pos:pos + 4] == b"PK\x01\x02":
        method, = struct.unpack("<H", directory[pos + 10:pos + 12])
        csize, usize = struct.unpack("<II", directory[pos + 20:pos + 28])
        nlen, xlen, clen = struct.unpack("<HHH", directory[pos + 28:pos + 34])
        local, = struct.unpack("<I", directory[pos + 42:pos + 46])
        name = directory[pos + 46:pos + 46 + nlen]
        pos += 46 + nlen + xlen + clen
        if name.lower() != wanted.lower():
            continue
        if csize > MAX_METADATA or usize > MAX_METADATA or method not in (0, 8):
            raise MetadataUnavailable(f"{url}: {member} is not plausible metadata")
        head = _get(url, 30, byte_range=f"{local}-{local + 29}")
        if head[:4] != b"PK\x03\x04":
            raise MetadataUnavailable(f"{url}: bad local header of {member}")
        lnlen, lxlen = struct.unpack("<HH", head[26:30])
        start = local + 30 + lnlen + lxlen
        raw = _get(url, csize, byte_range=f"{start}-{start + csize - 1}") if csize else b""
        try:
            data = zlib.decompressobj(-15).decompress(raw, MAX_METADATA + 1) if method == 8 else raw
        except zlib.error:
            raise MetadataUnavailable(f"{url}: {member} does not inflate") from None
        if len(data) != usize:
            raise MetadataUnavailable(f"{url}: {member} is truncated")
        return data
    raise MetadataUnavailable(f"{url}: no {member} in the wheel")


CACHE_MAGIC = b"SGA-META1 "
RETRY_AFTER = 15 * 60  # seconds an unreachable index is not asked again
UNREACHABLE = ".index-unreachable"  # in metadata/: the index asked and when it did not answer


def _asked(cached: Path | None, ask: Callable[[], T]) -> T:
    """``ask()`` of the index, unless it did not answer within RETRY_AFTER seconds (then the
    one-line reason, no network); a failure to answer is written down for the next command."""
    from sglang_audit.cachedir import EntryRejected, read_entry, write_entry

    index = _index()
    marker = cached / UNREACHABLE if cached is not None else None
    if marker is not None:
        try:
            seen = json.loads(read_entry(marker, CACHE_MAGIC, 4096))
            age = time.time() - float(seen["at"])
            if seen.get("index") == index and 0 <= age < RETRY_AFTER:
                raise MetadataUnavailable(
                    f"the package index {index} did not answer {int(age // 60)} min ago ({seen.get('why', '')}); "
                    f"asked again after {RETRY_AFTER // 60} min, or `sglang-audit cache clear`")
        except (EntryRejected, ValueError, RecursionError, KeyError, TypeError):
            pass  # no marker (or a damaged one): ask
    try:
        answer = ask()
    except IndexUnreachable as exc:
        if marker is not None:
            write_entry(marker, CACHE_MAGIC, json.dumps({"index": index, "at": time.time(), "why": str(exc)[:300]}).encode())
        raise
    if marker is not None:
        marker.unlink(missing_ok=True)
    return answer


def requires_dist(package: str, version: str) -> tuple[list[str], str]:
    """The Requires-Dist lines of ``package==version``'s Linux x86_64 wheel and where they were
    read, from the user cache (``metadata/``, a checksummed entry per package and version) or
    the index."""
    from sglang_audit.cachedir import EntryRejected, read_entry, writable_subdir, write_entry

    if offline():  # the shipped table only (cudnn_pin): what a cache holds differs between machines
        raise MetadataUnavailable(f"{OFFLINE_ENV}=1")
    key = f"{_norm(package)}-{version}.json"
    cached = writable_subdir("metadata")
    path = cached / key if cached is not None else None
    if path is not None:
        try:
            entry = json.loads(read_entry(path, CACHE_MAGIC, MAX_METADATA))
            if (isinstance(entry, dict) and isinstance(entry.get("requires_dist"), list)
                    and isinstance(entry.get("read"), str)):
                return [str(r) for r in entry["requires_dist"]], entry["read"]
        except (EntryRejected, ValueError, RecursionError):
            pass  # absent or damaged: a miss
    meta, read, url = _asked(cached, lambda: _core_metadata(package, version))
    head_name = re.search(r"^Name:\s*(\S+)", meta, re.M)
    head_version = re.search(r"^Version:\s*(\S+)", meta, re.M)
    if not head_name or _norm(head_name.group(1)) != _norm(package) or not head_version or head_version.group(1) != version:
        raise MetadataUnavailable(f"{url}: not the metadata of {package} {version}")
    lines = [m.group(1).strip() for m in re.finditer(r"^Requires-Dist:\s*(.+)$", meta, re.M)]
    if path is not None:  # not cached (not writable): asked again next time
        write_entry(path, CACHE_MAGIC, json.dumps({"requires_dist": lines, "read": read, "url": url}).encode())
    return lines, read


_CUDNN = re.compile(r"^(nvidia-cudnn-cu\d+)\s*==\s*([0-9][0-9.]*)\s*(?:;\s*(.*))?$")


def cudnn_pin(torch: Pin) -> Pin:
    """The cuDNN a plain install of ``torch`` gets: its metadata's ``nvidia-cudnn-cu*`` pin
    that holds on Linux x86_64; from ``rules/torch_pins.toml`` when the index cannot be asked."""
    if torch.version is None:
        return Pin("cuDNN", None, "torch is not pinned to one version", note="derive it with --cudnn")
    version = torch.version
    try:
        lines, read = requires_dist("torch", version)
    except MetadataUnavailable as exc:
        return _fallback(version, str(exc))
    for line in lines:
        m = _CUDNN.match(line)
        if m and _marker_holds(m.group(3) or ""):
            return Pin("cuDNN", m.group(2), f"torch {version} Requires-Dist {line}; read from {read}", dist=m.group(1),
                       requirement=line)
    return Pin("cuDNN", None, f"torch {version} Requires-Dist pins no nvidia-cudnn for {PLATFORM_TEXT} (read from {read})")


def _fallback(version: str, why: str) -> Pin:
    row = factfiles.torch_pins().torch.get(version)
    if row is None:
        return Pin("cuDNN", None, f"torch {version}'s metadata could not be read ({why}) and rules/{TABLE} has no row for it",
                   note="give --cudnn", fallback=True)
    line = f"{row.dist}=={row.cudnn}; {row.marker}"
    return Pin("cuDNN", row.cudnn, f"torch {version} Requires-Dist {line}; rules/{TABLE}, read from {row.read}",
               note=f"fallback: torch's metadata not read from the package index ({why})", fallback=True, dist=row.dist,
               requirement=line, why_fallback=why)


def torch_cudnn_number(version: str) -> int | None:
    """cuDNN ``9.10.2.21`` as ``torch.backends.cudnn.version()`` reports it: 91002 (cuDNN's
    CUDNN_VERSION: major * 10000 + minor * 100 + patch from 9.0, major * 1000 + ... before)."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if not m:
        return None
    major, minor, patch = (int(g) for g in m.groups())
    return major * (10000 if major >= 9 else 1000) + minor * 100 + patch


@dataclass(frozen=True)
class PipProfile:
    """What ``sglang-audit env`` prints: the pip profile's versions for one release."""

    release: str
    platform: str  # the device's platform (cuda, hip, ...)
    pins: tuple[Pin, ...]

    @property
    def complete(self) -> bool:
        return all(p.version is not None or p.note == NOT_HERE for p in self.pins)

    def pin(self, package: str) -> Pin:
        return next(p for p in self.pins if p.package == package)

    def to_json(self) -> dict[str, Any]:
        return {"release": self.release, "profile": "pip", "platform": self.platform,
                "where": PLATFORM_TEXT, "packages": [p.to_json() for p in self.pins]}


NOT_HERE = "not used on this platform"
CUDA_ONLY = ("flashinfer-python", "sgl-kernel", "cuDNN")


def profile_for(package_dir: Path, release: str, platform: str = "cuda") -> PipProfile:
    """The pip profile's versions on ``platform``: off CUDA, flashinfer, sgl-kernel and cuDNN are
    not what the deployment uses (resolve/release.build_environment drops the CUDA-only
    packages there), so they are listed as such, not derived."""
    pins = release_pins(package_dir, release)
    if platform != "cuda":
        pins = [p if p.package not in CUDA_ONLY else Pin(p.package, None, p.source, note=NOT_HERE, dist=p.dist)
                for p in pins]
        return PipProfile(release, platform, (*pins, Pin("cuDNN", None, f"torch on {platform}", note=NOT_HERE)))
    return PipProfile(release, platform, (*pins, cudnn_pin(pins[0])))


@functools.lru_cache(maxsize=64)
def target_device(arch: str, cuda: str, cudnn: str | None, driver: str | None, package_dir: Path,
                  release: str | None, env_profile: str | None) -> Device:
    """The device a target runs on: ``--arch``/``--cuda``/``--cudnn``/``--driver`` as given, the
    cuDNN a plain install gets where none was (``device_for``). One per process and input: the
    matrix asks it for every case of an arch."""
    from sglang_audit.inputs.device import parse_device

    return device_for(parse_device(arch, cuda, cudnn=cudnn, driver=driver), package_dir, release, env_profile)


def device_for(device: Device, package_dir: Path, release: str | None, env_profile: str | None) -> Device:
    """``device`` with the cuDNN a plain pip install gets (issue 43 item 2): when no --cudnn was
    given, the platform is CUDA and the environment profile is ``pip``, the pinned torch's
    ``nvidia-cudnn-cu*`` pin as torch reports it (9.10.2.21 -> 91002), with its source. Else
    ``device`` unchanged (the version stays unknown where SGLang reads it)."""
    if device.platform != "cuda" or device.cudnn is not None:
        return device
    from sglang_audit.errors import InputError
    from sglang_audit.inputs import profiles

    try:
        profile = profiles.select(env_profile, device.platform, release)
    except InputError:
        return device  # the bad --env-profile is reported where the environment is built
    if profile.name != "pip":
        return device
    torch = release_pins(package_dir, release or "unknown")[0]
    pin = cudnn_pin(torch)
    number = torch_cudnn_number(pin.version) if pin.version else None
    if number is None:
        return device
    table = f"; from rules/{TABLE} ({pin.why_fallback})" if pin.fallback else ""
    source = f"the pip profile: torch {torch.version} Requires-Dist {pin.requirement}{table}; --cudnn overrides"
    return replace(device, cudnn=number, cudnn_source=source)
