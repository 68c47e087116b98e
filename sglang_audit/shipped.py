"""Where the data shipped with the tool lives: the one place that knows.

The repository keeps the rules (`rules/`: TOML fact files and `known-bad/*.yaml`) and the
bundled model profiles (`fixtures/models/`) at its top level; the build maps them into the
package as `sglang_audit/_rules` and `sglang_audit/_profiles` (pyproject.toml,
`[tool.setuptools.package-dir]`). An installed wheel reads them there, inside the package
directory; a checkout or an editable install, where the package directory has no
such folders, reads them from the repository beside the package. Nothing else computes a
data path.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_audit.errors import AuditError

# (name inside the installed package, path inside a checkout)
_LAYOUT = {
    "rules": ("_rules", "rules"),
    "profiles": ("_profiles", "fixtures/models"),
}
_PROJECT_NAME = 'name = "sglang-audit"'


class ShippedDataMissing(AuditError):
    """The installation lacks its own data files: a broken build, not a user error."""


@dataclass(frozen=True)
class DataRoot:
    path: Path
    origin: str  # "package" (an installed wheel or sdist build) or "checkout"


def package_dir() -> Path:
    """The tool's own package directory (its code, hashed into the result cache's key)."""
    # this module's own directory: the package is installed as files (importlib.resources
    # would say the same, and importing it costs ~3 ms of every command's start)
    return Path(__file__).parent


@functools.cache
def _root(kind: str) -> DataRoot:
    installed, checkout = _LAYOUT[kind]
    package = package_dir()
    candidate = package / installed
    if candidate.is_dir():
        return DataRoot(candidate, "package")
    # A checkout (or editable install): the repository beside the package, recognised by its
    # own pyproject.toml, so a stray top-level `rules/` elsewhere in site-packages is never taken.
    repo = package.parent
    pyproject = repo / "pyproject.toml"
    if (repo / checkout).is_dir() and pyproject.is_file() and _PROJECT_NAME in pyproject.read_text(encoding="utf-8", errors="replace"):
        return DataRoot(repo / checkout, "checkout")
    raise ShippedDataMissing(
        f"sglang-audit's shipped {kind} are missing from this installation "
        f"(looked in {candidate} and {repo / checkout}); reinstall the package"
    )


def rules_dir() -> Path:
    """The shipped rules: the TOML fact files and `known-bad/`."""
    return _root("rules").path


def known_bad_dir() -> Path:
    return rules_dir() / "known-bad"


def profiles_dir() -> Path:
    """The bundled model profiles, one directory with a config.json each."""
    return _root("profiles").path


def origin() -> str:
    """One line for `--version`: where the shipped rules were read from."""
    root = _root("rules")
    return f"rules from {root.path} ({root.origin})"


def load_toml(name: str) -> dict[str, Any]:
    """A shipped TOML fact file (`rules/NAME`), freshly parsed (callers may change their copy)."""
    with (rules_dir() / name).open("rb") as fh:
        return tomllib.load(fh)
