"""Modules: the analysed tree's modules found and loaded as CPython's import system does
(parents first, a package's ``__path__``), module attributes and deferred imports."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Self

from sglang_audit.evaluate.core import Frame, InterpreterCore, PyRaise, Unmodelled
from sglang_audit.evaluate.values import (
    External,
    Function,
    Instance,
    LazyImport,
    ModuleObj,
    Unknown,
)
from sglang_audit.frontend import ir
from sglang_audit.frontend.bindings import absolute_module, bound_names
from sglang_audit.frontend.parse import ParseFailure


@functools.lru_cache(maxsize=8192)
def _inside_tree(path: str, root: str) -> bool:
    # memoised like _find_module_file: a located tree does not change while the tool runs
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


_MODULE_FILE = re.compile(r"([^.]+)(?:\.py|\.pyc|(?:\.cpython-[^.]+|\.abi3)?\.so)")


@functools.lru_cache(maxsize=64)
def _package_modules(directory: str) -> list[tuple[str, bool]] | None:
    # pkgutil's iter_importer_modules for a FileFinder (CPython 3.11 pkgutil.py
    # _iter_file_finder_modules): the directory's entries sorted; a module file by its
    # importable suffix (.py, .pyc, an extension); a subdirectory without a dot in its name is
    # a package when it holds an __init__ module, else skipped; __init__ itself and repeats skipped
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return None
    seen: set[str] = set()
    out: list[tuple[str, bool]] = []
    for entry in entries:
        full = os.path.join(directory, entry)
        match = _MODULE_FILE.fullmatch(entry)
        name, is_pkg = (match.group(1), False) if match else (None, False)
        if name == "__init__" or (name is not None and name in seen):
            continue
        if name is None and os.path.isdir(full) and "." not in entry:
            try:
                inner = os.listdir(full)
            except OSError:
                continue
            if not any((m := _MODULE_FILE.fullmatch(f)) and m.group(1) == "__init__" for f in inner):
                continue
            name, is_pkg = entry, True
        if name and "." not in name:
            seen.add(name)
            out.append((name, is_pkg))
    return out


@functools.lru_cache(maxsize=8192)
def _find_module_file(root: Path, name: str) -> tuple[Path, bool] | None:
    # memoised: thousands of lookups per resolution, each 2-3 stat() calls; a located
    # source tree does not change while the tool runs
    base = root.joinpath(*name.split("."))
    init = base / "__init__.py"
    if init.is_file():
        return init, True
    py = base.with_suffix(".py")
    if py.is_file():
        return py, False
    if base.is_dir():  # namespace package
        return base, True
    return None


class Modules(InterpreterCore):
    """Finding, loading and reading the modules of the analysed tree."""

    def find_module_file(self, name: str) -> tuple[Path, bool] | None:
        return _find_module_file(self.root, name)

    def package_modules(self, directory: Any) -> list[tuple[str, bool]] | None:
        """The modules of a package directory of the analysed tree (a ``__path__`` entry), as
        pkgutil's file finder lists them: (name, is a package), sorted; None for a directory
        outside the tree (never read)."""
        if not isinstance(directory, str) or not _inside_tree(directory, str(self.root)):
            return None
        return _package_modules(directory)

    def load_module(self: Self, name: str) -> ModuleObj | External:
        for watch in self.import_watchers:
            watch(name)
        if name in self.modules:
            mod = self.modules[name]
            return mod
        native = self.natives.native_module(self, name)
        if native is not None:
            self.modules[name] = native
            return native
        top = name.split(".")[0]
        if top != self.natives.package_name:
            ext = External(name)
            self.modules[name] = ext
            return ext
        parent: ModuleObj | External | None = None
        if "." not in name and not self.top_init:
            found_top = self.find_module_file(name)
            if found_top is not None and found_top[1]:
                mod = ModuleObj(name, found_top[0].parent.relative_to(self.root).as_posix() + "/", True)
                mod.globals["__file__"] = str(found_top[0])
                mod.unrun = f"{mod.file}__init__.py is not evaluated (a kernel library's API module)"
                mod.loaded = True
                self.modules[name] = mod
                return mod
        if "." in name:
            # as in CPython, the parent package is fully imported first (its __init__ may
            # import this very module, e.g. `from .common import *`)
            parent = self.load_module(name.rsplit(".", 1)[0])
            if name in self.modules:
                return self.modules[name]
        found = self.find_module_file(name)
        if found is None:
            # a module the checkout does not have (e.g. a compiled extension)
            ext = External(name)
            self.modules[name] = ext
            return ext
        path, is_pkg = found
        rel = path.relative_to(self.root).as_posix() if path.is_file() else path.relative_to(self.root).as_posix() + "/"
        mod = ModuleObj(name, rel, is_pkg)
        mod.globals["__file__"] = str(path)
        if is_pkg:  # where its submodules are found (pkgutil.iter_modules walks it)
            mod.globals["__path__"] = [str(path.parent if path.is_file() else path)]
        self.modules[name] = mod
        if isinstance(parent, ModuleObj):
            parent.globals.setdefault(name.rsplit(".", 1)[1], mod)
        if path.is_file():
            self.run_module_body(mod, path)
        mod.loaded = True
        return mod

    def run_module_body(self, mod: ModuleObj, path: Path) -> None:
        if not _inside_tree(str(path), str(self.root)):
            # the tree is a boundary: a module linked out of it (into the user's home, say)
            # is never read; what depends on it is unknown
            self.parse_failures[mod.file] = f"{mod.file}: not read: its real path leaves the source tree"
            mod.failed = "its real path leaves the source tree"
            return
        try:
            tree = self.cache.load(path)
        except ParseFailure as exc:
            where = f"{mod.file}:{exc.line}" if exc.line else mod.file
            self.parse_failures[mod.file] = f"{where}: {exc.message}"
            mod.failed = exc.message
            return
        frame = Frame(module=mod)
        self.loading += 1
        try:
            self._run_body(mod, tree, frame)
        finally:
            self.loading -= 1

    def _run_body(self, mod: ModuleObj, tree: ir.Node, frame: Frame) -> None:
        self.run_module_statements(tree.body, frame)

    def run_module_statements(self, stmts: list[ir.Node], frame: Frame) -> None:
        """A module body's statements, or those of the branch a top-level ``if`` takes
        (``s_If``: ``if is_blackwell(): from flashinfer import ...; def f(...)``, 0.5.23
        fp8_utils.py:582), one by one."""
        mod = frame.module
        for stmt in stmts:
            try:
                self.exec_block([stmt], frame)
            except Unmodelled as exc:
                # one top-level statement the evaluator cannot follow (e.g. a loop over a
                # third-party object) does not sink the whole module (nor the rest of the
                # `if` block it is in): the names it would bind become unknown, the rest of
                # the module still loads
                reason = f"{mod.file}:{stmt.line} not evaluated ({exc})"
                self.notes.append(reason)
                for name in bound_names(stmt):
                    mod.globals[name] = Unknown(reason, f"unbound:{mod.name}.{name}")

    def module_attr(self, mod: ModuleObj, name: str) -> Any:
        if name in mod.globals:
            value = mod.globals[name]
            if isinstance(value, LazyImport):
                value = self.resolve_lazy(value)
                mod.globals[name] = value
            self.note_read(mod.events.get(name))
            return value
        getattr_hook = mod.globals.get("__getattr__")
        if isinstance(getattr_hook, Function) and not name.startswith("__"):
            # PEP 562 module __getattr__ (e.g. a lazily created current_platform)
            return self.call(getattr_hook, [name], {})
        if mod.is_package:
            sub = self.load_module(f"{mod.name}.{name}")
            if isinstance(sub, ModuleObj) or name not in ("__path__",):
                if isinstance(sub, ModuleObj) or not mod.failed:
                    if isinstance(sub, ModuleObj):
                        return sub
        if mod.failed:
            return Unknown(f"{mod.file} could not be parsed ({mod.failed})", f"parse:{mod.file}")
        if mod.unrun:
            return Unknown(f"{mod.name}.{name}: {mod.unrun}")
        raise self.make_raise("AttributeError", f"module '{mod.name}' has no attribute '{name}'")

    def resolve_lazy(self, lazy: LazyImport) -> Any:
        mod = self.load_module(lazy.module)
        if lazy.attr is None:
            return mod
        if isinstance(mod, External):
            try:
                return self.getattr(mod, lazy.attr)
            except PyRaise as raised:
                if not (isinstance(raised.exc, Instance) and raised.exc.cls.is_subclass_of(self.exc_classes["AttributeError"])):
                    raise
                # CPython's import_from: the module's __file__, or "unknown location"
                where = self.getattr(mod, "__file__")
                failed = self.make_raise("ImportError", f"cannot import name {lazy.attr!r} from {lazy.module!r} "
                                         f"({where if isinstance(where, str) else 'unknown location'})")
                failed.explicit = raised.explicit
                if lazy.line:
                    failed.site(lazy.file, lazy.line)
                raise failed from None
        if lazy.attr in mod.globals:
            if any(x is lazy for x in self.resolving):
                # the binding leads back to itself (`from m import y` in m, or a cycle of such
                # imports, and no module of it defines y): CPython raised at the innermost
                # import, the one that found its module partially initialized
                inner = self.resolving[-1]
                partial = self.load_module(inner.module)
                failed = self.make_raise("ImportError", f"cannot import name {inner.attr!r} from partially initialized module "
                                         f"{inner.module!r} (most likely due to a circular import) "
                                         f"({partial.file if isinstance(partial, ModuleObj) else 'unknown location'})")
                if inner.line:
                    failed.site(inner.file, inner.line)
                raise failed
            self.resolving.append(lazy)
            try:
                return self.module_attr(mod, lazy.attr)
            finally:
                self.resolving.pop()
        sub = self.load_module(f"{lazy.module}.{lazy.attr}")
        if isinstance(sub, ModuleObj):
            return sub
        if isinstance(mod.globals.get("__getattr__"), Function):
            return self.module_attr(mod, lazy.attr)
        if mod.failed:
            return Unknown(f"{mod.file} could not be parsed ({mod.failed})", f"parse:{mod.file}")
        if mod.unrun:
            return Unknown(f"{lazy.module}.{lazy.attr}: {mod.unrun}")
        return Unknown(f"{lazy.module}.{lazy.attr} not found in the source", f"missing:{lazy.module}.{lazy.attr}")

    def is_submodule(self, package: str, name: str) -> bool:
        if package.split(".")[0] != self.natives.package_name:
            return False
        found = self.find_module_file(package)
        return found is not None and found[1] and self.find_module_file(f"{package}.{name}") is not None

    def absolute_module(self, module: str, level: int, current: ModuleObj) -> str:
        return absolute_module(current.name, current.is_package, module, level)

