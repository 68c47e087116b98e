"""What a release should have: a module the tree lacks is either a layer this release does
not have, or a damaged/unknown tree whose value must be unknown (issue #23).

A module missing while its package exists, or missing from a tree whose scheduler runs the
runtime initialisers and builds the layers (`rules/settings.toml` [expected]), is expected;
only a partial tree with neither is read as a release without that layer."""

from __future__ import annotations

from sglang_audit import factfiles
from sglang_audit.evaluate.interpreter import Interpreter

_SERVING: tuple[str, ...] | None = None


def serving_modules() -> tuple[str, ...]:
    global _SERVING
    if _SERVING is None:
        _SERVING = factfiles.settings().expected.serving_modules
    return _SERVING


def module_path(module: str) -> str:
    return module.replace(".", "/") + ".py"


def missing_module(interp: Interpreter, module: str) -> str | None:
    """None when ``module`` is in the tree or the tree is a partial one without its package
    and without a scheduler; else why the release should have it (for an unknown's reason)."""
    if interp.find_module_file(module) is not None:
        return None
    package = module.rsplit(".", 1)[0]
    if interp.find_module_file(package) is not None:
        return f"no module {module} ({module_path(module)}) in this release"
    for serving in serving_modules():
        if interp.find_module_file(serving) is not None:
            return (f"no module {module} ({module_path(module)}; its whole package {package.replace('.', '/')}/ "
                    f"is missing, in a tree whose scheduler {module_path(serving)} needs it: damaged or "
                    "unknown layout) in this release")
    return None
