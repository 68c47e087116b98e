"""The installed packages as importlib sees them: which import names exist, at which version,
from the ``Environment`` (the release's own unconditional requirements, ``rules/packages.toml``,
and the user's ``--with``/``--without``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from sglang_audit import factfiles
from sglang_audit.evaluate.values import External, Native, Unknown

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.inputs.device import Environment
    from sglang_audit.world.overlays.host import TargetHost

KNOWN_PRESENT = {"torch", "transformers", "triton", "numpy", "packaging", "typing_extensions"}
# outside modules whose attributes are assumed to exist when asked with hasattr()
STDLIB_OBJECTS = frozenset({"torch", "torch.cuda", "torch.version", "os", "sys"})


class Packages:
    """Package presence and versions for one environment."""

    def __init__(self, package_name: str, environment: Environment, torch_version: str) -> None:
        self.package_name = package_name
        self.environment = environment
        self.torch_version = torch_version
        self.stdlib = set(sys.stdlib_module_names) | {"typing_extensions", "__future__"}
        spec = factfiles.packages()
        self.import_names = spec.import_names
        self.absent_packages = set(spec.optional.absent) - set(environment.extra)

    def package_state(self, top: str) -> bool | None:
        """True installed, False known absent, None: not modelled (a transitive dependency)."""
        if top in self.stdlib or top in KNOWN_PRESENT or self.environment.has_package(top):
            return True
        if top in self.environment.missing or top in self.absent_packages:
            return False
        return None

    def find_spec(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        name = args[0]
        if not isinstance(name, str):
            return Unknown("find_spec of an unknown name")
        top = name.split(".")[0]
        if top == self.package_name:
            return External(f"spec:{name}") if interp.find_module_file(name) is not None else None
        state = self.package_state(top)
        if state is True:
            return External(f"spec:{name}")
        if state is False:
            return None
        return Unknown(f"whether package {top!r} is installed", f"pkg:{top}")

    def import_version(self, import_name: str) -> str | None:
        if import_name == "torch":
            return self.torch_version
        for dist, ver in self.environment.versions:
            norm = dist.lower().replace("-", "_")
            if norm == import_name or self.import_names.get(dist) == import_name:
                return ver
        return None

    def dist_version(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        name = args[0]
        if not isinstance(name, str):
            return Unknown("version of an unknown distribution")
        norm = name.lower().replace("-", "_")
        for dist, ver in self.environment.versions:
            if dist.lower().replace("-", "_") == norm:
                return ver
        if norm == "torch":
            return self.torch_version
        raise interp.make_raise("PackageNotFoundError", name)


def importlib_attrs(host: TargetHost) -> dict[str, Any]:
    return {
        "importlib.util.find_spec": Native("find_spec", host.find_spec),
        "importlib.metadata.version": Native("metadata.version", host.dist_version),
        # a plain install has no plugin packages: no entry points in any group
        "importlib.metadata.entry_points": Native("entry_points", lambda i, a, k: []),
    }
