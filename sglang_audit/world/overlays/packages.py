"""The installed packages as importlib sees them: which import names exist, at which version,
from the ``Environment`` (the release's own unconditional requirements, ``rules/packages.toml``,
and the user's ``--with``/``--without``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from sglang_audit import factfiles
from sglang_audit.evaluate.values import Class, External, Instance, Native, Unknown

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
            return _source_spec(interp, name)
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


def _source_spec(interp: Interpreter, name: str) -> Any:
    """importlib's ModuleSpec of a module of the analysed source tree, located as the import
    system locates it: ``origin`` is the file ``__file__`` names (a package's ``__init__.py``;
    None for a namespace package) and a package's ``submodule_search_locations`` its directory,
    so SGLang's probes of files next to it (0.5.16 jit_kernel/utils/compile.py
    ``Path(find_spec("sglang.jit_kernel").origin).parent / "include"``) are answered from the
    source tree; None for a module the tree lacks. Other attributes are unknown."""
    found = interp.find_module_file(name)
    if found is None:
        return None
    path, package = found
    namespace = package and path.name != "__init__.py"
    def other(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return Unknown(f"ModuleSpec.{args[-1]} of {name}", f"spec:{name}.{args[-1]}")

    spec = Instance(Class("ModuleSpec", (), {"__getattr__": Native("ModuleSpec.__getattr__", other)}, None))
    spec.attrs.update(name=name, origin=None if namespace else str(path), has_location=not namespace,
                      submodule_search_locations=[str(path if namespace else path.parent)] if package else None,
                      parent=name if package else name.rpartition(".")[0])
    return spec


def importlib_attrs(host: TargetHost) -> dict[str, Any]:
    return {
        "importlib.util.find_spec": Native("find_spec", host.find_spec),
        "importlib.metadata.version": Native("metadata.version", host.dist_version),
        # a plain install has no plugin packages: no entry points in any group
        "importlib.metadata.entry_points": Native("entry_points", lambda i, a, k: []),
    }
