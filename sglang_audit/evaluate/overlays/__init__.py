"""Overlays: what Python's builtins and the pure stdlib mean to the evaluator, one module of
semantics per file, registered in one table (pytype's overlays).

``OVERLAYS`` maps a module name to the function that lists that module's attributes (by
dotted path) for a host world. The host (``world/native.py``'s ``NativeWorld``) composes these
with its own overlays (the device model, the installed packages, SGLang's boundaries) and owns
everything that touches the outside: the file system, the environment, package metadata.
Nothing here knows SGLang, a GPU or the command line.

To add a stdlib function: put it in the ``<module>_attrs`` of its module (``stdlib.py``,
``paths.py``, ``typeforms.py``, ``classes.py``), or add a module's function to the table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang_audit.evaluate.overlays import classes, paths, stdlib, typeforms
from sglang_audit.evaluate.overlays.host import Host

Overlay = Callable[[Host], dict[str, Any]]  # a module's attributes by dotted path

OVERLAYS: dict[str, Overlay] = {
    "collections": stdlib.collections_attrs,
    "contextlib": stdlib.contextlib_attrs,
    "copy": stdlib.copy_attrs,
    "dataclasses": classes.dataclasses_attrs,
    "enum": classes.enum_attrs,
    "functools": stdlib.functools_attrs,
    "glob": paths.glob_attrs,
    "importlib": stdlib.importlib_attrs,
    "itertools": stdlib.itertools_attrs,
    "json": stdlib.json_attrs,
    "logging": stdlib.logging_attrs,
    "math": stdlib.math_attrs,
    "msgspec": classes.msgspec_attrs,
    "os": stdlib.os_attrs,
    "os.path": paths.os_path_attrs,
    "packaging.version": stdlib.packaging_attrs,
    "pathlib": paths.pathlib_attrs,
    "pkgutil": stdlib.pkgutil_attrs,
    "re": stdlib.re_attrs,
    "struct": stdlib.struct_attrs,
    "sys": stdlib.sys_attrs,
    "types": typeforms.types_attrs,
    "typing": typeforms.typing_attrs,
    "typing_extensions": typeforms.typing_extensions_attrs,
    "warnings": stdlib.warnings_attrs,
}
