"""The target: GPU architecture, CUDA version, platform, installed packages, environment.

These are the inputs the analysed code would probe at run time (``torch.cuda``,
``nvidia-smi``, ``importlib.util.find_spec``, ``os.environ``).  Parsing a user's
``--arch``/``--cuda`` lives here too, with one-line errors.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sglang_audit import factfiles
from sglang_audit.errors import InputError

# The devices --arch names, from rules/devices.toml: (major, minor), typical product, memory in
# MiB per GPU (drives memory-derived settings only); SM_COUNT: torch's multi_processor_count.
_DEVICES = factfiles.devices()
CUDA_ARCHS: dict[str, tuple[int, int, str, int]] = {
    arch: (d.major, d.minor, d.name, d.memory_mib) for arch, d in _DEVICES.cuda.items()}
HIP_ARCHS: dict[str, tuple[int, int, str, int]] = {
    arch: (d.major, d.minor, d.name, d.memory_mib) for arch, d in _DEVICES.hip.items()}
SM_COUNT: dict[str, int] = {arch: d.sm_count for table in (_DEVICES.cuda, _DEVICES.hip) for arch, d in table.items()}
OTHER_PLATFORMS = ("npu", "xpu", "cpu")
ARCH_CHOICES = (*CUDA_ARCHS, *HIP_ARCHS, *OTHER_PLATFORMS)


@dataclass(frozen=True)
class Device:
    platform: str  # cuda | hip | npu | xpu | cpu
    arch: str  # sm120, gfx942, npu, ...
    major: int | None
    minor: int | None
    cuda: str | None  # "12.9" (torch.version.cuda) on cuda
    hip: str | None  # torch.version.hip on hip
    name: str
    memory_mib: int
    gpu_count: int = 8
    driver: str = "580.95.05"  # DEFAULT_DRIVER (below) unless --driver
    driver_source: str = "assumed"  # "assumed" (DEFAULT_DRIVER) or "given with --driver"
    cudnn: int | None = None  # torch.backends.cudnn.version(), e.g. 91002; None: not known
    # where ``cudnn`` came from: "--cudnn", or the pip profile's pin (inputs/pins.py device_for)
    cudnn_source: str | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @property
    def capability(self) -> tuple[int, int] | None:
        if self.major is None or self.minor is None:
            return None
        return (self.major, self.minor)

    def cuda_capability(self) -> tuple[int, int]:
        """The capability of a device that has one (a kernel library's code is asked only then)."""
        cc = self.capability
        if cc is None:
            raise ValueError(f"{self.arch} has no CUDA capability")
        return cc


def parse_cuda(text: str) -> str:
    if not re.fullmatch(r"\d{1,2}\.\d{1,2}", text.strip()):
        raise InputError(f"bad --cuda {text!r}: expected MAJOR.MINOR such as 12.9 or 13.0")
    return text.strip()


# The CUDA version torch reports when the user names none (one place for every command).
DEFAULT_CUDA = "12.9"
# The NVIDIA driver assumed when the user names none (--driver): what nvidia-smi and NVML's
# nvmlSystemGetDriverVersion would report; the output says it is assumed.
DEFAULT_DRIVER = "580.95.05"


def parse_driver(text: str) -> str:
    if not re.fullmatch(r"\d{2,4}\.\d{1,3}(?:\.\d{1,3})?", text.strip()):
        raise InputError(f"bad --driver {text!r}: expected the NVIDIA driver version nvidia-smi shows, such as 580.95.05 or 575.57")
    return text.strip()


def parse_device(arch: str, cuda: str = DEFAULT_CUDA, gpus: int = 8, cudnn: str | None = None,
                 driver: str | None = None) -> Device:
    """``--arch`` accepts sm80…sm121, a pair like ``12.0``, gfx942/gfx950, npu, xpu, cpu."""
    device = _parse_arch(arch, cuda, gpus)
    if driver is not None:
        device = replace(device, driver=parse_driver(driver), driver_source="given with --driver")
    if cudnn is None:
        return device
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?", cudnn.strip())
    if cudnn.strip().isdigit():
        value = int(cudnn.strip())
    elif m:
        value = int(m.group(1)) * 10000 + int(m.group(2)) * 100 + int(m.group(3) or 0)
    else:
        raise InputError(f"bad --cudnn {cudnn!r}: expected a version such as 9.10.2 or 91002")
    return replace(device, cudnn=value, cudnn_source="given with --cudnn")


def _parse_arch(arch: str, cuda: str, gpus: int) -> Device:
    key = arch.strip().lower()
    pair = re.fullmatch(r"(\d{1,2})\.(\d)", key)
    if pair:
        key = f"sm{int(pair.group(1))}{pair.group(2)}"
    if key in ("hip", "rocm", "mi300x"):
        key = "gfx942"
    if key in CUDA_ARCHS:
        major, minor, name, mem = CUDA_ARCHS[key]
        return Device("cuda", key, major, minor, parse_cuda(cuda), None, name, mem, gpus)
    if key in HIP_ARCHS:
        major, minor, name, mem = HIP_ARCHS[key]
        return Device("hip", key, major, minor, None, "6.4.43482", name, mem, gpus)
    if key in OTHER_PLATFORMS:
        return Device(key, key, None, None, None, None, key, 65536, gpus)
    import difflib  # for the message only

    close = difflib.get_close_matches(key, list(ARCH_CHOICES), n=2, cutoff=0.6)
    hint = f" (did you mean {' or '.join(sorted(close))}?)" if close else ""
    raise InputError(
        f"unknown --arch {arch!r}{hint}: choose one of {', '.join(ARCH_CHOICES)} or a pair like 12.0"
    )


@dataclass(frozen=True)
class Environment:
    """What the process would see: env vars set by the user, installed import names."""

    env: tuple[tuple[str, str], ...] = ()
    installed: frozenset[str] = frozenset()
    versions: tuple[tuple[str, str], ...] = ()  # distribution name → version (pins)
    extra: frozenset[str] = field(default_factory=frozenset)  # --with
    missing: frozenset[str] = field(default_factory=frozenset)  # --without
    # import names installed only as a namespace package, with their subpackages
    # (rules/packages.toml [namespace])
    namespaces: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # the environment profile applied (inputs/profiles.py: its packages are in ``installed``,
    # its variables in ``env``); None: the release's own requirements alone. A
    # target.profiles.Profile, typed there: profiles.py imports this module, not the reverse
    profile: Any = None

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def has_package(self, import_name: str) -> bool:
        if import_name in self.missing:
            return False
        return import_name in self.installed or import_name in self.extra
