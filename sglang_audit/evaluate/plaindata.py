"""Plain data as the evaluator sees it: which values are plain Python data, whether they
hold an unknown, and their text (``stable_repr``: the same in every run)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sglang_audit.evaluate.values import Unknown

PLAIN_TYPES = (type(None), bool, int, float, complex, str, bytes, tuple, list, dict, set, frozenset, range)

SCALARS = (type(None), bool, int, float, complex)  # plain values that are neither containers nor iterable


def is_plain(value: Any) -> bool:
    return isinstance(value, PLAIN_TYPES)


CONTAINERS = (list, tuple, dict, set, frozenset)


def _hash_seeded(value: Any) -> bool:
    """Its hash, so its place in a set, depends on the process's hash seed (PYTHONHASHSEED)."""
    if isinstance(value, (str, bytes)):
        return True
    return isinstance(value, (tuple, frozenset)) and any(_hash_seeded(v) for v in value)


def stable_repr(value: Any, active: set[int] | None = None) -> str:
    """``repr`` of plain data, except that a set of strings lists them sorted: CPython's order
    there changes with every process's hash seed, so a message SGLang builds from a set
    (``f"Only {SUPPORTED} backends ..."``) would read differently on each run of the tool.
    Sorted is one order CPython may print; the text is the same every run."""
    t = type(value)
    if t not in CONTAINERS:
        return repr(value)
    active = active if active is not None else set()
    if id(value) in active:  # as CPython prints a container that holds itself
        return "[...]" if t is list else "{...}"
    active.add(id(value))
    try:
        if t is list:
            return "[" + ", ".join(stable_repr(v, active) for v in value) + "]"
        if t is tuple:
            inner = ", ".join(stable_repr(v, active) for v in value)
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        if t is dict:
            return "{" + ", ".join(f"{stable_repr(k, active)}: {stable_repr(v, active)}" for k, v in value.items()) + "}"
        if not value:
            return "set()" if t is set else "frozenset()"
        items = [stable_repr(v, active) for v in value]
        if any(_hash_seeded(v) for v in value):
            items.sort()
        body = "{" + ", ".join(items) + "}"
        return body if t is set else f"frozenset({body})"
    finally:
        active.discard(id(value))


def contains_unknown(value: Any, depth: int = 0) -> bool:
    if isinstance(value, Unknown):
        return True
    if depth > 3:
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(contains_unknown(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(contains_unknown(v, depth + 1) for v in value.values())
    return False


def first_unknown(values: Iterable[Any]) -> Unknown | None:
    for v in values:
        if isinstance(v, Unknown):
            return v
    return None


# an instance of a subclass of a builtin sequence keeps its items under this attribute name
# (not a Python identifier: SGLang's code cannot read or write it)
SEQUENCE_ITEMS = "<items>"

