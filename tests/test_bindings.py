"""The one walker for the names a statement binds (frontend/bindings.py), as the evaluator,
the pipeline's layout check and the decision graph use it."""

from __future__ import annotations

from pathlib import Path

from sglang_audit.frontend.bindings import bound_names, flatten_targets
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.resolve.pipeline import _may_bind

SOURCE = """
import os.path
from m import a as b, c
x, (y, *z) = 1, (2, 3)
obj.attr, d[0] = 1, 2
n: int = 1
n += 1
def f(): pass
class K: pass
if cond:
    for i in range(3):
        w = i
    with open('p') as fh:
        v = 1
try:
    t = 1
except ValueError as err:
    u = 2
finally:
    s = 3
"""


def _body(tmp_path: Path, source: str) -> list:
    path = tmp_path / "m.py"
    path.write_text(source)
    return SourceCache(use_disk=False).load(path).body


def test_bound_names_of_every_binding_form(tmp_path: Path) -> None:
    names = [n for stmt in _body(tmp_path, SOURCE) for n in bound_names(stmt)]
    assert names == ["os", "b", "c", "x", "y", "z", "n", "n", "f", "K", "i", "w", "v", "t", "s", "u"]


def test_as_targets_adds_with_and_except_names(tmp_path: Path) -> None:
    names = {n for stmt in _body(tmp_path, SOURCE) for n in bound_names(stmt, as_targets=True)}
    assert {"fh", "err"} <= names


def test_flatten_targets_keeps_attribute_and_subscript_leaves(tmp_path: Path) -> None:
    assign = _body(tmp_path, SOURCE)[3]
    assert [t.kind for t in flatten_targets(assign.targets)] == ["Attribute", "Subscript"]


def test_layout_check_sees_a_class_behind_a_try_and_a_star_import(tmp_path: Path) -> None:
    assert _may_bind(_body(tmp_path, "try:\n    from x import ServerArgs\nexcept ImportError:\n    pass\n"), "ServerArgs")
    assert _may_bind(_body(tmp_path, "if True:\n    from x import *\n"), "ServerArgs")
    assert not _may_bind(_body(tmp_path, "class Other: pass\nServerArgsX = 1\n"), "ServerArgs")
