"""evaluate/stack.py: deep evaluations run through a frame big enough that CPython opens
one large frame chunk for them (no map/unmap of 16 KiB chunks while the recursion moves)."""

from __future__ import annotations

import platform
import sys

import pytest

from sglang_audit.evaluate import stack
from sglang_audit.evaluate.stack import deep_call


def _depth(n: int) -> int:
    return 0 if n == 0 else 1 + _depth(n - 1)


def test_deep_call_returns_and_raises_as_the_call_itself():
    assert deep_call(divmod, 7, 2) == (3, 1)
    with pytest.raises(ZeroDivisionError):
        deep_call(divmod, 1, 0)


def test_a_deep_recursion_runs_inside_it():
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20_000))
    try:
        assert deep_call(_depth, 15_000) == 15_000
    finally:
        sys.setrecursionlimit(old)


@pytest.mark.skipif(platform.python_implementation() != "CPython", reason="CPython's frame chunks")
def test_the_opening_frame_is_just_over_8_mib():
    slots = stack._in_big_frame.__code__.co_stacksize
    assert slots * 8 > 8 << 20 and slots * 8 < (8 << 20) + 4096
