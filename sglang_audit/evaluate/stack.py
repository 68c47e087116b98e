"""Deep evaluations on a frame stack that does not churn.

CPython (3.11+) keeps Python frames in chunks of 16 KiB: a call that does not fit in the
current chunk maps a new one, and its return unmaps it again.  The evaluator recurses
deeply and moves up and down across chunk ends all the time: one 0.5.23 ``explain`` made
~540,000 mmap/munmap pairs and 2 million page faults, a sixth of its CPU time (three times
that in a worker process, where the evaluation starts at another depth: where a chunk ends
is a matter of the caller's depth, and moved the count 6x between two call paths).

A new chunk is sized for the frame that opens it (16 KiB doubled until it fits).  Calling
the evaluation through a function whose frame is just over 8 MiB makes CPython map one
16 MiB chunk for that frame, and the whole evaluation then runs in the 8 MiB left after it
(its ~20,000 frames at most take a few MiB).  The frame's stack slots are never touched,
so only the pages the evaluation uses are faulted in, once per call.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

R = TypeVar("R")

_ROOM_SLOTS = (8 << 20) // 8 + 64  # stack slots (8 bytes) of the opening frame: just over 8 MiB


def _in_big_frame(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


try:
    # a deeper value stack than the body needs is never used, only reserved
    _in_big_frame.__code__ = _in_big_frame.__code__.replace(co_stacksize=_ROOM_SLOTS)
except (AttributeError, TypeError, ValueError):  # another Python: a plain call
    pass


def deep_call(fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)``, with room for a deep recursion in one frame chunk."""
    result: R = _in_big_frame(fn, *args)
    return result


# The evaluator recurses on the analysed code: every evaluation (a resolver path, the flag
# table, a command line read, the entry snapshot) runs with this limit, so one does not
# fail where another would not.
EVAL_RECURSION_LIMIT = 20_000


@contextmanager
def recursion_room(limit: int = EVAL_RECURSION_LIMIT) -> Iterator[None]:
    """The interpreter's recursion limit raised to at least ``limit`` while the block runs."""
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old_limit)
